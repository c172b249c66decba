// The model door (roles/api/model_door.h): the header rewrite and error shapes as plain
// functions, then a real door on a unix socket in front of test/support/fake_gateway.py (a fake
// of the external paid gateway that checks the key), called by model::Client as the box's
// agent calls it, with api.db in a temporary data dir.

#include "roles/api/model_door.h"

#include "crypto/keys.h"
#include "crypto/random.h"
#include "http/http1_client.h"
#include "model/client.h"
#include "model/wire.h"
#include "roles/api/store/store.h"
#include "support/fake_gateway.h"
#include "support/temp_dir.h"

#include <asio.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace cb::api {
namespace {

using namespace std::chrono_literals;
using model::Wire;
using nlohmann::json;

constexpr std::string_view kKey = "sk-door-test-5d1c8e2f9a7b";
constexpr std::string_view kOtherKey = "sk-other-user-0a9b8c7d";

std::string value_of(const http::Headers& h, std::string_view name) {
  const std::string* v = http::find_header(h, name);
  return v != nullptr ? *v : std::string("<none>");
}

// ---- sans-I/O ----

TEST_CASE("ModelDoor: only the model routes are forwarded", "[api][door][unit]") {
  CHECK(door_route("POST", "/v1/chat/completions") == DoorRoute::kChatCompletions);
  CHECK(door_route("POST", "/v1/messages") == DoorRoute::kMessages);
  CHECK(door_route("POST", "/v1/messages?beta=true") == DoorRoute::kMessages);
  CHECK(door_route("POST", "/v1/messages/count_tokens") == DoorRoute::kCountTokens);
  CHECK(door_route("GET", "/v1/models") == DoorRoute::kModels);
  CHECK(door_route("GET", "/v1/models/claude-x") == DoorRoute::kModels);
  for (auto [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/chat/completions"},
                                                        {"POST", "/v1/models"},
                                                        {"GET", "/v1/models/a/b"},
                                                        {"GET", "/v1/models/"},
                                                        {"POST", "/v1/keys"},
                                                        {"DELETE", "/v1/messages"},
                                                        {"POST", "/api/v1/messages"},
                                                        {"POST", "/v1/messages/batches"},
                                                        {"GET", "/"}}) {
    INFO(method << " " << path);
    CHECK(door_route(method, path) == DoorRoute::kNone);
  }
  http::Headers anthropic{{"anthropic-version", "2023-06-01"}};
  CHECK(door_wire(DoorRoute::kModels, anthropic) == Wire::kAnthropic);
  CHECK(door_wire(DoorRoute::kModels, {}) == Wire::kOpenAi);
  CHECK(door_wire(DoorRoute::kChatCompletions, anthropic) == Wire::kOpenAi);
  CHECK(door_wire(DoorRoute::kCountTokens, {}) == Wire::kAnthropic);
}

TEST_CASE("ModelDoor: the box's credential-like fields are dropped and the key is added",
          "[api][door][unit]") {
  http::Headers from_box{
      {"Content-Type", "application/json"},
      {"accept", "text/event-stream"},
      {"anthropic-version", "2023-06-01"},
      {"anthropic-beta", "prompt-caching-2024-07-31"},
      {"user-agent", "agent/1"},
      {"Authorization", "Bearer box-found-this"},
      {"x-api-key", "box-key"},
      {"api-key", "azure-style"},
      {"x-goog-api-key", "g"},
      {"proxy-authorization", "Basic x"},
      {"cookie", "session=1"},
      {"x-auth-token", "t"},
      {"openai-session-id", "s"},
      {"x-cocoonbox-box", "bx_someoneelse"},
      {"x-cocoonbox-credential", "v1.x.y"},
      {"host", "evil.example"},
      {"connection", "keep-alive, x-trace"},
      {"transfer-encoding", "chunked"},
      {"content-length", "999"},
      {"accept-encoding", "gzip, br"},
      {"te", "trailers"},
  };
  SECTION("anthropic: x-api-key") {
    http::Headers out = door_request_headers(from_box, Wire::kAnthropic, kKey, 42);
    http::Headers want{{"content-type", "application/json"},
                       {"accept", "text/event-stream"},
                       {"anthropic-version", "2023-06-01"},
                       {"anthropic-beta", "prompt-caching-2024-07-31"},
                       {"user-agent", "agent/1"},
                       {"x-api-key", std::string(kKey)},
                       {"accept-encoding", "identity"},
                       {"content-length", "42"}};
    CHECK(out == want);
  }
  SECTION("openai: authorization Bearer, and no content-length without a body") {
    http::Headers out = door_request_headers(from_box, Wire::kOpenAi, kKey, std::nullopt);
    CHECK(value_of(out, "authorization") == "Bearer " + std::string(kKey));
    CHECK(value_of(out, "x-api-key") == "<none>");
    CHECK(value_of(out, "content-length") == "<none>");
    int auth = 0;
    for (const auto& h : out) auth += h.name == "authorization";
    CHECK(auth == 1);
  }
}

TEST_CASE("ModelDoor: response fields lose hop-by-hop fields and cookies", "[api][door][unit]") {
  http::Headers from_gw{{"Content-Type", "text/event-stream"},
                        {"transfer-encoding", "chunked"},
                        {"connection", "close"},
                        {"request-id", "req_1"},
                        {"set-cookie", "__cf=1"},
                        {"retry-after", "3"},
                        {"keep-alive", "timeout=5"}};
  http::Headers want{
      {"content-type", "text/event-stream"}, {"request-id", "req_1"}, {"retry-after", "3"}};
  CHECK(door_response_headers(from_gw) == want);
}

TEST_CASE("ModelDoor: the door's own errors have each wire's error shape", "[api][door][unit]") {
  auto a = json::parse(door_error_body(Wire::kAnthropic, 503, "no gateway"));
  CHECK(a ==
        json{{"type", "error"}, {"error", {{"type", "api_error"}, {"message", "no gateway"}}}});
  auto o = json::parse(door_error_body(Wire::kOpenAi, 404, "no such route"));
  CHECK(o["error"]["message"] == "no such route");
  CHECK(o["error"]["type"] == "invalid_request_error");
  CHECK(o["error"]["code"] == "not_found");
  CHECK(o["error"]["param"].is_null());
  // The model client reads them like the gateway's own errors.
  CHECK(model::error_message_from_body(door_error_body(Wire::kOpenAi, 503, "m1")) == "m1");
  CHECK(model::error_message_from_body(door_error_body(Wire::kAnthropic, 502, "m2")) == "m2");
}

TEST_CASE("ModelDoor: request_model_name reads only the top-level model", "[api][door][unit]") {
  CHECK(request_model_name(R"({"model":"gpt-4o","stream":true})") == "gpt-4o");
  CHECK(
      request_model_name(
          R"( { "messages" : [ {"role":"user","content":"{\"model\":\"no\"}"} ], "tools":)"
          R"([{"model":"nested"}], "stream" : false, "n": 1.5e3, "x": null, "model" : "c-3" })") ==
      "c-3");
  CHECK(request_model_name(R"({"metadata":{"model":"inner"}})").empty());
  CHECK(request_model_name(R"({"model":42})").empty());
  CHECK(request_model_name("not json").empty());
  CHECK(request_model_name(R"({"model":"unterminated)").empty());
  CHECK(request_model_name(R"({"a":"x\"y","model":"after-escape"})") == "after-escape");
  std::string big =
      R"({"messages":[{"content":")" + std::string(1 << 20, 'z') + R"("}],"model":"m"})";
  CHECK(request_model_name(big) == "m");
  CHECK(request_model_name(R"({"model":")" + std::string(400, 'q') + R"("})").size() == 256);
}

