#pragma once
// FsStore: a Store in a local directory, the default backend (architecture §6: the api's
// <data-dir>/store/). An object's key is its path under the root, so the fan-out of the key
// layout (chunks/<2 hex>/<id>) is the fan-out of the directories. README.md §Filesystem store.
//
//   put     write <dir>/.tmp-<pid>-<n> (O_EXCL), fsync it, rename over <dir>/<name>, fsync
//           <dir> (and every directory put created, with its parent), so an object is either
//           absent, the old one or all of the new one, also after a power loss
//   put_deferred  write the temporary without fsync and remember it; sync() then makes
//           every one remembered before it durable with one syncfs(2), renames them into place
//           and syncfs's again: a chunk's name never points at bytes that are not on disk,
//           and a crash before sync() leaves only temporaries (remove_temporaries())
//   get     read the file; stat: its size
//   list    a sorted walk that skips subtrees before start_after and stops at the limit
//   delete  unlink; missing files are fine; directories stay
//
// Files and directories are created 0600 / 0700. Names starting with '.' are never keys
// (validate_key), so temporaries never show in list(); a crash can leave one behind, and
// remove_temporaries() deletes them (call it at start, before any put).
//
// Thread-safety: all methods may run on several threads and in several processes at once
// over one root; puts to one key race like S3's (last rename wins, each whole).

#include "state/store.h"

#include <atomic>
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
  Result<std::string> get(std::string_view key) override;
  Result<uint64_t> stat(std::string_view key) override;
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit = kDefaultListLimit) override;
  Status delete_batch(std::span<const std::string> keys) override;

  // Deletes leftover temporaries of puts interrupted by a crash; returns how many.
  Result<size_t> remove_temporaries();

  const std::filesystem::path& root() const { return root_; }

 private:
  FsStore(std::filesystem::path root, Options options)
      : root_(std::move(root)), options_(options), pid_(std::to_string(::getpid())) {}

 public:
  ~FsStore() override;  // deletes the temporaries of deferred puts never synced

 private:
  // Creates the missing parents of |key| (recorded in |created|), writes |data| to a fresh
  // temporary in its directory, closes it (fsync first if |fsync_file|); sets |temp|, |path|.
  Status write_temp(std::string_view key, std::string_view data, bool fsync_file,
                    std::vector<std::string>& created, std::string& temp, std::string& path);

  struct Deferred {
    std::string temp;
    std::string path;
  };

  std::filesystem::path root_;
  Options options_;
  std::string pid_;  // of the process that opened the store: temporaries' names
  std::atomic<uint64_t> temp_counter_{0};
  std::mutex mu_;
  std::vector<Deferred> deferred_;  // guarded by mu_
};

}  // namespace cb::state
