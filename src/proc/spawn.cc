#include "proc/spawn.h"

#include "base/log.h"
#include "proc/errno_internal.h"
#include "proc/user.h"

#include <climits>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <utility>

extern char** environ;

namespace cb::proc {

namespace {

using internal::errno_status;

// Used when the child's environment has no PATH; the usual Debian root PATH.
constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Moves |fd| to a number >= 3, so the child's dup2() onto 0, 1 and 2 can never overwrite a
// descriptor it still needs (possible when the parent runs with stdio closed).
Result<Fd> above_stdio(Fd fd) {
  if (fd.get() > 2) return fd;
  int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return errno_status(errno, "fcntl(F_DUPFD_CLOEXEC)");
  return Fd(moved);
}

struct Pipe {
  Fd read;
  Fd write;
};

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_status(errno, "pipe2");
  Pipe p{Fd(fds[0]), Fd(fds[1])};
  ASSIGN_OR_RETURN(p.read, above_stdio(std::move(p.read)));
  ASSIGN_OR_RETURN(p.write, above_stdio(std::move(p.write)));
  return p;
}

Result<Fd> open_null() {
  Fd fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) return errno_status(errno, "open /dev/null");
  return above_stdio(std::move(fd));
}

struct Pty {
  Fd master;
  Fd slave;
};

Result<Pty> make_pty(const PtyOptions& options) {
  Pty pty;
  pty.master = Fd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (pty.master.get() < 0) return errno_status(errno, "posix_openpt");
  if (::grantpt(pty.master.get()) != 0) return errno_status(errno, "grantpt");
  if (::unlockpt(pty.master.get()) != 0) return errno_status(errno, "unlockpt");
  // TIOCGPTPEER (Linux >= 4.13) opens the peer of this very master, immune to a /dev/pts
  // that belongs to another devpts instance (containers); fall back to the path otherwise.
  int slave = ::ioctl(pty.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) {
    std::array<char, 128> name{};
    if (::ptsname_r(pty.master.get(), name.data(), name.size()) != 0) {
      return errno_status(errno, "ptsname_r");
    }
    slave = ::open(name.data(), O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) return errno_status(errno, fmt::format("open {}", name.data()));
  }
  pty.slave = Fd(slave);
  ASSIGN_OR_RETURN(pty.slave, above_stdio(std::move(pty.slave)));
  struct winsize ws {};
  ws.ws_row = options.rows;
  ws.ws_col = options.cols;
  if (::ioctl(pty.master.get(), TIOCSWINSZ, &ws) != 0) {
    return errno_status(errno, "ioctl(TIOCSWINSZ)");
  }
  return pty;
}

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

std::string_view env_name(std::string_view entry) { return entry.substr(0, entry.find('=')); }

