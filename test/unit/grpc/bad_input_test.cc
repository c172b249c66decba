// A grpc::Server fed what well-behaved clients never send: raw HTTP/2 streams with broken
// gRPC framing or headers, and raw TCP bytes that are not HTTP/2 at all. Every case checks the
// answer and then that the server still serves a good call.

#include "grpc/frame.h"
#include "grpc/server.h"
#include "grpc/testing/messages.pb.h"
#include "grpc/testing/test.cbgrpc.h"
#include "http/server.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <vector>

namespace cb::grpc {
namespace {

namespace gt = ::grpc::testing;
using namespace std::chrono_literals;
using test::run_sync;

class EmptyService final : public gt::TestService::Service {
 public:
  asio::awaitable<Result<gt::Empty>> EmptyCall(CallContext&, gt::Empty&&) override {
    co_return gt::Empty();
  }
};

constexpr std::string_view kEmptyCall = "/grpc.testing.TestService/EmptyCall";

std::string prefix(uint8_t flag, uint32_t length) {
  std::string p(kFrameHeaderSize, '\0');
  p[0] = char(flag);
  p[1] = char(length >> 24);
  p[2] = char(length >> 16);
  p[3] = char(length >> 8);
  p[4] = char(length);
  return p;
}

http::Header field(std::string name, std::string value) {
  return http::Header{std::move(name), std::move(value)};
}

http::RequestHead grpc_head(std::string_view path = kEmptyCall) {
  http::RequestHead h;
  h.method = "POST";
  h.path = std::string(path);
  h.authority = "localhost";
  h.headers.push_back(field("content-type", "application/grpc"));
  h.headers.push_back(field("te", "trailers"));
  return h;
}

// One exchange as the client saw it.
struct Reply {
  int http_status = 0;
  http::Headers headers;
  http::Headers trailers;
  std::string body;

  // grpc-status from the trailers, or from the headers of a trailers-only response.
  const std::string* grpc_status() const {
    if (auto* s = http::find_header(trailers, "grpc-status")) return s;
    return http::find_header(headers, "grpc-status");
  }
  bool has_status(Code code) const {
    const std::string* s = grpc_status();
    return s != nullptr && *s == std::to_string(int(code));
  }
};

// Sends |head| and |body| (ending the request stream when |end|), then reads the whole
// response. A stream left open is reset once the response ended.
asio::awaitable<Reply> exchange(http::H2Connection& conn, http::RequestHead head, std::string body,
                                bool end = true) {
  bool no_body = body.empty() && end;
  auto s = conn.open_stream(head, no_body);
  REQUIRE(s.ok());
  if (!no_body) {
    Status w = co_await (*s)->write(body, end);
    REQUIRE(w.ok());
  }
  Status h = co_await (*s)->wait_headers();
  INFO(h.to_string());
  REQUIRE(h.ok());
  Reply r;
  r.http_status = (*s)->status();
  r.headers = (*s)->headers();
  for (;;) {
    auto chunk = co_await (*s)->read();
    INFO(chunk.status().to_string());
    REQUIRE(chunk.ok());
    if (chunk->empty()) break;
    r.body += *chunk;
  }
  r.trailers = (*s)->trailers();
  if (!(*s)->closed()) (*s)->reset(NGHTTP2_CANCEL);
  co_return r;
}

// A well-formed EmptyCall on |conn|: proves the server and the connection survived.
asio::awaitable<void> good_call(http::H2Connection& conn) {
  auto r = co_await exchange(conn, grpc_head(), encode_message(""));
  CHECK(r.http_status == 200);
  CHECK(r.has_status(Code::kOk));
  CHECK(r.body == encode_message(""));
}

struct Env {
  net::Executor executor;
  uint16_t port = 0;

  http::DialOptions dial() const {
    http::DialOptions d;
    d.host = "127.0.0.1";
    d.port = port;
    return d;
  }
};

// Serves an EmptyService on 127.0.0.1:0, dials one HTTP/2 connection and runs |body| on it,
// then a good call on the same connection; the server is shut down even when |body| fails.
template <typename Body>
void with_connection(Body body) {
  EmptyService service;
  Server grpc_server;
  grpc_server.add_service(service);
  asio::io_context io;
  http::Router router;
  grpc_server.register_with(router);
  http::Server server(io.get_executor(), router, http::ServerOptions());
  REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
  server.start();
  Env env{io.get_executor(), server.port()};
  run_sync(io, [&]() -> asio::awaitable<void> {
    std::exception_ptr failure;
    std::shared_ptr<http::H2Connection> conn;
    try {
      auto dialed = co_await http::dial_h2(env.executor, env.dial(), net::after(2s));
      REQUIRE(dialed.ok());
      conn = *dialed;
      co_await body(*conn, env);
      co_await good_call(*conn);
    } catch (...) {
      failure = std::current_exception();
    }
    if (conn) conn->close();
    co_await server.shutdown(net::after(2s));
    if (failure) std::rethrow_exception(failure);
  }());
}

TEST_CASE("Server: a compressed message without grpc-encoding is INTERNAL", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    auto r = co_await exchange(conn, grpc_head(), prefix(1, 0));
    CHECK(r.http_status == 200);
    CHECK(r.has_status(Code::kInternal));
  });
}

