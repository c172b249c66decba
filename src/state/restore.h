#pragma once
// Restore: materialize a manifest, whole or a scope of paths, into a directory (README.md
// §Restoring; product design §25.4). Everything is written into a fresh temporary folder next
// to the target, <parent>/.cb-restore-<random>/, which is renamed to the target at the end,
// so a failed restore leaves at most that leftover (the scanner never saves it) and never a
// half-written target.
//
// Safety:
//   - Manifest and scope paths are checked (validate_path: relative, no "..", no "."), and a
//     manifest whose entry sits below a non-directory entry does not open.
//   - Every file and directory is created relative to its parent's descriptor, opened with
//     O_NOFOLLOW and O_EXCL, so nothing is ever written through a symlink, including one the
//     manifest itself restores (symlinks are created last, as data, never followed).
//   - Each chunk is opened (chunk.h) before its bytes are written: a tampered chunk fails the
//     restore with kDataLoss naming the file and chunk; a missing one the same way. No file
//     is ever written with bytes its chunk ids do not name. Files are created in manifest
//     order on the calling thread; their chunks are fetched, opened and written on
//     RestoreOptions::fetch_threads threads; the errors are the same ones, reported for the
//     first chunk in manifest order that fails.
//
// Thread-safety: reentrant; give concurrent restores distinct targets.

#include "base/result.h"
#include "crypto/random.h"
#include "state/keys.h"
#include "state/manifest.h"
#include "state/store.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cb::state {

struct RestoreOptions {
  // The scope: entries within any of these manifest paths. Empty restores every entry.
  std::vector<std::string> paths;
  // A manifest path removed from the front of each restored path: with strip = "home/user",
  // "home/user/a.txt" lands at <target>/a.txt and only entries within it are restored.
  // "" keeps the full path: "workspace/app/x" lands at <target>/workspace/app/x.
  std::string strip;
  // The directory to create (absolute). Its parent must exist. Unless replace is set, the
  // target must not exist.
  std::string target;
  // Swap the restored tree in for an existing target (renameat2 RENAME_EXCHANGE), then
  // delete the old tree. For restoring a whole root in place.
  bool replace = false;
  // Restore owners (uid/gid, by name where the name exists here) when running as root;
  // otherwise files belong to the caller. Modes, mtimes and symlinks are always restored.
  bool restore_owners = true;
  // When set and running as root, every restored entry (and every folder the restore
  // creates) belongs to this uid and gid instead, whatever restore_owners says: the user's
  // own files brought back by an agent that is root and not the user (seed §3's privilege
  // split: the tools run as the desktop user, who must own them).
  std::optional<std::pair<uint32_t, uint32_t>> owner;
  // Called after each file (the agent's TransferProgress), from the thread that finished it,
  // one call at a time with growing counts. May be empty.
  std::function<void(uint64_t files_done, uint64_t bytes_done)> progress;
  // Threads that fetch, open (decrypt, decompress, verify) and write the files' chunks, in
  // tasks of 16 chunks (one Store::get_many() each, spanning small files), at most
  // 4 * fetch_threads tasks queued; the calling thread creates the files in manifest order.
  // 1 does everything on the calling thread.
  // docs/benchmarks.md "state: save and restore against restic".
  int fetch_threads = 4;
};

struct RestoreResult {
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t bytes = 0;
  uint64_t chunks_fetched = 0;
};

// Restores |manifest| from |store| (chunks under |user|'s prefix) as |options| says.
// Errors: kInvalidArgument for a bad scope path, strip path or target (relative, or its
//   parent missing); kAlreadyExists if the target exists and replace is unset; kNotFound if
//   the scope selects nothing; kDataLoss "file <path>: chunk <id>: ..." for a missing or
//   tampered chunk; kInternal / kPermissionDenied / kResourceExhausted for file system
//   errors. On error the temporary folder is removed and the target is untouched.
Result<RestoreResult> restore_snapshot(Store& store, const StateKeys& keys, std::string_view user,
                                       const Manifest& manifest, const RestoreOptions& options,
                                       crypto::Random& random);

}  // namespace cb::state
