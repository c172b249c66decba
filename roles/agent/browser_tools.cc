#include "roles/agent/browser_tools.h"

#include "base/file.h"
#include "base/log.h"
#include "tools/contract.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace cb::agent {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ---- snapshot rendering ---------------------------------------------------------------------

std::string ax_string(const json& node, const char* field) {
  auto f = node.find(field);
  if (f == node.end() || !f->is_object()) return {};
  auto v = f->find("value");
  if (v == f->end()) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number() || v->is_boolean()) return v->dump();
  return {};
}

// A property of an AX node: its value as JSON (null when absent).
json ax_property(const json& node, std::string_view name) {
  auto props = node.find("properties");
  if (props == node.end() || !props->is_array()) return nullptr;
  for (const auto& p : *props) {
    if (!p.is_object() || p.value("name", std::string()) != name) continue;
    auto v = p.find("value");
    if (v == p.end() || !v->is_object()) return nullptr;
    return v->value("value", json(nullptr));
  }
  return nullptr;
}

// Names and values on one line, quoted, at most |max| bytes (cut at a UTF-8 boundary).
std::string one_line(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > max) {
    size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out = out.substr(0, cut) + "…";
  }
  return out;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool is_container_role(std::string_view role) {
  return role == "generic" || role == "none" || role == "presentation" || role == "LineBreak" ||
         role == "LabelText" || role == "group" || role == "section" || role == "Section" ||
         role == "div";
}

struct Renderer {
  const std::map<std::string, const json*>& by_id;
  size_t max_lines;
  size_t max_bytes;
  uint64_t next_ref;
  Snapshot out;
  size_t depth_guard = 0;

  void add_line(std::string line, const SnapshotRef* ref) {
    ++out.lines_total;
    if (out.cut) return;
    if (out.lines_total > max_lines || out.text.size() + line.size() + 1 > max_bytes) {
      out.cut = true;
      return;
    }
    out.text += line;
    out.text += '\n';
    (void)ref;
  }

  void walk(const json& node, size_t depth, const std::string& parent_name,
            const std::string& parent_value) {
    if (++depth_guard > 200000 || depth > 256) return;  // a malformed tree cannot loop us
    const std::string role = ax_string(node, "role");
    const std::string name = one_line(ax_string(node, "name"), 300);
    const bool ignored = node.value("ignored", false);
    if (role == "InlineTextBox") return;
    bool print = !ignored && !role.empty();
    if (print && name.empty() && is_container_role(role)) print = false;
    if (print && role == "StaticText" &&
        (name.empty() || name == parent_name || name == parent_value))
      print = false;
    size_t child_depth = depth;
    std::string name_for_children = parent_name;
    std::string value_for_children = parent_value;
    if (print) {
      std::string shown_role = role == "RootWebArea"  ? "document"
                               : role == "StaticText" ? "text"
                                                      : role;
      std::string line(depth * 2, ' ');
      line += "- " + shown_role;
      if (!name.empty()) line += " " + quote(name);
      if (json level = ax_property(node, "level"); level.is_number())
        line += fmt::format(" [level={}]", level.dump());
      if (json checked = ax_property(node, "checked"); checked.is_string()) {
        if (checked == "true") line += " [checked]";
        if (checked == "mixed") line += " [checked=mixed]";
      }
      if (ax_property(node, "disabled") == true) line += " [disabled]";
      if (json expanded = ax_property(node, "expanded"); expanded.is_boolean())
        line += expanded.get<bool>() ? " [expanded]" : " [collapsed]";
      if (ax_property(node, "selected") == true) line += " [selected]";
      if (ax_property(node, "focused") == true) line += " [focused]";
      auto backend = node.find("backendDOMNodeId");
      if (backend != node.end() && backend->is_number_integer() && !out.cut) {
        const std::string ref = fmt::format("e{}", next_ref++);
        line += " [ref=" + ref + "]";
        SnapshotRef r;
        r.backend_node_id = backend->get<int64_t>();
        r.label = shown_role + (name.empty() ? "" : " " + quote(name));
        // Only refs on lines that are shown are handed out.
        const size_t before = out.text.size();
        std::string value = one_line(ax_string(node, "value"), 300);
        if (!value.empty() && role != "StaticText" && value != name) line += ": " + value;
        add_line(std::move(line), &r);
        if (out.text.size() != before) out.refs.emplace(ref, std::move(r));
      } else {
        std::string value = one_line(ax_string(node, "value"), 300);
        if (!value.empty() && role != "StaticText" && value != name) line += ": " + value;
        add_line(std::move(line), nullptr);
      }
      child_depth = depth + 1;
      name_for_children = name;
      value_for_children = one_line(ax_string(node, "value"), 300);
    }
    auto children = node.find("childIds");
    if (children == node.end() || !children->is_array()) return;
    for (const auto& id : *children) {
      if (!id.is_string()) continue;
      auto it = by_id.find(id.get<std::string>());
      if (it != by_id.end()) walk(*it->second, child_depth, name_for_children, value_for_children);
    }
  }
};

}  // namespace

Snapshot render_snapshot(const json& nodes, uint64_t first_ref, size_t max_lines,
                         size_t max_bytes) {
  std::map<std::string, const json*> by_id;
  const json* root = nullptr;
  if (nodes.is_array()) {
    for (const auto& n : nodes) {
      if (!n.is_object() || !n.contains("nodeId") || !n["nodeId"].is_string()) continue;
      by_id.emplace(n["nodeId"].get<std::string>(), &n);
      if (root == nullptr && !n.contains("parentId")) root = &n;
    }
  }
  Renderer r{by_id, max_lines, max_bytes, first_ref, {}};
  if (root != nullptr) r.walk(*root, 0, std::string(), std::string());
  r.out.next_ref = r.next_ref;
  if (r.out.text.empty() && !r.out.cut) r.out.text = "(the page is empty)\n";
  if (r.out.cut) {
    r.out.text += fmt::format(
        "[snapshot cut: {} of {} lines shown; scroll (browser_scroll) or open a narrower page to "
        "see the rest]\n",
        std::count(r.out.text.begin(), r.out.text.end(), '\n'), r.out.lines_total);
  }
  return r.out;
}

// ---- the browser process ------------------------------------------------------------------

