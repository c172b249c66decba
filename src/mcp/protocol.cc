#include "mcp/protocol.h"

#include "base/base64.h"

#include <charconv>
#include <utility>

namespace cb::mcp {
namespace {

// Moves every member of |j| except |known| into a new object.
Json others(const Json& j, std::initializer_list<std::string_view> known) {
  Json out = Json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || it.key() == k;
    if (!is_known) out[it.key()] = it.value();
  }
  return out;
}

void merge_extra(Json& into, const Json& extra) {
  if (!extra.is_object()) return;
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    if (!into.contains(it.key())) into[it.key()] = it.value();
  }
}

// An optional string member: absent gives "", a non-string is an error.
Status read_optional_string(const Json& j, const char* key, std::string& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_string()) return invalid_argument(std::string(key) + " must be a string");
  out = it->get<std::string>();
  return ok_status();
}

}  // namespace

bool is_supported_protocol_version(std::string_view version) {
  for (std::string_view v : kSupportedProtocolVersions) {
    if (v == version) return true;
  }
  return false;
}

std::string negotiate_protocol_version(std::string_view requested) {
  if (is_supported_protocol_version(requested)) return std::string(requested);
  return std::string(kLatestProtocolVersion);
}

bool protocol_allows_batches(std::string_view version) { return version == "2025-03-26"; }

Json Implementation::to_json() const {
  Json j = Json::object();
  j["name"] = name;
  j["version"] = version;
  if (!title.empty()) j["title"] = title;
  merge_extra(j, extra);
  return j;
}

Result<Implementation> Implementation::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("implementation info must be an object");
  Implementation impl;
  RETURN_IF_ERROR(read_optional_string(j, "name", impl.name));
  RETURN_IF_ERROR(read_optional_string(j, "version", impl.version));
  RETURN_IF_ERROR(read_optional_string(j, "title", impl.title));
  impl.extra = others(j, {"name", "version", "title"});
  return impl;
}

Json Tool::to_json() const {
  Json j = Json::object();
  j["name"] = name;
  if (!title.empty()) j["title"] = title;
  if (!description.empty()) j["description"] = description;
  j["inputSchema"] = input_schema.is_object() ? input_schema : default_input_schema();
  if (!output_schema.is_null()) j["outputSchema"] = output_schema;
  if (!annotations.is_null()) j["annotations"] = annotations;
  merge_extra(j, extra);
  return j;
}

Result<Tool> Tool::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("a tool must be an object");
  Tool t;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return invalid_argument("tool name must be a non-empty string");
  t.name = name->get<std::string>();
  RETURN_IF_ERROR(read_optional_string(j, "title", t.title));
  RETURN_IF_ERROR(read_optional_string(j, "description", t.description));
  auto input = j.find("inputSchema");
  if (input == j.end() || !input->is_object())
    return invalid_argument("tool " + t.name + ": inputSchema must be an object");
  t.input_schema = *input;
  auto output = j.find("outputSchema");
  if (output != j.end()) t.output_schema = *output;
  auto annotations = j.find("annotations");
  if (annotations != j.end()) t.annotations = *annotations;
  t.extra =
      others(j, {"name", "title", "description", "inputSchema", "outputSchema", "annotations"});
  return t;
}

Json text_content(std::string_view text) {
  Json j = Json::object();
  j["type"] = "text";
  j["text"] = std::string(text);
  return j;
}

Json image_content(std::string_view bytes, std::string_view mime_type) {
  Json j = Json::object();
  j["type"] = "image";
  j["data"] = base64_encode(bytes);
  j["mimeType"] = std::string(mime_type);
  return j;
}

ToolResult ToolResult::text(std::string_view text) {
  ToolResult r;
  r.content.push_back(text_content(text));
  return r;
}

ToolResult ToolResult::error(std::string_view message) {
  ToolResult r = text(message);
  r.is_error = true;
  return r;
}

ToolResult ToolResult::structured_result(Json object) {
  ToolResult r;
  r.structured = std::move(object);
  return r;
}

Json ToolResult::to_json() const {
  Json j = Json::object();
  Json blocks = Json::array();
  for (const Json& c : content) blocks.push_back(c);
  if (blocks.empty() && !structured.is_null())
    blocks.push_back(text_content(dump_json(structured)));
  j["content"] = std::move(blocks);
  if (!structured.is_null()) j["structuredContent"] = structured;
  if (is_error) j["isError"] = true;
  merge_extra(j, extra);
  return j;
}

Result<ToolResult> ToolResult::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("a tool result must be an object");
  ToolResult r;
  auto content = j.find("content");
  if (content != j.end()) {
    if (!content->is_array()) return invalid_argument("content must be an array");
    for (const Json& c : *content) {
      if (!c.is_object()) return invalid_argument("a content block must be an object");
      r.content.push_back(c);
    }
  }
  auto structured = j.find("structuredContent");
  if (structured != j.end()) r.structured = *structured;
  auto is_error = j.find("isError");
  if (is_error != j.end() && !is_error->is_null()) {
    if (!is_error->is_boolean()) return invalid_argument("isError must be a boolean");
    r.is_error = is_error->get<bool>();
  }
  r.extra = others(j, {"content", "structuredContent", "isError"});
  return r;
}

Reply Reply::success(Json result) {
  Reply r;
  r.result = std::move(result);
  return r;
}

Reply Reply::failure(RpcError error) {
  Reply r;
  r.result = nullptr;
  r.error = std::move(error);
  return r;
}

Reply Reply::failure(int code, std::string message, Json data) {
  RpcError e;
  e.code = code;
  e.message = std::move(message);
  e.data = std::move(data);
  return failure(std::move(e));
}

Reply Reply::from_status(const Status& status) { return failure(rpc_error_from_status(status)); }

Reply Reply::unknown_tool(std::string_view name) {
  return failure(kInvalidParams, "Unknown tool: " + std::string(name));
}

// ---- Cursors

std::string encode_tools_cursor(size_t offset) {
  return base64url_encode("tools:" + std::to_string(offset));
}

Result<size_t> decode_tools_cursor(std::string_view cursor) {
  auto raw = base64url_decode(cursor);
  if (!raw.ok()) return invalid_argument("invalid cursor");
  std::string_view text = *raw;
  constexpr std::string_view kPrefix = "tools:";
  if (text.substr(0, kPrefix.size()) != kPrefix) return invalid_argument("invalid cursor");
  text.remove_prefix(kPrefix.size());
  size_t offset = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), offset);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return invalid_argument("invalid cursor");
  }
  return offset;
}

}  // namespace cb::mcp
