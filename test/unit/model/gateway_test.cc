// model::Client against test/support/fake_gateway.py, a fake of the external paid model
// gateway that speaks both wires (the only kind of fake the project allows). Each case starts
// its own fake on 127.0.0.1 port 0 (or a unix socket) and stops it at the end.

#include "crypto/hash.h"
#include "model/client.h"
#include "model/wire.h"
#include "support/fake_gateway.h"
#include "support/run_sync.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

namespace cb::model {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct Outcome {
  Result<Response> response = internal_error("not run");
  std::vector<Delta> deltas;
  std::vector<std::chrono::milliseconds> waits;  // one per retry

  std::string text() const {
    std::string t;
    for (const Delta& d : deltas)
      if (d.kind == Delta::Kind::kText) t += d.text;
    return t;
  }
};

// Runs one call on a fresh io_context, collecting deltas and retry waits.
Outcome run_call(const Endpoint& endpoint, const ModelInfo& model, const Request& request,
                 CallOptions options = {}) {
  Outcome out;
  asio::io_context io;
  auto task = [&]() -> asio::awaitable<void> {
    co_await asio::this_coro::throw_if_cancelled(false);
    Client client(io.get_executor(), endpoint);
    options.on_delta = [&](const Delta& d) { out.deltas.push_back(d); };
    options.on_retry = [&](int, const Status&, std::chrono::milliseconds wait) {
      out.waits.push_back(wait);
    };
    out.response = co_await client.call(model, request, options);
  };
  test::run_sync(io, task());
  return out;
}

Endpoint endpoint_of(const test::FakeGateway& gw) {
  auto ep = parse_endpoint(gw.url());
  REQUIRE(ep.ok());
  return *ep;
}

ModelInfo model_for(Wire wire, bool vision = true) {
  ModelInfo m;
  m.name = wire == Wire::kOpenAi ? "gpt-4o" : "claude-sonnet-4-5";
  m.wire = wire;
  m.vision = vision;
  return m;
}

Request hello() {
  Request r;
  r.system = "You are the agent in the user's box.";
  r.messages.push_back(Message::user({Part::text_part("Say hello")}));
  return r;
}

json turn(Wire wire, json fields) {
  fields["wire"] = std::string(wire_name(wire));
  return fields;
}

json requests_of(test::FakeGateway& gw) {
  auto r = gw.requests();
  REQUIRE(r.ok());
  return *r;
}

// The fake's records once each has its outcome: the fake writes it after the response's last
// byte, so a client can read the answer before it is recorded (polls up to 5 s).
json settled_requests_of(test::FakeGateway& gw) {
  json reqs;
  for (int i = 0; i < 500; ++i) {
    reqs = requests_of(gw);
    bool settled = true;
    for (const json& r : reqs) settled = settled && !r["outcome"].is_null();
    if (settled) break;
    std::this_thread::sleep_for(10ms);
  }
  return reqs;
}

CallOptions fast_retries(int attempts = 4) {
  CallOptions o;
  o.retry.max_attempts = attempts;
  o.retry.initial_backoff = 5ms;
  o.retry.max_backoff = 20ms;
  return o;
}

TEST_CASE("Client: a text turn streams deltas and assembles the answer", "[model][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  json script = json::array({turn(wire, {{"chunks", {"Hel", "lo ", "wörld"}},
                                         {"usage",
                                          {{"input_tokens", 30},
                                           {"output_tokens", 3},
                                           {"cache_read_tokens", 8},
                                           {"cache_write_tokens", 4}}}})});
  REQUIRE(gw.set_script(script).ok());

  Outcome o = run_call(endpoint_of(gw), model_for(wire), hello());
  INFO(o.response.status().to_string());
  REQUIRE(o.response.ok());
  CHECK(o.response->message.text() == "Hello wörld");
  CHECK(o.response->message.role == Role::kAssistant);
  CHECK(o.response->stop_reason == StopReason::kEndTurn);
  // OpenAI reports no cache writes.
  Usage want_usage{30, 3, 8, wire == Wire::kOpenAi ? 0 : 4};
  CHECK(o.response->usage == want_usage);
  CHECK(o.response->attempts == 1);
  CHECK(o.response->model == model_for(wire).name);
  REQUIRE(o.deltas.size() == 3);
  CHECK(o.deltas[0].text == "Hel");
  CHECK(o.deltas[2].text == "wörld");

  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 1);
  const json& req = reqs[0];
  CHECK(req["path"] == std::string(wire_path(wire)));
  CHECK(req["body"]["model"] == model_for(wire).name);
  CHECK(req["body"]["stream"] == true);
  CHECK(req["headers"]["accept"] == "text/event-stream");
  // The box has no key: nothing that could carry one is sent.
  CHECK_FALSE(req["headers"].contains("authorization"));
  CHECK_FALSE(req["headers"].contains("x-api-key"));
  if (wire == Wire::kAnthropic) {
    CHECK(req["headers"]["anthropic-version"] == "2023-06-01");
    CHECK(req["body"]["system"] == "You are the agent in the user's box.");
  } else {
    CHECK(req["body"]["stream_options"]["include_usage"] == true);
    CHECK(req["body"]["messages"][0]["role"] == "system");
  }

  SECTION("and the same turn without streaming") {
    REQUIRE(gw.set_script(script).ok());
    CallOptions options;
    options.stream = false;
    Outcome plain = run_call(endpoint_of(gw), model_for(wire), hello(), options);
    REQUIRE(plain.response.ok());
    CHECK(plain.response->message.text() == "Hello wörld");
    CHECK(plain.response->usage == want_usage);
    json r2 = requests_of(gw);
    CHECK_FALSE(r2[0]["body"].contains("stream"));
    CHECK(r2[0]["headers"]["accept"] == "application/json");
  }
}

