#include "http/relay.h"

#include "http/http1_client.h"
#include "http/server.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

namespace cb::http {
namespace {

using test::run_sync;

Header field(std::string name, std::string value) {
  return Header{std::move(name), std::move(value)};
}

// backend <- relay server <- client; the relay adds x-relayed and strips authorization.
struct Chain {
  asio::io_context io;
  Router backend_router;
  Router edge_router;
  std::unique_ptr<Server> backend;
  std::unique_ptr<Server> edge;
  std::shared_ptr<H2Connection> upstream;

  void start() {
    backend = std::make_unique<Server>(io.get_executor(), backend_router, ServerOptions{});
    REQUIRE(backend->listen_tcp("127.0.0.1", 0).ok());
    backend->start();
    edge_router.handle_prefix("", "/", [this](ServerRequest& req) -> asio::awaitable<void> {
      if (!upstream || !upstream->accepting_streams()) {
        DialOptions d;
        d.host = "127.0.0.1";
        d.port = backend->port();
        auto c = co_await dial_h2(io.get_executor(), d, net::after(std::chrono::seconds(2)));
        REQUIRE(c.ok());
        upstream = *c;
      }
      RequestHead head = req.head();
      std::erase_if(head.headers, [](const Header& h) { return h.name == "authorization"; });
      head.headers.push_back(field("x-relayed", "1"));
      (void)co_await relay(req, *upstream, head);
    });
    edge = std::make_unique<Server>(io.get_executor(), edge_router, ServerOptions{});
    REQUIRE(edge->listen_tcp("127.0.0.1", 0).ok());
    edge->start();
  }

