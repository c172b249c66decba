#include "http/server.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

namespace cb::http {
namespace {

using test::run_sync;

// A server on 127.0.0.1:0 with |router|, a client connection to it, and |body| run against
// both; the server is shut down afterwards so run_sync returns.
template <typename F>
void with_server(Router& router, F body, ServerOptions options = {}) {
  asio::io_context io;
  Server server(io.get_executor(), router, options);
  REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
  server.start();
  run_sync(io, [&]() -> asio::awaitable<void> {
    DialOptions d;
    d.host = "127.0.0.1";
    d.port = server.port();
    auto conn = co_await dial_h2(io.get_executor(), d, net::after(std::chrono::seconds(5)));
    REQUIRE(conn.ok());
    co_await body(**conn);
    (*conn)->close();
    co_await server.shutdown(net::after(std::chrono::seconds(2)));
  }());
}

RequestHead get(std::string path, std::string method = "GET") {
  RequestHead h;
  h.method = std::move(method);
  h.path = std::move(path);
  h.authority = "localhost";
  return h;
}

TEST_CASE("H2Connection: a GET gets the handler's response with headers and body", "[http][unit]") {
  Router router;
  router.handle("GET", "/hello", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 200, "text/plain", "hi " + req.head().authority);
  });
  with_server(router, [](H2Connection& conn) -> asio::awaitable<void> {
    auto s = conn.open_stream(get("/hello"), true);
    REQUIRE(s.ok());
    auto r1 = co_await (*s)->wait_headers();
    REQUIRE(r1.ok());
    CHECK((*s)->status() == 200);
    REQUIRE(find_header((*s)->headers(), "content-type") != nullptr);
    std::string body;
    for (;;) {
      auto chunk = co_await (*s)->read();
      REQUIRE(chunk.ok());
      if (chunk->empty()) break;
      body += *chunk;
    }
    CHECK(body == "hi localhost");

    auto missing = conn.open_stream(get("/nope"), true);
    auto r2 = co_await (*missing)->wait_headers();
    REQUIRE(r2.ok());
    CHECK((*missing)->status() == 404);
    auto wrong = conn.open_stream(get("/hello", "DELETE"), true);
    auto r3 = co_await (*wrong)->wait_headers();
    REQUIRE(r3.ok());
    CHECK((*wrong)->status() == 405);
    CHECK(*find_header((*wrong)->headers(), "allow") == "GET");
  });
}

TEST_CASE("H2Connection: 24 MiB echo streams through flow control both ways with trailers",
          "[http][unit]") {
  size_t server_got = 0;
  Router router;
  router.handle("POST", "/echo", [&](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, {}, false);
    INFO(sent.to_string());
    REQUIRE(sent.ok());
    for (;;) {
      auto chunk = co_await req.read();
      REQUIRE(chunk.ok());
      if (chunk->empty()) break;
      server_got += chunk->size();
      auto r4 = co_await req.write(*chunk, false);
      REQUIRE(r4.ok());
    }
    Headers t;
    t.push_back(Header{std::string("x-done"), std::string("yes")});
    Status finished = co_await req.finish(t);
    INFO(finished.to_string());
    REQUIRE(finished.ok());
  });
  with_server(router, [&](H2Connection& conn) -> asio::awaitable<void> {
    auto s = conn.open_stream(get("/echo", "POST"), false);
    REQUIRE(s.ok());
    std::string block(1 << 20, 'x');
    for (size_t i = 0; i < block.size(); ++i) block[i] = char('a' + i % 26);
    size_t received = 0;
    bool ok = true;
    // Writer and reader run concurrently: the server echoes while we still send.
    auto writer = [&]() -> asio::awaitable<void> {
      for (int i = 0; i < 24; ++i) {
        Status awaited = co_await (*s)->write(block, i == 23);
        if (!awaited.ok()) ok = false;
      }
    };
    asio::co_spawn(co_await asio::this_coro::executor, writer(), asio::detached);
    auto r5 = co_await (*s)->wait_headers();
    REQUIRE(r5.ok());
    for (;;) {
      auto chunk = co_await (*s)->read();
      REQUIRE(chunk.ok());
      if (chunk->empty()) break;
      for (size_t i = 0; i < chunk->size(); ++i) {
        if ((*chunk)[i] != char('a' + ((received + i) % (1 << 20)) % 26)) ok = false;
      }
      received += chunk->size();
    }
    CHECK(ok);
    CHECK(server_got == 24u << 20);
    CHECK(received == 24u << 20);
    REQUIRE(find_header((*s)->trailers(), "x-done") != nullptr);
  });
}

TEST_CASE("H2Connection: a client reset cancels the server handler", "[http][unit]") {
  bool handler_saw_cancel = false;
  Router router;
  router.handle("POST", "/wait", [&](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await req.send_headers(200, {}, false);
    auto r = co_await req.read();  // the client never sends: only a reset ends this
    handler_saw_cancel = !r.ok() && r.status().code() == Code::kCancelled;
  });
  with_server(router, [&](H2Connection& conn) -> asio::awaitable<void> {
    auto s = conn.open_stream(get("/wait", "POST"), false);
    auto r6 = co_await (*s)->wait_headers();
    REQUIRE(r6.ok());
    (*s)->reset();
    co_await (*s)->wait_closed();
    auto r7 = co_await conn.ping(net::after(std::chrono::seconds(2)));
    REQUIRE(r7.ok());
    auto r = co_await (*s)->read();
    CHECK(r.status().code() == Code::kCancelled);
  });
  CHECK(handler_saw_cancel);
}

TEST_CASE("H2Connection: ping round-trips and a closed connection fails pending streams",
          "[http][unit]") {
  Router router;
  router.handle("GET", "/hang", [](ServerRequest& req) -> asio::awaitable<void> {
    net::Signal never(co_await asio::this_coro::executor);
    (void)co_await never.wait();  // cancelled when the connection dies
  });
  with_server(router, [](H2Connection& conn) -> asio::awaitable<void> {
    auto r8 = co_await conn.ping(net::after(std::chrono::seconds(2)));
    REQUIRE(r8.ok());
    auto s = conn.open_stream(get("/hang"), true);
    REQUIRE(s.ok());
    net::Timer t(co_await asio::this_coro::executor, net::after(std::chrono::milliseconds(50)));
    co_await t.async_wait();
    conn.close();
    auto r = co_await (*s)->wait_headers();
    CHECK(r.code() == Code::kUnavailable);
  });
}

}  // namespace
}  // namespace cb::http
