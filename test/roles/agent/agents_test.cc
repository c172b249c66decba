// Agents and Session.Events against a real in-process agent whose model endpoint is
// test/support/fake_gateway.py on a unix socket (as the api's model door is in a box).

// gcc 12 at -O2 warns that a coroutine frame (db::Worker::run() inlined into a test's
// coroutine) is deleted "with nonzero offset" (-Wfree-nonheap-object): a false positive of its
// coroutine lowering, reported inside <memory>, so it is turned off before any include.
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

#include "agent_harness.h"
#include "base/base64.h"
#include "cocoonbox/agent/v1/agents.cbgrpc.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "grpc/client.h"
#include "model/compact.h"
#include "roles/agent/agent_config.h"
#include "roles/agent/agent_db.h"
#include "roles/agent/agents_store.h"
#include "support/fake_gateway.h"
#include "test_util.h"

#include <asio/experimental/awaitable_operators.hpp>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cb::agent {
namespace {

namespace v1 = cocoonbox::agent::v1;
using nlohmann::json;
using namespace std::chrono_literals;
using test::call_options_with;
using test::one;
using test::Setup;
using test::with_agent;

// The approval ap_1 asked for call c1 of turn tu_1 of agent ag_1, as tests seed it in agent.db.
ApprovalRow approval_of_c1(const std::string& tool, const std::string& arguments,
                           int64_t created_ms) {
  ApprovalRow row;
  row.id = "ap_1";
  row.agent_id = "ag_1";
  row.turn_id = "tu_1";
  row.call_id = "c1";
  row.tool = tool;
  row.arguments = arguments;
  row.created_ms = created_ms;
  return row;
}

AgentConfig config_for(Setup& s, const cb::test::FakeGateway& gw, model::Wire wire) {
  AgentConfig c = s.config();
  c.agents.model_endpoint = gw.url();
  c.agents.main.name = "test-model";
  c.agents.main.wire = wire;
  c.agents.retry.max_attempts = 1;
  c.exec.workspace = s.dir.path().string();
  return c;
}

std::shared_ptr<grpc::Channel> channel_to(const Agent& agent, const net::Executor& executor) {
  grpc::ChannelOptions options;
  options.dial.unix_path = agent.socket_path();
  return grpc::Channel::create(executor, std::move(options));
}

// Reads Session.Events from |from| until an event with offset |until| (or, with |until| empty,
// until an agents event shows |turn_id| ended), or the stream ends.
struct EventsRead {
  std::vector<v1::Event> events;
  std::string last_offset;
};

bool ended(const v1::Event& ev, const std::string& turn_id) {
  return ev.has_agent() && ev.agent().last_turn().id() == turn_id &&
         ev.agent().last_turn().state() != v1::TURN_RUNNING;
}

asio::awaitable<EventsRead> read_events(std::shared_ptr<grpc::Channel> channel,
                                        const std::string& credential, std::string from,
                                        std::string until, std::string turn_id, bool deltas = false,
                                        size_t max_events = 100000) {
  v1::Session::Stub stub(std::move(channel));
  v1::EventsRequest req;
  req.set_from_offset_key(from);
  req.set_no_deltas(!deltas);
  EventsRead out;
  auto call = co_await stub.Events(req, call_options_with(one(credential), 30s));
  if (!call.ok()) co_return out;
  while (out.events.size() < max_events) {
    auto ev = co_await call->read();
    if (!ev) break;
    out.events.push_back(*ev);
    if (!ev->has_delta()) out.last_offset = ev->offset_key();
    if (!until.empty() && ev->offset_key() == until && !ev->has_delta()) break;
    if (until.empty() && !turn_id.empty() && ended(*ev, turn_id)) break;
  }
  call->call().cancel();
  co_return out;
}

std::vector<json> payloads(const v1::TranscriptPage& page) {
  std::vector<json> out;
  for (const auto& item : page.items()) {
    json j = json::parse(item.payload_json());
    j["_kind"] = v1::ItemKind_Name(item.kind());
    j["_role"] = item.role();
    out.push_back(j);
  }
  return out;
}

struct TurnOutcome {
  Result<v1::Agent> agent = internal_error("not run");
  Result<v1::SendAccepted> sent = internal_error("not run");
  EventsRead events;
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  Result<v1::ListAgentsResponse> list = internal_error("not run");
};

// Creates an agent, subscribes to Events (and sees the agent's creation, so every delta of
// the turn reaches it), sends |prompt|, follows Events until the turn ends, reads the
// transcript.
TurnOutcome run_one_turn(Setup& s, const AgentConfig& config, const std::string& prompt) {
  TurnOutcome out;
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::CreateAgentRequest create;
    create.set_name("main");
    out.agent = co_await stub.Create(create, call_options_with(one(s.credential())));
    if (!out.agent.ok()) co_return;
    v1::Session::Stub session(channel);
    v1::EventsRequest er;
    auto events = co_await session.Events(er, call_options_with(one(s.credential()), 30s));
    if (!events.ok()) co_return;
    auto first = co_await events->read();
    if (!first || !first->has_agent()) co_return;
    out.events.events.push_back(*first);
    v1::SendRequest send;
    send.set_agent_id(out.agent->id());
    send.set_prompt(prompt);
    out.sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!out.sent.ok()) co_return;
    while (auto ev = co_await events->read()) {
      out.events.events.push_back(*ev);
      if (ended(*ev, out.sent->turn_id())) break;
    }
    events->call().cancel();
    v1::TranscriptRequest tr;
    tr.set_agent_id(out.agent->id());
    out.transcript = co_await stub.Transcript(tr, call_options_with(one(s.credential())));
    v1::ListAgentsRequest lr;
    out.list = co_await stub.List(lr, call_options_with(one(s.credential())));
    channel->close();
  });
  return out;
}

model::Wire wire_of(const std::string& name) {
  return name == "anthropic" ? model::Wire::kAnthropic : model::Wire::kOpenAi;
}

}  // namespace

TEST_CASE("Agents: a text turn on each wire streams deltas and ends done",
          "[agent][agents][integration]") {
  const std::string wire = GENERATE(std::string("openai"), std::string("anthropic"));
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({{{"wire", wire}, {"chunks", {"Hi ", "there"}}}})).ok());
  TurnOutcome t = run_one_turn(s, config_for(s, gw, wire_of(wire)), "hello");
  REQUIRE(t.agent.status() == ok_status());
  REQUIRE(t.sent.status() == ok_status());
  CHECK(t.sent->seq() == 1);
  std::string deltas;
  for (const auto& ev : t.events.events) {
    if (ev.has_delta()) deltas += ev.delta().text();
  }
  CHECK(deltas == "Hi there");
  REQUIRE(t.transcript.status() == ok_status());
  auto items = payloads(*t.transcript);
  REQUIRE(items.size() == 2);
  CHECK(items[0]["_role"] == "user");
  CHECK(items[0]["text"] == "hello");
  CHECK(items[1]["_role"] == "assistant");
  CHECK(items[1]["_kind"] == "ITEM_TEXT");
  CHECK(items[1]["text"] == "Hi there");
  REQUIRE(t.list.status() == ok_status());
  REQUIRE(t.list->agents_size() == 1);
  CHECK(t.list->agents(0).last_turn().state() == v1::TURN_DONE);
  CHECK(t.list->agents(0).model() == "test-model");

  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 1);
  const json& r = (*reqs)[0];
  CHECK(r["wire"] == wire);
  CHECK(r["body"]["model"] == "test-model");
  // The box tools are offered, named as the contract names them.
  std::string tools = r["body"]["tools"].dump();
  CHECK(tools.find("\"shell\"") != std::string::npos);
  CHECK(tools.find("\"edit_file\"") != std::string::npos);
  // No key leaves the box: the door adds it.
  CHECK(r["headers"].dump().find("authorization") == std::string::npos);
  CHECK(r["headers"].dump().find("x-api-key") == std::string::npos);
}

TEST_CASE("Agents: a tool call runs in the box and its result goes back to the model",
          "[agent][agents][integration]") {
  const std::string wire = GENERATE(std::string("openai"), std::string("anthropic"));
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  script.push_back(
      {{"wire", wire},
       {"tool_calls",
        {{{"id", "call_1"}, {"name", "shell"}, {"arguments", {{"command", "echo hi"}}}}}}});
  script.push_back({{"wire", wire}, {"text", "It printed hi."}});
  REQUIRE(gw.set_script(script).ok());
  TurnOutcome t = run_one_turn(s, config_for(s, gw, wire_of(wire)), "say hi");
  REQUIRE(t.sent.status() == ok_status());
  REQUIRE(t.transcript.status() == ok_status());
  auto items = payloads(*t.transcript);
  REQUIRE(items.size() == 4);
  CHECK(items[1]["_kind"] == "ITEM_TOOL_CALL");
  CHECK(items[1]["name"] == "shell");
  CHECK(json::parse(items[1]["arguments"].get<std::string>())["command"] == "echo hi");
  CHECK(items[2]["_kind"] == "ITEM_TOOL_RESULT");
  CHECK(items[2]["_role"] == "tool");
  CHECK(items[2]["id"] == "call_1");
  CHECK(items[2]["is_error"] == false);
  CHECK(items[2]["content"][0]["text"].get<std::string>().rfind("hi\n", 0) == 0);
  CHECK(items[3]["text"] == "It printed hi.");
  REQUIRE(t.list.status() == ok_status());
  CHECK(t.list->agents(0).last_turn().state() == v1::TURN_DONE);

  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  CHECK((*reqs)[1]["outcome"] == "answered");  // the fake validated the tool result's shape
  CHECK((*reqs)[1]["body"]["messages"].dump().find("hi\\n") != std::string::npos);
}

TEST_CASE("Agents: a gateway error or a cut stream ends the turn as failed with the message",
          "[agent][agents][integration]") {
  const std::string which = GENERATE(std::string("500"), std::string("cut"));
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json turn = {{"wire", "openai"}};
  if (which == "500") {
    turn["status"] = 500;
    turn["error"] = {{"type", "server_error"}, {"message", "upstream exploded"}};
  } else {
    turn["chunks"] = {"par", "tial", " answer"};
    turn["cut_after"] = 2;
  }
  REQUIRE(gw.set_script(json::array({turn})).ok());
  TurnOutcome t = run_one_turn(s, config_for(s, gw, model::Wire::kOpenAi), "hello");
  REQUIRE(t.transcript.status() == ok_status());
  auto items = payloads(*t.transcript);
  REQUIRE(items.size() == 2);
  CHECK(items[1]["_kind"] == "ITEM_ERROR");
  const std::string message = items[1]["message"];
  REQUIRE(t.list.status() == ok_status());
  const auto& last = t.list->agents(0).last_turn();
  CHECK(last.state() == v1::TURN_FAILED);
  CHECK(last.error() == message);
  if (which == "500") {
    CHECK(message.find("500") != std::string::npos);
    CHECK(message.find("upstream exploded") != std::string::npos);
  } else {
    CHECK(message.find("stream cut") != std::string::npos);
  }
}

