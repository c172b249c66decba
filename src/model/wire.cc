#include "model/wire.h"

#include "model/json_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace cb::model {

using internal::dump_json;
using internal::excerpt;
using internal::field;
using internal::has_number;
using internal::int_field;
using internal::parse_json;
using internal::string_field;
using nlohmann::json;

namespace {

// ---- request bodies ----------------------------------------------------------------------

std::string data_url(const Part& image) {
  return fmt::format("data:{};base64,{}", image.media_type, image.data);
}

Status check_image(const Part& image) {
  if (image.data.empty() || image.media_type.empty())
    return invalid_argument("image part without media_type or data");
  return ok_status();
}

json openai_image(const Part& image) {
  return json{{"type", "image_url"}, {"image_url", json{{"url", data_url(image)}}}};
}

json openai_text(const std::string& text) { return json{{"type", "text"}, {"text", text}}; }

// The tool results of |m| first (in order), then its other parts: both wires want the results
// right after the assistant message that made the calls.
std::vector<const Part*> results_first(const Message& m) {
  std::vector<const Part*> out;
  for (const Part& p : m.parts)
    if (p.kind == PartKind::kToolResult) out.push_back(&p);
  for (const Part& p : m.parts)
    if (p.kind != PartKind::kToolResult) out.push_back(&p);
  return out;
}

Status openai_user(const Message& m, const ModelInfo& model, json& messages) {
  // Tool results become "tool" messages; images they hold cannot go there (tool content is
  // text), so they follow in one user message, as do the user's own text and images.
  json follow = json::array();
  for (const Part* p : results_first(m)) {
    switch (p->kind) {
      case PartKind::kToolResult: {
        if (p->id.empty()) return invalid_argument("tool result without the id of its call");
        std::string text;
        int images = 0;
        for (const Part& c : p->content) {
          if (c.kind == PartKind::kText) {
            if (!text.empty() && !c.text.empty()) text += "\n";
            text += c.text;
          } else if (c.kind == PartKind::kImage) {
            RETURN_IF_ERROR(check_image(c));
            if (model.vision) {
              if (images++ == 0)
                follow.push_back(openai_text(fmt::format("Image output of tool call {}:", p->id)));
              follow.push_back(openai_image(c));
            } else {
              if (!text.empty()) text += "\n";
              text += image_omitted_note(c);
            }
          } else {
            return invalid_argument("a tool result holds only text and image parts");
          }
        }
        if (text.empty() && images > 0)
          text = fmt::format("The tool returned {} image(s); they follow in the next message.",
                             images);
        if (p->is_error) text = "Error: " + text;
        messages.push_back(json{{"role", "tool"}, {"tool_call_id", p->id}, {"content", text}});
        break;
      }
      case PartKind::kText:
        follow.push_back(openai_text(p->text));
        break;
      case PartKind::kImage:
        RETURN_IF_ERROR(check_image(*p));
        follow.push_back(model.vision ? openai_image(*p) : openai_text(image_omitted_note(*p)));
        break;
      case PartKind::kToolCall:
        return invalid_argument("a tool call in a user message");
    }
  }
  if (follow.empty()) {
    // A message of tool results only needs nothing more. An empty message is sent as empty
    // text, so the turns stay as the caller built them.
    if (m.parts.empty()) messages.push_back(json{{"role", "user"}, {"content", ""}});
    return ok_status();
  }
  if (follow.size() == 1 && follow[0]["type"] == "text") {
    json text = follow[0]["text"];
    messages.push_back(json{{"role", "user"}, {"content", std::move(text)}});
  } else {
    messages.push_back(json{{"role", "user"}, {"content", std::move(follow)}});
  }
  return ok_status();
}

Result<json> openai_assistant(const Message& m) {
  std::string text;
  json calls = json::array();
  for (const Part& p : m.parts) {
    switch (p.kind) {
      case PartKind::kText:
        text += p.text;
        break;
      case PartKind::kToolCall:
        if (p.id.empty() || p.name.empty())
          return invalid_argument("tool call without an id or a name");
        calls.push_back(json{
            {"id", p.id},
            {"type", "function"},
            {"function",
             json{{"name", p.name}, {"arguments", p.arguments.empty() ? "{}" : p.arguments}}}});
        break;
      case PartKind::kImage:
      case PartKind::kToolResult:
        return invalid_argument("an assistant message holds only text and tool calls");
    }
  }
  json msg{{"role", "assistant"}};
  msg["content"] = text.empty() && !calls.empty() ? json(nullptr) : json(text);
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  return msg;
}

void add_cache(json& block, const json& cache_control) {
  if (!cache_control.is_null()) block["cache_control"] = cache_control;
}

Result<json> anthropic_block(const Part& p, const ModelInfo& model) {
  json b;
  switch (p.kind) {
    case PartKind::kText:
      b = json{{"type", "text"}, {"text", p.text}};
      break;
    case PartKind::kImage:
      RETURN_IF_ERROR(check_image(p));
      if (model.vision) {
        b = json{
            {"type", "image"},
            {"source", json{{"type", "base64"}, {"media_type", p.media_type}, {"data", p.data}}}};
      } else {
        b = json{{"type", "text"}, {"text", image_omitted_note(p)}};
      }
      break;
    case PartKind::kToolCall: {
      if (p.id.empty() || p.name.empty())
        return invalid_argument("tool call without an id or a name");
      // input must be an object; arguments that are not one (a model's broken JSON) travel
      // as a string inside one, so the conversation stays sendable.
      json input = p.arguments.empty() ? json::object() : parse_json(p.arguments);
      if (input.is_discarded() || !input.is_object()) input = json{{"raw_arguments", p.arguments}};
      b = json{{"type", "tool_use"}, {"id", p.id}, {"name", p.name}, {"input", std::move(input)}};
      break;
    }
    case PartKind::kToolResult: {
      if (p.id.empty()) return invalid_argument("tool result without the id of its call");
      json content = json::array();
      for (const Part& c : p.content) {
        if (c.kind != PartKind::kText && c.kind != PartKind::kImage)
          return invalid_argument("a tool result holds only text and image parts");
        if (c.kind == PartKind::kText && c.text.empty()) continue;  // empty text is refused
        ASSIGN_OR_RETURN(json cb, anthropic_block(c, model));
        content.push_back(std::move(cb));
      }
      b = json{{"type", "tool_result"}, {"tool_use_id", p.id}};
      if (!content.empty()) b["content"] = std::move(content);
      if (p.is_error) b["is_error"] = true;
      break;
    }
  }
  add_cache(b, p.cache_control);
  return b;
}

// ---- responses --------------------------------------------------------------------------

StopReason openai_stop(std::string_view r, bool has_calls) {
  if (r == "stop") return StopReason::kEndTurn;
  if (r == "tool_calls" || r == "function_call") return StopReason::kToolUse;
  if (r == "length") return StopReason::kMaxTokens;
  if (r == "content_filter") return StopReason::kRefusal;
  if (r.empty()) return has_calls ? StopReason::kToolUse : StopReason::kEndTurn;
  return StopReason::kOther;
}

StopReason anthropic_stop(std::string_view r) {
  if (r == "end_turn") return StopReason::kEndTurn;
  if (r == "tool_use") return StopReason::kToolUse;
  if (r == "max_tokens") return StopReason::kMaxTokens;
  if (r == "stop_sequence") return StopReason::kStopSequence;
  if (r == "refusal") return StopReason::kRefusal;
  if (r.empty()) return StopReason::kEndTurn;
  return StopReason::kOther;
}

Usage openai_usage(const json& u) {
  Usage out;
  out.input_tokens = int_field(u, "prompt_tokens");
  out.output_tokens = int_field(u, "completion_tokens");
  if (const json* d = field(u, "prompt_tokens_details"))
    out.cache_read_tokens = int_field(*d, "cached_tokens");
  return out;
}

// Anthropic reports uncached input, cache writes and cache reads apart; message_delta may
// repeat any of them (cumulative), so the raw numbers are kept and summed on demand.
struct AnthropicUsage {
  int64_t input = 0;
  int64_t output = 0;
  int64_t cache_write = 0;
  int64_t cache_read = 0;