  template <typename F>
  void run(F body) {
    run_sync(io, [&]() -> asio::awaitable<void> {
      DialOptions d;
      d.host = "127.0.0.1";
      d.port = edge->port();
      auto conn = co_await dial_h2(io.get_executor(), d, net::after(std::chrono::seconds(2)));
      REQUIRE(conn.ok());
      co_await body(**conn);
      (*conn)->close();
      if (upstream) upstream->close();
      co_await edge->shutdown(net::after(std::chrono::seconds(1)));
      co_await backend->shutdown(net::after(std::chrono::seconds(1)));
    }());
  }
};

RequestHead post(std::string path) {
  RequestHead h;
  h.method = "POST";
  h.path = std::move(path);
  h.authority = "edge";
  h.headers.push_back(field("authorization", "Bearer secret"));
  return h;
}

TEST_CASE("relay: body, headers and trailers cross both ways; the head is rewritten",
          "[http][unit]") {
  Chain chain;
  bool saw_auth = true, saw_relayed = false;
  chain.backend_router.handle("POST", "/echo", [&](ServerRequest& req) -> asio::awaitable<void> {
    saw_auth = find_header(req.head().headers, "authorization") != nullptr;
    saw_relayed = find_header(req.head().headers, "x-relayed") != nullptr;
    Headers h;
    h.push_back(field("x-backend", "yes"));
    (void)co_await req.send_headers(200, h, false);
    for (;;) {
      auto chunk = co_await req.read();
      if (!chunk.ok() || chunk->empty()) break;
      (void)co_await req.write(*chunk, false);
    }
    Headers t;
    t.push_back(field("grpc-status", "0"));
    (void)co_await req.finish(t);
  });
  chain.start();
  chain.run([&](H2Connection& conn) -> asio::awaitable<void> {
    auto s = conn.open_stream(post("/echo"), false);
    REQUIRE(s.ok());
    std::string big(3 << 20, 'q');
    Status w = co_await (*s)->write(big, true);
    REQUIRE(w.ok());
    Status h = co_await (*s)->wait_headers();
    REQUIRE(h.ok());
    CHECK((*s)->status() == 200);
    CHECK(find_header((*s)->headers(), "x-backend") != nullptr);
    size_t got = 0;
    for (;;) {
      auto chunk = co_await (*s)->read();
      REQUIRE(chunk.ok());
      if (chunk->empty()) break;
      got += chunk->size();
    }
    CHECK(got == big.size());
    REQUIRE(find_header((*s)->trailers(), "grpc-status") != nullptr);
  });
  CHECK_FALSE(saw_auth);
  CHECK(saw_relayed);
}

TEST_CASE("relay: an HTTP/1.1 client's connection-specific fields stay off HTTP/2",
          "[http][unit]") {
  // Node's fetch sends "connection: keep-alive"; nghttp2 refuses such a field (RFC 9113
  // §8.2.2), which made every MCP request of the TypeScript SDK fail at the edge.
  Chain chain;
  Headers seen;
  chain.backend_router.handle("POST", "/echo", [&](ServerRequest& req) -> asio::awaitable<void> {
    seen = req.head().headers;
    (void)co_await respond(req, 200, "text/plain", "fine");
  });
  chain.start();
  run_sync(chain.io, [&]() -> asio::awaitable<void> {
    Http1DialOptions d;
    d.host = "127.0.0.1";
    d.port = chain.edge->port();
    auto c = co_await dial_http1(chain.io.get_executor(), d, net::after(std::chrono::seconds(2)));
    REQUIRE(c.ok());
    Headers h;
    h.push_back(field("connection", "keep-alive, X-Hop"));
    h.push_back(field("keep-alive", "timeout=5"));
    h.push_back(field("x-hop", "1"));
    h.push_back(field("te", "gzip"));
    h.push_back(field("x-kept", "yes"));
    auto r =
        co_await (*c)->request("POST", "/echo", h, "body", net::after(std::chrono::seconds(5)));
    REQUIRE(r.ok());
    CHECK(r->status == 200);
    CHECK(r->body == "fine");
    c->reset();
    if (chain.upstream) chain.upstream->close();
    co_await chain.edge->shutdown(net::after(std::chrono::seconds(1)));
    co_await chain.backend->shutdown(net::after(std::chrono::seconds(1)));
  }());
  for (const char* gone : {"connection", "keep-alive", "x-hop", "te"}) {
    INFO(gone);
    CHECK(find_header(seen, gone) == nullptr);
  }
  CHECK(find_header(seen, "x-kept") != nullptr);
}

TEST_CASE("relay: a headers-only answer stays headers-only", "[http][unit]") {
  Chain chain;
  chain.backend_router.handle("POST", "/err", [](ServerRequest& req) -> asio::awaitable<void> {
    Headers h;
    h.push_back(field("grpc-status", "5"));
    (void)co_await req.send_headers(200, h, true);
  });
  chain.start();
  chain.run([&](H2Connection& conn) -> asio::awaitable<void> {
    auto s = conn.open_stream(post("/err"), true);
    REQUIRE(s.ok());
    Status h = co_await (*s)->wait_headers();
    REQUIRE(h.ok());
    CHECK((*s)->end_of_stream_received());
    REQUIRE(find_header((*s)->headers(), "grpc-status") != nullptr);
    CHECK(*find_header((*s)->headers(), "grpc-status") == "5");
  });
}

TEST_CASE("relay: a client reset reaches the upstream handler as cancellation", "[http][unit]") {
  Chain chain;
  bool backend_cancelled = false;
  chain.backend_router.handle("POST", "/wait", [&](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await req.send_headers(200, {}, false);
    auto r = co_await req.read();  // the client never sends: only a reset ends this
    backend_cancelled = !r.ok();
  });
  chain.start();
  chain.run([&](H2Connection& conn) -> asio::awaitable<void> {
    auto s = conn.open_stream(post("/wait"), false);
    REQUIRE(s.ok());
    Status h = co_await (*s)->wait_headers();
    REQUIRE(h.ok());
    (*s)->reset();
    // A ping round trip on each hop lets the resets travel before shutdown.
    Status p = co_await conn.ping(net::after(std::chrono::seconds(2)));
    REQUIRE(p.ok());
    Status p2 = co_await chain.upstream->ping(net::after(std::chrono::seconds(2)));
    REQUIRE(p2.ok());
  });
  CHECK(backend_cancelled);
}

}  // namespace
}  // namespace cb::http
