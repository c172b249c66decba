#pragma once
// The control MCP's tools (seed §13.3, §19; contract: src/tools/control_tools.json): thin
// wrappers over BoxManager, which the Boxes service also calls, so the lifecycle has one
// implementation. Every tool acts only on the caller's own boxes: another user's box is "not
// found" exactly as in Boxes.
//
// Results are MCP CallToolResult objects. What the api refuses (no such box, a quota, a bad
// name, a missing confirm) is a result with isError and the reason in words; only an unknown
// tool (kNotFound) or arguments that break the contract (kInvalidArgument) fail the call.
// Tools that wait for an operation report each of its events through |progress| ("waking:
// thawing", ...), from the operation journal, the same events WatchOperation streams.
//
// Affinity: the api's executor.

#include "base/result.h"
#include "mcp/http_server.h"
#include "mcp/server.h"
#include "net/asio.h"
#include "roles/api/boxes.h"
#include "roles/api/store/token_index.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace cb::api {

// §13.3's words for what an upgrade keeps, shared with the CLI's question.
inline constexpr std::string_view kUpgradeKeeps =
    "running programs restart; files, logins and agent history are kept";

class ControlTools {
 public:
  // |message| is one line: "waking box main: thawing". May be empty (no reporting).
  using Progress = std::function<asio::awaitable<void>(std::string message)>;

  explicit ControlTools(BoxManager& manager) : manager_(manager) {}

  asio::awaitable<Result<nlohmann::json>> call(int64_t user_id, std::string_view name,
                                               const nlohmann::json& arguments, Progress progress);

 private:
  // Follows |op| to its end with progress; the tool's result.
  asio::awaitable<nlohmann::json> finish(const Operation& op, std::string verb,
                                         std::string box_label, int64_t user_id,
                                         const Progress& progress);
  asio::awaitable<nlohmann::json> box_result(int64_t user_id, std::string ref, std::string summary);

  BoxManager& manager_;
};

// The control MCP endpoint (tools::kControlMcpPath on the api's router): Streamable HTTP,
// every request authenticated with the user's bearer token (401 without a valid one); a
// session belongs to the user who opened it. Tools from the contract, run by ControlTools
// with the request's progress token.
class ControlMcp final : public mcp::ToolProvider {
 public:
  ControlMcp(net::Executor executor, BoxManager& manager, TokenIndex& tokens);
  void mount(http::Router& router);
  // Ends every session (before the HTTP server shuts down).
  void close_all() { http_.close_all(); }

  asio::awaitable<Result<std::vector<mcp::Tool>>> list_tools(mcp::RequestContext& ctx) override;
  asio::awaitable<mcp::Reply> call_tool(mcp::RequestContext& ctx, const std::string& name,
                                        const mcp::Json& arguments) override;

 private:
  ControlTools tools_;
  TokenIndex& tokens_;
  std::vector<mcp::Tool> list_;
  mcp::Server server_;
  mcp::HttpServerTransport http_;
};

}  // namespace cb::api
