#include "model/compact.h"

#include "model/json_util.h"
#include "model/wire.h"

#include <fmt/format.h>

namespace cb::model {

namespace {

constexpr int64_t kMessageOverhead = 4;

int64_t text_tokens(size_t bytes) { return static_cast<int64_t>((bytes + 3) / 4); }

int64_t part_tokens(const Part& p, const ModelInfo& model) {
  switch (p.kind) {
    case PartKind::kText:
      return text_tokens(p.text.size());
    case PartKind::kImage:
      return model.vision ? kImageTokens : text_tokens(image_omitted_note(p).size());
    case PartKind::kToolCall:
      return text_tokens(p.name.size() + p.arguments.size() + p.id.size()) + kMessageOverhead;
    case PartKind::kToolResult: {
      int64_t n = text_tokens(p.id.size()) + kMessageOverhead;
      for (const Part& c : p.content) n += part_tokens(c, model);
      return n;
    }
  }
  return 0;
}

bool starts_clean(const Message& m) {
  if (m.role != Role::kUser) return false;
  for (const Part& p : m.parts)
    if (p.kind == PartKind::kToolResult) return false;
  return true;
}

constexpr std::string_view kSummarizeSystem =
    "You compact the conversation of an AI agent that works in a user's computer. Write a "
    "summary that lets the agent continue the work without the original messages: the user's "
    "goals and instructions (quote exact requirements), decisions made, what was done and "
    "its results (files changed, commands run, facts found), errors met and how they were "
    "handled, and what remains to do. Keep names, paths, identifiers and numbers exact. Write "
    "plain prose and lists; do not address the user.";

}  // namespace

int64_t estimate_tokens(const Message& message, const ModelInfo& model) {
  int64_t n = kMessageOverhead;
  for (const Part& p : message.parts) n += part_tokens(p, model);
  return n;
}

int64_t estimate_tool_tokens(std::span<const ToolDef> tools) {
  int64_t n = 0;
  for (const ToolDef& t : tools)
    n += text_tokens(t.name.size() + t.description.size() +
                     internal::dump_json(t.input_schema).size()) +
         kMessageOverhead;
  return n;
}

int64_t estimate_tokens(const Request& request, const ModelInfo& model, int64_t tool_tokens) {
  int64_t n = text_tokens(request.system.size()) + tool_tokens;
  for (const Message& m : request.messages) n += estimate_tokens(m, model);
  return n;
}

int64_t estimate_tokens(const Request& request, const ModelInfo& model) {
  return estimate_tokens(request, model, estimate_tool_tokens(request.tools));
}

bool over_budget(int64_t estimated_tokens, const ModelInfo& model, double fraction) {
  return static_cast<double>(estimated_tokens) >
         fraction * static_cast<double>(model.context_tokens);
}

bool needs_compaction(const Request& request, const ModelInfo& model, int64_t tool_tokens,
                      double fraction) {
  return over_budget(estimate_tokens(request, model, tool_tokens), model, fraction);
}

bool needs_compaction(const Request& request, const ModelInfo& model, double fraction) {
  return needs_compaction(request, model, estimate_tool_tokens(request.tools), fraction);
}

size_t compaction_split(std::span<const Message> history, const ModelInfo& model,
                        int64_t keep_tokens) {
  // Walk back from the end while the kept suffix fits; then move forward to a clean start.
  size_t split = history.size();
  int64_t kept = 0;
  while (split > 0) {
    int64_t n = estimate_tokens(history[split - 1], model);
    if (kept + n > keep_tokens) break;
    kept += n;
    --split;
  }
  while (split < history.size() && !starts_clean(history[split])) ++split;
  return split;
}

Request summarize_request(std::span<const Message> older, std::string_view instructions,
                          size_t max_result_chars) {
  std::string t;
  auto cut = [&](const std::string& s) {
    if (s.size() <= max_result_chars) return s;
    return fmt::format("{}\n[... {} more bytes cut]", s.substr(0, max_result_chars),
                       s.size() - max_result_chars);
  };
  for (const Message& m : older) {
    t += m.role == Role::kUser ? "## User\n" : "## Assistant\n";
    for (const Part& p : m.parts) {
      switch (p.kind) {
        case PartKind::kText:
          t += p.text;
          t += "\n";
          break;
        case PartKind::kImage:
          t += fmt::format("[image {}]\n", p.media_type);
          break;
        case PartKind::kToolCall:
          t += fmt::format("[tool call {} {}: {}]\n", p.id, p.name, p.arguments);
          break;
        case PartKind::kToolResult: {
          std::string body;
          for (const Part& c : p.content) {
            if (c.kind == PartKind::kText) body += c.text;
            if (c.kind == PartKind::kImage) body += fmt::format("[image {}]", c.media_type);
          }
          t += fmt::format("[tool result {}{}]\n{}\n", p.id, p.is_error ? " (error)" : "",
                           cut(body));
          break;
        }
      }
    }
    t += "\n";
  }
  Request r;
  r.system = std::string(kSummarizeSystem);
  if (!instructions.empty()) {
    r.system += "\n\n";
    r.system += instructions;
  }
  r.messages.push_back(
      Message::user({Part::text_part("Summarize this conversation so far:\n\n" + t)}));
  return r;
}

std::vector<Message> apply_compaction(std::span<const Message> history, size_t split,
                                      std::string_view summary) {
  std::string text = fmt::format(
      "[Summary of the earlier conversation, which was compacted to save context]\n{}", summary);
  std::vector<Message> out;
  if (split >= history.size()) {
    out.push_back(Message::user({Part::text_part(std::move(text))}));
    return out;
  }
  out.assign(history.begin() + static_cast<std::ptrdiff_t>(split), history.end());
  if (split == 0) return out;
  Message& first = out.front();  // a user message without tool results (compaction_split)
  first.parts.insert(first.parts.begin(), Part::text_part(std::move(text)));
  return out;
}

}  // namespace cb::model
