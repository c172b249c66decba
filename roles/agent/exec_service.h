#pragma once
// cocoonbox.agent.v1.Session/Exec on the agent (seed §13.7; README.md §Exec): runs one process
// as the box's desktop user, in its own session and process group, and carries its stdio over
// one bidi stream: stdin in (with credit-based flow control, so control frames are never stuck
// behind stdin the process does not read), stdout and stderr out as separate frames (one
// stream under a pty), window changes, signals to the group, and a final exit frame.
// Cancelling the call kills the process group (SIGTERM, then SIGKILL after a grace period).
//
// The decisions that need no I/O are plain functions (house style H14): resolve_exec_user()
// picks the account, plan_exec() validates a start frame and builds the spawn. ExecService
// runs calls and keeps track of their process groups so the agent can kill them at shutdown.
//
// The process must not die of SIGPIPE (a child that closes its stdin early makes our next
// write fail with EPIPE): the ExecService constructor sets SIGPIPE to SIG_IGN if it was left
// at SIG_DFL, which `cocoonbox` itself already does in main.
//
// Affinity: the agent's io_context.

#include "base/result.h"
#include "cocoonbox/agent/v1/session.pb.h"
#include "grpc/server.h"
#include "net/asio.h"
#include "proc/spawn.h"
#include "proc/user.h"

#include <chrono>
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace cb::agent {

// Metadata the edge sets to say who is calling: "owner" for the box's owner. A share's
// calls will carry something else. Exec is owner-only (seed §13.7): any other value is
// PERMISSION_DENIED. Absent means owner: today the edge relays only the owner's own calls.
inline constexpr std::string_view kPrincipalHeader = "x-cocoonbox-principal";
inline constexpr std::string_view kOwnerPrincipal = "owner";

// PATH of every Exec unless the start frame sets one (Debian's root PATH, so the box's
// admin tools are found too).
inline constexpr std::string_view kExecPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
inline constexpr std::string_view kExecLang = "C.UTF-8";
inline constexpr std::string_view kDefaultTerm = "xterm-256color";

struct ExecConfig {
  // The box's desktop user: processes run as this account when the agent runs as root and
  // the account exists; otherwise as the agent's own account.
  std::string desktop_user = "user";
  // The default working directory; when it does not exist, the user's home is used.
  std::string workspace = "/workspace";
  // After SIGTERM to a cancelled call's process group, this long until SIGKILL.
  std::chrono::milliseconds kill_grace{2000};
  // ExecStarted.stdin_window: stdin bytes a client may have in flight.
  size_t stdin_window = 4u << 20;
};

// The account an Exec runs as.
struct ExecUser {
  proc::User account;        // name, uid, gid, groups, home, shell
  bool switch_user = false;  // spawn switches to |account| (the agent is root)
};

// The desktop user when |agent_euid| is 0 and |desktop_user| names an account in /etc/passwd;
// otherwise the account of |agent_euid| (a uid missing from /etc/passwd gets the name
// "uid<N>", home "/" and shell /bin/sh).
// Errors: kInternal when /etc/passwd cannot be read.
Result<ExecUser> resolve_exec_user(std::string_view desktop_user, uid_t agent_euid);

// What one Exec runs.
struct ExecPlan {
  proc::SpawnOptions spawn;   // argv, env, cwd, user, pty; always a new session
  bool cwd_explicit = false;  // the start frame named the cwd (else ExecConfig::workspace)
  std::string terminfo;       // PtyRequest.terminfo (pty only)
};

// Validates |start| and builds the spawn: the program (argv, `$SHELL [-l] -c command`, or
// the interactive shell), the environment (defaults, then start.env), cwd, the user switch
// and the pty. Touches no file: whether the cwd exists is the caller's to check.
// Errors: kInvalidArgument naming the field (no program, empty argv or command, a NUL byte,
//   a relative cwd, a bad env name, pty size above 65535, a bad term name).
Result<ExecPlan> plan_exec(const ::cocoonbox::agent::v1::ExecStart& start, const ExecUser& user,
                           const ExecConfig& config);

// The signal number for |signal|. Errors: kInvalidArgument for UNSPECIFIED or unknown values.
Result<int> exec_signal_number(::cocoonbox::agent::v1::ExecSignal signal);

class ExecService {
 public:
  ExecService(net::Executor executor, ExecConfig config);
  // SIGKILLs the process groups of calls still running.
  ~ExecService();
  ExecService(const ExecService&) = delete;
  ExecService& operator=(const ExecService&) = delete;

  // Serves one Exec call until the process ended and its exit frame went out (OK), or the
  // call failed (the status to end it with; the process group was killed).
  asio::awaitable<Status> exec(grpc::CallContext& ctx,
                               grpc::ServerReader<::cocoonbox::agent::v1::ExecRequest>& reader,
                               grpc::ServerWriter<::cocoonbox::agent::v1::ExecResponse>& writer);

  // SIGKILL to the process group of every call still running (agent shutdown).
  void kill_all();
  // Calls whose process is running now.
  size_t running() const { return groups_.size(); }
  const ExecConfig& config() const { return config_; }

 private:
  net::Executor executor_;
  ExecConfig config_;
  std::set<pid_t> groups_;  // process group ids of the running calls
};

}  // namespace cb::agent