TEST_CASE("Agents: Cancel mid-stream closes the model stream and ends the turn cancelled",
          "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({{{"wire", "anthropic"},
                                      {"chunks", {"one ", "two ", "three"}},
                                      {"hold_after", 4}}}))
              .ok());
  Result<v1::CancelResponse> cancel = internal_error("not run");
  Result<v1::SendAccepted> sent = internal_error("not run");
  Result<v1::ListAgentsResponse> list = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  bool saw_delta = false;
  with_agent(
      config_for(s, gw, model::Wire::kAnthropic), [&](Agent& agent) -> asio::awaitable<void> {
        auto channel = channel_to(agent, co_await asio::this_coro::executor);
        v1::Agents::Stub stub(channel);
        v1::CreateAgentRequest create;
        auto a = co_await stub.Create(create, call_options_with(one(s.credential())));
        if (!a.ok()) co_return;
        // Subscribed (it saw the creation) before the turn starts.
        v1::Session::Stub session(channel);
        v1::EventsRequest er;
        auto events = co_await session.Events(er, call_options_with(one(s.credential()), 30s));
        if (!events.ok()) co_return;
        auto created = co_await events->read();
        if (!created) co_return;
        v1::SendRequest send;
        send.set_agent_id(a->id());
        send.set_prompt("count");
        sent = co_await stub.Send(send, call_options_with(one(s.credential())));
        if (!sent.ok()) co_return;
        // Wait until the model is streaming: the first delta.
        while (auto ev = co_await events->read()) {
          if (ev->has_delta()) {
            saw_delta = true;
            break;
          }
        }
        events->call().cancel();
        v1::AgentRef ref;
        ref.set_agent_id(a->id());
        cancel = co_await stub.Cancel(ref, call_options_with(one(s.credential()), 30s));
        v1::ListAgentsRequest lr;
        list = co_await stub.List(lr, call_options_with(one(s.credential())));
        v1::TranscriptRequest tr;
        tr.set_agent_id(a->id());
        transcript = co_await stub.Transcript(tr, call_options_with(one(s.credential())));
        channel->close();
      });
  CHECK(saw_delta);
  REQUIRE(sent.status() == ok_status());
  REQUIRE(cancel.status() == ok_status());
  CHECK(cancel->turn_id() == sent->turn_id());
  REQUIRE(list.status() == ok_status());
  CHECK(list->agents(0).last_turn().state() == v1::TURN_CANCELLED);
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  REQUIRE(items.size() == 2);
  CHECK(items[1]["_kind"] == "ITEM_ERROR");
  CHECK(items[1]["message"] == "cancelled by the user");
  // The gateway saw the request end.
  CHECK(gw.wait_for(
      [](const json& reqs) { return reqs.size() == 1 && reqs[0].value("client_closed", false); }));
}

TEST_CASE("Agents: Cancel kills the running shell command", "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  const std::string pid_file = s.dir / "sleep.pid";
  json script = json::array();
  script.push_back(
      {{"wire", "openai"},
       {"tool_calls",
        {{{"id", "c1"},
          {"name", "shell"},
          {"arguments", {{"command", "echo $$ > " + pid_file + "; exec sleep 60"}}}}}}});
  REQUIRE(gw.set_script(script).ok());
  Result<v1::CancelResponse> cancel = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config_for(s, gw, model::Wire::kOpenAi), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::CreateAgentRequest create;
    auto a = co_await stub.Create(create, call_options_with(one(s.credential())));
    if (!a.ok()) co_return;
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("sleep");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    // The tool call item is in the transcript before the tool runs; then wait for the pid.
    auto events = co_await read_events(channel, s.credential(), "", "", "", false, 4);
    (void)events;
    net::Timer t(co_await asio::this_coro::executor);
    for (int i = 0; i < 500 && !std::filesystem::exists(pid_file); ++i) {
      t.expires_after(20ms);
      co_await t.async_wait();
    }
    t.expires_after(50ms);  // the shell wrote the file; let it exec sleep
    co_await t.async_wait();
    v1::AgentRef ref;
    ref.set_agent_id(a->id());
    cancel = co_await stub.Cancel(ref, call_options_with(one(s.credential()), 30s));
    v1::TranscriptRequest tr;
    tr.set_agent_id(a->id());
    transcript = co_await stub.Transcript(tr, call_options_with(one(s.credential())));
    channel->close();
  });
  REQUIRE(cancel.status() == ok_status());
  std::ifstream in(pid_file);
  pid_t pid = 0;
  in >> pid;
  REQUIRE(pid > 0);
  CHECK(::kill(pid, 0) == -1);
  CHECK(errno == ESRCH);
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  REQUIRE(items.size() == 4);
  CHECK(items[2]["_kind"] == "ITEM_TOOL_RESULT");
  CHECK(items[2]["is_error"] == true);
  CHECK(items[3]["message"] == "cancelled by the user");
}

TEST_CASE("Session.Events: resumed from an offset after a disconnect, nothing lost or repeated",
          "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  script.push_back({{"wire", "openai"},
                    {"tool_calls",
                     {{{"id", "c1"}, {"name", "shell"}, {"arguments", {{"command", "echo a"}}}}}}});
  script.push_back({{"wire", "openai"}, {"text", "done"}});
  REQUIRE(gw.set_script(script).ok());
  EventsRead first, resumed, full;
  Result<v1::SendAccepted> sent = internal_error("not run");
  with_agent(config_for(s, gw, model::Wire::kOpenAi), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::CreateAgentRequest create;
    auto a = co_await stub.Create(create, call_options_with(one(s.credential())));
    if (!a.ok()) co_return;
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    // A client that saw three events and lost its connection...
    first = co_await read_events(channel, s.credential(), "", "", "", false, 3);
    channel->close();
    // ... reconnects and resumes from the last offset it saw.
    auto channel2 = channel_to(agent, co_await asio::this_coro::executor);
    resumed =
        co_await read_events(channel2, s.credential(), first.last_offset, "", sent->turn_id());
    full = co_await read_events(channel2, s.credential(), "", resumed.last_offset, "");
    channel2->close();
  });
  REQUIRE(sent.status() == ok_status());
  REQUIRE(first.events.size() == 3);
  std::vector<std::string> joined;
  for (const auto& e : first.events) joined.push_back(e.SerializeAsString());
  for (const auto& e : resumed.events) joined.push_back(e.SerializeAsString());
  std::vector<std::string> all;
  for (const auto& e : full.events) all.push_back(e.SerializeAsString());
  // created, turn running, user text, tool call, tool result, text, turn done: 7 events.
  CHECK(full.events.size() == 7);
  CHECK(joined == all);
}

TEST_CASE("Session.Events: no text delta comes after the durable text item it makes up",
          "[agent][agents][integration]") {
  // Before the fix a subscriber woken by the last deltas read the log after the loop had
  // stored the text, sent the item, and only then the queued deltas: most turns showed it.
  constexpr int kTurns = 10;
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  for (int t = 0; t < kTurns; ++t) {
    json chunks = json::array();
    for (int c = 0; c < 8; ++c) chunks.push_back(fmt::format("t{}c{} ", t, c));
    script.push_back({{"wire", "openai"}, {"chunks", chunks}});
  }
  REQUIRE(gw.set_script(script).ok());
  std::vector<v1::Event> events;
  std::vector<std::string> turns;
  with_agent(config_for(s, gw, model::Wire::kOpenAi), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::CreateAgentRequest create;
    auto a = co_await stub.Create(create, call_options_with(one(s.credential())));
    if (!a.ok()) co_return;
    v1::Session::Stub session(channel);
    v1::EventsRequest er;
    auto stream = co_await session.Events(er, call_options_with(one(s.credential()), 60s));
    if (!stream.ok()) co_return;
    auto first = co_await stream->read();  // the agent's creation: subscribed before any turn
    if (!first) co_return;
    for (int t = 0; t < kTurns; ++t) {
      v1::SendRequest send;
      send.set_agent_id(a->id());
      send.set_prompt(fmt::format("turn {}", t));
      auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
      if (!sent.ok()) break;
      turns.push_back(sent->turn_id());
      while (auto ev = co_await stream->read()) {
        events.push_back(*ev);
        if (ended(*ev, sent->turn_id())) break;
      }
    }
    stream->call().cancel();
    channel->close();
  });
  REQUIRE(turns.size() == static_cast<size_t>(kTurns));
  std::map<std::string, std::string> text_of, deltas_of;
  std::set<std::string> stored;  // turns whose assistant text item has arrived
  int late = 0;
  for (const auto& ev : events) {
    if (ev.has_delta()) {
      if (stored.count(ev.delta().turn_id()) > 0) ++late;
      deltas_of[ev.delta().turn_id()] += ev.delta().text();
    } else if (ev.has_item() && ev.item().role() == "assistant") {
      stored.insert(ev.item().turn_id());
      text_of[ev.item().turn_id()] = json::parse(ev.item().payload_json())["text"];
    }
  }
  CHECK(late == 0);
  for (int t = 0; t < kTurns; ++t) {
    INFO("turn " << t);
    std::string want;
    for (int c = 0; c < 8; ++c) want += fmt::format("t{}c{} ", t, c);
    CHECK(text_of[turns[t]] == want);
    CHECK(deltas_of[turns[t]] == want);  // and none was dropped
  }
}