  void update(const json& u) {
    if (has_number(u, "input_tokens")) input = int_field(u, "input_tokens");
    if (has_number(u, "output_tokens")) output = int_field(u, "output_tokens");
    if (has_number(u, "cache_creation_input_tokens"))
      cache_write = int_field(u, "cache_creation_input_tokens");
    if (has_number(u, "cache_read_input_tokens"))
      cache_read = int_field(u, "cache_read_input_tokens");
  }
  Usage total() const {
    Usage out;
    out.input_tokens = input + cache_write + cache_read;
    out.output_tokens = output;
    out.cache_read_tokens = cache_read;
    out.cache_write_tokens = cache_write;
    return out;
  }
};

std::string openai_content_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const json& c : content) out += string_field(c, "text");
  }
  return out;
}

Code code_for_type(std::string_view type) {
  if (type == "invalid_request_error" || type == "request_too_large" || type == "invalid_request")
    return Code::kInvalidArgument;
  if (type == "authentication_error" || type == "invalid_api_key") return Code::kUnauthenticated;
  if (type == "permission_error") return Code::kPermissionDenied;
  if (type == "not_found_error") return Code::kNotFound;
  if (type == "rate_limit_error" || type == "rate_limit_exceeded" || type == "insufficient_quota")
    return Code::kResourceExhausted;
  if (type == "overloaded_error" || type == "api_error" || type == "server_error" ||
      type == "timeout_error")
    return Code::kUnavailable;
  return Code::kUnknown;
}

