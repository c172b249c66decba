#pragma once
// The table of roles built into the cocoonbox binary. The dispatcher (main.cc) is the only
// file that includes every role's header; a role never includes another role (house style H2).
//
// Each entry: the name used as "cocoonbox <name>" or a "cocoonbox-<name>" link, the role's
// run function (args[0] is the role name; returns the exit status), and a one-line summary
// for --help. A role is listed here only once it is real.

#include <span>
#include <string_view>
#include <vector>

#ifdef CB_HAVE_ROLE_AGENT
#include "roles/agent/agent.h"
#endif
#ifdef CB_HAVE_ROLE_API
#include "roles/api/api.h"
#endif
#ifdef CB_HAVE_ROLE_BRIDGE
#include "roles/bridge/bridge.h"
#endif
#ifdef CB_HAVE_ROLE_CLI
#include "roles/cli/cli.h"
#endif
#ifdef CB_HAVE_ROLE_RSH
#include "roles/rsh/rsh.h"
#endif

namespace cb {

struct Role {
  std::string_view name;
  int (*run)(std::span<char* const> args);
  std::string_view summary;
};

inline const std::vector<Role> kRoles = {
#ifdef CB_HAVE_ROLE_API
    {"api", api::run, "control plane and edge (runs on the host)"},
#endif
#ifdef CB_HAVE_ROLE_AGENT
    {"agent", agent::run, "the agent that lives in each box"},
#endif
#ifdef CB_HAVE_ROLE_RSH
    {"rsh", rsh::run, "run a command in your box; git's and rsync's remote shell"},
#endif
};

// The user's commands (seed §13.4): "cocoonbox <command> ...", never a link of their own.
inline const std::vector<Role> kCommands = {
#ifdef CB_HAVE_ROLE_CLI
    {"login", cli::run, "sign in to an api with a token"},
    {"logout", cli::run, "forget the stored token"},
    {"status", cli::run, "show a box: state, image, attached clients"},
    {"ensure", cli::run, "create the box if absent, wake it if hibernated"},
    {"hibernate", cli::run, "freeze a box; its programs and memory are kept"},
    {"upgrade", cli::run, "recreate a box on the current image, keeping its data"},
    {"boxes", cli::run, "list your boxes"},
    {"box", cli::run, "box create NAME | box rm NAME"},
    {"save", cli::run, "save a box's files as a new snapshot"},
    {"snapshots", cli::run, "list a box's saved snapshots"},
    {"browse", cli::run, "list one directory of a snapshot"},
    {"restore", cli::run, "restore files of a snapshot into ~/Restored in the box"},
#endif
#ifdef CB_HAVE_ROLE_BRIDGE
    {"mcp", bridge::run, "stdio MCP server for local coding agents: box tools, waking on demand"},
#endif
#ifdef CB_HAVE_ROLE_CLI
    {"setup", cli::run, "register `cocoonbox mcp` with claude, codex or cursor"},
    {"mcp-headers", cli::run, "print the Authorization header for a direct MCP config"},
    {"completion", cli::run, "print shell completion for bash or zsh"},
    {"agents", cli::run, "list the agents in a box with their last turn"},
    {"chat", cli::run, "talk to the agent in a box"},
#endif
};

}  // namespace cb
