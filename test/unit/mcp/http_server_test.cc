#include "mcp/http_server.h"

#include "http/http1_client.h"
#include "http/server.h"
#include "http/sse.h"
#include "support/run_sync.h"
#include "test_tools.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::mcp {
namespace {

using namespace std::chrono_literals;
using cb::test::run_sync;

constexpr const char* kPath = "/mcp";

// A clock the tests move by hand, for idle expiry.
class ManualClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            steady_.time_since_epoch()));
  }
  std::chrono::steady_clock::time_point steady_now() const override { return steady_; }
  void advance(std::chrono::milliseconds d) { steady_ += d; }

 private:
  std::chrono::steady_clock::time_point steady_{std::chrono::hours(1)};
};

// What came back for one request: status, fields, and the body (JSON) or the SSE events.
struct HttpReply {
  int status = 0;
  http::Headers headers;
  std::string body;
  std::vector<Json> events;  // parsed "message" events of an SSE body

  const std::string* header(std::string_view name) const {
    return http::find_header(headers, name);
  }
  Json json() const { return Json::parse(body); }
  bool is_sse() const {
    const std::string* ct = header("content-type");
    return ct != nullptr && *ct == "text/event-stream";
  }
};

std::vector<Json> sse_events(std::string_view body) {
  http::SseParser parser;
  auto events = parser.feed(body);
  REQUIRE(events.ok());
  std::vector<Json> out;
  for (const auto& e : *events) {
    CHECK(e.type == "message");
    out.push_back(Json::parse(e.data));
  }
  return out;
}

// Request fields built outside coroutine bodies (gcc 12 and braced literals, see house notes).
http::Headers mcp_headers(const std::string& session = "",
                          const std::string& accept = "application/json, text/event-stream") {
  http::Headers h;
  h.push_back(http::Header{"content-type", "application/json"});
  if (!accept.empty()) h.push_back(http::Header{"accept", accept});
  if (!session.empty()) h.push_back(http::Header{"mcp-session-id", session});
  return h;
}
http::Headers with(http::Headers h, const std::string& name, const std::string& value) {
  h.push_back(http::Header{name, value});
  return h;
}
std::string init_body(const std::string& version = "2025-11-25", int id = 1) {
  return serialize(
      Message::request(id, "initialize",
                       Json{{"protocolVersion", version},
                            {"capabilities", Json::object()},
                            {"clientInfo", {{"name", "http-test"}, {"version", "0"}}}}));
}
std::string request_body(int id, const std::string& method, Json params = nullptr) {
  return serialize(Message::request(id, method, std::move(params)));
}
std::string tool_call_body(int id, const std::string& name, Json args = Json::object(),
                           Json token = nullptr) {
  Json params = {{"name", name}, {"arguments", std::move(args)}};
  if (!token.is_null()) params["_meta"] = Json{{"progressToken", token}};
  return serialize(Message::request(id, "tools/call", params));
}
std::string notification_body(const std::string& method, Json params = nullptr) {
  return serialize(Message::notification(method, std::move(params)));
}
Json text_args(const std::string& text) { return Json{{"text", text}}; }
std::string cancel_body(int id) {
  return notification_body("notifications/cancelled", Json{{"requestId", id}});
}

struct HttpFixture {
  explicit HttpFixture(HttpServerOptions http_options = {}) {
    http_options.clock = &clock;
    transport = std::make_unique<HttpServerTransport>(server, io.get_executor(), http_options);
    transport->mount(router, kPath);
    http_server = std::make_unique<http::Server>(io.get_executor(), router, http::ServerOptions{});
    REQUIRE(http_server->listen_tcp("127.0.0.1", 0).ok());
    http_server->start();
  }
  ~HttpFixture() {
    http_server.reset();
    transport.reset();
  }

  // Runs |body| with the server up, then shuts the server down.
  template <typename F>
  void run(F body) {
    run_sync(io, [&]() -> asio::awaitable<void> {
      std::exception_ptr failure;
      try {
        co_await body();
      } catch (...) {
        failure = std::current_exception();
      }
      transport->close_all();
      co_await http_server->shutdown(net::after(5s));
      if (failure) std::rethrow_exception(failure);
    }());
  }

