#include "roles/agent/box_tools.h"

#include "base/base64.h"
#include "base/file.h"
#include "base/log.h"
#include "tools/contract.h"

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace cb::agent {

namespace fs = std::filesystem;
namespace v1 = ::cocoonbox::agent::v1;
using nlohmann::json;
using namespace asio::experimental::awaitable_operators;

// ---- results ------------------------------------------------------------------------------

json ToolResult::to_json() const {
  json j = {{"content", content}, {"isError", is_error}};
  if (!structured.is_null()) j["structuredContent"] = structured;
  return j;
}

std::string ToolResult::text() const {
  std::string out;
  for (const auto& c : content) {
    if (c.value("type", "") != "text") continue;
    if (!out.empty()) out += '\n';
    out += c.value("text", "");
  }
  return out;
}

ToolResult text_result(std::string text, bool is_error) {
  ToolResult r;
  r.content.push_back({{"type", "text"}, {"text", std::move(text)}});
  r.is_error = is_error;
  return r;
}

namespace {

// JSON strings must be UTF-8: files and command output need not be. Invalid sequences become
// U+FFFD, so a result always serializes.
std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0)
      n = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      n = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      n = 4, min = 0x10000;
    bool ok = n != 0 && i + n <= s.size();
    uint32_t cp = ok ? (c & (0x7F >> n)) : 0;
    for (size_t k = 1; ok && k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string errno_text(int e) { return std::strerror(e); }

std::string human_size(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (1u << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  if (bytes < (1u << 30)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
}

// The image type of |head| (a file's first bytes) by its magic number, or "".
std::string_view image_mime(std::string_view head) {
  if (head.starts_with("\x89PNG\r\n\x1a\n")) return "image/png";
  if (head.starts_with("\xFF\xD8\xFF")) return "image/jpeg";
  if (head.starts_with("GIF87a") || head.starts_with("GIF89a")) return "image/gif";
  if (head.size() >= 12 && head.starts_with("RIFF") && head.substr(8, 4) == "WEBP")
    return "image/webp";
  return {};
}

bool looks_binary(std::string_view head) { return head.find('\0') != std::string_view::npos; }

// Reads all of |fd| (at most |cap| + 1 bytes, so the caller can tell it was larger).
Result<std::string> read_fd(int fd, size_t cap) {
  std::string out;
  char buf[65536];
  while (out.size() <= cap) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return internal_error(errno_text(errno));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

struct OpenFile {
  int fd = -1;
  struct stat st {};
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens |path| for reading as a regular file; the error is the tool result's text.
Result<std::unique_ptr<OpenFile>> open_regular(const fs::path& path) {
  auto f = std::make_unique<OpenFile>();
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (f->fd < 0)
    return failed_precondition(fmt::format("{}: {}", path.string(), errno_text(errno)));
  if (::fstat(f->fd, &f->st) != 0)
    return failed_precondition(fmt::format("{}: {}", path.string(), errno_text(errno)));
  if (S_ISDIR(f->st.st_mode))
    return failed_precondition(fmt::format("{} is a directory: use list_dir", path.string()));
  if (!S_ISREG(f->st.st_mode))
    return failed_precondition(fmt::format("{} is not a regular file", path.string()));
  return f;
}

// write_file's and edit_file's write: atomic, parents created, a symlink's target rewritten.
Status write_atomically(const fs::path& path, std::string_view content) {
  AtomicWriteOptions o;
  o.create_parents = true;
  return write_file_atomic(path, content, o);
}

// Reads a whole text file for edit_file. Errors become the result's text.
Result<std::string> read_text_file(const fs::path& path, size_t cap) {
  ASSIGN_OR_RETURN(auto f, open_regular(path));
  if (static_cast<uint64_t>(f->st.st_size) > cap) {
    return failed_precondition(fmt::format("{} is {}: larger than the {} a text tool takes",
                                           path.string(), human_size(f->st.st_size),
                                           human_size(cap)));
  }
  auto data = read_fd(f->fd, cap);
  if (!data.ok())
    return failed_precondition(
        fmt::format("reading {}: {}", path.string(), data.status().message()));
  if (looks_binary(std::string_view(*data).substr(0, 8192)))
    return failed_precondition(fmt::format("{} is a binary file", path.string()));
  return data;
}

// ---- read_file ----------------------------------------------------------------------------

ToolResult read_file(const fs::path& path, size_t offset, size_t limit, const BoxToolsLimits& lim) {
  auto f = open_regular(path);
  if (!f.ok()) return text_result(std::string(f.status().message()), true);
  const uint64_t size = static_cast<uint64_t>((*f)->st.st_size);
  char head_buf[16];
  ssize_t hn = ::pread((*f)->fd, head_buf, sizeof head_buf, 0);
  std::string_view head(head_buf, hn > 0 ? static_cast<size_t>(hn) : 0);
  if (std::string_view mime = image_mime(head); !mime.empty()) {
    if (size > lim.image_bytes) {
      return text_result(
          fmt::format("{} is a {} of {}: larger than the {} read_file returns", path.string(), mime,
                      human_size(size), human_size(lim.image_bytes)),
          true);
    }
    auto data = read_fd((*f)->fd, lim.image_bytes);
    if (!data.ok())
      return text_result(fmt::format("reading {}: {}", path.string(), data.status().message()),
                         true);
    ToolResult r;
    r.content.push_back({{"type", "image"}, {"data", base64_encode(*data)}, {"mimeType", mime}});
    r.structured = {{"path", path.string()}, {"mime_type", mime}, {"bytes", data->size()}};
    return r;
  }
  if (size > lim.text_file_bytes) {
    return text_result(
        fmt::format("{} is {}: larger than the {} read_file takes; use shell "
                    "(head, tail, sed -n) for parts of it",
                    path.string(), human_size(size), human_size(lim.text_file_bytes)),
        true);
  }
  auto data = read_fd((*f)->fd, lim.text_file_bytes);
  if (!data.ok())
    return text_result(fmt::format("reading {}: {}", path.string(), data.status().message()), true);
  if (looks_binary(std::string_view(*data).substr(0, 8192))) {
    return text_result(fmt::format("{} is a binary file of {}; read_file shows text and images",
                                   path.string(), human_size(size)),
                       true);
  }
  std::string out;
  size_t line_no = 0, shown = 0, cut = 0;
  std::string_view rest = *data;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (line_no < offset || shown >= limit) continue;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > lim.line_chars) {
      line = line.substr(0, lim.line_chars);
      ++cut;
    }
    out += fmt::format("{:>6}\t{}\n", line_no, line);
    ++shown;
  }
  const size_t total = line_no;
  std::string text = valid_utf8(out);
  if (total == 0) {
    text = "(empty file)";
  } else if (shown == 0) {
    text = fmt::format("(the file has {} lines; offset {} is past the end)", total, offset);
  } else if (offset + shown - 1 < total) {
    text += fmt::format("[lines {}-{} of {}; call again with offset {} for more]", offset,
                        offset + shown - 1, total, offset + shown);
  }
  if (cut > 0) {
    if (text.back() != '\n') text += '\n';
    text += fmt::format("[{} lines longer than {} characters were cut]", cut, lim.line_chars);
  }
  ToolResult r = text_result(std::move(text));
  r.structured = {{"path", path.string()},
                  {"total_lines", total},
                  {"offset", offset},
                  {"lines", shown},
                  {"bytes", size}};
  return r;
}

// ---- edit_file ----------------------------------------------------------------------------

ToolResult edit_file(const fs::path& path, const std::string& old_s, const std::string& new_s,
                     bool replace_all, const BoxToolsLimits& lim) {
  if (old_s == new_s)
    return text_result("old_string and new_string are the same: nothing to change", true);
  auto text = read_text_file(path, lim.text_file_bytes);
  if (!text.ok()) return text_result(std::string(text.status().message()), true);
  std::vector<size_t> at;
  for (size_t pos = text->find(old_s); pos != std::string::npos;
       pos = text->find(old_s, pos + old_s.size()))
    at.push_back(pos);
  if (at.empty()) {
    return text_result(fmt::format("old_string was not found in {} (it must match exactly, "
                                   "whitespace and indentation included)",
                                   path.string()),
                       true);
  }
  if (at.size() > 1 && !replace_all) {
    return text_result(fmt::format("old_string occurs {} times in {}: add surrounding lines to "
                                   "make it unique, or set replace_all",
                                   at.size(), path.string()),
                       true);
  }
  std::string out;
  out.reserve(text->size() + at.size() * (new_s.size() + 1));
  size_t from = 0;
  for (size_t pos : at) {
    out.append(*text, from, pos - from);
    out += new_s;
    from = pos + old_s.size();
  }
  out.append(*text, from);
  if (Status st = write_atomically(path, out); !st.ok())
    return text_result(std::string(st.message()), true);
  // A few numbered lines around the first change, so the caller sees the result in place.
  const size_t first_line =
      static_cast<size_t>(std::count(out.begin(), out.begin() + at[0], '\n')) + 1;
  const size_t new_lines = static_cast<size_t>(std::count(new_s.begin(), new_s.end(), '\n'));
  const size_t lo = first_line > 3 ? first_line - 3 : 1, hi = first_line + new_lines + 3;
  std::string snippet;
  size_t line_no = 1;
  std::string_view rest = out;
  while (!rest.empty() && line_no <= hi) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line_no >= lo)
      snippet += fmt::format("{:>6}\t{}\n", line_no, line.substr(0, lim.line_chars));
    ++line_no;
  }
  ToolResult r =
      text_result(valid_utf8(fmt::format("edited {}: replaced {} occurrence{}\n{}", path.string(),
                                         at.size(), at.size() == 1 ? "" : "s", snippet)));
  r.structured = {{"path", path.string()}, {"replacements", at.size()}, {"first_line", first_line}};
  return r;
}

// ---- list_dir -----------------------------------------------------------------------------

ToolResult list_dir(const fs::path& path, bool hidden, const BoxToolsLimits& lim) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOTDIR)
      return text_result(fmt::format("{} is not a directory: use read_file", path.string()), true);
    return text_result(fmt::format("{}: {}", path.string(), errno_text(errno)), true);
  }
  std::vector<std::string> names;
  size_t skipped_hidden = 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!hidden && name[0] == '.') {
      ++skipped_hidden;
      continue;
    }
    names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  std::string text;
  json entries = json::array();
  const size_t shown = std::min(names.size(), lim.list_entries);
  for (size_t i = 0; i < shown; ++i) {
    const std::string& name = names[i];
    const fs::path full = path / name;
    struct stat st {};
    json e = {{"name", valid_utf8(name)}};
    if (::lstat(full.c_str(), &st) != 0) {
      text += valid_utf8(name) + "  (vanished)\n";
      continue;
    }
    e["mtime_ms"] = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (S_ISDIR(st.st_mode)) {
      e["type"] = "dir";
      text += valid_utf8(name) + "/\n";
    } else if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      std::string target = fs::read_symlink(full, ec).string();
      e["type"] = "symlink";
      e["target"] = valid_utf8(target);
      text += valid_utf8(fmt::format("{} -> {}\n", name, target));
    } else if (S_ISREG(st.st_mode)) {
      e["type"] = "file";
      e["size"] = static_cast<uint64_t>(st.st_size);
      text +=
          valid_utf8(fmt::format("{}  {}\n", name, human_size(static_cast<uint64_t>(st.st_size))));
    } else {
      e["type"] = "other";
      text += valid_utf8(name) + "  (special file)\n";
    }
    entries.push_back(std::move(e));
  }
  if (names.empty()) text = "(empty directory)\n";
  if (shown < names.size())
    text += fmt::format("[{} more entries not shown]\n", names.size() - shown);
  if (skipped_hidden > 0)
    text += fmt::format("[{} hidden entries; set hidden to see them]\n", skipped_hidden);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  ToolResult r = text_result(std::move(text));
  r.structured = {
      {"path", path.string()}, {"entries", std::move(entries)}, {"total", names.size()}};
  return r;
}

