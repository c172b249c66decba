#include "http/http1_client.h"
#include "http/server.h"
#include "http/unparsed.h"
#include "net/signal.h"
#include "net/tls.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdlib.h>
#include <string>
#include <system_error>

namespace cb::http {
namespace {

using namespace std::chrono_literals;
using test::run_sync;

// Builds fields from name, value pairs. A function call, because gcc 12 miscompiles braced
// aggregates holding string literals inside coroutine bodies.
template <typename... A>
Headers fields(A... args) {
  static_assert(sizeof...(A) % 2 == 0);
  std::vector<std::string> flat = {std::string(args)...};
  Headers h;
  for (size_t i = 0; i < flat.size(); i += 2) h.push_back(Header{flat[i], flat[i + 1]});
  return h;
}

// A server on 127.0.0.1:0 serving |router|, |body| run against it, then a graceful shutdown
// so that run_sync returns.
template <typename F>
void with_server(Router& router, F body, ServerOptions options = {}) {
  asio::io_context io;
  Server server(io.get_executor(), router, options);
  REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
  server.start();
  run_sync(io, [&]() -> asio::awaitable<void> {
    // A failed REQUIRE throws out of |body|; shut down anyway so that run_sync returns.
    std::exception_ptr failure;
    try {
      co_await body(server);
    } catch (...) {
      failure = std::current_exception();
    }
    co_await server.shutdown(net::after(2s));
    if (failure) std::rethrow_exception(failure);
  }());
}

asio::awaitable<std::unique_ptr<Http1Client>> dial(uint16_t port) {
  Http1DialOptions d;
  d.host = "127.0.0.1";
  d.port = port;
  auto c = co_await dial_http1(co_await asio::this_coro::executor, d, net::after(5s));
  REQUIRE(c.ok());
  co_return std::move(*c);
}

asio::awaitable<std::unique_ptr<net::Stream>> dial_raw(uint16_t port) {
  auto s =
      co_await net::dial_tcp(co_await asio::this_coro::executor, "127.0.0.1", port, net::after(5s));
  REQUIRE(s.ok());
  co_return net::make_stream(std::move(*s));
}

asio::awaitable<Status> send_raw(net::Stream& s, std::string data) {
  Status st = co_await s.write(data);
  co_return st;
}

// Reads until the peer closes (or 5 s pass, which fails the test).
asio::awaitable<std::string> read_until_close(net::Stream& s) {
  std::string out;
  std::vector<char> buf(16384);
  auto deadline = net::after(5s);
  for (;;) {
    auto n = co_await net::with_deadline(s.read_some(buf), deadline, "read");
    if (!n.ok()) {
      REQUIRE(n.status().code() != Code::kDeadlineExceeded);
      co_return out;
    }
    out.append(buf.data(), *n);
  }
}

// Reads into |buffer| until it contains |needle|; returns false on close or after 5 s.
asio::awaitable<bool> read_until(net::Stream& s, std::string& buffer, std::string_view needle) {
  std::vector<char> buf(16384);
  auto deadline = net::after(5s);
  while (buffer.find(needle) == std::string::npos) {
    auto n = co_await net::with_deadline(s.read_some(buf), deadline, "read");
    if (!n.ok()) co_return false;
    buffer.append(buf.data(), *n);
  }
  co_return true;
}

size_t count(std::string_view text, std::string_view needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string_view::npos;
       pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

std::vector<std::string> echo_pieces() {
  return {std::string("first piece"), std::string("second"), std::string(40000, 'z')};
}

void add_hello(Router& router) {
  router.handle("GET", "/hello", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 200, "text/plain", "hello world\n");
  });
  router.handle("HEAD", "/hello", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 200, "text/plain", "hello world\n");
  });
}

// Echoes the request body as it arrives, in a chunked response with a trailer.
void add_echo(Router& router) {
  router.handle("POST", "/echo", [](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, fields("content-type", "text/plain"), false);
    if (!sent.ok()) co_return;
    size_t total = 0;
    for (;;) {
      auto piece = co_await req.read();
      if (!piece.ok()) co_return;
      if (piece->empty()) break;
      total += piece->size();
      Status wrote = co_await req.write(*piece, false);
      if (!wrote.ok()) co_return;
    }
    (void)co_await req.finish(fields("x-echoed", std::to_string(total)));
  });
}

