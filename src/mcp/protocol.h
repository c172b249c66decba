#pragma once
// MCP vocabulary shared by servers and clients: protocol revisions, method names, tools,
// content blocks and tool results, and Reply (the answer to one request). JSON shapes follow
// the MCP schema of revision 2025-11-25 (server/tools, basic/lifecycle).
//
// Values carry the fields cocoonbox uses as typed members and keep everything else in
// |extra|, so a tool list or result read from another server is forwarded without loss (the
// bridge merges remote tool lists).
//
// Thread-safety: plain values and pure functions.

#include "base/result.h"
#include "mcp/jsonrpc.h"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cb::mcp {

// Protocol revisions we speak, newest first. See README.md §Versions.
inline constexpr std::string_view kLatestProtocolVersion = "2025-11-25";
inline constexpr std::array<std::string_view, 3> kSupportedProtocolVersions = {
    "2025-11-25", "2025-06-18", "2025-03-26"};
// What an HTTP server assumes when a request carries no MCP-Protocol-Version header and the
// session does not tell (transports spec, "Protocol Version Header").
inline constexpr std::string_view kDefaultHttpProtocolVersion = "2025-03-26";

bool is_supported_protocol_version(std::string_view version);
// The client's |requested| version when we support it, else the newest we support
// (lifecycle spec, "Version Negotiation").
std::string negotiate_protocol_version(std::string_view requested);
// JSON-RPC batches exist in 2025-03-26 only; 2025-06-18 removed them.
bool protocol_allows_batches(std::string_view version);

// Method names.
inline constexpr std::string_view kInitialize = "initialize";
inline constexpr std::string_view kPing = "ping";
inline constexpr std::string_view kToolsList = "tools/list";
inline constexpr std::string_view kToolsCall = "tools/call";
inline constexpr std::string_view kInitialized = "notifications/initialized";
inline constexpr std::string_view kCancelled = "notifications/cancelled";
inline constexpr std::string_view kProgress = "notifications/progress";
inline constexpr std::string_view kToolsListChanged = "notifications/tools/list_changed";

// clientInfo / serverInfo.
struct Implementation {
  std::string name;
  std::string version;
  std::string title;  // optional display name; "" = absent
  Json extra = Json::object();

  Json to_json() const;
  // Errors: kInvalidArgument (not an object, or name/version not strings).
  static Result<Implementation> from_json(const Json& j);
};

// One tool as tools/list describes it.
struct Tool {
  std::string name;
  std::string title;        // "" = absent
  std::string description;  // "" = absent
  Json input_schema = default_input_schema();
  Json output_schema;           // null = absent
  Json annotations;             // null = absent (readOnlyHint, destructiveHint, ...)
  Json extra = Json::object();  // other fields (icons, _meta, ...), passed through

  static Json default_input_schema() { return Json{{"type", "object"}}; }
  Json to_json() const;
  // Errors: kInvalidArgument (not an object; name not a non-empty string; inputSchema not an
  // object).
  static Result<Tool> from_json(const Json& j);
};

// Content blocks (tools spec, "Tool Result").
Json text_content(std::string_view text);
// |bytes| are the raw image bytes; they are base64-encoded here.
Json image_content(std::string_view bytes, std::string_view mime_type);

// The result of tools/call.
struct ToolResult {
  std::vector<Json> content;    // content blocks, e.g. text_content(), image_content()
  Json structured;              // structuredContent (an object); null = absent
  bool is_error = false;        // a tool execution error the model can read and act on
  Json extra = Json::object();  // other fields (_meta, ...), passed through

  static ToolResult text(std::string_view text);
  // A tool execution error with |message| as its only text block.
  static ToolResult error(std::string_view message);
  // Structured output; to_json() mirrors it as a text block.
  static ToolResult structured_result(Json object);

  // The CallToolResult object. When |structured| is set and |content| is empty, the
  // serialized object is added as a text block, as the spec asks for backwards compatibility.
  Json to_json() const;
  // Errors: kInvalidArgument (not an object, content not an array of objects, isError not a
  // boolean).
  static Result<ToolResult> from_json(const Json& j);
};

// A page of tools/list.
struct ToolsPage {
  std::vector<Tool> tools;
  std::string next_cursor;  // "" = last page
};

// The opaque tools/list cursor of our server (README.md §Cursors): encodes an offset.
std::string encode_tools_cursor(size_t offset);
// Errors: kInvalidArgument (not a cursor we made).
Result<size_t> decode_tools_cursor(std::string_view cursor);

// The answer to one request: a result object or a JSON-RPC error.
struct Reply {
  Json result = Json::object();
  std::optional<RpcError> error;

  bool ok() const { return !error.has_value(); }
  static Reply success(Json result);
  static Reply failure(RpcError error);
  static Reply failure(int code, std::string message, Json data = nullptr);
  // rpc_error_from_status(status); REQUIRES: !status.ok().
  static Reply from_status(const Status& status);
  // tools/call for a tool that does not exist: kInvalidParams "Unknown tool: <name>" (tools
  // spec, "Error Handling").
  static Reply unknown_tool(std::string_view name);
  static Reply from_tool_result(const ToolResult& result) { return success(result.to_json()); }
};

}  // namespace cb::mcp
