#include "roles/api/machines/local.h"

#include "base/log.h"
#include "net/asio.h"
#include "net/stream.h"
#include "proc/spawn.h"
#include "roles/api/machines/local_internal.h"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_future.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <deque>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sstream>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace cb::api::machines {

namespace fs = std::filesystem;
using internal::errno_status;
using internal::read_keyed;
using internal::read_proc_stat;
using internal::UniqueFd;
using internal::write_file;

struct LocalBackend::Box {
  std::string id;
  fs::path box_dir;
  pid_t pid = -1;  // the box init, in the api's pid namespace
  uint64_t start_time = 0;
  UniqueFd pidfd;  // refers to exactly that process, whatever happens to the pid number
  std::optional<fs::path> cgroup;
  bool isolated = false;
  bool exited = false;
  bool busy = false;  // a lifecycle coroutine is working on the box

  bool cgroup_freezer() const { return cgroup && fs::exists(*cgroup / "cgroup.freeze"); }
};

struct LocalBackend::AgentCommand {
  std::string program;            // the path the init execs
  std::vector<std::string> argv;  // argv[0] as the caller gave it
  std::vector<std::string> env;
  std::string cwd;
};

namespace {

constexpr unsigned long kNamespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC;
// P_PIDFD from <linux/wait.h> (Linux >= 5.4); glibc 2.36's idtype_t does not name it.
constexpr int kPPidfd = 3;
// MFD_EXEC (Linux >= 6.3): an executable memfd even where vm.memfd_noexec says otherwise.
constexpr unsigned kMfdExec = 0x0010U;
constexpr const char* kUserPath = "/usr/local/bin:/usr/bin:/bin";
// How often the waits below look at /proc and cgroup files. The kernel offers no event for a
// SIGSTOP taking effect, and polling cgroup.events keeps one mechanism for both methods.
constexpr auto kPollInterval = std::chrono::milliseconds(10);

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// fork(2) semantics (a copy of the address space, continuing on the same stack) plus
// namespace flags. glibc's clone() insists on a new stack and unshare(CLONE_NEWNS) is refused
// in a multithreaded process. The child makes only raw system calls (local_child.cc).
pid_t clone_process(unsigned long flags) {
  return static_cast<pid_t>(::syscall(SYS_clone, flags | SIGCHLD, 0UL, 0UL, 0UL, 0UL));
}

// Blocks every signal while it lives, so no handler of the api runs in a cloned child
// before it has reset the dispositions.
class SignalBlock {
 public:
  SignalBlock() {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~SignalBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

 private:
  sigset_t old_;
};

// Moves |fd| above 2, so the child's dup2() onto stdio cannot overwrite it.
Result<UniqueFd> above_stdio(UniqueFd fd) {
  if (!fd.valid() || fd.get() > 2) return fd;
  UniqueFd moved(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
  if (!moved.valid()) return errno_status(errno, "fcntl(F_DUPFD_CLOEXEC)");
  return moved;
}

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_status(errno, "pipe2");
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  ASSIGN_OR_RETURN(p.read, above_stdio(std::move(p.read)));
  ASSIGN_OR_RETURN(p.write, above_stdio(std::move(p.write)));
  return p;
}

Result<UniqueFd> open_fd(const fs::path& path, int flags, mode_t mode = 0) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC, mode));
  if (!fd.valid()) return errno_status(errno, fmt::format("open {}", path.string()));
  return above_stdio(std::move(fd));
}

// Empty when mount, pid, uts and ipc namespaces, private mounts and mount_setattr(2) work
// here; else why not. Clones a child that tries them in namespaces of its own.
std::string probe_namespaces() {
  auto pipe = make_pipe();
  if (!pipe.ok()) return pipe.status().to_string();
  const int report_fd = pipe->write.get();
  pid_t pid;
  int clone_errno = 0;
  {
    SignalBlock block;
    pid = clone_process(kNamespaces);
    if (pid == 0) {
      // The child: raw system calls only (see local_child.cc). It changes nothing outside
      // its own, private copy of the mount table.
      int32_t rec[2] = {0, 0};
      struct mount_attr attr;
      ::memset(&attr, 0, sizeof attr);
      attr.attr_set = MOUNT_ATTR_RDONLY;
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        rec[0] = 1;
      } else if (::mount("tmpfs", "/", "tmpfs", 0, "size=16k") != 0) {
        rec[0] = 2;
      } else if (::syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) !=
                 0) {
        rec[0] = 3;
      }
      rec[1] = errno;
      if (rec[0] != 0) [[maybe_unused]]
        ssize_t n = ::write(report_fd, rec, sizeof rec);
      ::_exit(rec[0] == 0 ? 0 : 1);
    }
    clone_errno = errno;
  }
  if (pid < 0) {
    return fmt::format("clone(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWUTS|CLONE_NEWIPC) failed: {}",
                       errno_text(clone_errno));
  }
  pipe->write.reset();
  int32_t rec[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(pipe->read.get(), rec, sizeof rec);
  } while (n < 0 && errno == EINTR);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof rec)) {
    constexpr const char* kSteps[] = {"", "making mounts private", "mounting a tmpfs",
                                      "mount_setattr(2) (Linux >= 5.12)"};
    return fmt::format("{} failed in a new mount namespace: {}", kSteps[rec[0] & 3],
                       errno_text(rec[1]));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the namespace probe died";
  return {};
}

// The cgroup v2 setup: where box cgroups go, and what works there.
struct CgroupSetup {
  std::optional<fs::path> dir;
  FreezeMethod freeze = FreezeMethod::kSigstop;
  bool memory = false;
  bool cpu = false;
  std::string note;  // what is missing, for isolation_note() and logs
};

