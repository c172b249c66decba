#include "mcp/stdio.h"

#include "support/run_sync.h"
#include "test_tools.h"

#include <catch2/catch.hpp>

#include <deque>
#include <fcntl.h>
#include <signal.h>
#include <string>
#include <unistd.h>

namespace cb::mcp {
namespace {

using cb::test::run_sync;
using Descriptor = net::Token::as_default_on_t<asio::posix::stream_descriptor>;

TEST_CASE("LineSplitter: lines end at LF, CR before LF is dropped, long lines are flagged",
          "[mcp][unit]") {
  LineSplitter s(8);
  auto lines = s.feed("ab\ncd\r\nef");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].text == "ab");
  CHECK(lines[1].text == "cd");
  lines = s.feed("g\n0123456789\nxy\n");
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].text == "efg");
  CHECK(lines[1].too_long);
  CHECK(lines[1].text.empty());
  CHECK(lines[2].text == "xy");
  // A long line split across feeds is still one flagged line.
  CHECK(s.feed("01234").empty());
  CHECK(s.feed("56789").empty());
  lines = s.feed("ab\nok");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].too_long);
  lines = s.finish();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].text == "ok");
  CHECK(s.finish().empty());
}

// The client end of two pipes: writes requests to the server's stdin, reads its stdout.
class PipeClient {
 public:
  PipeClient(const net::Executor& ex, int to_server, int from_server)
      : to_server_(ex, to_server), from_server_(ex, from_server), splitter_(1 << 20) {}

  asio::awaitable<void> send(std::string line) {
    line.push_back('\n');
    auto [ec, n] = co_await asio::async_write(to_server_, asio::buffer(line));
    REQUIRE_FALSE(ec);
  }
  asio::awaitable<void> send(const Message& m) { co_await send(serialize(m)); }

  // The next line the server wrote, parsed; a discarded Json at the end of output.
  asio::awaitable<Json> next() {
    while (lines_.empty()) {
      char buf[4096];
      auto [ec, n] = co_await from_server_.async_read_some(asio::buffer(buf));
      if (ec) co_return Json(Json::value_t::discarded);
      for (auto& l : splitter_.feed(std::string_view(buf, n))) lines_.push_back(l.text);
    }
    std::string line = std::move(lines_.front());
    lines_.pop_front();
    co_return Json::parse(line);
  }

  void close_input() { to_server_.close(); }
  void close_output() { from_server_.close(); }

 private:
  Descriptor to_server_;
  Descriptor from_server_;
  LineSplitter splitter_;
  std::deque<std::string> lines_;
};

struct Pipes {
  int c2s[2] = {-1, -1};
  int s2c[2] = {-1, -1};
  Pipes() {
    REQUIRE(::pipe2(c2s, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(s2c, O_CLOEXEC) == 0);
  }
  ~Pipes() {
    // The server side ends; the client side is owned by PipeClient.
    ::close(c2s[0]);
    ::close(s2c[1]);
  }
};

struct StdioFixture {
  asio::io_context io;
  testing::TestTools tools{io.get_executor()};
  ServerOptions options = [] {
    ServerOptions o;
    o.info.name = "stdio-test";
    o.info.version = "1";
    o.tools_page_size = 4;
    return o;
  }();
  Server server{options, tools.table};
  Pipes pipes;
  PipeClient client{io.get_executor(), pipes.c2s[1], pipes.s2c[0]};

