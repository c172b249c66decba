// The code between clone(2) and the box init's execve, and the report it leaves on failure.
//
// The api has other threads (the db worker, the blocking pool), and any of them may have held
// a lock (malloc's, stdio's) at the moment of the clone. So from the clone to the execve only
// async-signal-safe calls and raw system calls (signal-safety(7)): no allocation, no stdio,
// no exceptions. Everything is prepared by the parent in a ChildPlan.

#include "roles/api/machines/local_internal.h"

#include <fmt/format.h>

#include <cerrno>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <system_error>
#include <unistd.h>

namespace cb::api::machines::internal {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status errno_status(int err, std::string_view what) {
  std::string msg =
      fmt::format("{}: {}", what, std::error_code(err, std::generic_category()).message());
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ESRCH:
      return not_found(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return permission_denied(msg);
    case EEXIST:
      return already_exists(msg);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case ENOSPC:
      return resource_exhausted(msg);
    case EINVAL:
      return invalid_argument(msg);
    default:
      return internal_error(msg);
  }
}

namespace {

[[noreturn]] void fail(int report_fd, int32_t step, int err, int32_t index = 0) {
  cb_box_report r;
  ::memset(&r, 0, sizeof r);
  r.step = step;
  r.err = err;
  r.index = index;
  // One write of 12 bytes to a pipe is atomic; nothing useful can be done if it fails.
  [[maybe_unused]] ssize_t n = ::write(report_fd, &r, sizeof r);
  ::_exit(127);
}

// One step of the root plan. Returns 0 or -1 with errno set.
int run_op(const MountOp& op) {
  const char* target = op.target.c_str();
  switch (op.kind) {
    case MountOpKind::kMkdir:
      if (::mkdir(target, op.mode) != 0 && errno != EEXIST) return -1;
      return 0;
    case MountOpKind::kSymlink:
      return ::symlink(op.source.c_str(), target);
    case MountOpKind::kTouch: {
      int fd = ::open(target, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, op.mode);
      if (fd < 0) return -1;
      ::close(fd);
      return 0;
    }
    case MountOpKind::kBindHost:
    case MountOpKind::kBindWritable:
      // A new bind takes its source's flags, so writable binds made after kReadOnlyTree
      // stay writable.
      return ::mount(op.source.c_str(), target, nullptr, MS_BIND | MS_REC, nullptr);
    case MountOpKind::kReadOnlyTree: {
      // mount_setattr(2), Linux >= 5.12: the only way to make a whole subtree read-only in
      // one step (MS_REMOUNT|MS_BIND|MS_RDONLY changes one mount). create() checks for it.
      struct mount_attr attr;
      ::memset(&attr, 0, sizeof attr);
      attr.attr_set = MOUNT_ATTR_RDONLY;
      return static_cast<int>(
          ::syscall(SYS_mount_setattr, AT_FDCWD, target, AT_RECURSIVE, &attr, sizeof attr));
    }
    case MountOpKind::kTmpfs:
      return ::mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, op.data.c_str());
    case MountOpKind::kProc:
      return ::mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  }
  errno = EINVAL;
  return -1;
}

}  // namespace