Code code_for_http(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return Code::kInvalidArgument;
    case 401:
      return Code::kUnauthenticated;
    case 402:
    case 403:
      return Code::kPermissionDenied;
    case 404:
      return Code::kNotFound;
    case 408:
      return Code::kDeadlineExceeded;
    case 429:
      return Code::kResourceExhausted;
    default:
      break;
  }
  if (status >= 500 && status <= 599) return Code::kUnavailable;
  return Code::kUnknown;
}

// {"error":{...}} on both wires (Anthropic adds "type":"error" around it).
const json* error_object(const json& body) {
  const json* e = field(body, "error");
  return e != nullptr && e->is_object() ? e : nullptr;
}

std::string error_type(const json& e) {
  std::string type = string_field(e, "type");
  if (type.empty()) {
    const json* code = field(e, "code");
    if (code != nullptr && code->is_string()) type = code->get<std::string>();
  }
  return type;
}

// ---- stream assemblers ------------------------------------------------------------------

class OpenAiAssembler final : public StreamAssembler {
 public:
  Status on_event(const http::SseEvent& event, std::vector<Delta>& deltas) override {
    if (!error_.ok()) return error_;
    ++events_;
    if (done_) return ok_status();  // nothing follows [DONE]; be lenient with stray bytes
    if (event.data == "[DONE]") {
      done_ = true;
      return ok_status();
    }
    json j = parse_json(event.data);
    if (j.is_discarded() || !j.is_object())
      return error_ = invalid_argument(fmt::format("openai stream: event {} is not JSON: {}",
                                                   events_, excerpt(event.data, 120)));
    if (error_object(j) != nullptr || event.type == "error")
      return error_ = error_status(0, "", event.data);
    if (id_.empty()) id_ = string_field(j, "id");
    if (model_.empty()) model_ = string_field(j, "model");
    if (const json* u = field(j, "usage"); u != nullptr && u->is_object())
      usage_ = openai_usage(*u);
    const json* choices = field(j, "choices");
    if (choices == nullptr || !choices->is_array()) return ok_status();
    for (const json& c : *choices) {
      if (int_field(c, "index", 0) != 0) continue;  // we ask for one choice
      if (const json* d = field(c, "delta")) on_delta(*d, deltas);
      std::string finish = string_field(c, "finish_reason");
      if (!finish.empty()) finish_reason_ = finish;
    }
    return ok_status();
  }

  bool done() const override { return done_; }

  Result<Response> finish(bool clean_end) override {
    if (!error_.ok()) return error_;
    if (!done_ && !(clean_end && !finish_reason_.empty()))
      return unavailable(fmt::format("openai stream cut after {} events, before [DONE]", events_));
    Response r;
    r.message.role = Role::kAssistant;
    if (!text_.empty()) r.message.parts.push_back(Part::text_part(text_));
    for (int wire_index : order_) {
      Call& c = calls_[wire_index];
      if (c.id.empty()) c.id = fmt::format("call_{}", wire_index);
      r.message.parts.push_back(
          Part::tool_call_part(c.id, c.name, c.args.empty() ? "{}" : std::move(c.args)));
    }
    r.stop_reason = openai_stop(finish_reason_, !order_.empty());
    r.stop_reason_raw = finish_reason_;
    r.usage = usage_;
    r.id = id_;
    r.model = model_;
    return r;
  }

  const Usage& usage() const override { return usage_; }
  size_t events() const override { return events_; }

 private:
  struct Call {
    std::string id;
    std::string name;
    std::string args;
    bool started = false;
    size_t out_index = 0;
  };

