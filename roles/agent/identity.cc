#include "roles/agent/identity.h"

#include "base/log.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cb::agent {
namespace {

int64_t to_ns(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t real_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads at most |limit| + 1 bytes of |path|, so an oversized file is recognisable.
Result<std::string> read_small_file(const std::string& path, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return unavailable(
        fmt::format("identity file {} is unreadable: {}", path, std::strerror(errno)));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return unavailable(
          fmt::format("identity file {} is unreadable: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      ::close(fd);
      return unavailable(fmt::format("identity file {} is larger than {} bytes", path, limit));
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

IdentityStore::IdentityStore(std::string path, const Clock& clock)
    : path_(std::move(path)), clock_(clock) {}

Result<const crypto::CredentialVerifier*> IdentityStore::current() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    key_.reset();
    content_.reset();
    if (err == ENOENT || err == ENOTDIR) {
      return fail(unavailable(fmt::format("identity not delivered yet: {} does not exist", path_)));
    }
    return fail(
        unavailable(fmt::format("identity file {} is unreadable: {}", path_, std::strerror(err))));
  }
  if (!S_ISREG(st.st_mode)) {
    key_.reset();
    content_.reset();
    return fail(unavailable(fmt::format("identity file {} is not a regular file", path_)));
  }
  FileKey key;
  key.dev = static_cast<uint64_t>(st.st_dev);
  key.ino = static_cast<uint64_t>(st.st_ino);
  key.size = static_cast<int64_t>(st.st_size);
  key.mtime_ns = to_ns(st.st_mtim);
  key.ctime_ns = to_ns(st.st_ctim);
  key.mode = static_cast<uint32_t>(st.st_mode & 07777);
  const int64_t window_ns = std::chrono::nanoseconds(kRacyWindow).count();
  const bool racy = real_now_ns() - key.mtime_ns < window_ns;
  if (!key_ || *key_ != key || racy) reload(key);
  if (verifier_) return static_cast<const crypto::CredentialVerifier*>(verifier_.get());
  return error_;
}

void IdentityStore::reload(const FileKey& key) {
  auto bytes = read_small_file(path_, kMaxIdentityFileSize);
  key_ = key;
  if (!bytes.ok()) {
    content_.reset();
    (void)fail(bytes.status());
    return;
  }
  // Re-read because of a stat change or a racy mtime, but the same bytes: same state.
  if (content_ && *content_ == *bytes) return;
  content_ = std::move(*bytes);

  auto identity = crypto::parse_box_identity(*content_);
  if (!identity.ok()) {
    (void)fail(unavailable(
        fmt::format("identity file {} is invalid: {}", path_, identity.status().message())));
    return;
  }
  if (verifier_ && verifier_->identity() == *identity) return;
  const bool first = !loaded_once_;
  loaded_once_ = true;
  verifier_ = std::make_unique<crypto::CredentialVerifier>(std::move(*identity), clock_);
  error_ = ok_status();
  const crypto::BoxIdentity& id = verifier_->identity();
  log::info(
      first ? "identity loaded" : "identity reloaded",
      {{"path", path_}, {"box_id", id.box_id}, {"wake_id", id.wake_id}, {"key_id", id.key_id}});
  if ((key.mode & (S_IWGRP | S_IWOTH)) != 0) {
    // Whoever can write this file chooses the key that calls are checked against.
    log::warn("identity file is writable by group or others",
              {{"path", path_}, {"mode", fmt::format("{:o}", key.mode)}});
  }
}

Status IdentityStore::fail(Status status) {
  const bool was_ok = verifier_ != nullptr;
  verifier_.reset();
  if (was_ok || !(error_ == status)) {
    log::warn("identity unavailable", {{"path", path_}, {"error", status.to_string()}});
  }
  error_ = status;
  return status;
}

Status IdentityStore::check(const http::Headers& headers) {
  const std::string* credential = nullptr;
  int count = 0;
  for (const http::Header& h : headers) {
    if (h.name == kCredentialHeader) {
      ++count;
      credential = &h.value;
    }
  }
  if (count == 0) {
    return unauthenticated(fmt::format(
        "missing {}: calls reach the agent only through the api's edge", kCredentialHeader));
  }
  if (count > 1) return unauthenticated(fmt::format("several {} headers", kCredentialHeader));
  ASSIGN_OR_RETURN(const crypto::CredentialVerifier* verifier, current());
  auto claims = verifier->verify(*credential);
  if (!claims.ok()) return claims.status();
  return ok_status();
}

}  // namespace cb::agent