TEST_CASE("Client: tool call, result, final answer on the model's native wire",
          "[model][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({turn(wire, {{"text", "Checking."},
                                                 {"tool_calls",
                                                  {{{"id", "call_7"},
                                                    {"name", "shell"},
                                                    {"arguments", {{"cmd", "ls /workspace"}}}}}}}),
                                     turn(wire, {{"text", "There are 2 files."}})}))
              .ok());
  Request request;
  request.system = "You work in the box.";
  request.tools.push_back(ToolDef{"shell", "Runs a shell command",
                                  json{{"type", "object"},
                                       {"properties", {{"cmd", {{"type", "string"}}}}},
                                       {"required", {"cmd"}}},
                                  json()});
  request.messages.push_back(Message::user({Part::text_part("What is in /workspace?")}));
  Endpoint ep = endpoint_of(gw);

  Outcome first = run_call(ep, model_for(wire), request);
  INFO(first.response.status().to_string());
  REQUIRE(first.response.ok());
  CHECK(first.response->stop_reason == StopReason::kToolUse);
  auto calls = first.response->message.tool_calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]->id == "call_7");
  CHECK(calls[0]->name == "shell");
  CHECK(json::parse(calls[0]->arguments) == json{{"cmd", "ls /workspace"}});
  CHECK(first.response->message.text() == "Checking.");
  // The tool call's start came as a delta, and its argument fragments add up to the whole.
  std::string args;
  bool started = false;
  for (const Delta& d : first.deltas) {
    if (d.kind == Delta::Kind::kToolCallStart) {
      started = true;
      CHECK(d.index == 0);
      CHECK(d.id == "call_7");
      CHECK(d.name == "shell");
    }
    if (d.kind == Delta::Kind::kToolCallArguments) args += d.text;
  }
  CHECK(started);
  CHECK(args == calls[0]->arguments);

  request.messages.push_back(first.response->message);
  request.messages.push_back(
      Message::user({Part::tool_result_part("call_7", {Part::text_part("a.txt\nb.txt")})}));
  Outcome second = run_call(ep, model_for(wire), request);
  INFO(second.response.status().to_string());
  REQUIRE(second.response.ok());  // the fake refuses (400) a result that answers no call
  CHECK(second.response->message.text() == "There are 2 files.");
  CHECK(second.response->stop_reason == StopReason::kEndTurn);

  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 2);
  const json& body = reqs[1]["body"];
  if (wire == Wire::kOpenAi) {
    CHECK(body["tools"][0]["function"]["name"] == "shell");
    CHECK(body["messages"][2]["tool_calls"][0]["id"] == "call_7");
    CHECK(body["messages"][3] ==
          json{{"role", "tool"}, {"tool_call_id", "call_7"}, {"content", "a.txt\nb.txt"}});
  } else {
    CHECK(body["tools"][0]["name"] == "shell");
    CHECK(body["messages"][1]["content"][1]["type"] == "tool_use");
    CHECK(body["messages"][1]["content"][1]["input"] == json{{"cmd", "ls /workspace"}});
    CHECK(body["messages"][2]["content"][0] ==
          json{{"type", "tool_result"},
               {"tool_use_id", "call_7"},
               {"content", {{{"type", "text"}, {"text", "a.txt\nb.txt"}}}}});
  }
}