  void on_delta(const json& d, std::vector<Delta>& deltas) {
    std::string content = string_field(d, "content");
    if (!content.empty()) {
      text_ += content;
      Delta td;
      td.kind = Delta::Kind::kText;
      td.text = std::move(content);
      deltas.push_back(std::move(td));
    }
    const json* tcs = field(d, "tool_calls");
    if (tcs == nullptr || !tcs->is_array()) return;
    for (const json& tc : *tcs) {
      int index = static_cast<int>(int_field(tc, "index", 0));
      auto [it, inserted] = calls_.try_emplace(index);
      Call& call = it->second;
      if (inserted) order_.push_back(index);
      if (call.id.empty()) call.id = string_field(tc, "id");
      const json* fn = field(tc, "function");
      if (fn == nullptr) continue;
      if (call.name.empty()) call.name = string_field(*fn, "name");
      std::string args = string_field(*fn, "arguments");
      call.args += args;
      if (!call.started && !call.name.empty()) {
        call.started = true;
        call.out_index = started_++;
        Delta sd;
        sd.kind = Delta::Kind::kToolCallStart;
        sd.index = call.out_index;
        sd.id = call.id;
        sd.name = call.name;
        deltas.push_back(std::move(sd));
        args = call.args;  // fragments that came before the name, if any
      }
      if (call.started && !args.empty()) {
        Delta ad;
        ad.kind = Delta::Kind::kToolCallArguments;
        ad.index = call.out_index;
        ad.text = std::move(args);
        deltas.push_back(std::move(ad));
      }
    }
  }

  Status error_;
  bool done_ = false;
  size_t events_ = 0;
  std::string text_;
  std::map<int, Call> calls_;  // by the wire's tool call index
  std::vector<int> order_;     // wire indexes in order of appearance
  size_t started_ = 0;
  std::string finish_reason_;
  std::string id_;
  std::string model_;
  Usage usage_;
};

class AnthropicAssembler final : public StreamAssembler {
 public:
  Status on_event(const http::SseEvent& event, std::vector<Delta>& deltas) override {
    if (!error_.ok()) return error_;
    ++events_;
    json j = parse_json(event.data);
    if (j.is_discarded() || !j.is_object())
      return error_ = invalid_argument(fmt::format("anthropic stream: event {} is not JSON: {}",
                                                   events_, excerpt(event.data, 120)));
    std::string type = string_field(j, "type");
    if (type.empty()) type = event.type;
    if (type == "error" || error_object(j) != nullptr)
      return error_ = error_status(0, "", event.data);
    if (done_) return ok_status();
    if (type == "message_start") {
      const json* m = field(j, "message");
      if (m == nullptr) return ok_status();
      id_ = string_field(*m, "id");
      model_ = string_field(*m, "model");
      if (const json* u = field(*m, "usage")) usage_raw_.update(*u);
      usage_ = usage_raw_.total();
    } else if (type == "content_block_start") {
      int index = static_cast<int>(int_field(j, "index", 0));
      const json* cb = field(j, "content_block");
      if (cb == nullptr) return ok_status();
      auto [it, inserted] = blocks_.try_emplace(index);
      if (inserted) order_.push_back(index);
      Block& b = it->second;
      b.type = string_field(*cb, "type");
      if (b.type == "text") {
        b.text = string_field(*cb, "text");
        if (!b.text.empty()) push_text(b.text, deltas);
      } else if (b.type == "tool_use") {
        b.id = string_field(*cb, "id");
        b.name = string_field(*cb, "name");
        if (const json* in = field(*cb, "input"); in != nullptr && in->is_object() && !in->empty())
          b.initial_input = dump_json(*in);
        b.out_index = tools_++;
        Delta sd;
        sd.kind = Delta::Kind::kToolCallStart;
        sd.index = b.out_index;
        sd.id = b.id;
        sd.name = b.name;
        deltas.push_back(std::move(sd));
      }
    } else if (type == "content_block_delta") {
      int index = static_cast<int>(int_field(j, "index", 0));
      auto it = blocks_.find(index);
      const json* d = field(j, "delta");
      if (it == blocks_.end() || d == nullptr) return ok_status();
      Block& b = it->second;
      std::string dtype = string_field(*d, "type");
      if (dtype == "text_delta" && b.type == "text") {
        std::string t = string_field(*d, "text");
        b.text += t;
        if (!t.empty()) push_text(std::move(t), deltas);
      } else if (dtype == "input_json_delta" && b.type == "tool_use") {
        std::string frag = string_field(*d, "partial_json");
        b.json += frag;
        if (!frag.empty()) {
          Delta ad;
          ad.kind = Delta::Kind::kToolCallArguments;
          ad.index = b.out_index;
          ad.text = std::move(frag);
          deltas.push_back(std::move(ad));
        }
      }
      // thinking_delta, signature_delta, citations_delta: not used by cocoonbox; ignored.
    } else if (type == "message_delta") {
      if (const json* d = field(j, "delta")) {
        std::string r = string_field(*d, "stop_reason");
        if (!r.empty()) stop_reason_ = r;
      }
      if (const json* u = field(j, "usage")) usage_raw_.update(*u);
      usage_ = usage_raw_.total();
    } else if (type == "message_stop") {
      done_ = true;
    }
    // content_block_stop, ping and event types added later need nothing.
    return ok_status();
  }

