// Agents and Session.Events against a real in-process agent whose model endpoint is
// test/support/fake_gateway.py on a unix socket (as the api's model door is in a box).

#include "agent_harness.h"
#include "cocoonbox/agent/v1/agents.cbgrpc.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "grpc/client.h"
#include "roles/agent/agent_config.h"
#include "roles/agent/agent_db.h"
#include "roles/agent/agents_store.h"
#include "support/fake_gateway.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <memory>
#include <optional>
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