// ---- a real door in front of the fake gateway ----

// Runs |task| on |io| until it finishes. The door's listeners keep |io| busy forever, so
// io.run() would not return: handlers run one at a time until the task is done.
void drive(asio::io_context& io, asio::awaitable<void> task) {
  std::exception_ptr failure;
  bool done = false;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
    failure = e;
    done = true;
  });
  while (!done) io.run_one();
  if (failure) std::rethrow_exception(failure);
}

struct Fixture {
  Fixture() {
    crypto::SeededRandom random(5);
    master.emplace(crypto::SymmetricKey::generate(random));
    auto sync = SyncStore::open(data_dir());
    REQUIRE(sync.ok());
    alice = *sync->add_user("alice");
    bob = *sync->add_user("bob");
    box = *sync->create_box(alice.id, "main", "local", "local");
    bob_box = *sync->create_box(bob.id, "main", "local", "local");
  }
  std::filesystem::path data_dir() const { return dir.path() / "data"; }
  std::string socket_of(const Box& b) const { return (dir.path() / (b.id + ".sock")).string(); }

  Status set_gateway(const std::string& user, const std::string& url, std::string_view key) {
    auto sync = SyncStore::open(data_dir());
    if (!sync.ok()) return sync.status();
    return sync->set_user_gateway(user, url, key, master->bytes());
  }

