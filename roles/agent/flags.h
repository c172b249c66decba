#pragma once
// Command-line flags of `cocoonbox agent` (README.md §Flags) and the small parsers behind
// them. parse_flags() contains CLI11's exceptions (house style H8): it either returns the
// options or the exit status to end with, having printed help, the version or a usage error.

#include "base/result.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace cb::agent {

inline constexpr std::string_view kDefaultSocketPath = "/run/cocoonbox/agent.sock";
inline constexpr std::string_view kDefaultIdentityPath = "/run/cocoonbox/identity";
inline constexpr std::string_view kRootDataDir = "/var/lib/cocoonbox-agent";

// A TCP listen address. |host| is an IP literal without brackets ("localhost" is resolved to
// 127.0.0.1 by the parser).
struct HostPort {
  std::string host;
  uint16_t port = 0;

  // "127.0.0.1:7443" or "[::1]:7443".
  std::string to_string() const;
};

// Parses "HOST:PORT" or "[V6]:PORT"; PORT is 0..65535 (0 picks a free port). HOST must be an
// IP literal or "localhost".
// Errors: kInvalidArgument naming what is wrong.
Result<HostPort> parse_host_port(std::string_view text);

// True for 127.0.0.0/8, ::1.
bool is_loopback(const HostPort& address);

// The default --data-dir: /var/lib/cocoonbox-agent as root, else
// $XDG_DATA_HOME/cocoonbox-agent, else $HOME/.local/share/cocoonbox-agent (XDG Base
// Directory: a relative or empty XDG_DATA_HOME is ignored). |xdg_data_home| and |home| may be
// null (unset).
// Errors: kInvalidArgument when neither variable gives an absolute directory.
Result<std::string> default_data_dir(bool is_root, const char* xdg_data_home, const char* home);

struct Flags {
  std::string socket_path = std::string(kDefaultSocketPath);
  std::optional<HostPort> listen;  // --listen; loopback unless allow_remote
  bool allow_remote = false;
  std::string identity_path = std::string(kDefaultIdentityPath);
  std::string data_dir;  // resolved: never empty in a returned Flags
  // Session.Exec and the tools run as this account (agent as root); $COCOONBOX_DESKTOP_USER
  // when set (the local backend's privilege split), else "user".
  std::string desktop_user = "user";
  std::string workspace = "/workspace";  // Session.Exec's default working directory
  // Agents' main model (README.md §Agents). Empty name: no model, Send is refused.
  std::string model;
  std::string model_wire = "openai";  // "openai" | "anthropic"
  bool model_vision = false;
  int64_t model_context_tokens = 128000;
  // Where the model door is: default unix:$COCOONBOX_RUN_DIR/model.sock when that variable is
  // set (a box that is not isolated), else unix:/run/cocoonbox/model.sock.
  std::string model_endpoint;
  int max_steps = 50;
  // How long a tool call waits for the user's approval before the turn ends as
  // waiting_for_user (README.md §Approvals).
  int approval_timeout_s = 600;
};

// Parses |args| (args[0] is the role name). Returns the Flags, or the exit status after
// printing: 0 for --help (stdout) and --version (stdout), 2 for a usage error (stderr).
std::variant<Flags, int> parse_flags(std::span<char* const> args);

}  // namespace cb::agent
