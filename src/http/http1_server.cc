// HTTP/1.1 serving for http::Server (Server::serve_h1): the byte pump between a net::Stream
// and the sans-I/O Http1RequestParser, and the ServerRequest a handler sees for each exchange.
//
// Shape of one connection (all on the server's executor, no locks):
//
//   reader_loop()  reads the socket into raw_ while raw_ holds less than kReadAhead bytes and
//                  the parser still expects requests; raw_ is never parsed by the reader. A
//                  read into an empty raw_ takes the place of its buffer (Unparsed).
//   serve_h1()     parses the next request head from raw_, dispatches it through the Router,
//                  then decides whether the connection continues (keep-alive) or closes.
//   the handler    read() feeds raw_ to the parser on demand, so body bytes are parsed only
//                  when asked for: a handler that does not read leaves raw_ full, and a full
//                  raw_ stops the reader, which stops reading the socket (TCP backpressure).
//   watch()        runs beside the handler and ends when the peer is gone, which cancels the
//                  handler (awaitable_operators ||), as HTTP/2 handlers are cancelled by a reset.
//
// See README.md §HTTP/1.1 for the framing and keep-alive rules.

#include "base/log.h"
#include "http/http1_codec.h"
#include "http/server.h"
#include "http/unparsed.h"
#include "net/signal.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>
#include <optional>

namespace cb::http {

namespace {

// Bytes a read asks for. A TLS read returns one record (16 KiB) at most, so more would only
// hold memory. A plaintext socket (a box's door is a unix socket) returns what has arrived:
// a save's 16 MiB chunk batches take 256 reads and handler wake-ups each at 64 KiB, where
// 16 KiB took 1024.
constexpr size_t kTlsReadSize = 16 * 1024;
constexpr size_t kPlainReadSize = 64 * 1024;
// Unparsed bytes buffered ahead of the parser (pipelined requests, body not yet read). The
// reader stops here until the handler consumes; that is the per-connection memory bound.
constexpr size_t kReadAhead = 256 * 1024;
// Bytes handed to the parser per step, so one read() returns at most about this much.
constexpr size_t kFeedSize = 64 * 1024;
// A handler that answered without reading its whole request body: up to this many body bytes
// are read and dropped to keep the connection; a longer body closes it instead. Go's net/http
// uses 256 KiB for the same decision (maxPostHandlerReadBytes).
constexpr uint64_t kMaxDiscardBytes = 256 * 1024;
// Lingering close (RFC 9112 §9.6): after a final response we half-close and read and drop
// input for a while, so that unread request bytes do not make the kernel answer with a RST
// that destroys the response in flight. Bounded in time and bytes.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kMaxLingerBytes = 1u << 20;

bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    return lower(x) == lower(y);
  });
}

// True when the comma-separated |list| holds |token| (case-insensitive, OWS trimmed).
bool has_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

Header field(std::string_view name, std::string_view value) {
  return Header{std::string(name), std::string(value)};
}

asio::awaitable<Result<bool>> status_as_result(asio::awaitable<Status> op) {
  Status st = co_await std::move(op);
  if (!st.ok()) co_return st;
  co_return true;
}

// The protocol-neutral request head from the HTTP/1.1 one.
RequestHead make_request_head(const Http1RequestHead& wire, bool tls) {
  RequestHead h;
  h.method = wire.method;
  h.scheme = tls ? "https" : "http";
  h.headers = wire.headers;
  if (const std::string* host = find_header(wire.headers, "host")) h.authority = *host;
  std::string_view target = wire.target;
  h.path = std::string(target);
  if (wire.method == "CONNECT") {
    h.authority = h.path;  // authority-form, as HTTP/2 carries it in :authority
    return h;
  }
  // absolute-form (RFC 9112 §3.2.2): the target's authority replaces Host.
  for (std::string_view prefix : {std::string_view("http://"), std::string_view("https://")}) {
    if (target.size() < prefix.size() || !iequals(target.substr(0, prefix.size()), prefix))
      continue;
    std::string_view rest = target.substr(prefix.size());
    size_t end = rest.find_first_of("/?");
    h.authority = std::string(rest.substr(0, end));
    std::string_view path = end == std::string_view::npos ? "/" : rest.substr(end);
    h.path = path.front() == '?' ? "/" + std::string(path) : std::string(path);
    break;
  }
  return h;
}

