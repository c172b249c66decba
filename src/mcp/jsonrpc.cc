#include "mcp/jsonrpc.h"

#include <cstdint>
#include <utility>

namespace cb::mcp {
namespace {

Message invalid(Json id, int code, std::string message) {
  Message m;
  m.kind = MessageKind::kInvalid;
  m.id = std::move(id);
  m.error.code = code;
  m.error.message = std::move(message);
  return m;
}

// Nesting depth of arrays and objects, found without parsing (strings are skipped with their
// escapes). Returns false as soon as |max_depth| is exceeded.
bool depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// The id of a message object when it is one we could answer to, else null.
Json readable_id(const Json& value) {
  if (!value.is_object()) return nullptr;
  auto it = value.find("id");
  if (it == value.end() || !is_valid_id(*it)) return nullptr;
  return *it;
}

}  // namespace

RpcError rpc_error(int code, std::string message, Json data) {
  RpcError e;
  e.code = code;
  e.message = std::move(message);
  e.data = std::move(data);
  return e;
}

Message Message::request(Json id, std::string method, Json params) {
  Message m;
  m.kind = MessageKind::kRequest;
  m.id = std::move(id);
  m.method = std::move(method);
  m.params = std::move(params);
  return m;
}

Message Message::notification(std::string method, Json params) {
  Message m;
  m.kind = MessageKind::kNotification;
  m.method = std::move(method);
  m.params = std::move(params);
  return m;
}

Message Message::response(Json id, Json result) {
  Message m;
  m.kind = MessageKind::kResponse;
  m.id = std::move(id);
  m.result = std::move(result);
  return m;
}

Message Message::error_response(Json id, RpcError error) {
  Message m;
  m.kind = MessageKind::kErrorResponse;
  m.id = std::move(id);
  m.error = std::move(error);
  return m;
}

bool is_valid_id(const Json& id) {
  return id.is_string() || id.is_number_integer();  // number_unsigned counts as integer
}

std::string id_key(const Json& id) { return dump_json(id); }

Message parse_message(const Json& value) {
  if (!value.is_object()) return invalid(nullptr, kInvalidRequest, "a message must be an object");
  Json id = readable_id(value);
  auto version = value.find("jsonrpc");
  if (version == value.end() || !version->is_string() || *version != "2.0")
    return invalid(std::move(id), kInvalidRequest, "jsonrpc must be \"2.0\"");

  auto method = value.find("method");
  auto id_it = value.find("id");
  if (method != value.end()) {
    if (!method->is_string())
      return invalid(std::move(id), kInvalidRequest, "method must be a string");
    Json params;
    auto p = value.find("params");
    if (p != value.end()) {
      if (!p->is_object() && !p->is_array())
        return invalid(std::move(id), kInvalidRequest, "params must be an object or an array");
      params = *p;
    }
    if (id_it == value.end())
      return Message::notification(method->get<std::string>(), std::move(params));
    if (!is_valid_id(*id_it))
      return invalid(nullptr, kInvalidRequest, "id must be a string or an integer");
    return Message::request(*id_it, method->get<std::string>(), std::move(params));
  }

  auto result = value.find("result");
  auto error = value.find("error");
  if (result == value.end() && error == value.end())
    return invalid(std::move(id), kInvalidRequest,
                   "a message needs a method, a result or an error");
  if (result != value.end() && error != value.end())
    return invalid(std::move(id), kInvalidRequest, "a response has a result or an error, not both");
  if (id_it == value.end()) return invalid(nullptr, kInvalidRequest, "a response needs an id");
  if (result != value.end()) {
    if (!is_valid_id(*id_it))
      return invalid(nullptr, kInvalidRequest, "id must be a string or an integer");
    return Message::response(*id_it, *result);
  }
  // An error response may carry id null: the answer to a message whose id was unreadable.
  if (!id_it->is_null() && !is_valid_id(*id_it))
    return invalid(nullptr, kInvalidRequest, "id must be a string, an integer or null");
  if (!error->is_object())
    return invalid(std::move(id), kInvalidRequest, "error must be an object");
  auto code = error->find("code");
  auto message = error->find("message");
  if (code == error->end() || !code->is_number_integer())
    return invalid(std::move(id), kInvalidRequest, "error.code must be an integer");
  if (message == error->end() || !message->is_string())
    return invalid(std::move(id), kInvalidRequest, "error.message must be a string");
  RpcError e;
  // Integers outside int's range are not JSON-RPC codes; clamp rather than overflow.
  const int64_t raw = code->is_number_unsigned() ? INT64_MAX : code->get<int64_t>();
  e.code = raw > INT32_MAX ? INT32_MAX : raw < INT32_MIN ? INT32_MIN : static_cast<int>(raw);
  e.message = message->get<std::string>();
  auto data = error->find("data");
  if (data != error->end()) e.data = *data;
  return Message::error_response(*id_it, std::move(e));
}

Payload parse_payload(std::string_view text, const ParseLimits& limits) {
  Payload payload;
  if (text.size() > limits.max_bytes) {
    payload.messages.push_back(invalid(nullptr, kInvalidRequest, "message too large"));
    return payload;
  }
  if (!depth_within(text, limits.max_depth)) {
    payload.messages.push_back(invalid(nullptr, kParseError, "JSON nested too deeply"));
    return payload;
  }
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    payload.messages.push_back(invalid(nullptr, kParseError, "parse error: not valid JSON"));
    return payload;
  }
  if (!value.is_array()) {
    payload.messages.push_back(parse_message(value));
    return payload;
  }
  if (value.empty()) {
    payload.messages.push_back(invalid(nullptr, kInvalidRequest, "empty batch"));
    return payload;
  }
  if (value.size() > limits.max_batch) {
    payload.messages.push_back(invalid(nullptr, kInvalidRequest, "batch too large"));
    return payload;
  }
  payload.batch = true;
  payload.messages.reserve(value.size());
  for (const Json& element : value) payload.messages.push_back(parse_message(element));
  return payload;
}

