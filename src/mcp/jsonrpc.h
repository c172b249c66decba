#pragma once
// JSON-RPC 2.0 (https://www.jsonrpc.org/specification) as MCP uses it: requests, notifications,
// responses and error responses; batches (arrays) are parsed here and refused or accepted by
// the session according to the protocol revision (README.md §Batches).
//
// Sans-I/O (house style H13): text in, Message values out; Message in, one line of text out.
// Nothing here throws: nlohmann::json is parsed with exceptions off, serialized with invalid
// UTF-8 replaced, and every field is checked before it is read. The parser is a fuzz target
// (test/fuzz/mcp_jsonrpc_fuzz.cc).
//
//   Payload p = parse_payload(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
//   // p.batch == false; p.messages[0].kind == MessageKind::kRequest
//   std::string line = serialize(Message::response(p.messages[0].id, Json::object()));
//   // {"id":1,"jsonrpc":"2.0","result":{}}
//
// Thread-safety: plain values and pure functions.

#include "base/result.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cb::mcp {

using Json = nlohmann::json;

// Error codes of JSON-RPC 2.0 §5.1.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
// Implementation-defined server errors (-32000..-32099), used in HTTP error bodies the way the
// MCP reference SDKs do: a transport-level refusal, and an unknown session.
inline constexpr int kServerError = -32000;
inline constexpr int kSessionNotFound = -32001;

// The "error" member of an error response.
struct RpcError {
  int code = kInternalError;
  std::string message;
  Json data;  // null: absent

  bool operator==(const RpcError&) const = default;
};

// Builds an RpcError. Use it instead of brace-initializing one inside coroutines: gcc 12
// miscompiles aggregates holding string literals in coroutine bodies.
RpcError rpc_error(int code, std::string message, Json data = nullptr);

enum class MessageKind {
  kRequest,        // method + id
  kNotification,   // method, no id
  kResponse,       // result + id
  kErrorResponse,  // error + id (null when the request's id could not be read)
  kInvalid,        // not a JSON-RPC message: |error| is the error to answer with, |id| the id
                   // when one could be read (else null)
};

struct Message {
  MessageKind kind = MessageKind::kInvalid;
  Json id;             // a string or an integer; null for notifications and unknown ids
  std::string method;  // requests and notifications
  Json params;         // requests and notifications: an object or an array; null when absent
  Json result;         // responses
  RpcError error;      // error responses; kInvalid: why

  static Message request(Json id, std::string method, Json params = nullptr);
  static Message notification(std::string method, Json params = nullptr);
  static Message response(Json id, Json result);
  static Message error_response(Json id, RpcError error);

  bool is_request() const { return kind == MessageKind::kRequest; }
  bool is_notification() const { return kind == MessageKind::kNotification; }
  // A response or an error response.
  bool is_reply() const {
    return kind == MessageKind::kResponse || kind == MessageKind::kErrorResponse;
  }
};

// Bounds on what parse_payload() accepts from a peer.
struct ParseLimits {
  // A payload larger than this is refused without parsing (kInvalidRequest, "too large").
  size_t max_bytes = 16u << 20;
  // Arrays and objects nested deeper than this are refused (kParseError) before parsing, so a
  // hostile "[[[[..." cannot exhaust the stack in the recursive serializer or destructor.
  int max_depth = 64;
  // Batches with more elements are refused as a whole (kInvalidRequest).
  size_t max_batch = 1000;
};

// One payload: a single message or a batch. Invalid input never fails the parse: it becomes
// one kInvalid message carrying the error to answer (JSON-RPC §5: a parse error or an invalid
// request is answered with id null; an empty batch is one invalid request).
struct Payload {
  bool batch = false;
  std::vector<Message> messages;  // in order; one per batch element
};

Payload parse_payload(std::string_view text, const ParseLimits& limits = {});

// Classifies one decoded JSON value (a whole payload or one batch element). Never fails: a
// value that is not a valid message gives kind kInvalid with error kInvalidRequest.
Message parse_message(const Json& value);

// The message as a JSON object with "jsonrpc":"2.0". kInvalid gives the error response owed
// for it.
Json to_json(const Message& message);
// Compact JSON on one line: JSON escapes every newline inside strings, so the text never
// contains a raw LF (the stdio framing relies on it).
std::string serialize(const Message& message);
// A batch reply: a JSON array of the messages.
std::string serialize_batch(const std::vector<Message>& messages);
// Compact serialization of any value; invalid UTF-8 in strings becomes U+FFFD.
std::string dump_json(const Json& value);

// A key that tells request ids apart in maps: "1" and "\"1\"" differ, as they do on the wire.
std::string id_key(const Json& id);
// True for a valid MCP request id: a string or an integer.
bool is_valid_id(const Json& id);

// Status <-> RpcError, for handlers written with Status:
//   kInvalidArgument -> kInvalidParams; kNotFound, kUnimplemented -> kMethodNotFound;
//   everything else -> kInternalError. The message is the Status message.
RpcError rpc_error_from_status(const Status& status);
// The other direction, for clients: kInvalidParams/kInvalidRequest/kParseError ->
// kInvalidArgument, kMethodNotFound -> kUnimplemented, everything else -> kInternal, with the
// message "<message> (JSON-RPC error <code>)".
Status status_from_rpc_error(const RpcError& error);

}  // namespace cb::mcp
