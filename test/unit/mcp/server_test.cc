#include "mcp/server.h"

#include "base/base64.h"
#include "support/run_sync.h"
#include "test_tools.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::mcp {
namespace {

using cb::test::run_sync;

// Records what the session sends: the transport seam, nothing faked behind it.
class Recorder : public RequestChannel, public SessionOutlet {
 public:
  asio::awaitable<Status> send(const Message& message) override {
    sent.push_back(message);
    co_return ok_status();
  }
  void post(Message message) override { posted.push_back(std::move(message)); }
  std::vector<Message> sent;
  std::vector<Message> posted;
};

ServerOptions test_options() {
  ServerOptions o;
  o.info.name = "cocoonbox-test";
  o.info.version = "1.2.3";
  o.instructions = "Use the tools.";
  o.tools_page_size = 2;
  return o;
}

struct Fixture {
  asio::io_context io;
  testing::TestTools tools{io.get_executor()};
  Server server{test_options(), tools.table};
  Recorder recorder;
  TransportContext transport;
  std::unique_ptr<ServerSession> session = server.open_session(io.get_executor(), recorder, "s1");
  int next_id = 1;

  ~Fixture() { session->close(); }

  // Sends one request and returns the response (nullopt when none is owed).
  std::optional<Message> call(const std::string& method, Json params = nullptr) {
    Message req = Message::request(next_id++, method, std::move(params));
    return run_sync(io, session->handle_request(std::move(req), recorder, transport));
  }
  Message ok_call(const std::string& method, Json params = nullptr) {
    auto r = call(method, std::move(params));
    REQUIRE(r.has_value());
    INFO(serialize(*r));
    REQUIRE(r->kind == MessageKind::kResponse);
    return *r;
  }
  int error_code(const std::string& method, Json params = nullptr) {
    auto r = call(method, std::move(params));
    REQUIRE(r.has_value());
    INFO(serialize(*r));
    REQUIRE(r->kind == MessageKind::kErrorResponse);
    return r->error.code;
  }
  Json initialize(const std::string& version = "2025-11-25") {
    Json params = {{"protocolVersion", version},
                   {"capabilities", Json::object()},
                   {"clientInfo", {{"name", "catch2"}, {"version", "0"}}}};
    Json result = ok_call("initialize", params).result;
    session->handle_notification(Message::notification("notifications/initialized"));
    return result;
  }
  Json call_tool(const std::string& name, Json args = Json::object()) {
    return ok_call("tools/call", Json{{"name", name}, {"arguments", std::move(args)}}).result;
  }
};

TEST_CASE("ServerSession: requests before initialize are refused, ping is answered",
          "[mcp][unit]") {
  Fixture f;
  CHECK(f.error_code("tools/list") == kInvalidRequest);
  CHECK(f.error_code("tools/call", Json{{"name", "echo"}}) == kInvalidRequest);
  CHECK(f.ok_call("ping").result == Json::object());
  CHECK(f.session->state() == ServerSession::State::kAwaitingInitialize);
  f.server.notify_tools_list_changed();
  CHECK(f.recorder.posted.empty());  // nothing is sent to a session that is not initialized
}

TEST_CASE("ServerSession: initialize answers serverInfo, capabilities and instructions",
          "[mcp][unit]") {
  Fixture f;
  Json result = f.initialize();
  CHECK(result["protocolVersion"] == "2025-11-25");
  CHECK(result["serverInfo"] == Json{{"name", "cocoonbox-test"}, {"version", "1.2.3"}});
  CHECK(result["capabilities"] == Json{{"tools", {{"listChanged", true}}}});
  CHECK(result["instructions"] == "Use the tools.");
  CHECK(f.session->initialized());
  CHECK(f.session->client_ready());
  CHECK(f.session->client_info().name == "catch2");
  CHECK(f.ok_call("ping").result == Json::object());

  SECTION("a second initialize is refused") {
    CHECK(f.error_code("initialize", Json{{"protocolVersion", "2025-11-25"}}) == kInvalidRequest);
  }
}

TEST_CASE("ServerSession: version negotiation echoes a supported version, else the newest",
          "[mcp][unit]") {
  for (const char* v : {"2025-11-25", "2025-06-18", "2025-03-26"}) {
    Fixture f;
    CHECK(f.initialize(v)["protocolVersion"] == v);
    CHECK(f.session->protocol_version() == v);
    CHECK(f.session->batches_allowed() == (std::string(v) == "2025-03-26"));
  }
  for (const char* v : {"2024-11-05", "1999-01-01", "latest"}) {
    Fixture f;
    CHECK(f.initialize(v)["protocolVersion"] == "2025-11-25");
  }
}

TEST_CASE("ServerSession: malformed initialize params are invalid params", "[mcp][unit]") {
  Fixture f;
  CHECK(f.error_code("initialize") == kInvalidParams);
  CHECK(f.error_code("initialize", Json::object()) == kInvalidParams);
  CHECK(f.error_code("initialize", Json{{"protocolVersion", 5}}) == kInvalidParams);
  CHECK(f.error_code("initialize", Json{{"protocolVersion", "2025-11-25"}, {"capabilities", 1}}) ==
        kInvalidParams);
  CHECK_FALSE(f.session->initialized());
  // The session can still be initialized properly afterwards.
  CHECK(f.initialize()["protocolVersion"] == "2025-11-25");
}

TEST_CASE("ServerSession: tools/list pages with opaque cursors", "[mcp][unit]") {
  Fixture f;
  f.initialize();
  std::vector<std::string> names;
  Json params = Json::object();
  int pages = 0;
  for (;;) {
    Json page = f.ok_call("tools/list", params).result;
    ++pages;
    REQUIRE(page["tools"].size() <= 2);
    for (const Json& t : page["tools"]) {
      names.push_back(t["name"]);
      CHECK(t["inputSchema"].is_object());
    }
    if (!page.contains("nextCursor")) break;
    params = Json{{"cursor", page["nextCursor"]}};
    REQUIRE(pages < 10);
  }
  CHECK(pages == 4);
  CHECK(names == std::vector<std::string>{"echo", "image", "structured", "fail", "slow", "progress",
                                          "throws"});

  SECTION("the first page carries the tool's schema and annotations") {
    Json first = f.ok_call("tools/list").result["tools"][0];
    CHECK(first["annotations"] == Json{{"readOnlyHint", true}});
    CHECK(first["inputSchema"]["required"] == Json::array({"text"}));
  }
  SECTION("an invalid cursor is invalid params") {
    CHECK(f.error_code("tools/list", Json{{"cursor", "garbage!"}}) == kInvalidParams);
    CHECK(f.error_code("tools/list", Json{{"cursor", encode_tools_cursor(99)}}) == kInvalidParams);
    CHECK(f.error_code("tools/list", Json{{"cursor", 3}}) == kInvalidParams);
  }
  SECTION("a removed tool disappears from the next listing") {
    REQUIRE(f.tools.table.remove("image"));
    Json page = f.ok_call("tools/list").result;
    CHECK(page["tools"][1]["name"] == "structured");
  }
}

TEST_CASE("ServerSession: page size 0 sends every tool at once", "[mcp][unit]") {
  asio::io_context io;
  testing::TestTools tools(io.get_executor());
  ServerOptions options = test_options();
  options.tools_page_size = 0;
  Server server(options, tools.table);
  Recorder recorder;
  auto session = server.open_session(io.get_executor(), recorder, "");
  TransportContext transport;
  auto init = run_sync(
      io, session->handle_request(Message::request(1, "initialize", Json{{"protocolVersion", "x"}}),
                                  recorder, transport));
  REQUIRE(init.has_value());
  auto list =
      run_sync(io, session->handle_request(Message::request(2, "tools/list"), recorder, transport));
  REQUIRE(list.has_value());
  CHECK(list->result["tools"].size() == 7);
  CHECK_FALSE(list->result.contains("nextCursor"));
}

TEST_CASE("ServerSession: tools/call returns text, image and mirrored structured content",
          "[mcp][unit]") {
  Fixture f;
  f.initialize();
  Json echo = f.call_tool("echo", Json{{"text", "hello"}});
  CHECK(echo == Json{{"content", Json::array({{{"type", "text"}, {"text", "hello"}}})}});

  Json image = f.call_tool("image");
  CHECK(image["content"][0]["type"] == "image");
  CHECK(image["content"][0]["mimeType"] == "image/png");
  CHECK(image["content"][0]["data"] == "iVBORw==");

  Json structured = f.call_tool("structured");
  CHECK(structured["structuredContent"] == Json{{"a", 1}});
  CHECK(structured["content"][0]["text"] == R"({"a":1})");

  SECTION("arguments may be omitted") {
    CHECK(f.ok_call("tools/call", Json{{"name", "image"}}).result["content"].size() == 1);
  }
}

TEST_CASE(
    "ServerSession: tool failures are isError results, protocol errors are JSON-RPC "
    "errors",
    "[mcp][unit]") {
  Fixture f;
  f.initialize();
  Json failed = f.call_tool("fail");
  CHECK(failed["isError"] == true);
  CHECK(failed["content"][0]["text"] == "the tool failed on purpose");

  // Bad arguments are a tool execution error the model can correct (2025-11-25).
  Json bad_args = f.call_tool("echo", Json{{"text", 5}});
  CHECK(bad_args["isError"] == true);
  CHECK(bad_args["content"][0]["text"] == "text: must be a string");

  auto unknown = f.call("tools/call", Json{{"name", "nope"}});
  REQUIRE(unknown.has_value());
  CHECK(unknown->error.code == kInvalidParams);
  CHECK(unknown->error.message == "Unknown tool: nope");

  CHECK(f.error_code("tools/call") == kInvalidParams);
  CHECK(f.error_code("tools/call", Json::object()) == kInvalidParams);
  CHECK(f.error_code("tools/call", Json{{"name", 3}}) == kInvalidParams);
  CHECK(f.error_code("tools/call", Json{{"name", "echo"}, {"arguments", "x"}}) == kInvalidParams);

  // A handler that throws is an internal error, and the session keeps working.
  CHECK(f.error_code("tools/call", Json{{"name", "throws"}}) == kInternalError);
  CHECK(f.error_code("no/such/method") == kMethodNotFound);
  CHECK(f.call_tool("echo", Json{{"text", "still here"}})["content"][0]["text"] == "still here");
}

TEST_CASE("ServerSession: progress goes out for a request with a progressToken", "[mcp][unit]") {
  Fixture f;
  f.initialize();
  // slow reports its progress, then waits; cancel it once it waits so the test ends.
  auto cancel_when_waiting = [&]() -> asio::awaitable<void> {
    while (!f.tools.slow_started) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }
    f.session->handle_notification(
        Message::notification("notifications/cancelled", Json{{"requestId", "p1"}}));
  };
  Message req = Message::request("p1", "tools/call",
                                 Json{{"name", "slow"}, {"_meta", {{"progressToken", "tok"}}}});
  using namespace asio::experimental::awaitable_operators;
  auto both = run_sync(f.io, f.session->handle_request(std::move(req), f.recorder, f.transport) &&
                                 cancel_when_waiting());
  CHECK_FALSE(both.has_value());  // cancelled: no response
  REQUIRE(f.recorder.sent.size() == 3);
  for (int i = 0; i < 3; ++i) {
    const Message& n = f.recorder.sent[i];
    CHECK(n.method == "notifications/progress");
    CHECK(n.params["progressToken"] == "tok");
    CHECK(n.params["progress"] == i + 1);
    CHECK(n.params["total"] == 3);
    CHECK(n.params["message"] == "step " + std::to_string(i + 1));
  }
  CHECK(f.tools.slow_cancelled);
  CHECK(f.session->requests_in_progress() == 0);
}