// ---- output capture -----------------------------------------------------------------------

// Keeps the first and the last |cap|/2 bytes of a stream and counts the rest.
class Capture {
 public:
  explicit Capture(size_t cap) : half_(cap / 2) {}
  void add(std::string_view s) {
    total_ += s.size();
    if (head_.size() < half_) {
      const size_t take = std::min(half_ - head_.size(), s.size());
      head_.append(s.substr(0, take));
      s.remove_prefix(take);
    }
    tail_.append(s);
    if (tail_.size() > 2 * half_) tail_.erase(0, tail_.size() - half_);
  }
  uint64_t total() const { return total_; }
  bool truncated() const { return total_ > head_.size() + std::min(tail_.size(), half_); }
  std::string render() const {
    std::string_view tail = tail_;
    if (tail.size() > half_) tail.remove_prefix(tail.size() - half_);
    if (!truncated()) return valid_utf8(head_ + std::string(tail));
    const uint64_t left_out = total_ - head_.size() - tail.size();
    return valid_utf8(head_) + fmt::format("\n[... {} left out ...]\n", human_size(left_out)) +
           valid_utf8(tail);
  }

 private:
  size_t half_;
  uint64_t total_ = 0;
  std::string head_, tail_;
};

asio::awaitable<void> drain(proc::Descriptor* from, Capture& into) {
  if (from == nullptr) co_return;
  std::string buf(65536, '\0');
  while (true) {
    auto [ec, n] = co_await from->async_read_some(asio::buffer(buf.data(), buf.size()));
    into.add(std::string_view(buf.data(), n));
    if (ec) co_return;
  }
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

// Session names become directory names: short, and no path tricks.
bool valid_session_name(std::string_view s) {
  if (s.empty() || s.size() > 200 || s.front() == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// Makes |dir| (its parent must exist) a directory only |uid| can enter: created 0700 and
// given to |uid|:|gid| when missing (|chown|: the agent is root and acts for another user);
// an existing one must already be that, and not a symlink.
Status private_dir(const fs::path& dir, uid_t uid, gid_t gid, bool chown) {
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (chown && ::lchown(dir.c_str(), uid, gid) != 0) {
      const int e = errno;
      ::rmdir(dir.c_str());
      return internal_error(fmt::format("chown {}: {}", dir.string(), errno_text(e)));
    }
  } else if (errno != EEXIST) {
    return failed_precondition(fmt::format("mkdir {}: {}", dir.string(), errno_text(errno)));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return failed_precondition(fmt::format("{}: {}", dir.string(), errno_text(errno)));
  if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077) != 0) {
    return failed_precondition(
        fmt::format("{} is not a private directory of uid {} (mode 0700, not a symlink): "
                    "refusing to keep a shell session in it",
                    dir.string(), uid));
  }
  return ok_status();
}

// The bash program a session's command runs in (README.md §Box tools). $1: the session's
// directory; $2: an explicit cwd or ""; $3: the command. The state file is written by the
// user's own shell and read back only by the user's next shell: `__cb_dir=<cwd>` and
// `export -p`. It is replaced by a rename when the shell exits, so a command killed by its
// timeout or a cancel leaves the previous state whole.
constexpr std::string_view kSessionScript = R"sh(__cb_state=$1/state
__cb_cwd=$2
__cb_cmd=$3
shift 3
if [ -f "$__cb_state" ]; then . "$__cb_state"; fi
__cb_old=${OLDPWD-}
if [ -n "$__cb_cwd" ]; then
  builtin cd -- "$__cb_cwd" || exit 1
elif [ -n "${__cb_dir-}" ]; then
  builtin cd -- "$__cb_dir" 2>/dev/null || {
    builtin cd -P . 2>/dev/null
    builtin echo "[session: $__cb_dir is gone; running in $PWD]" >&2
  }
fi
if [ -n "$__cb_old" ]; then OLDPWD=$__cb_old; fi
unset -v __cb_cwd __cb_dir __cb_old
__cb_save() {
  { builtin printf '__cb_dir=%q\n' "$PWD"; builtin export -p; } >"$__cb_state.$$" 2>/dev/null &&
    command -p mv -f -- "$__cb_state.$$" "$__cb_state"
}
trap '__cb_rc=$?; __cb_save; exit "$__cb_rc"' EXIT
eval "$__cb_cmd"
)sh";