TEST_CASE("Agents: a resent client_nonce returns the same agent and the same turn",
          "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({{{"wire", "openai"}, {"text", "once"}}})).ok());
  Result<v1::Agent> a1 = internal_error("not run"), a2 = internal_error("not run");
  Result<v1::SendAccepted> s1 = internal_error("not run"), s2 = internal_error("not run");
  Result<v1::ListAgentsResponse> list = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config_for(s, gw, model::Wire::kOpenAi), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::CreateAgentRequest create;
    create.set_client_nonce("n-create-1");
    a1 = co_await stub.Create(create, call_options_with(one(s.credential())));
    a2 = co_await stub.Create(create, call_options_with(one(s.credential())));
    if (!a1.ok()) co_return;
    v1::SendRequest send;
    send.set_agent_id(a1->id());
    send.set_prompt("hello");
    send.set_client_nonce("n-send-1");
    s1 = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!s1.ok()) co_return;
    auto ev = co_await read_events(channel, s.credential(), "", "", s1->turn_id());
    (void)ev;
    s2 = co_await stub.Send(send, call_options_with(one(s.credential())));
    v1::ListAgentsRequest lr;
    list = co_await stub.List(lr, call_options_with(one(s.credential())));
    v1::TranscriptRequest tr;
    tr.set_agent_id(a1->id());
    transcript = co_await stub.Transcript(tr, call_options_with(one(s.credential())));
    channel->close();
  });
  REQUIRE(a1.status() == ok_status());
  REQUIRE(a2.status() == ok_status());
  CHECK(a1->id() == a2->id());
  REQUIRE(s1.status() == ok_status());
  REQUIRE(s2.status() == ok_status());
  CHECK(s1->turn_id() == s2->turn_id());
  CHECK(s1->seq() == s2->seq());
  REQUIRE(list.status() == ok_status());
  CHECK(list->agents_size() == 1);
  REQUIRE(transcript.status() == ok_status());
  CHECK(transcript->items_size() == 2);
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  CHECK(reqs->size() == 1);
}

TEST_CASE("Agents: a turn left running by a crashed agent ends as failed on the next start",
          "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  {
    // What a SIGKILLed agent leaves: an agent with a running turn.
    std::filesystem::create_directories(config.data_dir);
    auto db = open_agent_db(config.data_dir);
    REQUIRE(db.status() == ok_status());
    Result<StartedTurn> started = internal_error("not run");
    cb::test::run_sync([&]() -> asio::awaitable<void> {
      started = co_await (*db)->run([](db::Database& d) -> Result<StartedTurn> {
        auto a = create_agent(d, "ag_1", "main", "test-model", "", 1000);
        if (!a.ok()) return a.status();
        return start_turn(d, "ag_1", "tu_1", "", R"({"text":"hi"})", 1000);
      });
    }());
    REQUIRE(started.status() == ok_status());
  }
  Result<v1::ListAgentsResponse> list = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::ListAgentsRequest lr;
    list = co_await stub.List(lr, call_options_with(one(s.credential())));
    v1::TranscriptRequest tr;
    tr.set_agent_id("ag_1");
    transcript = co_await stub.Transcript(tr, call_options_with(one(s.credential())));
    channel->close();
  });
  REQUIRE(list.status() == ok_status());
  REQUIRE(list->agents_size() == 1);
  CHECK(list->agents(0).last_turn().id() == "tu_1");
  CHECK(list->agents(0).last_turn().state() == v1::TURN_FAILED);
  CHECK(list->agents(0).last_turn().error() == "agent restarted");
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  REQUIRE(items.size() == 2);
  CHECK(items[1]["_kind"] == "ITEM_ERROR");
  CHECK(items[1]["message"] == "agent restarted");
}

}  // namespace cb::agent

namespace cb::agent {
namespace {

// Sends |prompt| and follows Events from |from| until the turn leaves TURN_RUNNING.
asio::awaitable<Result<v1::SendAccepted>> send_and_wait(std::shared_ptr<grpc::Channel> channel,
                                                        std::string credential,
                                                        std::string agent_id, std::string prompt,
                                                        EventsRead* events = nullptr) {
  v1::Agents::Stub stub(channel);
  v1::SendRequest send;
  send.set_agent_id(agent_id);
  send.set_prompt(prompt);
  auto sent = co_await stub.Send(send, call_options_with(one(credential)));
  if (!sent.ok()) co_return sent;
  auto read = co_await read_events(channel, credential, "", "", sent->turn_id());
  if (events != nullptr) *events = std::move(read);
  co_return sent;
}

}  // namespace

TEST_CASE("AgentConfig: agent.json fields replace the flags' defaults", "[agent][agents][unit]") {
  TurnConfig defaults;
  defaults.main.name = "flag-model";
  defaults.main.wire = model::Wire::kAnthropic;
  defaults.main.context_tokens = 1000;
  defaults.max_steps = 9;
  SECTION("an empty object keeps every default") {
    auto c = parse_agent_config("{}", defaults);
    REQUIRE(c.status() == ok_status());
    CHECK(c->main.name == "flag-model");
    CHECK(c->main.wire == model::Wire::kAnthropic);
    CHECK(c->main.context_tokens == 1000);
    CHECK(c->summarize_model().name == "flag-model");
    CHECK(c->approval_mode == "auto");
    CHECK(c->max_steps == 9);
  }
  SECTION("every field") {
    auto c = parse_agent_config(R"({"models": {
        "main": {"name": "m", "wire": "openai", "vision": true, "context_tokens": 64000},
        "summarize": {"name": "s", "context_tokens": 8000},
        "computer": {"name": "c", "wire": "anthropic", "vision": true}},
      "approval_mode": "ask", "system_prompt": "be brief", "max_steps": 3, "later": 1})",
                                defaults);
    REQUIRE(c.status() == ok_status());
    CHECK(c->main.name == "m");
    CHECK(c->main.wire == model::Wire::kOpenAi);
    CHECK(c->main.vision);
    CHECK(c->main.context_tokens == 64000);
    CHECK(c->summarize_model().name == "s");
    CHECK(c->summarize.wire == model::Wire::kAnthropic);  // the flag's, not main's
    CHECK(c->summarize.context_tokens == 8000);
    CHECK(c->computer.name == "c");
    CHECK(c->computer.vision);
    CHECK(c->approval_mode == "ask");
    CHECK(c->system_prompt == "be brief");
    CHECK(c->max_steps == 3);
  }
  SECTION("main without a name keeps the flag's name") {
    auto c = parse_agent_config(R"({"models": {"main": {"wire": "openai"}}})", defaults);
    REQUIRE(c.status() == ok_status());
    CHECK(c->main.name == "flag-model");
    CHECK(c->main.wire == model::Wire::kOpenAi);
  }
  SECTION("a bad field is named") {
    const std::pair<std::string, std::string> cases[] = {
        {R"({"models": {"main": {"wire": "grpc"}}})", "models.main.wire"},
        {R"({"models": {"main": {"name": ""}}})", "models.main.name"},
        {R"({"models": {"summarize": {"vision": "yes"}}})", "models.summarize.vision"},
        {R"({"models": {"computer": {"wire": "openai"}}})", "models.computer.name"},
        {R"({"models": {"main": {"context_tokens": 0}}})", "models.main.context_tokens"},
        {R"({"models": []})", "models"},
        {R"({"approval_mode": "sometimes"})", "approval_mode"},
        {R"({"max_steps": 0})", "max_steps"},
        {R"({"system_prompt": 7})", "system_prompt"},
        {R"({"models": )", "not valid JSON"},
        {R"([1])", "must be a JSON object"},
    };
    for (const auto& [text, field] : cases) {
      auto c = parse_agent_config(text, defaults);
      INFO(text);
      CHECK(c.status().code() == Code::kFailedPrecondition);
      CHECK(std::string(c.status().message()).find(field) != std::string::npos);
    }
  }
}

TEST_CASE("Agents: agent.json sets the models, applies at the next turn, a bad field fails Send",
          "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  script.push_back({{"wire", "anthropic"}, {"text", "one"}});
  script.push_back({{"wire", "openai"}, {"text", "two"}});
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  std::filesystem::create_directories(config.data_dir);
  const std::string file = config.data_dir / "agent.json";
  test::write_file(file, R"({"models": {"main": {"name": "file-model", "wire": "anthropic"}},
                       "system_prompt": "from the file"})");
  Result<v1::Agent> a = internal_error("not run");
  Result<v1::SendAccepted> first = internal_error("not run");
  Result<v1::SendAccepted> bad = internal_error("not run");
  Result<v1::SendAccepted> second = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::CreateAgentRequest create;
    a = co_await stub.Create(create, call_options_with(one(s.credential())));
    if (!a.ok()) co_return;
    first = co_await send_and_wait(channel, s.credential(), a->id(), "hi");
    test::write_file(file, R"({"models": {"main": {"wire": "grpc"}}})");
    bad = co_await send_and_wait(channel, s.credential(), a->id(), "hi again");
    test::write_file(file, R"({"models": {"main": {"name": "other-model"}}})");
    second = co_await send_and_wait(channel, s.credential(), a->id(), "and again");
    channel->close();
  });
  REQUIRE(a.status() == ok_status());
  CHECK(a->model() == "file-model");
  REQUIRE(first.status() == ok_status());
  CHECK(bad.status().code() == Code::kFailedPrecondition);
  CHECK(std::string(bad.status().message()).find("models.main.wire") != std::string::npos);
  REQUIRE(second.status() == ok_status());
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  CHECK((*reqs)[0]["wire"] == "anthropic");
  CHECK((*reqs)[0]["body"]["model"] == "file-model");
  CHECK((*reqs)[0]["body"]["system"].dump().find("from the file") != std::string::npos);
  CHECK((*reqs)[1]["wire"] == "openai");  // the flag's wire again
  CHECK((*reqs)[1]["body"]["model"] == "other-model");
}

}  // namespace cb::agent