TEST_CASE("Http1Server: a GET gets the handler's content-length response", "[http][unit]") {
  Router router;
  add_hello(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto client = co_await dial(server.port());
    auto r = co_await client->request("GET", "/hello", {}, "", net::after(5s));
    REQUIRE(r.ok());
    CHECK(r->status == 200);
    CHECK(r->reason == "OK");
    CHECK(r->body == "hello world\n");
    REQUIRE(find_header(r->headers, "content-length") != nullptr);
    CHECK(*find_header(r->headers, "content-length") == "12");
    CHECK(find_header(r->headers, "transfer-encoding") == nullptr);
    CHECK(r->keep_alive);

    auto missing = co_await client->request("GET", "/nope", {}, "", net::after(5s));
    REQUIRE(missing.ok());
    CHECK(missing->status == 404);
    auto wrong = co_await client->request("DELETE", "/hello", {}, "", net::after(5s));
    REQUIRE(wrong.ok());
    CHECK(wrong->status == 405);
    REQUIRE(find_header(wrong->headers, "allow") != nullptr);
  });
}

TEST_CASE("Http1Server: the handler sees method, path, authority, scheme and fields",
          "[http][unit]") {
  RequestHead seen;
  Router router;
  router.handle_prefix("", "/", [&](ServerRequest& req) -> asio::awaitable<void> {
    seen = req.head();
    (void)co_await respond(req, 200, "text/plain", req.is_http2() ? "h2" : "h1");
  });
  with_server(router, [&](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent =
        co_await send_raw(*raw,
                          "PUT /x/y?q=1 HTTP/1.1\r\nHost: example.test:81\r\nX-Thing: a\r\n"
                          "Content-Length: 0\r\nConnection: close\r\n\r\n");
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(text.substr(0, 15) == "HTTP/1.1 200 OK");
    CHECK(text.find("\r\n\r\nh1") != std::string::npos);
    CHECK(seen.method == "PUT");
    CHECK(seen.path == "/x/y?q=1");
    CHECK(seen.path_only() == "/x/y");
    CHECK(seen.authority == "example.test:81");
    CHECK(seen.scheme == "http");
    REQUIRE(find_header(seen.headers, "x-thing") != nullptr);
    CHECK(*find_header(seen.headers, "x-thing") == "a");

    // absolute-form: the target's authority replaces Host.
    auto raw2 = co_await dial_raw(server.port());
    sent = co_await send_raw(*raw2,
                             "GET http://other.test/abs?z HTTP/1.1\r\nHost: example.test\r\n"
                             "Connection: close\r\n\r\n");
    REQUIRE(sent.ok());
    text = co_await read_until_close(*raw2);
    CHECK(text.substr(0, 15) == "HTTP/1.1 200 OK");
    CHECK(seen.authority == "other.test");
    CHECK(seen.path == "/abs?z");
  });
}

TEST_CASE("Http1Server: a chunked request body streams to the handler and back", "[http][unit]") {
  Router router;
  add_echo(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto client = co_await dial(server.port());
    auto d = net::after(5s);
    Status sent =
        co_await client->send_head("POST", "/echo", fields("transfer-encoding", "chunked"), d);
    REQUIRE(sent.ok());
    auto head = co_await client->read_head(d);
    REQUIRE(head.ok());
    CHECK(head->status == 200);
    REQUIRE(find_header(head->headers, "transfer-encoding") != nullptr);
    CHECK(*find_header(head->headers, "transfer-encoding") == "chunked");
    // Each piece comes back before the next is sent: neither side buffers the whole body.
    for (const std::string& piece : echo_pieces()) {
      Status wrote = co_await client->write_body(piece, d);
      REQUIRE(wrote.ok());
      std::string echoed;
      while (echoed.size() < piece.size()) {
        auto got = co_await client->read_body(d);
        REQUIRE(got.ok());
        REQUIRE(!got->empty());
        echoed += *got;
      }
      CHECK(echoed == piece);
    }
    Status finished = co_await client->finish_body({}, d);
    REQUIRE(finished.ok());
    auto end = co_await client->read_body(d);
    REQUIRE(end.ok());
    CHECK(end->empty());
    REQUIRE(find_header(client->trailers(), "x-echoed") != nullptr);
    CHECK(*find_header(client->trailers(), "x-echoed") == std::to_string(11 + 6 + 40000));
    CHECK(client->reusable());

    // A content-length body through request() on the same connection.
    auto r = co_await client->request("POST", "/echo", {}, "whole body", d);
    REQUIRE(r.ok());
    CHECK(r->body == "whole body");
    CHECK(*find_header(r->trailers, "x-echoed") == "10");
  });
}

