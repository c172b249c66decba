#pragma once
// `cocoonbox setup claude|codex|cursor [--print] [--box NAME]` (seed §13.5): registers
// `cocoonbox mcp` as an MCP server in a local coding agent's own config file, so the client
// starts the bridge itself. No URL and no token goes into any file: the bridge finds both
// through `cocoonbox login`'s config.
//
//   claude  $CLAUDE_CONFIG_DIR/.claude.json or ~/.claude.json   mcpServers.cocoonbox (user scope)
//   codex   $CODEX_HOME/config.toml or ~/.codex/config.toml     [mcp_servers.cocoonbox]
//   cursor  ~/.cursor/mcp.json                                  mcpServers.cocoonbox
//
// Everything else in the file is kept; an existing cocoonbox entry is replaced.

#include "base/result.h"

#include <filesystem>
#include <string>
#include <string_view>

namespace cb::cli {

struct SetupPlan {
  std::string client;
  std::filesystem::path file;  // the client's config file
  std::string content;         // its whole new content
  std::string snippet;         // just our entry, for --print
  bool replaced = false;       // the file already had a cocoonbox entry
};

// The command a client should run: "cocoonbox" when PATH finds this very binary, else its
// absolute path.
std::filesystem::path self_command();

// What setup would write for |client|. Errors: kInvalidArgument (unknown client),
// kFailedPrecondition (the existing file cannot be read or parsed; nothing is written).
Result<SetupPlan> plan_setup(std::string_view client, const std::string& box,
                             const std::filesystem::path& command);

// Writes plan.file atomically (a new file 0600, an existing one keeps its mode).
Status apply_setup(const SetupPlan& plan);

}  // namespace cb::cli