namespace cb::agent {
namespace {

// Reads Session.Events from the start until an agents event shows |turn_id| in |state|.
asio::awaitable<EventsRead> wait_turn_state(std::shared_ptr<grpc::Channel> channel,
                                            std::string credential, std::string turn_id,
                                            v1::TurnState state) {
  v1::Session::Stub stub(std::move(channel));
  v1::EventsRequest req;
  req.set_no_deltas(true);
  EventsRead out;
  auto call = co_await stub.Events(req, call_options_with(one(credential), 30s));
  if (!call.ok()) co_return out;
  while (auto ev = co_await call->read()) {
    out.events.push_back(*ev);
    out.last_offset = ev->offset_key();
    if (ev->has_agent() && ev->agent().last_turn().id() == turn_id &&
        ev->agent().last_turn().state() == state)
      break;
  }
  call->call().cancel();
  co_return out;
}

// Reads the approvals channel from the start until the |nth| (1-based) approval in |state|.
asio::awaitable<std::optional<v1::Approval>> wait_approval(std::shared_ptr<grpc::Channel> channel,
                                                           std::string credential,
                                                           v1::ApprovalState state, int nth = 1) {
  v1::Session::Stub stub(std::move(channel));
  v1::EventsRequest req;
  req.add_channels("approvals");
  std::optional<v1::Approval> out;
  auto call = co_await stub.Events(req, call_options_with(one(credential), 30s));
  if (!call.ok()) co_return out;
  int seen = 0;
  while (auto ev = co_await call->read()) {
    if (ev->channel() != "approvals" || !ev->has_approval()) continue;
    if (ev->approval().state() == state && ++seen == nth) {
      out = ev->approval();
      break;
    }
  }
  call->call().cancel();
  co_return out;
}

asio::awaitable<Result<v1::RespondResponse>> respond(std::shared_ptr<grpc::Channel> channel,
                                                     std::string credential, std::string agent_id,
                                                     std::string approval_id, v1::Decision decision,
                                                     std::string message = {}) {
  v1::Agents::Stub stub(std::move(channel));
  v1::RespondRequest req;
  req.set_agent_id(agent_id);
  req.set_approval_id(approval_id);
  req.set_decision(decision);
  req.set_message(message);
  auto r = co_await stub.Respond(req, call_options_with(one(credential)));
  co_return r;
}

asio::awaitable<Result<v1::Agent>> create_agent_with(std::shared_ptr<grpc::Channel> channel,
                                                     std::string credential,
                                                     v1::ApprovalMode mode) {
  v1::Agents::Stub stub(std::move(channel));
  v1::CreateAgentRequest create;
  create.set_approval_mode(mode);
  auto a = co_await stub.Create(create, call_options_with(one(credential)));
  co_return a;
}

asio::awaitable<Result<v1::TranscriptPage>> transcript_of(std::shared_ptr<grpc::Channel> channel,
                                                          std::string credential,
                                                          std::string agent_id) {
  v1::Agents::Stub stub(std::move(channel));
  v1::TranscriptRequest tr;
  tr.set_agent_id(agent_id);
  auto t = co_await stub.Transcript(tr, call_options_with(one(credential)));
  co_return t;
}

json shell_call(const std::string& wire, const std::string& id, const std::string& command) {
  return {{"wire", wire},
          {"tool_calls", {{{"id", id}, {"name", "shell"}, {"arguments", {{"command", command}}}}}}};
}

std::vector<std::string> kinds_of(const std::vector<json>& items) {
  std::vector<std::string> out;
  for (const json& i : items) {
    std::string k = i["_kind"];
    if (k == "ITEM_APPROVAL") k += ":" + i.value("state", "");
    out.push_back(k);
  }
  return out;
}

}  // namespace

TEST_CASE("Agents: in ask mode a destructive call waits; approved once it runs",
          "[agent][agents][approvals][integration]") {
  const std::string wire = GENERATE(std::string("openai"), std::string("anthropic"));
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  const std::string marker = s.dir / "ran";
  json script = json::array();
  // list_dir is not destructive: it runs without asking.
  script.push_back(
      {{"wire", wire}, {"tool_calls", {{{"id", "c0"}, {"name", "list_dir"}, {"arguments", {}}}}}});
  script.push_back(shell_call(wire, "c1", "touch " + marker + "; echo hi"));
  script.push_back({{"wire", wire}, {"text", "done"}});
  REQUIRE(gw.set_script(script).ok());
  std::optional<v1::Approval> pending;
  bool ran_before_answer = true;
  Result<v1::RespondResponse> answered = internal_error("not run");
  Result<v1::RespondResponse> again = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  EventsRead all, resumed;
  std::string mid_offset;
  with_agent(config_for(s, gw, wire_of(wire)), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_ASK);
    if (!a.ok()) co_return;
    v1::Agents::Stub stub(channel);
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    pending = co_await wait_approval(channel, s.credential(), v1::APPROVAL_PENDING);
    if (!pending) co_return;
    ran_before_answer = std::filesystem::exists(marker);
    answered = co_await respond(channel, s.credential(), a->id(), pending->id(), v1::APPROVE_ONCE);
    all = co_await wait_turn_state(channel, s.credential(), sent->turn_id(), v1::TURN_DONE);
    again = co_await respond(channel, s.credential(), a->id(), pending->id(), v1::DENY);
    transcript = co_await transcript_of(channel, s.credential(), a->id());
    // A client that saw the first half of the log resumes from its offset.
    mid_offset = all.events[all.events.size() / 2].offset_key();
    resumed = co_await read_events(channel, s.credential(), mid_offset, all.last_offset, "");
    channel->close();
  });
  REQUIRE(pending.has_value());
  CHECK(pending->tool() == "shell");
  CHECK(pending->call_id() == "c1");
  CHECK(json::parse(pending->arguments_json())["command"] == "touch " + marker + "; echo hi");
  CHECK_FALSE(ran_before_answer);
  REQUIRE(answered.status() == ok_status());
  CHECK_FALSE(answered->resumed());
  CHECK(std::filesystem::exists(marker));
  // Answered already: a second answer is refused.
  CHECK(again.status().code() == Code::kFailedPrecondition);
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) ==
        std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL", "ITEM_TOOL_RESULT",
                                 "ITEM_TOOL_CALL", "ITEM_APPROVAL:pending",
                                 "ITEM_APPROVAL:approved", "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  CHECK(items[4]["approval_id"] == pending->id());
  CHECK(items[6]["is_error"] == false);
  // The approvals channel is in the log, and a resumed reader gets exactly the rest.
  std::vector<std::string> approvals;
  for (const auto& ev : all.events) {
    if (ev.has_approval()) approvals.push_back(v1::ApprovalState_Name(ev.approval().state()));
  }
  CHECK(approvals == std::vector<std::string>{"APPROVAL_PENDING", "APPROVAL_APPROVED"});
  std::vector<std::string> tail, expect;
  bool after = false;
  for (const auto& ev : all.events) {
    if (after) expect.push_back(ev.SerializeAsString());
    if (ev.offset_key() == mid_offset) after = true;
  }
  for (const auto& ev : resumed.events) tail.push_back(ev.SerializeAsString());
  CHECK(tail == expect);
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 3);
  CHECK((*reqs)[2]["outcome"] != "refused");
}

TEST_CASE("Agents: a denied call does not run and the model is told; the loop goes on",
          "[agent][agents][approvals][integration]") {
  const std::string wire = GENERATE(std::string("openai"), std::string("anthropic"));
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  const std::string marker = s.dir / "ran";
  json script = json::array();
  script.push_back(shell_call(wire, "c1", "touch " + marker));
  script.push_back({{"wire", wire}, {"text", "understood"}});
  REQUIRE(gw.set_script(script).ok());
  Result<v1::RespondResponse> denied = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config_for(s, gw, wire_of(wire)), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_ASK);
    if (!a.ok()) co_return;
    v1::Agents::Stub stub(channel);
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    auto pending = co_await wait_approval(channel, s.credential(), v1::APPROVAL_PENDING);
    if (!pending) co_return;
    denied = co_await respond(channel, s.credential(), a->id(), pending->id(), v1::DENY,
                              "not in this folder");
    co_await wait_turn_state(channel, s.credential(), sent->turn_id(), v1::TURN_DONE);
    transcript = co_await transcript_of(channel, s.credential(), a->id());
    channel->close();
  });
  REQUIRE(denied.status() == ok_status());
  CHECK_FALSE(std::filesystem::exists(marker));
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) == std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL",
                                                    "ITEM_APPROVAL:pending", "ITEM_APPROVAL:denied",
                                                    "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  CHECK(items[3]["reason"] == "not in this folder");
  CHECK(items[4]["is_error"] == true);
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  CHECK((*reqs)[1]["outcome"] != "refused");
  const std::string sent_back = (*reqs)[1]["body"]["messages"].dump();
  CHECK(sent_back.find("denied") != std::string::npos);
  CHECK(sent_back.find("not in this folder") != std::string::npos);
}

TEST_CASE("Agents: approved always, later calls of that tool run without asking",
          "[agent][agents][approvals][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  script.push_back(shell_call("openai", "c1", "echo one"));
  script.push_back(shell_call("openai", "c2", "echo two"));
  script.push_back({{"wire", "openai"}, {"text", "first turn done"}});
  script.push_back(shell_call("openai", "c3", "echo three"));
  script.push_back({{"wire", "openai"}, {"text", "second turn done"}});
  REQUIRE(gw.set_script(script).ok());
  Result<v1::RespondResponse> always = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  Result<v1::ListAgentsResponse> list = internal_error("not run");
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  // The default mode of new agents comes from agent.json.
  std::filesystem::create_directories(config.data_dir);
  test::write_file(config.data_dir / "agent.json", R"({"approval_mode": "ask"})");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_MODE_UNSPECIFIED);
    if (!a.ok() || a->approval_mode() != v1::APPROVAL_ASK) co_return;
    v1::Agents::Stub stub(channel);
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    auto pending = co_await wait_approval(channel, s.credential(), v1::APPROVAL_PENDING);
    if (!pending) co_return;
    always = co_await respond(channel, s.credential(), a->id(), pending->id(), v1::APPROVE_ALWAYS);
    co_await wait_turn_state(channel, s.credential(), sent->turn_id(), v1::TURN_DONE);
    auto second = co_await send_and_wait(channel, s.credential(), a->id(), "again");
    (void)second;
    transcript = co_await transcript_of(channel, s.credential(), a->id());
    v1::ListAgentsRequest lr;
    list = co_await stub.List(lr, call_options_with(one(s.credential())));
    channel->close();
  });
  REQUIRE(always.status() == ok_status());
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) ==
        std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL", "ITEM_APPROVAL:pending",
                                 "ITEM_APPROVAL:always", "ITEM_TOOL_RESULT", "ITEM_TOOL_CALL",
                                 "ITEM_TOOL_RESULT", "ITEM_TEXT", "ITEM_TEXT", "ITEM_TOOL_CALL",
                                 "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  REQUIRE(list.status() == ok_status());
  CHECK(list->agents(0).approval_mode() == v1::APPROVAL_ASK);
  CHECK(list->agents(0).last_turn().state() == v1::TURN_DONE);
}