TEST_CASE("ServerSession: notifications/cancelled cancels the handler and no response is sent",
          "[mcp][unit]") {
  Fixture f;
  f.initialize();
  auto cancel_when_waiting = [&]() -> asio::awaitable<void> {
    while (!f.tools.slow_started) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }
    // Unknown ids and malformed cancellations are ignored.
    f.session->handle_notification(
        Message::notification("notifications/cancelled", Json{{"requestId", 42}}));
    f.session->handle_notification(
        Message::notification("notifications/cancelled", Json{{"x", 1}}));
    f.session->handle_notification(Message::notification("notifications/cancelled"));
    CHECK_FALSE(f.tools.slow_cancelled);
    CHECK(f.session->requests_in_progress() == 1);
    f.session->handle_notification(Message::notification(
        "notifications/cancelled", Json{{"requestId", 7}, {"reason", "user"}}));
  };
  Message req = Message::request(7, "tools/call", Json{{"name", "slow"}});
  using namespace asio::experimental::awaitable_operators;
  auto response =
      run_sync(f.io, f.session->handle_request(std::move(req), f.recorder, f.transport) &&
                         cancel_when_waiting());
  CHECK_FALSE(response.has_value());
  CHECK(f.tools.slow_cancelled);
  CHECK(f.recorder.sent.empty());  // no progress token: no progress
  // The id is free again, and the session still answers.
  CHECK(f.ok_call("ping").result == Json::object());

  SECTION("close() cancels requests in progress too") {
    f.tools.slow_started = false;
    f.tools.slow_cancelled = false;
    auto close_when_waiting = [&]() -> asio::awaitable<void> {
      while (!f.tools.slow_started) {
        Status waited = co_await f.tools.slow_signal->wait();
        REQUIRE(waited.ok());
      }
      f.session->close();
    };
    Message again = Message::request(8, "tools/call", Json{{"name", "slow"}});
    auto r = run_sync(f.io, f.session->handle_request(std::move(again), f.recorder, f.transport) &&
                                close_when_waiting());
    CHECK_FALSE(r.has_value());
    CHECK(f.tools.slow_cancelled);
    CHECK(f.error_code("ping") == kInvalidRequest);  // closed: everything is refused
  }
}