std::string error_response(int status, std::string_view detail) {
  std::string body = fmt::format("{} {}", status, reason_phrase(status));
  if (!detail.empty()) body += fmt::format(": {}", detail);
  body += "\n";
  Headers h;
  h.push_back(field("content-type", "text/plain; charset=utf-8"));
  h.push_back(field("content-length", std::to_string(body.size())));
  h.push_back(field("connection", "close"));
  auto head = serialize_response_head(status, h);
  return head.ok() ? *head + body : std::string();
}

// The stream the server tracks in h1_streams_: it forwards to the transport, and a close() by
// the server (shutdown deadline, destructor) also tells the connection, which then cancels a
// running handler. The connection itself closes the transport through inner().
class ServerStream final : public net::Stream {
 public:
  ServerStream(std::unique_ptr<net::Stream> inner, std::function<void()> on_close)
      : inner_(std::move(inner)), on_close_(std::move(on_close)) {}

  asio::awaitable<Result<size_t>> read_some(std::span<char> buffer) override {
    return inner_->read_some(buffer);
  }
  asio::awaitable<Status> write(std::span<const char> data) override { return inner_->write(data); }
  asio::awaitable<Status> shutdown_write() override { return inner_->shutdown_write(); }
  void close() override {
    if (inner_ != nullptr) inner_->close();
    if (on_close_) on_close_();
  }
  net::Executor executor() override { return inner_->executor(); }
  std::string alpn() const override { return inner_->alpn(); }
  bool is_tls() const override { return inner_->is_tls(); }
  std::string peer() const override { return inner_->peer(); }

  net::Stream& inner() { return *inner_; }
  bool has_inner() const { return inner_ != nullptr; }
  std::unique_ptr<net::Stream> release() { return std::move(inner_); }

 private:
  std::unique_ptr<net::Stream> inner_;
  std::function<void()> on_close_;
};

// The I/O state of one HTTP/1.1 connection and the request being parsed on it. Lives in the
// frame of Server::serve_h1, which outlives every coroutine that touches it (the reader is
// awaited out, the handler and watch() are awaited by serve_h1 itself).
class H1Connection final : public Http1RequestVisitor {
 public:
  H1Connection(std::unique_ptr<net::Stream> stream, std::string initial)
      : executor_(stream->executor()),
        tls_(stream->is_tls()),
        peer_(stream->peer()),
        stream_(std::move(stream), [this] { on_server_close(); }),
        parser_(*this, parser_options()),
        changed_(executor_),
        reader_exit_(executor_) {
    raw_.append(initial.data(), initial.size());
  }
  H1Connection(const H1Connection&) = delete;
  H1Connection& operator=(const H1Connection&) = delete;

  // Http1RequestVisitor
  void on_request_head(Http1RequestHead&& head) override { head_ = std::move(head); }
  void on_body(std::span<const char> data) override { body_.append(data.data(), data.size()); }
  void on_message_complete(Headers&&) override { message_complete_ = true; }

  net::Stream& registered_stream() { return stream_; }
  void set_unregister(std::function<void()> f) { unregister_ = std::move(f); }
  void unregister() {
    if (unregister_) unregister_();
    unregister_ = nullptr;
  }
  bool tls() const { return tls_; }
  size_t read_size() const { return tls_ ? kTlsReadSize : kPlainReadSize; }
  const std::string& peer() const { return peer_; }
  bool message_complete() const { return message_complete_; }
  bool parser_done() const { return parser_.done(); }
  int parse_error_status() const { return parser_.error_http_status(); }
  Http1RequestHead take_head() { return std::move(*head_); }

  // Spawns the reader unless it runs or reading already ended.
  void start_reader() {
    if (reader_running_ || !in_status_.ok() || closed_by_server_ || !stream_.has_inner()) return;
    reader_running_ = true;
    reader_cancel_ = std::make_unique<asio::cancellation_signal>();
    // Capturing |this| is safe: serve_h1 awaits stop_reader() before the connection goes.
    asio::co_spawn(executor_, reader_loop(),
                   asio::bind_cancellation_slot(reader_cancel_->slot(), [this](std::exception_ptr) {
                     reader_running_ = false;
                     reader_exit_.notify();
                     changed_.notify();
                   }));
  }