// Runs |op| on the calling thread (the worker) with the filesystem ids of |uid|, |gid| and
// |groups| when |switch_ids|, and gives the thread its own back afterwards.
ToolResult run_with_ids(bool switch_ids, uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
                        const std::function<ToolResult()>& op) {
  if (!switch_ids) return op();
  // Per thread on Linux when made as raw system calls (glibc's wrappers for setgroups
  // would apply them to every thread). Groups and fsgid first, while fsuid 0 still has
  // CAP_SETGID; fsuid last, which drops the filesystem capabilities until it is 0 again.
  std::vector<gid_t> saved(static_cast<size_t>(std::max(0, ::getgroups(0, nullptr))));
  if (!saved.empty())
    saved.resize(static_cast<size_t>(::getgroups(static_cast<int>(saved.size()), saved.data())));
  if (::syscall(SYS_setgroups, groups.size(), groups.data()) != 0 ||
      (::syscall(SYS_setfsgid, gid), static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) != gid) ||
      (::syscall(SYS_setfsuid, uid), static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) != uid)) {
    const int e = errno;
    ::syscall(SYS_setfsuid, 0);
    ::syscall(SYS_setfsgid, 0);
    ::syscall(SYS_setgroups, saved.size(), saved.data());
    return text_result(fmt::format("cannot act as uid {}: {}", uid, std::strerror(e)), true);
  }
  ToolResult r = op();
  ::syscall(SYS_setfsuid, 0);
  ::syscall(SYS_setfsgid, 0);
  ::syscall(SYS_setgroups, saved.size(), saved.data());
  return r;
}