bool has_word(const fs::path& file, std::string_view word) {
  auto text = internal::read_small_file(file);
  if (!text.ok()) return false;
  std::istringstream in(*text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

CgroupSetup probe_cgroups(const LocalOptions& options) {
  CgroupSetup setup;
  if (options.disable_cgroups) {
    setup.note = "cgroups are disabled by configuration";
    return setup;
  }
  auto root = options.cgroup_v2_root ? options.cgroup_v2_root : internal::find_cgroup2_mount();
  if (!root) {
    setup.note = "no cgroup v2 hierarchy is mounted";
    return setup;
  }
  fs::path dir = *root / options.cgroup_parent;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    setup.note = fmt::format("cannot create {}: {}", dir.string(), errno_text(errno));
    return setup;
  }
  // A throwaway child shows which interface files a box cgroup will have. The leading '_'
  // keeps it apart from box ids.
  fs::path probe = dir / fmt::format("_probe-{}", ::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    setup.note = fmt::format("cannot create {}: {}", probe.string(), errno_text(errno));
    return setup;
  }
  bool freeze = fs::exists(probe / "cgroup.freeze");
  ::rmdir(probe.c_str());
  setup.dir = dir;
  setup.freeze = freeze ? FreezeMethod::kCgroupFreezer : FreezeMethod::kSigstop;
  std::vector<std::string> missing;
  if (!freeze) missing.push_back("cgroup.freeze (Linux >= 5.2)");
  // Limits need the controller enabled for the children of the root and of |dir|.
  for (std::string_view controller : {"memory", "cpu"}) {
    bool ok = has_word(*root / "cgroup.controllers", controller);
    std::string enable = fmt::format("+{}", controller);
    if (ok && !has_word(*root / "cgroup.subtree_control", controller)) {
      ok = write_file(*root / "cgroup.subtree_control", enable).ok();
    }
    if (ok && !has_word(dir / "cgroup.subtree_control", controller)) {
      ok = write_file(dir / "cgroup.subtree_control", enable).ok();
    }
    (controller == "memory" ? setup.memory : setup.cpu) = ok;
    if (!ok) missing.push_back(fmt::format("the {} controller", controller));
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    setup.note = fmt::format("cgroup v2 at {} lacks {}", root->string(), list);
  }
  return setup;
}

// Runs a host tool to completion (blocking), returning its stderr on failure.
asio::awaitable<Status> run_tool_async(std::vector<std::string> argv) {
  proc::SpawnOptions o;
  o.argv = std::move(argv);
  o.env.push_back("PATH=/usr/sbin:/usr/bin:/sbin:/bin");
  o.stdin_mode = proc::Stdio::kNull;
  o.stdout_mode = proc::Stdio::kNull;
  CO_ASSIGN_OR_RETURN(proc::Process p, proc::spawn(co_await asio::this_coro::executor, o));
  std::string err;
  char buf[512];
  while (true) {
    auto [ec, n] = co_await p.stderr_pipe()->async_read_some(asio::buffer(buf));
    err.append(buf, n);
    if (ec) break;
  }
  CO_ASSIGN_OR_RETURN(proc::ExitStatus st, co_await p.wait());
  if (!st.success()) {
    while (!err.empty() && err.back() == '\n') err.pop_back();
    co_return internal_error(fmt::format("{} {}: {}", o.argv[0], st.to_string(), err));
  }
  co_return ok_status();
}

Status run_tool(std::vector<std::string> argv) {
  asio::io_context io;
  auto done = asio::co_spawn(io, run_tool_async(std::move(argv)), asio::use_future);
  io.run();
  try {
    return done.get();
  } catch (const std::exception& e) {
    return internal_error(fmt::format("running a host tool: {}", e.what()));
  }
}

// A system user the boxes run as (|name|), created when missing and |create| is set.
// Several api processes (or tests) may race to create it; useradd then fails for all but
// one, and the lookup settles it.
Result<proc::User> ensure_user(const std::string& name, bool create, const char* comment) {
  Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto user = proc::lookup_user(name);
    if (user.ok()) {
      if (user->uid == 0 || user->gid == 0) {
        return failed_precondition(fmt::format("box user {} is root or in group root", name));
      }
      return user;
    }
    if (!create) {
      return failed_precondition(
          fmt::format("box user {} does not exist: {}", name, user.status().message()));
    }
    last = run_tool({"useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                     "/home/user", "--shell", "/bin/sh", "--comment", comment, name});
    if (last.ok()) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * (attempt + 1)));
  }
  return failed_precondition(fmt::format("cannot create box user {}: {}", name, last.message()));
}

// The id maps of a box's user namespace (README.md §Privilege split): in-box root is
// |agent| on the host, the desktop account is itself, and nothing else exists in the box.
// Written by the api (root in the parent namespace, so two entries are allowed), once.
Status write_id_maps(pid_t pid, const proc::User& agent, const proc::User& desktop) {
  fs::path dir = fs::path("/proc") / std::to_string(pid);
  RETURN_IF_ERROR(write_file(dir / "uid_map",
                             fmt::format("0 {} 1\n{} {} 1\n", agent.uid, desktop.uid, desktop.uid))
                      .with_prefix("uid_map"));
  return write_file(dir / "gid_map",
                    fmt::format("0 {} 1\n{} {} 1\n", agent.gid, desktop.gid, desktop.gid))
      .with_prefix("gid_map");
}

// Empty when a child can enter a user namespace of its own and get the two-entry id maps of
// a box; else why not. Blocks briefly (one clone, two pipes).
std::string probe_user_namespace(const proc::User& agent, const proc::User& desktop) {
  auto ready = make_pipe();
  auto go = make_pipe();
  if (!ready.ok()) return ready.status().to_string();
  if (!go.ok()) return go.status().to_string();
  const int ready_fd = ready->write.get();
  const int go_fd = go->read.get();
  const int go_write_fd = go->write.get();
  pid_t pid;
  int clone_errno = 0;
  {
    SignalBlock block;
    pid = clone_process(0);
    if (pid == 0) {
      // The child: raw system calls only (see local_child.cc).
      ::close(go_write_fd);
      int32_t err = ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
      [[maybe_unused]] ssize_t n = ::write(ready_fd, &err, sizeof err);
      if (err != 0) ::_exit(1);
      char byte = 0;
      if (::read(go_fd, &byte, 1) != 1) ::_exit(1);
      // Root of the namespace: the agent's identity in a box.
      bool root = ::syscall(SYS_setresgid, 0, 0, 0) == 0 && ::syscall(SYS_setresuid, 0, 0, 0) == 0;
      ::_exit(root ? 0 : 2);
    }
    clone_errno = errno;
  }
  if (pid < 0) return fmt::format("clone failed: {}", errno_text(clone_errno));
  ready->write.reset();
  go->read.reset();
  int32_t err = -1;
  ssize_t n;
  do {
    n = ::read(ready->read.get(), &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  std::string why;
  if (n != static_cast<ssize_t>(sizeof err)) {
    why = "the user namespace probe died";
  } else if (err != 0) {
    why = fmt::format("unshare(CLONE_NEWUSER) failed: {}", errno_text(err));
  } else if (Status mapped = write_id_maps(pid, agent, desktop); !mapped.ok()) {
    why = fmt::format("writing a box's id maps failed: {}", mapped.message());
  } else if (::write(go->write.get(), "g", 1) != 1) {
    why = "the user namespace probe died";
  }
  go->write.reset();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (why.empty() && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
    why = "the user namespace probe could not become root of its namespace";
  }
  return why;
}

// Hands a box directory made before the privilege split (its entries owned by the agent's
// account) to the desktop account: every entry of |from| becomes |to|'s. lchown and no
// symlink followed, so a link planted in the box cannot redirect it. Blocking, once per box.
Status hand_over(const fs::path& dir, const proc::User& from, const proc::User& to) {
  auto give = [&](const fs::path& p) -> Status {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0)
      return errno_status(errno, fmt::format("lstat {}", p.string()));
    if (st.st_uid != from.uid && st.st_gid != from.gid) return ok_status();
    uid_t uid = st.st_uid == from.uid ? to.uid : st.st_uid;
    gid_t gid = st.st_gid == from.gid ? to.gid : st.st_gid;
    if (::lchown(p.c_str(), uid, gid) != 0) {
      return errno_status(errno, fmt::format("chown {}", p.string()));
    }
    // chown clears set-id bits; a directory's setgid bit is worth keeping.
    if (S_ISDIR(st.st_mode) && (st.st_mode & S_ISGID) != 0) ::chmod(p.c_str(), st.st_mode & 07777);
    return ok_status();
  };
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    RETURN_IF_ERROR(give(it->path()));
  }
  if (ec) return errno_status(ec.value(), fmt::format("walk {}", dir.string()));
  return give(dir);
}

// The init, in a sealed memfd that every start() execs.
Result<UniqueFd> make_init_fd() {
  auto elf = internal::box_init_elf();
  int fd = ::memfd_create("cocoonbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | kMfdExec);
  if (fd < 0 && errno == EINVAL)
    fd = ::memfd_create("cocoonbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno_status(errno, "memfd_create");
  UniqueFd owned(fd);
  std::size_t done = 0;
  while (done < elf.size()) {
    ssize_t n = ::write(fd, elf.data() + done, elf.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "write the box init");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0555) != 0) return errno_status(errno, "chmod the box init");
  // Sealed, so nothing can change the program every box runs as its pid 1.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    return errno_status(errno, "seal the box init");
  }
  return above_stdio(std::move(owned));
}