TEST_CASE("Server: a request stream that ends inside a message is INTERNAL", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    auto r = co_await exchange(conn, grpc_head(), prefix(0, 10) + "abc");
    CHECK(r.has_status(Code::kInternal));
    auto cut = co_await exchange(conn, grpc_head(), prefix(0, 10).substr(0, 3));
    CHECK(cut.has_status(Code::kInternal));
  });
}

TEST_CASE("Server: a length prefix of 0xFFFFFFFF is RESOURCE_EXHAUSTED at once", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    // The request stream stays open: the answer must not wait for a body that never comes.
    auto r = co_await exchange(conn, grpc_head(), prefix(0, 0xFFFFFFFFu), false);
    CHECK(r.http_status == 200);
    CHECK(r.has_status(Code::kResourceExhausted));
  });
}

TEST_CASE("Server: a wrong content-type is HTTP 415", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    for (const char* ct : {"application/json", "application/grpcx", "text/plain"}) {
      INFO(ct);
      auto head = grpc_head();
      head.headers[0].value = ct;
      auto r = co_await exchange(conn, head, encode_message(""));
      CHECK(r.http_status == 415);
      CHECK(r.grpc_status() == nullptr);
    }
    SECTION("application/grpc+proto and parameters are gRPC") {
      for (const char* ct : {"application/grpc+proto", "application/grpc;charset=utf-8"}) {
        INFO(ct);
        auto head = grpc_head();
        head.headers[0].value = ct;
        auto r = co_await exchange(conn, head, encode_message(""));
        CHECK(r.has_status(Code::kOk));
      }
    }
  });
}

TEST_CASE("Server: a missing content-type on a gRPC path is HTTP 415", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    auto head = grpc_head();
    head.headers.erase(head.headers.begin());
    auto r = co_await exchange(conn, head, encode_message(""));
    CHECK(r.http_status == 415);
  });
}

TEST_CASE("Server: GET instead of POST is HTTP 405", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    auto head = grpc_head();
    head.method = "GET";
    auto r = co_await exchange(conn, head, "");
    CHECK(r.http_status == 405);
    CHECK(r.grpc_status() == nullptr);
  });
}

TEST_CASE("Server: a bad grpc-timeout is an error status, never a crash", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    for (const char* t : {"", "S", "abc", "1x", "123456789S", "-1S", "1.5S", "99999999999999H"}) {
      INFO("grpc-timeout " << t);
      auto head = grpc_head();
      head.headers.push_back(field("grpc-timeout", t));
      auto r = co_await exchange(conn, head, encode_message(""));
      CHECK(r.http_status == 200);
      REQUIRE(r.grpc_status() != nullptr);
      CHECK(*r.grpc_status() != "0");
    }
    SECTION("the largest valid timeout is accepted") {
      auto head = grpc_head();
      head.headers.push_back(field("grpc-timeout", "99999999H"));
      auto r = co_await exchange(conn, head, encode_message(""));
      CHECK(r.has_status(Code::kOk));
    }
  });
}

TEST_CASE("Server: an unsupported grpc-encoding is UNIMPLEMENTED with grpc-accept-encoding",
          "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    auto head = grpc_head();
    head.headers.push_back(field("grpc-encoding", "gzip"));
    auto r = co_await exchange(conn, head, prefix(1, 0));
    CHECK(r.http_status == 200);
    CHECK(r.has_status(Code::kUnimplemented));
    const std::string* accept = http::find_header(r.headers, "grpc-accept-encoding");
    if (accept == nullptr) accept = http::find_header(r.trailers, "grpc-accept-encoding");
    REQUIRE(accept != nullptr);
    CHECK(accept->find("identity") != std::string::npos);

    SECTION("grpc-encoding identity is plain gRPC") {
      auto id = grpc_head();
      id.headers.push_back(field("grpc-encoding", "identity"));
      auto ok = co_await exchange(conn, id, encode_message(""));
      CHECK(ok.has_status(Code::kOk));
    }
  });
}

TEST_CASE("Server: a unary call with zero or two request messages is INTERNAL", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    auto none = co_await exchange(conn, grpc_head(), "");
    CHECK(none.has_status(Code::kInternal));
    auto two = co_await exchange(conn, grpc_head(), encode_message("") + encode_message(""));
    CHECK(two.has_status(Code::kInternal));
  });
}

