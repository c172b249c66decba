#pragma once
// The scanner walks a box's directory trees into a Manifest (README.md §Scanning). It never
// follows a symlink (it records the link), skips sockets, FIFOs and devices with a note, and,
// given the previous snapshot's manifest, re-reads only the regular files whose stat changed
// (size, mtime, ctime or inode differ, or the file was modified within racy_window_ns of the
// previous scan's start, when an equal mtime proves nothing). An unchanged file keeps its
// previous chunk list without being opened. Every chunk of every file it reads goes to a
// ChunkSink as soon as it is hashed (a large file's a buffer at a time, a group of small
// files' together), so a save stores chunks while it scans.
//
// Thread-safety: scan_tree() is reentrant. The walk runs on the calling thread; regular files
// are read, chunked and hashed there too, or with ScanOptions::read_threads > 1 on that many
// threads of the scan's own, several files at once, and the ChunkSink is called from them.

#include "base/result.h"
#include "state/chunker.h"
#include "state/keys.h"
#include "state/manifest.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cb::state {

// A directory to save and the manifest path it is saved as: {"/home/user", "home/user"}.
struct ScanRoot {
  std::string dir;   // a directory on this machine (followed if it is itself a symlink)
  std::string name;  // a manifest path (validate_path)
};

// Names the scanner always leaves out: temporary folders of restores (restore.h).
inline constexpr char kRestoreTempPrefix[] = ".cb-restore-";

struct ScanOptions {
  std::vector<ScanRoot> roots;  // none may lie within another (by name)
  // fnmatch(3) patterns (no flags: '*' also matches '/') over manifest paths; an entry that
  // matches is left out with its whole subtree. Example: "home/user/.cache".
  std::vector<std::string> exclude;
  ChunkerParams chunker = kDefaultChunkerParams;
  // A file whose mtime is later than (previous scan start - racy_window_ns) is re-read even
  // if its stat is unchanged: file systems stamp mtimes with a coarse clock, so a write in
  // the same tick as the previous scan's read leaves the stat equal.
  int64_t racy_window_ns = 2'000'000'000;
  // Threads reading files at once (1: the calling thread reads), each a file, or up to 8
  // files under the largest chunk's size, at a time. More than one needs a ChunkSink whose
  // add() may run on several threads at once. Hashing is serial
  // within a file, and on the walking thread it left the sealing threads idle while it
  // hashed incompressible data (save_snapshot() sets this from SaveOptions::read_threads).
  int read_threads = 1;
};

class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // One chunk of a file being read; |plaintext| is valid only during the call. An error
  // stops the scan and is returned by scan_tree(). Called on several threads at once when
  // ScanOptions::read_threads > 1, then also for chunks of one file, in any order (a thread
  // with no file of its own takes chunks of another's buffer).
  virtual Status add(const ChunkId& id, std::span<const uint8_t> plaintext) = 0;
};

struct ScanStats {
  uint64_t files_read = 0;  // regular files opened and chunked (new or changed)
  uint64_t bytes_read = 0;
  uint64_t files_reused = 0;  // regular files whose chunk list came from the previous manifest
  uint64_t skipped = 0;       // special files, unreadable or vanished entries, too long paths
};

struct ScanResult {
  Manifest manifest;
  ScanStats stats;
  std::vector<std::string> notes;  // one line per skipped entry (capped at 1000 lines)
};

// Scans options.roots into a manifest, reusing |previous| (nullptr for none) for unchanged
// files and passing every chunk read to |sink|.
// Errors: kInvalidArgument for bad options (a bad root name, overlapping roots, bad chunker
//   params); kNotFound / kPermissionDenied if a root cannot be opened as a directory; the
//   sink's first error; kInternal for read errors other than vanished or unreadable files
//   (those are skipped with a note).
Result<ScanResult> scan_tree(const ScanOptions& options, const Manifest* previous,
                             const StateKeys& keys, ChunkSink& sink);

}  // namespace cb::state