TEST_CASE("Http1Server: a chunked response carries trailers; trailers need chunked",
          "[http][unit]") {
  Status finish_with_length;
  Status empty_finish;
  Router router;
  router.handle("GET", "/chunked", [](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, fields("content-type", "text/plain"), false);
    REQUIRE(sent.ok());
    Status w1 = co_await req.write("part1,", false);
    Status w2 = co_await req.write("part2", false);
    REQUIRE(w1.ok());
    REQUIRE(w2.ok());
    Status fin = co_await req.finish(fields("x-checksum", "abc", "x-count", "2"));
    REQUIRE(fin.ok());
  });
  router.handle("GET", "/length", [&](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, fields("content-length", "3"), false);
    REQUIRE(sent.ok());
    Status w = co_await req.write("abc", false);
    REQUIRE(w.ok());
    finish_with_length = co_await req.finish(fields("x-late", "1"));
    empty_finish = co_await req.finish({});
  });
  with_server(router, [&](Server& server) -> asio::awaitable<void> {
    auto client = co_await dial(server.port());
    auto r = co_await client->request("GET", "/chunked", {}, "", net::after(5s));
    REQUIRE(r.ok());
    CHECK(r->body == "part1,part2");
    CHECK(r->trailers == fields("x-checksum", "abc", "x-count", "2"));
    auto l = co_await client->request("GET", "/length", {}, "", net::after(5s));
    REQUIRE(l.ok());
    CHECK(l->body == "abc");
    CHECK(l->trailers.empty());
    CHECK(finish_with_length.code() == Code::kFailedPrecondition);
    CHECK(empty_finish.ok());
    CHECK(client->reusable());
  });
}

TEST_CASE("Http1Server: keep-alive serves sequential requests on one connection", "[http][unit]") {
  std::vector<std::string> peers;
  Router router;
  router.handle("GET", "/peer", [&](ServerRequest& req) -> asio::awaitable<void> {
    peers.push_back(req.peer());
    (void)co_await respond(req, 200, "text/plain", req.peer());
  });
  // Answers without reading the body: the server drops the unread body and keeps going.
  router.handle("POST", "/ignore", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 202, "text/plain", "ignored");
  });
  with_server(router, [&](Server& server) -> asio::awaitable<void> {
    auto client = co_await dial(server.port());
    auto r1 = co_await client->request("GET", "/peer", {}, "", net::after(5s));
    REQUIRE(r1.ok());
    CHECK(client->reusable());
    auto r2 =
        co_await client->request("POST", "/ignore", {}, std::string(5000, 'b'), net::after(5s));
    REQUIRE(r2.ok());
    CHECK(r2->status == 202);
    auto r3 = co_await client->request("GET", "/peer", {}, "", net::after(5s));
    REQUIRE(r3.ok());
    REQUIRE(peers.size() == 2);
    CHECK(peers[0] == peers[1]);
    CHECK(r1->body == r3->body);
  });
}

TEST_CASE("Http1Server: pipelined requests are answered in order", "[http][unit]") {
  Router router;
  router.handle_prefix("GET", "/p/", [](ServerRequest& req) -> asio::awaitable<void> {
    // The first request's handler yields a few times; the answers still keep request order.
    if (req.head().path == "/p/1") {
      auto ex = co_await asio::this_coro::executor;
      for (int i = 0; i < 5; ++i) co_await asio::post(ex, net::kToken);
    }
    (void)co_await respond(req, 200, "text/plain", "body" + req.head().path);
  });
  add_echo(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent =
        co_await send_raw(*raw,
                          "GET /p/1 HTTP/1.1\r\nHost: a\r\n\r\n"
                          "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nmid!"
                          "GET /p/2 HTTP/1.1\r\nHost: a\r\n\r\n"
                          "GET /p/3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(count(text, "HTTP/1.1 200 OK") == 4);
    size_t a = text.find("body/p/1");
    size_t b = text.find("mid!");
    size_t c = text.find("body/p/2");
    size_t d = text.find("body/p/3");
    REQUIRE(d != std::string::npos);
    CHECK(a < b);
    CHECK(b < c);
    CHECK(c < d);
    CHECK(count(text, "connection: close") == 1);
  });
}

std::unique_ptr<char[]> filled(std::string_view bytes, size_t cap) {
  auto buf = std::make_unique<char[]>(cap);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  return buf;
}

std::string window(const Unparsed& u) { return std::string(u.data(), u.size()); }

