// libFuzzer target for the MCP JSON-RPC parser (src/mcp/jsonrpc.h) and the MCP values read
// from peers (src/mcp/protocol.h): every byte on stdin of `cocoonbox mcp` and in the body of a
// POST to an MCP endpoint goes through parse_payload().
//
// Input: the whole input is one payload (a stdio line or an HTTP body).
//
// Beyond "no crash, no sanitizer report" it checks what the contract promises:
// - parse_payload() always returns at least one message; a batch only when the input was a
//   non-empty array within the limits;
// - an invalid message carries -32700 or -32600 and an id that is null or a valid id;
// - every valid message serializes to one line (no raw LF) that parses back to the same
//   message;
// - tools, tool results, implementation info and cursors read from params never crash, and
//   what they accept serializes and reads back the same.
//
// Build and run: scripts/fuzz mcp_jsonrpc_fuzz 60

#include "mcp/jsonrpc.h"
#include "mcp/protocol.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

using cb::mcp::Json;
using cb::mcp::Message;
using cb::mcp::MessageKind;

void require(bool condition) {
  if (!condition) std::abort();
}

void check_round_trip(const Message& m) {
  std::string line = cb::mcp::serialize(m);
  require(line.find('\n') == std::string::npos);
  cb::mcp::Payload again = cb::mcp::parse_payload(line);
  require(!again.batch && again.messages.size() == 1);
  const Message& back = again.messages[0];
  require(back.kind == m.kind);
  require(back.id == m.id);
  require(back.method == m.method);
  // Strings with invalid UTF-8 cannot come out of the parser, so values compare equal.
  require(back.params == m.params);
  require(back.result == m.result);
  require(back.error == m.error);
}

void exercise_values(const Json& value) {
  if (!value.is_object()) return;
  if (auto tool = cb::mcp::Tool::from_json(value); tool.ok()) {
    auto again = cb::mcp::Tool::from_json(tool->to_json());
    require(again.ok() && again->to_json() == tool->to_json());
  }
  if (auto result = cb::mcp::ToolResult::from_json(value); result.ok()) {
    auto again = cb::mcp::ToolResult::from_json(result->to_json());
    require(again.ok() && again->to_json() == result->to_json());
  }
  if (auto info = cb::mcp::Implementation::from_json(value); info.ok()) {
    require(cb::mcp::Implementation::from_json(info->to_json()).ok());
  }
  auto cursor = value.find("cursor");
  if (cursor != value.end() && cursor->is_string()) {
    auto offset = cb::mcp::decode_tools_cursor(cursor->get<std::string>());
    if (offset.ok())
      require(cb::mcp::decode_tools_cursor(cb::mcp::encode_tools_cursor(*offset)).ok());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  cb::mcp::ParseLimits limits;
  limits.max_bytes = 1 << 16;
  limits.max_batch = 64;
  cb::mcp::Payload payload = cb::mcp::parse_payload(input, limits);
  require(!payload.messages.empty());
  require(!payload.batch || payload.messages.size() <= limits.max_batch);
  for (const Message& m : payload.messages) {
    if (m.kind == MessageKind::kInvalid) {
      require(m.error.code == cb::mcp::kParseError || m.error.code == cb::mcp::kInvalidRequest);
      require(m.id.is_null() || cb::mcp::is_valid_id(m.id));
      require(cb::mcp::serialize(m).find('\n') == std::string::npos);
      continue;
    }
    check_round_trip(m);
    exercise_values(m.params);
    exercise_values(m.result);
    if (m.params.is_object()) {
      auto args = m.params.find("arguments");
      if (args != m.params.end()) exercise_values(*args);
      auto info = m.params.find("clientInfo");
      if (info != m.params.end()) exercise_values(*info);
    }
  }
  return 0;
}
