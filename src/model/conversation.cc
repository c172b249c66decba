#include "model/conversation.h"

namespace cb::model {

std::string_view wire_name(Wire wire) {
  switch (wire) {
    case Wire::kOpenAi:
      return "openai";
    case Wire::kAnthropic:
      return "anthropic";
  }
  return "unknown";
}

std::string_view stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kEndTurn:
      return "end_turn";
    case StopReason::kToolUse:
      return "tool_use";
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kStopSequence:
      return "stop_sequence";
    case StopReason::kRefusal:
      return "refusal";
    case StopReason::kOther:
      return "other";
  }
  return "other";
}

Part Part::text_part(std::string text) {
  Part p;
  p.kind = PartKind::kText;
  p.text = std::move(text);
  return p;
}

Part Part::image_part(std::string media_type, std::string base64_data) {
  Part p;
  p.kind = PartKind::kImage;
  p.media_type = std::move(media_type);
  p.data = std::move(base64_data);
  return p;
}

Part Part::tool_call_part(std::string id, std::string name, std::string arguments_json) {
  Part p;
  p.kind = PartKind::kToolCall;
  p.id = std::move(id);
  p.name = std::move(name);
  p.arguments = std::move(arguments_json);
  return p;
}

Part Part::tool_result_part(std::string call_id, std::vector<Part> content, bool is_error) {
  Part p;
  p.kind = PartKind::kToolResult;
  p.id = std::move(call_id);
  p.content = std::move(content);
  p.is_error = is_error;
  return p;
}

Message Message::user(std::vector<Part> parts) {
  Message m;
  m.role = Role::kUser;
  m.parts = std::move(parts);
  return m;
}

Message Message::assistant(std::vector<Part> parts) {
  Message m;
  m.role = Role::kAssistant;
  m.parts = std::move(parts);
  return m;
}

std::string Message::text() const {
  std::string out;
  for (const Part& p : parts) {
    if (p.kind == PartKind::kText) out += p.text;
  }
  return out;
}

std::vector<const Part*> Message::tool_calls() const {
  std::vector<const Part*> out;
  for (const Part& p : parts) {
    if (p.kind == PartKind::kToolCall) out.push_back(&p);
  }
  return out;
}

}  // namespace cb::model