TEST_CASE("Client: an image in a tool result reaches a vision model and not a text-only one",
          "[model][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  bool vision = GENERATE(true, false);
  INFO(wire_name(wire) << (vision ? " vision" : " text-only"));
  const std::string png =
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+"
      "M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({turn(wire, {{"text", "A one-pixel image."}})})).ok());
  Request request;
  request.messages.push_back(Message::user({Part::text_part("Take a screenshot")}));
  request.messages.push_back(
      Message::assistant({Part::tool_call_part("call_s", "screenshot", "{}")}));
  request.messages.push_back(Message::user({Part::tool_result_part(
      "call_s", {Part::text_part("1x1"), Part::image_part("image/png", png)})}));

  Outcome o = run_call(endpoint_of(gw), model_for(wire, vision), request);
  INFO(o.response.status().to_string());
  REQUIRE(o.response.ok());
  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 1);
  const json& body = reqs[0]["body"];
  std::string dumped = body.dump();
  if (!vision) {
    CHECK(dumped.find(png) == std::string::npos);
    CHECK(dumped.find("[image omitted: image/png, 70 bytes; this model cannot see images]") !=
          std::string::npos);
  } else if (wire == Wire::kOpenAi) {
    const json& follow = body["messages"][3];
    CHECK(follow["role"] == "user");
    CHECK(follow["content"][1]["image_url"]["url"] == "data:image/png;base64," + png);
  } else {
    CHECK(body["messages"][2]["content"][0]["content"][1] ==
          json{{"type", "image"},
               {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", png}}}});
  }
}

TEST_CASE("Client: gateway errors end the call with a Status naming them", "[model][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  Endpoint ep = endpoint_of(gw);

  SECTION("401 is not retried") {
    REQUIRE(gw.set_script(json::array({turn(wire, {{"status", 401},
                                                   {"error", {{"message", "invalid x-api-key"}}}}),
                                       turn(wire, {{"text", "never"}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kUnauthenticated);
    std::string msg(o.response.status().message());
    CHECK(msg.find("401") != std::string::npos);
    CHECK(msg.find("invalid x-api-key") != std::string::npos);
    CHECK(requests_of(gw).size() == 1);
  }
  SECTION("403 is not retried") {
    REQUIRE(gw.set_script(json::array({turn(
                              wire, {{"status", 403}, {"error", {{"message", "over budget"}}}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kPermissionDenied);
    CHECK(std::string(o.response.status().message()).find("over budget") != std::string::npos);
    CHECK(requests_of(gw).size() == 1);
  }
  SECTION("429 without retries left") {
    REQUIRE(gw.set_script(json::array({turn(
                              wire, {{"status", 429}, {"error", {{"message", "slow down"}}}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries(1));
    CHECK(o.response.status().code() == Code::kResourceExhausted);
    CHECK(std::string(o.response.status().message()).find("slow down") != std::string::npos);
  }
  SECTION("500 on every attempt") {
    REQUIRE(
        gw.set_script(json::array({turn(wire, {{"status", 500}}), turn(wire, {{"status", 500}})}))
            .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries(2));
    CHECK(o.response.status().code() == Code::kUnavailable);
    CHECK(
        o.response.status().message().starts_with("after 2 attempts: model gateway answered 500"));
    CHECK(o.waits.size() == 1);
    CHECK(requests_of(gw).size() == 2);
  }
  SECTION("an error event inside a 200 stream, after text was delivered, is not retried") {
    REQUIRE(gw.set_script(json::array({turn(wire, {{"chunks", {"Partial ", "answer ", "here"}},
                                                   {"stream_error",
                                                    {{"type", "overloaded_error"},
                                                     {"message", "Overloaded"},
                                                     {"after", wire == Wire::kOpenAi ? 3 : 5}}}}),
                                       turn(wire, {{"text", "never"}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kUnavailable);
    CHECK(o.response.status().message() == "model stream error (overloaded_error): Overloaded");
    CHECK(o.text() == "Partial answer ");
    CHECK(requests_of(gw).size() == 1);
  }
  SECTION("a stream cut mid-way, after text was delivered") {
    REQUIRE(gw.set_script(json::array({turn(wire, {{"chunks", {"This ", "will ", "be cut"}},
                                                   {"cut_after", wire == Wire::kOpenAi ? 3 : 5}}),
                                       turn(wire, {{"text", "never"}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kUnavailable);
    std::string msg(o.response.status().message());
    CHECK(msg.find(fmt::format("{} stream cut after", wire_name(wire))) != std::string::npos);
    CHECK(o.text() == "This will ");
    CHECK(requests_of(gw).size() == 1);
  }
  SECTION("the gateway's own key check: no key is 401, the right key passes") {
    json script = {{"key", "sk-right"}, {"turns", json::array({turn(wire, {{"text", "hi"}})})}};
    REQUIRE(gw.set_script(script).ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kUnauthenticated);
    REQUIRE(gw.set_script(script).ok());
    Endpoint keyed = ep;
    keyed.api_key = "sk-right";
    Outcome k = run_call(keyed, model_for(wire), hello(), fast_retries());
    REQUIRE(k.response.ok());
    json headers = requests_of(gw)[0]["headers"];
    if (wire == Wire::kOpenAi) {
      CHECK(headers["authorization"] == "Bearer sk-right");
      CHECK_FALSE(headers.contains("x-api-key"));
    } else {
      CHECK(headers["x-api-key"] == "sk-right");
      CHECK_FALSE(headers.contains("authorization"));
    }
  }
  SECTION("nothing listening is kUnavailable after the retries") {
    Endpoint dead = ep;
    dead.port = 1;  // reserved, nothing listens
    Outcome o = run_call(dead, model_for(wire), hello(), fast_retries(2));
    CHECK(o.response.status().code() == Code::kUnavailable);
    CHECK(o.waits.size() == 1);
  }
}

TEST_CASE("Client: retries where safe, and honours Retry-After", "[model][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  Endpoint ep = endpoint_of(gw);

  SECTION("429 with retry-after, then success") {
    REQUIRE(gw.set_script(json::array({turn(wire, {{"status", 429},
                                                   {"headers", {{"retry-after", "1"}}},
                                                   {"error", {{"message", "slow down"}}}}),
                                       turn(wire, {{"text", "ok now"}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    INFO(o.response.status().to_string());
    REQUIRE(o.response.ok());
    CHECK(o.response->message.text() == "ok now");
    CHECK(o.response->attempts == 2);
    REQUIRE(o.waits.size() == 1);
    CHECK(o.waits[0] == 1000ms);  // the gateway's wait, not our backoff
    CHECK(requests_of(gw).size() == 2);
  }
  SECTION("a retry-after beyond the policy's limit is not waited for") {
    REQUIRE(gw.set_script(json::array({turn(
                              wire, {{"status", 429}, {"headers", {{"retry-after", "3600"}}}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kResourceExhausted);
    CHECK(o.response.status().message().starts_with("gateway asks to retry after 3600 s"));
    CHECK(o.waits.empty());
  }
  SECTION("503 then success, with backoff") {
    REQUIRE(gw.set_script(
                  json::array({turn(wire, {{"status", 503}}), turn(wire, {{"text", "recovered"}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    REQUIRE(o.response.ok());
    CHECK(o.response->attempts == 2);
    REQUIRE(o.waits.size() == 1);
    CHECK(o.waits[0] <= 5ms);
  }
  SECTION("a cut before any delta is retried") {
    REQUIRE(gw.set_script(json::array({turn(wire, {{"text", "lost"}, {"cut_after", 1}}),
                                       turn(wire, {{"text", "second try"}})}))
                .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    REQUIRE(o.response.ok());
    CHECK(o.response->message.text() == "second try");
    CHECK(o.text() == "second try");
    CHECK(o.response->attempts == 2);
  }
  SECTION("400 is never retried") {
    REQUIRE(
        gw.set_script(json::array({turn(wire, {{"status", 400}}), turn(wire, {{"text", "never"}})}))
            .ok());
    Outcome o = run_call(ep, model_for(wire), hello(), fast_retries());
    CHECK(o.response.status().code() == Code::kInvalidArgument);
    CHECK(requests_of(gw).size() == 1);
  }
}

TEST_CASE("Client: cancelling mid-stream closes the connection the gateway streams on",
          "[model][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  // The fake sends two text pieces, then holds the stream open until the client leaves.
  REQUIRE(gw.set_script(json::array({turn(wire, {{"chunks", {"one ", "two ", "three"}},
                                                 {"hold_after", wire == Wire::kOpenAi ? 3 : 5}})}))
              .ok());
  Endpoint ep = endpoint_of(gw);

  asio::io_context io;
  asio::cancellation_signal cancel;
  Result<Response> result = internal_error("not run");
  std::vector<Delta> deltas;
  auto task = [&]() -> asio::awaitable<void> {
    co_await asio::this_coro::throw_if_cancelled(false);
    Client client(io.get_executor(), ep);
    CallOptions o;
    o.on_delta = [&](const Delta& d) {
      deltas.push_back(d);
      // Cancel from outside the call, as the agent's Cancel RPC would.
      if (deltas.size() == 1)
        asio::post(io, [&] { cancel.emit(asio::cancellation_type::terminal); });
    };
    result = co_await client.call(model_for(wire), hello(), o);
  };
  std::exception_ptr failure;
  asio::co_spawn(io, task(), asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e) {
                   failure = e;
                 }));
  io.run();
  REQUIRE_FALSE(failure);
  CHECK(result.status().code() == Code::kCancelled);
  REQUIRE_FALSE(deltas.empty());
  CHECK(deltas[0].text == "one ");
  // The fake holds the stream until it sees the client close it (or gives up after 30 s).
  CHECK(gw.wait_for(
      [](const json& reqs) { return reqs.size() == 1 && reqs[0]["client_closed"] == true; }));
}

TEST_CASE("Client: reaches the gateway through a unix socket, as the box reaches the door",
          "[model][integration]") {
  test::TempDir dir;
  std::string path = dir.file("model.sock").string();
  test::FakeGateway gw(path);
  REQUIRE(gw.error().empty());
  REQUIRE(gw.set_script(json::array({turn(Wire::kAnthropic, {{"text", "via the door"}})})).ok());
  Outcome o = run_call(endpoint_of(gw), model_for(Wire::kAnthropic), hello());
  INFO(o.response.status().to_string());
  REQUIRE(o.response.ok());
  CHECK(o.response->message.text() == "via the door");
  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 1);
  CHECK_FALSE(reqs[0]["headers"].contains("x-api-key"));
}

TEST_CASE("Client: keeps the connection between calls, and dials again when the door closed it",
          "[model][integration]") {
  test::TempDir dir;
  std::string path = dir.file("model.sock").string();
  test::FakeGateway gw(path);
  REQUIRE(gw.error().empty());
  const Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  REQUIRE(gw.set_script(json::array({turn(wire, {{"text", "one"}}),
                                     turn(wire, {{"text", "two"}, {"close_after", true}}),
                                     turn(wire, {{"text", "three"}}),
                                     turn(wire, {{"text", "four"}, {"stream", false}}),
                                     turn(wire, {{"text", "five"}})}))
              .ok());
  const Endpoint ep = endpoint_of(gw);
  const ModelInfo model = model_for(wire);
  const Request request = hello();
  std::vector<Result<Response>> results;
  bool closed_seen = false;
  asio::io_context io;
  auto task = [&]() -> asio::awaitable<void> {
    co_await asio::this_coro::throw_if_cancelled(false);
    Client client(io.get_executor(), ep);
    for (int i = 0; i < 5; ++i) {
      if (i == 2) {
        // The fake closed the second call's connection after answering it; the client still
        // holds it as idle. Wait until the close happened, so the next send meets it.
        closed_seen = gw.wait_for(
            [](const json& r) { return r.size() >= 2 && r[1].value("conn_closed", false); });
      }
      CallOptions o;
      o.retry.max_attempts = 1;  // the redial is not a retry
      Result<Response> r = co_await client.call(model, request, o);
      results.push_back(std::move(r));
    }
  };
  test::run_sync(io, task());
  REQUIRE(results.size() == 5);
  const char* want[] = {"one", "two", "three", "four", "five"};
  for (size_t i = 0; i < results.size(); ++i) {
    INFO(i << ": " << results[i].status().to_string());
    REQUIRE(results[i].ok());
    CHECK(results[i]->message.text() == want[i]);
    CHECK(results[i]->attempts == 1);
  }
  CHECK(closed_seen);
  json reqs = settled_requests_of(gw);
  REQUIRE(reqs.size() == 5);
  for (const json& r : reqs) CHECK(r["outcome"] == "answered");
  CHECK(reqs[0]["conn"] == reqs[1]["conn"]);  // kept alive
  CHECK(reqs[2]["conn"] != reqs[1]["conn"]);  // the closed one was dialled again
  CHECK(reqs[3]["conn"] == reqs[2]["conn"]);  // a JSON answer keeps it too
  CHECK(reqs[4]["conn"] == reqs[2]["conn"]);
}

TEST_CASE(
    "Client: a body sent from the encoder's pieces is request_body byte for byte on both wires",
    "[model][integration]") {
  test::TempDir dir;
  std::string path = dir.file("model.sock").string();
  test::FakeGateway gw(path);
  REQUIRE(gw.error().empty());
  const Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  // Three calls of a conversation that grows past 64 KiB (sent piece by piece), as the loop
  // makes them: each appends a tool call and its result.
  constexpr int kCalls = 3;
  json script = json::array();
  for (int i = 0; i < kCalls; ++i) script.push_back(turn(wire, {{"text", "ok"}}));
  REQUIRE(gw.set_script(script).ok());
  const Endpoint ep = endpoint_of(gw);
  const ModelInfo model = model_for(wire);
  std::vector<Request> requests;
  std::vector<std::string> want;
  Request request = hello();
  for (int i = 0; i < kCalls; ++i) {
    for (int k = 0; k < 200; ++k) {
      const std::string id = "call_" + std::to_string(i) + "_" + std::to_string(k);
      request.messages.push_back(
          Message::assistant({Part::tool_call_part(id, "ls", "{\"path\":\".\"}")}));
      request.messages.push_back(Message::user({Part::tool_result_part(
          id, {Part::text_part(std::string(300, static_cast<char>('a' + k % 26)))})}));
    }
    requests.push_back(request);
    auto body = request_body(request, model, true);
    REQUIRE(body.ok());
    want.push_back(*body);
  }
  std::vector<Result<Response>> results;
  asio::io_context io;
  auto task = [&]() -> asio::awaitable<void> {
    co_await asio::this_coro::throw_if_cancelled(false);
    Client client(io.get_executor(), ep);
    RequestEncoder encoder;
    size_t unchanged = 0;
    for (const Request& r : requests) {
      CallOptions o;
      o.retry.max_attempts = 1;
      o.encoder = &encoder;
      o.encoder_unchanged = unchanged;
      unchanged = r.messages.size();
      Result<Response> got = co_await client.call(model, r, o);
      results.push_back(std::move(got));
    }
  };
  test::run_sync(io, task());
  REQUIRE(results.size() == kCalls);
  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == kCalls);
  for (int i = 0; i < kCalls; ++i) {
    INFO(i << ": " << results[i].status().to_string());
    REQUIRE(results[i].ok());
    CHECK(results[i]->message.text() == "ok");
    CHECK(want[i].size() > 64 * 1024);
    CHECK(reqs[i]["body_bytes"] == want[i].size());
    const crypto::Sha256Digest digest = crypto::sha256(want[i]);
    std::string hex;
    for (uint8_t b : digest) hex += fmt::format("{:02x}", b);
    CHECK(reqs[i]["body_sha256"] == hex);
  }
  CHECK(reqs[kCalls - 1]["conn"] == reqs[0]["conn"]);  // one kept connection throughout
}

}  // namespace
}  // namespace cb::model