  // Cancels the reader and waits until it has exited; bytes it read are in raw_.
  asio::awaitable<void> stop_reader() {
    if (!reader_running_) co_return;
    reader_cancel_->emit(asio::cancellation_type::terminal);
    while (reader_running_) {
      Status waited = co_await reader_exit_.wait();
      if (!waited.ok()) co_return;
    }
  }

  // Parses the next request head. Returns true with a head ready (take_head()), false when
  // the connection ended cleanly (peer closed, idle past |deadline|, last request had
  // Connection: close), or the parse error (parse_error_status() says what to answer).
  asio::awaitable<Result<bool>> next_request(net::Deadline deadline) {
    head_.reset();
    body_.clear();
    // A large body grew raw_ up to the read-ahead; between requests (a keep-alive connection
    // may idle for a minute) an empty raw_ gives its buffer back (the reader keeps its own; its
    // next read then becomes raw_'s buffer, and the reader allocates another).
    if (raw_.empty()) raw_.release();
    message_complete_ = false;
    for (;;) {
      if (parser_.done()) co_return false;
      if (!raw_.empty()) {
        Status st = feed_some();
        if (!st.ok()) co_return st;
        if (head_) co_return true;
        continue;
      }
      if (!in_status_.ok() || closed_by_server_ || !reader_running_) co_return false;
      Status waited = co_await changed_.wait_until(deadline);
      if (!waited.ok()) co_return false;  // idle timeout
    }
  }

  // The next piece of the current request's body, "" once it is complete.
  asio::awaitable<Result<std::string>> read_body() {
    for (;;) {
      if (!body_.empty()) {
        std::string out;
        out.swap(body_);
        co_return out;
      }
      if (message_complete_) co_return std::string();
      if (!raw_.empty()) {
        Status st = feed_some();
        if (!st.ok())
          co_return unavailable(fmt::format("malformed request body: {}", st.message()));
        continue;
      }
      if (closed_by_server_) co_return unavailable("connection closed by the server");
      if (!in_status_.ok())
        co_return unavailable(fmt::format("request body cut short: {}", in_status_.message()));
      if (reader_running_) {
        Status waited = co_await changed_.wait();
        if (!waited.ok()) co_return waited;
        continue;
      }
      // The reader is stopped (upgrade request, see serve_h1): the handler is the only reader.
      std::vector<char> buf(read_size());
      auto n = co_await stream_.inner().read_some(buf);
      if (!n.ok()) {
        in_status_ = n.status();
        continue;
      }
      raw_.append(buf.data(), *n);
    }
  }

  // Reads and drops the rest of the request body. False when it is longer than |limit| bytes,
  // |deadline| passed, or the connection failed: the connection must then close.
  asio::awaitable<bool> discard_body(uint64_t limit, net::Deadline deadline) {
    uint64_t dropped = 0;
    while (!message_complete_) {
      auto piece = co_await net::with_deadline(read_body(), deadline, "discard request body");
      if (!piece.ok()) co_return false;
      dropped += piece->size();
      if (dropped > limit) co_return false;
    }
    co_return true;
  }

  // Writes |data| in full; the caller keeps it alive until this returns. Writes from
  // concurrent coroutines of one handler (a 100 Continue from read(), body from write()) are
  // serialized here, never interleaved.
  asio::awaitable<Status> write_all(std::string_view data) {
    while (writing_) {
      Status waited = co_await changed_.wait();
      if (!waited.ok()) co_return waited;
    }
    if (!write_status_.ok()) co_return write_status_;
    if (closed_by_server_ || !stream_.has_inner()) co_return unavailable("connection closed");
    writing_ = true;
    Status st = co_await stream_.inner().write(data);
    writing_ = false;
    changed_.notify();
    if (!st.ok()) write_status_ = st;
    co_return st;
  }

  // Ends when the handler should be cancelled: the peer is gone or the server closed the
  // connection. A close after a complete request that asked for Connection: close is a
  // half-close, not a loss (the client still reads the response).
  asio::awaitable<void> watch(bool keep_alive) {
    for (;;) {
      if (connection_lost(keep_alive)) {
        log::debug("http1 connection lost during a request", {{"peer", peer_}});
        co_return;
      }
      Status waited = co_await changed_.wait();
      if (!waited.ok()) co_return;  // cancelled: the handler finished first
    }
  }

  // An upgrade request was declined: HTTP/1.1 continues on the connection.
  void continue_after_upgrade() {
    if (parser_.upgraded()) parser_.continue_after_upgrade();
    start_reader();
  }

