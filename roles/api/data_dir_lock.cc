#include "roles/api/data_dir_lock.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace cb::api {

namespace {

std::filesystem::path lock_path(const std::filesystem::path& data_dir) {
  return data_dir / "api.lock";
}

struct flock whole_file(short type) {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // to the end, however long
  return fl;
}

}  // namespace

Result<DataDirLock> DataDirLock::acquire(const std::filesystem::path& data_dir) {
  const auto path = lock_path(data_dir);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return unavailable(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  struct flock fl = whole_file(F_WRLCK);
  if (::fcntl(fd, F_SETLK, &fl) != 0) {
    const int err = errno;
    struct flock probe = whole_file(F_WRLCK);
    pid_t pid = 0;
    if (::fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK) pid = probe.l_pid;
    ::close(fd);
    if (err == EACCES || err == EAGAIN) {
      return failed_precondition(fmt::format(
          "another process (pid {}) holds {}: a cocoonbox api is running on {}; stop it first", pid,
          path.string(), data_dir.string()));
    }
    return unavailable(fmt::format("lock {}: {}", path.string(), std::strerror(err)));
  }
  // The pid, for people; the lock itself is what counts.
  std::string text = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    // Not fatal: the lock is held.
  }
  return DataDirLock(fd);
}

DataDirLock::DataDirLock(DataDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DataDirLock& DataDirLock::operator=(DataDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DataDirLock::~DataDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace cb::api