  // The door itself, on |io|, with api.db open on its worker.
  void start(ModelDoorOptions options = {}) {
    auto s = Store::open(data_dir());
    REQUIRE(s.ok());
    store = std::move(*s);
    door.emplace(io.get_executor(), *store, *master, std::move(options));
    REQUIRE(door->open(box.id, socket_of(box)).ok());
    REQUIRE(door->open(bob_box.id, socket_of(bob_box)).ok());
  }

  // One model call through |b|'s door, as the agent in the box makes it (no key).
  Result<model::Response> call(const Box& b, Wire wire, model::Endpoint* tweak = nullptr) {
    auto ep = model::parse_endpoint("unix:" + socket_of(b));
    REQUIRE(ep.ok());
    if (tweak != nullptr) {
      ep->api_key = tweak->api_key;
      ep->extra_headers = tweak->extra_headers;
    }
    model::ModelInfo m;
    m.name = wire == Wire::kOpenAi ? "gpt-door" : "claude-door";
    m.wire = wire;
    model::Request r;
    r.messages.push_back(model::Message::user({model::Part::text_part("hello")}));
    Result<model::Response> out = internal_error("not run");
    drive(io, [&]() -> asio::awaitable<void> {
      co_await asio::this_coro::throw_if_cancelled(false);
      model::Client client(io.get_executor(), *ep);
      model::CallOptions o;
      o.retry.max_attempts = 1;
      o.on_delta = [&](const model::Delta& d) { deltas.push_back(d); };
      out = co_await client.call(m, r, o);
    }());
    settle();
    return out;
  }

  // Runs the door until no call is in flight (it records usage after the box has its answer).
  void settle() {
    while (door->counters().calls_open > 0) io.run_one();
  }

  // A raw request to |b|'s door.
  Result<http::Http1Response> raw(const Box& b, std::string method, std::string path,
                                  http::Headers headers, std::string body = {}) {
    Result<http::Http1Response> out = internal_error("not run");
    drive(io, [&]() -> asio::awaitable<void> {
      http::Http1DialOptions o;
      o.unix_path = socket_of(b);
      auto c = co_await http::dial_http1(io.get_executor(), o, net::after(30s));
      if (!c.ok()) {
        out = c.status();
        co_return;
      }
      out = co_await (*c)->request(std::move(method), std::move(path), std::move(headers),
                                   std::move(body), net::after(30s));
    }());
    settle();
    return out;
  }

  std::vector<ModelUsage> usage() {
    auto sync = SyncStore::open(data_dir());
    REQUIRE(sync.ok());
    auto rows = sync->model_usage();
    REQUIRE(rows.ok());
    return *rows;
  }

  asio::io_context io;  // first: destroyed last
  test::TempDir dir;
  std::optional<crypto::SymmetricKey> master;
  User alice;
  User bob;
  Box box;
  Box bob_box;
  std::unique_ptr<Store> store;
  std::optional<ModelDoor> door;
  std::vector<model::Delta> deltas;
};

