#include "http/http1_client.h"

#include "http/server.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <stdlib.h>
#include <string>
#include <system_error>

namespace cb::http {
namespace {

using namespace std::chrono_literals;
using test::run_sync;

template <typename... A>
Headers fields(A... args) {
  static_assert(sizeof...(A) % 2 == 0);
  std::vector<std::string> flat = {std::string(args)...};
  Headers h;
  for (size_t i = 0; i < flat.size(); i += 2) h.push_back(Header{flat[i], flat[i + 1]});
  return h;
}

// The server side of a scripted exchange: reads requests and writes canned bytes.
class Peer {
 public:
  explicit Peer(std::unique_ptr<net::Stream> s) : s_(std::move(s)) {}

  // The next request head (through its blank line); its bytes stay recorded in log().
  asio::awaitable<std::string> read_head() {
    co_await fill_until("\r\n\r\n");
    size_t end = buf_.find("\r\n\r\n") + 4;
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end);
    log_ += head;
    co_return head;
  }
  // Exactly |n| bytes after the head.
  asio::awaitable<std::string> read_exactly(size_t n) {
    std::vector<char> tmp(16384);
    while (buf_.size() < n) {
      auto got = co_await s_->read_some(tmp);
      REQUIRE(got.ok());
      buf_.append(tmp.data(), *got);
    }
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    co_return out;
  }
  asio::awaitable<void> send(std::string bytes) {
    Status st = co_await s_->write(bytes);
    REQUIRE(st.ok());
  }
  // Waits until the client closes.
  asio::awaitable<void> wait_close() {
    std::vector<char> tmp(16384);
    for (;;) {
      auto got = co_await s_->read_some(tmp);
      if (!got.ok()) co_return;
    }
  }
  void close() { s_->close(); }
  const std::string& log() const { return log_; }

 private:
  asio::awaitable<void> fill_until(std::string_view needle) {
    std::vector<char> tmp(16384);
    while (buf_.find(needle) == std::string::npos) {
      auto got = co_await s_->read_some(tmp);
      REQUIRE(got.ok());
      buf_.append(tmp.data(), *got);
    }
  }

  std::unique_ptr<net::Stream> s_;
  std::string buf_;
  std::string log_;
};

// Runs |script| on the first connection accepted on 127.0.0.1:0 and |client| with a
// client dialed to it, concurrently.
template <typename Script, typename Client>
void with_peer(Script script, Client client) {
  asio::io_context io;
  auto listener = net::TcpListener::listen(io.get_executor(), "127.0.0.1", 0);
  REQUIRE(listener.ok());
  uint16_t port = listener->port();
  auto serve = [&]() -> asio::awaitable<void> {
    auto socket = co_await listener->accept();
    REQUIRE(socket.ok());
    Peer peer(net::make_stream(std::move(*socket)));
    co_await script(peer, port);
  };
  auto run_client = [&]() -> asio::awaitable<void> {
    Http1DialOptions d;
    d.host = "127.0.0.1";
    d.port = port;
    auto c = co_await dial_http1(co_await asio::this_coro::executor, d, net::after(5s));
    REQUIRE(c.ok());
    co_await client(**c);
    (*c)->close();
  };
  run_sync(io, [&]() -> asio::awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    co_await (serve() && run_client());
  }());
}

TEST_CASE("Http1Client: reads content-length, chunked and close-delimited bodies", "[http][unit]") {
  std::string seen;
  with_peer(
      [&](Peer& peer, uint16_t port) -> asio::awaitable<void> {
        std::string h1 = co_await peer.read_head();
        CHECK(h1.substr(0, 17) == "GET /a HTTP/1.1\r\n");
        CHECK(h1.find(fmt::format("host: 127.0.0.1:{}\r\n", port)) != std::string::npos);
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello");
        std::string h2 = co_await peer.read_head();
        CHECK(h2.substr(0, 17) == "GET /b HTTP/1.1\r\n");
        co_await peer.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
        co_await peer.send("2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n");
        std::string h3 = co_await peer.read_head();
        CHECK(h3.substr(0, 17) == "GET /c HTTP/1.1\r\n");
        co_await peer.send("HTTP/1.1 200 OK\r\n\r\nuntil the close");
        peer.close();
        seen = peer.log();
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto a = co_await client.request("GET", "/a", {}, "", net::after(5s));
        REQUIRE(a.ok());
        CHECK(a->status == 200);
        CHECK(a->body == "hello");
        CHECK(*find_header(a->headers, "x-a") == "1");
        CHECK(client.reusable());
        auto b = co_await client.request("GET", "/b", {}, "", net::after(5s));
        REQUIRE(b.ok());
        CHECK(b->body == "abcde");
        CHECK(b->trailers == fields("x-sum", "5"));
        auto c = co_await client.request("GET", "/c", {}, "", net::after(5s));
        REQUIRE(c.ok());
        CHECK(c->body == "until the close");
        CHECK_FALSE(c->keep_alive);
        CHECK_FALSE(client.reusable());
        auto d = co_await client.request("GET", "/d", {}, "", net::after(5s));
        CHECK(d.status().code() == Code::kFailedPrecondition);
      });
  CHECK(seen.find("/d") == std::string::npos);
}