// The unparsed bytes' buffer, path by path: a read into an empty window swaps buffers (no
// copy), into a non-empty one it is appended, compacting to the front when the tail lacks room
// and growing when the whole buffer does; a grown buffer shrinks back at the next swap.
TEST_CASE("Unparsed: swaps, appends, compacts, grows and shrinks back", "[http][unit]") {
  Unparsed u;
  auto read = filled("abcdefgh", 8);
  const char* first = read.get();
  u.add_read(read, 8, 5);
  CHECK(window(u) == "abcde");
  CHECK(u.data() == first);  // the read's buffer became the window's
  REQUIRE(read != nullptr);  // and the reader got a new one
  CHECK(u.capacity() == 8);

  u.consume(5);
  CHECK(u.empty());
  std::memcpy(read.get(), "12345678", 8);
  const char* second = read.get();
  u.add_read(read, 8, 8);
  CHECK(window(u) == "12345678");
  CHECK(u.data() == second);
  CHECK(read.get() == first);  // the old buffer, of the same size, went back to the reader

  // Not empty: the read is copied in; the tail has no room, so the window moves to the front.
  u.consume(6);
  std::memcpy(read.get(), "xyz", 3);
  u.add_read(read, 8, 3);
  CHECK(window(u) == "78xyz");
  CHECK(u.capacity() == 8);
  CHECK(u.data() == second);   // compacted in place
  CHECK(read.get() == first);  // the reader keeps its buffer

  // Too much for the whole buffer: it grows, to twice its size at least.
  u.append("0123456789", 10);
  CHECK(window(u) == "78xyz0123456789");
  CHECK(u.capacity() == 16);
  u.append("", 0);
  CHECK(window(u) == "78xyz0123456789");

  // Emptied, the next read swaps in; the grown buffer is not handed to the reader.
  u.consume(100);  // at most size()
  CHECK(u.empty());
  std::memcpy(read.get(), "next", 4);
  u.add_read(read, 8, 4);
  CHECK(window(u) == "next");
  CHECK(u.capacity() == 8);
  CHECK(u.data() == first);
  REQUIRE(read != nullptr);
  CHECK(read.get() != first);

  CHECK(u.take() == "next");
  CHECK(u.empty());
  CHECK(u.capacity() == 0);
  u.append("again", 5);  // usable after take()
  CHECK(window(u) == "again");
  u.release();
  CHECK(u.capacity() == 0);

  // A window longer than the bytes consumed before it is not moved (each byte moves at most
  // once more): the buffer grows instead, though the bytes would fit after a move.
  u.append("abcdefgh", 8);
  CHECK(u.capacity() == 8);
  u.consume(2);
  u.append("ij", 2);
  CHECK(window(u) == "cdefghij");
  CHECK(u.capacity() == 16);

  // A read straight into the buffer (the client's way): room after the window, then commit.
  u.consume(6);
  std::span<char> room = u.prepare(12);
  REQUIRE(room.size() >= 12);
  std::memcpy(room.data(), "klmnopqrstuv", 12);
  u.commit(12);
  CHECK(window(u) == "ijklmnopqrstuv");
}

// FNV-1a over |data|, to compare megabytes of body in one line.
uint64_t fnv(std::string_view data) {
  uint64_t h = 1469598103934665603ull;
  for (char c : data) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h;
}

// Bytes that do not repeat within a body, so that a piece delivered twice, dropped or moved
// changes the hash.
std::string pattern(size_t size, uint64_t seed) {
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = char(seed >> 56);
  }
  return out;
}

// Large bodies and the requests pipelined behind them, written in uneven pieces while a slow
// handler lets the read-ahead fill (so that, as the reads fall, the server's unparsed bytes
// are appended to, compacted, grown and swapped; the test above drives each path for sure):
// every body arrives byte for byte.
TEST_CASE("Http1Server: large pipelined bodies arrive whole through a slow handler",
          "[http][unit]") {
  Router router;
  router.handle("POST", "/sum", [](ServerRequest& req) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    std::string body;
    for (;;) {
      // Slow: the reader fills the read-ahead while this one yields.
      for (int i = 0; i < 3; ++i) co_await asio::post(ex, net::kToken);
      auto piece = co_await req.read();
      if (!piece.ok()) co_return;
      if (piece->empty()) break;
      body += *piece;
    }
    (void)co_await respond(req, 200, "text/plain",
                           fmt::format("{} {} {}\n", req.head().path, body.size(), fnv(body)));
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    const std::string a = pattern(3 * 1024 * 1024 + 17, 1);
    const std::string b = pattern(700 * 1024 + 3, 2);
    std::string wire =
        fmt::format("POST /sum HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n", a.size());
    wire += a;
    wire += "POST /sum HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t at = 0; at < b.size(); at += 50000) {
      const size_t n = std::min<size_t>(50000, b.size() - at);
      wire += fmt::format("{:x}\r\n", n);
      wire.append(b, at, n);
      wire += "\r\n";
    }
    wire += "0\r\n\r\n";
    wire += "POST /sum HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\nlast!";
    auto raw = co_await dial_raw(server.port());
    // Uneven writes, from a byte to 200 KiB, so that reads end anywhere in a request.
    uint64_t seed = 7;
    for (size_t at = 0; at < wire.size();) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const size_t n = std::min<size_t>(wire.size() - at, 1 + (seed >> 40) % (200 * 1024));
      Status sent = co_await send_raw(*raw, wire.substr(at, n));
      REQUIRE(sent.ok());
      at += n;
    }
    std::string text = co_await read_until_close(*raw);
    CHECK(count(text, "HTTP/1.1 200 OK") == 3);
    CHECK(text.find(fmt::format("/sum {} {}\n", a.size(), fnv(a))) != std::string::npos);
    CHECK(text.find(fmt::format("/sum {} {}\n", b.size(), fnv(b))) != std::string::npos);
    CHECK(text.find(fmt::format("/sum 5 {}\n", fnv("last!"))) != std::string::npos);
  });
}