[[noreturn]] void run_box_child(const ChildPlan& p) {
  // Handlers the api installed make no sense here, and ignored signals (SIGPIPE) would stay
  // ignored across execve. sigaction() on glibc's reserved signals fails; harmless.
  struct sigaction dfl;
  ::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::umask(0);

  // A session of its own: no terminal, no signals meant for the api's process group.
  if (::setsid() < 0) fail(p.report_fd, CB_STEP_SETSID, errno);
  // "0" moves the writer itself (cgroup v2); before anything else, so every process of the
  // box is born inside the cgroup.
  if (p.cgroup_procs_fd >= 0 && ::write(p.cgroup_procs_fd, "0", 1) != 1) {
    fail(p.report_fd, CB_STEP_CGROUP, errno);
  }

  if (p.isolated) {
    // Our copy of the mount table must not propagate anything back to the host.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail(p.report_fd, CB_STEP_MOUNT_PRIVATE, errno);
    }
    // The new root. Unbindable, so that binding a host directory that contains it (box_dir
    // below a bound directory) does not copy the half-built root into itself.
    if (::mount("tmpfs", p.new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m") != 0 ||
        ::mount(nullptr, p.new_root, nullptr, MS_UNBINDABLE, nullptr) != 0) {
      fail(p.report_fd, CB_STEP_ROOT_TMPFS, errno);
    }
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      if (run_op(p.ops[i]) != 0 && !p.ops[i].optional) {
        fail(p.report_fd, CB_STEP_MOUNT_OP, errno, static_cast<int32_t>(i));
      }
    }
    if (::sethostname(p.hostname, p.hostname_len) != 0) fail(p.report_fd, CB_STEP_HOSTNAME, errno);
    // pivot_root(".", ".") stacks the old root on the new one; detaching "." then drops it
    // (pivot_root(2), NOTES).
    if (::chdir(p.new_root) != 0 || ::syscall(SYS_pivot_root, ".", ".") != 0 ||
        ::umount2(".", MNT_DETACH) != 0 || ::chdir("/") != 0) {
      fail(p.report_fd, CB_STEP_PIVOT_ROOT, errno);
    }
  }

  // Every fd is >= 3 (the parent made sure), so none is overwritten here.
  if (::dup2(p.stdin_fd, 0) < 0 || ::dup2(p.log_fd, 1) < 0 || ::dup2(p.log_fd, 2) < 0) {
    fail(p.report_fd, CB_STEP_STDIO, errno);
  }
  // Nothing of the api's may leak into the box. close_range(2) is Linux >= 5.11; on older
  // kernels the parent's O_CLOEXEC discipline has to do. The report pipe goes to the init.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  if (::fcntl(p.report_fd, F_SETFD, 0) != 0) fail(p.report_fd, CB_STEP_STDIO, errno);

  if (p.new_user_ns) {
    // After the mounts, which root made in the host's user namespace: the mount, pid, uts
    // and ipc namespaces stay owned by it, so the box's root gains no power over them. An
    // unshare, not a clone flag: a mount namespace owned by the new user namespace would let
    // the agent unmount and remount what the plan built.
    if (p.go_write_fd >= 0) ::close(p.go_write_fd);
    if (::unshare(CLONE_NEWUSER) != 0) fail(p.report_fd, CB_STEP_USERNS, errno);
    cb_box_report ready;
    ::memset(&ready, 0, sizeof ready);
    ready.step = CB_STEP_USERNS_READY;
    if (::write(p.report_fd, &ready, sizeof ready) != static_cast<ssize_t>(sizeof ready)) {
      fail(p.report_fd, CB_STEP_USERNS_WAIT, errno);
    }
    char go = 0;
    ssize_t n;
    do {
      n = ::read(p.go_fd, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) fail(p.report_fd, CB_STEP_USERNS_WAIT, n == 0 ? EPIPE : errno);
    ::close(p.go_fd);
  }
  if (p.change_identity) {
    // Raw syscalls: glibc's wrappers broadcast the change to every thread by signal, which
    // is not safe in a forked child. Groups first, while we still have CAP_SETGID.
    if (::syscall(SYS_setgroups, p.groups.size(), p.groups.data()) != 0) {
      fail(p.report_fd, CB_STEP_SETGROUPS, errno);
    }
    if (::syscall(SYS_setresgid, p.gid, p.gid, p.gid) != 0) {
      fail(p.report_fd, CB_STEP_SETGID, errno);
    }
    if (::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) {
      fail(p.report_fd, CB_STEP_SETUID, errno);
    }
  }
  // The host's setuid programs are visible in the box; they must not raise privileges.
  if (p.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    fail(p.report_fd, CB_STEP_NO_NEW_PRIVS, errno);
  }
  if (p.cwd != nullptr && ::chdir(p.cwd) != 0) fail(p.report_fd, CB_STEP_CHDIR, errno);
  ::umask(022);

  ::syscall(SYS_execveat, p.init_fd, "", p.init_argv, p.envp, AT_EMPTY_PATH);
  fail(p.report_fd, CB_STEP_EXEC_INIT, errno);
}

Status report_status(const cb_box_report& r, std::span<const MountOp> ops, std::string_view agent) {
  auto what = [&]() -> std::string {
    switch (r.step) {
      case CB_STEP_SETSID:
        return "box start: setsid";
      case CB_STEP_CGROUP:
        return "box start: join the box's cgroup";
      case CB_STEP_MOUNT_PRIVATE:
        return "box start: make the mount namespace private";
      case CB_STEP_ROOT_TMPFS:
        return "box start: mount the box's root tmpfs";
      case CB_STEP_MOUNT_OP: {
        if (r.index < 0 || static_cast<std::size_t>(r.index) >= ops.size()) {
          return "box start: mount step";
        }
        const MountOp& op = ops[static_cast<std::size_t>(r.index)];
        return op.source.empty() ? fmt::format("box start: prepare {}", op.target)
                                 : fmt::format("box start: mount {} at {}", op.source, op.target);
      }
      case CB_STEP_HOSTNAME:
        return "box start: sethostname";
      case CB_STEP_PIVOT_ROOT:
        return "box start: pivot_root";
      case CB_STEP_STDIO:
        return "box start: set up stdio";
      case CB_STEP_SETGROUPS:
        return "box start: setgroups";
      case CB_STEP_SETGID:
        return "box start: setgid";
      case CB_STEP_SETUID:
        return "box start: setuid";
      case CB_STEP_NO_NEW_PRIVS:
        return "box start: prctl(PR_SET_NO_NEW_PRIVS)";
      case CB_STEP_CHDIR:
        return "box start: chdir to the workspace";
      case CB_STEP_EXEC_INIT:
        return "box start: exec the box init";
      case CB_STEP_USERNS:
        return "box start: unshare(CLONE_NEWUSER)";
      case CB_STEP_USERNS_WAIT:
        return "box start: wait for the user namespace's id maps";
      case CB_STEP_INIT_SETUP:
        return "box init: signals";
      case CB_STEP_INIT_FORK:
        return "box init: fork";
      case CB_STEP_EXEC_AGENT:
        return fmt::format("box start: exec {}", agent);
      default:
        return fmt::format("box start: unknown step {}", r.step);
    }
  }();
  Status s = errno_status(r.err, what);
  // Only a missing or unusable agent program is the caller's to fix; the rest is the host.
  if (r.step != CB_STEP_EXEC_AGENT && s.code() != Code::kResourceExhausted &&
      s.code() != Code::kPermissionDenied) {
    return internal_error(s.message());
  }
  return s;
}

}  // namespace cb::api::machines::internal