  // One whole exchange over a fresh HTTP/1.1 connection.
  asio::awaitable<HttpReply> h1(std::string method, http::Headers headers, std::string body) {
    http::Http1DialOptions d;
    d.host = "127.0.0.1";
    d.port = http_server->port();
    auto client = co_await http::dial_http1(io.get_executor(), d, net::after(10s));
    REQUIRE(client.ok());
    auto resp = co_await (*client)->request(std::move(method), kPath, std::move(headers),
                                            std::move(body), net::after(10s));
    REQUIRE(resp.ok());
    HttpReply r;
    r.status = resp->status;
    r.headers = resp->headers;
    r.body = resp->body;
    if (r.is_sse()) r.events = sse_events(r.body);
    co_return r;
  }
  asio::awaitable<HttpReply> post(http::Headers headers, std::string body) {
    co_return co_await h1("POST", std::move(headers), std::move(body));
  }
  // initialize + notifications/initialized; returns the session id.
  asio::awaitable<std::string> open_session(std::string version = "2025-11-25") {
    HttpReply init = co_await post(mcp_headers(), init_body(version));
    REQUIRE(init.status == 200);
    const std::string* id = init.header("mcp-session-id");
    REQUIRE(id != nullptr);
    std::string session = *id;
    HttpReply ack = co_await post(with(mcp_headers(session), "mcp-protocol-version", version),
                                  notification_body("notifications/initialized"));
    REQUIRE(ack.status == 202);
    co_return session;
  }

  asio::io_context io;
  ManualClock clock;
  testing::TestTools tools{io.get_executor()};
  ServerOptions options = [] {
    ServerOptions o;
    o.info.name = "http-test";
    o.info.version = "1";
    o.tools_page_size = 3;
    return o;
  }();
  Server server{options, tools.table};
  http::Router router;
  std::unique_ptr<HttpServerTransport> transport;
  std::unique_ptr<http::Server> http_server;
};

TEST_CASE("accept_allows: media ranges, wildcards and q=0", "[mcp][unit]") {
  CHECK(accept_allows("application/json, text/event-stream", "application/json"));
  CHECK(accept_allows("application/json, text/event-stream", "text/event-stream"));
  CHECK(accept_allows("*/*", "text/event-stream"));
  CHECK(accept_allows("text/*;q=0.5", "text/event-stream"));
  CHECK(accept_allows("Application/JSON;charset=utf-8", "application/json"));
  CHECK_FALSE(accept_allows("application/json", "text/event-stream"));
  CHECK_FALSE(accept_allows("text/event-stream;q=0, */*;q=0", "text/event-stream"));
  CHECK_FALSE(accept_allows("", "application/json"));
  CHECK_FALSE(accept_allows("application/jsonx", "application/json"));
}