TEST_CASE("Http1Server: HTTP/1.0 closes unless it asks for keep-alive", "[http][unit]") {
  Router router;
  add_hello(router);
  router.handle("GET", "/stream", [](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, {}, false);
    REQUIRE(sent.ok());
    Status w = co_await req.write("no chunks for 1.0", true);
    REQUIRE(w.ok());
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent = co_await send_raw(*raw, "GET /hello HTTP/1.0\r\n\r\n");
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(text.substr(0, 15) == "HTTP/1.1 200 OK");
    CHECK(text.find("connection: close\r\n") != std::string::npos);
    CHECK(text.find("hello world\n") != std::string::npos);

    // keep-alive: two requests on one connection, the answer says keep-alive.
    auto ka = co_await dial_raw(server.port());
    sent = co_await send_raw(*ka, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    REQUIRE(sent.ok());
    std::string buffer;
    bool got = co_await read_until(*ka, buffer, "hello world\n");
    REQUIRE(got);
    CHECK(buffer.find("connection: keep-alive\r\n") != std::string::npos);
    sent = co_await send_raw(*ka, "GET /hello HTTP/1.0\r\n\r\n");
    REQUIRE(sent.ok());
    text = co_await read_until_close(*ka);
    CHECK(text.find("hello world\n") != std::string::npos);

    // No content-length and no chunked coding in 1.0: the body ends with the connection.
    auto st = co_await dial_raw(server.port());
    sent = co_await send_raw(*st, "GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    REQUIRE(sent.ok());
    text = co_await read_until_close(*st);
    REQUIRE(text.size() > 17);
    CHECK(text.find("transfer-encoding") == std::string::npos);
    CHECK(text.find("connection: close\r\n") != std::string::npos);
    CHECK(text.substr(text.size() - 17) == "no chunks for 1.0");
  });
}

TEST_CASE("Http1Server: a malformed request gets 400 and the connection closes", "[http][unit]") {
  bool called = false;
  Router router;
  router.handle_prefix("", "/", [&](ServerRequest& req) -> asio::awaitable<void> {
    called = true;
    (void)co_await respond(req, 200, "text/plain", "no");
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent = co_await send_raw(
        *raw, "GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\nGET / HTTP/1.1\r\n");
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(text.substr(0, 24) == "HTTP/1.1 400 Bad Request");
    CHECK(text.find("connection: close\r\n") != std::string::npos);
    CHECK(count(text, "HTTP/1.1") == 1);

    auto v2 = co_await dial_raw(server.port());
    sent = co_await send_raw(*v2, "GET / HTTP/3.0\r\nHost: a\r\n\r\n");
    REQUIRE(sent.ok());
    text = co_await read_until_close(*v2);
    CHECK(text.substr(0, 12) == "HTTP/1.1 505");
  });
  CHECK_FALSE(called);
}

TEST_CASE("Http1Server: a header section over 64 KiB gets 431", "[http][unit]") {
  Router router;
  add_hello(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    std::string request =
        "GET /hello HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(70000, 'a') + "\r\n\r\n";
    Status sent = co_await send_raw(*raw, std::move(request));
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(text.substr(0, 12) == "HTTP/1.1 431");
    CHECK(text.find("connection: close\r\n") != std::string::npos);
  });
}

TEST_CASE("Http1Server: a handler that returns without finishing closes the connection",
          "[http][unit]") {
  Router router;
  router.handle("GET", "/partial", [](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, {}, false);
    REQUIRE(sent.ok());
    Status w = co_await req.write("partial", false);
    REQUIRE(w.ok());
  });
  router.handle("GET", "/nothing", [](ServerRequest&) -> asio::awaitable<void> { co_return; });
  router.handle("GET", "/short", [](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, fields("content-length", "10"), false);
    REQUIRE(sent.ok());
    Status w = co_await req.write("abc", true);
    CHECK(w.code() == Code::kFailedPrecondition);
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent = co_await send_raw(*raw, "GET /partial HTTP/1.1\r\nHost: a\r\n\r\n");
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(text.find("transfer-encoding: chunked\r\n") != std::string::npos);
    CHECK(text.find("7\r\npartial\r\n") != std::string::npos);
    CHECK(text.find("0\r\n\r\n") == std::string::npos);  // no last chunk: cut short

    auto client = co_await dial(server.port());
    auto r = co_await client->request("GET", "/partial", {}, "", net::after(5s));
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK_FALSE(client->reusable());

    auto nothing = co_await dial(server.port());
    auto n = co_await nothing->request("GET", "/nothing", {}, "", net::after(5s));
    REQUIRE(n.ok());
    CHECK(n->status == 500);
    CHECK_FALSE(n->keep_alive);

    auto short_body = co_await dial(server.port());
    auto s = co_await short_body->request("GET", "/short", {}, "", net::after(5s));
    CHECK(s.status().code() == Code::kUnavailable);
  });
}