// Sets |entry| ("NAME=value") in |env|, replacing an entry with the same name.
void set_env(std::vector<std::string>& env, std::string entry) {
  for (auto& existing : env) {
    if (env_name(existing) == env_name(entry)) {
      existing = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

// Where the child reports a failure before execve succeeds: which step, and errno.
struct ChildError {
  int32_t step;
  int32_t err;
};

enum ChildStep : int32_t {
  kStepSetsid = 1,
  kStepControllingTty,
  kStepDup,
  kStepSetgroups,
  kStepSetgid,
  kStepSetuid,
  kStepChdir,
  kStepExec,
  kStepParentDeathSignal,
};

// Everything the child needs, prepared by the parent so that the child allocates nothing.
struct ChildPlan {
  std::vector<const char*> argv;        // null-terminated
  std::vector<const char*> envp;        // null-terminated
  std::vector<const char*> candidates;  // paths to try with execve, in order
  const char* cwd = nullptr;
  bool setsid = false;
  int controlling_tty = -1;
  std::array<int, 3> stdio{-1, -1, -1};
  bool change_identity = false;
  std::vector<gid_t> groups;
  gid_t gid = 0;
  uid_t uid = 0;
  int parent_death_signal = 0;
  pid_t parent = 0;  // getpid() of the parent before fork()
  int report_fd = -1;
};

[[noreturn]] void child_fail(int report_fd, int32_t step, int err) {
  ChildError e{step, err};
  // One write of 8 bytes to a pipe is atomic; nothing useful can be done if it fails.
  [[maybe_unused]] ssize_t n = ::write(report_fd, &e, sizeof e);
  ::_exit(127);
}

bool exec_should_try_next(int err) {
  // As execvp(3): these mean "not in this directory", so keep searching PATH.
  return err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV || err == ETIMEDOUT ||
         err == EACCES;
}

// Runs in the child between fork() and execve(). The parent may have other threads (the db
// worker, for one), and any of them may have held a lock (malloc's, for example) at the
// moment of fork(); so only async-signal-safe calls from here on (signal-safety(7)): no
// allocation, no stdio, no locks, no glibc wrappers that synchronize across threads.
[[noreturn]] void run_child(const ChildPlan& plan) {
  // Ignored signals (SIGPIPE, commonly) stay ignored across execve; handled ones revert to
  // default anyway. Reset every disposition, then unblock what the parent blocked around
  // fork(). sigaction() on glibc's reserved signals fails with EINVAL; that is harmless.
  struct sigaction dfl;
  ::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  if (plan.setsid && ::setsid() < 0) child_fail(plan.report_fd, kStepSetsid, errno);
  if (plan.controlling_tty >= 0 && ::ioctl(plan.controlling_tty, TIOCSCTTY, 0) < 0) {
    child_fail(plan.report_fd, kStepControllingTty, errno);
  }
  for (int i = 0; i < 3; ++i) {
    // Every source fd is >= 3 (above_stdio), so none is overwritten here; dup2 clears
    // FD_CLOEXEC on the copy.
    if (::dup2(plan.stdio[i], i) < 0) child_fail(plan.report_fd, kStepDup, errno);
  }
  // Descriptors the parent opened without O_CLOEXEC must not leak into the program.
  // close_range(2) is Linux >= 5.11; on older kernels this fails and we carry on.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);

  if (plan.change_identity) {
    // Raw syscalls, not glibc's setgroups()/setresgid()/setresuid(): those broadcast the
    // change to every thread of the process through a signal, machinery that is not safe
    // in a forked child. The child has one thread, so the raw call covers the process.
    // Order: groups first, while we still have CAP_SETGID; uid last.
    if (::syscall(SYS_setgroups, plan.groups.size(), plan.groups.data()) != 0) {
      child_fail(plan.report_fd, kStepSetgroups, errno);
    }
    if (::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0) {
      child_fail(plan.report_fd, kStepSetgid, errno);
    }
    if (::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) {
      child_fail(plan.report_fd, kStepSetuid, errno);
    }
  }
  // After the switch: a change of credentials clears the parent-death signal.
  if (plan.parent_death_signal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, plan.parent_death_signal, 0, 0, 0) != 0)
      child_fail(plan.report_fd, kStepParentDeathSignal, errno);
    // The parent died before the prctl: no signal will come, so do not run unwatched.
    if (::getppid() != plan.parent) ::_exit(127);
  }
  // After the switch, so the user's own permissions decide whether they may enter it.
  if (plan.cwd != nullptr && ::chdir(plan.cwd) != 0) child_fail(plan.report_fd, kStepChdir, errno);

  int err = ENOENT;
  bool saw_eacces = false;
  for (const char* path : plan.candidates) {
    ::execve(path, const_cast<char* const*>(plan.argv.data()),
             const_cast<char* const*>(plan.envp.data()));
    err = errno;
    if (err == EACCES) saw_eacces = true;
    if (!exec_should_try_next(err)) break;
  }
  // As execvp: a found-but-not-executable file beats "not found" in a later directory.
  if (saw_eacces && exec_should_try_next(err)) err = EACCES;
  child_fail(plan.report_fd, kStepExec, err);
}

Status child_error_status(const ChildError& e, const SpawnOptions& options, const ChildPlan& plan) {
  switch (e.step) {
    case kStepSetsid:
      return errno_status(e.err, "setsid");
    case kStepControllingTty:
      return errno_status(e.err, "ioctl(TIOCSCTTY)");
    case kStepDup:
      return errno_status(e.err, "dup2");
    case kStepSetgroups:
      return errno_status(e.err, "setgroups");
    case kStepSetgid:
      return errno_status(e.err, fmt::format("setgid {}", plan.gid));
    case kStepSetuid:
      return errno_status(e.err, fmt::format("setuid {}", plan.uid));
    case kStepChdir:
      return errno_status(e.err, fmt::format("chdir {}", options.cwd->string()));
    case kStepExec:
      return errno_status(e.err, fmt::format("exec {}", options.argv[0]));
    case kStepParentDeathSignal:
      return errno_status(e.err, "prctl(PR_SET_PDEATHSIG)");
    default:
      return internal_error(fmt::format("spawn: unknown child failure step {}", e.step));
  }
}

Result<Descriptor> wrap(const asio::any_io_executor& executor, Fd fd) {
  Descriptor d(executor);
  std::error_code ec;
  d.assign(fd.get(), ec);
  if (ec) return internal_error(fmt::format("assign descriptor: {}", ec.message()));
  fd.release();  // now owned by |d|
  return d;
}

// Reads the child's report: nothing (EOF: execve succeeded, closing the CLOEXEC pipe) or
// one ChildError. Blocks until one of the two; the child gets there in microseconds.
bool read_child_error(int fd, ChildError& out) {
  std::size_t got = 0;
  auto* p = reinterpret_cast<char*>(&out);
  while (got < sizeof out) {
    ssize_t n = ::read(fd, p + got, sizeof out - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;  // Asio's signal handlers are installed without SA_RESTART
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  return got == sizeof out;
}

void reap_blocking(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

Result<Process> spawn(const asio::any_io_executor& executor, const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return invalid_argument("spawn: argv is empty");
  }
  for (const auto& a : options.argv) {
    if (has_nul(a)) return invalid_argument("spawn: argv holds a NUL byte");
  }
  if (options.cwd && has_nul(options.cwd->native())) {
    return invalid_argument("spawn: cwd holds a NUL byte");
  }

  // The environment: explicit unless inheritance was asked for.
  std::vector<std::string> env;
  if (options.inherit_env) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  }
  for (const auto& entry : options.env) {
    if (has_nul(entry) || entry.find('=') == std::string::npos || entry[0] == '=') {
      return invalid_argument(
          fmt::format("spawn: env entry \"{}\" is not NAME=value", env_name(entry)));
    }
    set_env(env, entry);
  }
  if (options.pty && !options.pty->term.empty()) set_env(env, "TERM=" + options.pty->term);

  // Candidate paths for argv[0], resolved here because the child must not allocate.
  const std::string& program = options.argv[0];
  std::vector<std::string> candidates;
  if (program.find('/') != std::string::npos) {
    candidates.push_back(program);
  } else {
    std::string_view path = kDefaultPath;
    for (const auto& entry : env) {
      if (env_name(entry) == "PATH") path = std::string_view(entry).substr(5);
    }
    while (true) {
      auto colon = path.find(':');
      std::string_view dir = path.substr(0, colon);
      candidates.push_back(fmt::format("{}/{}", dir.empty() ? "." : dir, program));
      if (colon == std::string_view::npos) break;
      path.remove_prefix(colon + 1);
    }
  }

  ChildPlan plan;
  if (options.user || options.uid || options.gid) {
    plan.change_identity = true;
    plan.uid = ::getuid();
    plan.gid = ::getgid();
    if (options.user) {
      ASSIGN_OR_RETURN(User user, lookup_user(*options.user));
      plan.uid = user.uid;
      plan.gid = user.gid;
      plan.groups = user.groups;
    }
    if (options.uid) plan.uid = *options.uid;
    if (options.gid) plan.gid = *options.gid;
  }

  // Descriptors. The child's ends are kept above 2; every one is O_CLOEXEC, so whatever the
  // child does not dup2 onto 0..2 disappears at execve.
  std::optional<Pty> pty;
  Fd stdio_child[3];
  Fd stdio_parent[3];
  const Stdio modes[3] = {options.stdin_mode, options.stdout_mode, options.stderr_mode};
  if (options.pty) {
    ASSIGN_OR_RETURN(pty, make_pty(*options.pty));
    plan.controlling_tty = pty->slave.get();
    for (int i = 0; i < 3; ++i) plan.stdio[i] = pty->slave.get();
  } else {
    for (int i = 0; i < 3; ++i) {
      if (modes[i] == Stdio::kNull) {
        ASSIGN_OR_RETURN(stdio_child[i], open_null());
        continue;
      }
      ASSIGN_OR_RETURN(Pipe p, make_pipe());
      if (options.pipe_size > 0) {
        (void)::fcntl(p.read.get(), F_SETPIPE_SZ,
                      static_cast<int>(std::min<size_t>(options.pipe_size, INT_MAX)));
      }
      // stdin: the child reads, the parent writes; stdout and stderr the other way round.
      stdio_child[i] = std::move(i == 0 ? p.read : p.write);
      stdio_parent[i] = std::move(i == 0 ? p.write : p.read);
    }
    for (int i = 0; i < 3; ++i) plan.stdio[i] = stdio_child[i].get();
  }
  ASSIGN_OR_RETURN(Pipe report, make_pipe());
  plan.report_fd = report.write.get();
  plan.setsid = options.new_session || options.pty.has_value();
  plan.parent_death_signal = options.parent_death_signal;
  plan.parent = ::getpid();

  for (const auto& a : options.argv) plan.argv.push_back(a.c_str());
  plan.argv.push_back(nullptr);
  for (const auto& e : env) plan.envp.push_back(e.c_str());
  plan.envp.push_back(nullptr);
  for (const auto& c : candidates) plan.candidates.push_back(c.c_str());
  if (options.cwd) plan.cwd = options.cwd->c_str();

  // Block every signal across fork(), so no handler of the parent's runs in the child
  // before run_child() has reset the dispositions.
  sigset_t all;
  sigset_t old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::fork();
  if (pid == 0) run_child(plan);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return errno_status(fork_errno, "fork");

  // Close the child's ends now: a PTY master or a pipe only reports end of file once no
  // process holds the other end, and the parent must not be one.
  report.write.reset();
  if (pty) pty->slave.reset();
  for (auto& fd : stdio_child) fd.reset();

  ChildError failure{};
  if (read_child_error(report.read.get(), failure)) {
    reap_blocking(pid);
    return child_error_status(failure, options, plan);
  }

  Process proc(pid);
  proc.group_ = plan.setsid;
  // From here on a failure must not leave a running child that nobody can reap.
  auto abandon = [&](const Status& s) -> Status {
    ::kill(plan.setsid ? -pid : pid, SIGKILL);
    reap_blocking(pid);
    proc.pid_ = -1;
    return s;
  };
  auto attach = [&](std::optional<Descriptor>& slot, Fd fd) -> Status {
    if (fd.get() < 0) return ok_status();
    auto d = wrap(executor, std::move(fd));
    if (!d.ok()) return d.status();
    slot = std::move(d).value();
    return ok_status();
  };
  Status attached = pty ? attach(proc.pty_, std::move(pty->master)) : ok_status();
  if (attached.ok()) attached = attach(proc.stdin_, std::move(stdio_parent[0]));
  if (attached.ok()) attached = attach(proc.stdout_, std::move(stdio_parent[1]));
  if (attached.ok()) attached = attach(proc.stderr_, std::move(stdio_parent[2]));
  if (!attached.ok()) return abandon(attached);

  // Reaping: a pidfd when the kernel has pidfd_open (5.3+), else SIGCHLD. The pid cannot
  // have been reused yet, as only we can reap it.
  if (!options.use_sigchld_for_test) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));  // always O_CLOEXEC
    if (pidfd >= 0) attached = attach(proc.pidfd_, Fd(pidfd));
  }
  if (!proc.pidfd_) {
    proc.sigchld_ = std::make_unique<Process::SignalSet>(executor);
    std::error_code ec;
    proc.sigchld_->add(SIGCHLD, ec);
    if (ec) {
      return abandon(
          internal_error(fmt::format("spawn: cannot watch pidfd or SIGCHLD: {}", ec.message())));
    }
  }
  log::debug("spawned", {{"pid", static_cast<int64_t>(pid)}, {"argv0", program}});
  return proc;
}

}  // namespace cb::proc
