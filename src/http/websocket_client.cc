#include "http/websocket_client.h"

#include "base/log.h"
#include "http/http1_client.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <sys/random.h>

namespace cb::http {

namespace {

// Random bytes for handshake keys and frame masks (RFC 6455 §5.3: masks must not be
// predictable). getrandom(2) does not fail for requests this small once the pool is ready.
template <size_t N>
std::array<uint8_t, N> random_bytes() {
  std::array<uint8_t, N> out{};
  size_t got = 0;
  while (got < N) {
    ssize_t n = ::getrandom(out.data() + got, N - got, 0);
    if (n < 0 && errno == EINTR) continue;
    CB_CHECK(n > 0);
    got += static_cast<size_t>(n);
  }
  return out;
}

bool contains_token(const std::string& value, std::string_view token) {
  // Comma-separated, case-insensitive (Connection: keep-alive, Upgrade).
  size_t i = 0;
  while (i <= value.size()) {
    size_t j = value.find(',', i);
    if (j == std::string::npos) j = value.size();
    std::string_view t(value.data() + i, j - i);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (t.size() == token.size()) {
      bool same = true;
      for (size_t k = 0; k < t.size() && same; ++k)
        same = std::tolower(static_cast<unsigned char>(t[k])) ==
               std::tolower(static_cast<unsigned char>(token[k]));
      if (same) return true;
    }
    i = j + 1;
  }
  return false;
}

}  // namespace

asio::awaitable<Result<std::unique_ptr<WebSocketClient>>> WebSocketClient::connect(
    net::Executor ex, std::string host, uint16_t port, std::string path, WebSocketOptions options,
    net::Deadline deadline) {
  Http1DialOptions dial;
  dial.host = host;
  dial.port = port;
  CO_ASSIGN_OR_RETURN(auto client, co_await dial_http1(ex, std::move(dial), deadline));
  const std::string key = ws::handshake_key(random_bytes<16>());
  Headers headers = options.headers;
  headers.push_back(Header{std::string("upgrade"), std::string("websocket")});
  headers.push_back(Header{std::string("connection"), std::string("Upgrade")});
  headers.push_back(Header{std::string("sec-websocket-key"), key});
  headers.push_back(Header{std::string("sec-websocket-version"), std::string("13")});
  auto up = co_await client->upgrade(std::move(path), std::move(headers), deadline);
  if (!up.ok()) co_return up.status().with_prefix("websocket handshake");
  const Headers& h = up->response.headers;
  const std::string* upgrade = find_header(h, "upgrade");
  const std::string* connection = find_header(h, "connection");
  const std::string* accept = find_header(h, "sec-websocket-accept");
  if (upgrade == nullptr || !contains_token(*upgrade, "websocket"))
    co_return failed_precondition("websocket handshake: the 101 has no Upgrade: websocket");
  if (connection == nullptr || !contains_token(*connection, "upgrade"))
    co_return failed_precondition("websocket handshake: the 101 has no Connection: Upgrade");
  if (accept == nullptr || *accept != ws::handshake_accept(key))
    co_return failed_precondition("websocket handshake: wrong Sec-WebSocket-Accept");
  if (find_header(h, "sec-websocket-extensions") != nullptr)
    co_return failed_precondition("websocket handshake: server chose an extension not offered");
  if (find_header(h, "sec-websocket-protocol") != nullptr)
    co_return failed_precondition("websocket handshake: server chose a subprotocol not offered");
  co_return std::make_unique<WebSocketClient>(std::move(up->stream), std::move(up->leftover),
                                              std::move(options));
}

WebSocketClient::WebSocketClient(std::unique_ptr<net::Stream> stream, std::string leftover,
                                 WebSocketOptions options)
    : stream_(std::move(stream)),
      options_(std::move(options)),
      parser_(ws::FrameParserOptions{options_.max_message, true}),
      leftover_(std::move(leftover)) {}

WebSocketClient::~WebSocketClient() { abort(); }

void WebSocketClient::abort() {
  if (stream_) stream_->close();
  if (!broken_) broken_status_ = unavailable("websocket: closed");
  broken_ = true;
}

Status WebSocketClient::broken(Status why) {
  if (!broken_) broken_status_ = why;
  broken_ = true;
  stream_->close();
  return why;
}

asio::awaitable<Result<ws::Message>> WebSocketClient::read(net::Deadline deadline) {
  std::string buf(64 * 1024, '\0');
  // Frames that came right behind the 101 are parsed here, where a violation can be answered.
  std::string first = std::move(leftover_);
  leftover_.clear();
  while (true) {
    if (!first.empty()) {
      Status s = parser_.feed(first);
      first.clear();
      if (!s.ok()) {
        if (!close_sent_) {
          out_ += ws::encode_close(parser_.close_code(), "", random_bytes<4>());
          close_sent_ = true;
          (void)co_await flush();
        }
        co_return broken(s);
      }
    }
    while (auto m = parser_.next()) {
      switch (m->opcode) {
        case ws::Opcode::kText:
        case ws::Opcode::kBinary:
          co_return std::move(*m);
        case ws::Opcode::kPing: {
          Status s = co_await send_frame(ws::Opcode::kPong, m->payload);
          if (!s.ok()) co_return s;
          break;
        }
        case ws::Opcode::kPong:
          break;
        case ws::Opcode::kContinuation:  // never comes out of the parser
          break;
        case ws::Opcode::kClose: {
          const uint16_t code = m->close_code;
          std::string why = fmt::format("websocket closed by peer: {}{}{}", code,
                                        m->close_reason.empty() ? "" : " ", m->close_reason);
          peer_close_ = std::move(*m);
          if (!close_sent_ && !broken_) {
            // Echo the code (RFC 6455 §5.5.1); 1005 is never sent, so answer 1000 then.
            const uint16_t answer = code == ws::kCloseNoStatus ? ws::kCloseNormal : code;
            out_ += ws::encode_close(answer, "", random_bytes<4>());
            close_sent_ = true;
            (void)co_await flush();
          }
          co_return broken(unavailable(why));
        }
      }
    }
    if (broken_) co_return broken_status_;
    auto n = co_await net::with_deadline(
        stream_->read_some(std::span<char>(buf.data(), buf.size())), deadline, "websocket read");
    if (!n.ok()) {
      if (n.status().code() == Code::kDeadlineExceeded) co_return n.status();
      co_return broken(n.status().with_prefix("websocket read"));
    }
    Status s = parser_.feed(std::string_view(buf.data(), *n));
    if (!s.ok()) {
      if (!close_sent_) {
        out_ += ws::encode_close(parser_.close_code(), "", random_bytes<4>());
        close_sent_ = true;
        (void)co_await flush();
      }
      co_return broken(s);
    }
  }
}

asio::awaitable<Status> WebSocketClient::send_text(std::string_view text) {
  co_return co_await send_frame(ws::Opcode::kText, text);
}

asio::awaitable<Status> WebSocketClient::send_binary(std::string_view data) {
  co_return co_await send_frame(ws::Opcode::kBinary, data);
}

asio::awaitable<Status> WebSocketClient::ping(std::string_view payload) {
  if (payload.size() > ws::kMaxControlPayload)
    co_return invalid_argument("websocket ping: payload over 125 bytes");
  co_return co_await send_frame(ws::Opcode::kPing, payload);
}

asio::awaitable<Status> WebSocketClient::send_frame(ws::Opcode opcode, std::string_view payload) {
  if (broken_) co_return broken_status_;
  if (close_sent_) co_return failed_precondition("websocket: close already sent");
  if (out_.size() + payload.size() > options_.max_queued)
    co_return resource_exhausted("websocket: send queue full");
  out_ += ws::encode_frame(opcode, payload, true, random_bytes<4>());
  co_return co_await flush();
}

asio::awaitable<Status> WebSocketClient::flush() {
  // Another sender is writing: it takes our frame with the rest of the queue.
  if (writing_) co_return Status();
  writing_ = true;
  while (!out_.empty() && !broken_) {
    std::string chunk = std::move(out_);
    out_.clear();
    Status s = co_await stream_->write(chunk);
    if (!s.ok()) {
      writing_ = false;
      co_return broken(s.with_prefix("websocket write"));
    }
  }
  writing_ = false;
  co_return broken_ ? broken_status_ : Status();
}

asio::awaitable<void> WebSocketClient::close(uint16_t code, std::string_view reason,
                                             net::Deadline deadline) {
  if (broken_) {
    abort();
    co_return;
  }
  if (!close_sent_) {
    out_ += ws::encode_close(code, reason, random_bytes<4>());
    close_sent_ = true;
    Status s = co_await flush();
    if (!s.ok()) co_return;
  }
  // Wait for the peer's close frame; read() answers nothing now that ours went out.
  while (!broken_ && !peer_close_) {
    auto m = co_await read(deadline);
    if (!m.ok()) break;
  }
  abort();
}

}  // namespace cb::http