asio::awaitable<Result<std::optional<cb_box_report>>> read_report(proc::Descriptor& pipe) {
  cb_box_report r;
  ::memset(&r, 0, sizeof r);
  std::size_t got = 0;
  while (got < sizeof r) {
    auto [ec, n] = co_await pipe.async_read_some(
        asio::buffer(reinterpret_cast<char*>(&r) + got, sizeof r - got));
    got += n;
    if (ec == asio::error::eof) break;
    if (ec == asio::error::operation_aborted) co_return cancelled("box start");
    if (ec) co_return internal_error(fmt::format("box start: read report: {}", ec.message()));
  }
  if (got == sizeof r) co_return std::optional<cb_box_report>(r);
  if (got == 0) co_return std::optional<cb_box_report>();
  co_return internal_error("box start: truncated report");
}

// Runs |op| with throw_if_cancelled off, so that the cleanup after a cancellation (killing
// a half-started tree, thawing a half-frozen one) can still co_await, and gives the caller its
// own setting back afterwards: Asio keeps the flag for the whole coroutine thread.
asio::awaitable<Status> uninterruptible(asio::awaitable<Status> op) {
  bool previous = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  Status result = co_await std::move(op);
  co_await asio::this_coro::throw_if_cancelled(previous);
  co_return result;
}

// Waits one poll interval. kDeadlineExceeded once |deadline| has passed; kCancelled when the
// caller's operation was cancelled.
asio::awaitable<Status> pause(net::Deadline deadline) {
  if (std::chrono::steady_clock::now() >= deadline) co_return deadline_exceeded("deadline");
  net::Timer timer(co_await asio::this_coro::executor,
                   std::min(net::after(kPollInterval), deadline));
  auto [ec] = co_await timer.async_wait();
  if (ec) co_return cancelled("cancelled");
  co_return ok_status();
}