TEST_CASE("Server: an unparsable request message is INTERNAL", "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env&) -> asio::awaitable<void> {
    // Field 1, wire type 2, length 100: the length runs past the message.
    auto r = co_await exchange(conn, grpc_head(), encode_message(std::string("\x0a\x64", 2)));
    CHECK(r.has_status(Code::kInternal));
  });
}

// Writes |bytes| on a raw TCP connection to |port| and reads until the server closes it.
// Returns what the server sent; fails the test if the connection is still open after 2 s.
asio::awaitable<std::string> send_raw_until_closed(uint16_t port, std::string bytes) {
  auto ex = co_await asio::this_coro::executor;
  auto socket = co_await net::dial_tcp(ex, "127.0.0.1", port, net::after(2s));
  REQUIRE(socket.ok());
  auto stream = net::make_stream(std::move(*socket));
  Status w = co_await stream->write(bytes);
  REQUIRE(w.ok());
  std::string got;
  std::vector<char> buf(4096);
  auto deadline = net::after(2s);
  for (;;) {
    auto n = co_await net::with_deadline(stream->read_some(buf), deadline, "read");
    if (!n.ok()) {
      INFO(n.status().to_string());
      REQUIRE(n.status().code() == Code::kUnavailable);  // closed, not timed out
      break;
    }
    got.append(buf.data(), *n);
  }
  stream->close();
  co_return got;
}

// The types of the HTTP/2 frames in |bytes| (RFC 9113 §4.1), as far as they are complete.
std::vector<uint8_t> frame_types(std::string_view bytes) {
  std::vector<uint8_t> types;
  while (bytes.size() >= 9) {
    size_t len = (size_t(uint8_t(bytes[0])) << 16) | (size_t(uint8_t(bytes[1])) << 8) |
                 size_t(uint8_t(bytes[2]));
    types.push_back(uint8_t(bytes[3]));
    if (bytes.size() < 9 + len) break;
    bytes.remove_prefix(9 + len);
  }
  return types;
}

std::string h2_frame(uint8_t type, uint8_t flags, uint32_t stream, std::string payload,
                     size_t declared_length = SIZE_MAX) {
  size_t len = declared_length == SIZE_MAX ? payload.size() : declared_length;
  std::string f;
  f.push_back(char(len >> 16));
  f.push_back(char(len >> 8));
  f.push_back(char(len));
  f.push_back(char(type));
  f.push_back(char(flags));
  f.push_back(char((stream >> 24) & 0x7f));
  f.push_back(char(stream >> 16));
  f.push_back(char(stream >> 8));
  f.push_back(char(stream));
  return f + payload;
}

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr uint8_t kSettings = 0x4, kHeaders = 0x1, kData = 0x0, kGoaway = 0x7;

TEST_CASE("Server: a TCP client sending garbage instead of the preface is closed, others served",
          "[grpc][unit]") {
  with_connection([](http::H2Connection& conn, Env& env) -> asio::awaitable<void> {
    std::string garbage("\x00\x01\x02\xff garbage\r\n\r\n", 16);
    co_await send_raw_until_closed(env.port, garbage);
    co_await send_raw_until_closed(env.port, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
    co_await good_call(conn);
  });
}

TEST_CASE("Server: a malformed HTTP/2 frame after the preface closes only that connection",
          "[grpc][unit]") {
  std::string settings = h2_frame(kSettings, 0, 0, "");
  struct Case {
    const char* name;
    std::string bytes;
  };
  std::vector<Case> cases;
  // SETTINGS payloads are multiples of 6 bytes (§6.5): FRAME_SIZE_ERROR.
  cases.push_back(Case{"short SETTINGS", h2_frame(kSettings, 0, 0, std::string(5, '\0'))});
  // DATA on stream 0 (§6.1): PROTOCOL_ERROR.
  cases.push_back(Case{"DATA on stream 0", settings + h2_frame(kData, 0, 0, "x")});
  // A frame longer than SETTINGS_MAX_FRAME_SIZE (§4.2): FRAME_SIZE_ERROR.
  cases.push_back(
      Case{"oversized frame", settings + h2_frame(kData, 0, 1, std::string(20000, 'x'))});
  // An HPACK block that indexes past the table (§4.3): COMPRESSION_ERROR.
  cases.push_back(
      Case{"bad HPACK", settings + h2_frame(kHeaders, 0x4 | 0x1, 1, "\xff\xff\xff\x7f")});
  // The first frame after the preface must be SETTINGS (§3.4).
  cases.push_back(Case{"HEADERS before SETTINGS", h2_frame(kHeaders, 0x5, 1, "\x82")});
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      with_connection([&](http::H2Connection& conn, Env& env) -> asio::awaitable<void> {
        std::string got = co_await send_raw_until_closed(env.port, std::string(kPreface) + c.bytes);
        auto types = frame_types(got);
        CHECK(std::find(types.begin(), types.end(), kGoaway) != types.end());
        co_await good_call(conn);
      });
    }
  }
}

}  // namespace
}  // namespace cb::grpc
