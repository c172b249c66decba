// What `cocoonbox chat` shows of a turn (roles/cli/chat.h TurnView), from Session.Events as
// the agent sends them: deltas, items, agent snapshots, repeats after a resume.

#include "roles/cli/chat.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cb::cli {
namespace {

namespace pb = ::cocoonbox::agent::v1;
using nlohmann::json;

pb::Event item(int64_t offset, int64_t seq, std::string turn, std::string role, pb::ItemKind kind,
               json payload, std::string agent = "ag_1") {
  pb::Event ev;
  ev.set_offset_key(std::to_string(offset));
  ev.set_channel("transcript");
  auto* it = ev.mutable_item();
  it->set_agent_id(agent);
  it->set_seq(seq);
  it->set_turn_id(turn);
  it->set_role(role);
  it->set_kind(kind);
  it->set_payload_json(payload.dump());
  return ev;
}

pb::Event delta(int64_t offset, std::string turn, std::string text) {
  pb::Event ev;
  ev.set_offset_key(std::to_string(offset));
  ev.set_channel("transcript");
  ev.mutable_delta()->set_agent_id("ag_1");
  ev.mutable_delta()->set_turn_id(turn);
  ev.mutable_delta()->set_text(text);
  return ev;
}

pb::Event agent(int64_t offset, std::string turn, pb::TurnState state, std::string error = "") {
  pb::Event ev;
  ev.set_offset_key(std::to_string(offset));
  ev.set_channel("agents");
  ev.mutable_agent()->set_id("ag_1");
  ev.mutable_agent()->mutable_last_turn()->set_id(turn);
  ev.mutable_agent()->mutable_last_turn()->set_state(state);
  ev.mutable_agent()->mutable_last_turn()->set_error(error);
  return ev;
}

// A turn with a tool call: the events the agent logs, in order.
std::vector<pb::Event> tool_turn() {
  return {
      agent(1, "tu_old", pb::TURN_DONE),  // an earlier turn's end: not this one
      item(2, 1, "tu_1", "user", pb::ITEM_TEXT, {{"text", "list it"}}),
      agent(3, "tu_1", pb::TURN_RUNNING),
      delta(3, "tu_1", "Let me "),
      delta(3, "tu_1", "look."),
      item(4, 2, "tu_1", "assistant", pb::ITEM_TEXT, {{"text", "Let me look."}}),
      item(5, 3, "tu_1", "assistant", pb::ITEM_TOOL_CALL,
           {{"id", "c1"}, {"name", "shell"}, {"arguments", R"({"command":"ls -la\n/tmp"})"}}),
      item(6, 4, "tu_1", "tool", pb::ITEM_TOOL_RESULT,
           {{"id", "c1"},
            {"name", "shell"},
            {"content", json::array({{{"type", "text"}, {"text", "\ntotal 0\nx\n[exit code 0]"}}})},
            {"is_error", false}}),
      item(7, 5, "tu_1", "assistant", pb::ITEM_TEXT, {{"text", "Nothing there."}}),
      agent(8, "tu_1", pb::TURN_DONE),
  };
}

std::string feed_all(TurnView& v, const std::vector<pb::Event>& events) {
  std::string out;
  for (const auto& ev : events) out += v.feed(ev);
  return out;
}

TEST_CASE("TurnView: a turn prints deltas, tool lines, results' first lines and the end",
          "[cli][unit]") {
  TurnView v(false, false);
  v.follow("ag_1", "tu_1");
  CHECK(feed_all(v, tool_turn()) ==
        "Let me look.\n"
        "▸ shell: ls -la /tmp\n"
        "  ⎿ total 0\n"
        "Nothing there.\n"
        "· done\n");
  CHECK(v.ended());
  CHECK(v.state() == pb::TURN_DONE);
  CHECK(v.offset() == "8");
}

TEST_CASE("TurnView: resuming from an offset shows nothing twice and nothing lost", "[cli][unit]") {
  const auto events = tool_turn();
  TurnView v(false, false);
  v.follow("ag_1", "tu_1");
  std::string out;
  // The stream drops after the tool call; the deltas of a model step are live only, so the
  // resumed stream replays durable events after offset 5 (and, a server being careful, the
  // tool call again).
  for (size_t i = 0; i <= 6; ++i) out += v.feed(events[i]);
  CHECK(v.offset() == "5");
  CHECK_FALSE(v.ended());
  out += v.feed(events[6]);  // repeated
  for (size_t i = 7; i < events.size(); ++i) out += v.feed(events[i]);
  CHECK(out == "Let me look.\n▸ shell: ls -la /tmp\n  ⎿ total 0\nNothing there.\n· done\n");
}

TEST_CASE("TurnView: text whose deltas were lost is printed from the item", "[cli][unit]") {
  TurnView v(false, false);
  v.follow("ag_1", "tu_1");
  std::string out = v.feed(delta(1, "tu_1", "Hel"));
  out += v.feed(item(2, 2, "tu_1", "assistant", pb::ITEM_TEXT, {{"text", "Hello there"}}));
  CHECK(out == "Hello there\n");
  v.follow("ag_1", "tu_2");
  out = v.feed(delta(2, "tu_2", "Other"));
  out += v.feed(item(3, 3, "tu_2", "assistant", pb::ITEM_TEXT, {{"text", "Different text"}}));
  CHECK(out == "Other\nDifferent text\n");
}

TEST_CASE("TurnView: deltas that arrive after their text item are not shown twice", "[cli][unit]") {
  TurnView v(false, false);
  v.follow("ag_1", "tu_1");
  std::string out = v.feed(item(2, 2, "tu_1", "assistant", pb::ITEM_TEXT, {{"text", "All done."}}));
  out += v.feed(delta(2, "tu_1", "All "));
  out += v.feed(delta(2, "tu_1", "done."));
  CHECK(out == "All done.\n");
  // A tool result that lags behind the next step's deltas: the text item completes them.
  out = v.feed(delta(2, "tu_1", "Next "));
  CHECK(out == "Next ");
  out = v.feed(item(3, 3, "tu_1", "tool", pb::ITEM_TOOL_RESULT,
                    {{"content", json::array({{{"type", "text"}, {"text", "ok"}}})}}));
  out += v.feed(item(4, 4, "tu_1", "assistant", pb::ITEM_TEXT, {{"text", "Next step."}}));
  CHECK(out == "\n  ⎿ ok\nstep.\n");
}

TEST_CASE("TurnView: other agents' and turns' events are left out; failures say why",
          "[cli][unit]") {
  TurnView v(false, false);
  v.follow("ag_1", "tu_2");
  std::string out = v.feed(item(1, 1, "tu_1", "assistant", pb::ITEM_TEXT, {{"text", "old"}}));
  out += v.feed(item(2, 1, "tu_2", "assistant", pb::ITEM_TEXT, {{"text", "other agent"}}, "ag_2"));
  out += v.feed(delta(3, "tu_1", "old delta"));
  CHECK(out.empty());
  CHECK(v.offset() == "3");
  out = v.feed(
      item(4, 2, "tu_2", "tool", pb::ITEM_TOOL_RESULT,
           {{"content", json::array({{{"type", "text"}, {"text", "boom"}}})}, {"is_error", true}}));
  out += v.feed(item(5, 3, "tu_2", "system", pb::ITEM_ERROR, {{"message", "gateway said 500"}}));
  out += v.feed(agent(6, "tu_2", pb::TURN_FAILED, "gateway said 500"));
  CHECK(out == "  ✗ boom\n✗ gateway said 500\n· turn failed: gateway said 500\n");
  CHECK(v.state() == pb::TURN_FAILED);
  CHECK(v.error() == "gateway said 500");
  // After the end nothing more is printed, but the offset still moves.
  CHECK(v.feed(item(7, 4, "tu_2", "assistant", pb::ITEM_TEXT, {{"text", "late"}})).empty());
  CHECK(v.offset() == "7");
}

TEST_CASE("TurnView: --json prints one parseable object per event", "[cli][unit]") {
  TurnView v(true, false);
  v.follow("ag_1", "tu_1");
  std::vector<json> lines;
  for (const auto& ev : tool_turn()) {
    std::string out = v.feed(ev);
    if (out.empty()) continue;
    REQUIRE(out.back() == '\n');
    lines.push_back(json::parse(out));
  }
  REQUIRE(lines.size() == 8);  // user item, 2 deltas, 4 items, the end
  CHECK(lines[0]["type"] == "item");
  CHECK(lines[0]["role"] == "user");
  CHECK(lines[0]["payload"]["text"] == "list it");
  CHECK(lines[1]["type"] == "delta");
  CHECK(lines[1]["text"] == "Let me ");
  CHECK(lines[4]["kind"] == "tool_call");
  CHECK(lines[5]["payload"]["content"][0]["text"] == "\ntotal 0\nx\n[exit code 0]");
  CHECK(lines[7] == json{{"type", "turn"},
                         {"offset_key", "8"},
                         {"agent_id", "ag_1"},
                         {"turn_id", "tu_1"},
                         {"state", "done"},
                         {"error", ""}});
}

TEST_CASE("TurnView: a pending approval of the turn is handed out once", "[cli][unit]") {
  TurnView v(false, false);
  v.follow("ag_1", "tu_1");
  pb::Event ev;
  ev.set_offset_key("5");
  ev.set_channel("approvals");
  auto* a = ev.mutable_approval();
  a->set_id("ap_1");
  a->set_agent_id("ag_1");
  a->set_turn_id("tu_1");
  a->set_tool("shell");
  a->set_arguments_json(R"({"command":"rm -rf x"})");
  a->set_state(pb::APPROVAL_PENDING);
  CHECK(v.feed(ev).empty());
  auto pending = v.take_pending_approval();
  REQUIRE(pending.has_value());
  CHECK(pending->id() == "ap_1");
  CHECK_FALSE(v.take_pending_approval().has_value());
  CHECK(v.feed(ev).empty());  // repeated after a resume: not asked again
  CHECK_FALSE(v.take_pending_approval().has_value());
  a->set_id("ap_2");
  a->set_turn_id("tu_other");
  (void)v.feed(ev);
  CHECK_FALSE(v.take_pending_approval().has_value());
  // A turn that waits for the user ends the view with that state.
  CHECK(v.feed(agent(6, "tu_1", pb::TURN_WAITING_FOR_USER, "no answer in 10 min")) ==
        "· waiting for you: no answer in 10 min\n");
  CHECK(v.state() == pb::TURN_WAITING_FOR_USER);

  TurnView j(true, false);
  j.follow("ag_1", "tu_1");
  a->set_id("ap_3");
  a->set_turn_id("tu_1");
  json line = json::parse(j.feed(ev));
  CHECK(line["type"] == "approval");
  CHECK(line["state"] == "pending");
  CHECK(line["arguments"]["command"] == "rm -rf x");
}

TEST_CASE("tool_call_summary: the telling argument, one line, cut", "[cli][unit]") {
  CHECK(tool_call_summary("shell", R"({"command":"ls -la","timeout":5})") == "shell: ls -la");
  CHECK(tool_call_summary("read_file", R"({"path":"src/a.cc","offset":3})") ==
        "read_file: src/a.cc");
  CHECK(tool_call_summary("browser_click", R"({"element":1})") ==
        R"(browser_click: {"element":1})");
  CHECK(tool_call_summary("list_dir", "{}") == "list_dir");
  CHECK(tool_call_summary("shell", "not json") == "shell: not json");
  CHECK(tool_call_summary("shell", R"({"command":"echo 0123456789"})", 12) == "shell: echo …");
  // Never cut inside a UTF-8 sequence.
  CHECK(tool_call_summary("shell", R"({"command":"ééé"})", 9) == "shell: é…");
}

}  // namespace
}  // namespace cb::cli