namespace {

constexpr std::string_view kLoopback = "127.0.0.1";
constexpr std::string_view kDialogOpening = "Page.javascriptDialogOpening";
constexpr std::string_view kDialogClosed = "Page.javascriptDialogClosed";

// Chromium's words when Page.handleJavaScriptDialog finds nothing to answer.
bool no_dialog_showing(const Status& s) {
  return s.message().find("No dialog is showing") != std::string_view::npos;
}

void set_dialog_interrupts(cdp::Connection& c, bool on) {
  std::set<std::string> methods;
  if (on) methods.insert(std::string(kDialogOpening));
  c.set_interrupting_events(std::move(methods));
}

// The tools that act on the page, which a dialog blocks.
bool blocked_by_dialog(std::string_view tool) {
  return tool == "browser_click" || tool == "browser_type" || tool == "browser_press" ||
         tool == "browser_scroll" || tool == "browser_screenshot";
}

// True while |pid| runs (not a zombie, not gone).
bool process_alive(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

// SIGKILL to every process whose command line names |profile| (Chromium and its helpers,
// including the crash handler, which leaves the process group). Returns how many.
int kill_profile_processes(const fs::path& profile) {
  if (profile.empty()) return 0;
  const std::string needle = profile.string();
  int killed = 0;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 1 || pid == ::getpid()) continue;
    std::ifstream f(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // Arguments are NUL-separated: look for "--user-data-dir=P" or a path under P exactly.
    for (char& c : cmdline)
      if (c == '\0') c = '\n';
    cmdline = "\n" + cmdline + "\n";
    if (cmdline.find("=" + needle + "\n") == std::string::npos &&
        cmdline.find("=" + needle + "/") == std::string::npos)
      continue;
    if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  ::closedir(d);
  return killed;
}

// The calling thread's file system identity switched to |user|'s while alive (setfsuid(2),
// setfsgid(2) and, by the raw system call, which changes only this thread, its supplementary
// groups), when the agent switches users: the browser's profile is the box user's, and so are
// the links in it, so what the agent does there as root could otherwise reach through a link
// what the user cannot (a non-zero fsuid also drops root's file capabilities). Only for
// synchronous code: a coroutine suspended inside one would leave another to run on this
// thread with the user's identity.
class UserFsScope {
 public:
  // |user| null, or an account the agent does not switch to: nothing changes.
  explicit UserFsScope(const ExecUser* user) {
    if (user == nullptr || !user->switch_user) return;
    ok_ = false;
    // The thread's groups, to put back: without them, no switch (ok() is false).
    const int n = ::getgroups(0, nullptr);
    if (n < 0) return;
    saved_groups_.resize(size_t(n));
    if (::getgroups(n, saved_groups_.data()) != n) return;
    const std::vector<gid_t>& groups = user->account.groups;
    ok_ = ::syscall(SYS_setgroups, groups.size(), groups.data()) == 0;
    (void)::setfsgid(user->account.gid);
    (void)::setfsuid(user->account.uid);
    // setfsuid(2) reports no error: asking again returns the identity in effect.
    ok_ = ok_ && ::setfsuid(user->account.uid) == int(user->account.uid) &&
          ::setfsgid(user->account.gid) == int(user->account.gid);
    active_ = true;
  }
  ~UserFsScope() {
    if (!active_) return;
    (void)::setfsuid(::geteuid());
    (void)::setfsgid(::getegid());
    (void)::syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data());
  }
  UserFsScope(const UserFsScope&) = delete;
  UserFsScope& operator=(const UserFsScope&) = delete;

  // False when the switch did not take (or could not be undone, and so was not made): the
  // caller must not touch the user's paths then.
  bool ok() const { return ok_; }

 private:
  bool active_ = false;  // a switch was made: the destructor undoes it
  bool ok_ = true;
  std::vector<gid_t> saved_groups_;
};

// Chromium's singleton socket lives in a folder of its own under /tmp
// ("org.chromium.Chromium.XXXXXX"), linked from the profile's SingletonSocket and
// SingletonCookie; Chromium removes it only when it exits cleanly, and a browser here is always
// killed, so every start left one behind in the box's /tmp. Removes that folder and the
// profile's singleton links, as |user| (UserFsScope). The link is the box user's to write, so
// nothing it names is followed: only the two entries Chromium puts there are unlinked, in a
// folder of that name (Google Chrome's name too) directly under /tmp opened without following a
// symlink, and then the folder if empty.
void remove_singleton_files(const fs::path& profile, const ExecUser* user) {
  if (profile.empty()) return;
  UserFsScope as_user(user);
  if (!as_user.ok()) return;
  std::error_code ec;
  const fs::path target = fs::read_symlink(profile / "SingletonSocket", ec);
  const fs::path folder = target.parent_path();
  const std::string folder_name = folder.filename().string();
  if (!ec && target.filename() == "SingletonSocket" && folder.parent_path() == "/tmp" &&
      (folder_name.starts_with("org.chromium.Chromium.") ||
       folder_name.starts_with("com.google.Chrome."))) {
    const int tmp = ::open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tmp >= 0) {
      const int dir =
          ::openat(tmp, folder_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (dir >= 0) {
        for (const char* f : {"SingletonSocket", "SingletonCookie"}) (void)::unlinkat(dir, f, 0);
        ::close(dir);
        (void)::unlinkat(tmp, folder_name.c_str(), AT_REMOVEDIR);  // fails if anything is left
      }
      ::close(tmp);
    }
  }
  for (const char* f :
       {"DevToolsActivePort", "SingletonLock", "SingletonSocket", "SingletonCookie"})
    fs::remove(profile / f, ec);
}

std::string find_chromium(const std::string& configured) {
  if (!configured.empty()) return configured;
  for (std::string_view dir :
       {"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin"}) {
    for (std::string_view name :
         {"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}) {
      fs::path p = fs::path(dir) / name;
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return {};
}

// Creates |dir| and missing parents below |stop| (which must exist) owned by |user| when
// the agent switches users, mode 0700: as the user (UserFsScope), so that a link the user put
// in the path leads nowhere the user could not create a folder themselves. So a missing folder
// needs a parent the user may write in (root's own parent no longer does), and takes the
// group a set-group-ID parent gives.
Status make_owned_dirs(const fs::path& dir, const fs::path& stop, const ExecUser& user) {
  UserFsScope as_user(&user);
  if (!as_user.ok())
    return failed_precondition(fmt::format("could not take the identity of {} to create {}",
                                           user.account.name, dir.string()));
  std::vector<fs::path> missing;
  for (fs::path p = dir; !p.empty() && p != stop && p != p.parent_path(); p = p.parent_path()) {
    std::error_code ec;
    if (fs::exists(p, ec)) break;
    missing.push_back(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST)
      return failed_precondition(
          fmt::format("creating {}: {}", it->string(), std::strerror(errno)));
  }
  return {};
}

std::string tail_of_file(const fs::path& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() > max) s = s.substr(s.size() - max);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void log_started(pid_t pid, const std::string& user, const fs::path& profile, uint16_t port) {
  log::info("browser started", {{"pid", static_cast<int64_t>(pid)},
                                {"user", user},
                                {"profile", profile.string()},
                                {"port", static_cast<int64_t>(port)}});
}

void log_lost(std::string_view why) { log::warn("browser lost", {{"reason", why}}); }

// Key definitions for Input.dispatchKeyEvent.
struct KeyDef {
  std::string key;
  std::string code;
  int key_code = 0;
  std::string text;
};

std::optional<KeyDef> named_key(std::string_view name) {
  struct Entry {
    const char* name;
    const char* key;
    const char* code;
    int key_code;
    const char* text;
  };
  static const Entry kKeys[] = {
      {"Enter", "Enter", "Enter", 13, "\r"},
      {"Tab", "Tab", "Tab", 9, ""},
      {"Escape", "Escape", "Escape", 27, ""},
      {"Backspace", "Backspace", "Backspace", 8, ""},
      {"Delete", "Delete", "Delete", 46, ""},
      {"Space", " ", "Space", 32, " "},
      {"ArrowUp", "ArrowUp", "ArrowUp", 38, ""},
      {"ArrowDown", "ArrowDown", "ArrowDown", 40, ""},
      {"ArrowLeft", "ArrowLeft", "ArrowLeft", 37, ""},
      {"ArrowRight", "ArrowRight", "ArrowRight", 39, ""},
      {"Home", "Home", "Home", 36, ""},
      {"End", "End", "End", 35, ""},
      {"PageUp", "PageUp", "PageUp", 33, ""},
      {"PageDown", "PageDown", "PageDown", 34, ""},
  };
  for (const auto& e : kKeys) {
    if (name == e.name) return KeyDef{e.key, e.code, e.key_code, e.text};
  }
  if (name.size() >= 2 && name.size() <= 3 && name[0] == 'F') {
    int n = 0;
    for (char c : name.substr(1)) n = c >= '0' && c <= '9' ? n * 10 + (c - '0') : 100;
    if (n >= 1 && n <= 12) return KeyDef{std::string(name), std::string(name), 111 + n, ""};
  }
  // One character (one UTF-8 sequence).
  const auto c0 = static_cast<unsigned char>(name.empty() ? 0 : name[0]);
  const size_t len = c0 < 0x80 ? 1 : (c0 & 0xE0) == 0xC0 ? 2 : (c0 & 0xF0) == 0xE0 ? 3 : 4;
  if (!name.empty() && name.size() == len) {
    KeyDef k;
    k.key = std::string(name);
    k.text = std::string(name);
    if (len == 1) {
      const char c = name[0];
      if (c >= 'a' && c <= 'z') {
        k.code = fmt::format("Key{}", static_cast<char>(c - 'a' + 'A'));
        k.key_code = c - 'a' + 'A';
      } else if (c >= 'A' && c <= 'Z') {
        k.code = fmt::format("Key{}", c);
        k.key_code = c;
      } else if (c >= '0' && c <= '9') {
        k.code = fmt::format("Digit{}", c);
        k.key_code = c;
      }
    }
    return k;
  }
  return std::nullopt;
}

// browser_navigate's URL: a bare host gets https://; only these schemes are opened.
Result<std::string> normalize_url(std::string url) {
  const size_t colon = url.find(':');
  std::string scheme;
  if (colon != std::string::npos) {
    scheme = url.substr(0, colon);
    for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool looks_like_scheme =
        !scheme.empty() && std::all_of(scheme.begin(), scheme.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
        });
    // "localhost:8080/x" is a host and port, not a scheme.
    const bool port_follows =
        colon + 1 < url.size() && std::isdigit(static_cast<unsigned char>(url[colon + 1]));
    if (!looks_like_scheme || port_follows) scheme.clear();
  }
  if (scheme.empty()) return "https://" + url;
  if (scheme == "http" || scheme == "https" || scheme == "file" || scheme == "about" ||
      scheme == "data")
    return url;
  return invalid_argument(fmt::format(
      "browser_navigate opens http, https, file, data and about URLs, not {}:", scheme));
}

}  // namespace

// One call at a time: the DevTools connection has one reader (cdp::Connection).
struct BrowserTools::Busy {
  explicit Busy(BrowserTools& t) : tools(t) {}
  ~Busy() {
    tools.busy_ = false;
    if (!tools.waiters_.empty()) {
      tools.waiters_.front()->cancel();
      tools.waiters_.pop_front();
    }
  }
  BrowserTools& tools;
};

BrowserTools::BrowserTools(net::Executor executor, BrowserConfig config)
    : executor_(std::move(executor)), config_(std::move(config)) {}

BrowserTools::~BrowserTools() { kill_now(); }

BrowserConfig browser_config_for(const ExecConfig& exec) {
  BrowserConfig c;
  c.desktop_user = exec.desktop_user;
  return c;
}

json BrowserTools::defs() const { return tools::browser_tools(); }

bool BrowserTools::handles(std::string_view name) {
  return tools::find_tool(tools::browser_tools(), name) != nullptr;
}

void BrowserTools::kill_now() {
  cdp_.reset();
  if (process_) (void)process_->kill_group();
  kill_profile_processes(profile_);
  remove_singleton_files(profile_, profile_user_ ? &*profile_user_ : nullptr);
}

asio::awaitable<void> BrowserTools::shutdown() {
  kill_now();
  if (process_) {
    // SIGKILL was sent: the reap is prompt, the deadline only guards against the impossible.
    auto status = co_await net::with_deadline(process_->wait(), net::after(std::chrono::seconds(5)),
                                              "reaping the browser");
    (void)status;
    process_.reset();
  }
  refs_.clear();
  refs_gone_ = "the browser was stopped";
  refs_from_ = next_ref_;
  dialog_ = Dialog();
}

asio::awaitable<void> BrowserTools::lost() {
  cdp_.reset();
  session_.clear();
  dialog_ = Dialog();
  if (process_ && !process_alive(process_->pid())) {
    auto status = co_await process_->wait();
    log_lost(status.ok() ? status->to_string() : std::string(status.status().message()));
    (void)process_->kill_group();  // helpers left in the group
    kill_profile_processes(profile_);
    remove_singleton_files(profile_, profile_user_ ? &*profile_user_ : nullptr);
    process_.reset();
    refs_.clear();
    refs_gone_ = "the browser restarted";
    refs_from_ = next_ref_;
  }
}

asio::awaitable<Status> BrowserTools::ensure() {
  if (process_ && !process_alive(process_->pid())) co_await lost();
  if (!process_) {
    Status s = co_await start();
    if (!s.ok()) {
      kill_now();
      process_.reset();
      co_return s;
    }
  }
  if (!cdp_ || !cdp_->is_open()) {
    Status s = co_await attach();
    if (!s.ok()) {
      cdp_.reset();
      co_return s;
    }
  }
  co_return Status();
}

asio::awaitable<Status> BrowserTools::start() {
  auto user = resolve_exec_user(config_.desktop_user, ::geteuid());
  if (!user.ok()) co_return user.status();
  const std::string program = find_chromium(config_.chromium);
  if (program.empty())
    co_return failed_precondition(
        "no Chromium in the box: install the Debian package chromium (scripts/setup does)");
  fs::path profile = config_.profile_dir;
  fs::path stop;
  if (profile.empty()) {
    stop = user->account.home;
    std::error_code ec;
    if (stop.empty() || !fs::is_directory(stop, ec))
      co_return failed_precondition(
          fmt::format("the browser's profile goes under the home of {}, but {} is not a directory",
                      user->account.name, stop.string()));
    profile = stop / ".cache" / "cocoonbox" / "chromium";
  } else {
    stop = profile.root_path();
  }
  profile = profile.lexically_normal();
  if (Status s = make_owned_dirs(profile, stop, *user); !s.ok()) co_return s;
  profile_ = profile;
  profile_user_ = *user;
  // A browser left by a crashed agent holds the profile (Chromium would hand our start over to
  // it and exit): kill it, and drop its singleton files and its old port.
  if (int n = kill_profile_processes(profile); n > 0)
    log::warn("browser: killed processes left on the profile", {{"count", n}});
  remove_singleton_files(profile, &*profile_user_);
  const fs::path log_path = profile / "cocoonbox-chromium.log";

  proc::SpawnOptions o;
  // sh only redirects Chromium's stderr to the log (the agent cannot pump it) and execs it.
  o.argv = {"/bin/sh",
            "-c",
            "exec \"$0\" \"$@\" >/dev/null 2>\"$CB_CHROMIUM_LOG\"",
            program,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-crash-reporter",
            "--disable-breakpad",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--mute-audio",
            "--password-store=basic",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--user-data-dir=" + profile.string(),
            fmt::format("--window-size={},{}", config_.width, config_.height),
            "about:blank"};
  const std::string home = user->account.home.empty() ? profile.string() : user->account.home;
  std::error_code hec;
  const bool home_ok = fs::is_directory(home, hec);
  o.env = {"HOME=" + (home_ok ? home : profile.string()),
           "USER=" + user->account.name,
           "LOGNAME=" + user->account.name,
           "PATH=" + std::string(kExecPath),
           "LANG=" + std::string(kExecLang),
           "CB_CHROMIUM_LOG=" + log_path.string()};
  o.cwd = profile;
  if (user->switch_user) o.user = user->account.name;
  o.new_session = true;
  // An agent killed with -9 runs no destructor: the kernel kills the browser then, and its
  // helpers follow it (kill_profile_processes() at the next start stays as the fallback).
  o.parent_death_signal = SIGKILL;
  o.stdin_mode = proc::Stdio::kNull;
  o.stdout_mode = proc::Stdio::kNull;
  o.stderr_mode = proc::Stdio::kNull;
  auto process = proc::spawn(executor_, o);
  if (!process.ok()) co_return process.status().with_prefix("starting Chromium");
  process_.emplace(std::move(*process));

  // Chromium writes "PORT\n/devtools/browser/ID" once it listens.
  const net::Deadline deadline = net::after(config_.start_timeout);
  net::Timer timer(executor_);
  while (true) {
    std::ifstream f(profile / "DevToolsActivePort");
    std::string port_line, path_line;
    if (std::getline(f, port_line) && std::getline(f, path_line) && !path_line.empty()) {
      char* end = nullptr;
      const long port = std::strtol(port_line.c_str(), &end, 10);
      if (port > 0 && port < 65536 && end != port_line.c_str()) {
        port_ = static_cast<uint16_t>(port);
        ws_path_ = path_line;
        break;
      }
    }
    if (!process_alive(process_->pid())) {
      auto st = co_await process_->wait();
      std::string why = st.ok() ? st->to_string() : std::string(st.status().message());
      co_return unavailable(fmt::format("Chromium ({}) {} before opening its debugging port: {}",
                                        program, why, tail_of_file(log_path, 1500)));
    }
    if (std::chrono::steady_clock::now() >= deadline)
      co_return deadline_exceeded(fmt::format(
          "Chromium did not open its debugging port within {} s: {}",
          std::chrono::duration_cast<std::chrono::seconds>(config_.start_timeout).count(),
          tail_of_file(log_path, 1500)));
    timer.expires_after(std::chrono::milliseconds(50));
    auto [wec] = co_await timer.async_wait();
    if (wec) co_return cancelled("cancelled while starting the browser");
  }
  log_started(process_->pid(), user->account.name, profile, port_);
  co_return Status();
}

asio::awaitable<Status> BrowserTools::attach() {
  const net::Deadline deadline = net::after(config_.command_timeout);
  auto conn = co_await cdp::Connection::connect(executor_, std::string(kLoopback), port_, ws_path_,
                                                deadline);
  if (!conn.ok()) co_return conn.status();
  cdp_ = std::move(*conn);
  auto targets = co_await cdp_->call("Target.getTargets", json::object(), "", deadline);
  if (!targets.ok()) co_return targets.status();
  std::string target_id;
  for (const auto& t : targets->value("targetInfos", json::array())) {
    if (t.value("type", std::string()) == "page") {
      target_id = t.value("targetId", std::string());
      break;
    }
  }
  if (target_id.empty()) {
    json params = {{"url", "about:blank"}};
    auto created = co_await cdp_->call("Target.createTarget", std::move(params), "", deadline);
    if (!created.ok()) co_return created.status();
    target_id = created->value("targetId", std::string());
  }
  json attach_params = {{"targetId", target_id}, {"flatten", true}};
  auto attached =
      co_await cdp_->call("Target.attachToTarget", std::move(attach_params), "", deadline);
  if (!attached.ok()) co_return attached.status();
  session_ = attached->value("sessionId", std::string());
  if (session_.empty()) co_return internal_error("Target.attachToTarget gave no sessionId");
  auto enabled = co_await cdp_->call("Page.enable", json::object(), session_, deadline);
  if (!enabled.ok()) co_return enabled.status();
  json lifecycle = {{"enabled", true}};
  auto lifecycle_on = co_await cdp_->call("Page.setLifecycleEventsEnabled", std::move(lifecycle),
                                          session_, deadline);
  if (!lifecycle_on.ok()) co_return lifecycle_on.status();
  dialog_ = Dialog();
  set_dialog_interrupts(*cdp_, true);
  json metrics = {{"width", config_.width},
                  {"height", config_.height},
                  {"deviceScaleFactor", 1},
                  {"mobile", false}};
  auto sized = co_await cdp_->call("Emulation.setDeviceMetricsOverride", std::move(metrics),
                                   session_, deadline);
  if (!sized.ok()) co_return sized.status();
  co_return Status();
}

asio::awaitable<Result<json>> BrowserTools::page(std::string method, json params) {
  auto r = co_await cdp_->call(std::move(method), std::move(params), session_,
                               net::after(config_.command_timeout));
  if (!r.ok() && r.status().code() == Code::kAborted) {
    // A dialog opened: the page answers nothing until it is handled (run() reports it).
    absorb_dialog_events();
    interrupted_ = true;
  }
  co_return r;
}

void BrowserTools::absorb_dialog_events() {
  if (!cdp_) return;
  const std::string session = session_;
  auto is_dialog_event = [&session](const cdp::Event& e) {
    return e.session_id == session && (e.method == kDialogOpening || e.method == kDialogClosed);
  };
  while (auto e = cdp_->take_event(is_dialog_event)) {
    if (e->method == kDialogClosed) {
      dialog_.open = false;
      continue;
    }
    const json& p = e->params;
    dialog_.open = true;
    dialog_.type = p.is_object() ? p.value("type", std::string("alert")) : "alert";
    dialog_.message = p.is_object() ? p.value("message", std::string()) : "";
    dialog_.default_prompt = p.is_object() ? p.value("defaultPrompt", std::string()) : "";
    dialog_.url = p.is_object() ? p.value("url", std::string()) : "";
    ++dialogs_opened_;
  }
}

asio::awaitable<Status> BrowserTools::handle_dialog(bool accept, const std::string* prompt_text) {
  json params = {{"accept", accept}};
  if (prompt_text != nullptr) params["promptText"] = *prompt_text;
  // The dialog's opening event may still be unread on the socket: it must not interrupt the
  // command that answers it.
  set_dialog_interrupts(*cdp_, false);
  auto r = co_await cdp_->call("Page.handleJavaScriptDialog", std::move(params), session_,
                               net::after(config_.command_timeout));
  if (cdp_) set_dialog_interrupts(*cdp_, true);
  absorb_dialog_events();
  if (!r.ok()) {
    if (no_dialog_showing(r.status())) dialog_.open = false;
    co_return r.status();
  }
  dialog_.open = false;
  co_return Status();
}

std::string BrowserTools::dialog_note() const {
  const bool prompt = dialog_.type == "prompt";
  return fmt::format(
      "the page opened {} {} dialog: {}{}\nThe page is blocked until the dialog is answered: call "
      "browser_dialog with accept true (OK{}) or false (Cancel){}.",
      dialog_.type == "alert" ? "an" : "a", dialog_.type, quote(one_line(dialog_.message, 2000)),
      prompt ? fmt::format(" (default answer: {})", quote(one_line(dialog_.default_prompt, 300)))
             : std::string(),
      dialog_.type == "beforeunload" ? ": leave the page" : "",
      prompt ? ", and prompt_text for the answer" : "");
}

json BrowserTools::dialog_json() const {
  json d = {{"type", dialog_.type}, {"message", dialog_.message}, {"url", dialog_.url}};
  if (dialog_.type == "prompt") d["default_prompt"] = dialog_.default_prompt;
  return d;
}

asio::awaitable<Result<json>> BrowserTools::evaluate(std::string expression) {
  json params = {{"expression", std::move(expression)}, {"returnByValue", true}};
  auto r = co_await page("Runtime.evaluate", std::move(params));
  if (!r.ok()) co_return r.status();
  if (r->contains("exceptionDetails"))
    co_return failed_precondition("the page's script failed: " + (*r)["exceptionDetails"].dump());
  co_return r->value("result", json::object()).value("value", json(nullptr));
}

Result<SnapshotRef> BrowserTools::resolve_ref(const std::string& ref) const {
  if (refs_from_ == 0)
    return failed_precondition("no snapshot yet: call browser_snapshot and use a ref from it");
  auto it = refs_.find(ref);
  if (it != refs_.end()) return it->second;
  uint64_t n = 0;
  const bool numbered =
      ref.size() >= 2 && ref[0] == 'e' &&
      std::all_of(ref.begin() + 1, ref.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (numbered) n = std::strtoull(ref.c_str() + 1, nullptr, 10);
  if (numbered && n < refs_from_) {
    return failed_precondition(fmt::format(
        "ref {} is stale: it is from an earlier snapshot ({} since); refs are valid until the "
        "next snapshot, so call browser_snapshot again and use a ref from it",
        ref, refs_gone_.empty() ? "a newer snapshot was taken" : refs_gone_));
  }
  return failed_precondition(fmt::format(
      "no element [ref={}] in the latest snapshot: use a ref exactly as browser_snapshot shows it",
      ref));
}

ToolResult BrowserTools::failure(const Status& s) const {
  if (s.code() == Code::kCancelled) return text_result("cancelled", true);
  return text_result(std::string(s.message()), true);
}

asio::awaitable<Result<ToolResult>> BrowserTools::call(std::string_view name,
                                                       const json& arguments) {
  const json* tool = tools::find_tool(tools::browser_tools(), name);
  if (tool == nullptr) co_return not_found(fmt::format("no browser tool named {}", name));
  const json args = arguments.is_null() ? json::object() : arguments;
  Status valid = tools::check_arguments((*tool)["inputSchema"], args);
  if (!valid.ok()) co_return valid;
  const std::string tool_name(name);

  while (busy_) {
    net::Timer wake(executor_, net::kNoDeadline);
    waiters_.push_back(&wake);
    (void)co_await wake.async_wait();
    const bool cancelled_now =
        (co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none;
    if (cancelled_now) {
      waiters_.remove(&wake);
      co_return text_result("cancelled", true);
    }
  }
  busy_ = true;
  Busy guard(*this);
  ToolResult r = co_await run(tool_name, args);
  co_return r;
}

asio::awaitable<ToolResult> BrowserTools::run(std::string_view name, const json& args) {
  bool retried = false;
  while (true) {
    Status up = co_await ensure();
    if (!up.ok()) co_return failure(up.with_prefix("the browser is not available"));
    absorb_dialog_events();
    if (dialog_.open && blocked_by_dialog(name)) {
      ToolResult blocked =
          text_result(fmt::format("{} did nothing: {}", name, dialog_note()), true);
      blocked.structured = {{"dialog", dialog_json()}};
      co_return blocked;
    }
    interrupted_ = false;
    const uint64_t opened_before = dialogs_opened_;
    ToolResult r;
    if (name == "browser_navigate") {
      r = co_await navigate(args);
    } else if (name == "browser_snapshot") {
      r = co_await snapshot();
    } else if (name == "browser_click") {
      r = co_await click(args);
    } else if (name == "browser_type") {
      r = co_await type(args);
    } else if (name == "browser_press") {
      r = co_await press(args);
    } else if (name == "browser_scroll") {
      r = co_await scroll(args);
    } else if (name == "browser_dialog") {
      r = co_await dialog(args);
    } else {
      r = co_await screenshot();
    }
    // A connection that broke: the browser died (it may still be dying: give it a moment to be
    // reaped), or a cancelled write cut a frame (the browser lives; reconnect next time). A
    // browser that died is started again and the call tried once more on the new one.
    if (cdp_ && !cdp_->is_open() && process_ && !retried) {
      auto status = co_await net::with_deadline(
          process_->wait(), net::after(std::chrono::seconds(2)), "waiting for the browser");
      co_await lost();
      if (status.ok()) {
        retried = true;
        continue;
      }
    } else if (cdp_ && !cdp_->is_open()) {
      co_await lost();
    }
    absorb_dialog_events();
    if (dialog_.open && dialogs_opened_ != opened_before) {
      // The call made the page open a dialog (or met one it had opened meanwhile). A command
      // it cut short is no failure of the tool: the dialog is what happened.
      if (interrupted_ && r.is_error) {
        r = text_result(dialog_note());
      } else {
        r.content.push_back({{"type", "text"}, {"text", dialog_note()}});
      }
      if (!r.structured.is_object()) r.structured = json::object();
      r.structured["dialog"] = dialog_json();
    }
    co_return r;
  }
}

// ---- the tools ----------------------------------------------------------------------------

asio::awaitable<ToolResult> BrowserTools::navigate(const json& args) {
  auto url = normalize_url(args["url"].get<std::string>());
  if (!url.ok()) co_return failure(url.status());
  // What happened to dialogs on the way, for the result's first lines.
  std::string answered;
  absorb_dialog_events();
  if (dialog_.open) {
    const std::string what = fmt::format("{} dialog {}", dialog_.type, quote(dialog_.message));
    Status s = co_await handle_dialog(false, nullptr);
    if (!s.ok() && !no_dialog_showing(s)) co_return failure(s);
    answered += fmt::format("dismissed the {} that was open\n", what);
  }
  cdp_->clear_events();
  json params = {{"url", *url}};
  auto pending = co_await cdp_->send("Page.navigate", std::move(params), session_);
  if (!pending.ok()) co_return failure(pending.status());
  const net::Deadline nav_deadline = net::after(config_.command_timeout);
  std::optional<Result<json>> reply;
  while (!reply) {
    auto got = co_await cdp_->wait_reply(*pending, nav_deadline);
    if (got.ok() || got.status().code() != Code::kAborted) {
      reply.emplace(std::move(got));
      break;
    }
    // A dialog holds the navigation. The page's beforeunload asks to stay: the model asked to
    // go, so leave (accept) and wait on for the same reply. Any other dialog is the model's.
    absorb_dialog_events();
    if (!dialog_.open || dialog_.type != "beforeunload") {
      cdp_->forget(*pending);
      interrupted_ = true;
      co_return failure(got.status());
    }
    Status s = co_await handle_dialog(true, nullptr);
    if (!s.ok() && !no_dialog_showing(s)) {
      cdp_->forget(*pending);
      co_return failure(s);
    }
    answered += "left the page, which asked to stay (its beforeunload dialog was accepted)\n";
  }
  Result<json>& nav = *reply;
  if (!nav.ok()) co_return failure(nav.status());
  if (auto e = nav->find("errorText"); e != nav->end() && e->is_string() && !e->empty())
    co_return text_result(fmt::format("could not open {}: {}", *url, e->get<std::string>()), true);
  refs_.clear();
  if (refs_from_ != 0) {
    refs_gone_ = "the page was navigated since";
    refs_from_ = next_ref_;
  }
  std::string note;
  // A navigation within the document (a #fragment) has no loader and fires no load event.
  auto loader = nav->find("loaderId");
  if (loader != nav->end() && loader->is_string() && !loader->get<std::string>().empty()) {
    auto frame = nav->find("frameId");
    const std::string frame_id =
        frame != nav->end() && frame->is_string() ? frame->get<std::string>() : "";
    Status loaded = co_await wait_loaded(frame_id, loader->get<std::string>(),
                                         net::after(config_.navigate_timeout));
    if (!loaded.ok() && loaded.code() == Code::kAborted) {
      // A dialog while loading (an alert in onload): the page answers nothing until it is
      // handled, so its title cannot be read now; run() adds the dialog.
      absorb_dialog_events();
      ToolResult r =
          text_result(fmt::format("{}opened {} (a dialog stopped it loading)", answered, *url));
      r.structured = {{"url", *url}, {"title", ""}, {"loaded", false}};
      co_return r;
    }
    if (!loaded.ok()) {
      if (loaded.code() != Code::kDeadlineExceeded) co_return failure(loaded);
      note = fmt::format(
          " (still loading after {} s)",
          std::chrono::duration_cast<std::chrono::seconds>(config_.navigate_timeout).count());
    }
  }
  auto where = co_await evaluate("JSON.stringify([location.href, document.title])");
  if (!where.ok()) co_return failure(where.status());
  json pair = json::parse(where->is_string() ? where->get<std::string>() : "[]", nullptr, false);
  std::string href = pair.is_array() && pair.size() == 2 ? pair[0].get<std::string>() : *url;
  std::string title = pair.is_array() && pair.size() == 2 ? pair[1].get<std::string>() : "";
  const std::string shown_title = title.empty() ? std::string("(none)") : title;
  ToolResult r =
      text_result(fmt::format("{}opened {}{}\ntitle: {}\ncall browser_snapshot to read it",
                              answered, href, note, shown_title));
  r.structured = {{"url", href}, {"title", title}, {"loaded", note.empty()}};
  co_return r;
}

asio::awaitable<Status> BrowserTools::wait_loaded(const std::string& frame_id,
                                                  std::string loader_id, net::Deadline deadline) {
  const auto text = [](const json& o, const char* key) {
    auto v = o.find(key);
    return v != o.end() && v->is_string() ? v->get<std::string>() : std::string();
  };
  while (true) {
    auto event = co_await cdp_->wait_event("Page.lifecycleEvent", session_, deadline);
    if (!event.ok()) co_return event.status();
    const json& p = event->params;
    if (!p.is_object()) continue;
    const std::string name = text(p, "name"), loader = text(p, "loaderId");
    // The frame went on to another document (a script's or a meta refresh's redirect, or the
    // page navigating itself): that document's load ends the navigation.
    if (name == "init" && !frame_id.empty() && text(p, "frameId") == frame_id && !loader.empty() &&
        loader != loader_id) {
      loader_id = loader;
      continue;
    }
    if (name == "load" && loader == loader_id) co_return Status();
  }
}

asio::awaitable<ToolResult> BrowserTools::snapshot() {
  if (dialog_.open) {
    // The page answers nothing while its dialog is open: the dialog is what there is to see.
    ToolResult r = text_result(fmt::format("page: {}\n{}", dialog_.url, dialog_note()));
    r.structured = {{"dialog", dialog_json()}};
    co_return r;
  }
  auto tree = co_await page("Accessibility.getFullAXTree", json::object());
  if (!tree.ok()) co_return failure(tree.status());
  Snapshot s = render_snapshot(tree->value("nodes", json::array()), next_ref_,
                               config_.snapshot_lines, config_.snapshot_bytes);
  refs_from_ = next_ref_;
  refs_gone_.clear();
  next_ref_ = std::max(next_ref_, s.next_ref);
  refs_ = std::move(s.refs);
  auto where = co_await evaluate("location.href");
  std::string head;
  if (where.ok() && where->is_string()) head = "page: " + where->get<std::string>() + "\n";
  ToolResult r = text_result(head + s.text);
  r.structured = {{"lines", s.lines_total}, {"cut", s.cut}, {"refs", refs_.size()}};
  co_return r;
}

asio::awaitable<ToolResult> BrowserTools::click(const json& args) {
  const std::string ref = args["ref"].get<std::string>();
  auto target = resolve_ref(ref);
  if (!target.ok()) co_return failure(target.status());
  json node = {{"backendNodeId", target->backend_node_id}};
  auto scrolled = co_await page("DOM.scrollIntoViewIfNeeded", node);
  (void)scrolled;  // text nodes and the like cannot scroll themselves; the quads still tell
  auto quads = co_await page("DOM.getContentQuads", node);
  if (!quads.ok()) {
    co_return text_result(
        fmt::format("[ref={}] {} is no longer in the page ({}); take a new browser_snapshot", ref,
                    target->label, quads.status().message()),
        true);
  }
  double x = 0, y = 0;
  bool found = false;
  for (const auto& q : quads->value("quads", json::array())) {
    if (!q.is_array() || q.size() != 8) continue;
    double xs = 0, ys = 0, minx = 1e18, maxx = -1e18, miny = 1e18, maxy = -1e18;
    for (int i = 0; i < 4; ++i) {
      const double qx = q[2 * i].get<double>(), qy = q[2 * i + 1].get<double>();
      xs += qx, ys += qy;
      minx = std::min(minx, qx), maxx = std::max(maxx, qx);
      miny = std::min(miny, qy), maxy = std::max(maxy, qy);
    }
    if (maxx - minx < 1 || maxy - miny < 1) continue;
    x = xs / 4, y = ys / 4;
    found = true;
    break;
  }
  if (!found)
    co_return text_result(fmt::format("[ref={}] {} has no visible box to click (hidden or empty)",
                                      ref, target->label),
                          true);
  for (const char* type : {"mouseMoved", "mousePressed", "mouseReleased"}) {
    json ev = {{"type", type}, {"x", x}, {"y", y}, {"button", "left"}, {"clickCount", 1}};
    if (std::string_view(type) == "mouseMoved") ev["button"] = "none";
    if (std::string_view(type) == "mousePressed") ev["buttons"] = 1;
    auto sent = co_await page("Input.dispatchMouseEvent", std::move(ev));
    // A dialog the click opened holds the event's reply: the click happened.
    if (!sent.ok() && sent.status().code() == Code::kAborted && dialog_.open) break;
    if (!sent.ok()) co_return failure(sent.status());
  }
  ToolResult r = text_result(fmt::format("clicked {} [ref={}]", target->label, ref));
  r.structured = {{"x", x}, {"y", y}};
  co_return r;
}

asio::awaitable<ToolResult> BrowserTools::type(const json& args) {
  const std::string ref = args["ref"].get<std::string>();
  const std::string text = args["text"].get<std::string>();
  const bool submit = args.value("submit", false);
  auto target = resolve_ref(ref);
  if (!target.ok()) co_return failure(target.status());
  json node = {{"backendNodeId", target->backend_node_id}};
  auto object = co_await page("DOM.resolveNode", node);
  if (!object.ok()) {
    co_return text_result(
        fmt::format("[ref={}] {} is no longer in the page ({}); take a new browser_snapshot", ref,
                    target->label, object.status().message()),
        true);
  }
  const std::string object_id = object->value("object", json::object()).value("objectId", "");
  (void)co_await page("DOM.scrollIntoViewIfNeeded", node);
  // Focus the field and select what it holds, so the typed text replaces it.
  static constexpr std::string_view kSelectAll = R"js(function() {
    const el = this.nodeType === Node.TEXT_NODE ? this.parentElement : this;
    if (!el || typeof el.focus !== 'function') return 'not-editable';
    el.focus();
    const notText = ['button', 'checkbox', 'radio', 'submit', 'reset', 'file', 'image', 'color',
                     'range', 'hidden'];
    if (el.tagName === 'INPUT' && notText.includes(el.type)) return 'not-editable';
    if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') {
      if (el.readOnly || el.disabled) return 'read-only';
      try { el.select(); } catch (e) {}
      return 'field';
    }
    if (el.isContentEditable) {
      const range = document.createRange();
      range.selectNodeContents(el);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      return 'field';
    }
    return 'not-editable';
  })js";
  json call = {{"objectId", object_id},
               {"functionDeclaration", std::string(kSelectAll)},
               {"returnByValue", true}};
  auto focused = co_await page("Runtime.callFunctionOn", std::move(call));
  if (!focused.ok()) co_return failure(focused.status());
  const std::string kind = focused->value("result", json::object()).value("value", "");
  if (kind == "not-editable" || kind == "read-only") {
    co_return text_result(fmt::format("[ref={}] {} is not a field that takes text{}", ref,
                                      target->label, kind == "read-only" ? " (read-only)" : ""),
                          true);
  }
  if (text.empty()) {
    Status del = co_await press_key("Delete");
    if (!del.ok()) co_return failure(del);
  } else {
    json insert = {{"text", text}};
    auto inserted = co_await page("Input.insertText", std::move(insert));
    if (!inserted.ok()) co_return failure(inserted.status());
  }
  if (submit) {
    Status enter = co_await press_key("Enter");
    if (!enter.ok()) co_return failure(enter);
  }
  size_t chars = 0;
  for (char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  co_return text_result(fmt::format("typed {} characters into {} [ref={}]{}", chars, target->label,
                                    ref, submit ? " and pressed Enter" : ""));
}

asio::awaitable<Status> BrowserTools::press_key(std::string_view spec) {
  int modifiers = 0;
  std::string_view key = spec;
  // "Control+Shift+a": every part but the last is a modifier ("+" alone is the key itself).
  while (true) {
    const size_t plus = key.find('+');
    if (plus == std::string_view::npos || plus + 1 >= key.size()) break;
    const std::string_view mod = key.substr(0, plus);
    if (mod == "Alt") {
      modifiers |= 1;
    } else if (mod == "Control" || mod == "Ctrl") {
      modifiers |= 2;
    } else if (mod == "Meta" || mod == "Command") {
      modifiers |= 4;
    } else if (mod == "Shift") {
      modifiers |= 8;
    } else {
      co_return invalid_argument(
          fmt::format("unknown modifier {} in {}: use Alt, Control, Meta or Shift", mod, spec));
    }
    key = key.substr(plus + 1);
  }
  auto def = named_key(key);
  if (!def) {
    co_return invalid_argument(fmt::format(
        "unknown key {}: use one character or Enter, Tab, Escape, Backspace, Delete, Space, "
        "ArrowUp, ArrowDown, ArrowLeft, ArrowRight, Home, End, PageUp, PageDown, F1-F12",
        key));
  }
  // Text goes with the key unless a modifier other than Shift turns it into a shortcut.
  const bool with_text = !def->text.empty() && (modifiers & ~8) == 0;
  json down = {{"type", with_text ? "keyDown" : "rawKeyDown"},
               {"modifiers", modifiers},
               {"key", def->key},
               {"code", def->code},
               {"windowsVirtualKeyCode", def->key_code}};
  if (with_text) down["text"] = def->text;
  auto d = co_await page("Input.dispatchKeyEvent", std::move(down));
  if (!d.ok()) co_return d.status();
  json up = {{"type", "keyUp"},
             {"modifiers", modifiers},
             {"key", def->key},
             {"code", def->code},
             {"windowsVirtualKeyCode", def->key_code}};
  auto u = co_await page("Input.dispatchKeyEvent", std::move(up));
  if (!u.ok()) co_return u.status();
  co_return Status();
}

asio::awaitable<ToolResult> BrowserTools::press(const json& args) {
  const std::string key = args["key"].get<std::string>();
  Status s = co_await press_key(key);
  // A dialog the key opened (Enter on a form whose submit asks) holds the reply: it was pressed.
  const bool opened_dialog = s.code() == Code::kAborted && dialog_.open;
  if (!s.ok() && !opened_dialog) co_return failure(s);
  co_return text_result(fmt::format("pressed {}", key));
}

asio::awaitable<ToolResult> BrowserTools::scroll(const json& args) {
  if (args.contains("ref")) {
    if (args.contains("direction") || args.contains("amount"))
      co_return text_result("give either ref, or direction (and amount), not both", true);
    const std::string ref = args["ref"].get<std::string>();
    auto target = resolve_ref(ref);
    if (!target.ok()) co_return failure(target.status());
    json node = {{"backendNodeId", target->backend_node_id}};
    auto s = co_await page("DOM.scrollIntoViewIfNeeded", std::move(node));
    if (!s.ok()) {
      co_return text_result(fmt::format("could not scroll to [ref={}] {}: {}", ref, target->label,
                                        s.status().message()),
                            true);
    }
    co_return text_result(fmt::format("scrolled {} [ref={}] into view", target->label, ref));
  }
  if (!args.contains("direction"))
    co_return text_result("give direction (up, down, left, right) or ref", true);
  const std::string direction = args["direction"].get<std::string>();
  const int64_t amount = args.value("amount", int64_t{600});
  double dx = 0, dy = 0;
  if (direction == "up") dy = -static_cast<double>(amount);
  if (direction == "down") dy = static_cast<double>(amount);
  if (direction == "left") dx = -static_cast<double>(amount);
  if (direction == "right") dx = static_cast<double>(amount);
  json wheel = {{"type", "mouseWheel"},
                {"x", config_.width / 2},
                {"y", config_.height / 2},
                {"deltaX", dx},
                {"deltaY", dy}};
  auto s = co_await page("Input.dispatchMouseEvent", std::move(wheel));
  if (!s.ok()) co_return failure(s.status());
  co_return text_result(fmt::format("scrolled {} by {} px", direction, amount));
}

asio::awaitable<ToolResult> BrowserTools::dialog(const json& args) {
  const bool accept = args["accept"].get<bool>();
  std::optional<std::string> text;
  if (args.contains("prompt_text")) text = args["prompt_text"].get<std::string>();
  Status s = co_await handle_dialog(accept, text ? &*text : nullptr);
  if (!s.ok() && no_dialog_showing(s))
    co_return text_result("no dialog is open on the page: nothing to answer", true);
  if (!s.ok()) co_return failure(s);
  // dialog_ still describes the dialog just answered (its opening event may only have been
  // read while answering it).
  std::string with;
  if (accept && dialog_.type == "prompt")
    with = fmt::format(" with {}", quote(text ? *text : dialog_.default_prompt));
  ToolResult r =
      text_result(fmt::format("{} the {} dialog {}{}", accept ? "accepted" : "dismissed",
                              dialog_.type, quote(one_line(dialog_.message, 2000)), with));
  r.structured = {{"accepted", accept}, {"dialog", dialog_json()}};
  co_return r;
}

asio::awaitable<ToolResult> BrowserTools::screenshot() {
  json params = {{"format", "png"}};
  auto shot = co_await page("Page.captureScreenshot", std::move(params));
  if (!shot.ok()) co_return failure(shot.status());
  ToolResult r;
  auto where = co_await evaluate("location.href");
  const std::string url = where.ok() && where->is_string() ? where->get<std::string>() : "";
  r.content.push_back(
      {{"type", "text"},
       {"text", fmt::format("screenshot of {} ({}x{})", url, config_.width, config_.height)}});
  r.content.push_back(
      {{"type", "image"}, {"data", shot->value("data", "")}, {"mimeType", "image/png"}});
  co_return r;
}

}  // namespace cb::agent