  // Hands the transport to an upgrade handler. REQUIRES: the reader is stopped.
  std::unique_ptr<net::Stream> take_stream(std::string* leftover) {
    if (reader_running_ || !stream_.has_inner()) return nullptr;
    unregister();
    std::string rest = raw_.take();
    if (leftover != nullptr) *leftover = std::move(rest);
    return stream_.release();
  }

  asio::awaitable<void> send_error(int status, std::string_view detail) {
    std::string response = error_response(status, detail);
    if (!response.empty()) (void)co_await write_all(response);
  }

  // Immediate close: the response in flight (if any) is cut.
  void abort() {
    if (stream_.has_inner()) stream_.inner().close();
  }

  // Half-close, drain input for a while, then close (see kLingerTime).
  asio::awaitable<void> close_gracefully() {
    co_await stop_reader();
    if (closed_by_server_ || !write_status_.ok() || !stream_.has_inner()) {
      abort();
      co_return;
    }
    auto deadline = net::after(kLingerTime);
    auto shut = co_await net::with_deadline(status_as_result(stream_.inner().shutdown_write()),
                                            deadline, "shutdown");
    // TLS: the shutdown above already waited for the peer's close_notify (or failed).
    if (shut.ok() && !tls_ && in_status_.ok()) {
      std::vector<char> buf(read_size());
      size_t total = 0;
      while (total < kMaxLingerBytes) {
        auto n = co_await net::with_deadline(stream_.inner().read_some(buf), deadline, "linger");
        if (!n.ok()) break;
        total += *n;
      }
    }
    abort();
  }

 private:
  static Http1ParserOptions parser_options() {
    Http1ParserOptions o;
    o.pause_after_message = true;  // one request at a time; pipelined ones wait in raw_
    return o;
  }

  void on_server_close() {
    closed_by_server_ = true;
    changed_.notify();
  }

  bool connection_lost(bool keep_alive) const {
    if (closed_by_server_) return true;
    if (in_status_.ok() || !raw_.empty() || !body_.empty()) return false;
    if (!message_complete_) return true;  // the rest of the body can never arrive
    return keep_alive;
  }

  Status feed_some() {
    size_t n = std::min(raw_.size(), kFeedSize);
    auto used = parser_.feed(std::span<const char>(raw_.data(), n));
    if (!used.ok()) return used.status();
    raw_.consume(*used);
    changed_.notify();  // room for the reader
    return ok_status();
  }

  asio::awaitable<void> reader_loop() {
    co_await asio::this_coro::throw_if_cancelled(false);
    const size_t read_cap = read_size();
    std::unique_ptr<char[]> buf = std::make_unique_for_overwrite<char[]>(read_cap);
    for (;;) {
      auto state = co_await asio::this_coro::cancellation_state;
      if (state.cancelled() != asio::cancellation_type::none) co_return;
      if (raw_.size() >= kReadAhead || parser_.done() || closed_by_server_) {
        Status waited = co_await changed_.wait();
        if (!waited.ok()) co_return;
        continue;
      }
      auto n = co_await stream_.inner().read_some(std::span<char>(buf.get(), read_cap));
      if (!n.ok()) {
        auto after = co_await asio::this_coro::cancellation_state;
        // Stopped by stop_reader(): not an end of input, the reader may be started again.
        if (after.cancelled() == asio::cancellation_type::none) in_status_ = n.status();
        co_return;
      }
      raw_.add_read(buf, read_cap, *n);
      changed_.notify();
    }
  }

  net::Executor executor_;
  bool tls_;
  std::string peer_;
  ServerStream stream_;
  Http1RequestParser parser_;
  std::function<void()> unregister_;

  Unparsed raw_;      // read from the socket, not yet parsed
  Status in_status_;  // why reading ended (EOF, reset); ok while it goes on
  bool closed_by_server_ = false;
  net::Signal changed_;  // any change above or below: bytes read or parsed, writes done
  bool reader_running_ = false;
  std::unique_ptr<asio::cancellation_signal> reader_cancel_;
  net::Signal reader_exit_;

  std::optional<Http1RequestHead> head_;  // set by the parser for the current request
  std::string body_;                      // parsed body bytes the handler has not read
  bool message_complete_ = false;

  bool writing_ = false;
  Status write_status_;  // the first write error; later writes fail with it
};