TEST_CASE("Agents: an unanswered approval ends the turn waiting_for_user; an answer resumes it",
          "[agent][agents][approvals][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  const std::string marker = s.dir / "ran";
  json script = json::array();
  script.push_back(shell_call("anthropic", "c1", "touch " + marker));
  script.push_back({{"wire", "anthropic"}, {"text", "made it"}});
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = config_for(s, gw, model::Wire::kAnthropic);
  config.agents.approval_timeout = 100ms;  // nobody answers in the test
  std::optional<v1::Approval> expired;
  bool ran_while_waiting = true;
  EventsRead waited;
  Result<v1::RespondResponse> resumed = internal_error("not run");
  Result<v1::RespondResponse> late = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_ASK);
    if (!a.ok()) co_return;
    v1::Agents::Stub stub(channel);
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    waited = co_await wait_turn_state(channel, s.credential(), sent->turn_id(),
                                      v1::TURN_WAITING_FOR_USER);
    expired = co_await wait_approval(channel, s.credential(), v1::APPROVAL_EXPIRED);
    if (!expired) co_return;
    ran_while_waiting = std::filesystem::exists(marker);
    resumed = co_await respond(channel, s.credential(), a->id(), expired->id(), v1::APPROVE_ONCE);
    co_await wait_turn_state(channel, s.credential(), sent->turn_id(), v1::TURN_DONE);
    late = co_await respond(channel, s.credential(), a->id(), "", v1::CONTINUE);
    transcript = co_await transcript_of(channel, s.credential(), a->id());
    channel->close();
  });
  REQUIRE_FALSE(waited.events.empty());
  const auto& last = waited.events.back().agent().last_turn();
  CHECK(last.state() == v1::TURN_WAITING_FOR_USER);
  CHECK(last.error().find("no answer") != std::string::npos);
  REQUIRE(expired.has_value());
  CHECK_FALSE(ran_while_waiting);
  REQUIRE(resumed.status() == ok_status());
  CHECK(resumed->resumed());
  CHECK(std::filesystem::exists(marker));
  // Nothing waits any more.
  CHECK(late.status().code() == Code::kFailedPrecondition);
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) ==
        std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL", "ITEM_APPROVAL:pending",
                                 "ITEM_APPROVAL:expired", "ITEM_APPROVAL:approved",
                                 "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  CHECK((*reqs)[1]["outcome"] != "refused");
}

TEST_CASE("Agents: the step cap ends the turn waiting_for_user; Respond CONTINUE goes on",
          "[agent][agents][approvals][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  script.push_back(shell_call("openai", "c1", "echo step"));
  script.push_back({{"wire", "openai"}, {"text", "finished"}});
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  config.agents.max_steps = 1;
  Result<v1::RespondResponse> cont = internal_error("not run");
  EventsRead waited;
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    if (!a.ok()) co_return;
    v1::Agents::Stub stub(channel);
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    waited = co_await wait_turn_state(channel, s.credential(), sent->turn_id(),
                                      v1::TURN_WAITING_FOR_USER);
    cont = co_await respond(channel, s.credential(), a->id(), "", v1::CONTINUE);
    co_await wait_turn_state(channel, s.credential(), sent->turn_id(), v1::TURN_DONE);
    transcript = co_await transcript_of(channel, s.credential(), a->id());
    channel->close();
  });
  REQUIRE_FALSE(waited.events.empty());
  CHECK(waited.events.back().agent().last_turn().error().find("1 model steps") !=
        std::string::npos);
  REQUIRE(cont.status() == ok_status());
  CHECK(cont->resumed());
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) ==
        std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL", "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  CHECK((*reqs)[1]["outcome"] != "refused");
}

TEST_CASE("Agents: Cancel while an approval waits ends the turn cancelled",
          "[agent][agents][approvals][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({shell_call("openai", "c1", "echo no")})).ok());
  Result<v1::CancelResponse> cancel = internal_error("not run");
  std::optional<v1::Approval> cancelled_approval;
  Result<v1::ListAgentsResponse> list = internal_error("not run");
  with_agent(config_for(s, gw, model::Wire::kOpenAi), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_ASK);
    if (!a.ok()) co_return;
    v1::Agents::Stub stub(channel);
    v1::SendRequest send;
    send.set_agent_id(a->id());
    send.set_prompt("go");
    auto sent = co_await stub.Send(send, call_options_with(one(s.credential())));
    if (!sent.ok()) co_return;
    auto pending = co_await wait_approval(channel, s.credential(), v1::APPROVAL_PENDING);
    if (!pending) co_return;
    v1::AgentRef ref;
    ref.set_agent_id(a->id());
    cancel = co_await stub.Cancel(ref, call_options_with(one(s.credential())));
    cancelled_approval = co_await wait_approval(channel, s.credential(), v1::APPROVAL_CANCELLED);
    v1::ListAgentsRequest lr;
    list = co_await stub.List(lr, call_options_with(one(s.credential())));
    channel->close();
  });
  REQUIRE(cancel.status() == ok_status());
  CHECK(cancelled_approval.has_value());
  REQUIRE(list.status() == ok_status());
  CHECK(list->agents(0).last_turn().state() == v1::TURN_CANCELLED);
}

TEST_CASE(
    "Agents: an agent restarted with an approval pending waits for the user; approving "
    "resumes the turn",
    "[agent][agents][approvals][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({{{"wire", "openai"}, {"text", "after the restart"}}})).ok());
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  const std::string marker = s.dir / "ran";
  {
    // What a SIGKILLed agent leaves: a turn whose shell call waits for approval.
    std::filesystem::create_directories(config.data_dir);
    auto db = open_agent_db(config.data_dir);
    REQUIRE(db.status() == ok_status());
    Status written = internal_error("not run");
    const std::string args = json{{"command", "touch " + marker}}.dump();
    cb::test::run_sync([&]() -> asio::awaitable<void> {
      written = co_await (*db)->run([&args](db::Database& d) -> Status {
        auto a = create_agent(d, "ag_1", "main", "test-model", "", 1000, "ask");
        if (!a.ok()) return a.status();
        auto t = start_turn(d, "ag_1", "tu_1", "", R"({"text":"touch it"})", 1000);
        if (!t.ok()) return t.status();
        auto call =
            append_item(d, "ag_1", "tu_1", "assistant", "tool_call",
                        json{{"id", "c1"}, {"name", "shell"}, {"arguments", args}}.dump(), 1000);
        if (!call.ok()) return call.status();
        return create_approval(d, approval_of_c1("shell", args, 1000)).status();
      });
    }());
    REQUIRE(written == ok_status());
  }
  Result<v1::ListAgentsResponse> before = internal_error("not run");
  Result<v1::RespondResponse> approved = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::Agents::Stub stub(channel);
    v1::ListAgentsRequest lr;
    before = co_await stub.List(lr, call_options_with(one(s.credential())));
    approved = co_await respond(channel, s.credential(), "ag_1", "ap_1", v1::APPROVE_ONCE);
    co_await wait_turn_state(channel, s.credential(), "tu_1", v1::TURN_DONE);
    transcript = co_await transcript_of(channel, s.credential(), "ag_1");
    channel->close();
  });
  REQUIRE(before.status() == ok_status());
  CHECK(before->agents(0).last_turn().state() == v1::TURN_WAITING_FOR_USER);
  CHECK(before->agents(0).last_turn().error().find("agent restarted") != std::string::npos);
  REQUIRE(approved.status() == ok_status());
  CHECK(approved->resumed());
  CHECK(std::filesystem::exists(marker));
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) ==
        std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL", "ITEM_APPROVAL:pending",
                                 "ITEM_APPROVAL:expired", "ITEM_APPROVAL:approved",
                                 "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 1);
  CHECK((*reqs)[0]["outcome"] != "refused");
}

}  // namespace cb::agent

namespace cb::agent {

// The compaction tests' script so far: a shell call whose long result passes the budget of
// compaction_config(), the summarize model's answer, and the main model's closing text.
static json compaction_script_start() {
  json script = json::array();
  script.push_back(shell_call("openai", "c1", "head -c 40000 /dev/zero | tr '\\0' a"));
  script.push_back({{"wire", "anthropic"}, {"text", "SUMMARY-7Q: the user wanted a's"}});
  script.push_back({{"wire", "openai"}, {"text", "here they are"}});
  return script;
}

// An openai agent whose context budget is what the first request costs (system prompt and
// box tools) plus room for other tool sets and a short conversation, so that only the long
// tool result of compaction_script_start() passes it; "small-model" on anthropic summarizes.
static AgentConfig compaction_config(Setup& s, cb::test::FakeGateway& gw) {
  model::Request base;
  base.system = std::string(kDefaultSystemPrompt);
  base.tools = box_tool_defs();
  const int64_t base_tokens = model::estimate_tokens(base, model::ModelInfo{});
  const int64_t context = (base_tokens + 4000) * 10 / 8;
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  std::filesystem::create_directories(config.data_dir);
  test::write_file(config.data_dir / "agent.json",
                   json{{"models",
                         {{"main", {{"context_tokens", context}}},
                          {"summarize", {{"name", "small-model"}, {"wire", "anthropic"}}}}}}
                       .dump());
  return config;
}

TEST_CASE(
    "Agents: near the context budget the summarize model compacts the conversation, "
    "and a restart rebuilds it the same",
    "[agent][agents][compaction][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = compaction_script_start();
  script.push_back({{"wire", "openai"}, {"text", "next answer"}});
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = compaction_config(s, gw);
  std::string agent_id;
  Result<v1::SendAccepted> first = internal_error("not run");
  Result<v1::SendAccepted> second = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    if (!a.ok()) co_return;
    agent_id = a->id();
    first = co_await send_and_wait(channel, s.credential(), agent_id, "print many a");
    channel->close();
  });
  // A new agent process on the same agent.db.
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    second = co_await send_and_wait(channel, s.credential(), agent_id, "and now?");
    transcript = co_await transcript_of(channel, s.credential(), agent_id);
    channel->close();
  });
  REQUIRE(first.status() == ok_status());
  REQUIRE(second.status() == ok_status());
  REQUIRE(transcript.status() == ok_status());
  auto items = payloads(*transcript);
  CHECK(kinds_of(items) == std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL",
                                                    "ITEM_TOOL_RESULT", "ITEM_SUMMARY", "ITEM_TEXT",
                                                    "ITEM_TEXT", "ITEM_TEXT"});
  CHECK(items[3]["model"] == "small-model");
  CHECK(items[3]["through_seq"] == 3);
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 4);
  const std::string long_run(200, 'a');
  // The summarize call: the other model, on its wire, with the long result to summarize.
  CHECK((*reqs)[1]["wire"] == "anthropic");
  CHECK((*reqs)[1]["body"]["model"] == "small-model");
  CHECK((*reqs)[1]["body"].dump().find(long_run) != std::string::npos);
  // The main model then gets the summary instead of the long result, before and after the
  // restart.
  for (int i : {2, 3}) {
    INFO(i << ": " << (*reqs)[i].dump().substr(0, 3000));
    CHECK((*reqs)[i]["outcome"] != "refused");
    const std::string messages = (*reqs)[i]["body"]["messages"].dump();
    CHECK(messages.find("SUMMARY-7Q") != std::string::npos);
    CHECK(messages.find(long_run) == std::string::npos);
  }
  CHECK((*reqs)[3]["body"]["messages"].dump().find("and now?") != std::string::npos);
}