json turn(Wire wire, json fields) {
  fields["wire"] = std::string(model::wire_name(wire));
  return fields;
}

json requests_of(test::FakeGateway& gw) {
  auto r = gw.requests();
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("ModelDoor: a call from the box reaches the owner's gateway with the owner's key",
          "[api][door][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(model::wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  Fixture f;
  REQUIRE(f.set_gateway("alice", gw.url(), kKey).ok());
  json script = {{"key", std::string(kKey)},
                 {"turns", json::array({turn(wire, {{"chunks", {"through ", "the ", "door"}},
                                                    {"usage",
                                                     {{"input_tokens", 40},
                                                      {"output_tokens", 3},
                                                      {"cache_read_tokens", 16},
                                                      {"cache_write_tokens", 8}}}})})}};
  REQUIRE(gw.set_script(script).ok());
  f.start();

  // A box that found some key somewhere and sends it: the door drops it.
  model::Endpoint tweak;
  tweak.api_key = "box-found-key";
  tweak.extra_headers.push_back(http::Header{"x-secret-token", "box-secret"});
  auto r = f.call(f.box, wire, &tweak);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  CHECK(r->message.text() == "through the door");
  CHECK(f.deltas.size() == 3);  // streamed piece by piece

  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 1);
  const json& h = reqs[0]["headers"];
  if (wire == Wire::kAnthropic) {
    CHECK(h["x-api-key"] == kKey);
    CHECK_FALSE(h.contains("authorization"));
  } else {
    CHECK(h["authorization"] == "Bearer " + std::string(kKey));
    CHECK_FALSE(h.contains("x-api-key"));
  }
  CHECK_FALSE(h.contains("x-secret-token"));
  CHECK(h["accept-encoding"] == "identity");
  CHECK(reqs[0]["body"]["model"] == (wire == Wire::kOpenAi ? "gpt-door" : "claude-door"));

  auto rows = f.usage();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].user_name == "alice");
  CHECK(rows[0].box_id == f.box.id);
  CHECK(rows[0].wire == model::wire_name(wire));
  CHECK(rows[0].model == (wire == Wire::kOpenAi ? "gpt-door" : "claude-door"));
  CHECK(rows[0].requests == 1);
  CHECK(rows[0].failed == 0);
  CHECK(rows[0].input_tokens == 40);
  CHECK(rows[0].output_tokens == 3);
  CHECK(rows[0].cache_read_tokens == 16);
  CHECK(rows[0].cache_write_tokens == (wire == Wire::kOpenAi ? 0 : 8));
  CHECK(f.door->counters().input_tokens_total == 40);

  SECTION("the same without streaming") {
    REQUIRE(gw.set_script({{"key", std::string(kKey)},
                           {"turns",
                            json::array({turn(
                                wire, {{"text", "whole"},
                                       {"stream", false},
                                       {"usage", {{"input_tokens", 7}, {"output_tokens", 1}}}})})}})
                .ok());
    auto again = f.call(f.box, wire);
    REQUIRE(again.ok());
    CHECK(again->message.text() == "whole");
    auto rows2 = f.usage();
    REQUIRE(rows2.size() == 1);
    CHECK(rows2[0].requests == 2);
    CHECK(rows2[0].input_tokens == 47);
  }
  SECTION("a gateway error is relayed as the gateway sent it, and counted as failed") {
    REQUIRE(gw.set_script({{"key", std::string(kKey)},
                           {"turns", json::array({turn(wire, {{"status", 429},
                                                              {"error",
                                                               {{"type", "rate_limit_error"},
                                                                {"message", "slow down"}}}})})}})
                .ok());
    auto again = f.call(f.box, wire);
    REQUIRE_FALSE(again.ok());
    CHECK(again.status().code() == Code::kResourceExhausted);
    CHECK(again.status().message().find("slow down") != std::string::npos);
    auto rows2 = f.usage();
    REQUIRE(rows2.size() == 1);
    CHECK(rows2[0].requests == 2);
    CHECK(rows2[0].failed == 1);
  }
}