// request() reads a large declared body with large reads into a buffer it reuses: the bytes
// after one response (the start of the next one's head, sent in the same write) and a head
// larger than a read (the buffer grows) must come through whole.
TEST_CASE("Http1Client: a large body, bytes after it, and a head larger than a read",
          "[http][unit]") {
  std::string big(3 * 1024 * 1024 + 7, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char('a' + (i * 7 + i / 4093) % 26);
  const std::string value(40 * 1024, 'v');
  with_peer(
      [&](Peer& peer, uint16_t) -> asio::awaitable<void> {
        co_await peer.read_head();
        co_await peer.send(
            fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", big.size()) +
            big.substr(0, 100000));
        // The rest, and then the start of a response the client has not asked for yet: the
        // parser stops at the end of the first, and keeps the rest for the next request.
        co_await peer.send(big.substr(100000) + "HTTP/1.1 201 Created\r\nContent-Le");
        co_await peer.read_head();
        co_await peer.send("ngth: 2\r\n\r\nok");
        co_await peer.read_head();
        co_await peer.send(
            fmt::format("HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 3\r\n\r\nend", value));
      },
      [&](Http1Client& client) -> asio::awaitable<void> {
        auto a = co_await client.request("GET", "/big", {}, "", net::after(5s));
        REQUIRE(a.ok());
        CHECK(a->status == 200);
        CHECK(a->body.size() == big.size());
        CHECK(a->body == big);
        auto b = co_await client.request("GET", "/next", {}, "", net::after(5s));
        REQUIRE(b.ok());
        CHECK(b->status == 201);
        CHECK(b->body == "ok");
        auto c = co_await client.request("GET", "/head", {}, "", net::after(5s));
        REQUIRE(c.ok());
        const std::string* big_field = find_header(c->headers, "x-big");
        REQUIRE(big_field != nullptr);
        CHECK(*big_field == value);
        CHECK(c->body == "end");
      });
}

TEST_CASE("Http1Client: skips 1xx, reads HEAD without a body, honours connection: close",
          "[http][unit]") {
  with_peer(
      [](Peer& peer, uint16_t) -> asio::awaitable<void> {
        std::string h1 = co_await peer.read_head();
        CHECK(h1.substr(0, 5) == "HEAD ");
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
        (void)co_await peer.read_head();
        co_await peer.send(
            "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
            "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        co_await peer.wait_close();
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto h = co_await client.request("HEAD", "/x", {}, "", net::after(5s));
        REQUIRE(h.ok());
        CHECK(h->body.empty());
        CHECK(*find_header(h->headers, "content-length") == "100");
        CHECK(client.reusable());
        auto g = co_await client.request("GET", "/y", {}, "", net::after(5s));
        REQUIRE(g.ok());
        CHECK(g->status == 201);
        CHECK(g->body == "ok");
        CHECK(find_header(g->headers, "link") == nullptr);  // the 103's field
        CHECK_FALSE(g->keep_alive);
        CHECK_FALSE(client.reusable());
      });
}

TEST_CASE("Http1Client: a caller's Host is kept and framing comes from the body", "[http][unit]") {
  with_peer(
      [](Peer& peer, uint16_t) -> asio::awaitable<void> {
        std::string h = co_await peer.read_head();
        CHECK(h.find("host: custom.test\r\n") != std::string::npos);
        CHECK(h.find("127.0.0.1") == std::string::npos);
        CHECK(h.find("content-length: 3\r\n") != std::string::npos);
        CHECK(h.find("999") == std::string::npos);
        std::string body = co_await peer.read_exactly(3);
        CHECK(body == "abc");
        co_await peer.send("HTTP/1.1 204 No Content\r\n\r\n");
        // A streamed chunked body with trailers.
        std::string h2 = co_await peer.read_head();
        CHECK(h2.find("transfer-encoding: chunked\r\n") != std::string::npos);
        std::string expected = "2\r\nab\r\n0\r\nx-t: 1\r\n\r\n";
        std::string chunks = co_await peer.read_exactly(expected.size());
        CHECK(chunks == expected);
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        co_await peer.wait_close();
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto r = co_await client.request("PUT", "/p",
                                         fields("host", "custom.test", "content-length", "999"),
                                         "abc", net::after(5s));
        REQUIRE(r.ok());
        CHECK(r->status == 204);

        auto d = net::after(5s);
        Status sent =
            co_await client.send_head("POST", "/s", fields("transfer-encoding", "chunked"), d);
        REQUIRE(sent.ok());
        Status w = co_await client.write_body("ab", d);
        REQUIRE(w.ok());
        Status f = co_await client.finish_body(fields("x-t", "1"), d);
        REQUIRE(f.ok());
        auto head = co_await client.read_head(d);
        REQUIRE(head.ok());
        auto end = co_await client.read_body(d);
        REQUIRE(end.ok());
        CHECK(end->empty());
        CHECK(client.reusable());

        // A content-length body must match its length.
        Status s2 = co_await client.send_head("POST", "/l", fields("content-length", "4"), d);
        REQUIRE(s2.ok());
        Status over = co_await client.write_body("12345", d);
        CHECK(over.code() == Code::kFailedPrecondition);
        Status w2 = co_await client.write_body("12", d);
        REQUIRE(w2.ok());
        Status short_finish = co_await client.finish_body({}, d);
        CHECK(short_finish.code() == Code::kFailedPrecondition);
        Status again = co_await client.send_head("GET", "/", {}, d);
        CHECK(again.code() == Code::kFailedPrecondition);
      });
}

// request_pieces() sends the concatenation of its pieces under one content-length: small
// pieces gathered, large ones written as they are, a body under 64 KiB in one write.
TEST_CASE("Http1Client: request_pieces sends the pieces as one body", "[http][unit]") {
  std::string big(200 * 1024, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char('a' + i % 23);
  const std::string small1 = "head-1:", small2(5000, 'x'), mid(20 * 1024, 'm');
  const std::string whole = small1 + big + small2 + mid + small1;
  with_peer(
      [&](Peer& peer, uint16_t) -> asio::awaitable<void> {
        std::string h = co_await peer.read_head();
        CHECK(h.substr(0, 18) == "POST /p HTTP/1.1\r\n");
        CHECK(h.find(fmt::format("content-length: {}\r\n", whole.size())) != std::string::npos);
        CHECK(h.find("999") == std::string::npos);
        std::string body = co_await peer.read_exactly(whole.size());
        CHECK(body == whole);
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstored");
        std::string h2 = co_await peer.read_head();
        CHECK(h2.find("content-length: 12\r\n") != std::string::npos);
        const std::string body2 = co_await peer.read_exactly(12);
        CHECK(body2 == "small1small2");
        co_await peer.send("HTTP/1.1 204 No Content\r\n\r\n");
        std::string h3 = co_await peer.read_head();
        CHECK(h3.find("content-length: 0\r\n") != std::string::npos);
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        co_await peer.wait_close();
      },
      [&](Http1Client& client) -> asio::awaitable<void> {
        const std::string_view pieces[] = {small1, big, small2, mid, small1};
        auto r = co_await client.request_pieces("POST", "/p", fields("content-length", "999"),
                                                pieces, net::after(5s));
        REQUIRE(r.ok());
        CHECK(r->status == 200);
        CHECK(r->body == "stored");
        CHECK(client.reusable());
        const std::string_view few[] = {"small1", "", "small2"};
        auto r2 = co_await client.request_pieces("PUT", "/q", {}, few, net::after(5s));
        INFO(r2.status().to_string());
        REQUIRE(r2.ok());
        CHECK(r2->status == 204);
        auto r3 = co_await client.request_pieces("POST", "/e", {}, {}, net::after(5s));
        REQUIRE(r3.ok());
        CHECK(r3->status == 200);
      });
}

TEST_CASE("Http1Client: a passed deadline is kDeadlineExceeded and closes the connection",
          "[http][unit]") {
  with_peer(
      [](Peer& peer, uint16_t) -> asio::awaitable<void> {
        (void)co_await peer.read_head();
        co_await peer.wait_close();  // never answers
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto r = co_await client.request("GET", "/slow", {}, "", net::after(100ms));
        CHECK(r.status().code() == Code::kDeadlineExceeded);
        CHECK_FALSE(client.reusable());
      });
}

TEST_CASE("Http1Client: a connection the server closed fails the next request", "[http][unit]") {
  with_peer(
      [](Peer& peer, uint16_t) -> asio::awaitable<void> {
        (void)co_await peer.read_head();
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
        peer.close();
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto first = co_await client.request("GET", "/1", {}, "", net::after(5s));
        REQUIRE(first.ok());
        auto second = co_await client.request("GET", "/2", {}, "", net::after(5s));
        CHECK(second.status().code() == Code::kUnavailable);
        CHECK_FALSE(client.reusable());
      });
}

TEST_CASE("Http1Client: a malformed response is kInvalidArgument", "[http][unit]") {
  with_peer(
      [](Peer& peer, uint16_t) -> asio::awaitable<void> {
        (void)co_await peer.read_head();
        co_await peer.send("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n");
        co_await peer.wait_close();
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto r = co_await client.request("GET", "/", {}, "", net::after(5s));
        CHECK(r.status().code() == Code::kInvalidArgument);
        CHECK_FALSE(client.reusable());
      });
}

TEST_CASE("Http1Client: upgrade returns the stream and the bytes after the 101", "[http][unit]") {
  with_peer(
      [](Peer& peer, uint16_t) -> asio::awaitable<void> {
        std::string h = co_await peer.read_head();
        CHECK(h.find("upgrade: test\r\n") != std::string::npos);
        CHECK(h.find("connection: upgrade\r\n") != std::string::npos);
        co_await peer.send(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: upgrade\r\n\r\n"
            "HELLO");
        std::string ping = co_await peer.read_exactly(4);
        CHECK(ping == "ping");
        co_await peer.send("pong");
        co_await peer.wait_close();
      },
      [](Http1Client& client) -> asio::awaitable<void> {
        auto up = co_await client.upgrade("/u", fields("upgrade", "test"), net::after(5s));
        REQUIRE(up.ok());
        CHECK(up->response.status == 101);
        CHECK_FALSE(client.reusable());
        std::string got = up->leftover;
        std::vector<char> buf(64);
        while (got.size() < 5) {
          auto n = co_await up->stream->read_some(buf);
          REQUIRE(n.ok());
          got.append(buf.data(), *n);
        }
        CHECK(got == "HELLO");
        std::string ping = "ping";
        Status w = co_await up->stream->write(ping);
        REQUIRE(w.ok());
        std::string pong;
        while (pong.size() < 4) {
          auto n = co_await up->stream->read_some(buf);
          REQUIRE(n.ok());
          pong.append(buf.data(), *n);
        }
        CHECK(pong == "pong");
        up->stream->close();
      });
}

TEST_CASE("Http1Client: dial_http1 reaches the Server over a unix socket", "[http][unit]") {
  std::string pattern = (std::filesystem::temp_directory_path() / "cb-h1c-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  std::filesystem::path dir = pattern;
  std::string path = (dir / "s.sock").string();
  Router router;
  router.handle("GET", "/host", [](ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await respond(req, 200, "text/plain", req.head().authority);
  });
  {
    asio::io_context io;
    Server server(io.get_executor(), router, {});
    REQUIRE(server.listen_unix(path).ok());
    server.start();
    run_sync(io, [&]() -> asio::awaitable<void> {
      Http1DialOptions d;
      d.unix_path = path;
      auto c = co_await dial_http1(co_await asio::this_coro::executor, d, net::after(5s));
      REQUIRE(c.ok());
      auto r = co_await (*c)->request("GET", "/host", {}, "", net::after(5s));
      REQUIRE(r.ok());
      CHECK(r->body == "localhost");
      (*c)->close();
      co_await server.shutdown(net::after(2s));
    }());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace cb::http
