#pragma once
// H2Connection is one HTTP/2 connection (RFC 9113) on nghttp2, client or server side, over a
// net::Stream (TLS with ALPN "h2", or plaintext h2c with prior knowledge). H2Stream is the
// handle for one stream on it.
//
// Shape (house style H13): nghttp2 is the sans-I/O protocol core; run() is the pump. A reader
// feeds received bytes to nghttp2_session_mem_recv; a writer drains nghttp2_session_mem_send to
// the socket whenever something was submitted. Every nghttp2 call happens on the connection's
// executor, so no locks exist anywhere here.
//
// Flow control is explicit: received DATA is credited back to the peer (WINDOW_UPDATE) only
// when the application read()s it, so a slow reader stalls only its own stream. Windows are
// configurable in H2Options; bulk streams need far more than the 64 KiB protocol default.
//
// Lifetime: an H2Connection is shared (co-owners: its own run() coroutine, the server's
// connection set or a client's channel, and every H2Stream's back-pointer user while it
// submits). close() sends GOAWAY and ends run(). An H2Stream is shared by the connection's
// stream table (until the stream closes) and the application.
//
// Affinity: everything, including H2Stream, runs on executor(). Not copyable.

#include "base/result.h"
#include "http/headers.h"
#include "net/asio.h"
#include "net/signal.h"
#include "net/stream.h"

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace cb::http {

struct H2Options {
  // SETTINGS_INITIAL_WINDOW_SIZE we announce, per stream. 4 MiB keeps a 1 Gbit/s stream busy
  // at 30 ms RTT; the protocol default (64 KiB) caps a stream at ~2 MiB/s at that RTT.
  uint32_t stream_window = 4u << 20;
  // The connection-level receive window (all streams together).
  uint32_t connection_window = 32u << 20;
  uint32_t max_concurrent_streams = 1000;
  uint32_t max_header_list_size = 64u << 10;
  uint32_t max_frame_size = 16384;  // RFC 9113 §6.5.2 default; peers may refuse larger
  // Outbound bytes buffered per stream before write() waits for the peer to take them.
  size_t stream_write_buffer = 1u << 20;
  // Keepalive: a PING every |keepalive_interval| while the connection is open (0 = off); no
  // PING ACK within |keepalive_timeout| closes the connection.
  std::chrono::milliseconds keepalive_interval{0};
  std::chrono::milliseconds keepalive_timeout{20000};
};

class H2Connection;

class H2Stream {
 public:
  H2Stream(const H2Stream&) = delete;
  H2Stream& operator=(const H2Stream&) = delete;
  ~H2Stream();

  int32_t id() const { return id_; }
  // Request fields (server side) or response fields (client side, after wait_headers()).
  const RequestHead& request() const { return request_; }
  int status() const { return status_; }  // response :status (client side)
  const Headers& headers() const { return headers_; }
  // Trailing fields; complete once read() returned end of stream.
  const Headers& trailers() const { return trailers_; }

  // Client side: waits for the response HEADERS (1xx are skipped). Returns ok also when the
  // response was trailers-only. Errors: kCancelled (reset), kUnavailable (connection lost).
  asio::awaitable<Status> wait_headers();

  // The next chunk of the body, or an empty string at end of stream.
  // Errors: kCancelled (peer or we reset the stream), kUnavailable (connection lost),
  // kCancelled when the calling coroutine is cancelled.
  asio::awaitable<Result<std::string>> read();
  // Everything already received, without waiting (possibly empty).
  std::string take_buffered();
  bool end_of_stream_received() const { return in_end_ && in_buf_.empty(); }

  // Server side: sends the response HEADERS; |end_stream| makes it a headers-only response.
  // Errors: kFailedPrecondition (already sent or stream closed).
  Status send_response(int status, const Headers& headers, bool end_stream);

  // Queues |data| and waits while more than stream_write_buffer bytes are pending. With
  // |end_stream| the stream's send side ends after |data|. Errors: kCancelled, kUnavailable,
  // kFailedPrecondition (send side already ended).
  asio::awaitable<Status> write(std::string_view data, bool end_stream = false);
  // Ends the send side with trailing fields after any queued data.
  Status send_trailers(const Headers& trailers);
  // Waits until all queued data was handed to the connection. Errors as write().
  asio::awaitable<Status> drain();

  // From now on received DATA is dropped and credited back at once: for a handler that has
  // answered while the peer is still sending.
  void discard_input();

  // RST_STREAM with |error_code| (NGHTTP2_CANCEL by default). Pending reads/writes fail.
  void reset(uint32_t error_code = NGHTTP2_CANCEL);

  bool closed() const { return closed_; }
  // The RST_STREAM code that closed the stream (0 for a normal close).
  uint32_t close_code() const { return close_code_; }
  // Waits until the stream is closed in both directions.
  asio::awaitable<void> wait_closed();

  // A slot that fires when the stream is reset or its connection dies: server handlers are
  // spawned bound to it, so everything they await is cancelled with the stream.
  asio::cancellation_slot cancellation_slot() { return cancel_.slot(); }
  net::Executor executor() const;
  H2Connection& connection() { return *conn_; }

 private:
  friend class H2Connection;
  friend struct H2Callbacks;
  H2Stream(std::shared_ptr<H2Connection> conn, int32_t id);
  void on_closed(uint32_t code);
  Status closed_status() const;

  std::shared_ptr<H2Connection> conn_;  // keeps the session alive while the app holds us
  int32_t id_;
  RequestHead request_;
  int status_ = 0;
  Headers headers_;
  Headers trailers_;
  bool headers_done_ = false;

  std::string in_buf_;
  bool in_end_ = false;
  bool discard_input_ = false;
  size_t unconsumed_ = 0;  // bytes received but not yet credited back to the peer

  std::string out_buf_;
  size_t out_off_ = 0;
  bool out_started_ = false;  // headers submitted
  bool out_end_ = false;      // no more data after out_buf_
  bool out_deferred_ = false;
  bool has_trailers_ = false;
  Headers out_trailers_;

  bool closed_ = false;
  uint32_t close_code_ = 0;
  net::Signal in_signal_;
  net::Signal out_signal_;
  asio::cancellation_signal cancel_;
};

class H2Connection : public std::enable_shared_from_this<H2Connection> {
 public:
  enum class Side { kClient, kServer };
  // Server side: called for each new request stream, spawned bound to the stream's
  // cancellation slot. The handler owns the stream's lifetime from then on.
  using StreamHandler = std::function<asio::awaitable<void>(std::shared_ptr<H2Stream>)>;

  // |initial_bytes| were already read from |stream| (protocol detection) and are fed first.
  static std::shared_ptr<H2Connection> make(std::unique_ptr<net::Stream> stream, Side side,
                                            H2Options options, StreamHandler on_stream = {},
                                            std::string initial_bytes = {});
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  // Sends our SETTINGS and pumps until the connection ends; returns why it ended (ok for a
  // clean GOAWAY exchange or EOF). Call exactly once.
  asio::awaitable<Status> run();
  // Client side convenience: spawns run() owned by the connection itself; the connection
  // lives until close() or the peer ends it.
  void start();

  // Client side: opens a stream with |request| (pseudo-headers are built from it). With
  // |end_stream| the request has no body. Errors: kUnavailable (connection closing/closed),
  // kResourceExhausted (stream ids exhausted), kInvalidArgument (bad header).
  Result<std::shared_ptr<H2Stream>> open_stream(const RequestHead& request, bool end_stream);

  // Sends a PING and waits for its ACK. Errors: kDeadlineExceeded, kUnavailable.
  asio::awaitable<Status> ping(net::Deadline deadline);

  // Graceful: GOAWAY (no new streams), existing streams finish, then the connection closes.
  void shutdown();
  // Immediate: GOAWAY and close; every open stream fails with kUnavailable.
  void close();
  // True until close() or the connection died; false after a GOAWAY from either side.
  bool accepting_streams() const { return !dead_ && !goaway_; }
  bool is_dead() const { return dead_; }
  size_t open_streams() const { return streams_.size(); }
  net::Executor executor() const { return executor_; }
  const net::Stream& transport() const { return *stream_; }

 private:
  friend class H2Stream;
  friend struct H2Callbacks;
  H2Connection(std::unique_ptr<net::Stream> stream, Side side, H2Options options,
               StreamHandler on_stream, std::string initial_bytes);

  asio::awaitable<Status> reader_loop();
  asio::awaitable<void> writer_loop();
  asio::awaitable<void> keepalive_loop();
  void want_write() { write_signal_.notify(); }
  void fail_all_streams();
  void consume(H2Stream& s, size_t n);
  void resume(H2Stream& s);
  void spawn_handler(std::shared_ptr<H2Stream> s);

  net::Executor executor_;
  std::unique_ptr<net::Stream> stream_;
  Side side_;
  H2Options options_;
  StreamHandler on_stream_;
  std::string initial_bytes_;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, std::shared_ptr<H2Stream>> streams_;
  net::Signal write_signal_;
  net::Signal writer_done_signal_;
  net::Signal ping_signal_;
  uint64_t pings_acked_ = 0;
  bool dead_ = false;
  bool goaway_ = false;
  bool writer_done_ = false;
  Status end_status_;
};

// Builds the nghttp2 name/value array for |headers|, refusing names that are not lower case
// or contain bytes HTTP/2 forbids. Used by both sides; exposed for tests.
Status validate_header_field(std::string_view name, std::string_view value);

}  // namespace cb::http