// One exchange on an H1Connection: what a handler sees as its ServerRequest.
class H1Exchange final : public ServerRequest {
 public:
  H1Exchange(H1Connection& conn, Http1RequestHead wire, std::function<bool()> stopping)
      : conn_(conn),
        head_(make_request_head(wire, conn.tls())),
        version_minor_(wire.version_minor),
        keep_alive_(wire.keep_alive),
        upgrade_(wire.upgrade),
        stopping_(std::move(stopping)) {
    const std::string* expect = find_header(wire.headers, "expect");
    expect_continue_ = expect != nullptr && version_minor_ >= 1 && iequals(*expect, "100-continue");
  }

  const RequestHead& head() const override { return head_; }

  asio::awaitable<Result<std::string>> read() override {
    if (expect_continue_ && !continue_sent_ && !headers_sent_ && !conn_.message_complete()) {
      continue_sent_ = true;
      Status st = co_await conn_.write_all("HTTP/1.1 100 Continue\r\n\r\n");
      if (!st.ok()) co_return st;
    }
    co_return co_await conn_.read_body();
  }

  asio::awaitable<Status> send_headers(int status, const Headers& headers,
                                       bool end_stream) override {
    // Everything that reads |headers| happens before the first suspension.
    auto head = prepare_head(status, headers, end_stream);
    if (!head.ok()) co_return head.status();
    Status st = co_await conn_.write_all(*head);
    co_return st;
  }

  asio::awaitable<Status> write(std::string_view data, bool end_stream) override {
    std::string framed;
    auto out = prepare_body(data, end_stream, framed);
    if (!out.ok()) co_return out.status();
    if (!out->empty()) {
      // |data| outlives this call's await, so a body that needs no framing goes as it is.
      Status st = co_await conn_.write_all(*out);
      if (!st.ok()) co_return st;
    }
    if (framing_ == Framing::kLength && end_stream && remaining_ > 0)
      co_return failed_precondition(
          fmt::format("response ended {} bytes short of its content-length", remaining_));
    co_return ok_status();
  }

  asio::awaitable<Status> finish(const Headers& trailers) override {
    if (!headers_sent_) co_return failed_precondition("finish before response headers");
    if (ended_) co_return failed_precondition("response already ended");
    if (framing_ != Framing::kChunked) {
      if (!trailers.empty())
        co_return failed_precondition("trailers need a chunked HTTP/1.1 response");
      ended_ = true;
      if (framing_ == Framing::kLength && remaining_ > 0)
        co_return failed_precondition(
            fmt::format("response ended {} bytes short of its content-length", remaining_));
      co_return ok_status();
    }
    std::string out;
    CO_RETURN_IF_ERROR(append_last_chunk(out, trailers));
    ended_ = true;
    last_chunk_sent_ = true;
    Status st = co_await conn_.write_all(out);
    co_return st;
  }

  void reset() override {
    reset_ = true;
    conn_.abort();
  }
  bool headers_sent() const override { return headers_sent_; }
  bool is_http2() const override { return false; }
  std::string peer() const override { return conn_.peer(); }

  std::unique_ptr<net::Stream> take_upgraded_stream(std::string* leftover) override {
    if (!upgrade_ || !switched_ || taken_ || reset_) return nullptr;
    auto stream = conn_.take_stream(leftover);
    if (stream != nullptr) taken_ = true;
    return stream;
  }

  bool upgrade() const { return upgrade_; }
  bool keep_alive() const { return keep_alive_; }
  bool taken() const { return taken_; }
  // The handler answered the upgrade request by switching protocols.
  bool switched() const { return switched_; }
  bool close_after() const { return close_after_; }
  // The response is complete on the wire, so the connection can carry another one.
  bool response_complete() const {
    if (!headers_sent_ || reset_) return false;
    switch (framing_) {
      case Framing::kNone:
        return true;
      case Framing::kLength:
        return remaining_ == 0;
      case Framing::kChunked:
        return last_chunk_sent_;
      case Framing::kUntilClose:
        return ended_;  // the close that follows ends the body
    }
    return false;
  }

 private:
  enum class Framing { kNone, kLength, kChunked, kUntilClose };