TEST_CASE("Http1Server: an upgrade hands the raw connection to the handler", "[http][unit]") {
  Router router;
  router.handle("GET", "/echo", [](ServerRequest& req) -> asio::awaitable<void> {
    const std::string* up = find_header(req.head().headers, "upgrade");
    if (up == nullptr || *up != "echo") {
      (void)co_await respond(req, 426, "text/plain", "upgrade to echo\n");
      co_return;
    }
    Status sent =
        co_await req.send_headers(101, fields("connection", "upgrade", "upgrade", "echo"), true);
    REQUIRE(sent.ok());
    std::string leftover;
    std::unique_ptr<net::Stream> s = req.take_upgraded_stream(&leftover);
    REQUIRE(s != nullptr);
    CHECK(req.take_upgraded_stream(&leftover) == nullptr);
    if (!leftover.empty()) {
      Status w = co_await s->write(leftover);
      REQUIRE(w.ok());
    }
    std::vector<char> buf(4096);
    for (;;) {
      auto n = co_await s->read_some(buf);
      if (!n.ok()) break;
      Status w = co_await s->write(std::span<const char>(buf.data(), *n));
      if (!w.ok()) break;
    }
  });
  add_hello(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto client = co_await dial(server.port());
    auto up = co_await client->upgrade("/echo", fields("upgrade", "echo"), net::after(5s));
    REQUIRE(up.ok());
    CHECK(up->response.status == 101);
    CHECK(up->leftover.empty());
    CHECK_FALSE(client->reusable());
    Status w = co_await send_raw(*up->stream, "ping over raw bytes");
    REQUIRE(w.ok());
    std::string echoed;
    bool got = co_await read_until(*up->stream, echoed, "ping over raw bytes");
    CHECK(got);
    CHECK(echoed == "ping over raw bytes");
    up->stream->close();

    // Bytes sent right behind the request reach the handler as |leftover|.
    auto raw = co_await dial_raw(server.port());
    Status sent = co_await send_raw(
        *raw, "GET /echo HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\nEARLY");
    REQUIRE(sent.ok());
    std::string text;
    got = co_await read_until(*raw, text, "\r\n\r\nEARLY");
    CHECK(got);
    CHECK(text.substr(0, 34) == "HTTP/1.1 101 Switching Protocols\r\n");
    raw->close();

    // A declined upgrade is an ordinary exchange and the connection carries on.
    auto other = co_await dial(server.port());
    auto refused = co_await other->upgrade("/echo", fields("upgrade", "websocket"), net::after(5s));
    CHECK(refused.status().code() == Code::kFailedPrecondition);
    CHECK(other->reusable());
    auto r = co_await other->request("GET", "/hello", {}, "", net::after(5s));
    REQUIRE(r.ok());
    CHECK(r->body == "hello world\n");
  });
}

TEST_CASE("Http1Server: Expect 100-continue is answered when the handler reads", "[http][unit]") {
  Router router;
  // Reads the whole body first, then answers: the 100 goes out on the first read().
  router.handle("POST", "/upload", [](ServerRequest& req) -> asio::awaitable<void> {
    std::string body;
    for (;;) {
      auto piece = co_await req.read();
      if (!piece.ok()) co_return;
      if (piece->empty()) break;
      body += *piece;
    }
    (void)co_await respond(req, 200, "text/plain", "got " + body);
  });
  router.handle("POST", "/refuse", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 413, "text/plain", "too large\n");
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent = co_await send_raw(*raw,
                                    "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                                    "Expect: 100-continue\r\n\r\n");
    REQUIRE(sent.ok());
    std::string text;
    bool got = co_await read_until(*raw, text, "\r\n\r\n");
    REQUIRE(got);
    CHECK(text == "HTTP/1.1 100 Continue\r\n\r\n");
    sent = co_await send_raw(*raw, "hello");
    REQUIRE(sent.ok());
    got = co_await read_until(*raw, text, "got hello");
    REQUIRE(got);
    CHECK(text.find("HTTP/1.1 200 OK\r\n") != std::string::npos);
    CHECK(count(text, "100 Continue") == 1);

    // A handler that answers without reading: no 100, and the connection closes since the
    // body the client holds back will never come.
    auto refuse = co_await dial_raw(server.port());
    sent = co_await send_raw(*refuse,
                             "POST /refuse HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n"
                             "Expect: 100-continue\r\n\r\n");
    REQUIRE(sent.ok());
    text = co_await read_until_close(*refuse);
    CHECK(text.substr(0, 12) == "HTTP/1.1 413");
    CHECK(text.find("100 Continue") == std::string::npos);
    CHECK(text.find("connection: close\r\n") != std::string::npos);
  });
}