TEST_CASE("Agents: a tool result's image goes to a vision model as an image, else as a note",
          "[agent][agents][integration]") {
  const std::string wire = GENERATE(std::string("openai"), std::string("anthropic"));
  const bool vision = GENERATE(true, false);
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  // A 1x1 PNG.
  auto png = base64_decode(
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJg"
      "gg==");
  REQUIRE(png.ok());
  test::write_file(s.dir / "dot.png", *png);
  json script = json::array();
  script.push_back(
      {{"wire", wire},
       {"tool_calls",
        {{{"id", "c1"}, {"name", "read_file"}, {"arguments", {{"path", "dot.png"}}}}}}});
  script.push_back({{"wire", wire}, {"text", "a dot"}});
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = config_for(s, gw, wire_of(wire));
  config.agents.main.vision = vision;
  TurnOutcome t = run_one_turn(s, config, "look at dot.png");
  REQUIRE(t.sent.status() == ok_status());
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  CHECK((*reqs)[1]["outcome"] != "refused");
  const std::string body = (*reqs)[1]["body"]["messages"].dump();
  const bool has_image = wire == "openai"
                             ? body.find("data:image/png;base64,iVBORw0KGgo") != std::string::npos
                             : body.find("\"type\":\"image\"") != std::string::npos;
  CHECK(has_image == vision);
  CHECK((body.find("image omitted") != std::string::npos) == !vision);
}

}  // namespace cb::agent

namespace cb::agent {
namespace {

ItemRow item_row(int64_t seq, std::string turn, std::string role, std::string kind, json payload) {
  ItemRow i;
  i.agent_id = "ag_1";
  i.seq = seq;
  i.turn_id = std::move(turn);
  i.role = std::move(role);
  i.kind = std::move(kind);
  i.payload = payload.dump();
  i.at_ms = 1000 + seq;
  i.event_id = 100 + seq;
  return i;
}

json call_payload(const std::string& id) {
  return {{"id", id}, {"name", "list_dir"}, {"arguments", "{}"}};
}

json result_payload(const std::string& id, const std::string& text) {
  return {{"id", id},
          {"name", "list_dir"},
          {"content", json::array({{{"type", "text"}, {"text", text}}})},
          {"is_error", false}};
}

// A transcript with what happens to one: turns of text, tool calls and results, an error, an
// approval, a call a cancelled turn never answered, and two compactions.
std::vector<ItemRow> eventful_transcript() {
  std::vector<ItemRow> items;
  auto add = [&items](std::string turn, std::string role, std::string kind, json payload) {
    items.push_back(item_row(static_cast<int64_t>(items.size()) + 1, std::move(turn),
                             std::move(role), std::move(kind), std::move(payload)));
  };
  add("tu_1", "user", "text", {{"text", "first"}});
  add("tu_1", "assistant", "tool_call", call_payload("c1"));
  add("tu_1", "tool", "tool_result", result_payload("c1", "a b c"));
  add("tu_1", "assistant", "text", {{"text", "done one"}});
  add("tu_2", "user", "text", {{"text", "second"}});
  add("tu_2", "assistant", "text", {{"text", "thinking"}});
  add("tu_2", "assistant", "tool_call", call_payload("c2"));
  add("tu_2", "assistant", "tool_call", call_payload("c3"));
  add("tu_2", "tool", "tool_result", result_payload("c2", "x"));
  add("tu_2", "system", "error", {{"message", "cancelled by the user"}});
  add("tu_3", "user", "text", {{"text", "third"}});
  add("tu_3", "system", "summary", {{"text", "S1"}, {"through_seq", 4}, {"model", "m"}});
  add("tu_3", "assistant", "tool_call", call_payload("c4"));
  add("tu_3", "system", "approval", {{"approval_id", "ap_1"}, {"state", "pending"}});
  add("tu_3", "tool", "tool_result", result_payload("c4", "y"));
  add("tu_3", "assistant", "text", {{"text", "done three"}});
  add("tu_4", "user", "text", {{"text", "fourth"}});
  add("tu_4", "system", "summary", {{"text", "S2"}, {"through_seq", 16}, {"model", "m"}});
  add("tu_4", "assistant", "tool_call", call_payload("c5"));
  add("tu_4", "tool", "tool_result", result_payload("c5", "z"));
  add("tu_4", "assistant", "text", {{"text", "done four"}});
  add("tu_5", "user", "text", {{"text", "fifth"}});
  return items;
}

}  // namespace

TEST_CASE("TranscriptConversation: items added one by one give what a rebuild from all gives",
          "[agent][agents][unit]") {
  const std::vector<ItemRow> items = eventful_transcript();
  TranscriptConversation kept;
  for (size_t n = 1; n <= items.size(); ++n) {
    INFO("after item " << n << " (" << items[n - 1].kind << ")");
    REQUIRE(kept.add(items[n - 1]));
    std::vector<ItemRow> prefix(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n));
    const std::vector<model::Message> rebuilt =
        TranscriptConversation::from_items(prefix).assemble();
    CHECK(kept.conversation() == rebuilt);
    CHECK(TranscriptConversation::from_items(prefix).conversation() == rebuilt);
    CHECK(kept.last_seq() == items[n - 1].seq);
    CHECK(kept.last_event_id() == items[n - 1].event_id);
    CHECK(kept.last_turn_id() == items[n - 1].turn_id);
  }
  // The second summary applies on top: only what came after through_seq 16, under "S2".
  const std::vector<model::Message> now = kept.conversation();
  REQUIRE(!now.empty());
  CHECK(now.front().text().find("S2") != std::string::npos);
  CHECK(now.front().text().find("S1") == std::string::npos);
  CHECK(now.back().text() == "fifth");
}

TEST_CASE("TranscriptConversation: an item that does not follow on is refused, nothing changed",
          "[agent][agents][unit]") {
  const std::vector<ItemRow> items = eventful_transcript();
  TranscriptConversation kept =
      TranscriptConversation::from_items(std::span<const ItemRow>(items.data(), 5));
  const std::vector<model::Message> before = kept.conversation();
  SECTION("a gap in seq") { CHECK_FALSE(kept.add(items[6])); }
  SECTION("an item already added") { CHECK_FALSE(kept.add(items[4])); }
  SECTION("a summary that reaches back before an earlier summary's through_seq") {
    TranscriptConversation summarized = TranscriptConversation::from_items(
        std::span<const ItemRow>(items.data(), 12));  // through_seq 4
    const std::vector<model::Message> at12 = summarized.conversation();
    CHECK_FALSE(summarized.add(
        item_row(13, "tu_3", "system", "summary", {{"text", "S0"}, {"through_seq", 2}})));
    CHECK(summarized.conversation() == at12);
    CHECK(summarized.last_seq() == 12);
  }
  CHECK(kept.conversation() == before);
  CHECK(kept.last_seq() == 5);
}

namespace {

int64_t tokens_of(std::span<const model::Message> messages, const model::ModelInfo& m) {
  int64_t n = 0;
  for (const model::Message& msg : messages) n += model::estimate_tokens(msg, m);
  return n;
}

std::vector<model::Message> rebuilt_from(const std::vector<ItemRow>& items, size_t n) {
  return TranscriptConversation::from_items(
             std::vector<ItemRow>(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n)))
      .assemble();
}

}  // namespace

TEST_CASE(
    "TranscriptConversation: messages lent to a turn and given back are what a rebuild gives, "
    "whatever the items added meanwhile and after",
    "[agent][agents][unit]") {
  const std::vector<ItemRow> items = eventful_transcript();
  model::ModelInfo m;
  model::ModelInfo vision = m;
  vision.vision = true;
  for (size_t a = 1; a < items.size(); ++a) {
    for (size_t b = a; b <= items.size(); ++b) {
      for (bool resumed : {false, true}) {
        INFO("kept " << a << " items, " << b - a << " added while lent, resumed " << resumed);
        TranscriptConversation kept =
            TranscriptConversation::from_items(std::span<const ItemRow>(items.data(), a));
        TranscriptConversation::Lent lent = kept.lend(m);
        REQUIRE(kept.lent());
        CHECK(lent.messages == rebuilt_from(items, a));
        CHECK(lent.unchanged == 0);
        // The turn's own copies of its steps (an empty text part the transcript leaves out;
        // a resumed turn changes its last message), and its items committed meanwhile.
        std::vector<model::Message> turn = lent.messages;
        size_t intact = turn.size();
        if (resumed && !turn.empty()) {
          turn.back().parts.push_back(model::Part::text_part("changed by the turn"));
          intact = turn.size() - 1;
        }
        turn.push_back(model::Message::assistant({model::Part::text_part("")}));
        turn.push_back(model::Message::user({model::Part::text_part("in-turn result")}));
        turn.push_back(model::Message::assistant({model::Part::text_part("final")}));
        for (size_t i = a; i < b; ++i) REQUIRE(kept.add(items[i]));
        const size_t sent = turn.size() - 1;  // the last call sent all but its own answer
        kept.give_back(turn, intact, sent,
                       tokens_of(std::span<const model::Message>(turn.data(), sent), m), m);
        REQUIRE_FALSE(kept.lent());
        CHECK(kept.conversation() == rebuilt_from(items, b));
        // The items of later turns, added as usual.
        for (size_t i = b; i < items.size(); ++i) {
          REQUIRE(kept.add(items[i]));
          CHECK(kept.conversation() == rebuilt_from(items, i + 1));
        }
        // The next turn: what it need not look at again went out in the last call, unchanged,
        // and its estimate is theirs (for another model too).
        TranscriptConversation::Lent next = kept.lend(b == items.size() ? m : vision);
        const model::ModelInfo& asked = b == items.size() ? m : vision;
        CHECK(next.messages == rebuilt_from(items, items.size()));
        REQUIRE(next.unchanged <= next.messages.size());
        REQUIRE(next.unchanged <= sent);
        for (size_t i = 0; i < next.unchanged; ++i) CHECK(next.messages[i] == turn[i]);
        CHECK(next.unchanged_tokens ==
              tokens_of(std::span<const model::Message>(next.messages.data(), next.unchanged),
                        asked));
        bool summary_later = false;
        for (size_t i = a; i < items.size(); ++i) summary_later |= items[i].kind == "summary";
        if (!resumed && b == a && !summary_later) {
          // Nothing happened meanwhile: all the lent messages but the last are still those sent.
          CHECK(next.unchanged + 1 >= lent.messages.size());
        }
      }
    }
  }
}

TEST_CASE("TranscriptConversation: a turn that does not give the messages back leaves them lent",
          "[agent][agents][unit]") {
  const std::vector<ItemRow> items = eventful_transcript();
  TranscriptConversation kept =
      TranscriptConversation::from_items(std::span<const ItemRow>(items.data(), 5));
  TranscriptConversation::Lent lent = kept.lend(model::ModelInfo());
  REQUIRE(kept.add(items[5]));
  CHECK(kept.lent());
  CHECK(kept.last_seq() == 6);
  // A later give_back() after a rebuild (what the service does: from_items()) is a no-op.
  kept = TranscriptConversation::from_items(std::span<const ItemRow>(items.data(), 6));
  kept.give_back(lent.messages, 0, 0, 0, model::ModelInfo());
  CHECK(kept.conversation() == rebuilt_from(items, 6));
}