TEST_CASE("ModelDoor: the socket names the box: each door uses its own owner's gateway",
          "[api][door][integration]") {
  test::FakeGateway alice_gw;
  test::FakeGateway bob_gw;
  REQUIRE(alice_gw.error().empty());
  REQUIRE(bob_gw.error().empty());
  Fixture f;
  REQUIRE(f.set_gateway("alice", alice_gw.url(), kKey).ok());
  REQUIRE(f.set_gateway("bob", bob_gw.url(), kOtherKey).ok());
  REQUIRE(alice_gw
              .set_script({{"key", std::string(kKey)},
                           {"turns", json::array({turn(Wire::kAnthropic, {{"text", "A"}})})}})
              .ok());
  REQUIRE(bob_gw
              .set_script({{"key", std::string(kOtherKey)},
                           {"turns", json::array({turn(Wire::kAnthropic, {{"text", "B"}})})}})
              .ok());
  f.start();
  // Bob's box claims to be Alice's box: headers name nothing.
  model::Endpoint tweak;
  tweak.extra_headers.push_back(http::Header{"x-cocoonbox-box", f.box.id});
  auto from_bob = f.call(f.bob_box, Wire::kAnthropic, &tweak);
  REQUIRE(from_bob.ok());
  CHECK(from_bob->message.text() == "B");
  auto from_alice = f.call(f.box, Wire::kAnthropic);
  REQUIRE(from_alice.ok());
  CHECK(from_alice->message.text() == "A");
  CHECK(requests_of(alice_gw).size() == 1);
  CHECK(requests_of(bob_gw).size() == 1);
  auto rows = f.usage();
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    CHECK(row.box_id == (row.user_name == "alice" ? f.box.id : f.bob_box.id));
  }
}

TEST_CASE(
    "ModelDoor: without a gateway the door answers 503 in the wire's shape; the default "
    "applies to users without one",
    "[api][door][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(model::wire_name(wire));
  Fixture f;
  SECTION("no gateway at all") {
    f.start();
    auto r = f.call(f.box, wire);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK(r.status().message().find("no model gateway is configured") != std::string::npos);
    auto raw = f.raw(f.box, "POST", wire == Wire::kOpenAi ? "/v1/chat/completions" : "/v1/messages",
                     {{"content-type", "application/json"}}, "{}");
    REQUIRE(raw.ok());
    CHECK(raw->status == 503);
    CHECK(value_of(raw->headers, "content-type") == "application/json");
    auto body = json::parse(raw->body);
    if (wire == Wire::kAnthropic) {
      CHECK(body["type"] == "error");
      CHECK(body["error"]["type"] == "api_error");
    } else {
      CHECK(body["error"]["code"] == "model_gateway_unavailable");
    }
    CHECK(f.usage().empty());
    CHECK(f.door->counters().refused_total == 2);
  }
  SECTION("the api's default gateway") {
    test::FakeGateway gw;
    REQUIRE(gw.error().empty());
    REQUIRE(gw.set_script({{"key", "default-key"},
                           {"turns", json::array({turn(wire, {{"text", "default"}})})}})
                .ok());
    ModelDoorOptions o;
    o.default_gateway = DefaultGateway{gw.url(), "default-key"};
    f.start(std::move(o));
    auto r = f.call(f.box, wire);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(r->message.text() == "default");
  }
}