// The endpoint's dialer. The agent owns agent.sock and could replace it with a symlink to
// any socket of the host; so the file is opened without following links, checked to be a
// socket owned by the box's user (or root), and connected to through /proc/self/fd.
asio::awaitable<Result<std::unique_ptr<net::Stream>>> dial_agent(std::string path, uid_t owner,
                                                                 net::Deadline deadline) {
  UniqueFd fd(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    co_return unavailable(fmt::format("agent socket {}: {}", path, errno_text(errno)));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    co_return unavailable(fmt::format("agent socket {}: {}", path, errno_text(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) co_return unavailable(fmt::format("{} is not a socket", path));
  if (st.st_uid != owner && st.st_uid != 0) {
    co_return unavailable(fmt::format("{} belongs to uid {}, not the box", path, st.st_uid));
  }
  auto ex = co_await asio::this_coro::executor;
  auto socket = co_await net::dial_unix(ex, fmt::format("/proc/self/fd/{}", fd.get()), deadline);
  if (!socket.ok()) co_return socket.status().with_prefix(path);
  co_return net::make_stream(std::move(socket).value());
}

// Rewrites an in-box path (or a "--flag=<path>" word) to its place under |box_dir|, for
// plain mode where the agent sees the host's file system.
std::string to_host_path(std::string_view word, const fs::path& box_dir) {
  std::size_t start = 0;
  if (word.starts_with("--")) {
    auto eq = word.find('=');
    if (eq != std::string_view::npos) start = eq + 1;
  }
  std::string_view value = word.substr(start);
  for (const auto& p : kBoxPaths) {
    if (value == p.in_box || (value.starts_with(p.in_box) && value.size() > p.in_box.size() &&
                              value[p.in_box.size()] == '/')) {
      return fmt::format("{}{}{}", word.substr(0, start), (box_dir / p.box_dir).string(),
                         value.substr(p.in_box.size()));
    }
  }
  return std::string(word);
}

std::string_view env_name(std::string_view entry) { return entry.substr(0, entry.find('=')); }

void set_env(std::vector<std::string>& env, std::string entry) {
  for (auto& existing : env) {
    if (env_name(existing) == env_name(entry)) {
      existing = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

// <box_dir>/machine.json (README.md §Adoption).
struct MachineRecord {
  std::string box_id;
  pid_t pid = 0;
  uint64_t start_time = 0;
  std::optional<fs::path> cgroup;
  bool isolated = false;
};

std::string record_json(const MachineRecord& r) {
  nlohmann::json j;
  j["version"] = 1;
  j["box_id"] = r.box_id;
  j["pid"] = r.pid;
  j["start_time"] = r.start_time;
  j["cgroup"] = r.cgroup ? nlohmann::json(r.cgroup->string()) : nlohmann::json(nullptr);
  j["isolated"] = r.isolated;
  return j.dump();
}

// Errors: kNotFound (no record); kDataLoss (not a record); as read_small_file().
Result<MachineRecord> read_record(const fs::path& box_dir) {
  fs::path path = box_dir / kMachineRecord;
  auto text = internal::read_small_file(path);
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&]() { return data_loss(fmt::format("{} is not a machine record", path.string())); };
  if (!j.is_object()) return bad();
  auto field = [&](const char* key) -> const nlohmann::json* {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const auto* box_id = field("box_id");
  const auto* pid = field("pid");
  const auto* start_time = field("start_time");
  const auto* cgroup = field("cgroup");
  const auto* isolated = field("isolated");
  if (!box_id || !box_id->is_string() || !pid || !pid->is_number_integer() || !start_time ||
      !start_time->is_number_unsigned()) {
    return bad();
  }
  MachineRecord r;
  r.box_id = box_id->get<std::string>();
  r.pid = pid->get<pid_t>();
  r.start_time = start_time->get<uint64_t>();
  if (cgroup && cgroup->is_string()) r.cgroup = fs::path(cgroup->get<std::string>());
  r.isolated = isolated && isolated->is_boolean() && isolated->get<bool>();
  if (r.pid <= 0) return bad();
  return r;
}

// True if the recorded process still runs (same pid, same start time, not a zombie).
bool record_alive(const MachineRecord& r) {
  auto st = read_proc_stat(r.pid);
  return st.ok() && st->start_time == r.start_time && st->state != 'Z' && st->state != 'X';
}

// Logging lives outside the coroutines: gcc 12 mishandles braced initializer lists with
// string literals in coroutine bodies.
void log_box(std::string_view msg, std::string_view box) { log::info(msg, {{"box", box}}); }
void log_box_error(std::string_view msg, std::string_view box, const Status& s) {
  log::warn(msg, {{"box", box}, {"error", s.to_string()}});
}
void log_started(std::string_view box, pid_t pid, bool isolated) {
  log::info("machines: box started",
            {{"box", box}, {"pid", static_cast<int64_t>(pid)}, {"isolated", isolated}});
}
void log_limit_skipped(std::string_view what, std::string_view box, std::string_view reason) {
  log::info(what, {{"box", box}, {"reason", reason}});
}

// Plain mode as root: the agent, running as |user|, reaches box_dir through the host's own
// directories, so each ancestor must be searchable for it. Better said here than as EACCES
// from a chdir in the child.
Status check_reachable(const fs::path& box_dir, const proc::User& user) {
  for (fs::path p = box_dir.parent_path(); !p.empty(); p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return errno_status(errno, fmt::format("stat {}", p.string()));
    bool in_group =
        std::find(user.groups.begin(), user.groups.end(), st.st_gid) != user.groups.end() ||
        st.st_gid == user.gid;
    bool ok = (st.st_mode & S_IXOTH) != 0 || (st.st_uid == user.uid && (st.st_mode & S_IXUSR)) ||
              (in_group && (st.st_mode & S_IXGRP));
    if (!ok) {
      return failed_precondition(fmt::format(
          "box user {} cannot reach {}: {} is not searchable for it (plain mode uses the host's "
          "paths; make it o+x or put the data dir elsewhere)",
          user.name, box_dir.string(), p.string()));
    }
    if (p == p.parent_path()) break;
  }
  return ok_status();
}

Status validate_spec(const MachineSpec& spec) {
  RETURN_IF_ERROR(validate_box_id(spec.box_id));
  if (!spec.box_dir.is_absolute() || spec.box_dir.lexically_normal() == "/" ||
      spec.box_dir.native().find('\0') != std::string::npos) {
    return invalid_argument(
        fmt::format("box {}: box_dir \"{}\" must be an absolute directory below /", spec.box_id,
                    spec.box_dir.string()));
  }
  return ok_status();
}

}  // namespace

std::string_view to_string(FreezeMethod method) {
  return method == FreezeMethod::kCgroupFreezer ? "cgroup v2 freezer" : "SIGSTOP/SIGCONT";
}

LocalBackend::LocalBackend(LocalOptions options) : options_(std::move(options)) {}

LocalBackend::~LocalBackend() {
  if (init_fd_ >= 0) ::close(init_fd_);
}

Result<std::unique_ptr<LocalBackend>> LocalBackend::create(LocalOptions options) {
  std::unique_ptr<LocalBackend> b(new LocalBackend(std::move(options)));
  b->root_ = ::geteuid() == 0;
  if (b->options_.force_plain_processes) {
    b->plain_reason_ = "LocalOptions::force_plain_processes is set";
  } else if (!b->root_) {
    b->plain_reason_ = "the api does not run as root";
  } else {
    b->plain_reason_ = probe_namespaces();
  }
  b->isolated_ = b->plain_reason_.empty();
  if (b->root_) {
    ASSIGN_OR_RETURN(proc::User user, ensure_user(b->options_.box_user, b->options_.create_box_user,
                                                  "cocoonbox box agent"));
    b->box_user_ = std::move(user);
  }
  if (!b->root_) {
    b->split_note_ = "the api does not run as root";
  } else if (!b->isolated_) {
    b->split_note_ = "boxes are not isolated";
  } else if (!b->options_.split_users) {
    b->split_note_ = "LocalOptions::split_users is off";
  } else {
    std::string name = b->options_.desktop_user.empty()
                           ? fmt::format("{}-desk", b->options_.box_user)
                           : b->options_.desktop_user;
    ASSIGN_OR_RETURN(proc::User desk,
                     ensure_user(name, b->options_.create_box_user, "cocoonbox box desktop"));
    if (desk.uid == b->box_user_->uid || desk.gid == b->box_user_->gid) {
      return failed_precondition(fmt::format(
          "desktop user {} shares its uid or group with box user {}", name, b->box_user_->name));
    }
    // Only its own group is mapped into the box: setgroups() with any other would fail.
    for (gid_t g : desk.groups) {
      if (g != desk.gid) {
        return failed_precondition(fmt::format(
            "desktop user {} is a member of group {}; it must have only its own group", name, g));
      }
    }
    b->split_note_ = probe_user_namespace(*b->box_user_, desk);
    if (b->split_note_.empty()) b->desktop_user_ = std::move(desk);
  }
  if (b->root_ && !b->desktop_user_) {
    // Boxes an earlier split ran keep their files, owned by this account; hand them back.
    auto former = proc::lookup_user(b->options_.desktop_user.empty()
                                        ? fmt::format("{}-desk", b->options_.box_user)
                                        : b->options_.desktop_user);
    if (former.ok() && former->uid != 0 && former->uid != b->box_user_->uid) {
      b->former_desktop_ = std::move(former).value();
    }
  }
  CgroupSetup cgroups = probe_cgroups(b->options_);
  b->cgroup_dir_ = cgroups.dir;
  b->freeze_method_ = cgroups.freeze;
  b->memory_controller_ = cgroups.memory;
  b->cpu_controller_ = cgroups.cpu;
  b->cgroup_note_ = cgroups.note;
  ASSIGN_OR_RETURN(UniqueFd init, make_init_fd());
  b->init_fd_ = init.release();

  if (b->isolated_) {
    log::info("machines: local backend",
              {{"isolated", true}, {"note", b->isolation_note()}, {"cgroups", b->cgroup_note_}});
    if (!b->desktop_user_) {
      log::warn(
          "machines: NO PRIVILEGE SPLIT: an agent's tools run as the agent's own account "
          "and can read its database",
          {{"why", b->split_note_}});
    }
  } else {
    log::warn("machines: local backend runs boxes WITHOUT isolation",
              {{"isolated", false}, {"note", b->isolation_note()}});
  }
  return b;
}

std::string LocalBackend::isolation_note() const {
  std::string user = box_user_ ? fmt::format("user {} (uid {})", box_user_->name, box_user_->uid)
                               : std::string("the api's own user");
  std::string freeze = cgroup_dir_ ? fmt::format("cgroups under {}, hibernate by {}",
                                                 cgroup_dir_->string(), to_string(freeze_method_))
                                   : fmt::format("no cgroups ({}), hibernate by {}", cgroup_note_,
                                                 to_string(freeze_method_));
  if (isolated_) {
    std::string split =
        desktop_user_ ? fmt::format("root of a user namespace mapped to {}; tools as {} (uid {})",
                                    user, desktop_user_->name, desktop_user_->uid)
                      : fmt::format("{}, tools too (NO PRIVILEGE SPLIT: {})", user, split_note_);
    return fmt::format(
        "boxes run in their own mount, pid, uts and ipc namespaces with the host's / read-only, "
        "as {}; {}",
        split, freeze);
  }
  return fmt::format(
      "NOT ISOLATED: boxes run as plain processes of this host, as {}, because {}; a box can "
      "read and change whatever that user can; {}",
      user, plain_reason_, freeze);
}

std::shared_ptr<LocalBackend::Box> LocalBackend::find(std::string_view box_id) {
  auto it = boxes_.find(box_id);
  return it == boxes_.end() ? nullptr : it->second;
}

bool LocalBackend::alive(Box& box) {
  if (box.exited) return false;
  if (box.pidfd.valid()) {
    pollfd p{box.pidfd.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) return true;  // a pidfd turns readable when the process exits
  } else {
    auto st = read_proc_stat(box.pid);
    if (st.ok() && st->start_time == box.start_time && st->state != 'Z' && st->state != 'X') {
      return true;
    }
  }
  box.exited = true;
  // Our own child (started by this process) is a zombie until reaped. Through the pidfd, so
  // only this very process can be reaped; ECHILD when another process started it.
  if (box.pidfd.valid()) {
    siginfo_t info;
    ::memset(&info, 0, sizeof info);
    ::syscall(SYS_waitid, kPPidfd, box.pidfd.get(), &info, WEXITED | WNOHANG, nullptr);
  }
  return false;
}

bool LocalBackend::frozen(Box& box) {
  if (box.cgroup_freezer()) {
    return read_keyed(*box.cgroup / "cgroup.events", "frozen").value_or(0) == 1;
  }
  auto st = read_proc_stat(box.pid);
  return st.ok() && (st->state == 'T' || st->state == 't');
}

std::vector<pid_t> LocalBackend::box_pids(Box& box) {
  std::vector<pid_t> out;
  bool init_alive = alive(box);
  if (box.cgroup) {
    auto procs = internal::cgroup_procs(*box.cgroup);
    if (procs.ok()) out = std::move(procs).value();
  } else if (init_alive && box.isolated) {
    uint64_t ns = internal::pid_namespace_of(box.pid);
    for (pid_t pid : internal::list_pids()) {
      if (ns != 0 && internal::pid_namespace_of(pid) == ns) out.push_back(pid);
    }
  } else if (init_alive) {
    // Plain mode: the init is a subreaper, so every process of the box descends from it.
    std::multimap<pid_t, pid_t> children;
    for (pid_t pid : internal::list_pids()) {
      auto st = read_proc_stat(pid);
      if (st.ok() && st->state != 'Z' && st->state != 'X') children.emplace(st->ppid, pid);
    }
    std::deque<pid_t> todo{box.pid};
    while (!todo.empty()) {
      pid_t pid = todo.front();
      todo.pop_front();
      out.push_back(pid);
      auto [begin, end] = children.equal_range(pid);
      for (auto it = begin; it != end; ++it) todo.push_back(it->second);
    }
  }
  auto init = std::find(out.begin(), out.end(), box.pid);
  if (init != out.end()) std::rotate(out.begin(), init, init + 1);
  return out;
}

Result<std::vector<pid_t>> LocalBackend::processes(std::string_view box_id) {
  auto box = find(box_id);
  if (!box) return not_found(fmt::format("no box {}", box_id));
  return box_pids(*box);
}

std::vector<fs::path> LocalBackend::hidden_paths(const MachineSpec& spec) const {
  std::vector<fs::path> hidden = options_.hidden_paths;
  // The api's data dir holds every box's files, the database and the master key.
  fs::path parent = spec.box_dir.lexically_normal().parent_path();
  hidden.push_back(parent.filename() == "boxes" ? parent.parent_path() : parent);
  return hidden;
}

Status LocalBackend::prepare_dirs(const MachineSpec& spec, bool starting) {
  RETURN_IF_ERROR(validate_spec(spec));
  std::error_code ec;
  fs::create_directories(spec.box_dir, ec);
  if (ec) return errno_status(ec.value(), fmt::format("create {}", spec.box_dir.string()));
  // Traversable, not listable: in plain mode the agent reaches its directories through it.
  if (::chmod(spec.box_dir.c_str(), 0711) != 0) {
    return errno_status(errno, fmt::format("chmod {}", spec.box_dir.string()));
  }
  for (const auto& p : kBoxPaths) {
    fs::path dir = spec.box_dir / p.box_dir;
    bool created = ::mkdir(dir.c_str(), 0700) == 0;
    if (!created && errno != EEXIST) {
      return errno_status(errno, fmt::format("create {}", dir.string()));
    }
    bool run = p.box_dir == "run";
    // With the privilege split the user's directories belong to the desktop account; the
    // agent (root in the box's user namespace) reaches them anyway.
    bool users = desktop_user_ && (p.box_dir == "home" || p.box_dir == "workspace");
    // The run dir: the api writes the identity there and the agent creates its socket.
    // Sticky and owned by root, so the agent cannot remove or replace the identity.
    mode_t mode = run ? (box_user_ ? 01775 : 0755) : (p.box_dir == "workspace" ? 0755 : 0700);
    // Owners change only when the box starts (or the directory is new): deliver_identity()
    // also runs at a wake, and a box started before the split still runs as one account.
    if (box_user_ && (created || starting)) {
      const proc::User& owner = users ? *desktop_user_ : *box_user_;
      struct stat st;
      bool user_dir = p.box_dir == "home" || p.box_dir == "workspace";
      if (users && !created && ::lstat(dir.c_str(), &st) == 0 && st.st_uid == box_user_->uid) {
        // A box from before the split: its files are the agent account's.
        RETURN_IF_ERROR(hand_over(dir, *box_user_, *desktop_user_));
      } else if (user_dir && !desktop_user_ && former_desktop_ && !created &&
                 ::lstat(dir.c_str(), &st) == 0 && st.st_uid == former_desktop_->uid) {
        // A box from a split that is off now: agent and tools are the box user again.
        RETURN_IF_ERROR(hand_over(dir, *former_desktop_, *box_user_));
      }
      if (::chown(dir.c_str(), run ? 0 : owner.uid, run ? box_user_->gid : owner.gid) != 0) {
        return errno_status(errno, fmt::format("chown {}", dir.string()));
      }
    }
    if (::chmod(dir.c_str(), mode) != 0) {
      return errno_status(errno, fmt::format("chmod {}", dir.string()));
    }
  }
  if (!isolated_ && box_user_) RETURN_IF_ERROR(check_reachable(spec.box_dir, *box_user_));
  if (isolated_) {
    fs::path rootfs = spec.box_dir / "rootfs";
    if (::mkdir(rootfs.c_str(), 0755) != 0 && errno != EEXIST) {
      return errno_status(errno, fmt::format("create {}", rootfs.string()));
    }
  }
  return ok_status();
}

Result<LocalBackend::AgentCommand> LocalBackend::agent_command(const MachineSpec& spec) const {
  if (spec.agent_argv.empty() || spec.agent_argv[0].empty()) {
    return invalid_argument(fmt::format("box {}: agent_argv is empty", spec.box_id));
  }
  auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  AgentCommand cmd;
  auto in_box = [&](std::string_view path) {
    return isolated_ ? std::string(path) : to_host_path(path, spec.box_dir);
  };
  for (const auto& word : spec.agent_argv) {
    if (has_nul(word)) return invalid_argument(fmt::format("box {}: NUL in argv", spec.box_id));
    cmd.argv.push_back(in_box(word));
  }
  set_env(cmd.env, fmt::format("PATH={}", kUserPath));
  set_env(cmd.env, "LANG=C.UTF-8");
  set_env(cmd.env, fmt::format("HOME={}", in_box("/home/user")));
  if (desktop_user_) {
    // Root of the box's user namespace; its tools run as the desktop account, which the
    // agent finds in the host's /etc/passwd that the box shows (its ids are mapped to
    // themselves). The agent's --desktop-user defaults to this variable.
    set_env(cmd.env, "USER=root");
    set_env(cmd.env, "LOGNAME=root");
    set_env(cmd.env, "SHELL=/bin/sh");
    set_env(cmd.env, fmt::format("COCOONBOX_DESKTOP_USER={}", desktop_user_->name));
  } else if (box_user_) {
    set_env(cmd.env, fmt::format("USER={}", box_user_->name));
    set_env(cmd.env, fmt::format("LOGNAME={}", box_user_->name));
    set_env(cmd.env,
            fmt::format("SHELL={}", box_user_->shell.empty() ? "/bin/sh" : box_user_->shell));
  }
  set_env(cmd.env, fmt::format("COCOONBOX_BOX_ID={}", spec.box_id));
  set_env(cmd.env, fmt::format("COCOONBOX_RUN_DIR={}", in_box("/run/cocoonbox")));
  set_env(cmd.env, fmt::format("COCOONBOX_WORKSPACE={}", in_box("/workspace")));
  for (const auto& entry : spec.env) {
    if (has_nul(entry) || entry.find('=') == std::string::npos || entry[0] == '=') {
      return invalid_argument(
          fmt::format("box {}: env entry \"{}\" is not NAME=value", spec.box_id, env_name(entry)));
    }
    auto eq = entry.find('=');
    set_env(cmd.env, fmt::format("{}={}", entry.substr(0, eq), in_box(entry.substr(eq + 1))));
  }
  cmd.cwd = in_box("/workspace");

  // A bare name is searched in the PATH the agent gets. The box's / is the host's, so the
  // host's answer holds inside the box too.
  const std::string& program = cmd.argv[0];
  if (program.find('/') != std::string::npos) {
    cmd.program = program;
    return cmd;
  }
  std::string_view path = kUserPath;
  for (const auto& e : cmd.env) {
    if (env_name(e) == "PATH") path = std::string_view(e).substr(5);
  }
  while (true) {
    auto colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    fs::path candidate = fs::path(dir.empty() ? "." : std::string(dir)) / program;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      cmd.program = candidate.string();
      return cmd;
    }
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return not_found(fmt::format("box {}: agent program {} not found in PATH", spec.box_id, program));
}

Status LocalBackend::deliver_identity(const MachineSpec& spec, std::string_view identity_json) {
  RETURN_IF_ERROR(prepare_dirs(spec, /*starting=*/false));
  return internal::write_atomically(spec.box_dir / "run" / kIdentityFile, identity_json, 0644);
}

asio::awaitable<Status> LocalBackend::start_impl(MachineSpec spec) {
  CO_RETURN_IF_ERROR(validate_spec(spec));
  if (auto old = find(spec.box_id)) {
    if (old->busy)
      co_return aborted(fmt::format("box {}: another operation is running", spec.box_id));
    if (alive(*old)) co_return already_exists(fmt::format("box {} is running", spec.box_id));
    old->busy = true;
    Status cleaned = co_await forget(old, DataPolicy::kKeep);
    old->busy = false;
    if (!cleaned.ok()) co_return cleaned;
    if (find(spec.box_id)) co_return aborted(fmt::format("box {}: started meanwhile", spec.box_id));
  } else {
    // A tree left by an earlier api that nobody adopted must not get a twin.
    auto record = read_record(spec.box_dir);
    if (record.ok() && record_alive(*record)) {
      co_return already_exists(
          fmt::format("box {} is already running as pid {}; adopt() it", spec.box_id, record->pid));
    }
  }
  CO_RETURN_IF_ERROR(prepare_dirs(spec, /*starting=*/true));
  CO_ASSIGN_OR_RETURN(AgentCommand cmd, agent_command(spec));
  // A socket left by the previous run would accept nothing and mislead dialers.
  ::unlink((spec.box_dir / "run" / kAgentSocket).c_str());

  // The cgroup, before the clone: the child joins it as its first step.
  std::optional<fs::path> cgroup;
  UniqueFd procs_fd;
  if (cgroup_dir_) {
    fs::path dir = *cgroup_dir_ / spec.box_id;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      co_return errno_status(errno, fmt::format("create cgroup {}", dir.string()));
    }
    // Leftovers of a box whose init is gone (checked above): kill them first.
    if (read_keyed(dir / "cgroup.events", "populated").value_or(0) == 1) {
      Box leftovers;
      leftovers.id = spec.box_id;
      leftovers.cgroup = dir;
      leftovers.exited = true;
      Status killed = co_await kill_tree(leftovers);
      if (!killed.ok()) co_return killed;
    }
    if (fs::exists(dir / "cgroup.freeze")) (void)write_file(dir / "cgroup.freeze", "0");
    cgroup = dir;
    auto procs = open_fd(dir / "cgroup.procs", O_WRONLY);
    if (!procs.ok()) {
      ::rmdir(dir.c_str());
      co_return procs.status();
    }
    procs_fd = std::move(procs).value();
  }
  if (spec.memory_limit_bytes) {
    if (cgroup && memory_controller_) {
      (void)write_file(*cgroup / "memory.max", fmt::format("{}", *spec.memory_limit_bytes));
    } else {
      log_limit_skipped("machines: memory limit not applied", spec.box_id, cgroup_note_);
    }
  }
  if (spec.cpu_limit) {
    if (cgroup && cpu_controller_) {
      // cpu.max is "<quota> <period>" in microseconds; 100 ms is the kernel's default period.
      auto quota = std::max<long long>(1000, std::llround(*spec.cpu_limit * 100000.0));
      (void)write_file(*cgroup / "cpu.max", fmt::format("{} 100000", quota));
    } else {
      log_limit_skipped("machines: cpu limit not applied", spec.box_id, cgroup_note_);
    }
  }
  auto drop_cgroup = [&]() {
    if (cgroup) ::rmdir(cgroup->c_str());
  };

  std::vector<internal::MountOp> ops;
  fs::path new_root = spec.box_dir / "rootfs";
  if (isolated_) {
    internal::RootLayout layout;
    layout.new_root = new_root;
    layout.box_dir = spec.box_dir;
    layout.hidden = hidden_paths(spec);
    auto plan = internal::plan_box_root(layout);
    if (!plan.ok()) {
      drop_cgroup();
      co_return plan.status();
    }
    ops = std::move(plan).value();
  }

  auto report = make_pipe();
  auto go = make_pipe();  // the privilege split's "id maps written" (README.md)
  auto null_fd = open_fd("/dev/null", O_RDWR);
  auto log_fd = open_fd(spec.box_dir / kAgentLog, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0640);
  Status opened = !report.ok()    ? report.status()
                  : !go.ok()      ? go.status()
                  : !null_fd.ok() ? null_fd.status()
                                  : log_fd.status();
  if (!opened.ok()) {
    drop_cgroup();
    co_return opened;
  }

  // Everything the child reads, built here: it must not allocate (local_child.cc).
  std::string report_arg = std::to_string(report->write.get());
  std::string init_name = "cocoonbox-init";
  std::vector<const char*> init_argv;
  init_argv.push_back(init_name.c_str());
  init_argv.push_back(report_arg.c_str());
  init_argv.push_back(cmd.program.c_str());
  for (const auto& a : cmd.argv) init_argv.push_back(a.c_str());
  init_argv.push_back(nullptr);
  std::vector<const char*> envp;
  for (const auto& e : cmd.env) envp.push_back(e.c_str());
  envp.push_back(nullptr);
  std::string new_root_str = new_root.string();

  internal::ChildPlan plan;
  plan.isolated = isolated_;
  plan.report_fd = report->write.get();
  plan.cgroup_procs_fd = procs_fd.get();
  plan.stdin_fd = null_fd->get();
  plan.log_fd = log_fd->get();
  plan.init_fd = init_fd_;
  plan.new_root = new_root_str.c_str();
  plan.ops = ops;
  plan.hostname = spec.box_id.c_str();
  plan.hostname_len = spec.box_id.size();
  // In-namespace ids with the privilege split: root of the box's user namespace, which is
  // the box user on the host; its only group is its own (gid 0 there).
  const std::array<gid_t, 1> ns_groups = {0};
  if (box_user_) {
    plan.change_identity = true;
    plan.uid = box_user_->uid;
    plan.gid = box_user_->gid;
    plan.groups = box_user_->groups;
    // The host's setuid programs are visible in the box; they must not lead back to root.
    plan.no_new_privs = true;
  }
  if (desktop_user_) {
    plan.new_user_ns = true;
    plan.go_fd = go->read.get();
    plan.go_write_fd = go->write.get();
    plan.uid = 0;
    plan.gid = 0;
    plan.groups = ns_groups;
  }
  plan.cwd = cmd.cwd.c_str();
  plan.init_argv = init_argv.data();
  plan.envp = envp.data();

  pid_t pid;
  int clone_errno = 0;
  {
    SignalBlock block;
    pid = clone_process(isolated_ ? kNamespaces : 0);
    if (pid == 0) internal::run_box_child(plan);
    clone_errno = errno;
  }
  if (pid < 0) {
    drop_cgroup();
    co_return errno_status(clone_errno, fmt::format("box {}: clone", spec.box_id));
  }
  report->write.reset();
  go->read.reset();

  auto box = std::make_shared<Box>();
  box->id = spec.box_id;
  box->box_dir = spec.box_dir;
  box->pid = pid;
  box->pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  box->cgroup = cgroup;
  box->isolated = isolated_;
  box->busy = true;
  auto st = read_proc_stat(pid);
  box->start_time = st.ok() ? st->start_time : 0;
  boxes_[spec.box_id] = box;

  auto ex = co_await asio::this_coro::executor;
  proc::Descriptor pipe(ex);
  std::error_code ec;
  pipe.assign(report->read.release(), ec);
  Status failure;
  if (ec) {
    failure = internal_error(fmt::format("box start: watch the report pipe: {}", ec.message()));
  } else {
    const net::Deadline deadline = net::after(options_.start_timeout);
    const std::string what = fmt::format("box {} start", spec.box_id);
    // At most two records: CB_STEP_USERNS_READY (with the split), then a failure or EOF.
    for (int round = 0; round < 2; ++round) {
      auto outcome = co_await net::with_deadline(read_report(pipe), deadline, what);
      if (!outcome.ok()) {
        failure = outcome.status();
      } else if (outcome->has_value() && (*outcome)->step == CB_STEP_USERNS_READY &&
                 desktop_user_ && round == 0) {
        failure = write_id_maps(pid, *box_user_, *desktop_user_).with_prefix("box start");
        if (failure.ok() && ::write(go->write.get(), "g", 1) != 1) {
          failure = errno_status(errno, "box start: release the child");
        }
        go->write.reset();
        if (failure.ok()) continue;
      } else if (outcome->has_value()) {
        failure = internal::report_status(**outcome, ops, spec.agent_argv[0]);
      }
      break;
    }
  }
  if (failure.ok() && box->start_time == 0) failure = internal_error("box start: no start time");
  if (failure.ok()) {
    MachineRecord record;
    record.box_id = spec.box_id;
    record.pid = pid;
    record.start_time = box->start_time;
    record.cgroup = cgroup;
    record.isolated = isolated_;
    failure = internal::write_atomically(spec.box_dir / kMachineRecord, record_json(record), 0644);
  }
  if (!failure.ok()) {
    log_box_error("machines: box failed to start", spec.box_id, failure);
    Status killed = co_await kill_tree(*box);
    if (killed.ok()) {
      Status forgotten = co_await forget(box, DataPolicy::kKeep);
      (void)forgotten;
    }
    box->busy = false;
    co_return failure;
  }
  box->busy = false;
  log_started(spec.box_id, pid, isolated_);
  co_return ok_status();
}

asio::awaitable<Status> LocalBackend::sigstop_all(Box& box, net::Deadline deadline) {
  while (true) {
    bool all_stopped = true;
    for (pid_t pid : box_pids(box)) {
      if (internal::stopped_or_stopping(pid)) continue;
      all_stopped = false;
      ::kill(pid, SIGSTOP);
    }
    // A round that found nothing running: whatever forked meanwhile is stopped too.
    if (all_stopped) co_return ok_status();
    Status waited = co_await pause(deadline);
    if (!waited.ok()) co_return waited;
  }
}

asio::awaitable<Status> LocalBackend::hibernate_impl(std::string box_id) {
  auto box = find(box_id);
  if (!box) co_return not_found(fmt::format("no box {}", box_id));
  if (box->busy) co_return aborted(fmt::format("box {}: another operation is running", box_id));
  if (!alive(*box)) co_return failed_precondition(fmt::format("box {} has exited", box_id));
  box->busy = true;
  net::Deadline deadline = net::after(options_.freeze_timeout);
  Status result;
  if (box->cgroup_freezer()) {
    result = write_file(*box->cgroup / "cgroup.freeze", "1");
    while (result.ok() && read_keyed(*box->cgroup / "cgroup.events", "frozen").value_or(0) != 1) {
      if (!alive(*box)) {
        result = failed_precondition(fmt::format("box {} exited while freezing", box_id));
        break;
      }
      result = co_await pause(deadline);
    }
    if (!result.ok()) (void)write_file(*box->cgroup / "cgroup.freeze", "0");
  } else {
    result = co_await sigstop_all(*box, deadline);
    if (!result.ok()) {
      for (pid_t pid : box_pids(*box)) ::kill(pid, SIGCONT);
    }
  }
  box->busy = false;
  if (result.code() == Code::kDeadlineExceeded) {
    co_return deadline_exceeded(fmt::format("box {} did not freeze within {} ms; thawed again",
                                            box_id, options_.freeze_timeout.count()));
  }
  if (result.ok()) log_box("machines: box frozen", box_id);
  co_return result;
}

asio::awaitable<Status> LocalBackend::wake_impl(std::string box_id) {
  auto box = find(box_id);
  if (!box) co_return not_found(fmt::format("no box {}", box_id));
  if (box->busy) co_return aborted(fmt::format("box {}: another operation is running", box_id));
  if (!alive(*box)) co_return failed_precondition(fmt::format("box {} has exited", box_id));
  box->busy = true;
  net::Deadline deadline = net::after(options_.freeze_timeout);
  Status result;
  if (box->cgroup_freezer()) {
    result = write_file(*box->cgroup / "cgroup.freeze", "0");
    while (result.ok() && read_keyed(*box->cgroup / "cgroup.events", "frozen").value_or(0) != 0) {
      result = co_await pause(deadline);
    }
  } else {
    for (pid_t pid : box_pids(*box)) ::kill(pid, SIGCONT);
    while (result.ok() && alive(*box) && frozen(*box)) result = co_await pause(deadline);
  }
  box->busy = false;
  if (result.code() == Code::kDeadlineExceeded) {
    co_return deadline_exceeded(
        fmt::format("box {} did not thaw within {} ms", box_id, options_.freeze_timeout.count()));
  }
  if (result.ok()) log_box("machines: box thawed", box_id);
  co_return result;
}

asio::awaitable<Status> LocalBackend::wait_gone(Box& box, net::Deadline deadline) {
  while (alive(box) ||
         (box.cgroup && read_keyed(*box.cgroup / "cgroup.events", "populated").value_or(0) == 1)) {
    Status waited = co_await pause(deadline);
    if (!waited.ok()) co_return waited;
  }
  co_return ok_status();
}

asio::awaitable<Status> LocalBackend::kill_tree(Box& box) {
  net::Deadline deadline = net::after(options_.kill_timeout);
  if (box.cgroup && fs::exists(*box.cgroup / "cgroup.kill")) {
    // Linux >= 5.14: SIGKILL to every process of the cgroup, frozen ones included, in one
    // step that races with no fork.
    CO_RETURN_IF_ERROR(write_file(*box.cgroup / "cgroup.kill", "1"));
  } else if (box.isolated && alive(box)) {
    // The pid namespace dies with its init: the kernel kills every other member.
    if (box.pidfd.valid()) {
      ::syscall(SYS_pidfd_send_signal, box.pidfd.get(), SIGKILL, nullptr, 0);
    } else {
      ::kill(box.pid, SIGKILL);
    }
  } else {
    // Neither cgroup.kill nor a pid namespace: stop the tree so nothing forks or slips away
    // to another parent, then kill it, init last.
    Status stopped = co_await sigstop_all(box, deadline);
    (void)stopped;
    auto pids = box_pids(box);
    for (auto it = pids.rbegin(); it != pids.rend(); ++it) ::kill(*it, SIGKILL);
    // Nothing else waits for them: SIGKILL is asynchronous, and the init's death does not
    // take the others along without a pid namespace.
    auto dying = [&]() {
      return std::any_of(pids.begin(), pids.end(), [](pid_t pid) {
        auto st = read_proc_stat(pid);
        return st.ok() && st->state != 'Z' && st->state != 'X';
      });
    };
    while (dying()) {
      Status waited = co_await pause(deadline);
      if (!waited.ok()) break;  // wait_gone() below reports it
    }
  }
  Status gone = co_await wait_gone(box, deadline);
  if (gone.code() == Code::kDeadlineExceeded) {
    co_return deadline_exceeded(fmt::format("box {}: processes survived SIGKILL for {} ms", box.id,
                                            options_.kill_timeout.count()));
  }
  co_return gone;
}

asio::awaitable<Status> LocalBackend::stop_tree(Box& box) {
  if (alive(box) && options_.stop_grace.count() > 0 && !frozen(box)) {
    // Politely first: the init forwards SIGTERM to the agent.
    if (box.pidfd.valid()) {
      ::syscall(SYS_pidfd_send_signal, box.pidfd.get(), SIGTERM, nullptr, 0);
    } else {
      ::kill(box.pid, SIGTERM);
    }
    Status gone = co_await wait_gone(box, net::after(options_.stop_grace));
    if (gone.ok()) co_return gone;
  }
  Status killed = co_await kill_tree(box);
  co_return killed;
}

asio::awaitable<Status> LocalBackend::forget(std::shared_ptr<Box> box, DataPolicy data) {
  if (box->cgroup) {
    net::Deadline deadline = net::after(options_.kill_timeout);
    // EBUSY while the kernel finishes tearing down the last member.
    while (::rmdir(box->cgroup->c_str()) != 0 && errno != ENOENT) {
      if (errno != EBUSY) {
        co_return errno_status(errno, fmt::format("remove cgroup {}", box->cgroup->string()));
      }
      Status waited = co_await pause(deadline);
      if (!waited.ok()) {
        co_return waited.with_prefix(fmt::format("remove cgroup {}", box->cgroup->string()));
      }
    }
  }
  std::error_code ec;
  fs::remove(box->box_dir / kMachineRecord, ec);
  fs::remove(box->box_dir / "run" / kAgentSocket, ec);
  if (data == DataPolicy::kDelete) {
    fs::remove_all(box->box_dir, ec);
    if (ec) co_return errno_status(ec.value(), fmt::format("remove {}", box->box_dir.string()));
  }
  auto it = boxes_.find(box->id);
  if (it != boxes_.end() && it->second == box) boxes_.erase(it);
  co_return ok_status();
}

asio::awaitable<Status> LocalBackend::release_impl(std::string box_id, DataPolicy data) {
  auto box = find(box_id);
  if (!box) co_return not_found(fmt::format("no box {}", box_id));
  if (box->busy) co_return aborted(fmt::format("box {}: another operation is running", box_id));
  box->busy = true;
  Status stopped = co_await stop_tree(*box);
  if (!stopped.ok()) {
    box->busy = false;
    co_return stopped;
  }
  Status forgotten = co_await forget(box, data);
  box->busy = false;
  if (forgotten.ok()) log_box("machines: box released", box_id);
  co_return forgotten;
}

asio::awaitable<Status> LocalBackend::start(MachineSpec spec) {
  return uninterruptible(start_impl(std::move(spec)));
}

asio::awaitable<Status> LocalBackend::hibernate(std::string box_id) {
  return uninterruptible(hibernate_impl(std::move(box_id)));
}

asio::awaitable<Status> LocalBackend::wake(std::string box_id) {
  return uninterruptible(wake_impl(std::move(box_id)));
}

asio::awaitable<Status> LocalBackend::release(std::string box_id, DataPolicy data) {
  return uninterruptible(release_impl(std::move(box_id), data));
}

Result<MachineState> LocalBackend::status(std::string_view box_id) {
  auto box = find(box_id);
  if (!box) return MachineState::kAbsent;
  if (!alive(*box)) return MachineState::kExited;
  if (frozen(*box)) return MachineState::kFrozen;
  return MachineState::kRunning;
}

Result<Endpoint> LocalBackend::address(std::string_view box_id) {
  auto box = find(box_id);
  if (!box) return not_found(fmt::format("no box {}", box_id));
  Endpoint e;
  e.key = fmt::format("local:{}:{}:{}", box->id, box->pid, box->start_time);
  std::string socket = (box->box_dir / "run" / kAgentSocket).string();
  uid_t owner = box_user_ ? box_user_->uid : ::geteuid();
  // A plain lambda calling a coroutine that takes its arguments by value: a coroutine lambda
  // would keep its captures in the std::function, which may be gone before the dial ends.
  e.dial = [socket, owner](net::Deadline deadline) { return dial_agent(socket, owner, deadline); };
  return e;
}

Status LocalBackend::adopt(const MachineSpec& spec) {
  RETURN_IF_ERROR(validate_spec(spec));
  if (find(spec.box_id)) return ok_status();
  auto record = read_record(spec.box_dir);
  if (!record.ok()) {
    if (record.status().code() == Code::kNotFound) {
      return not_found(fmt::format("box {} has no machine record", spec.box_id));
    }
    return record.status();
  }
  if (record->box_id != spec.box_id) {
    return data_loss(fmt::format("{} belongs to box {}", (spec.box_dir / kMachineRecord).string(),
                                 record->box_id));
  }
  if (!record_alive(*record)) {
    // Gone: clean up what it left on the host (an empty cgroup, the record).
    if (record->cgroup) ::rmdir(record->cgroup->c_str());
    std::error_code ec;
    fs::remove(spec.box_dir / kMachineRecord, ec);
    return not_found(
        fmt::format("box {} is no longer running (pid {} ended)", spec.box_id, record->pid));
  }
  auto box = std::make_shared<Box>();
  box->id = spec.box_id;
  box->box_dir = spec.box_dir;
  box->pid = record->pid;
  box->start_time = record->start_time;
  box->cgroup = record->cgroup;
  box->isolated = record->isolated;
  // The pidfd pins the process; checking again after opening it rules out a pid reused in
  // between.
  box->pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, box->pid, 0)));
  if (!record_alive(*record)) {
    return not_found(
        fmt::format("box {} is no longer running (pid {} ended)", spec.box_id, record->pid));
  }
  if (box->cgroup) {
    auto procs = internal::cgroup_procs(*box->cgroup);
    if (!procs.ok() || std::find(procs->begin(), procs->end(), box->pid) == procs->end()) {
      return not_found(fmt::format("box {}: pid {} is not in cgroup {}", spec.box_id, box->pid,
                                   box->cgroup->string()));
    }
  }
  boxes_[spec.box_id] = box;
  log::info("machines: box adopted",
            {{"box", spec.box_id}, {"pid", static_cast<int64_t>(box->pid)}});
  return ok_status();
}

}  // namespace cb::api::machines
