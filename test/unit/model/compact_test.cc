#include "model/compact.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::model {
namespace {

const ModelInfo kModel{"m", Wire::kOpenAi, true, 1000};

std::vector<Message> history() {
  std::vector<Message> h;
  h.push_back(Message::user({Part::text_part(std::string(400, 'a'))}));  // 100 + 4
  h.push_back(Message::assistant({Part::tool_call_part("c1", "shell", "{\"cmd\":\"ls\"}")}));
  h.push_back(
      Message::user({Part::tool_result_part("c1", {Part::text_part(std::string(800, 'r'))})}));
  h.push_back(Message::assistant({Part::text_part(std::string(80, 'x'))}));
  h.push_back(Message::user({Part::text_part(std::string(40, 'q'))}));
  h.push_back(Message::assistant({Part::text_part(std::string(40, 'y'))}));
  return h;
}

TEST_CASE("estimate_tokens: a quarter of the bytes plus images and framing", "[model][unit]") {
  Request r;
  r.system = std::string(40, 's');                                                // 10
  r.messages.push_back(Message::user({Part::text_part(std::string(400, 'a'))}));  // 4 + 100
  CHECK(estimate_tokens(r, kModel) == 114);
  r.messages.push_back(Message::user({Part::image_part("image/png", std::string(4000, 'A'))}));
  CHECK(estimate_tokens(r, kModel) == 114 + 4 + kImageTokens);
  ModelInfo text_only = kModel;
  text_only.vision = false;
  CHECK(estimate_tokens(r, text_only) < 114 + 4 + 100);  // a short note instead
  CHECK(needs_compaction(r, kModel, 0.5));
  Request with_tools = r;
  with_tools.tools.push_back(
      ToolDef{"ls", "Lists a folder", nlohmann::json{{"type", "object"}}, nlohmann::json()});
  const int64_t tools = estimate_tool_tokens(with_tools.tools);
  CHECK(tools > 0);
  CHECK(estimate_tokens(with_tools, kModel, tools) == estimate_tokens(with_tools, kModel));
  CHECK(estimate_tokens(with_tools, kModel) == estimate_tokens(r, kModel) + tools);
  CHECK(needs_compaction(with_tools, kModel, tools, 0.5));
  CHECK_FALSE(needs_compaction(r, text_only, 0.5));
}

TEST_CASE("compaction_split: never separates a tool result from its call", "[model][unit]") {
  std::vector<Message> h = history();
  // The last three messages fit in 60 tokens, but the kept part must start with a clean user
  // message: index 4.
  CHECK(compaction_split(h, kModel, 60) == 4);
  // With room for the tool result, the kept part would start at it (index 2): move on to 4.
  CHECK(compaction_split(h, kModel, 250) == 4);
  CHECK(compaction_split(h, kModel, 100000) == 0);
  CHECK(compaction_split(h, kModel, 0) == h.size());
}

TEST_CASE("summarize_request and apply_compaction splice a summary in", "[model][unit]") {
  std::vector<Message> h = history();
  size_t split = compaction_split(h, kModel, 60);
  Request s = summarize_request(std::span<const Message>(h).first(split), "Be brief.", 100);
  REQUIRE(s.messages.size() == 1);
  std::string text = s.messages[0].text();
  CHECK(text.find("[tool call c1 shell: {\"cmd\":\"ls\"}]") != std::string::npos);
  CHECK(text.find("[... 700 more bytes cut]") != std::string::npos);
  CHECK(s.system.find("Be brief.") != std::string::npos);

  std::vector<Message> c = apply_compaction(h, split, "We listed files.");
  REQUIRE(c.size() == 2);
  CHECK(c[0].role == Role::kUser);
  CHECK(c[0].parts.size() == 2);
  CHECK(c[0].parts[0].text.find("We listed files.") != std::string::npos);
  CHECK(c[0].parts[1].text == std::string(40, 'q'));
  CHECK(c[1] == h[5]);
  std::vector<Message> all = apply_compaction(h, h.size(), "Everything.");
  REQUIRE(all.size() == 1);
  CHECK(all[0].text().find("Everything.") != std::string::npos);
}

}  // namespace
}  // namespace cb::model
