#include "roles/agent/box_key.h"

#include "base/base64.h"
#include "base/log.h"
#include "crypto/bytes.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace cb::agent {
namespace {

Status io_error(std::string_view what, const std::filesystem::path& path, int err) {
  return internal_error(fmt::format("{} {}: {}", what, path.string(), std::strerror(err)));
}

// Reads box.key (a few bytes; anything above 64 is already wrong).
Result<std::string> read_key_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return io_error("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("stat", path, err);
  }
  if ((st.st_mode & 077) != 0) {
    log::warn("box key was readable by others; tightened to 0600",
              {{"path", path.string()}, {"mode", fmt::format("{:o}", st.st_mode & 07777)}});
    if (::fchmod(fd, 0600) != 0) {
      const int err = errno;
      ::close(fd);
      return io_error("chmod", path, err);
    }
  }
  std::string out(65, '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      crypto::wipe(out);
      return io_error("read", path, err);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Status write_all(int fd, std::string_view data, const std::filesystem::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("write", path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return ok_status();
}

Status fsync_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("open", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("fsync", dir, err);
  return ok_status();
}

// Writes |secret| to a fresh temporary file and links it as |path|. Returns false (and no
// error) when |path| already exists: someone else created it first.
Result<bool> create_key_file(const std::filesystem::path& path, std::string_view secret) {
  const std::filesystem::path tmp =
      path.string() + fmt::format(".tmp.{}", static_cast<long>(::getpid()));
  ::unlink(tmp.c_str());  // a leftover of a crash of a process with our pid
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return io_error("create", tmp, errno);
  Status st = write_all(fd, secret, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = io_error("fsync", tmp, errno);
  ::close(fd);
  bool created = false;
  if (st.ok()) {
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      st = io_error("link", path, errno);
    }
  }
  ::unlink(tmp.c_str());
  if (!st.ok()) return st;
  if (created) RETURN_IF_ERROR(fsync_dir(path.parent_path()));
  return created;
}

Result<crypto::X25519KeyPair> load(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(std::string secret, read_key_file(path));
  auto pair = crypto::X25519KeyPair::from_secret(secret);
  const size_t size = secret.size();
  crypto::wipe(secret);
  if (!pair.ok()) {
    return data_loss(
        fmt::format("{} is not a box key ({} bytes, want {}); move it away to make "
                    "a new one, which changes the box's public key",
                    path.string(), size > 64 ? std::string("over 64") : std::to_string(size),
                    crypto::kX25519KeySize));
  }
  return pair;
}

}  // namespace

Result<crypto::X25519KeyPair> load_or_create_box_key(const std::filesystem::path& data_dir,
                                                     crypto::Random& random) {
  const std::filesystem::path path = data_dir / kBoxKeyFile;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return load(path);
  if (errno != ENOENT) return io_error("stat", path, errno);

  crypto::X25519KeyPair pair = crypto::X25519KeyPair::generate(random);
  std::string secret = pair.secret();
  auto created = create_key_file(path, secret);
  crypto::wipe(secret);
  if (!created.ok()) return created.status();
  if (!*created) return load(path);
  log::info("box key created",
            {{"path", path.string()},
             {"public_key", base64url_encode(crypto::char_view(pair.public_key()))}});
  return pair;
}

}  // namespace cb::agent
