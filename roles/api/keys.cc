#include "roles/api/keys.h"

#include "crypto/bytes.h"
#include "crypto/hash.h"
#include "crypto/random.h"
#include "crypto/sealed.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace cb::api {

namespace {

constexpr std::string_view kEdgeKeyAd = "cocoonbox edge signing key v1";

Result<std::string> read_secret_file(const std::filesystem::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return unavailable(fmt::format("{}: {}", path.string(), std::strerror(errno)));
  if ((st.st_mode & 077) != 0)
    return failed_precondition(
        fmt::format("{} is readable by group or others (mode {:o}); chmod 600 it", path.string(),
                    st.st_mode & 0777));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return unavailable(fmt::format("{}: read failed", path.string()));
  return ss.str();
}

}  // namespace

Status write_file_atomic(const std::filesystem::path& path, std::string_view data, int mode) {
  std::string tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return unavailable(fmt::format("{}: {}", tmp, std::strerror(errno)));
  ::fchmod(fd, static_cast<mode_t>(mode));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return unavailable(fmt::format("{}: {}", tmp, std::strerror(e)));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return unavailable(fmt::format("{}: fsync: {}", tmp, std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return unavailable(fmt::format("rename {}: {}", path.string(), std::strerror(errno)));
  return ok_status();
}

Result<crypto::SymmetricKey> load_or_create_master_key(const std::filesystem::path& dir) {
  auto path = dir / "master.key";
  if (!std::filesystem::exists(path)) {
    auto key = crypto::SymmetricKey::generate(crypto::system_random());
    RETURN_IF_ERROR(write_file_atomic(path, crypto::char_view(key.bytes()), 0600));
  }
  ASSIGN_OR_RETURN(std::string bytes, read_secret_file(path));
  auto key = crypto::SymmetricKey::from_bytes(bytes);
  crypto::wipe(bytes);
  if (!key.ok()) return failed_precondition(fmt::format("{}: not a 32-byte key", path.string()));
  return std::move(*key);
}

Result<EdgeKey> load_or_create_edge_key(const std::filesystem::path& dir,
                                        const crypto::SymmetricKey& master) {
  auto path = dir / "edge-key.sealed";
  if (!std::filesystem::exists(path)) {
    auto key = crypto::SigningKey::generate(crypto::system_random());
    std::string seed = key.seed();
    std::string sealed = crypto::seal(master.bytes(), seed, kEdgeKeyAd, crypto::system_random());
    crypto::wipe(seed);
    RETURN_IF_ERROR(write_file_atomic(path, sealed, 0600));
  }
  ASSIGN_OR_RETURN(std::string sealed, read_secret_file(path));
  auto seed = crypto::open(master.bytes(), sealed, kEdgeKeyAd);
  if (!seed.ok())
    return data_loss(fmt::format("{} does not open under master.key: {}", path.string(),
                                 seed.status().message()));
  auto key = crypto::SigningKey::from_seed(*seed);
  crypto::wipe(*seed);
  if (!key.ok()) return data_loss(fmt::format("{}: bad key", path.string()));
  auto pub = key->public_key();
  std::string id =
      "k" +
      crypto::hex_encode(crypto::char_view(crypto::sha256(crypto::char_view(pub)))).substr(0, 12);
  return EdgeKey{std::move(*key), std::move(id)};
}

}  // namespace cb::api
