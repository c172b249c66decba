#pragma once
// Starting child processes for an Asio loop (Linux only): argv, an explicit environment,
// working directory, user, session, and either three pipes or a pseudo-terminal. The
// Process that comes back exposes the parent's ends as Asio descriptors and reaps the child
// with co_await wait().
//
//   SpawnOptions o;
//   o.argv = {"sh", "-c", "echo hi"};
//   o.env = {"PATH=/usr/bin:/bin"};
//   CO_ASSIGN_OR_RETURN(Process p, spawn(co_await asio::this_coro::executor, o));
//   ... read p.stdout_pipe() until eof ...
//   CO_ASSIGN_OR_RETURN(ExitStatus st, co_await p.wait());
//
// Affinity: a Process belongs to the executor passed to spawn() (its descriptors are bound
// to it); call its methods only from there. spawn() itself may be called from any thread.
// See README.md for the fork/exec sequence and why each step is there.

#include "base/result.h"
#include "base/status.h"

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/signal_set.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <system_error>
#include <vector>

namespace cb::proc {

// The non-throwing completion token (house style H9). proc/ does not depend on net/, so it
// names the token itself.
using Token = asio::experimental::as_tuple_t<asio::use_awaitable_t<>>;
// One end of a pipe or a PTY master. Reads and writes complete with (error_code, size_t).
using Descriptor = Token::as_default_on_t<asio::posix::stream_descriptor>;

// True if |ec| from a read on a Descriptor means the output has ended: asio::error::eof on a
// pipe, or EIO on a PTY master once no process holds the terminal any more (Asio reports
// that in its own system category, so it does not compare equal to std::errc::io_error).
bool is_end_of_output(const std::error_code& ec);

struct PtyOptions {
  uint16_t rows = 24;
  uint16_t cols = 80;
  // Set as TERM in the child's environment, replacing any TERM in SpawnOptions::env.
  // Empty leaves the environment alone.
  std::string term = "xterm-256color";
};

// What a child's stdin, stdout or stderr is connected to when there is no PTY.
enum class Stdio {
  kPipe,  // a pipe whose other end is Process::stdin_pipe() / stdout_pipe() / stderr_pipe()
  kNull,  // /dev/null
};

struct SpawnOptions {
  // argv[0] is the program. With a '/', it is the path to execute; otherwise it is searched
  // in the PATH of the child's environment, or in /usr/local/sbin:/usr/local/bin:/usr/sbin:
  // /usr/bin:/sbin:/bin when that has no PATH. REQUIRES: not empty.
  std::vector<std::string> argv;
  // Working directory of the child, entered after switching user; default: the parent's.
  std::optional<std::filesystem::path> cwd;
  // The child's entire environment, as "NAME=value". The parent's environment is NOT passed
  // on unless |inherit_env| is true; then |env| entries override inherited ones by name.
  std::vector<std::string> env;
  bool inherit_env = false;

  // Run as another user. |user| is looked up with lookup_user() (proc/user.h) and gives
  // uid, gid and the supplementary groups initgroups(3) would set. Without |user|, |uid| and
  // |gid| are used as given, the supplementary groups are cleared, and an unset |gid| or
  // |uid| keeps the parent's. Explicit |uid| / |gid| override what |user| gives.
  // Needs CAP_SETUID / CAP_SETGID (in practice: root), else spawn() is kPermissionDenied.
  std::optional<std::string> user;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;

  // Start a new session (setsid): the child leads a new process group whose id is its pid,
  // so Process::signal() reaches its descendants too, and it has no controlling terminal
  // but the PTY (if any). Implied by |pty|.
  bool new_session = false;

  // Signal the child gets when the thread that spawned it ends (PR_SET_PDEATHSIG, set after
  // the user switch, which would clear it), e.g. SIGKILL so that a helper never outlives its
  // parent, even one killed with -9. 0: none. A parent that died between fork() and the
  // prctl is noticed and the child exits (127) instead of running unwatched. Note: it is the
  // spawning *thread*, so spawn from a thread that lives as long as the process (a role's
  // io_context thread does).
  int parent_death_signal = 0;

  // Give the child a pseudo-terminal as stdin, stdout, stderr and controlling terminal.
  // The stdio modes below are then ignored and Process::pty_master() is the parent's end.
  std::optional<PtyOptions> pty;

  Stdio stdin_mode = Stdio::kPipe;
  Stdio stdout_mode = Stdio::kPipe;
  Stdio stderr_mode = Stdio::kPipe;
  // Capacity asked for each stdio pipe (F_SETPIPE_SZ), 0 for the kernel's default (64 KiB).
  // Best effort: the kernel rounds it up to whole pages and an unprivileged caller gets at most
  // /proc/sys/fs/pipe-max-size; a refusal keeps the default.
  size_t pipe_size = 0;