  Result<std::string> prepare_head(int status, const Headers& headers, bool end_stream) {
    if (reset_) return unavailable("exchange was reset");
    if (headers_sent_) return failed_precondition("response headers already sent");
    if (status >= 100 && status < 200 && status != 101) {
      // Interim response (100 Continue, 103 Early Hints): the final one follows.
      if (status == 100) continue_sent_ = true;
      return serialize_response_head(status, headers);
    }
    const bool is_connect = head_.method == "CONNECT";
    if (status == 101 && !(upgrade_ && !is_connect))
      return failed_precondition("101 Switching Protocols answers only an upgrade request");
    const bool tunnel = is_connect && upgrade_ && status >= 200 && status < 300;
    if (status == 101 || tunnel) {
      // The handler's fields go out as given (upgrade, connection: upgrade); no body framing.
      ASSIGN_OR_RETURN(std::string head, serialize_response_head(status, headers));
      headers_sent_ = true;
      switched_ = true;
      ended_ = true;
      framing_ = Framing::kNone;
      return head;
    }

    bool close = !keep_alive_ || stopping_();
    std::optional<uint64_t> length;
    Headers out;
    out.reserve(headers.size() + 2);
    for (const Header& h : headers) {
      // Framing and connection management are ours (RFC 9112 §6, §9.6).
      if (iequals(h.name, "transfer-encoding") || iequals(h.name, "keep-alive")) continue;
      if (iequals(h.name, "connection")) {
        if (has_token(h.value, "close")) close = true;
        continue;
      }
      if (iequals(h.name, "content-length")) {
        uint64_t v = 0;
        auto [p, ec] = std::from_chars(h.value.data(), h.value.data() + h.value.size(), v);
        if (ec != std::errc() || p != h.value.data() + h.value.size() || h.value.empty() ||
            (length && *length != v))
          return invalid_argument(fmt::format("bad content-length {:?}", h.value));
        if (length) continue;  // one field is enough
        length = v;
      }
      out.push_back(h);
    }
    const bool no_body =
        head_.method == "HEAD" || status == 204 || status == 304 || (status >= 100 && status < 200);
    Framing framing;
    uint64_t remaining = 0;
    if (no_body) {
      framing = Framing::kNone;
    } else if (length) {
      framing = Framing::kLength;
      remaining = *length;
    } else if (end_stream) {
      out.push_back(field("content-length", "0"));
      framing = Framing::kLength;
    } else if (version_minor_ >= 1) {
      out.push_back(field("transfer-encoding", "chunked"));
      framing = Framing::kChunked;
    } else {
      // HTTP/1.0 has no chunked coding: the body runs until the connection closes.
      framing = Framing::kUntilClose;
      close = true;
    }
    // A body the client was told to hold back (Expect: 100-continue, no 100 sent) may never
    // come, so the connection cannot be reused after this response.
    if (expect_continue_ && !continue_sent_ && !conn_.message_complete()) close = true;
    if (close) {
      out.push_back(field("connection", "close"));
    } else if (version_minor_ == 0) {
      out.push_back(field("connection", "keep-alive"));
    }
    ASSIGN_OR_RETURN(std::string head, serialize_response_head(status, out));
    headers_sent_ = true;
    framing_ = framing;
    remaining_ = remaining;
    close_after_ = close;
    if (end_stream) {
      ended_ = true;
      if (framing_ == Framing::kLength && remaining_ > 0) {
        // content-length promised but no body: the message can never complete.
        close_after_ = true;
      }
    }
    return head;
  }

  // The bytes to send for |data|: |data| itself, or its chunked framing built in |framed|
  // (empty when nothing is sent).
  Result<std::string_view> prepare_body(std::string_view data, bool end_stream,
                                        std::string& framed) {
    if (reset_) return unavailable("exchange was reset");
    if (!headers_sent_) return failed_precondition("write before response headers");
    if (ended_) return failed_precondition("write after end of response");
    std::string_view out;
    switch (framing_) {
      case Framing::kNone:
        break;  // HEAD, 204, 304: the body is not sent
      case Framing::kLength:
        if (data.size() > remaining_)
          return failed_precondition(fmt::format(
              "{} body bytes exceed the {} left of content-length", data.size(), remaining_));
        remaining_ -= data.size();
        out = data;
        break;
      case Framing::kChunked:
        append_chunk(framed, data);
        if (end_stream) {
          RETURN_IF_ERROR(append_last_chunk(framed, {}));
          last_chunk_sent_ = true;
        }
        out = framed;
        break;
      case Framing::kUntilClose:
        out = data;
        break;
    }
    if (end_stream) ended_ = true;
    return out;
  }