  bool done() const override { return done_; }

  Result<Response> finish(bool /*clean_end*/) override {
    if (!error_.ok()) return error_;
    if (!done_)
      return unavailable(
          fmt::format("anthropic stream cut after {} events, before message_stop", events_));
    Response r;
    r.message.role = Role::kAssistant;
    for (int index : order_) {
      Block& b = blocks_[index];
      if (b.type == "text" && !b.text.empty()) {
        r.message.parts.push_back(Part::text_part(std::move(b.text)));
      } else if (b.type == "tool_use") {
        std::string args = !b.json.empty()            ? std::move(b.json)
                           : !b.initial_input.empty() ? std::move(b.initial_input)
                                                      : std::string("{}");
        r.message.parts.push_back(Part::tool_call_part(b.id, b.name, std::move(args)));
      }
    }
    r.stop_reason = anthropic_stop(stop_reason_);
    r.stop_reason_raw = stop_reason_;
    r.usage = usage_;
    r.id = id_;
    r.model = model_;
    return r;
  }

  const Usage& usage() const override { return usage_; }
  size_t events() const override { return events_; }

 private:
  struct Block {
    std::string type;
    std::string text;
    std::string id;
    std::string name;
    std::string json;           // input_json_delta fragments joined
    std::string initial_input;  // a non-empty "input" given at content_block_start
    size_t out_index = 0;
  };

  static void push_text(std::string text, std::vector<Delta>& deltas) {
    Delta td;
    td.kind = Delta::Kind::kText;
    td.text = std::move(text);
    deltas.push_back(std::move(td));
  }

  Status error_;
  bool done_ = false;
  size_t events_ = 0;
  std::map<int, Block> blocks_;
  std::vector<int> order_;
  size_t tools_ = 0;
  std::string stop_reason_;
  std::string id_;
  std::string model_;
  AnthropicUsage usage_raw_;
  Usage usage_;
};

}  // namespace

std::string_view wire_path(Wire wire) {
  return wire == Wire::kAnthropic ? "/v1/messages" : "/v1/chat/completions";
}

std::string image_omitted_note(const Part& image) {
  // base64 carries 3 bytes in 4 characters, less one per "=" of padding.
  size_t bytes = image.data.size() / 4 * 3;
  for (size_t i = image.data.size(); i > 0 && image.data[i - 1] == '=' && bytes > 0; --i) --bytes;
  return fmt::format("[image omitted: {}, {} bytes; this model cannot see images]",
                     image.media_type.empty() ? "unknown type" : image.media_type, bytes);
}

namespace {

// The request's fields other than its messages, as the wire's JSON object; the messages go
// in afterwards (the caller's or RequestEncoder's). OpenAI's system prompt is a message, so
// it is not here.
json openai_head(const Request& request, const ModelInfo& model, bool stream) {
  json body{{"model", model.name}};
  if (!request.tools.empty()) {
    json tools = json::array();
    for (const ToolDef& t : request.tools) {
      json params = t.input_schema.is_null()
                        ? json{{"type", "object"}, {"properties", json::object()}}
                        : t.input_schema;
      tools.push_back(
          json{{"type", "function"},
               {"function",
                json{{"name", t.name}, {"description", t.description}, {"parameters", params}}}});
    }
    body["tools"] = std::move(tools);
  }
  if (request.max_tokens > 0) body["max_tokens"] = request.max_tokens;
  if (request.temperature >= 0) body["temperature"] = request.temperature;
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = json{{"include_usage", true}};
  }
  return body;
}