// Removes the entry |name| of the directory |root_fd|: a directory's files, then the
// directory; a symlink (or any other file) itself. Never follows a symlink: the session's
// directory belongs to the user, who may have put anything there. True when it is gone.
bool remove_session_entry(int root_fd, const char* name) {
  const int fd = ::openat(root_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR || errno == ELOOP) return ::unlinkat(root_fd, name, 0) == 0;
    return false;
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  // The shells write only files (state, state.<pid>); unlinkat without AT_REMOVEDIR never
  // descends, and a directory someone made there keeps the session (and is left alone).
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    ::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
  return ::unlinkat(root_fd, name, AT_REMOVEDIR) == 0;
}

// Removes the sessions under |root| (which must be |uid|'s private directory, not a symlink)
// whose key |match| accepts. Returns how many went.
size_t remove_sessions(const fs::path& root, uid_t uid,
                       const std::function<bool(const std::string&)>& match) {
  const int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root_fd < 0) return 0;
  struct stat st {};
  if (::fstat(root_fd, &st) != 0 || st.st_uid != uid || (st.st_mode & 077) != 0) {
    ::close(root_fd);
    return 0;
  }
  std::vector<std::string> names;
  if (const int list_fd = ::dup(root_fd); list_fd >= 0) {
    if (DIR* d = ::fdopendir(list_fd)) {
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != ".." && match(name)) names.push_back(std::move(name));
      }
      ::closedir(d);
    } else {
      ::close(list_fd);
    }
  }
  size_t removed = 0;
  for (const std::string& name : names) removed += remove_session_entry(root_fd, name.c_str());
  ::close(root_fd);
  return removed;
}

