#include "roles/agent/box_mcp.h"

#include "base/log.h"
#include "tools/contract.h"

namespace cb::agent {

BoxMcpTools::BoxMcpTools(BoxTools& tools) : tools_(tools) {
  for (const auto& t : tools::box_tools()) {
    auto tool = mcp::Tool::from_json(t);
    // The contract is checked by its unit test; a broken entry must not be served.
    if (!tool.ok()) std::abort();
    list_.push_back(std::move(*tool));
  }
}

asio::awaitable<Result<std::vector<mcp::Tool>>> BoxMcpTools::list_tools(mcp::RequestContext&) {
  co_return list_;
}

asio::awaitable<mcp::Reply> BoxMcpTools::call_tool(mcp::RequestContext& ctx,
                                                   const std::string& name,
                                                   const mcp::Json& arguments) {
  if (tools::find_tool(tools::box_tools(), name) == nullptr)
    co_return mcp::Reply::unknown_tool(name);
  // The MCP session's shell sessions live as long as it: its scope is the session's user data
  // (nothing else in the agent uses that slot), destroyed with the session.
  mcp::ServerSession& session = ctx.session();
  if (!session.user_data) session.user_data = tools_.open_mcp_scope();
  const auto* scope = static_cast<const McpShellScope*>(session.user_data.get());
  auto r = co_await tools_.call(name, arguments, std::string_view(), scope);
  if (!r.ok()) {
    if (r.status().code() == Code::kInvalidArgument)
      co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(r.status().message()));
    co_return mcp::Reply::from_status(r.status());
  }
  auto result = mcp::ToolResult::from_json(r->to_json());
  if (!result.ok()) co_return mcp::Reply::from_status(result.status());
  log::info("box tool",
            {{"tool", name}, {"error", result->is_error}, {"principal", ctx.principal()}});
  co_return mcp::Reply::from_tool_result(*result);
}

}  // namespace cb::agent
