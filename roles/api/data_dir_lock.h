#pragma once
// DataDirLock: one process at a time owns an api data dir: a running `cocoonbox api`, or
// `cocoonbox api state prune` (which changes the store behind the api's locks, so it must not
// run beside one). Two apis on one data dir would also fight over boxes and the store.
//
//   <data-dir>/api.lock   a POSIX record lock (fcntl F_SETLK, whole file, write) held for the
//                         life of the process; the file holds the owner's pid for people.
//
// A record lock, not flock(): it belongs to the process, is not inherited by fork() (box
// machines are forked from the api and outlive it by design) and goes away when the process
// dies, kill -9 included, so a crash never leaves a stale lock. Quick admin commands (user,
// token, usage) do not take it: they only touch api.db, which SQLite serializes.
//
// Affinity: any thread; the process must not open and close api.lock elsewhere (closing any
// descriptor of the file drops a record lock). Move-only.

#include "base/result.h"

#include <filesystem>
#include <string_view>

namespace cb::api {

class DataDirLock {
 public:
  // Takes the lock on <data_dir>/api.lock (created 0600) without waiting.
  // Errors: kFailedPrecondition naming the holder's pid when another process holds it, e.g.
  //   "another process (pid 123) holds <data-dir>/api.lock: a cocoonbox api is running on
  //   <data-dir>; stop it first"; kUnavailable for I/O errors.
  static Result<DataDirLock> acquire(const std::filesystem::path& data_dir);

  DataDirLock(DataDirLock&& other) noexcept;
  DataDirLock& operator=(DataDirLock&& other) noexcept;
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;
  ~DataDirLock();

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace cb::api