TEST_CASE("Http1Server: HEAD gets the fields of GET and no body", "[http][unit]") {
  Router router;
  add_hello(router);
  router.handle("HEAD", "/stream", [](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, {}, false);
    REQUIRE(sent.ok());
    Status w = co_await req.write("dropped for HEAD", true);
    REQUIRE(w.ok());
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto raw = co_await dial_raw(server.port());
    Status sent =
        co_await send_raw(*raw,
                          "HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\n"
                          "HEAD /stream HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    REQUIRE(sent.ok());
    std::string text = co_await read_until_close(*raw);
    CHECK(text.find("content-length: 12\r\n") != std::string::npos);
    CHECK(text.find("hello world") == std::string::npos);
    CHECK(text.find("dropped") == std::string::npos);
    CHECK(count(text, "HTTP/1.1 200 OK") == 2);
    CHECK(text.substr(text.size() - 4) == "\r\n\r\n");

    auto client = co_await dial(server.port());
    auto h = co_await client->request("HEAD", "/hello", {}, "", net::after(5s));
    REQUIRE(h.ok());
    CHECK(h->body.empty());
    CHECK(*find_header(h->headers, "content-length") == "12");
    auto g = co_await client->request("GET", "/hello", {}, "", net::after(5s));
    REQUIRE(g.ok());
    CHECK(g->body == "hello world\n");
  });
}

TEST_CASE("Http1Server: a client that goes away cancels its waiting handler", "[http][unit]") {
  bool cancelled = false;
  Router router;
  net::Signal* done = nullptr;
  router.handle("GET", "/wait", [&](ServerRequest& req) -> asio::awaitable<void> {
    Status sent = co_await req.send_headers(200, {}, false);
    REQUIRE(sent.ok());
    net::Signal never(co_await asio::this_coro::executor);
    Status waited = co_await never.wait();  // only a cancellation ends this
    cancelled = waited.code() == Code::kCancelled;
    done->notify();
  });
  with_server(router, [&](Server& server) -> asio::awaitable<void> {
    net::Signal handler_done(co_await asio::this_coro::executor);
    done = &handler_done;
    auto client = co_await dial(server.port());
    Status sent = co_await client->send_head("GET", "/wait", {}, net::after(5s));
    REQUIRE(sent.ok());
    auto head = co_await client->read_head(net::after(5s));
    REQUIRE(head.ok());
    client->close();
    Status waited = co_await handler_done.wait_until(net::after(5s));
    CHECK(waited.ok());
    CHECK(cancelled);
  });
}

TEST_CASE("Http1Server: idle connections time out and shutdown closes them at once",
          "[http][unit]") {
  Router router;
  add_hello(router);
  ServerOptions options;
  options.http1_idle_timeout = 200ms;
  with_server(
      router,
      [](Server& server) -> asio::awaitable<void> {
        auto raw = co_await dial_raw(server.port());
        Status sent = co_await send_raw(*raw, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
        REQUIRE(sent.ok());
        auto start = std::chrono::steady_clock::now();
        std::string text = co_await read_until_close(*raw);  // the idle timeout closes it
        CHECK(text.find("hello world\n") != std::string::npos);
        CHECK(std::chrono::steady_clock::now() - start < 3s);
      },
      options);

  ServerOptions long_idle;
  long_idle.http1_idle_timeout = 60s;
  asio::io_context io;
  Server server(io.get_executor(), router, long_idle);
  REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
  server.start();
  run_sync(io, [&]() -> asio::awaitable<void> {
    auto client = co_await dial(server.port());
    auto r = co_await client->request("GET", "/hello", {}, "", net::after(5s));
    REQUIRE(r.ok());
    auto start = std::chrono::steady_clock::now();
    co_await server.shutdown(net::after(10s));
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    auto after = co_await client->request("GET", "/hello", {}, "", net::after(5s));
    CHECK_FALSE(after.ok());
  }());
}

TEST_CASE("Http1Server: one Router serves HTTP/1.1 and HTTP/2 clients", "[http][unit]") {
  Router router;
  router.handle("GET", "/proto", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 200, "text/plain", req.is_http2() ? "h2" : "http/1.1");
  });
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    auto h1 = co_await dial(server.port());
    auto r = co_await h1->request("GET", "/proto", {}, "", net::after(5s));
    REQUIRE(r.ok());
    CHECK(r->body == "http/1.1");

    DialOptions d;
    d.host = "127.0.0.1";
    d.port = server.port();
    auto conn = co_await dial_h2(co_await asio::this_coro::executor, d, net::after(5s));
    REQUIRE(conn.ok());
    RequestHead head;
    head.method = "GET";
    head.path = "/proto";
    head.authority = "localhost";
    auto s = (*conn)->open_stream(head, true);
    REQUIRE(s.ok());
    Status got = co_await (*s)->wait_headers();
    REQUIRE(got.ok());
    CHECK((*s)->status() == 200);
    std::string body;
    for (;;) {
      auto piece = co_await (*s)->read();
      REQUIRE(piece.ok());
      if (piece->empty()) break;
      body += *piece;
    }
    CHECK(body == "h2");
    (*conn)->close();
  });
}