Json to_json(const Message& message) {
  Json j = Json::object();
  j["jsonrpc"] = "2.0";
  switch (message.kind) {
    case MessageKind::kRequest:
      j["id"] = message.id;
      j["method"] = message.method;
      if (!message.params.is_null()) j["params"] = message.params;
      break;
    case MessageKind::kNotification:
      j["method"] = message.method;
      if (!message.params.is_null()) j["params"] = message.params;
      break;
    case MessageKind::kResponse:
      j["id"] = message.id;
      j["result"] = message.result;
      break;
    case MessageKind::kErrorResponse:
    case MessageKind::kInvalid: {
      j["id"] = message.id;
      Json e = Json::object();
      e["code"] = message.error.code;
      e["message"] = message.error.message;
      if (!message.error.data.is_null()) e["data"] = message.error.data;
      j["error"] = std::move(e);
      break;
    }
  }
  return j;
}

std::string dump_json(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string serialize(const Message& message) { return dump_json(to_json(message)); }

std::string serialize_batch(const std::vector<Message>& messages) {
  Json array = Json::array();
  for (const Message& m : messages) array.push_back(to_json(m));
  return dump_json(array);
}

RpcError rpc_error_from_status(const Status& status) {
  RpcError e;
  switch (status.code()) {
    case Code::kInvalidArgument:
      e.code = kInvalidParams;
      break;
    case Code::kNotFound:
    case Code::kUnimplemented:
      e.code = kMethodNotFound;
      break;
    default:
      e.code = kInternalError;
      break;
  }
  e.message = status.message().empty() ? std::string(code_name(status.code()))
                                       : std::string(status.message());
  return e;
}

Status status_from_rpc_error(const RpcError& error) {
  std::string msg = fmt::format("{} (JSON-RPC error {})", error.message, error.code);
  switch (error.code) {
    case kInvalidParams:
    case kInvalidRequest:
    case kParseError:
      return invalid_argument(msg);
    case kMethodNotFound:
      return unimplemented(msg);
    default:
      return internal_error(msg);
  }
}

}  // namespace cb::mcp