// "mcp-<pid>-..." of an agent that is gone: |pid| not running, or this process's own (the
// sweep runs before this agent opened any scope, so a previous agent with the same pid, as in
// a box's pid namespace, left it).
bool stale_mcp_session(const std::string& key) {
  if (key.rfind("mcp-", 0) != 0) return false;
  size_t i = 4;
  int64_t pid = 0;
  while (i < key.size() && key[i] >= '0' && key[i] <= '9' && pid < (int64_t{1} << 31))
    pid = pid * 10 + (key[i++] - '0');
  if (i == 4 || i >= key.size() || key[i] != '-' || pid <= 0 || pid >= (int64_t{1} << 31))
    return false;  // "mcp-<name>": a session without a scope (no owner to outlive)
  if (pid == ::getpid()) return true;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

// ---- the worker thread ----------------------------------------------------------------------

struct BoxTools::Worker {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~Worker() {
    guard.reset();
    io.stop();
    thread.join();
  }
};

BoxTools::BoxTools(net::Executor executor, ExecConfig config, BoxToolsLimits limits,
                   fs::path sessions_dir)
    : executor_(std::move(executor)),
      config_(std::move(config)),
      limits_(limits),
      sessions_dir_(std::move(sessions_dir)),
      worker_(std::make_unique<Worker>()) {}

BoxTools::~BoxTools() = default;

fs::path BoxTools::workspace(const ExecUser& user) const {
  std::error_code ec;
  if (!config_.workspace.empty() && fs::is_directory(config_.workspace, ec))
    return config_.workspace;
  if (!user.account.home.empty() && fs::is_directory(user.account.home, ec))
    return user.account.home;
  return "/";
}

fs::path BoxTools::sessions_root(const ExecUser& user) const {
  fs::path parent = sessions_dir_;
  if (parent.empty()) {
    std::error_code ec;
    parent = fs::temp_directory_path(ec);
    if (ec) parent = "/tmp";
  }
  return parent / fmt::format("cocoonbox-shell-{}", user.account.uid);
}

Result<fs::path> BoxTools::session_dir(const ExecUser& user, std::string_view key) const {
  if (!valid_session_name(key)) return invalid_argument(fmt::format("session {:?}", key));
  const uid_t uid = user.account.uid;
  const fs::path root = sessions_root(user);
  RETURN_IF_ERROR(private_dir(root, uid, user.account.gid, user.switch_user));
  const fs::path dir = root / std::string(key);
  RETURN_IF_ERROR(private_dir(dir, uid, user.account.gid, user.switch_user));
  return dir;
}

McpShellScope::McpShellScope(BoxTools& tools, uint64_t n)
    : tools_(tools), prefix_(fmt::format("mcp-{}-{}-", ::getpid(), n)) {}

McpShellScope::~McpShellScope() {
  const std::string prefix = prefix_;
  tools_.remove_sessions_later(
      [prefix](const std::string& key) { return key.rfind(prefix, 0) == 0; });
}

std::shared_ptr<McpShellScope> BoxTools::open_mcp_scope() {
  return std::make_shared<McpShellScope>(*this, next_scope_++);
}

void BoxTools::end_agent_sessions(std::string_view agent_id) {
  const std::string key = fmt::format("agent-{}", agent_id);
  remove_sessions_later([key](const std::string& k) {
    return k == key || (k.size() > key.size() && k.rfind(key + "-", 0) == 0);
  });
}

void BoxTools::remove_sessions_later(std::function<bool(const std::string&)> match) {
  auto user = resolve_exec_user(config_.desktop_user, ::geteuid());
  if (!user.ok()) return;
  const fs::path root = sessions_root(*user);
  asio::post(worker_->io,
             [root, match = std::move(match), switch_ids = user->switch_user,
              uid = user->account.uid, gid = user->account.gid, groups = user->account.groups] {
               run_with_ids(switch_ids, uid, gid, groups, [&] {
                 const size_t n = remove_sessions(root, uid, match);
                 if (n > 0) log::info("shell sessions ended", {{"count", static_cast<int64_t>(n)}});
                 return ToolResult();
               });
             });
}

asio::awaitable<size_t> BoxTools::sweep_sessions() {
  auto user = resolve_exec_user(config_.desktop_user, ::geteuid());
  if (!user.ok()) co_return 0;
  const fs::path root = sessions_root(*user);
  const uid_t uid = user->account.uid;
  std::function<ToolResult()> op = [root, uid] {
    ToolResult r;
    r.structured = {{"removed", remove_sessions(root, uid, stale_mcp_session)}};
    return r;
  };
  ToolResult r = co_await on_worker(*user, std::move(op));
  co_return r.structured.is_object() ? r.structured.value("removed", size_t{0}) : size_t{0};
}

asio::awaitable<ToolResult> BoxTools::on_worker(const ExecUser& user,
                                                std::function<ToolResult()> op) {
  const bool switch_ids = user.switch_user;
  const uid_t uid = user.account.uid;
  const gid_t gid = user.account.gid;
  std::vector<gid_t> groups = user.account.groups;
  auto task = [op = std::move(op), switch_ids, uid, gid,
               groups = std::move(groups)]() -> asio::awaitable<ToolResult> {
    co_return run_with_ids(switch_ids, uid, gid, groups, op);
  };
  co_return co_await asio::co_spawn(worker_->io.get_executor(), std::move(task),
                                    asio::use_awaitable);
}

asio::awaitable<Result<ToolResult>> BoxTools::call(std::string_view name, const json& arguments,
                                                   std::string_view owner,
                                                   const McpShellScope* scope) {
  const json* tool = tools::find_tool(tools::box_tools(), name);
  if (tool == nullptr) co_return not_found(fmt::format("no tool {:?}", name));
  const json args = arguments.is_null() ? json::object() : arguments;
  CO_RETURN_IF_ERROR(tools::check_arguments((*tool)["inputSchema"], args));
  auto user = resolve_exec_user(config_.desktop_user, ::geteuid());
  if (!user.ok()) co_return user.status();

  // Paths: absolute, or relative to the workspace.
  const fs::path base = workspace(*user);
  auto resolve = [&](std::string_view field, std::string_view fallback) -> Result<fs::path> {
    std::string raw =
        args.contains(field) ? args[std::string(field)].get<std::string>() : std::string(fallback);
    if (raw.find('\0') != std::string::npos)
      return invalid_argument(fmt::format("arguments.{}: contains a NUL byte", field));
    if (raw.empty()) return base;
    fs::path p(raw);
    return (p.is_absolute() ? p : base / p).lexically_normal();
  };

  if (name == "shell") {
    std::string session;
    if (args.contains("session")) {
      const std::string named = args["session"].get<std::string>();
      if (!valid_session_name(named))
        co_return invalid_argument(
            "arguments.session: letters, digits, '.', '_' and '-' only, not starting with '.'");
      if (!owner.empty()) {
        session = fmt::format("agent-{}-{}", owner, named);
      } else if (scope != nullptr) {
        session = scope->prefix() + named;
      } else {
        session = "mcp-" + named;
      }
    } else if (!owner.empty()) {
      session = fmt::format("agent-{}", owner);
    }
    if (!session.empty() && !valid_session_name(session))
      co_return invalid_argument(fmt::format("session owner {:?} is not a valid name", owner));
    ToolResult r = co_await shell(*user, args, std::move(session));
    co_return r;
  }
  if (name == "grep") co_return co_await grep(*user, args);

  // The file tools run on the worker thread. |op| is a named object: gcc 12 destroys
  // lambda captures twice when the lambda is a temporary inside a co_await operand.
  std::function<ToolResult()> op;
  if (name == "read_file") {
    auto path = resolve("path", "");
    if (!path.ok()) co_return path.status();
    const size_t offset = args.value("offset", size_t{1});
    const size_t limit = args.value("limit", limits_.read_lines);
    op = [p = *path, offset, limit, lim = limits_] { return read_file(p, offset, limit, lim); };
  } else if (name == "write_file") {
    auto path = resolve("path", "");
    if (!path.ok()) co_return path.status();
    op = [p = *path, content = args["content"].get<std::string>()] {
      if (Status st = write_atomically(p, content); !st.ok())
        return text_result(std::string(st.message()), true);
      ToolResult r = text_result(fmt::format("wrote {} bytes to {}", content.size(), p.string()));
      r.structured = {{"path", p.string()}, {"bytes", content.size()}};
      return r;
    };
  } else if (name == "edit_file") {
    auto path = resolve("path", "");
    if (!path.ok()) co_return path.status();
    op = [p = *path, o = args["old_string"].get<std::string>(),
          n = args["new_string"].get<std::string>(), all = args.value("replace_all", false),
          lim = limits_] { return edit_file(p, o, n, all, lim); };
  } else if (name == "list_dir") {
    auto path = resolve("path", "");
    if (!path.ok()) co_return path.status();
    op = [p = *path, hidden = args.value("hidden", false), lim = limits_] {
      return list_dir(p, hidden, lim);
    };
  }
  if (op) {
    ToolResult r = co_await on_worker(*user, std::move(op));
    co_return r;
  }
  co_return internal_error(fmt::format("tool {:?} is in the contract but not implemented", name));
}

// ---- shell and grep -------------------------------------------------------------------------

asio::awaitable<ToolResult> BoxTools::shell(const ExecUser& user, const json& args,
                                            std::string session) {
  v1::ExecStart start;
  std::string explicit_cwd;
  if (args.contains("cwd")) {
    fs::path cwd(args["cwd"].get<std::string>());
    explicit_cwd = (cwd.is_absolute() ? cwd : workspace(user) / cwd).lexically_normal().string();
    start.set_cwd(explicit_cwd);
  } else {
    start.set_cwd(workspace(user).string());
  }
  // One command of a session at a time, in call order: each starts from the state the one
  // before it left. The line entry lives while a call holds or awaits it (|users|); a waiter
  // is woken by cancelling its timer, and checks |busy| again since a newcomer may have taken
  // the line first.
  struct Hold {
    BoxTools& tools;
    std::string key;
    SessionLine* line = nullptr;
    bool held = false;
    ~Hold() {
      if (line == nullptr) return;
      if (held) {
        line->busy = false;
        if (!line->waiters.empty()) {
          line->waiters.front()->cancel();
          line->waiters.pop_front();
        }
      }
      if (--line->users == 0) tools.lines_.erase(key);
    }
  };
  Hold hold{*this, session};
  if (!session.empty()) {
    hold.line = &lines_[session];
    ++hold.line->users;
    while (hold.line->busy) {
      net::Timer wake(executor_, net::kNoDeadline);
      hold.line->waiters.push_back(&wake);
      (void)co_await wake.async_wait();
      const bool cancelled_now = (co_await asio::this_coro::cancellation_state).cancelled() !=
                                 asio::cancellation_type::none;
      if (cancelled_now) {
        hold.line->waiters.remove(&wake);
        co_return text_result("cancelled while the session's previous command ran", true);
      }
    }
    hold.line->busy = true;
    hold.held = true;
  }
  if (session.empty()) {
    start.set_command(args["command"].get<std::string>());
  } else {
    auto dir = session_dir(user, session);
    if (!dir.ok())
      co_return text_result(fmt::format("shell session {}: {}", session, dir.status().message()),
                            true);
    auto* argv = start.mutable_argv();
    for (const std::string& a :
         {std::string("bash"), std::string("--noprofile"), std::string("--norc"), std::string("-c"),
          std::string(kSessionScript), std::string("bash"), dir->string(), explicit_cwd,
          args["command"].get<std::string>()})
      argv->add_args(a);
  }
  const double timeout_s = args.value("timeout", limits_.shell_timeout_s);
  auto plan = plan_exec(start, user, config_);
  if (!plan.ok()) co_return text_result(std::string(plan.status().message()), true);
  plan->spawn.stdin_mode = proc::Stdio::kNull;
  std::error_code ec;
  if (!fs::is_directory(start.cwd(), ec))
    co_return text_result(fmt::format("cwd {}: no such directory", start.cwd()), true);
  auto process = proc::spawn(executor_, plan->spawn);
  if (!process.ok())
    co_return text_result(fmt::format("starting the shell: {}", process.status().message()), true);

  Capture out(limits_.shell_output), err(limits_.shell_output);
  net::Timer timer(executor_);
  timer.expires_after(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  const auto began = std::chrono::steady_clock::now();
  auto finished =
      co_await ((drain(process->stdout_pipe(), out) && drain(process->stderr_pipe(), err)) ||
                timer.async_wait());
  const bool timed_out = finished.index() == 1;
  // A cancelled call (the agent loop's Cancel) kills the command too, so nothing it started
  // outlives the turn.
  const bool call_cancelled =
      (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none;
  if (timed_out || call_cancelled) (void)process->kill_group();
  auto status = co_await process->wait();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - began)
                      .count();
  if (!status.ok())
    co_return text_result(fmt::format("waiting for the shell: {}", status.status().message()),
                          true);

  std::string text = out.render();
  if (err.total() > 0) {
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += "[stderr]\n" + err.render();
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  json structured = {{"timed_out", timed_out},
                     {"stdout_bytes", out.total()},
                     {"stderr_bytes", err.total()},
                     {"truncated", out.truncated() || err.truncated()},
                     {"duration_ms", ms}};
  if (!session.empty()) structured["session"] = session;
  if (timed_out) {
    text +=
        fmt::format("[timed out after {}s: the command's process group was killed{}]", timeout_s,
                    session.empty() ? "" : "; the session keeps its state from before it");
  } else if (status->exited) {
    text += fmt::format("[exit code {}]", status->code);
  } else {
    text += fmt::format("[killed by {}]", signal_name(status->signal));
  }
  if (status->exited)
    structured["exit_code"] = status->code;
  else
    structured["signal"] = signal_name(status->signal);
  ToolResult r = text_result(std::move(text), timed_out);
  r.structured = std::move(structured);
  co_return r;
}

asio::awaitable<ToolResult> BoxTools::grep(const ExecUser& user, const json& args) {
  const fs::path base = workspace(user);
  std::string raw = args.value("path", std::string());
  if (raw.find('\0') != std::string::npos) co_return text_result("path contains a NUL byte", true);
  fs::path path = raw.empty() ? base : (fs::path(raw).is_absolute() ? fs::path(raw) : base / raw);
  path = path.lexically_normal();
  const size_t max = args.value("max_results", limits_.grep_results);

  v1::ExecStart start;
  auto* argv = start.mutable_argv();
  for (const char* a :
       {"grep", "-r", "-n", "-H", "-I", "-P", "--color=never", "--exclude-dir=.git"})
    argv->add_args(a);
  if (args.value("ignore_case", false)) argv->add_args("-i");
  if (args.contains("glob")) argv->add_args("--include=" + args["glob"].get<std::string>());
  argv->add_args("-e");
  argv->add_args(args["pattern"].get<std::string>());
  argv->add_args("--");
  argv->add_args(path.string());
  start.set_cwd(base.string());
  auto plan = plan_exec(start, user, config_);
  if (!plan.ok()) co_return text_result(std::string(plan.status().message()), true);
  plan->spawn.stdin_mode = proc::Stdio::kNull;
  auto process = proc::spawn(executor_, plan->spawn);
  if (!process.ok())
    co_return text_result(fmt::format("starting grep: {}", process.status().message()), true);

  // Lines until |max| + 1 (to know there were more), then grep is stopped.
  std::vector<std::string> lines;
  bool more = false;
  Capture err(4096);
  auto read_lines = [&]() -> asio::awaitable<void> {
    std::string pending;
    std::string buf(65536, '\0');
    while (true) {
      auto [ec, n] =
          co_await process->stdout_pipe()->async_read_some(asio::buffer(buf.data(), buf.size()));
      pending.append(buf.data(), n);
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        if (lines.size() == max) {
          more = true;
          co_return;
        }
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (line.size() > limits_.grep_line_chars)
          line = line.substr(0, limits_.grep_line_chars) + "...";
        lines.push_back(valid_utf8(line));
      }
      if (ec) co_return;
    }
  };
  net::Timer timer(executor_);
  timer.expires_after(std::chrono::seconds(static_cast<int64_t>(limits_.shell_timeout_s)));
  auto finished =
      co_await ((read_lines() && drain(process->stderr_pipe(), err)) || timer.async_wait());
  const bool timed_out = finished.index() == 1;
  if (more || timed_out) (void)process->kill_group();
  auto status = co_await process->wait();
  if (!status.ok())
    co_return text_result(fmt::format("waiting for grep: {}", status.status().message()), true);
  if (!more && !timed_out && status->exited && status->code == 2 && lines.empty()) {
    std::string e = err.render();
    while (!e.empty() && e.back() == '\n') e.pop_back();
    co_return text_result(e.empty() ? std::string("grep failed") : e, true);
  }
  std::string text;
  for (const auto& l : lines) text += l + '\n';
  if (lines.empty()) text = fmt::format("no matches under {}\n", path.string());
  if (more)
    text += fmt::format(
        "[stopped at {} matches; narrow the pattern, path or glob, or raise max_results]\n", max);
  if (timed_out) text += fmt::format("[stopped after {}s]\n", limits_.shell_timeout_s);
  text.pop_back();
  ToolResult r = text_result(std::move(text));
  r.structured = {{"matches", lines.size()}, {"more", more}, {"path", path.string()}};
  co_return r;
}

}  // namespace cb::agent
