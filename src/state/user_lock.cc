#include "state/user_lock.h"

#include "base/check.h"

#include <utility>

namespace cb::state {

Result<UserLockGuard> UserLockGuard::acquire(UserLock& lock, std::string user, Mode mode) {
  RETURN_IF_ERROR(mode == Mode::kShared ? lock.lock_shared(user) : lock.lock(user));
  return UserLockGuard(&lock, std::move(user), mode);
}

UserLockGuard::UserLockGuard(UserLockGuard&& other) noexcept
    : lock_(std::exchange(other.lock_, nullptr)),
      user_(std::move(other.user_)),
      mode_(other.mode_) {}

UserLockGuard& UserLockGuard::operator=(UserLockGuard&& other) noexcept {
  if (this != &other) {
    release();
    lock_ = std::exchange(other.lock_, nullptr);
    user_ = std::move(other.user_);
    mode_ = other.mode_;
  }
  return *this;
}

void UserLockGuard::release() {
  if (lock_ == nullptr) return;
  if (mode_ == Mode::kShared) {
    lock_->unlock_shared(user_);
  } else {
    lock_->unlock(user_);
  }
  lock_ = nullptr;
}

Status InProcessUserLock::lock_shared(std::string_view user) {
  std::unique_lock lock(mu_);
  auto it = users_.try_emplace(std::string(user)).first;
  PerUser& u = it->second;
  cv_.wait(lock, [&] { return !u.writer && u.writers_waiting == 0; });
  ++u.readers;
  return ok_status();
}

Status InProcessUserLock::lock(std::string_view user) {
  std::unique_lock lock(mu_);
  auto it = users_.try_emplace(std::string(user)).first;
  PerUser& u = it->second;
  ++u.writers_waiting;
  cv_.notify_all();  // for wait_for_exclusive_waiters()
  cv_.wait(lock, [&] { return !u.writer && u.readers == 0; });
  --u.writers_waiting;
  u.writer = true;
  return ok_status();
}

void InProcessUserLock::unlock_shared(std::string_view user) {
  std::lock_guard lock(mu_);
  auto it = users_.find(user);
  CB_CHECK(it != users_.end() && it->second.readers > 0);
  --it->second.readers;
  cv_.notify_all();
}

void InProcessUserLock::unlock(std::string_view user) {
  std::lock_guard lock(mu_);
  auto it = users_.find(user);
  CB_CHECK(it != users_.end() && it->second.writer);
  it->second.writer = false;
  cv_.notify_all();
}

void InProcessUserLock::wait_for_exclusive_waiters(std::string_view user, int n) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    auto it = users_.find(user);
    return it != users_.end() && it->second.writers_waiting >= n;
  });
}

}  // namespace cb::state
