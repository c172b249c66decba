#include "proc/errno_internal.h"
#include "proc/spawn.h"

#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <utility>

namespace cb::proc {

using internal::errno_status;
using internal::errno_text;

bool is_end_of_output(const std::error_code& ec) {
  return ec == asio::error::eof ||
         (ec.value() == EIO && ec.category() == asio::error::get_system_category());
}

std::string ExitStatus::to_string() const {
  if (exited) return fmt::format("exited with code {}", code);
  const char* abbrev = sigabbrev_np(signal);
  return fmt::format("killed by signal {} (SIG{}){}", signal, abbrev ? abbrev : "?",
                     core_dumped ? ", core dumped" : "");
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      group_(other.group_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      pty_(std::move(other.pty_)),
      pidfd_(std::move(other.pidfd_)),
      sigchld_(std::move(other.sigchld_)),
      exit_(std::move(other.exit_)) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    Process doomed(std::move(*this));  // runs the destructor's reap attempt for our child
    pid_ = std::exchange(other.pid_, -1);
    group_ = other.group_;
    stdin_ = std::move(other.stdin_);
    stdout_ = std::move(other.stdout_);
    stderr_ = std::move(other.stderr_);
    pty_ = std::move(other.pty_);
    pidfd_ = std::move(other.pidfd_);
    sigchld_ = std::move(other.sigchld_);
    exit_ = std::move(other.exit_);
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !exit_) {
    // Best effort only: never block the loop here. A child still running is left alone.
    int status = 0;
    ::waitpid(pid_, &status, WNOHANG);
  }
}

void Process::close_stdin() { stdin_.reset(); }

Status Process::resize(uint16_t rows, uint16_t cols) {
  if (!pty_) return failed_precondition("resize: the process has no pty");
  struct winsize ws {};
  ws.ws_row = rows;
  ws.ws_col = cols;
  if (::ioctl(pty_->native_handle(), TIOCSWINSZ, &ws) != 0) {
    return errno_status(errno, "ioctl(TIOCSWINSZ)");
  }
  return ok_status();
}

Status Process::signal(int sig) {
  if (group_) {
    if (::kill(-pid_, sig) != 0) {
      return errno_status(errno, fmt::format("signal {} to process group {}", sig, pid_));
    }
    return ok_status();
  }
  if (exit_) {
    return failed_precondition(fmt::format("signal: process {} was already reaped", pid_));
  }
  // Through the pidfd when there is one: it cannot hit a recycled pid.
  if (pidfd_ && ::syscall(SYS_pidfd_send_signal, pidfd_->native_handle(), sig, nullptr, 0) == 0) {
    return ok_status();
  }
  if (pidfd_ && errno != ENOSYS) {
    return errno_status(errno, fmt::format("signal {} to process {}", sig, pid_));
  }
  if (::kill(pid_, sig) != 0) {
    return errno_status(errno, fmt::format("signal {} to process {}", sig, pid_));
  }
  return ok_status();
}

Status Process::kill_group() {
  if (!group_) {
    return failed_precondition(
        fmt::format("kill_group: process {} was not spawned with new_session", pid_));
  }
  return signal(SIGKILL);
}

Result<bool> Process::try_reap() {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  if (r < 0) return internal_error(fmt::format("waitpid {}: {}", pid_, errno_text(errno)));
  ExitStatus st;
  if (WIFEXITED(status)) {
    st.exited = true;
    st.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    st.signal = WTERMSIG(status);
    st.core_dumped = WCOREDUMP(status);
  }
  exit_ = st;
  stop_watching();
  return true;
}

void Process::stop_watching() {
  pidfd_.reset();
  sigchld_.reset();
}

asio::awaitable<Result<ExitStatus>> Process::wait() {
  while (!exit_) {
    // Check before every wait: the child may have exited before we started watching, and
    // a SIGCHLD may belong to another child. With the fallback, the signal_set was
    // registered in spawn(), so a SIGCHLD arriving after this check is queued for
    // async_wait() rather than lost.
    CO_ASSIGN_OR_RETURN(bool reaped, try_reap());
    if (reaped) break;
    std::error_code ec;
    if (pidfd_) {
      auto [e] = co_await pidfd_->async_wait(asio::posix::descriptor_base::wait_read);
      ec = e;
    } else if (sigchld_) {
      auto [e, sig] = co_await sigchld_->async_wait();
      ec = e;
    } else {
      co_return internal_error(fmt::format("wait: process {} is not being watched", pid_));
    }
    if (ec == asio::error::operation_aborted) {
      co_return cancelled(fmt::format("wait for process {}", pid_));
    }
    if (ec) co_return internal_error(fmt::format("wait for process {}: {}", pid_, ec.message()));
  }
  co_return *exit_;
}

}  // namespace cb::proc
