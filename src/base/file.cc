#include "base/file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace cb {

namespace fs = std::filesystem;

Status write_file_atomic(fs::path path, std::string_view data, const AtomicWriteOptions& options) {
  std::error_code ec;
  if (options.follow_symlink && fs::is_symlink(fs::symlink_status(path, ec))) {
    fs::path target = fs::weakly_canonical(path, ec);
    if (!ec) path = target;
  }
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (options.create_parents) {
    fs::create_directories(dir, ec);
    if (ec) return failed_precondition(fmt::format("creating {}: {}", dir.string(), ec.message()));
  }
  mode_t mode = 0644;
  struct stat old {};
  const bool existed = ::stat(path.c_str(), &old) == 0;
  if (existed && S_ISDIR(old.st_mode))
    return failed_precondition(fmt::format("{} is a directory", path.string()));
  if (options.mode) {
    mode = *options.mode;
  } else if (existed) {
    mode = old.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode &= ~mask;
  }
  std::string tmp = (dir / ("." + path.filename().string() + ".tmp.XXXXXX")).string();
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return failed_precondition(fmt::format("{}: {}", dir.string(), std::strerror(errno)));
  auto fail = [&](std::string_view what) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return failed_precondition(fmt::format("{} {}: {}", what, path.string(), std::strerror(e)));
  };
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("writing");
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, mode) != 0) return fail("setting the mode of");
  if (::fsync(fd) != 0) return fail("syncing");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("renaming into");
  if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    (void)::fsync(d);
    ::close(d);
  }
  return ok_status();
}

}  // namespace cb
