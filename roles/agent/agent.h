#pragma once
// `cocoonbox agent`: the agent that lives in each box (architecture §2, seed §3 and §4.2(a)).
// It serves cocoonbox.agent.v1.Session over gRPC (h2c) on a unix socket, and optionally on one
// loopback TCP listener; the api's edge dials it and relays clients' calls, adding
// x-cocoonbox-credential to each. Every call is checked against the box's current identity
// file (seed §12.1 option A): see README.md §Credentials.
//
//   cocoonbox agent [--socket PATH] [--listen HOST:PORT [--allow-remote]]
//                   [--identity PATH] [--data-dir DIR] [--version] [--help]
//
// Exit status: 0 after a clean SIGTERM/SIGINT shutdown (or --help/--version), 1 when it cannot
// start or fails while running, 2 on bad usage.
//
// The pieces (flags, identity watcher, box key, agent.db, Session service and the Agent that
// ties them together) have their own headers in this folder; this is the dispatcher's view.

#include <span>

namespace cb::agent {

// Runs the agent until SIGTERM or SIGINT. |args| is the command line from the role name on
// (args[0] is "agent"). Owns its io_context; never throws.
int run(std::span<char* const> args);

}  // namespace cb::agent