TEST_CASE("ModelDoor: a stream reaches the box while the gateway is still sending",
          "[api][door][integration]") {
  Wire wire = GENERATE(Wire::kOpenAi, Wire::kAnthropic);
  INFO(model::wire_name(wire));
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  Fixture f;
  REQUIRE(f.set_gateway("alice", gw.url(), kKey).ok());
  // Two text pieces, then the fake holds the stream open until its client leaves.
  REQUIRE(
      gw.set_script(
            {{"key", std::string(kKey)},
             {"turns", json::array({turn(wire, {{"chunks", {"early ", "bird", "x"}},
                                                {"hold_after", wire == Wire::kOpenAi ? 3 : 5}})})}})
          .ok());
  f.start();
  const std::string path = wire == Wire::kOpenAi ? "/v1/chat/completions" : "/v1/messages";
  json request = {{"model", wire == Wire::kOpenAi ? "gpt-door" : "claude-door"},
                  {"stream", true},
                  {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  if (wire == Wire::kAnthropic) request["max_tokens"] = 100;
  const std::string text = request.dump();
  http::Headers h{{"content-type", "application/json"},
                  {"anthropic-version", "2023-06-01"},
                  {"content-length", std::to_string(text.size())}};
  std::string seen;
  // The streaming read: the first events arrive although the gateway has not ended the body.
  drive(f.io, [&]() -> asio::awaitable<void> {
    http::Http1DialOptions o;
    o.unix_path = f.socket_of(f.box);
    auto c = co_await http::dial_http1(f.io.get_executor(), o, net::after(30s));
    REQUIRE(c.ok());
    Status sent = co_await (*c)->send_head(std::string("POST"), path, h, net::after(30s));
    REQUIRE(sent.ok());
    Status wrote = co_await (*c)->write_body(text, net::after(30s));
    REQUIRE(wrote.ok());
    Status ended = co_await (*c)->finish_body(http::Headers(), net::after(30s));
    REQUIRE(ended.ok());
    auto head = co_await (*c)->read_head(net::after(30s));
    REQUIRE(head.ok());
    CHECK(head->status == 200);
    while (seen.find("bird") == std::string::npos) {
      auto piece = co_await (*c)->read_body(net::after(30s));
      REQUIRE(piece.ok());
      REQUIRE_FALSE(piece->empty());
      seen += *piece;
    }
  }());
  CHECK(seen.find("early ") != std::string::npos);
  // The gateway is still holding the stream: the pieces came through before it ended.
  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0]["outcome"] == "held");
  CHECK(reqs[0]["client_closed"] == false);
  // The box's connection is gone (the client above was destroyed): the door closes the
  // gateway's, which the fake notices.
  bool closed = false;
  for (int i = 0; i < 500 && !closed; ++i) {
    for (int k = 0; k < 20; ++k) f.io.poll();
    auto r = gw.requests();
    closed = r.ok() && !r->empty() && (*r)[0]["client_closed"] == true;
    if (!closed) std::this_thread::sleep_for(20ms);
  }
  CHECK(closed);
}

TEST_CASE("ModelDoor: models lists use the wire's key field; other routes never reach the gateway",
          "[api][door][integration]") {
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  Fixture f;
  REQUIRE(f.set_gateway("alice", gw.url(), kKey).ok());
  REQUIRE(gw.set_script({{"key", std::string(kKey)}, {"turns", json::array()}}).ok());
  f.start();
  auto openai = f.raw(f.box, "GET", "/v1/models", {{"authorization", "Bearer nope"}});
  REQUIRE(openai.ok());
  CHECK(openai->status == 200);
  CHECK(json::parse(openai->body)["data"][0]["id"] == "fake-gpt");
  auto anthropic = f.raw(f.box, "GET", "/v1/models", {{"anthropic-version", "2023-06-01"}});
  REQUIRE(anthropic.ok());
  CHECK(anthropic->status == 200);
  CHECK(json::parse(anthropic->body)["data"][0]["id"] == "fake-claude");
  json reqs = requests_of(gw);
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0]["headers"]["authorization"] == "Bearer " + std::string(kKey));
  CHECK(reqs[1]["headers"]["x-api-key"] == kKey);

  auto keys = f.raw(f.box, "POST", "/v1/keys", {{"content-type", "application/json"}}, "{}");
  REQUIRE(keys.ok());
  CHECK(keys->status == 404);
  CHECK(json::parse(keys->body)["error"]["code"] == "not_found");
  CHECK(requests_of(gw).size() == 2);
  CHECK(f.usage().empty());  // model lists are not model calls
}