TEST_CASE("ServerSession: a request id already in progress is refused", "[mcp][unit]") {
  Fixture f;
  f.initialize();
  std::optional<Message> duplicate;
  auto second = [&]() -> asio::awaitable<void> {
    while (!f.tools.slow_started) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }
    duplicate =
        co_await f.session->handle_request(Message::request(5, "ping"), f.recorder, f.transport);
    f.session->handle_notification(
        Message::notification("notifications/cancelled", Json{{"requestId", 5}}));
  };
  using namespace asio::experimental::awaitable_operators;
  auto first = run_sync(
      f.io, f.session->handle_request(Message::request(5, "tools/call", Json{{"name", "slow"}}),
                                      f.recorder, f.transport) &&
                second());
  CHECK_FALSE(first.has_value());
  REQUIRE(duplicate.has_value());
  CHECK(duplicate->error.code == kInvalidRequest);
}

TEST_CASE("Server: list_changed reaches every initialized session", "[mcp][unit]") {
  Fixture f;
  f.initialize();
  Recorder other_recorder;
  auto other = f.server.open_session(f.io.get_executor(), other_recorder, "s2");
  CHECK(f.server.session_count() == 2);
  f.server.notify_tools_list_changed();
  REQUIRE(f.recorder.posted.size() == 1);
  CHECK(f.recorder.posted[0].method == "notifications/tools/list_changed");
  CHECK(f.recorder.posted[0].kind == MessageKind::kNotification);
  CHECK(other_recorder.posted.empty());  // not initialized
  f.session->notify("notifications/message", Json{{"level", "info"}});
  CHECK(f.recorder.posted.size() == 2);
  other.reset();
  CHECK(f.server.session_count() == 1);
}

