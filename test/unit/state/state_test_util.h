#pragma once
// Helpers for the state layer's tests: files with chosen modes and mtimes, a comparable
// picture of a directory tree, and a Store wrapper that injects failures.

#include "state/store.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace cb::state::test_util {

// A fixed, old mtime (2023-11-14), so files count as settled for the racy-file rule.
inline constexpr int64_t kOldMtimeNs = 1'700'000'000'000'000'000;

inline void set_mtime(const std::filesystem::path& p, int64_t ns) {
  struct timespec t[2];
  t[0].tv_sec = t[1].tv_sec = time_t(ns / 1'000'000'000);
  t[0].tv_nsec = t[1].tv_nsec = long(ns % 1'000'000'000);
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), t, AT_SYMLINK_NOFOLLOW) == 0);
}

inline void write_file(const std::filesystem::path& p, const std::string& content,
                       int64_t mtime_ns = kOldMtimeNs, mode_t mode = 0644) {
  std::filesystem::create_directories(p.parent_path());
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, content.data(), content.size()) == ssize_t(content.size()));
  REQUIRE(::fchmod(fd, mode) == 0);
  ::close(fd);
  set_mtime(p, mtime_ns);
}

// Descriptors this process has open (the count's own directory stream included, as in every
// count).
inline size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::string out;
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return "<missing>";
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

// What a restore must reproduce of one entry.
struct Node {
  char type = '?';  // d, f, l
  unsigned mode = 0;
  unsigned uid = 0, gid = 0;
  int64_t mtime_ns = 0;
  std::string data;  // file content or link target

  bool operator==(const Node&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const Node& n) {
  return os << n.type << " " << std::oct << n.mode << std::dec << " " << n.uid << ":" << n.gid
            << " " << n.mtime_ns << " (" << n.data.size() << " bytes)";
}

// Every entry below |root| by relative path (the root itself is "").
inline std::map<std::string, Node> picture(const std::filesystem::path& root) {
  std::map<std::string, Node> out;
  auto add = [&](const std::filesystem::path& p, const std::string& rel) {
    struct stat st;
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    Node n;
    n.mode = st.st_mode & 07777;
    n.uid = st.st_uid;
    n.gid = st.st_gid;
    n.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (S_ISDIR(st.st_mode)) {
      n.type = 'd';
    } else if (S_ISREG(st.st_mode)) {
      n.type = 'f';
      n.data = read_file(p);
    } else if (S_ISLNK(st.st_mode)) {
      n.type = 'l';
      n.mode = 0;  // symlink modes are not meaningful on Linux
      n.data = std::filesystem::read_symlink(p).string();
    }
    out[rel] = n;
  };
  add(root, "");
  for (auto it = std::filesystem::recursive_directory_iterator(root);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    if (it->is_socket() || it->is_fifo() || it->is_block_file() || it->is_character_file()) {
      continue;
    }
    add(it->path(), std::filesystem::relative(it->path(), root).string());
  }
  return out;
}

// A Store that forwards to another and can fail one put: the n-th (1-based) put fails
// either before writing (the object is not stored) or after (stored, as in a crash after the
// rename but before the caller learned of it). Counts puts and remembers their keys.
class FaultyStore final : public Store {
 public:
  enum class Mode { kBefore, kAfter };

  explicit FaultyStore(Store& inner) : inner_(inner) {}

  void fail_put(int n, Mode mode) {
    fail_at_ = n;
    mode_ = mode;
  }
  // Gets of keys containing |needle| return kNotFound (a lost object).
  void hide(std::string needle) { hidden_ = std::move(needle); }
  // Read these once the save has returned (its put threads are joined by then).
  int puts() const { return puts_; }
  const std::vector<std::string>& put_keys() const { return put_keys_; }
  int stats() const { return stats_; }

  // Puts may come from several threads (StoreChunkSink's put threads). Deferred puts count
  // as puts and forward as deferred puts, so a save's chunks still go through the inner
  // store's put_deferred() + sync().
  Status put(std::string_view key, std::string_view data) override {
    return counted_put(key, data, false);
  }
  Status put_deferred(std::string_view key, std::string_view data) override {
    return counted_put(key, data, true);
  }
  Status sync() override {
    ++syncs_;
    return inner_.sync();
  }
  int syncs() const { return syncs_; }
  Result<std::string> get(std::string_view key) override {
    if (!hidden_.empty() && key.find(hidden_) != std::string_view::npos) {
      return not_found("injected: hidden");
    }
    return inner_.get(key);
  }
  Result<uint64_t> stat(std::string_view key) override {
    ++stats_;
    return inner_.stat(key);
  }
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit) override {
    return inner_.list(prefix, start_after, limit);
  }
  Status delete_batch(std::span<const std::string> keys) override {
    return inner_.delete_batch(keys);
  }

 private:
  Status counted_put(std::string_view key, std::string_view data, bool deferred) {
    int n = 0;
    {
      std::lock_guard lock(mu_);
      n = ++puts_;
      put_keys_.emplace_back(key);
    }
    if (n == fail_at_ && mode_ == Mode::kBefore) return unavailable("injected: put before");
    Status s = deferred ? inner_.put_deferred(key, data) : inner_.put(key, data);
    if (n == fail_at_ && mode_ == Mode::kAfter) return unavailable("injected: put after");
    return s;
  }

  Store& inner_;
  std::atomic<int> syncs_{0};
  std::mutex mu_;  // puts_ and put_keys_
  int fail_at_ = 0;
  Mode mode_ = Mode::kBefore;
  int puts_ = 0;
  std::atomic<int> stats_{0};
  std::string hidden_;
  std::vector<std::string> put_keys_;
};

}  // namespace cb::state::test_util