TEST_CASE(
    "Agents: the conversation kept in memory: a turn after a compaction sees the compacted "
    "history, two agents do not mix, and a restarted agent sends the same history",
    "[agent][agents][compaction][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = compaction_script_start();                           // agent A's first turn
  script.push_back({{"wire", "openai"}, {"text", "B's answer"}});    // B
  script.push_back({{"wire", "openai"}, {"text", "next answer"}});   // A, turn 2
  script.push_back({{"wire", "openai"}, {"text", "third answer"}});  // A, after a restart
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = compaction_config(s, gw);
  std::string a_id;
  std::string b_id;
  std::vector<Result<v1::SendAccepted>> sent;
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    auto b = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    if (!a.ok() || !b.ok()) co_return;
    a_id = a->id();
    b_id = b->id();
    sent.push_back(co_await send_and_wait(channel, s.credential(), a_id, "print many a"));
    sent.push_back(co_await send_and_wait(channel, s.credential(), b_id, "B-PROMPT"));
    sent.push_back(co_await send_and_wait(channel, s.credential(), a_id, "and now?"));
    channel->close();
  });
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    sent.push_back(co_await send_and_wait(channel, s.credential(), a_id, "third?"));
    channel->close();
  });
  REQUIRE(sent.size() == 4);
  for (const auto& r : sent) REQUIRE(r.status() == ok_status());
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 6);
  for (const json& r : *reqs) CHECK(r["outcome"] != "refused");
  const std::string long_run(200, 'a');
  auto messages_of = [&](size_t i) { return (*reqs)[i]["body"]["messages"]; };
  // B sees only its own prompt.
  const std::string b_messages = messages_of(3).dump();
  CHECK(b_messages.find("B-PROMPT") != std::string::npos);
  CHECK(b_messages.find("print many a") == std::string::npos);
  CHECK(b_messages.find("SUMMARY-7Q") == std::string::npos);
  // A's next turn in the same process: the compacted history, not the long result, not B's.
  const std::string a2 = messages_of(4).dump();
  CHECK(a2.find("SUMMARY-7Q") != std::string::npos);
  CHECK(a2.find(long_run) == std::string::npos);
  CHECK(a2.find("and now?") != std::string::npos);
  CHECK(a2.find("B-PROMPT") == std::string::npos);
  // A new process rebuilds A's conversation from agent.db: the history it sends begins with
  // exactly what the kept conversation sent, then the answer and the new prompt.
  const json kept_messages = messages_of(4);
  const json rebuilt_messages = messages_of(5);
  REQUIRE(rebuilt_messages.size() == kept_messages.size() + 2);
  for (size_t i = 0; i < kept_messages.size(); ++i) {
    INFO(i);
    CHECK(rebuilt_messages[i] == kept_messages[i]);
  }
  CHECK(rebuilt_messages.dump().find("third?") != std::string::npos);
}

TEST_CASE("Agents: an agent.db put in place by a restore is read again by the next turn",
          "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({{{"wire", "openai"}, {"text", "alpha answer"}},
                                     {{"wire", "openai"}, {"text", "gamma answer"}}}))
              .ok());
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  const std::filesystem::path saved_dir = s.dir / "saved";
  std::filesystem::create_directories(saved_dir);
  Result<v1::SendAccepted> first = internal_error("not run");
  Result<v1::SendAccepted> second = internal_error("not run");
  Status restored = internal_error("not run");
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    if (!a.ok()) co_return;
    const std::string id = a->id();
    first = co_await send_and_wait(channel, s.credential(), id, "ALPHA-PROMPT");
    {
      // Another agent.db holding the same agent with another history (a save's copy).
      auto saved = open_agent_db(saved_dir);
      if (!saved.ok()) co_return;
      restored = co_await (*saved)->run([&id](db::Database& d) -> Status {
        auto made = create_agent(d, id, "main", "test-model", "", 1000, "auto");
        if (!made.ok()) return made.status();
        auto t = start_turn(d, id, "tu_saved", "", R"({"text":"BETA-PROMPT"})", 1000);
        if (!t.ok()) return t.status();
        auto answer =
            append_item(d, id, "tu_saved", "assistant", "text", R"({"text":"beta answer"})", 1001);
        if (!answer.ok()) return answer.status();
        return end_turn(d, "tu_saved", "done", "", 1002);
      });
    }
    if (!restored.ok()) co_return;
    // What a whole restore does to the live database (state_service.cc, restore_agent_db()).
    restored = db::backup_database(saved_dir / kAgentDbFile, config.data_dir / kAgentDbFile);
    if (!restored.ok()) co_return;
    second = co_await send_and_wait(channel, s.credential(), id, "GAMMA-PROMPT");
    channel->close();
  });
  REQUIRE(first.status() == ok_status());
  REQUIRE(restored == ok_status());
  REQUIRE(second.status() == ok_status());
  auto reqs = gw.requests();
  REQUIRE(reqs.ok());
  REQUIRE(reqs->size() == 2);
  const std::string messages = (*reqs)[1]["body"]["messages"].dump();
  CHECK(messages.find("BETA-PROMPT") != std::string::npos);
  CHECK(messages.find("beta answer") != std::string::npos);
  CHECK(messages.find("GAMMA-PROMPT") != std::string::npos);
  CHECK(messages.find("ALPHA-PROMPT") == std::string::npos);
  CHECK(messages.find("alpha answer") == std::string::npos);
}

namespace {

// The detail column of EXPLAIN QUERY PLAN for |sql|, one line per step.
std::string query_plan(db::Database& d, const std::string& sql) {
  auto st = d.prepare("EXPLAIN QUERY PLAN " + sql);
  if (!st.ok()) return "prepare failed: " + st.status().to_string();
  std::string out;
  while (true) {
    auto row = st->step();
    if (!row.ok() || !*row) break;
    out += std::string(st->column_text(3)) + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE(
    "agent.db: migration 4 keeps an old database's agents, items and event offsets, and new "
    "events follow on",
    "[agent][agents][unit]") {
  test::TempDir dir;
  const auto old_migrations = agent_migrations().first(3);
  REQUIRE(old_migrations.back().version == 3);
  std::vector<EventRow> before;
  std::vector<ItemRow> items_before;
  {
    auto worker = db::Worker::start(dir.path() / kAgentDbFile, old_migrations);
    REQUIRE(worker.status() == ok_status());
    Status written = internal_error("not run");
    cb::test::run_sync([&]() -> asio::awaitable<void> {
      written = co_await (*worker)->run([&](db::Database& d) -> Status {
        for (const char* id : {"ag_1", "ag_2"}) {
          auto a = create_agent(d, id, "main", "m", "", 1000, "ask");
          if (!a.ok()) return a.status();
        }
        auto t = start_turn(d, "ag_1", "tu_1", "n1", R"({"text":"hello"})", 1000);
        if (!t.ok()) return t.status();
        auto call = append_item(d, "ag_1", "tu_1", "assistant", "tool_call",
                                call_payload("c1").dump(), 1001);
        if (!call.ok()) return call.status();
        auto asked = create_approval(d, approval_of_c1("list_dir", "{}", 1002));
        if (!asked.ok()) return asked.status();
        auto t2 = start_turn(d, "ag_2", "tu_2", "", R"({"text":"other"})", 1003);
        if (!t2.ok()) return t2.status();
        RETURN_IF_ERROR(end_turn(d, "tu_1", "done", "", 1004));
        auto ev = events_after(d, 0, 1000);
        if (!ev.ok()) return ev.status();
        before = std::move(*ev);
        auto tr = transcript_after(d, "ag_1", 0, 1000);
        if (!tr.ok()) return tr.status();
        items_before = std::move(*tr);
        return ok_status();
      });
    }());
    REQUIRE(written == ok_status());
  }
  REQUIRE(before.size() > 6);
  auto worker = open_agent_db(dir.path());
  REQUIRE(worker.status() == ok_status());
  std::vector<EventRow> after;
  std::vector<ItemRow> items_after;
  std::vector<EventRow> resumed;
  int64_t new_event = 0;
  Result<StartedTurn> deduped = internal_error("not run");
  std::string schema;
  std::map<std::string, std::string> plans;
  int64_t version = 0;
  Status read = internal_error("not run");
  cb::test::run_sync([&]() -> asio::awaitable<void> {
    read = co_await (*worker)->run([&](db::Database& d) -> Status {
      auto ev = events_after(d, 0, 1000);
      if (!ev.ok()) return ev.status();
      after = std::move(*ev);
      auto tr = transcript_after(d, "ag_1", 0, 1000);
      if (!tr.ok()) return tr.status();
      items_after = std::move(*tr);
      // Send's nonce dedupe finds the turn and its first item without items_by_turn.
      deduped = start_turn(d, "ag_1", "tu_new", "n1", R"({"text":"again"})", 2000);
      auto item = append_item(d, "ag_2", "tu_2", "assistant", "text", R"({"text":"hi"})", 2001);
      if (!item.ok()) return item.status();
      new_event = item->event_id;
      auto more = events_after(d, before.back().id, 1000);
      if (!more.ok()) return more.status();
      resumed = std::move(*more);
      auto v = d.prepare("PRAGMA user_version");
      if (!v.ok()) return v.status();
      auto row = v->step();
      if (!row.ok()) return row.status();
      version = v->column_int64(0);
      auto sql = d.prepare(
          "SELECT group_concat(name || ': ' || COALESCE(sql, ''), '\n') FROM sqlite_master");
      if (!sql.ok()) return sql.status();
      auto srow = sql->step();
      if (!srow.ok()) return srow.status();
      schema = std::string(sql->column_text(0));
      plans["transcript"] = query_plan(
          d,
          "SELECT agent_id, seq, turn_id, role, kind, payload, at_ms, event_id FROM items "
          "WHERE agent_id = 'ag_1' AND seq > 0 ORDER BY seq LIMIT 10");
      plans["events"] = query_plan(
          d,
          "SELECT e.id, i.seq FROM events e LEFT JOIN items i ON i.event_id = e.id WHERE "
          "e.id > 0 ORDER BY e.id LIMIT 10");
      plans["next_seq"] =
          query_plan(d, "SELECT COALESCE(MAX(seq), 0) + 1 FROM items WHERE agent_id = 'ag_1'");
      return ok_status();
    });
  }());
  REQUIRE(read == ok_status());
  CHECK(version == 4);
  // Everything as it was: the same offsets, channels and items.
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    INFO(i);
    CHECK(after[i].id == before[i].id);
    CHECK(after[i].channel == before[i].channel);
    CHECK(after[i].agent_id == before[i].agent_id);
    CHECK(after[i].item.has_value() == before[i].item.has_value());
    if (after[i].item && before[i].item) {
      CHECK(after[i].item->seq == before[i].item->seq);
      CHECK(after[i].item->payload == before[i].item->payload);
      CHECK(after[i].item->event_id == before[i].item->event_id);
    }
    CHECK(after[i].agent.has_value() == before[i].agent.has_value());
    CHECK(after[i].approval.has_value() == before[i].approval.has_value());
  }
  REQUIRE(items_after.size() == items_before.size());
  for (size_t i = 0; i < items_before.size(); ++i) {
    CHECK(items_after[i].seq == items_before[i].seq);
    CHECK(items_after[i].event_id == items_before[i].event_id);
    CHECK(items_after[i].kind == items_before[i].kind);
    CHECK(items_after[i].payload == items_before[i].payload);
  }
  REQUIRE(deduped.status() == ok_status());
  CHECK(deduped->existing);
  CHECK(deduped->turn_id == "tu_1");
  CHECK(deduped->seq == 1);
  // A client resuming from the last old offset gets the new event, numbered after it.
  CHECK(new_event == before.back().id + 1);
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0].id == new_event);
  REQUIRE(resumed[0].item.has_value());
  CHECK(resumed[0].item->payload == R"({"text":"hi"})");
  // No AUTOINCREMENT (sqlite_sequence keeps no row for events), no items_by_turn.
  INFO(schema);
  CHECK(schema.find("AUTOINCREMENT") == std::string::npos);
  CHECK(schema.find("items_by_turn") == std::string::npos);
  CHECK(schema.find("events_v4") == std::string::npos);
  // Every query of the loop finds its rows by a key, none scans a table.
  for (const auto& [name, plan] : plans) {
    INFO(name << ": " << plan);
    CHECK(plan.find("SCAN") == std::string::npos);
  }
}

}  // namespace cb::agent

