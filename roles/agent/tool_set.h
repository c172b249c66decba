#pragma once
// ToolSet: a group of tools the agent's model loop can call (README.md §Agents, "Tools"). The
// loop offers the tools of every set it was given and sends each call to the set that named
// the tool. The box tools are one set (BoxToolSet); the browser tools and shell sessions join
// the same way:
//
//   class BrowserTools final : public ToolSet { ... };
//   agents.add_tool_set(browser);   // before the first turn; not owned
//
// A set describes its tools as MCP Tool objects (name, description, inputSchema, annotations),
// as src/tools/*.json do; `annotations.destructiveHint: true` makes a call wait for the
// user's approval when the agent's approval mode is "ask".
//
// Affinity: the agent's io_context.

#include "base/result.h"
#include "net/asio.h"
#include "roles/agent/box_tools.h"

#include <nlohmann/json.hpp>

#include <string_view>

namespace cb::agent {

class ToolSet {
 public:
  virtual ~ToolSet() = default;

  // The tools, a JSON array of MCP Tool objects. Names are unique across the sets given to
  // one loop. May change between turns (each turn asks again).
  virtual nlohmann::json defs() const = 0;

  // Runs |name| (one of defs()) with |arguments|. A failure of the tool itself is a result
  // with is_error; errors of the call are kNotFound (no such tool) and kInvalidArgument
  // (arguments that break the inputSchema), which the loop also hands to the model as an
  // error result. Cancelling the awaiting coroutine (Agents.Cancel) must stop the tool.
  virtual asio::awaitable<Result<ToolResult>> call(std::string_view name,
                                                   const nlohmann::json& arguments) = 0;

  // The call as the model loop makes it, for agent |agent_id|'s turn. Sets that keep state
  // per agent override it (the box tools: each agent's own shell session); by default call().
  virtual asio::awaitable<Result<ToolResult>> call_for(std::string_view agent_id,
                                                       std::string_view name,
                                                       const nlohmann::json& arguments) {
    (void)agent_id;
    return call(name, arguments);
  }
};

// The box tools (src/tools/box_tools.json) through BoxTools.
class BoxToolSet final : public ToolSet {
 public:
  explicit BoxToolSet(BoxTools& tools) : tools_(tools) {}  // |tools| outlives this
  nlohmann::json defs() const override;
  asio::awaitable<Result<ToolResult>> call(std::string_view name,
                                           const nlohmann::json& arguments) override;
  // The shell runs in the agent's own session (BoxTools::call's |owner|).
  asio::awaitable<Result<ToolResult>> call_for(std::string_view agent_id, std::string_view name,
                                               const nlohmann::json& arguments) override;

 private:
  BoxTools& tools_;
};

// True when |tool| (an MCP Tool object) says annotations.destructiveHint: true.
bool is_destructive(const nlohmann::json& tool);

}  // namespace cb::agent
