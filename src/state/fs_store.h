#pragma once
// FsStore: a Store in a local directory, the default backend (architecture §6: the api's
// <data-dir>/store/). An object's key is its path under the root, so the fan-out of the key
// layout (chunks/<2 hex>/<id>) is the fan-out of the directories. README.md §Filesystem store.
//
//   put     write <root>/.tmp-<pid>-<store>/<n % 16>/<n> (O_EXCL), fsync it, rename over
//           <dir>/<name> (creating <dir> and its missing parents), fsync <dir> (and every
//           directory put created, with its parent), so an object is either absent, the old
//           one or all of the new one, also after a power loss
//   put_deferred  write the temporary without fsync and remember it; sync() then makes
//           every one remembered before it durable with one syncfs(2), renames them into place
//           and syncfs's again: a chunk's name never points at bytes that are not on disk,
//           and a crash before sync() leaves only temporaries (remove_temporaries()) and
//           whole objects no snapshot names yet. Once Options::flush_bytes wait, the put
//           that adds the last of them does the first syncfs and the renames itself, so a
//           big save's writeback overlaps its other puts instead of all waiting for sync(); the
//           temporaries' folder is removed once empty, so the thousands of names a save
//           held there cost no space after it (in the object folders they would, as ext4
//           never shrinks a directory)
//   get     read the file; stat: its size
//   list    a sorted walk that skips subtrees before start_after and stops at the limit
//   delete  unlink; missing files are fine; directories stay
//
// Files and directories are created 0600 / 0700. Names starting with '.' are never keys
// (validate_key), so temporaries never show in list(); a crash can leave some behind, and
// remove_temporaries() deletes them (call it at start, before any put).
//
// Thread-safety: all methods may run on several threads and in several processes at once
// over one root; puts to one key race like S3's (last rename wins, each whole).

#include "state/store.h"

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace cb::state {

class FsStore final : public Store {
 public:
  struct Options {
    // fsync files and directories on put. Off only for throwaway stores (benchmarks that
    // measure the rest); durability and the commit order depend on it.
    bool sync = true;
    // Deferred bytes that make the next put_deferred() publish them (syncfs and renames)
    // instead of waiting for sync(). A first save of scripts/bench state's tree (750 MB
    // written) took 3.9-4.1 s with 64 MiB, 4.3-4.7 s with everything left to sync()
    // (three interleaved runs each, page cache emptied before each, 2026-12-01).
    size_t flush_bytes = 64u << 20;
  };

  // A store rooted at |root|, created (0700, with parents) if missing.
  // Errors: kInternal / kPermissionDenied if it cannot be created or is not a directory.
  static Result<std::unique_ptr<FsStore>> open(const std::filesystem::path& root, Options options);
  static Result<std::unique_ptr<FsStore>> open(const std::filesystem::path& root) {
    return open(root, Options());
  }

  Status put(std::string_view key, std::string_view data) override;
  Status put_deferred(std::string_view key, std::string_view data) override;
  Status sync() override;
  // The cores plus two (at least 3, at most 8): a first save of scripts/bench state's tree on
  // 2 cores took 3.9-4.1 s with 3 or 4 put threads, 4.4-4.6 s with 8 (interleaved runs).
  int put_concurrency() const override;
  Result<std::string> get(std::string_view key) override;
  Result<uint64_t> stat(std::string_view key) override;
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit = kDefaultListLimit) override;
  Status delete_batch(std::span<const std::string> keys) override;

  // Deletes leftover temporaries of puts interrupted by a crash; returns how many.
  Result<size_t> remove_temporaries();

  const std::filesystem::path& root() const { return root_; }

 private:
  FsStore(std::filesystem::path root, Options options);

 public:
  ~FsStore() override;  // deletes the temporaries of deferred puts never synced

 private:
  // Writes |data| to a fresh temporary in temp_dir_ (created if missing) and closes it (fsync
  // first if |fsync_file|); sets |temp| and |path|, the object's file.
  Status write_temp(std::string_view key, std::string_view data, bool fsync_file, std::string& temp,
                    std::string& path);
  // Renames |temp| to |path|, creating |path|'s missing parents (recorded in |created|).
  Status rename_into_place(const std::string& temp, const std::string& path,
                           std::vector<std::string>& created);

  struct Deferred {
    std::string temp;
    std::string path;
  };
  // Moves the waiting puts into |batch| and counts one more publish under way. REQUIRES: mu_.
  void take_deferred(std::vector<Deferred>& batch);
  // syncfs, then renames |batch| into place; on an error deletes the temporaries not renamed.
  Status publish(std::vector<Deferred>& batch);
  // Counts the publish take_deferred() counted as ended and wakes a waiting sync().
  void end_publish();
  Status syncfs_root() const;  // syncfs(2) of the file system holding root_

  std::filesystem::path root_;
  Options options_;
  // <root>/.tmp-<pid>-<n>: this store's temporaries, one folder per FsStore of a process, in
  // kTempFanOut buckets: with every temporary of a save in one folder, the put threads'
  // creates queued on that folder's lock (perf: 5.7 % of a first save in rwsem_spin_on_owner).
  static constexpr uint64_t kTempFanOut = 16;
  std::string temp_bucket(uint64_t n) const;  // temp_dir_/<hex digit of n % kTempFanOut>
  void remove_temp_dir();                     // the buckets and the folder, when empty
  std::string temp_dir_;
  std::atomic<uint64_t> temp_counter_{0};
  std::mutex mu_;
  std::condition_variable idle_cv_;  // busy_ fell to 0
  // Guarded by mu_:
  std::vector<Deferred> deferred_;  // written, not yet published
  size_t deferred_bytes_ = 0;
  int busy_ = 0;                   // publishes under way (a flush, or a sync(): then alone)
  bool renamed_unsynced_ = false;  // renames done since the last syncfs after renames
};

}  // namespace cb::state