  H1Connection& conn_;
  RequestHead head_;
  int version_minor_;
  bool keep_alive_;
  bool upgrade_;
  std::function<bool()> stopping_;
  bool expect_continue_ = false;
  bool continue_sent_ = false;

  bool headers_sent_ = false;
  bool ended_ = false;  // the handler ended the response (end_stream, finish)
  bool last_chunk_sent_ = false;
  bool switched_ = false;  // 101, or 2xx to CONNECT
  bool taken_ = false;
  bool reset_ = false;
  bool close_after_ = false;
  Framing framing_ = Framing::kNone;
  uint64_t remaining_ = 0;  // content-length bytes still to write
};

// The handler as the root of its own coroutine: a cancelled handler sees kCancelled from what
// it awaits instead of an exception, and an exception a handler throws stops here (H8).
asio::awaitable<void> run_handler(const Router* router, ServerRequest* req) {
  co_await asio::this_coro::throw_if_cancelled(false);
  try {
    co_await router->dispatch(*req);
  } catch (const std::exception& e) {
    log::error("http1 handler threw", {{"peer", req->peer()}, {"what", e.what()}});
  }
}

}  // namespace

// h1_count_ counts HTTP/1.1 connections with an exchange in progress: those are what
// shutdown() waits for. Idle keep-alive connections are only in h1_streams_, so shutdown()
// closes them at once when the busy ones are done (its final close loop).
asio::awaitable<void> Server::serve_h1(std::unique_ptr<net::Stream> stream, std::string initial) {
  auto alive = alive_;
  const Router* router = &router_;
  const auto idle_timeout = options_.http1_idle_timeout;
  // Server members are touched only while *alive: the server may be destroyed while this
  // coroutine waits; its destructor then closes the stream, which ends the wait.
  std::function<bool()> stopping = [this, alive] { return !*alive || stopping_; };

  H1Connection conn(std::move(stream), std::move(initial));
  net::Stream* registered = &conn.registered_stream();
  h1_streams_.insert(registered);
  conn.set_unregister([this, alive, registered] {
    if (*alive) h1_streams_.erase(registered);
  });
  conn.start_reader();

  bool graceful = true;
  for (;;) {
    auto next = co_await conn.next_request(net::after(idle_timeout));
    if (!next.ok()) {
      log::debug("http1 bad request",
                 {{"peer", conn.peer()}, {"error", next.status().to_string()}});
      co_await conn.send_error(conn.parse_error_status(), next.status().message());
      break;
    }
    if (!*next) break;

    H1Exchange ex(conn, conn.take_head(), stopping);
    if (*alive) ++h1_count_;
    if (ex.upgrade()) {
      // No read-ahead past an upgrade request: the bytes after it may belong to the new
      // protocol, and take_upgraded_stream() must find no read in flight.
      co_await conn.stop_reader();
      co_await run_handler(router, &ex);
    } else {
      using namespace asio::experimental::awaitable_operators;
      co_await (run_handler(router, &ex) || conn.watch(ex.keep_alive()));
    }
    if (*alive) --h1_count_;
    if (ex.taken()) co_return;  // the handler owns the transport now

    if (!ex.response_complete()) {
      if (!ex.headers_sent()) {
        int status = conn.parse_error_status();
        if (status == 0) status = 500;
        co_await conn.send_error(status, status == 500 ? "the handler sent no response" : "");
      } else {
        graceful = false;  // the peer must see the response cut short
      }
      break;
    }
    if (ex.upgrade()) {
      if (ex.switched()) {
        graceful = false;  // switched protocols but nobody took the connection
        break;
      }
      conn.continue_after_upgrade();
    }
    if (!conn.message_complete()) {
      if (ex.close_after()) break;
      bool discarded = co_await conn.discard_body(kMaxDiscardBytes, net::after(idle_timeout));
      if (!discarded) break;
      // A declined upgrade request whose body was left unread completes only now.
      if (ex.upgrade()) conn.continue_after_upgrade();
    }
    if (ex.close_after() || conn.parser_done() || stopping()) break;
  }
  if (graceful) {
    co_await conn.close_gracefully();
  } else {
    conn.abort();
  }
  co_await conn.stop_reader();
  conn.unregister();
}

}  // namespace cb::http
