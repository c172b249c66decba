#pragma once
// WebSocketClient is one client WebSocket connection (RFC 6455) over plaintext TCP, for
// loopback peers such as Chromium's DevTools endpoint (README.md §WebSocket). The opening
// handshake goes through Http1Client::upgrade(); frames go through ws::FrameParser and
// ws::encode_frame().
//
//   CO_ASSIGN_OR_RETURN(auto ws, co_await WebSocketClient::connect(ex, "127.0.0.1", port,
//                                                                  "/devtools/browser/x", {}, dl));
//   CO_RETURN_IF_ERROR(co_await ws->send_text("{...}"));
//   CO_ASSIGN_OR_RETURN(ws::Message m, co_await ws->read(deadline));
//
// The handshake sends no Origin field (DevTools refuses connections that carry one) and
// Host as "host:port". Pings are answered with pongs inside read(); a close frame from the
// peer is answered and ends the connection.
//
// Failure: a protocol violation by the peer sends a close frame with the matching code
// (1002, 1007, 1009) and closes the connection; a cancelled or failed write closes it too,
// since a frame cut in half cannot be resumed. Afterwards every call fails.
//
// Affinity: the executor passed to connect(). At most one read() at a time; send_*() may be
// called from several coroutines (frames never interleave: they are queued and written by
// whichever sender found the writer idle).

#include "base/result.h"
#include "http/headers.h"
#include "http/websocket.h"
#include "net/asio.h"
#include "net/stream.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cb::http {

struct WebSocketOptions {
  // Largest message read() accepts (close 1009 beyond).
  size_t max_message = 64u << 20;
  // Largest queue of unsent frames; a send beyond it is kResourceExhausted.
  size_t max_queued = 64u << 20;
  // Extra request fields for the handshake (no Origin unless the caller adds one).
  Headers headers;
};

class WebSocketClient {
 public:
  // Dials |host|:|port| and performs the opening handshake for |path|.
  // Errors: kUnavailable (connect, I/O), kDeadlineExceeded, kFailedPrecondition (the server
  // answered something other than 101, or a wrong Sec-WebSocket-Accept, or negotiated an
  // extension or subprotocol that was not asked for), kInvalidArgument (malformed response).
  static asio::awaitable<Result<std::unique_ptr<WebSocketClient>>> connect(
      net::Executor ex, std::string host, uint16_t port, std::string path, WebSocketOptions options,
      net::Deadline deadline);

  // Over an already upgraded |stream| (tests): |leftover| are bytes read after the 101.
  WebSocketClient(std::unique_ptr<net::Stream> stream, std::string leftover,
                  WebSocketOptions options);
  ~WebSocketClient();
  WebSocketClient(const WebSocketClient&) = delete;
  WebSocketClient& operator=(const WebSocketClient&) = delete;

  // The next text or binary message. Pings are answered and pongs dropped on the way.
  // Errors: kUnavailable when the peer closed (the message names its close code and reason)
  // or the connection dropped; kInvalidArgument / kResourceExhausted for a protocol
  // violation (the connection is closed with 1002/1007/1009); kDeadlineExceeded (the
  // connection stays usable); kCancelled.
  asio::awaitable<Result<ws::Message>> read(net::Deadline deadline);

  // Queue a message and write the queue. Errors: kFailedPrecondition after close, kUnavailable
  // (the connection is broken), kResourceExhausted (queue full), kCancelled (the connection is
  // closed: the frame may be half written).
  asio::awaitable<Status> send_text(std::string_view text);
  asio::awaitable<Status> send_binary(std::string_view data);
  asio::awaitable<Status> ping(std::string_view payload);

  // Sends a close frame with |code| and |reason|, waits until |deadline| for the peer's
  // close frame (messages in between are dropped), then closes the connection. Never fails.
  asio::awaitable<void> close(uint16_t code, std::string_view reason, net::Deadline deadline);
  // Closes the connection at once without a closing handshake. Idempotent.
  void abort();

  bool is_open() const { return !broken_ && !close_sent_; }
  // The peer's close frame, once one arrived.
  const std::optional<ws::Message>& peer_close() const { return peer_close_; }

 private:
  asio::awaitable<Status> send_frame(ws::Opcode opcode, std::string_view payload);
  asio::awaitable<Status> flush();
  Status broken(Status why);

  std::unique_ptr<net::Stream> stream_;
  WebSocketOptions options_;
  ws::FrameParser parser_;
  std::string leftover_;  // bytes after the 101, parsed by the first read()
  std::string out_;       // frames queued, not yet handed to the stream
  bool writing_ = false;
  bool broken_ = false;
  bool close_sent_ = false;
  Status broken_status_;
  std::optional<ws::Message> peer_close_;
};

}  // namespace cb::http