json openai_system(const Request& request) {
  return json{{"role", "system"}, {"content", request.system}};
}

// Appends the chat completions message(s) |m| becomes to |messages|.
Status openai_message(const Message& m, const ModelInfo& model, json& messages) {
  if (m.role == Role::kAssistant) {
    ASSIGN_OR_RETURN(json msg, openai_assistant(m));
    messages.push_back(std::move(msg));
    return ok_status();
  }
  return openai_user(m, model, messages);
}

json anthropic_head(const Request& request, const ModelInfo& model, bool stream) {
  json body{{"model", model.name},
            {"max_tokens", request.max_tokens > 0 ? request.max_tokens : 4096}};
  if (!request.system.empty()) {
    if (request.system_cache_control.is_null()) {
      body["system"] = request.system;
    } else {
      json block{{"type", "text"}, {"text", request.system}};
      add_cache(block, request.system_cache_control);
      body["system"] = json::array({std::move(block)});
    }
  }
  if (!request.tools.empty()) {
    json tools = json::array();
    for (const ToolDef& t : request.tools) {
      json schema = t.input_schema.is_null()
                        ? json{{"type", "object"}, {"properties", json::object()}}
                        : t.input_schema;
      json tool{{"name", t.name}, {"description", t.description}, {"input_schema", schema}};
      add_cache(tool, t.cache_control);
      tools.push_back(std::move(tool));
    }
    body["tools"] = std::move(tools);
  }
  if (request.temperature >= 0) body["temperature"] = request.temperature;
  if (stream) body["stream"] = true;
  return body;
}

Result<json> anthropic_message(const Message& m, const ModelInfo& model) {
  json content = json::array();
  for (const Part* p : results_first(m)) {
    bool user_kind = p->kind == PartKind::kToolResult || p->kind == PartKind::kImage;
    if (m.role == Role::kAssistant && user_kind)
      return invalid_argument("an assistant message holds only text and tool calls");
    if (m.role == Role::kUser && p->kind == PartKind::kToolCall)
      return invalid_argument("a tool call in a user message");
    // Anthropic refuses empty text blocks, unless one carries a cache breakpoint.
    if (p->kind == PartKind::kText && p->text.empty() && p->cache_control.is_null()) continue;
    ASSIGN_OR_RETURN(json b, anthropic_block(*p, model));
    content.push_back(std::move(b));
  }
  // Anthropic refuses empty content; keep the turn so the roles still alternate.
  if (content.empty()) content.push_back(json{{"type", "text"}, {"text", "(empty)"}});
  return json{{"role", m.role == Role::kAssistant ? "assistant" : "user"},
              {"content", std::move(content)}};
}

// The JSON text of the wire message(s) |m| becomes, comma-separated as inside an array.
Result<std::string> message_fragment(const Message& m, const ModelInfo& model) {
  std::string out;
  if (model.wire == Wire::kAnthropic) {
    ASSIGN_OR_RETURN(json msg, anthropic_message(m, model));
    out = dump_json(msg);
    return out;
  }
  json messages = json::array();
  RETURN_IF_ERROR(openai_message(m, model, messages));
  for (const json& msg : messages) {
    if (!out.empty()) out += ',';
    out += dump_json(msg);
  }
  return out;
}

}  // namespace

Result<json> openai_request_json(const Request& request, const ModelInfo& model, bool stream) {
  json messages = json::array();
  if (!request.system.empty()) messages.push_back(openai_system(request));
  for (const Message& m : request.messages) RETURN_IF_ERROR(openai_message(m, model, messages));
  json body = openai_head(request, model, stream);
  body["messages"] = std::move(messages);
  return body;
}

Result<json> anthropic_request_json(const Request& request, const ModelInfo& model, bool stream) {
  json messages = json::array();
  for (const Message& m : request.messages) {
    ASSIGN_OR_RETURN(json msg, anthropic_message(m, model));
    messages.push_back(std::move(msg));
  }
  json body = anthropic_head(request, model, stream);
  body["messages"] = std::move(messages);
  return body;
}

Result<std::string> request_body(const Request& request, const ModelInfo& model, bool stream) {
  Result<json> j = model.wire == Wire::kAnthropic ? anthropic_request_json(request, model, stream)
                                                  : openai_request_json(request, model, stream);
  if (!j.ok()) return j.status();
  return dump_json(*j);
}