TEST_CASE("Server: set_method overrides tools/call and a fallback takes unknown methods",
          "[mcp][unit]") {
  Fixture f;
  f.server.set_method("tools/call", [&](RequestContext& ctx) -> asio::awaitable<Reply> {
    co_return Reply::failure(-32050, "forwarded: " + ctx.params()["name"].get<std::string>(),
                             Json{{"remote", true}});
  });
  f.server.set_fallback([&](RequestContext& ctx) -> asio::awaitable<Reply> {
    co_return Reply::success(Json{{"method", ctx.method()}, {"params", ctx.params()}});
  });
  std::vector<std::string> notes;
  f.server.set_notification_handler(
      [&](ServerSession&, const Message& m) { notes.push_back(m.method); });
  // Owner methods run only after initialize.
  CHECK(f.error_code("custom/x") == kInvalidRequest);
  f.initialize();
  auto forwarded = f.call("tools/call", Json{{"name", "remote_tool"}});
  REQUIRE(forwarded.has_value());
  CHECK(forwarded->error.code == -32050);
  CHECK(forwarded->error.message == "forwarded: remote_tool");
  CHECK(forwarded->error.data == Json{{"remote", true}});
  Json echoed = f.ok_call("custom/x", Json{{"a", 1}}).result;
  CHECK(echoed == Json{{"method", "custom/x"}, {"params", {{"a", 1}}}});
  f.session->handle_notification(Message::notification("notifications/roots/list_changed"));
  CHECK(notes == std::vector<std::string>{"notifications/roots/list_changed"});
}

TEST_CASE("RequestContext: headers and principal come from the transport", "[mcp][unit]") {
  Fixture f;
  f.initialize();
  http::RequestHead head;
  head.method = "POST";
  head.headers.push_back(http::Header{"authorization", "Bearer t0k"});
  f.transport.http = &head;
  f.transport.principal = "user-1";
  std::string auth;
  std::string principal;
  Tool who;
  who.name = "whoami";
  f.tools.table.add(who,
                    [&](RequestContext& ctx, const Json&) -> asio::awaitable<Result<ToolResult>> {
                      const std::string* h = ctx.header("authorization");
                      auth = h != nullptr ? *h : "";
                      principal = ctx.principal();
                      co_return ToolResult::text("ok");
                    });
  f.call_tool("whoami");
  CHECK(auth == "Bearer t0k");
  CHECK(principal == "user-1");
}

TEST_CASE("tools cursor: encode and decode round-trip, garbage is refused", "[mcp][unit]") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{12345}}) {
    auto back = decode_tools_cursor(encode_tools_cursor(n));
    REQUIRE(back.ok());
    CHECK(*back == n);
  }
  CHECK_FALSE(decode_tools_cursor("").ok());
  CHECK_FALSE(decode_tools_cursor("!!").ok());
  CHECK_FALSE(decode_tools_cursor(base64url_encode("tools:")).ok());
  CHECK_FALSE(decode_tools_cursor(base64url_encode("tools:1x")).ok());
  CHECK_FALSE(decode_tools_cursor(base64url_encode("other:1")).ok());
}

}  // namespace
}  // namespace cb::mcp
