#pragma once
// The provider-neutral conversation: what the agent loop keeps in its transcript and hands to
// a model client, whichever wire (OpenAI chat completions or Anthropic messages) the model
// speaks. wire.h translates it to and from each upstream's native JSON (see README.md
// §Mapping); nothing here knows a wire.
//
//   Request r;
//   r.system = "You are the agent in the user's box.";
//   r.tools.push_back(ToolDef{"shell", "Runs a command", schema, {}});
//   r.messages.push_back(Message::user({Part::text_part("List /workspace")}));
//   ... Response resp = co_await client.call(model, r, options) ...
//   r.messages.push_back(resp.message);             // the assistant turn, tool calls included
//   r.messages.push_back(Message::user({Part::tool_result_part(id, {Part::text_part(out)})}));
//
// Thread-safety: plain values.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cb::model {

// Which native wire a model is reached on (architecture §4; seed §3 "native wire rule").
enum class Wire {
  kOpenAi,     // POST /v1/chat/completions
  kAnthropic,  // POST /v1/messages
};
std::string_view wire_name(Wire wire);  // "openai", "anthropic"

enum class PartKind {
  kText,
  kImage,
  kToolCall,    // in assistant messages: the model asks for a tool
  kToolResult,  // in user messages: the answer to one tool call
};

// One piece of a message. A flat struct rather than a variant, so the transcript code can
// build and store parts without visitors; only the fields of |kind| are meaningful.
struct Part {
  PartKind kind = PartKind::kText;
  std::string text;           // kText
  std::string media_type;     // kImage: "image/png", "image/jpeg", "image/gif", "image/webp"
  std::string data;           // kImage: the image bytes in standard base64 (no data: prefix)
  std::string id;             // kToolCall: the call's id; kToolResult: the id of the call answered
  std::string name;           // kToolCall: the tool's name
  std::string arguments;      // kToolCall: the arguments, a JSON object as text ("{}" when none)
  std::vector<Part> content;  // kToolResult: text and image parts
  bool is_error = false;      // kToolResult: the tool failed; |content| says why
  // Anthropic prompt caching: a cache breakpoint at this block, passed through as the block's
  // "cache_control" (e.g. {"type":"ephemeral"}). Null: none. Ignored on the OpenAI wire,
  // which caches prefixes by itself.
  nlohmann::json cache_control;

  static Part text_part(std::string text);
  static Part image_part(std::string media_type, std::string base64_data);
  static Part tool_call_part(std::string id, std::string name, std::string arguments_json);
  static Part tool_result_part(std::string call_id, std::vector<Part> content,
                               bool is_error = false);

  bool operator==(const Part&) const = default;
};

enum class Role { kUser, kAssistant };

// A user message holds text, images and tool results; an assistant message holds text and
// tool calls, in the order the model produced them. The system prompt is Request::system.
struct Message {
  Role role = Role::kUser;
  std::vector<Part> parts;

  static Message user(std::vector<Part> parts);
  static Message assistant(std::vector<Part> parts);
  // The text parts joined, in order.
  std::string text() const;
  // The tool call parts, in order.
  std::vector<const Part*> tool_calls() const;

  bool operator==(const Message&) const = default;
};

// A tool the model may call. |input_schema| is a JSON Schema object
// ({"type":"object","properties":{...},"required":[...]}).
struct ToolDef {
  std::string name;
  std::string description;
  nlohmann::json input_schema;
  nlohmann::json cache_control;  // as Part::cache_control, on the tool definition

  bool operator==(const ToolDef&) const = default;
};

// A model as the agent config names it (per role: main, computer subagent, summarize).
struct ModelInfo {
  std::string name;  // the upstream's model id, sent as "model"
  Wire wire = Wire::kOpenAi;
  // False: images (in tool results and user messages) are replaced by a text note before the
  // request is sent, since a text-only model would refuse them.
  bool vision = false;
  // The model's context window in tokens, for the compaction budget (compact.h).
  int64_t context_tokens = 128000;

  bool operator==(const ModelInfo&) const = default;
};

struct Request {
  std::string system;                   // empty: no system prompt
  nlohmann::json system_cache_control;  // Anthropic: cache breakpoint on the system prompt
  std::vector<Message> messages;
  std::vector<ToolDef> tools;
  int max_tokens = 4096;    // Anthropic requires it; 0 leaves it out on the OpenAI wire
  double temperature = -1;  // < 0: left out (the upstream's default)
};

// Why the model stopped, across wires. Response::stop_reason_raw keeps the upstream's word.
enum class StopReason {
  kEndTurn,       // openai "stop", anthropic "end_turn"
  kToolUse,       // openai "tool_calls"/"function_call", anthropic "tool_use"
  kMaxTokens,     // openai "length", anthropic "max_tokens"
  kStopSequence,  // anthropic "stop_sequence"
  kRefusal,       // openai "content_filter", anthropic "refusal"
  kOther,         // anything else (anthropic "pause_turn", new values)
};
std::string_view stop_reason_name(StopReason r);

// Tokens one response cost. |input_tokens| counts every input token, cached or not, on both
// wires (Anthropic reports the cached ones apart; they are added in); the cache counts are
// the parts of it read from or written to the prompt cache.
struct Usage {
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cache_read_tokens = 0;
  int64_t cache_write_tokens = 0;

  bool operator==(const Usage&) const = default;
};

// The assembled answer of one model call.
struct Response {
  Message message;  // role kAssistant
  StopReason stop_reason = StopReason::kEndTurn;
  std::string stop_reason_raw;
  Usage usage;
  std::string id;     // the upstream's response id
  std::string model;  // the model that answered, as the upstream names it
  int attempts = 1;   // 1 + the retries it took
};

// What a streaming call reports while the answer arrives (on the client's executor, in
// order, before the call returns).
struct Delta {
  enum class Kind {
    kText,               // |text| is new assistant text
    kToolCallStart,      // a tool call begins: |index|, |id|, |name|
    kToolCallArguments,  // |text| is the next fragment of tool call |index|'s arguments
  };
  Kind kind = Kind::kText;
  std::string text;
  size_t index = 0;  // the tool call's position among this response's tool calls
  std::string id;
  std::string name;

  bool operator==(const Delta&) const = default;
};

}  // namespace cb::model