  StdioOptions stdio_options() const {
    StdioOptions o;
    o.in_fd = pipes.c2s[0];
    o.out_fd = pipes.s2c[1];
    o.max_line_bytes = 4096;
    return o;
  }
  // Runs the server and |driver| together; returns what serve_stdio returned.
  Status run(asio::awaitable<void> driver) {
    using namespace asio::experimental::awaitable_operators;
    return run_sync(io,
                    serve_stdio(server, io.get_executor(), stdio_options()) && std::move(driver));
  }
};

Json init_params(const std::string& version) {
  return Json{{"protocolVersion", version},
              {"capabilities", Json::object()},
              {"clientInfo", {{"name", "pipe"}, {"version", "0"}}}};
}

// Messages are built outside the coroutine bodies: gcc 12 miscompiles braced initializer
// lists holding string literals inside coroutines.
Message init_request(int id, const std::string& version) {
  return Message::request(id, "initialize", init_params(version));
}
Message plain_request(Json id, const std::string& method) { return Message::request(id, method); }
Message echo_request(int id, const std::string& text) {
  return Message::request(id, "tools/call",
                          Json{{"name", "echo"}, {"arguments", {{"text", text}}}});
}
Message slow_request(int id, bool with_token) {
  Json params = {{"name", "slow"}};
  if (with_token) params["_meta"] = Json{{"progressToken", 99}};
  return Message::request(id, "tools/call", params);
}
Message cancel_notification(int id) {
  return Message::notification("notifications/cancelled", Json{{"requestId", id}});
}
Message initialized_notification() { return Message::notification("notifications/initialized"); }

TEST_CASE("serve_stdio: a whole session over newline-delimited JSON-RPC", "[mcp][unit]") {
  StdioFixture f;
  auto driver = [&]() -> asio::awaitable<void> {
    // Before initialize: refused.
    co_await f.client.send(plain_request(1, "tools/list"));
    Json refused = co_await f.client.next();
    CHECK(refused["error"]["code"] == kInvalidRequest);
    CHECK(refused["id"] == 1);

    co_await f.client.send(init_request(2, "2025-06-18"));
    Json init = co_await f.client.next();
    CHECK(init["id"] == 2);
    CHECK(init["result"]["protocolVersion"] == "2025-06-18");
    CHECK(init["result"]["capabilities"]["tools"]["listChanged"] == true);
    co_await f.client.send(initialized_notification());

    // Blank lines are skipped; garbage is a parse error with id null; a line over the limit
    // is refused without killing the session.
    std::string blank_line = "   ";
    co_await f.client.send(blank_line);
    std::string garbage = "{not json";
    co_await f.client.send(garbage);
    Json parse_error = co_await f.client.next();
    CHECK(parse_error["error"]["code"] == kParseError);
    CHECK(parse_error["id"].is_null());
    std::string huge(5000, 'x');
    co_await f.client.send(huge);
    Json too_long = co_await f.client.next();
    CHECK(too_long["error"]["code"] == kInvalidRequest);

    co_await f.client.send(plain_request("l", "tools/list"));
    Json list = co_await f.client.next();
    CHECK(list["result"]["tools"].size() == 4);
    CHECK(list["result"].contains("nextCursor"));

    co_await f.client.send(echo_request(3, "hi"));
    Json echo = co_await f.client.next();
    CHECK(echo["result"]["content"][0]["text"] == "hi");

    // A slow call reports progress on stdout; a cancellation stops it and no response comes;
    // a ping sent meanwhile is answered (requests run concurrently).
    co_await f.client.send(slow_request(4, true));
    for (int i = 1; i <= 3; ++i) {
      Json progress = co_await f.client.next();
      CHECK(progress["method"] == "notifications/progress");
      CHECK(progress["params"]["progressToken"] == 99);
      CHECK(progress["params"]["progress"] == i);
    }
    co_await f.client.send(plain_request(5, "ping"));
    Json pong = co_await f.client.next();
    CHECK(pong["id"] == 5);
    co_await f.client.send(cancel_notification(4));
    // The owner announces a change: it arrives as a notification line, and nothing for the
    // cancelled request comes before it.
    while (!f.tools.slow_cancelled) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }
    f.server.notify_tools_list_changed();
    Json changed = co_await f.client.next();
    CHECK(changed["method"] == "notifications/tools/list_changed");
    CHECK_FALSE(changed.contains("id"));

    // A batch is refused in 2025-06-18.
    std::string batch_line = R"([{"jsonrpc":"2.0","id":6,"method":"ping"}])";
    co_await f.client.send(batch_line);
    Json batch = co_await f.client.next();
    CHECK(batch["error"]["code"] == kInvalidRequest);

    f.client.close_input();  // serve_stdio returns once it read the end
  };
  Status st = f.run(driver());
  CHECK(st.ok());
  CHECK(f.server.session_count() == 0);
}

TEST_CASE("serve_stdio: batches work after a 2025-03-26 initialize", "[mcp][unit]") {
  StdioFixture f;
  auto driver = [&]() -> asio::awaitable<void> {
    co_await f.client.send(init_request(1, "2025-03-26"));
    Json init = co_await f.client.next();
    CHECK(init["result"]["protocolVersion"] == "2025-03-26");
    std::string batch =
        R"([{"jsonrpc":"2.0","method":"notifications/initialized"},)"
        R"({"jsonrpc":"2.0","id":2,"method":"ping"},)"
        R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"b"}}},)"
        R"(17])";
    co_await f.client.send(batch);
    Json replies = co_await f.client.next();
    REQUIRE(replies.is_array());
    REQUIRE(replies.size() == 3);
    CHECK(replies[0]["id"] == 2);
    CHECK(replies[1]["result"]["content"][0]["text"] == "b");
    CHECK(replies[2]["error"]["code"] == kInvalidRequest);
    // A batch of notifications only gets no reply at all: the next line answers the ping.
    std::string notes_only = R"([{"jsonrpc":"2.0","method":"notifications/initialized"}])";
    co_await f.client.send(notes_only);
    co_await f.client.send(plain_request(4, "ping"));
    Json pong = co_await f.client.next();
    CHECK(pong["id"] == 4);
    f.client.close_input();
  };
  CHECK(f.run(driver()).ok());
}

TEST_CASE("serve_stdio: the end of input waits for requests in progress", "[mcp][unit]") {
  StdioFixture f;
  auto driver = [&]() -> asio::awaitable<void> {
    co_await f.client.send(init_request(1, "2025-11-25"));
    (void)co_await f.client.next();
    co_await f.client.send(echo_request(2, "last words"));
    f.client.close_input();
    Json last = co_await f.client.next();
    CHECK(last["result"]["content"][0]["text"] == "last words");
  };
  CHECK(f.run(driver()).ok());
}

TEST_CASE("serve_stdio: a client that stops reading ends the session with kUnavailable",
          "[mcp][unit]") {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old = {};
  REQUIRE(::sigaction(SIGPIPE, &ignore, &old) == 0);
  StdioFixture f;
  auto driver = [&]() -> asio::awaitable<void> {
    co_await f.client.send(init_request(1, "2025-11-25"));
    (void)co_await f.client.next();
    // A slow call is in progress when the output goes away: it is cancelled.
    co_await f.client.send(slow_request(2, false));
    while (!f.tools.slow_started) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }
    f.client.close_output();
    co_await f.client.send(plain_request(3, "ping"));  // its answer hits the closed pipe
  };
  Status st = f.run(driver());
  CHECK(st.code() == Code::kUnavailable);
  CHECK(f.tools.slow_cancelled);
  f.client.close_input();
  ::sigaction(SIGPIPE, &old, nullptr);
}

}  // namespace
}  // namespace cb::mcp