namespace cb::agent {
namespace {

// Reads Session.Events (|channels|, |agent_id|) from the start until |stop| says so.
asio::awaitable<std::vector<v1::Event>> read_until(std::shared_ptr<grpc::Channel> channel,
                                                   std::string credential,
                                                   std::vector<std::string> channels,
                                                   std::string agent_id,
                                                   std::function<bool(const v1::Event&)> stop) {
  v1::Session::Stub stub(std::move(channel));
  v1::EventsRequest req;
  for (const std::string& c : channels) req.add_channels(c);
  req.set_agent_id(agent_id);
  req.set_no_deltas(true);
  std::vector<v1::Event> out;
  auto call = co_await stub.Events(req, call_options_with(one(credential), 30s));
  if (!call.ok()) co_return out;
  while (auto ev = co_await call->read()) {
    out.push_back(*ev);
    if (stop(*ev)) break;
  }
  call->call().cancel();
  co_return out;
}

}  // namespace

TEST_CASE(
    "Session.Events: subscribers to the agents channel or to another agent, left asleep by "
    "transcript commits, still get every event they want",
    "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  json script = json::array();
  script.push_back(shell_call("openai", "c1", "echo one"));
  // A read-only call: its step's record commits while it runs (README.md §Agents, "Writes").
  script.push_back(
      {{"wire", "openai"},
       {"tool_calls", {{{"id", "c2"}, {"name", "list_dir"}, {"arguments", {{"path", "."}}}}}}});
  script.push_back({{"wire", "openai"}, {"text", "A done"}});
  script.push_back({{"wire", "openai"}, {"text", "B done"}});
  REQUIRE(gw.set_script(script).ok());
  AgentConfig config = config_for(s, gw, model::Wire::kOpenAi);
  std::string a_id;
  std::string b_id;
  std::string a_turn;
  std::string b_turn;
  std::vector<v1::Event> agents_only;
  std::vector<v1::Event> only_b;
  std::vector<v1::Event> a_transcript;
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    auto b = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    if (!a.ok() || !b.ok()) co_return;
    a_id = a->id();
    b_id = b->id();
    // Each reader stops at the last event it should see: B's turn ending (agents), A's
    // final text item (A's transcript).
    auto b_ended = [&b_id](const v1::Event& ev) {
      return ev.has_agent() && ev.agent().id() == b_id && ev.agent().has_last_turn() &&
             ev.agent().last_turn().state() == v1::TURN_DONE;
    };
    auto a_final = [](const v1::Event& ev) {
      return ev.has_item() && ev.item().payload_json().find("A done") != std::string::npos;
    };
    // (Asio 1.22's && cannot end in an awaitable<void>: it returns a value.)
    auto drive = [&]() -> asio::awaitable<bool> {
      auto sa = co_await send_and_wait(channel, s.credential(), a_id, "A please");
      if (sa.ok()) a_turn = sa->turn_id();
      auto sb = co_await send_and_wait(channel, s.credential(), b_id, "B please");
      if (sb.ok()) b_turn = sb->turn_id();
      co_return sa.ok() && sb.ok();
    };
    std::vector<std::string> agents_channel;
    agents_channel.push_back(std::string("agents"));
    std::vector<std::string> transcript_channel;
    transcript_channel.push_back(std::string("transcript"));
    std::vector<std::string> all;
    auto [r1, r2, r3, driven] = co_await (
        read_until(channel, s.credential(), agents_channel, std::string(), b_ended) &&
        read_until(channel, s.credential(), all, b_id, b_ended) &&
        read_until(channel, s.credential(), transcript_channel, a_id, a_final) && drive());
    agents_only = std::move(r1);
    only_b = std::move(r2);
    a_transcript = std::move(r3);
    (void)driven;
    channel->close();
  });
  REQUIRE(!a_turn.empty());
  REQUIRE(!b_turn.empty());
  // The agents channel: both agents' creation, each turn running then done, nothing else.
  std::vector<std::string> seen;
  for (const auto& ev : agents_only) {
    CHECK(ev.channel() == "agents");
    if (ev.has_agent() && ev.agent().has_last_turn())
      seen.push_back(ev.agent().last_turn().id() + ":" +
                     v1::TurnState_Name(ev.agent().last_turn().state()));
  }
  CHECK(seen == std::vector<std::string>{a_turn + ":TURN_RUNNING", a_turn + ":TURN_DONE",
                                         b_turn + ":TURN_RUNNING", b_turn + ":TURN_DONE"});
  // Agent B's subscriber: B only, its prompt and answer among them.
  std::vector<std::string> b_items;
  for (const auto& ev : only_b) {
    if (ev.has_agent()) CHECK(ev.agent().id() == b_id);
    if (ev.has_item()) {
      CHECK(ev.item().agent_id() == b_id);
      b_items.push_back(v1::ItemKind_Name(ev.item().kind()));
    }
  }
  CHECK(b_items == std::vector<std::string>{"ITEM_TEXT", "ITEM_TEXT"});
  // Agent A's transcript: every item in order, offsets increasing.
  std::vector<std::string> a_items;
  int64_t last = 0;
  for (const auto& ev : a_transcript) {
    CHECK(ev.channel() == "transcript");
    REQUIRE(ev.has_item());
    CHECK(ev.item().agent_id() == a_id);
    a_items.push_back(v1::ItemKind_Name(ev.item().kind()));
    const int64_t offset = std::stoll(ev.offset_key());
    CHECK(offset > last);
    last = offset;
  }
  CHECK(a_items == std::vector<std::string>{"ITEM_TEXT", "ITEM_TOOL_CALL", "ITEM_TOOL_RESULT",
                                            "ITEM_TOOL_CALL", "ITEM_TOOL_RESULT", "ITEM_TEXT"});
  // The list_dir call's result is the listing, after its call.
  REQUIRE(a_transcript.size() == 6);
  CHECK(a_transcript[3].item().payload_json().find("list_dir") != std::string::npos);
  CHECK(a_transcript[4].item().payload_json().find("\"is_error\":false") != std::string::npos);
  CHECK(a_transcript[3].item().seq() + 1 == a_transcript[4].item().seq());
}

TEST_CASE(
    "Session.Events: a subscriber kept caught up through a turn gets, byte for byte, what a "
    "read of agent.db from the start gives",
    "[agent][agents][integration]") {
  Setup s;
  s.deliver();
  cb::test::FakeGateway gw(s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  // Read-only calls (their records commit while they run) between shell calls (committed
  // first), so events known in memory and events read from agent.db alternate.
  json script = json::array();
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    script.push_back({{"wire", "openai"},
                      {"tool_calls",
                       {{{"id", "r" + n}, {"name", "list_dir"}, {"arguments", {{"path", "."}}}}}}});
    script.push_back(shell_call("openai", "s" + n, "echo " + n));
  }
  script.push_back({{"wire", "openai"}, {"text", "all done"}});
  REQUIRE(gw.set_script(script).ok());
  std::vector<v1::Event> live;
  std::vector<v1::Event> replayed;
  bool sent = false;
  with_agent(config_for(s, gw, model::Wire::kOpenAi), [&](Agent& agent) -> asio::awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    auto a = co_await create_agent_with(channel, s.credential(), v1::APPROVAL_AUTO);
    if (!a.ok()) co_return;
    const std::string id = a->id();
    auto turn_done = [](const v1::Event& ev) {
      return ev.has_agent() && ev.agent().has_last_turn() &&
             ev.agent().last_turn().state() == v1::TURN_DONE;
    };
    auto drive = [&]() -> asio::awaitable<bool> {
      auto r = co_await send_and_wait(channel, s.credential(), id, "go");
      co_return r.ok();
    };
    std::vector<std::string> all;
    auto [events, driven] =
        co_await (read_until(channel, s.credential(), all, std::string(), turn_done) && drive());
    live = std::move(events);
    sent = driven;
    // A new subscriber from offset 0 is far behind what is kept in memory: agent.db.
    replayed = co_await read_until(channel, s.credential(), all, std::string(), turn_done);
    channel->close();
  });
  REQUIRE(sent);
  // created, running, the prompt, 3 x (list_dir call and result, shell call and result), the
  // answer, done.
  REQUIRE(replayed.size() == 17);
  std::vector<std::string> want;
  for (const auto& ev : replayed) want.push_back(ev.SerializeAsString());
  std::vector<std::string> got;
  for (const auto& ev : live) got.push_back(ev.SerializeAsString());
  CHECK(got == want);
}

}  // namespace cb::agent