bool RequestEncoder::head_matches(const Request& request, const ModelInfo& model,
                                  bool stream) const {
  return have_head_ && stream == stream_ && model.name == head_model_.name &&
         request.system == head_request_.system &&
         request.system_cache_control == head_request_.system_cache_control &&
         request.max_tokens == head_request_.max_tokens &&
         request.temperature == head_request_.temperature && request.tools == head_request_.tools;
}

std::string RequestEncoder::Pieces::joined() const {
  std::string out;
  out.reserve(size);
  for (std::string_view p : pieces) out += p;
  return out;
}

void RequestEncoder::append_entry(Entry& entry, std::string_view json) {
  entry.start = messages_.size();
  if (!json.empty() && !messages_.empty()) messages_ += ',';
  entry.begin = messages_.size();
  messages_ += json;
  entry.end = messages_.size();
}

Result<std::string> RequestEncoder::body(const Request& request, const ModelInfo& model,
                                         bool stream, size_t unchanged) {
  ASSIGN_OR_RETURN(Pieces p, pieces(request, model, stream, unchanged));
  return p.joined();
}

Result<RequestEncoder::Pieces> RequestEncoder::pieces(const Request& request,
                                                      const ModelInfo& model, bool stream,
                                                      size_t unchanged) {
  if (model.wire != wire_ || model.vision != vision_) {
    // Both change how messages are written: nothing cached still holds.
    entries_.clear();
    messages_.clear();
    have_head_ = false;
    wire_ = model.wire;
    vision_ = model.vision;
  }
  if (!head_matches(request, model, stream)) {
    json head = model.wire == Wire::kAnthropic ? anthropic_head(request, model, stream)
                                               : openai_head(request, model, stream);
    head["messages"] = json::array();
    std::string text = dump_json(head);
    // Keys are written in sorted order and "max_tokens" (a number) or "messages" comes first
    // (every other key sorts after "messages"), so the first match is the top-level key,
    // never one inside a tool schema; quotes inside strings are escaped and cannot match.
    constexpr std::string_view kMark = "\"messages\":[]";
    size_t at = text.find(kMark);
    if (at == std::string::npos) return internal_error("request encoder: no messages key");
    head_prefix_ = text.substr(0, at + kMark.size() - 1);
    head_suffix_ = text.substr(at + kMark.size() - 1);
    system_fragment_.clear();
    if (model.wire == Wire::kOpenAi && !request.system.empty())
      system_fragment_ = dump_json(openai_system(request));
    head_request_ = Request();
    head_request_.system = request.system;
    head_request_.system_cache_control = request.system_cache_control;
    head_request_.max_tokens = request.max_tokens;
    head_request_.temperature = request.temperature;
    head_request_.tools = request.tools;
    head_model_ = model;
    stream_ = stream;
    have_head_ = true;
  }
  // The first message that differs from its entry (or has none): everything before it is
  // kept in messages_ as it is, and only what follows is written again.
  const size_t n = request.messages.size();
  size_t first = 0;
  while (first < n && first < entries_.size() &&
         (first < unchanged || entries_[first].message == request.messages[first]))
    ++first;
  // After a change (or with fewer messages), the entries from |first| on move to |tail| and
  // their text to |old|: those that still compare equal are reused from it.
  std::vector<Entry> tail;
  std::string old;
  size_t cut = messages_.size();
  if (first < entries_.size()) {
    cut = entries_[first].start;
    old = messages_.substr(cut);
    tail.assign(std::make_move_iterator(entries_.begin() + first),
                std::make_move_iterator(entries_.end()));
    entries_.resize(first);
    messages_.resize(cut);
  }
  for (size_t i = first; i < n; ++i) {
    const Message& m = request.messages[i];
    const size_t k = i - first;
    if (k < tail.size() && tail[k].message == m) {
      const std::string_view text =
          std::string_view(old).substr(tail[k].begin - cut, tail[k].end - tail[k].begin);
      entries_.push_back(std::move(tail[k]));
      append_entry(entries_.back(), text);
      continue;
    }
    Result<std::string> fragment = message_fragment(m, model);
    if (!fragment.ok()) return fragment.status();  // nothing past it is kept
    Entry e;
    e.message = m;
    append_entry(e, *fragment);
    entries_.push_back(std::move(e));
  }
  Pieces out;
  auto add = [&out](std::string_view piece) {
    if (piece.empty()) return;
    out.pieces.push_back(piece);
    out.size += piece.size();
  };
  add(head_prefix_);
  add(system_fragment_);
  if (!system_fragment_.empty() && !messages_.empty()) add(",");
  add(messages_);
  add(head_suffix_);
  return out;
}

