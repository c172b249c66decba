#pragma once
// UserLock: the per-user state lock of product design §25.3. Every save of any of a user's
// boxes holds it *shared* from its start (before it reads the head or asks which chunks the
// store has) to its commit (the head written, or the save failed); the chunk sweep
// (sweep.h) holds it *exclusively* while it re-marks and deletes. So no save is between
// "this chunk is stored, skip it" and its commit while the sweep decides what is garbage, and
// no delete of the sweep can land after a save re-uploaded a chunk of the garbage set.
//
// Restores and browses need no lock: they read only snapshots the timeline names, and the
// sweep deletes only chunks no such snapshot references.
//
// The api owns the one instance (one per process; several api replicas would need a lock in
// a shared database first, as §25.3 says). Everything that locks runs on blocking-pool
// threads (house style H10), so the calls block; an implementation may fail instead (a
// database lock that times out), hence Status.
//
// Thread-safety: implementations must be thread-safe, and a lock may be released from
// another thread than the one that took it (a coroutine may resume elsewhere).

#include "base/result.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace cb::state {

class UserLock {
 public:
  virtual ~UserLock() = default;

  // Blocks until |user|'s lock is held shared (by a save) / exclusively (by the sweep).
  // Errors: implementation-defined (kUnavailable, kDeadlineExceeded); the lock is not held.
  virtual Status lock_shared(std::string_view user) = 0;
  virtual Status lock(std::string_view user) = 0;

  // REQUIRES: the matching lock call succeeded and was not yet released.
  virtual void unlock_shared(std::string_view user) = 0;
  virtual void unlock(std::string_view user) = 0;
};

// Holds |user|'s lock, shared or exclusive, until destroyed or release()d. Move-only.
class UserLockGuard {
 public:
  enum class Mode { kShared, kExclusive };

  // Errors: those of the lock call.
  static Result<UserLockGuard> acquire(UserLock& lock, std::string user, Mode mode);

  UserLockGuard(UserLockGuard&& other) noexcept;
  UserLockGuard& operator=(UserLockGuard&& other) noexcept;
  UserLockGuard(const UserLockGuard&) = delete;
  UserLockGuard& operator=(const UserLockGuard&) = delete;
  ~UserLockGuard() { release(); }

  void release();

 private:
  UserLockGuard(UserLock* lock, std::string user, Mode mode)
      : lock_(lock), user_(std::move(user)), mode_(mode) {}

  UserLock* lock_ = nullptr;  // null once released or moved from
  std::string user_;
  Mode mode_ = Mode::kShared;
};

// The in-process lock: one readers-writer lock per user, created on first use. A waiting
// exclusive locker blocks new shared lockers (a steady stream of saves cannot starve the
// sweep). Never fails.
class InProcessUserLock final : public UserLock {
 public:
  Status lock_shared(std::string_view user) override;
  Status lock(std::string_view user) override;
  void unlock_shared(std::string_view user) override;
  void unlock(std::string_view user) override;

  // For tests: blocks until at least |n| exclusive lockers of |user| are waiting, so a test
  // can order "the sweep is waiting for the lock" before its next step without sleeping.
  void wait_for_exclusive_waiters(std::string_view user, int n);

 private:
  struct PerUser {
    int readers = 0;
    bool writer = false;
    int writers_waiting = 0;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, PerUser, std::less<>> users_;  // guarded by mu_
};

}  // namespace cb::state