  // Test hook: reap with the SIGCHLD fallback even when pidfd_open(2) is available.
  bool use_sigchld_for_test = false;
};

// How a child ended.
struct ExitStatus {
  bool exited = false;  // true: it called exit(code); false: it was killed by |signal|
  int code = 0;
  int signal = 0;
  bool core_dumped = false;

  bool success() const { return exited && code == 0; }
  // "exited with code 3" or "killed by signal 15 (SIGTERM)".
  std::string to_string() const;
};

class Process {
 public:
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // Closes the parent's descriptors. Does NOT kill the child (see kill_group()); if it has
  // not been reaped by wait(), a non-blocking waitpid is tried and otherwise it is left to
  // run, and becomes a zombie of this process when it exits.
  ~Process();

  pid_t pid() const { return pid_; }

  // The parent's ends, owned by this Process; null when the child's stream is not a pipe
  // (Stdio::kNull, or a PTY). Callers may std::move the Descriptor out.
  Descriptor* stdin_pipe() { return stdin_ ? &*stdin_ : nullptr; }
  Descriptor* stdout_pipe() { return stdout_ ? &*stdout_ : nullptr; }
  Descriptor* stderr_pipe() { return stderr_ ? &*stderr_ : nullptr; }
  Descriptor* pty_master() { return pty_ ? &*pty_ : nullptr; }

  // Closes stdin_pipe(), so the child reads end of file. No-op without a stdin pipe.
  void close_stdin();

  // Sets the PTY's window size; the kernel sends SIGWINCH to the terminal's foreground
  // process group. Errors: kFailedPrecondition without a PTY; kInternal.
  Status resize(uint16_t rows, uint16_t cols);

  // Sends |sig| to the child's process group when it was spawned with new_session (or a
  // PTY), else to the child alone.
  // Errors: kFailedPrecondition if the child alone is targeted and it has been reaped (its pid
  //         may already name another process); kNotFound if nothing is left to signal;
  //         kPermissionDenied; kInvalidArgument for a bad |sig|.
  Status signal(int sig);

  // SIGKILL to the whole process group: the child and every descendant that stayed in its
  // group. Still works after the child itself has been reaped, while descendants remain.
  // Errors: kFailedPrecondition without new_session; otherwise as signal().
  Status kill_group();

  // Waits until the child exits and reaps it; later calls return the same status at once.
  // Reaping uses a pidfd (pidfd_open(2), Linux >= 5.3) watched by the loop, or, when that is
  // unavailable, SIGCHLD through an asio::signal_set plus waitpid(WNOHANG). The fallback
  // needs SIGCHLD not to be ignored in this process.
  // REQUIRES: at most one wait() outstanding; the Process is not moved while it is.
  // Errors: kCancelled if the wait was cancelled; kInternal (for example the child was reaped
  //         by someone else).
  asio::awaitable<Result<ExitStatus>> wait();

  // The status if wait() has reaped the child.
  const std::optional<ExitStatus>& exit_status() const { return exit_; }

 private:
  using SignalSet = Token::as_default_on_t<asio::signal_set>;
  friend Result<Process> spawn(const asio::any_io_executor& executor, const SpawnOptions& options);
  explicit Process(pid_t pid) : pid_(pid) {}

  // waitpid(WNOHANG): true once the child is reaped (|exit_| set).
  Result<bool> try_reap();
  void stop_watching();

  pid_t pid_ = -1;
  bool group_ = false;  // the child leads its own process group
  std::optional<Descriptor> stdin_;
  std::optional<Descriptor> stdout_;
  std::optional<Descriptor> stderr_;
  std::optional<Descriptor> pty_;
  std::optional<Descriptor> pidfd_;     // readable once the child has exited
  std::unique_ptr<SignalSet> sigchld_;  // the fallback when there is no pidfd
  std::optional<ExitStatus> exit_;
};

// Forks and executes |options.argv|. Returns once the child has called execve(2) (the
// calling thread blocks for that short while) or has failed before it.
// Errors: kInvalidArgument if argv is empty or a string holds a NUL byte;
//         kNotFound if the program (or the cwd) does not exist, naming argv[0] (or the cwd)
//           and the errno text;
//         kPermissionDenied if it is not executable, or the user switch is not permitted;
//         kNotFound from lookup_user() for an unknown |user|;
//         kResourceExhausted if fork, pipe or PTY creation fails for lack of resources;
//         kInternal otherwise.
Result<Process> spawn(const asio::any_io_executor& executor, const SpawnOptions& options);

}  // namespace cb::proc
