#pragma once
// The context budget: a token estimate for a request, and the pieces the agent loop uses to
// compact a conversation that nears its model's window with the summarize model (issue 6,
// item 2). The summarize call is an ordinary model call; these functions only build its
// request and splice its answer in.
//
//   if (needs_compaction(request, main_model)) {
//     size_t keep = compaction_split(history, main_model.context_tokens / 4);
//     Request s = summarize_request({history.begin(), history.begin() + keep});
//     Response r = co_await client.call(summarize_model, s, options);
//     history = apply_compaction(history, keep, r.message.text());
//   }
//
// Thread-safety: plain functions.

#include "model/conversation.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::model {

// Tokens an image is counted as: Anthropic bills about width*height/750 and scales images
// down to ~1.15 megapixels, i.e. at most ~1,600 tokens; OpenAI's high-detail tiles land in
// the same range. We do not decode images, so every image counts as the ceiling.
inline constexpr int64_t kImageTokens = 1600;

// An estimate of the tokens |request| uses: one token per 4 bytes of text (system prompt,
// message text, tool call arguments, tool result text, tool definitions as JSON), plus
// kImageTokens per image (a text-only |model| sees a short note instead), plus 4 per message
// for the framing. Real tokenizers give about 3.5-4.5 bytes per token for English and code,
// so this is a budget, not a bill; usage from responses is the bill.
int64_t estimate_tokens(const Request& request, const ModelInfo& model);
int64_t estimate_tokens(const Message& message, const ModelInfo& model);

// The tool definitions' share of estimate_tokens(request, model).
int64_t estimate_tool_tokens(std::span<const ToolDef> tools);
// estimate_tokens(request, model) with that share given: counting it serializes every tool
// schema, so a caller that asks every model step while its tools stay the same (the agent
// loop) counts them once.
int64_t estimate_tokens(const Request& request, const ModelInfo& model, int64_t tool_tokens);

// True when |request| is estimated above |fraction| of the model's context window (the rest
// is room for the answer and the next tool results).
bool needs_compaction(const Request& request, const ModelInfo& model, double fraction = 0.8);
// The same with the tools' share given (estimate_tool_tokens()).
bool needs_compaction(const Request& request, const ModelInfo& model, int64_t tool_tokens,
                      double fraction);

// The test of needs_compaction() on an estimate already made (a caller that keeps the
// estimate of a growing conversation instead of counting it all again every step).
bool over_budget(int64_t estimated_tokens, const ModelInfo& model, double fraction);

// Where to cut |history| so that messages [split, end) (those kept verbatim) are estimated at
// no more than |keep_tokens|, and the kept part begins with a user message that holds no tool
// results (so no result is separated from its call). Returns 0 when nothing can be cut, and
// history.size() when the whole history may be summarized.
size_t compaction_split(std::span<const Message> history, const ModelInfo& model,
                        int64_t keep_tokens);

// The request for the summarize model: a system prompt asking for a summary that lets the
// agent continue, and one user message holding |older| rendered as a plain-text transcript
// (tool calls with their arguments, tool results cut to |max_result_chars| each, images as
// notes). |instructions| is appended to the system prompt when not empty.
Request summarize_request(std::span<const Message> older, std::string_view instructions = {},
                          size_t max_result_chars = 4000);

// |history| with messages [0, split) replaced by |summary|: the summary becomes the first
// text part of the first kept user message (or a user message of its own when nothing is
// kept), so user and assistant turns still alternate.
// REQUIRES: split is 0, history.size(), or a value compaction_split() returned.
std::vector<Message> apply_compaction(std::span<const Message> history, size_t split,
                                      std::string_view summary);

}  // namespace cb::model