TEST_CASE("ModelDoor: a deleted box's door refuses; close() removes the socket",
          "[api][door][integration]") {
  test::FakeGateway gw;
  REQUIRE(gw.error().empty());
  Fixture f;
  REQUIRE(f.set_gateway("alice", gw.url(), kKey).ok());
  f.start();
  {
    auto sync = SyncStore::open(f.data_dir());
    REQUIRE(sync.ok());
    REQUIRE(sync->mark_deleted(f.box.id).ok());
  }
  auto r = f.raw(f.box, "POST", "/v1/messages", {{"content-type", "application/json"}}, "{}");
  REQUIRE(r.ok());
  CHECK(r->status == 403);
  CHECK(requests_of(gw).empty());

  // sync() closes the doors of deleted boxes (their run dir here does not exist) and keeps
  // the others; close() removes the socket file it made.
  drive(f.io, f.door->sync(f.data_dir() / "boxes"));
  CHECK_FALSE(f.door->is_open(f.box.id));
  CHECK_FALSE(std::filesystem::exists(f.socket_of(f.box)));
  CHECK(f.door->is_open(f.bob_box.id));
  struct stat st {};
  REQUIRE(::stat(f.socket_of(f.bob_box).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0666);
  f.door->close(f.bob_box.id);
  CHECK_FALSE(std::filesystem::exists(f.socket_of(f.bob_box)));
}

TEST_CASE("ModelDoor: sync opens the door of a live box in its run dir, also for a long path",
          "[api][door][integration]") {
  Fixture f;
  f.start();
  // A data dir deeper than a sockaddr_un can name.
  std::filesystem::path boxes = f.dir.path() / std::string(90, 'd') / "boxes";
  std::filesystem::create_directories(boxes / f.box.id / "run");
  drive(f.io, f.door->sync(boxes));
  std::filesystem::path sock = boxes / f.box.id / "run" / kModelDoorSocket;
  REQUIRE(sock.string().size() > 108);
  CHECK(std::filesystem::is_socket(sock));
  // Bob's box has no run dir under |boxes|: its earlier door stays as it was.
  CHECK(f.door->is_open(f.bob_box.id));
  // Another sync, or ensure_open() at a wake, keeps the same listener and so the connections
  // on it (a replaced listener would cut them): a keep-alive connection made before still
  // gets answers after. The route is one the door refuses itself, so no gateway is needed.
  // A client cannot name the long path either: it goes through a short symlink to the run dir.
  std::filesystem::create_directory_symlink(boxes / f.box.id / "run", f.dir.path() / "r");
  std::unique_ptr<http::Http1Client> kept;
  auto ask = [&]() -> asio::awaitable<void> {
    if (!kept) {
      http::Http1DialOptions o;
      o.unix_path = (f.dir.path() / "r" / kModelDoorSocket).string();
      auto c = co_await http::dial_http1(f.io.get_executor(), o, net::after(30s));
      REQUIRE(c.ok());
      kept = std::move(*c);
    }
    auto r = co_await kept->request(std::string("POST"), std::string("/v1/keys"), http::Headers(),
                                    std::string("{}"), net::after(30s));
    REQUIRE(r.ok());
    CHECK(r->status == 404);
  };
  drive(f.io, ask());
  drive(f.io, f.door->sync(boxes));
  REQUIRE(f.door->ensure_open(f.box.id, sock).ok());
  drive(f.io, ask());
  CHECK(f.door->counters().refused_total == 2);
  // Replaced behind the door's back (as after a recreate): the next sync binds again, which
  // ends the connections of the old listener.
  std::filesystem::remove(sock);
  drive(f.io, f.door->sync(boxes));
  CHECK(std::filesystem::is_socket(sock));
  drive(f.io, [&]() -> asio::awaitable<void> {
    auto r = co_await kept->request(std::string("POST"), std::string("/v1/keys"), http::Headers(),
                                    std::string("{}"), net::after(30s));
    CHECK_FALSE(r.ok());
  }());
  kept.reset();  // a new connection reaches the new listener
  drive(f.io, ask());
  auto r = f.raw(f.box, "GET", "/v1/models", {});
  // The fixture's own socket for this box was closed when sync re-opened the door elsewhere.
  CHECK_FALSE(r.ok());
}

}  // namespace
}  // namespace cb::api