TEST_CASE("HttpServerTransport: a session over HTTP/1.1: JSON replies, SSE with progress, 202",
          "[mcp][unit]") {
  HttpFixture f;
  f.run([&]() -> asio::awaitable<void> {
    HttpReply init = co_await f.post(mcp_headers(), init_body("2025-06-18"));
    CHECK(init.status == 200);
    CHECK(*init.header("content-type") == "application/json");
    REQUIRE(init.header("mcp-session-id") != nullptr);
    const std::string session = *init.header("mcp-session-id");
    CHECK(session.size() >= 32);
    CHECK(session.find_first_not_of(
              "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
          std::string::npos);
    CHECK(init.json()["result"]["protocolVersion"] == "2025-06-18");
    CHECK(f.transport->session_count() == 1);

    HttpReply ack =
        co_await f.post(mcp_headers(session), notification_body("notifications/initialized"));
    CHECK(ack.status == 202);
    CHECK(ack.body.empty());

    // Without MCP-Protocol-Version the session's version is assumed.
    HttpReply list = co_await f.post(mcp_headers(session), request_body(2, "tools/list"));
    CHECK(list.status == 200);
    CHECK(list.json()["result"]["tools"].size() == 3);

    HttpReply echo =
        co_await f.post(with(mcp_headers(session), "mcp-protocol-version", "2025-06-18"),
                        tool_call_body(3, "echo", text_args("over http")));
    CHECK(echo.status == 200);
    CHECK(echo.json()["result"]["content"][0]["text"] == "over http");

    // A progress token turns the reply into an SSE stream: progress events, then the result.
    HttpReply progress =
        co_await f.post(mcp_headers(session), tool_call_body(4, "progress", Json::object(), "tk"));
    CHECK(progress.status == 200);
    REQUIRE(progress.is_sse());
    CHECK(*progress.header("mcp-session-id") == session);
    REQUIRE(progress.events.size() == 4);
    for (int i = 0; i < 3; ++i) {
      CHECK(progress.events[i]["method"] == "notifications/progress");
      CHECK(progress.events[i]["params"]["progressToken"] == "tk");
      CHECK(progress.events[i]["params"]["progress"] == i + 1);
    }
    CHECK(progress.events[3]["id"] == 4);
    CHECK(progress.events[3]["result"]["content"][0]["text"] == "done");

    // Without a token, a tool that reports nothing answers in JSON; a tool failure is isError.
    HttpReply failed = co_await f.post(mcp_headers(session), tool_call_body(5, "fail"));
    CHECK(failed.status == 200);
    CHECK(failed.json()["result"]["isError"] == true);
    HttpReply unknown = co_await f.post(mcp_headers(session), tool_call_body(6, "nope"));
    CHECK(unknown.status == 200);
    CHECK(unknown.json()["error"]["code"] == kInvalidParams);
  });
}

TEST_CASE("HttpServerTransport: status codes the spec requires", "[mcp][unit]") {
  HttpFixture f;
  f.run([&]() -> asio::awaitable<void> {
    const std::string session = co_await f.open_session();

    SECTION("406 when Accept does not list both JSON and SSE") {
      HttpReply json_only =
          co_await f.post(mcp_headers(session, "application/json"), request_body(2, "ping"));
      CHECK(json_only.status == 406);
      CHECK(json_only.json()["error"]["code"] == kServerError);
      CHECK(json_only.json()["id"].is_null());
      HttpReply sse_only =
          co_await f.post(mcp_headers(session, "text/event-stream"), request_body(2, "ping"));
      CHECK(sse_only.status == 406);
      HttpReply none = co_await f.post(mcp_headers(session, ""), request_body(2, "ping"));
      CHECK(none.status == 406);
      HttpReply get = co_await f.h1("GET", mcp_headers(session, "application/json"), "");
      CHECK(get.status == 406);
    }
    SECTION("415 for a body that is not JSON") {
      http::Headers h = mcp_headers(session);
      h[0].value = "text/plain";
      HttpReply r = co_await f.post(h, request_body(2, "ping"));
      CHECK(r.status == 415);
    }
    SECTION("400 without a session id, for bad JSON, and for an unknown protocol version") {
      HttpReply no_session = co_await f.post(mcp_headers(), request_body(2, "ping"));
      CHECK(no_session.status == 400);
      HttpReply get_no_session = co_await f.h1("GET", mcp_headers(), "");
      CHECK(get_no_session.status == 400);
      HttpReply bad_json = co_await f.post(mcp_headers(session), "{oops");
      CHECK(bad_json.status == 400);
      CHECK(bad_json.json()["error"]["code"] == kParseError);
      HttpReply invalid = co_await f.post(mcp_headers(session), R"({"jsonrpc":"2.0","id":1})");
      CHECK(invalid.status == 400);
      CHECK(invalid.json()["error"]["code"] == kInvalidRequest);
      HttpReply bad_version =
          co_await f.post(with(mcp_headers(session), "mcp-protocol-version", "2024-11-05"),
                          request_body(2, "ping"));
      CHECK(bad_version.status == 400);
      HttpReply batch = co_await f.post(mcp_headers(session), "[" + request_body(2, "ping") + "]");
      CHECK(batch.status == 400);
      CHECK(batch.json()["error"]["code"] == kInvalidRequest);
    }
    SECTION("404 for an unknown session, and after DELETE") {
      HttpReply unknown = co_await f.post(mcp_headers("no-such-session"), request_body(2, "ping"));
      CHECK(unknown.status == 404);
      CHECK(unknown.json()["error"]["code"] == kSessionNotFound);
      HttpReply ping = co_await f.post(mcp_headers(session), request_body(2, "ping"));
      CHECK(ping.status == 200);
      HttpReply deleted = co_await f.h1("DELETE", mcp_headers(session), "");
      CHECK(deleted.status == 200);
      CHECK(f.transport->session_count() == 0);
      HttpReply after = co_await f.post(mcp_headers(session), request_body(3, "ping"));
      CHECK(after.status == 404);
      HttpReply delete_again = co_await f.h1("DELETE", mcp_headers(session), "");
      CHECK(delete_again.status == 404);
    }
    SECTION("405 for other methods") {
      HttpReply put = co_await f.h1("PUT", mcp_headers(session), "{}");
      CHECK(put.status == 405);
      REQUIRE(put.header("allow") != nullptr);
      CHECK(*put.header("allow") == "POST, GET, DELETE");
    }
    SECTION("202 for notifications and responses, with no body") {
      HttpReply note =
          co_await f.post(mcp_headers(session), notification_body("notifications/whatever"));
      CHECK(note.status == 202);
      CHECK(note.body.empty());
      HttpReply response =
          co_await f.post(mcp_headers(session), serialize(Message::response(99, Json::object())));
      CHECK(response.status == 202);
    }
    SECTION("403 for a foreign Origin; loopback and same-origin pass") {
      HttpReply evil = co_await f.post(with(mcp_headers(session), "origin", "https://evil.example"),
                                       request_body(2, "ping"));
      CHECK(evil.status == 403);
      HttpReply null_origin =
          co_await f.post(with(mcp_headers(session), "origin", "null"), request_body(2, "ping"));
      CHECK(null_origin.status == 403);
      HttpReply local = co_await f.post(
          with(mcp_headers(session), "origin", "http://localhost:3000"), request_body(2, "ping"));
      CHECK(local.status == 200);
      HttpReply v6 = co_await f.post(with(mcp_headers(session), "origin", "http://[::1]:80"),
                                     request_body(2, "ping"));
      CHECK(v6.status == 200);
    }
    SECTION("a failed initialize keeps no session") {
      HttpReply bad = co_await f.post(mcp_headers(), request_body(1, "initialize", Json::object()));
      CHECK(bad.status == 200);
      CHECK(bad.json()["error"]["code"] == kInvalidParams);
      CHECK(f.transport->session_count() == 1);  // only the fixture's
    }
    SECTION("initialize on an existing session is refused") {
      HttpReply again = co_await f.post(mcp_headers(session), init_body());
      CHECK(again.status == 200);
      CHECK(again.json()["error"]["code"] == kInvalidRequest);
    }
  });
}

TEST_CASE("HttpServerTransport: GET and DELETE can be turned off (405)", "[mcp][unit]") {
  HttpServerOptions o;
  o.enable_get_stream = false;
  o.enable_delete = false;
  HttpFixture f(o);
  f.run([&]() -> asio::awaitable<void> {
    const std::string session = co_await f.open_session();
    HttpReply get = co_await f.h1("GET", mcp_headers(session, "text/event-stream"), "");
    CHECK(get.status == 405);
    CHECK(*get.header("allow") == "POST");
    HttpReply del = co_await f.h1("DELETE", mcp_headers(session), "");
    CHECK(del.status == 405);
    CHECK(f.transport->session_count() == 1);
  });
}

TEST_CASE("HttpServerTransport: idle sessions expire and then answer 404", "[mcp][unit]") {
  HttpServerOptions o;
  o.session_idle_timeout = 10min;
  HttpFixture f(o);
  f.run([&]() -> asio::awaitable<void> {
    const std::string session = co_await f.open_session();
    f.clock.advance(9min);
    HttpReply alive = co_await f.post(mcp_headers(session), request_body(2, "ping"));
    CHECK(alive.status == 200);  // and the request renewed it
    f.clock.advance(9min);
    f.transport->expire_idle_sessions();
    CHECK(f.transport->session_count() == 1);
    f.clock.advance(2min);
    f.transport->expire_idle_sessions();
    CHECK(f.transport->session_count() == 0);
    HttpReply gone = co_await f.post(mcp_headers(session), request_body(3, "ping"));
    CHECK(gone.status == 404);
  });
}

TEST_CASE("HttpServerTransport: authenticate gives 401 and binds sessions to a principal",
          "[mcp][unit]") {
  HttpServerOptions o;
  o.authenticate = [](const http::RequestHead& head) -> asio::awaitable<Result<std::string>> {
    const std::string* auth = http::find_header(head.headers, "authorization");
    if (auth == nullptr) co_return unauthenticated("missing token");
    if (*auth == "Bearer alice") co_return std::string("alice");
    if (*auth == "Bearer bob") co_return std::string("bob");
    co_return permission_denied("token refused");
  };
  HttpFixture f(o);
  std::string seen_principal;
  std::string seen_auth;
  Tool whoami;
  whoami.name = "whoami";
  f.tools.table.add(whoami,
                    [&](RequestContext& ctx, const Json&) -> asio::awaitable<Result<ToolResult>> {
                      seen_principal = ctx.principal();
                      if (const std::string* auth = ctx.header("authorization")) seen_auth = *auth;
                      co_return ToolResult::text(ctx.principal());
                    });
  f.run([&]() -> asio::awaitable<void> {
    HttpReply anonymous = co_await f.post(mcp_headers(), init_body());
    CHECK(anonymous.status == 401);
    REQUIRE(anonymous.header("www-authenticate") != nullptr);
    CHECK(*anonymous.header("www-authenticate") == "Bearer");
    HttpReply refused =
        co_await f.post(with(mcp_headers(), "authorization", "Bearer mallory"), init_body());
    CHECK(refused.status == 403);
    CHECK(f.transport->session_count() == 0);

    HttpReply init =
        co_await f.post(with(mcp_headers(), "authorization", "Bearer alice"), init_body());
    REQUIRE(init.status == 200);
    const std::string session = *init.header("mcp-session-id");
    HttpReply call = co_await f.post(with(mcp_headers(session), "authorization", "Bearer alice"),
                                     tool_call_body(2, "whoami"));
    CHECK(call.json()["result"]["content"][0]["text"] == "alice");
    CHECK(seen_principal == "alice");
    CHECK(seen_auth == "Bearer alice");
    // Bob cannot use (or even see) Alice's session.
    HttpReply stolen = co_await f.post(with(mcp_headers(session), "authorization", "Bearer bob"),
                                       tool_call_body(3, "whoami"));
    CHECK(stolen.status == 404);
    HttpReply no_token = co_await f.post(mcp_headers(session), tool_call_body(4, "whoami"));
    CHECK(no_token.status == 401);
  });
}

TEST_CASE("HttpServerTransport: batches in 2025-03-26 get an array reply", "[mcp][unit]") {
  HttpFixture f;
  f.run([&]() -> asio::awaitable<void> {
    const std::string session = co_await f.open_session("2025-03-26");
    std::string batch = "[" + request_body(2, "ping") + "," +
                        tool_call_body(3, "echo", text_args("b")) + "," +
                        notification_body("notifications/initialized") + "]";
    HttpReply r = co_await f.post(mcp_headers(session), batch);
    CHECK(r.status == 200);
    Json replies = r.json();
    REQUIRE(replies.is_array());
    REQUIRE(replies.size() == 2);
    CHECK(replies[0]["id"] == 2);
    CHECK(replies[1]["result"]["content"][0]["text"] == "b");
    std::string notes = "[" + notification_body("notifications/initialized") + "]";
    HttpReply accepted = co_await f.post(mcp_headers(session), notes);
    CHECK(accepted.status == 202);
  });
}

// HTTP/2: a POST stream and the GET stream on one connection.
struct H2Exchange {
  std::shared_ptr<http::H2Stream> stream;
  http::SseParser parser;
  std::vector<Json> pending;

  // The next SSE message, or a discarded Json at the end of the stream.
  asio::awaitable<Json> next_event() {
    while (pending.empty()) {
      auto piece = co_await stream->read();
      if (!piece.ok() || piece->empty()) co_return Json(Json::value_t::discarded);
      auto events = parser.feed(*piece);
      REQUIRE(events.ok());
      for (const auto& e : *events) pending.push_back(Json::parse(e.data));
    }
    Json j = std::move(pending.front());
    pending.erase(pending.begin());
    co_return j;
  }
  asio::awaitable<std::string> read_all() {
    std::string body;
    for (;;) {
      auto piece = co_await stream->read();
      REQUIRE(piece.ok());
      if (piece->empty()) co_return body;
      body += *piece;
    }
  }
};

asio::awaitable<H2Exchange> h2_send(http::H2Connection& conn, const std::string& method,
                                    http::Headers headers, std::string body) {
  http::RequestHead head;
  head.method = method;
  head.path = kPath;
  head.authority = "127.0.0.1";
  head.scheme = "http";
  head.headers = std::move(headers);
  auto s = conn.open_stream(head, body.empty());
  REQUIRE(s.ok());
  if (!body.empty()) {
    Status wrote = co_await (*s)->write(body, true);
    REQUIRE(wrote.ok());
  }
  Status got = co_await (*s)->wait_headers();
  REQUIRE(got.ok());
  H2Exchange x;
  x.stream = *s;
  co_return x;
}

TEST_CASE("HttpServerTransport: over HTTP/2, list_changed on GET, progress and cancel on POST",
          "[mcp][unit]") {
  HttpFixture f;
  f.run([&]() -> asio::awaitable<void> {
    http::DialOptions d;
    d.host = "127.0.0.1";
    d.port = f.http_server->port();
    auto dialed = co_await http::dial_h2(f.io.get_executor(), d, net::after(10s));
    REQUIRE(dialed.ok());
    http::H2Connection& conn = **dialed;

    H2Exchange init = co_await h2_send(conn, "POST", mcp_headers(), init_body());
    CHECK(init.stream->status() == 200);
    const std::string session = *http::find_header(init.stream->headers(), "mcp-session-id");
    std::string init_reply = co_await init.read_all();
    CHECK(Json::parse(init_reply)["result"]["protocolVersion"] == "2025-11-25");

    // A notification sent before the GET stream opens is kept for it.
    f.server.notify_tools_list_changed();
    H2Exchange get = co_await h2_send(conn, "GET", mcp_headers(session, "text/event-stream"), "");
    CHECK(get.stream->status() == 200);
    CHECK(*http::find_header(get.stream->headers(), "content-type") == "text/event-stream");
    Json first = co_await get.next_event();
    CHECK(first["method"] == "notifications/tools/list_changed");
    // A second GET stream for the same session is refused.
    H2Exchange second_get =
        co_await h2_send(conn, "GET", mcp_headers(session, "text/event-stream"), "");
    CHECK(second_get.stream->status() == 409);
    f.server.notify_tools_list_changed();
    Json second = co_await get.next_event();
    CHECK(second["method"] == "notifications/tools/list_changed");

    // slow with a progress token: the POST's SSE stream carries its progress; a cancellation
    // POSTed meanwhile ends it without a response.
    H2Exchange slow = co_await h2_send(conn, "POST", mcp_headers(session),
                                       tool_call_body(7, "slow", Json::object(), 70));
    CHECK(slow.stream->status() == 200);
    for (int i = 1; i <= 3; ++i) {
      Json p = co_await slow.next_event();
      CHECK(p["params"]["progress"] == i);
    }
    H2Exchange cancel = co_await h2_send(conn, "POST", mcp_headers(session), cancel_body(7));
    CHECK(cancel.stream->status() == 202);
    Json end = co_await slow.next_event();
    CHECK(end.is_discarded());  // the stream ended, no response in it
    CHECK(f.tools.slow_cancelled);

    // Resetting a POST stream cancels its handler as well.
    f.tools.slow_started = false;
    f.tools.slow_cancelled = false;
    H2Exchange reset = co_await h2_send(conn, "POST", mcp_headers(session),
                                        tool_call_body(8, "slow", Json::object(), 80));
    for (int i = 1; i <= 3; ++i) (void)co_await reset.next_event();
    reset.stream->reset();
    while (!f.tools.slow_cancelled) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }

    // DELETE ends the GET stream.
    H2Exchange del = co_await h2_send(conn, "DELETE", mcp_headers(session), "");
    CHECK(del.stream->status() == 200);
    Json after = co_await get.next_event();
    CHECK(after.is_discarded());
    conn.close();
  });
}

}  // namespace
}  // namespace cb::mcp
