// /proc, cgroup v2 files and atomic writes for the local backend.

#include "roles/api/machines/local_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cb::api::machines::internal {

namespace fs = std::filesystem;

Result<std::string> read_small_file(const fs::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, fmt::format("open {}", path.string()));
  std::string out;
  std::array<char, 4096> buf;
  while (true) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, fmt::format("read {}", path.string()));
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
  return out;
}

Result<ProcStat> read_proc_stat(pid_t pid) {
  auto text = read_small_file(fmt::format("/proc/{}/stat", pid));
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) {
      return not_found(fmt::format("no process {}", pid));
    }
    return text.status();
  }
  // "pid (comm) state ppid ..." where comm may hold spaces and parentheses: parse after the
  // last ')'. Field 22 (starttime) is the 20th field after it.
  auto close = text->rfind(')');
  if (close == std::string::npos) return internal_error(fmt::format("/proc/{}/stat", pid));
  std::istringstream in(text->substr(close + 1));
  ProcStat st;
  in >> st.state >> st.ppid;
  std::string skip;
  for (int field = 5; field < 22 && in; ++field) in >> skip;
  in >> st.start_time;
  if (!in) return internal_error(fmt::format("/proc/{}/stat: unparseable", pid));
  return st;
}

bool stopped_or_stopping(pid_t pid) {
  auto st = read_proc_stat(pid);
  if (!st.ok() || st->state == 'Z' || st->state == 'X' || st->state == 'T' || st->state == 't') {
    return true;
  }
  auto status = read_small_file(fmt::format("/proc/{}/status", pid));
  if (!status.ok()) return true;
  // "SigPnd:\t0000000000040000": signal n is bit n-1 of the hex mask (proc(5)).
  std::istringstream in(*status);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("SigPnd:") && !line.starts_with("ShdPnd:")) continue;
    uint64_t mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    if (mask & (uint64_t{1} << (SIGSTOP - 1))) return true;
  }
  return false;
}

std::vector<pid_t> list_pids() {
  std::vector<pid_t> pids;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return pids;
  while (struct dirent* e = ::readdir(dir)) {
    pid_t pid = 0;
    std::string_view name(e->d_name);
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec == std::errc() && end == name.data() + name.size() && pid > 0) pids.push_back(pid);
  }
  ::closedir(dir);
  std::sort(pids.begin(), pids.end());
  return pids;
}

uint64_t pid_namespace_of(pid_t pid) {
  struct stat st;
  if (::stat(fmt::format("/proc/{}/ns/pid", pid).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

std::optional<fs::path> find_cgroup2_mount(const fs::path& mountinfo) {
  std::ifstream in(mountinfo);
  std::string line;
  // "36 25 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw": the fields after " - " are
  // the type and source; the fifth field is the mount point (no spaces in cgroup paths).
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type;
    tail >> type;
    if (type != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, devno, root, mount_point;
    head >> id >> parent >> devno >> root >> mount_point;
    if (!mount_point.empty()) return fs::path(mount_point);
  }
  return std::nullopt;
}

std::optional<int64_t> read_keyed(const fs::path& file, std::string_view key) {
  auto text = read_small_file(file);
  if (!text.ok()) return std::nullopt;
  std::istringstream in(*text);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return std::nullopt;
}

Result<std::vector<pid_t>> cgroup_procs(const fs::path& dir) {
  auto text = read_small_file(dir / "cgroup.procs");
  if (!text.ok()) return text.status();
  std::vector<pid_t> pids;
  std::istringstream in(*text);
  pid_t pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

Status write_file(const fs::path& file, std::string_view value) {
  UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, fmt::format("open {}", file.string()));
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) return errno_status(errno, fmt::format("write \"{}\" to {}", value, file.string()));
  if (static_cast<std::size_t>(n) != value.size()) {
    return internal_error(fmt::format("short write to {}", file.string()));
  }
  return ok_status();
}

Status write_atomically(const fs::path& path, std::string_view content, uint32_t mode) {
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) {
    return errno_status(errno, "getrandom");
  }
  fs::path tmp = path;
  tmp += fmt::format(".tmp-{:016x}", nonce);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return errno_status(errno, fmt::format("create {}", tmp.string()));
  auto fail = [&](int err, std::string_view what) {
    ::unlink(tmp.c_str());
    return errno_status(err, fmt::format("{} {}", what, tmp.string()));
  };
  if (::fchmod(fd.get(), mode) != 0) return fail(errno, "chmod");  // the umask is not ours
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno, "write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd.release()) != 0) return fail(errno, "close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno, "rename");
  return ok_status();
}

}  // namespace cb::api::machines::internal