// A throwaway self-signed certificate for localhost and 127.0.0.1 in a temporary directory,
// removed with it.
class TestCert {
 public:
  TestCert() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "cb-http1-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return;
    dir_ = pattern;
    std::string cmd = fmt::format(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -days 1 "
        "-keyout {} -out {} >/dev/null 2>&1",
        key().string(), cert().string());
    ok_ = std::system(cmd.c_str()) == 0;
  }
  ~TestCert() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  TestCert(const TestCert&) = delete;
  TestCert& operator=(const TestCert&) = delete;

  bool ok() const { return ok_; }
  std::filesystem::path cert() const { return dir_ / "c"; }
  std::filesystem::path key() const { return dir_ / "k"; }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
};

TEST_CASE("Http1Server: over TLS, ALPN picks HTTP/2 or HTTP/1.1 for the same Router",
          "[http][unit]") {
  TestCert cert;
  REQUIRE(cert.ok());
  net::TlsServerOptions so;
  so.cert_file = cert.cert().string();
  so.key_file = cert.key().string();
  auto server_ctx = net::TlsContext::server(so);
  REQUIRE(server_ctx.ok());
  net::TlsClientOptions h1o;
  h1o.ca_file = cert.cert().string();
  h1o.alpn = {"http/1.1"};
  auto h1_ctx = net::TlsContext::client(h1o);
  REQUIRE(h1_ctx.ok());
  net::TlsClientOptions h2o;
  h2o.ca_file = cert.cert().string();
  h2o.alpn = {"h2"};
  auto h2_ctx = net::TlsContext::client(h2o);
  REQUIRE(h2_ctx.ok());

  Router router;
  router.handle("POST", "/who", [](ServerRequest& req) -> asio::awaitable<void> {
    std::string body;
    for (;;) {
      auto piece = co_await req.read();
      if (!piece.ok()) co_return;
      if (piece->empty()) break;
      body += *piece;
    }
    std::string text =
        fmt::format("{} {} {}", req.is_http2() ? "h2" : "http/1.1", req.head().scheme, body);
    (void)co_await respond(req, 200, "text/plain", text);
  });
  ServerOptions options;
  options.tls = *server_ctx;
  with_server(
      router,
      [&](Server& server) -> asio::awaitable<void> {
        Http1DialOptions d1;
        d1.host = "127.0.0.1";
        d1.port = server.port();
        d1.tls = *h1_ctx;
        d1.server_name = "localhost";
        auto h1 = co_await dial_http1(co_await asio::this_coro::executor, d1, net::after(5s));
        REQUIRE(h1.ok());
        CHECK((*h1)->stream().alpn() == "http/1.1");
        auto r = co_await (*h1)->request("POST", "/who", {}, "over tls", net::after(5s));
        REQUIRE(r.ok());
        CHECK(r->body == "http/1.1 https over tls");
        auto again = co_await (*h1)->request("POST", "/who", {}, "again", net::after(5s));
        REQUIRE(again.ok());
        CHECK(again->body == "http/1.1 https again");
        (*h1)->close();

        // A context that offers only h2 is refused by dial_http1.
        Http1DialOptions wrong = d1;
        wrong.tls = *h2_ctx;
        auto refused =
            co_await dial_http1(co_await asio::this_coro::executor, wrong, net::after(5s));
        CHECK(refused.status().code() == Code::kFailedPrecondition);

        DialOptions d2;
        d2.host = "127.0.0.1";
        d2.port = server.port();
        d2.tls = *h2_ctx;
        d2.server_name = "localhost";
        auto conn = co_await dial_h2(co_await asio::this_coro::executor, d2, net::after(5s));
        REQUIRE(conn.ok());
        RequestHead head;
        head.method = "POST";
        head.path = "/who";
        head.authority = "localhost";
        auto s = (*conn)->open_stream(head, false);
        REQUIRE(s.ok());
        Status w = co_await (*s)->write("via h2", true);
        REQUIRE(w.ok());
        Status got = co_await (*s)->wait_headers();
        REQUIRE(got.ok());
        std::string body;
        for (;;) {
          auto piece = co_await (*s)->read();
          REQUIRE(piece.ok());
          if (piece->empty()) break;
          body += *piece;
        }
        CHECK(body == "h2 https via h2");
        (*conn)->close();
      },
      options);
}

}  // namespace
}  // namespace cb::http
