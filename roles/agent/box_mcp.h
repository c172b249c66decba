#pragma once
// The box MCP (seed §13.2; README.md §Box MCP): the box tools (box_tools.h) served over MCP
// Streamable HTTP at tools::kAgentMcpPath on the agent's socket. Clients reach it through the
// api's edge at /cocoonbox.mcp/<box>; every request must carry the edge's
// x-cocoonbox-credential for this box's current wake, as gRPC calls do.
//
// Affinity: the agent's io_context.

#include "mcp/server.h"
#include "roles/agent/box_tools.h"

#include <vector>

namespace cb::agent {

// tools/list from the contract (src/tools/box_tools.json); tools/call through BoxTools.
// Arguments that break the contract come back as a tool execution error naming the field
// (isError, per the MCP tools spec), an unknown name as JSON-RPC -32602. A shell `session`
// belongs to the MCP session that names it (BoxTools::open_mcp_scope(), kept in the
// ServerSession's user_data) and its saved state goes when that session ends.
class BoxMcpTools final : public mcp::ToolProvider {
 public:
  explicit BoxMcpTools(BoxTools& tools);

  asio::awaitable<Result<std::vector<mcp::Tool>>> list_tools(mcp::RequestContext& ctx) override;
  asio::awaitable<mcp::Reply> call_tool(mcp::RequestContext& ctx, const std::string& name,
                                        const mcp::Json& arguments) override;

 private:
  BoxTools& tools_;
  std::vector<mcp::Tool> list_;
};

}  // namespace cb::agent
