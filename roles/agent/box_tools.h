#pragma once
// The box tools (src/tools/box_tools.json is their contract; README.md §Box tools): shell,
// read_file, write_file, edit_file, list_dir and grep, run in the box as the desktop user.
// The box MCP serves them, and the agent's own model loop uses the same implementation.
//
// Who: the account resolve_exec_user() picks, as for Exec. Processes (shell, grep) are spawned
// as that account. File tools run on a worker thread whose filesystem ids (setfsuid/setfsgid
// and supplementary groups, all per thread on Linux) are that account's for the duration of
// each operation, so the kernel checks permissions as for the user and new files belong to
// the user; an agent that is not root just uses its own ids.
//
// Paths: absolute, or relative to the workspace (ExecConfig::workspace, else the user's
// home). A path with a NUL byte is refused.
//
// Results follow MCP's CallToolResult: content blocks, optional structuredContent, isError.
// A failure of the tool itself (no such file, command timed out, no match for an edit) is a
// result with is_error; only an unknown tool (kNotFound) or arguments that break the
// contract's inputSchema (kInvalidArgument naming the field) are errors of the call.
//
// Shell sessions (README.md §Box tools): a `shell` call with a session key runs in a fresh
// bash that first restores the session's saved working directory and exported variables and
// saves them again when it ends, so `cd` and `export` carry over to the session's next call,
// while a command that times out or is killed never leaves the session half-changed (its
// state stays what it was before that command). The state is a file in a per-session
// directory `<sessions dir>/cocoonbox-shell-<uid>/<session>/`, both 0700 and owned by the
// account the tools run as. Commands of one session run one at a time, in the order they were
// called (a second waits for the first; its timeout starts when it runs), so each starts from
// the state the previous one left, as in a terminal. Over the box MCP a session belongs to
// the MCP session (McpShellScope) and is removed when that ends; sweep_sessions() removes
// those a dead agent left. Removal never follows a symlink and runs with the user's ids.
//
// Affinity: the agent's io_context; the worker thread is private.

#include "base/result.h"
#include "net/asio.h"
#include "roles/agent/exec_service.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace cb::agent {

struct ToolResult {
  nlohmann::json content = nlohmann::json::array();  // MCP content blocks
  nlohmann::json structured;                         // null, or structuredContent
  bool is_error = false;

  // {"content": [...], "structuredContent": {...}?, "isError": bool}
  nlohmann::json to_json() const;
  // Just the text blocks, joined by newlines (for logs and tests).
  std::string text() const;
};

// A result carrying one text block.
ToolResult text_result(std::string text, bool is_error = false);

struct BoxToolsLimits {
  size_t shell_output = 30000;        // bytes kept per stream (first and last halves)
  double shell_timeout_s = 120;       // default `timeout`
  size_t read_lines = 2000;           // default `limit`
  size_t line_chars = 2000;           // read_file cuts longer lines
  size_t text_file_bytes = 32 << 20;  // read_file/edit_file refuse larger text files
  size_t image_bytes = 10 << 20;      // read_file refuses larger images
  size_t list_entries = 1000;
  size_t grep_results = 200;  // default `max_results`
  size_t grep_line_chars = 500;
};

class BoxTools;

// The shell sessions of one MCP session (box_mcp.h keeps one per MCP session): their keys are
// `mcp-<agent pid>-<n>-<name>`, and destroying the scope removes their directories (on the
// worker thread, soon after). REQUIRES: the BoxTools outlives the scope.
class McpShellScope {
 public:
  McpShellScope(BoxTools& tools, uint64_t n);
  ~McpShellScope();
  McpShellScope(const McpShellScope&) = delete;
  McpShellScope& operator=(const McpShellScope&) = delete;
  // "mcp-<pid>-<n>-": the prefix of this scope's session keys.
  const std::string& prefix() const { return prefix_; }

 private:
  BoxTools& tools_;
  std::string prefix_;
};

class BoxTools {
 public:
  // |sessions_dir| holds the shell sessions' directories; empty: the agent's temporary
  // directory ($TMPDIR, else /tmp), which in a box is the box's own.
  BoxTools(net::Executor executor, ExecConfig config, BoxToolsLimits limits = {},
           std::filesystem::path sessions_dir = {});
  ~BoxTools();
  BoxTools(const BoxTools&) = delete;
  BoxTools& operator=(const BoxTools&) = delete;

  // Runs the tool |name| with |arguments|. Errors: kNotFound (no such tool), kInvalidArgument
  // (arguments do not fit the contract), kInternal (the account cannot be resolved).
  //
  // |owner| names whose shell sessions a `shell` call uses: the agent loop passes the agent's
  // id, so each agent keeps its own session ("agent-<id>"; with a `session` argument from the
  // model, "agent-<id>-<session>"). Empty (the box MCP): only a `session` argument gives a
  // session ("mcp-<session>"); without one the call is a one-off `$SHELL -c`.
  //
  // |scope| (the box MCP, owner empty): a `session` argument gives the key
  // scope->prefix() + session, removed when the scope ends.
  asio::awaitable<Result<ToolResult>> call(std::string_view name, const nlohmann::json& arguments,
                                           std::string_view owner = {},
                                           const McpShellScope* scope = nullptr);

  // A new scope for one MCP session's shell sessions.
  std::shared_ptr<McpShellScope> open_mcp_scope();

  // Removes the saved state of every shell session of agent |agent_id| (when an agent is
  // deleted), on the worker thread soon after.
  void end_agent_sessions(std::string_view agent_id);

  // At start: removes the session directories of MCP scopes whose agent is gone (its pid is
  // not running, or is this process, which has opened none yet). Returns how many.
  asio::awaitable<size_t> sweep_sessions();

  // The directory of the shell session |key| for |user| (created 0700 and owned by the user
  // when missing). Errors: kFailedPrecondition when it exists but is not a private directory
  // of the user's (a symlink, another owner, group or other access bits).
  Result<std::filesystem::path> session_dir(const ExecUser& user, std::string_view key) const;

  // The directory relative paths start from, for |user|.
  std::filesystem::path workspace(const ExecUser& user) const;

 private:
  friend class McpShellScope;
  struct Worker;
  // One session's queue of commands: |busy| while one runs; |waiters| wake in order;
  // |users| counts the calls holding or awaiting it (the entry goes when none do).
  struct SessionLine {
    bool busy = false;
    int users = 0;
    std::list<net::Timer*> waiters;
  };

  // <sessions dir>/cocoonbox-shell-<uid>.
  std::filesystem::path sessions_root(const ExecUser& user) const;
  // Removes, on the worker with the user's ids, the session directories under the root whose
  // key |match| accepts. Fire and forget (a later sweep catches what a stopped worker missed).
  void remove_sessions_later(std::function<bool(const std::string&)> match);

  // |session|: the session key, empty for a one-off shell.
  asio::awaitable<ToolResult> shell(const ExecUser& user, const nlohmann::json& args,
                                    std::string session);
  asio::awaitable<ToolResult> grep(const ExecUser& user, const nlohmann::json& args);
  // Runs |op| on the worker thread with |user|'s filesystem ids.
  asio::awaitable<ToolResult> on_worker(const ExecUser& user, std::function<ToolResult()> op);

  net::Executor executor_;
  ExecConfig config_;
  BoxToolsLimits limits_;
  std::filesystem::path sessions_dir_;
  std::unique_ptr<Worker> worker_;
  std::map<std::string, SessionLine> lines_;
  uint64_t next_scope_ = 1;
};

}  // namespace cb::agent
