#pragma once
// The cocoonbox CLI on the user's machine (seed §13.4; architecture §2): sign in to an api
// and drive one's boxes.
//
//   cocoonbox login [--endpoint URL] [--token -] [--credential-helper CMD]
//   cocoonbox logout
//   cocoonbox status|ensure|hibernate|upgrade [--box NAME] [--json] ...
//   cocoonbox boxes [--json]          cocoonbox box create|rm NAME
//   cocoonbox setup claude|codex|cursor [--print]   cocoonbox mcp-headers
//   cocoonbox completion bash|zsh
//
// Exit codes: 0 ok, 1 error (the api said no, or cannot be reached), 2 usage.
// Progress of long operations goes to stderr; results to stdout (JSON with --json).

#include <span>

namespace cb::cli {

// args[0] is the command name. Returns the exit status.
int run(std::span<char* const> args);

}  // namespace cb::cli
