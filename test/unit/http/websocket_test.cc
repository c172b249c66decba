#include "http/websocket.h"

#include "http/websocket_client.h"
#include "net/stream.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::http::ws {
namespace {

using namespace std::chrono_literals;
using test::run_sync;

const std::array<uint8_t, 4> kMask = {0x37, 0xfa, 0x21, 0x3d};

std::string server_frame(Opcode op, std::string_view payload, bool fin = true) {
  return encode_server_frame(op, payload, fin);
}

std::string close_body(uint16_t code, std::string_view reason = "") {
  std::string b;
  b += static_cast<char>(code >> 8);
  b += static_cast<char>(code & 0xFF);
  b += reason;
  return b;
}

TEST_CASE("websocket: Sec-WebSocket-Accept matches RFC 6455's example", "[http][websocket][unit]") {
  CHECK(handshake_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  std::array<uint8_t, 16> random{};
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<uint8_t>(i + 1);
  CHECK(handshake_key(random) == "AQIDBAUGBwgJCgsMDQ4PEA==");
}

TEST_CASE("websocket: a client frame is masked as RFC 6455 §5.7 shows", "[http][websocket][unit]") {
  // "A single-frame masked text message": 0x81 0x85 0x37 0xfa 0x21 0x3d 0x7f 0x9f 0x4d 0x51 0x58
  const std::string f = encode_frame(Opcode::kText, "Hello", true, kMask);
  const std::string want = "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58";
  CHECK(f == want);
  // A server-side parser reads it back.
  FrameParser p(FrameParserOptions{1024, false});
  REQUIRE(p.feed(f).ok());
  auto m = p.next();
  REQUIRE(m);
  CHECK(m->opcode == Opcode::kText);
  CHECK(m->payload == "Hello");
}

TEST_CASE("FrameParser: whole, fragmented and byte-by-byte messages come out whole",
          "[http][websocket][unit]") {
  FrameParser p;
  SECTION("one frame") {
    REQUIRE(p.feed(server_frame(Opcode::kText, "Hello")).ok());
    auto m = p.next();
    REQUIRE(m);
    CHECK(m->payload == "Hello");
    CHECK_FALSE(p.next());
  }
  SECTION("fragments with a ping between them (RFC 6455 §5.4)") {
    std::string bytes = server_frame(Opcode::kText, "Hel", false) +
                        server_frame(Opcode::kPing, "p") +
                        server_frame(Opcode::kContinuation, "lo", false) +
                        server_frame(Opcode::kContinuation, " world", true);
    REQUIRE(p.feed(bytes).ok());
    auto ping = p.next();
    REQUIRE(ping);
    CHECK(ping->opcode == Opcode::kPing);
    CHECK(ping->payload == "p");
    auto m = p.next();
    REQUIRE(m);
    CHECK(m->opcode == Opcode::kText);
    CHECK(m->payload == "Hello world");
  }
  SECTION("one byte at a time, 16-bit and 64-bit lengths") {
    const std::string mid(300, 'm');
    const std::string big(70000, 'b');
    std::string bytes = server_frame(Opcode::kBinary, mid) + server_frame(Opcode::kText, big);
    for (char c : bytes) REQUIRE(p.feed(std::string_view(&c, 1)).ok());
    auto a = p.next();
    auto b = p.next();
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->opcode == Opcode::kBinary);
    CHECK(a->payload == mid);
    CHECK(b->payload == big);
    CHECK(p.buffered() == 0);
  }
}

TEST_CASE("FrameParser: protocol violations are refused with the close code to send",
          "[http][websocket][unit]") {
  FrameParser p;
  std::string bytes;
  uint16_t want = kCloseProtocolError;
  SECTION("a masked frame from the server") {
    bytes = encode_frame(Opcode::kText, "hi", true, kMask);
  }
  SECTION("reserved bits") {
    bytes = server_frame(Opcode::kText, "hi");
    bytes[0] = static_cast<char>(bytes[0] | 0x40);
  }
  SECTION("an unknown opcode") {
    bytes = server_frame(Opcode::kText, "hi");
    bytes[0] = static_cast<char>(0x83);
  }
  SECTION("a fragmented ping") { bytes = server_frame(Opcode::kPing, "x", false); }
  SECTION("a control frame over 125 bytes") {
    bytes = server_frame(Opcode::kPong, std::string(126, 'x'));
  }
  SECTION("a continuation without a start") { bytes = server_frame(Opcode::kContinuation, "x"); }
  SECTION("a new message inside a fragmented one") {
    bytes = server_frame(Opcode::kText, "a", false) + server_frame(Opcode::kText, "b");
  }
  SECTION("a length not in its shortest form") { bytes = std::string("\x81\x7e\x00\x05hello", 9); }
  SECTION("a 64-bit length with the top bit set") {
    bytes = std::string("\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x01", 10);
  }
  SECTION("a close frame with a 1-byte body") { bytes = server_frame(Opcode::kClose, "x"); }
  SECTION("close codes that may not be sent") {
    const uint16_t code = GENERATE(uint16_t{0}, uint16_t{999}, uint16_t{1004}, uint16_t{1005},
                                   uint16_t{1006}, uint16_t{1015}, uint16_t{2000}, uint16_t{5000});
    bytes = server_frame(Opcode::kClose, close_body(code));
  }
  SECTION("text that is not UTF-8") {
    bytes = server_frame(Opcode::kText, "\xc3\x28");
    want = kCloseInvalidPayload;
  }
  SECTION("a surrogate encoded in UTF-8, split over fragments") {
    bytes = server_frame(Opcode::kText, "\xed\xa0", false) +
            server_frame(Opcode::kContinuation, "\x80", true);
    want = kCloseInvalidPayload;
  }
  SECTION("a close reason that is not UTF-8") {
    bytes = server_frame(Opcode::kClose, close_body(1000, "\xff"));
    want = kCloseInvalidPayload;
  }
  Status s = p.feed(bytes);
  CHECK_FALSE(s.ok());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(p.close_code() == want);
  // The error sticks.
  CHECK_FALSE(p.feed(server_frame(Opcode::kText, "after")).ok());
  CHECK_FALSE(p.next());
}

TEST_CASE("FrameParser: a message over max_message is 1009 before its payload is buffered",
          "[http][websocket][unit]") {
  FrameParser p(FrameParserOptions{100, true});
  SECTION("exactly at the limit is accepted") {
    REQUIRE(p.feed(server_frame(Opcode::kBinary, std::string(100, 'x'))).ok());
    REQUIRE(p.next());
  }
  SECTION("one frame over") {
    // Only the header: the parser refuses before 101 bytes of payload arrive.
    std::string frame = server_frame(Opcode::kBinary, std::string(101, 'x')).substr(0, 2);
    Status s = p.feed(frame);
    CHECK(s.code() == Code::kResourceExhausted);
    CHECK(p.close_code() == kCloseTooBig);
  }
  SECTION("fragments adding up to more") {
    Status s = p.feed(server_frame(Opcode::kText, std::string(60, 'x'), false) +
                      server_frame(Opcode::kContinuation, std::string(41, 'x'), true));
    CHECK(s.code() == Code::kResourceExhausted);
    CHECK(p.close_code() == kCloseTooBig);
  }
}

TEST_CASE("FrameParser: a close frame ends parsing and carries code and reason",
          "[http][websocket][unit]") {
  FrameParser p;
  REQUIRE(p.feed(server_frame(Opcode::kClose, close_body(4001, "bye")) +
                 server_frame(Opcode::kText, "ignored"))
              .ok());
  auto m = p.next();
  REQUIRE(m);
  CHECK(m->opcode == Opcode::kClose);
  CHECK(m->close_code == 4001);
  CHECK(m->close_reason == "bye");
  CHECK(p.closed());
  CHECK_FALSE(p.next());
  SECTION("an empty close body means no status") {
    FrameParser q;
    REQUIRE(q.feed(server_frame(Opcode::kClose, "")).ok());
    CHECK(q.next()->close_code == kCloseNoStatus);
  }
}

TEST_CASE("encode_close: the reason is cut to fit a control frame on a UTF-8 boundary",
          "[http][websocket][unit]") {
  std::string reason;
  for (int i = 0; i < 100; ++i) reason += "\xc3\xa9";  // 200 bytes of é
  const std::string f = encode_close(1000, reason, kMask);
  FrameParser p(FrameParserOptions{1024, false});
  REQUIRE(p.feed(f).ok());
  auto m = p.next();
  REQUIRE(m);
  CHECK(m->close_code == 1000);
  CHECK(m->close_reason.size() <= 123);
  CHECK(is_valid_utf8(m->close_reason));
}

// ---- the client over loopback, against a scripted server --------------------------------

// Reads from |s| until |buf| holds |marker|.
asio::awaitable<void> read_until(net::Stream& s, std::string& buf, std::string_view marker) {
  std::vector<char> tmp(4096);
  while (buf.find(marker) == std::string::npos) {
    auto n = co_await s.read_some(tmp);
    REQUIRE(n.ok());
    buf.append(tmp.data(), *n);
  }
}

// Reads whole client frames (masked) from |s|, one parser for the connection.
struct ClientFrames {
  FrameParser parser{FrameParserOptions{1 << 20, false}};
  asio::awaitable<Message> next(net::Stream& s, std::string& buf) {
    std::vector<char> tmp(4096);
    while (true) {
      if (!buf.empty()) {
        Status fed = parser.feed(buf);
        REQUIRE(fed.ok());
        buf.clear();
      }
      if (auto m = parser.next()) co_return std::move(*m);
      auto n = co_await s.read_some(tmp);
      REQUIRE(n.ok());
      buf.append(tmp.data(), *n);
    }
  }
};

TEST_CASE("WebSocketClient: handshake, fragmented message, ping/pong and close over loopback",
          "[http][websocket][integration]") {
  run_sync([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto listener = net::TcpListener::listen(ex, "127.0.0.1", 0);
    REQUIRE(listener.ok());
    const uint16_t port = listener->port();
    std::string request_head;
    std::string pong_payload;
    std::string echoed;
    uint16_t client_close_code = 0;

    auto server = [&]() -> asio::awaitable<void> {
      auto sock = co_await listener->accept();
      REQUIRE(sock.ok());
      auto s = net::make_stream(std::move(*sock));
      std::string buf;
      co_await read_until(*s, buf, "\r\n\r\n");
      request_head = buf.substr(0, buf.find("\r\n\r\n") + 4);
      buf.erase(0, request_head.size());
      const size_t k = request_head.find("sec-websocket-key: ");
      REQUIRE(k != std::string::npos);
      const std::string key = request_head.substr(k + 19, request_head.find("\r\n", k) - k - 19);
      // The 101, and right behind it (in the same write) a fragmented text message and a ping.
      std::string out =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
          "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
          handshake_accept(key) + "\r\n\r\n";
      out += server_frame(Opcode::kText, "{\"id\":", false) +
             server_frame(Opcode::kPing, "are you") +
             server_frame(Opcode::kContinuation, "1}", true);
      Status w = co_await s->write(out);
      REQUIRE(w.ok());
      ClientFrames frames;
      Message pong = co_await frames.next(*s, buf);
      REQUIRE(pong.opcode == Opcode::kPong);
      pong_payload = pong.payload;
      Message text = co_await frames.next(*s, buf);
      echoed = text.payload;
      std::string close_frame = server_frame(Opcode::kClose, close_body(1001, "going"));
      w = co_await s->write(close_frame);
      REQUIRE(w.ok());
      Message close = co_await frames.next(*s, buf);
      REQUIRE(close.opcode == Opcode::kClose);
      client_close_code = close.close_code;
    };
    auto client = [&]() -> asio::awaitable<void> {
      auto ws = co_await WebSocketClient::connect(ex, "127.0.0.1", port, "/devtools/browser/x",
                                                  WebSocketOptions{}, net::after(10s));
      REQUIRE(ws.ok());
      auto m = co_await (*ws)->read(net::after(10s));
      REQUIRE(m.ok());
      CHECK(m->payload == "{\"id\":1}");
      Status sent = co_await (*ws)->send_text("echo");
      REQUIRE(sent.ok());
      auto end = co_await (*ws)->read(net::after(10s));
      CHECK(end.status().code() == Code::kUnavailable);
      CHECK(end.status().message().find("1001 going") != std::string_view::npos);
      REQUIRE((*ws)->peer_close());
      CHECK((*ws)->peer_close()->close_code == 1001);
      CHECK_FALSE((*ws)->is_open());
    };
    using namespace asio::experimental::awaitable_operators;
    co_await (server() && client());
    CHECK(request_head.rfind("GET /devtools/browser/x HTTP/1.1\r\n", 0) == 0);
    CHECK(request_head.find("upgrade: websocket") != std::string::npos);
    CHECK(request_head.find("sec-websocket-version: 13") != std::string::npos);
    CHECK(request_head.find(std::string("host: 127.0.0.1:") + std::to_string(port)) !=
          std::string::npos);
    CHECK(request_head.find("origin") == std::string::npos);
    CHECK(pong_payload == "are you");
    CHECK(echoed == "echo");
    CHECK(client_close_code == 1001);
  }());
}

TEST_CASE("WebSocketClient: a wrong Sec-WebSocket-Accept is refused",
          "[http][websocket][integration]") {
  run_sync([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto listener = net::TcpListener::listen(ex, "127.0.0.1", 0);
    REQUIRE(listener.ok());
    const uint16_t port = listener->port();
    auto server = [&]() -> asio::awaitable<void> {
      auto sock = co_await listener->accept();
      REQUIRE(sock.ok());
      auto s = net::make_stream(std::move(*sock));
      std::string buf;
      co_await read_until(*s, buf, "\r\n\r\n");
      std::string out =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
          "Connection: Upgrade\r\nSec-WebSocket-Accept: bm9wZQ==\r\n\r\n";
      Status w = co_await s->write(out);
      REQUIRE(w.ok());
    };
    Status result;
    auto client = [&]() -> asio::awaitable<void> {
      auto ws = co_await WebSocketClient::connect(ex, "127.0.0.1", port, "/", WebSocketOptions{},
                                                  net::after(10s));
      result = ws.status();
    };
    using namespace asio::experimental::awaitable_operators;
    co_await (server() && client());
    CHECK(result.code() == Code::kFailedPrecondition);
    CHECK(result.message().find("Sec-WebSocket-Accept") != std::string_view::npos);
  }());
}

TEST_CASE("WebSocketClient: a protocol violation is answered with close 1002",
          "[http][websocket][integration]") {
  run_sync([]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto listener = net::TcpListener::listen(ex, "127.0.0.1", 0);
    REQUIRE(listener.ok());
    const uint16_t port = listener->port();
    uint16_t got_code = 0;
    auto server = [&]() -> asio::awaitable<void> {
      auto sock = co_await listener->accept();
      REQUIRE(sock.ok());
      auto s = net::make_stream(std::move(*sock));
      std::string buf;
      co_await read_until(*s, buf, "\r\n\r\n");
      const std::string head = buf.substr(0, buf.find("\r\n\r\n") + 4);
      buf.erase(0, head.size());
      const size_t k = head.find("sec-websocket-key: ");
      const std::string key = head.substr(k + 19, head.find("\r\n", k) - k - 19);
      std::string out =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
          "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
          handshake_accept(key) + "\r\n\r\n";
      out += encode_frame(Opcode::kText, "masked", true, kMask);  // servers must not mask
      Status w = co_await s->write(out);
      REQUIRE(w.ok());
      ClientFrames frames;
      Message close = co_await frames.next(*s, buf);
      got_code = close.close_code;
    };
    Status result;
    auto client = [&]() -> asio::awaitable<void> {
      auto ws = co_await WebSocketClient::connect(ex, "127.0.0.1", port, "/", WebSocketOptions{},
                                                  net::after(10s));
      REQUIRE(ws.ok());
      auto m = co_await (*ws)->read(net::after(10s));
      result = m.status();
    };
    using namespace asio::experimental::awaitable_operators;
    co_await (server() && client());
    CHECK(result.code() == Code::kInvalidArgument);
    CHECK(got_code == kCloseProtocolError);
  }());
}

}  // namespace
}  // namespace cb::http::ws