Result<Response> parse_response(Wire wire, std::string_view body) {
  json j = parse_json(body);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(
        fmt::format("{} response is not a JSON object: {}", wire_name(wire), excerpt(body, 120)));
  if (error_object(j) != nullptr) return error_status(200, "OK", body);
  Response r;
  r.message.role = Role::kAssistant;
  r.id = string_field(j, "id");
  r.model = string_field(j, "model");
  if (wire == Wire::kOpenAi) {
    const json* choices = field(j, "choices");
    if (choices == nullptr || !choices->is_array() || choices->empty())
      return invalid_argument("openai response without choices");
    const json& c = (*choices)[0];
    const json* msg = field(c, "message");
    if (msg == nullptr) return invalid_argument("openai response choice without a message");
    if (const json* content = field(*msg, "content")) {
      std::string text = openai_content_text(*content);
      if (!text.empty()) r.message.parts.push_back(Part::text_part(std::move(text)));
    }
    if (const json* calls = field(*msg, "tool_calls"); calls != nullptr && calls->is_array()) {
      int n = 0;
      for (const json& tc : *calls) {
        const json* fn = field(tc, "function");
        std::string id = string_field(tc, "id");
        if (id.empty()) id = fmt::format("call_{}", n);
        std::string args = fn != nullptr ? string_field(*fn, "arguments") : std::string();
        r.message.parts.push_back(Part::tool_call_part(
            std::move(id), fn != nullptr ? string_field(*fn, "name") : std::string(),
            args.empty() ? "{}" : std::move(args)));
        ++n;
      }
    }
    r.stop_reason_raw = string_field(c, "finish_reason");
    r.stop_reason = openai_stop(r.stop_reason_raw, !r.message.tool_calls().empty());
    if (const json* u = field(j, "usage")) r.usage = openai_usage(*u);
    return r;
  }
  const json* content = field(j, "content");
  if (content == nullptr || !content->is_array())
    return invalid_argument("anthropic response without content");
  for (const json& b : *content) {
    std::string type = string_field(b, "type");
    if (type == "text") {
      std::string text = string_field(b, "text");
      if (!text.empty()) r.message.parts.push_back(Part::text_part(std::move(text)));
    } else if (type == "tool_use") {
      const json* in = field(b, "input");
      r.message.parts.push_back(Part::tool_call_part(string_field(b, "id"), string_field(b, "name"),
                                                     in != nullptr ? dump_json(*in) : "{}"));
    }
  }
  r.stop_reason_raw = string_field(j, "stop_reason");
  r.stop_reason = anthropic_stop(r.stop_reason_raw);
  if (const json* u = field(j, "usage")) {
    AnthropicUsage au;
    au.update(*u);
    r.usage = au.total();
  }
  return r;
}

std::unique_ptr<StreamAssembler> make_stream_assembler(Wire wire) {
  if (wire == Wire::kAnthropic) return std::make_unique<AnthropicAssembler>();
  return std::make_unique<OpenAiAssembler>();
}

std::string error_message_from_body(std::string_view body) {
  json j = parse_json(body);
  if (!j.is_discarded()) {
    if (const json* e = error_object(j)) {
      std::string msg = string_field(*e, "message");
      if (!msg.empty()) return msg;
    }
    std::string msg = string_field(j, "message");
    if (!msg.empty()) return msg;
  }
  return excerpt(body);
}

Status error_status(int http_status, std::string_view reason, std::string_view body) {
  json j = parse_json(body);
  std::string type;
  if (!j.is_discarded()) {
    if (const json* e = error_object(j)) type = error_type(*e);
  }
  std::string message = error_message_from_body(body);
  Code code = http_status >= 300 ? code_for_http(http_status) : Code::kUnknown;
  if (code == Code::kUnknown) code = code_for_type(type);
  std::string kind = type.empty() ? std::string() : fmt::format(" ({})", type);
  std::string text;
  if (http_status == 0) {
    text = fmt::format("model stream error{}: {}", kind, message);
  } else {
    text = fmt::format("model gateway answered {}{}{}{}: {}", http_status,
                       reason.empty() ? "" : " ", reason, kind, message);
  }
  if (code == Code::kOk) code = Code::kUnknown;
  return Status(code, text);
}

}  // namespace cb::model
