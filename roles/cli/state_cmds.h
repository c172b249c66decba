#pragma once
// The CLI's state commands (README.md §State; seed §25): saves, the timeline, browsing and
// restoring files of a box.
//
//   cocoonbox save [--box B] [--json]
//   cocoonbox snapshots [--box B] [--json]
//   cocoonbox browse SNAPSHOT [DIR] [--box B] [--json]
//   cocoonbox restore PATH... (--snapshot ID | --at TIME) [--target NAME] [--box B] [--json]
//
// Progress (bytes, chunks) goes to stderr; results to stdout (JSON with --json). Exit codes as
// the rest of the CLI: 0 ok, 1 error, 2 usage.

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace cb::cli {

struct StateOptions {
  std::string box;
  bool json = false;
  bool quiesce = false;  // save --quiesce
  std::string snapshot;  // browse: SNAPSHOT; restore: --snapshot
  std::string dir;       // browse
  std::string at;        // restore --at
  std::string target;    // restore --target
  std::vector<std::string> paths;
};

// Adds the four commands to |app|; their options land in |o|.
void add_state_commands(CLI::App& app, StateOptions& o);

// True for "save", "snapshots", "browse" and "restore".
bool is_state_command(std::string_view command);

// Runs |command| (signed in with the stored login). Returns the exit status.
int run_state_command(std::string_view command, const StateOptions& o);

// The time of --at TIME in ms since the epoch: "2026-10-02T16:08:12Z", "2026-10-02T16:08Z",
// "2026-10-02" (UTC; each the end of that second, minute or day), or "@<unix seconds>[.mmm]".
// Returns -1 when it does not parse.
int64_t parse_at(std::string_view text);

}  // namespace cb::cli
