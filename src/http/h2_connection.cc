#include "http/h2_connection.h"

#include "base/check.h"
#include "base/log.h"

#include <fmt/format.h>

#include <cstring>

namespace cb::http {

namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

Status from_nghttp2(int rv, std::string_view what) {
  if (rv == 0) return ok_status();
  std::string msg = fmt::format("{}: {}", what, nghttp2_strerror(rv));
  switch (rv) {
    case NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE:
      return resource_exhausted(msg);
    case NGHTTP2_ERR_INVALID_ARGUMENT:
      return invalid_argument(msg);
    case NGHTTP2_ERR_STREAM_CLOSED:
    case NGHTTP2_ERR_STREAM_CLOSING:
    case NGHTTP2_ERR_STREAM_SHUT_WR:
    case NGHTTP2_ERR_DATA_EXIST:
      return failed_precondition(msg);
    case NGHTTP2_ERR_NOMEM:
      return resource_exhausted(msg);
    default:
      return unavailable(msg);
  }
}

nghttp2_nv make_nv(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

// Builds an nv array for |pseudo| then |headers|; the views must outlive the submit call.
Result<std::vector<nghttp2_nv>> make_nva(
    std::initializer_list<std::pair<std::string_view, std::string_view>> pseudo,
    const Headers& headers) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(pseudo.size() + headers.size());
  for (auto [n, v] : pseudo) nva.push_back(make_nv(n, v));
  for (const auto& h : headers) {
    RETURN_IF_ERROR(validate_header_field(h.name, h.value));
    nva.push_back(make_nv(h.name, h.value));
  }
  return nva;
}

}  // namespace

Status validate_header_field(std::string_view name, std::string_view value) {
  if (name.empty()) return invalid_argument("header name is empty");
  for (char c : name) {
    auto u = static_cast<unsigned char>(c);
    if ((c >= 'A' && c <= 'Z') || u <= 0x20 || u >= 0x7f || c == ':')
      return invalid_argument(fmt::format("header name {:?} is not a lower-case token", name));
  }
  if (name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
      name == "transfer-encoding" || name == "upgrade")
    return invalid_argument(
        fmt::format("header {:?} is connection-specific (RFC 9113 §8.2.2)", name));
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0')
      return invalid_argument(fmt::format("header {:?} value contains CR, LF or NUL", name));
  }
  return ok_status();
}

// nghttp2's C callbacks, the noexcept boundary (house style H13). Each one recovers the
// connection from |user_data| and the stream from the stream user data.
struct H2Callbacks {
  static H2Stream* stream_of(nghttp2_session* session, int32_t id) {
    return static_cast<H2Stream*>(nghttp2_session_get_stream_user_data(session, id));
  }

  static int on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame,
                              void* user_data) {
    auto* conn = static_cast<H2Connection*>(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    if (conn->side_ != H2Connection::Side::kServer) return 0;
    std::shared_ptr<H2Stream> s(new H2Stream(conn->shared_from_this(), frame->hd.stream_id));
    s->request_.scheme = conn->stream_->is_tls() ? "https" : "http";
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s.get());
    conn->streams_[frame->hd.stream_id] = std::move(s);
    return 0;
  }

  static int on_header(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name_p,
                       size_t namelen, const uint8_t* value_p, size_t valuelen, uint8_t, void*) {
    H2Stream* s = stream_of(session, frame->hd.stream_id);
    if (s == nullptr || frame->hd.type != NGHTTP2_HEADERS) return 0;
    std::string_view name(reinterpret_cast<const char*>(name_p), namelen);
    std::string_view value(reinterpret_cast<const char*>(value_p), valuelen);
    switch (frame->headers.cat) {
      case NGHTTP2_HCAT_REQUEST:
        if (name == ":method")
          s->request_.method = value;
        else if (name == ":path")
          s->request_.path = value;
        else if (name == ":authority")
          s->request_.authority = value;
        else if (name == ":scheme")
          s->request_.scheme = value;
        else if (name.empty() || name[0] != ':')
          s->request_.headers.push_back({std::string(name), std::string(value)});
        break;
      case NGHTTP2_HCAT_RESPONSE:
      case NGHTTP2_HCAT_PUSH_RESPONSE:
        if (name == ":status") {
          s->status_ = 0;
          for (char c : value) s->status_ = s->status_ * 10 + (c - '0');
        } else {
          s->headers_.push_back({std::string(name), std::string(value)});
        }
        break;
      case NGHTTP2_HCAT_HEADERS:
        if (!s->headers_done_ && name == ":status") {
          s->status_ = 0;
          for (char c : value) s->status_ = s->status_ * 10 + (c - '0');
        } else if (!s->headers_done_ && s->status_ >= 100 && s->status_ < 200) {
          // fields of an interim response: dropped
        } else if (!s->headers_done_ && s->status_ >= 200) {
          s->headers_.push_back({std::string(name), std::string(value)});
        } else {
          s->trailers_.push_back({std::string(name), std::string(value)});
        }
        break;
    }
    return 0;
  }

  static int on_frame_recv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    auto* conn = static_cast<H2Connection*>(user_data);
    switch (frame->hd.type) {
      case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK) {
          ++conn->pings_acked_;
          conn->ping_signal_.notify();
        }
        return 0;
      case NGHTTP2_GOAWAY:
        conn->goaway_ = true;
        return 0;
      case NGHTTP2_HEADERS:
      case NGHTTP2_DATA:
        break;
      default:
        return 0;
    }
    H2Stream* s = stream_of(session, frame->hd.stream_id);
    if (s == nullptr) return 0;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (frame->hd.type == NGHTTP2_HEADERS) {
      if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        s->headers_done_ = true;
        if (end) s->in_end_ = true;
        conn->spawn_handler(conn->streams_[s->id_]);
        return 0;
      }
      if (!s->headers_done_) {
        if (s->status_ >= 100 && s->status_ < 200 && !end) {
          s->status_ = 0;  // interim response; wait for the final one
          s->headers_.clear();
        } else {
          s->headers_done_ = true;
        }
      }
    }
    if (end) s->in_end_ = true;
    s->in_signal_.notify();
    return 0;
  }

  static int on_data_chunk(nghttp2_session* session, uint8_t, int32_t stream_id,
                           const uint8_t* data, size_t len, void* user_data) {
    H2Stream* s = stream_of(session, stream_id);
    if (s == nullptr) {
      // Nobody will read it: credit the connection window at once.
      nghttp2_session_consume_connection(session, len);
      static_cast<H2Connection*>(user_data)->want_write();
      return 0;
    }
    if (s->discard_input_) {
      s->unconsumed_ += len;
      static_cast<H2Connection*>(user_data)->consume(*s, len);
      return 0;
    }
    s->in_buf_.append(reinterpret_cast<const char*>(data), len);
    s->unconsumed_ += len;
    s->in_signal_.notify();
    return 0;
  }

  static int on_stream_close(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                             void* user_data) {
    auto* conn = static_cast<H2Connection*>(user_data);
    auto it = conn->streams_.find(stream_id);
    if (it == conn->streams_.end()) return 0;
    std::shared_ptr<H2Stream> s = std::move(it->second);
    conn->streams_.erase(it);
    nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
    s->on_closed(error_code);
    return 0;
  }

  static ssize_t read_data(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                           uint32_t* data_flags, nghttp2_data_source* source, void*) {
    auto* s = static_cast<H2Stream*>(source->ptr);
    size_t avail = s->out_buf_.size() - s->out_off_;
    size_t n = std::min(avail, length);
    if (n > 0) {
      std::memcpy(buf, s->out_buf_.data() + s->out_off_, n);
      s->out_off_ += n;
      if (s->out_off_ == s->out_buf_.size()) {
        s->out_buf_.clear();
        s->out_off_ = 0;
      } else if (s->out_off_ > (1u << 20)) {
        s->out_buf_.erase(0, s->out_off_);
        s->out_off_ = 0;
      }
      s->out_signal_.notify();
    }
    if (s->out_off_ == s->out_buf_.size() && s->out_end_) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      if (s->has_trailers_) {
        auto nva = make_nva({}, s->out_trailers_);
        if (nva.ok() && nghttp2_submit_trailer(session, stream_id, nva->data(), nva->size()) == 0) {
          *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        }
      }
      return static_cast<ssize_t>(n);
    }
    if (n == 0) {
      s->out_deferred_ = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    return static_cast<ssize_t>(n);
  }
};

// ---- H2Stream ----

H2Stream::H2Stream(std::shared_ptr<H2Connection> conn, int32_t id)
    : conn_(std::move(conn)),
      id_(id),
      in_signal_(conn_->executor()),
      out_signal_(conn_->executor()) {}

H2Stream::~H2Stream() = default;

net::Executor H2Stream::executor() const { return conn_->executor(); }

void H2Stream::on_closed(uint32_t code) {
  closed_ = true;
  close_code_ = code;
  if (unconsumed_ > 0 && conn_->session_ != nullptr) {
    nghttp2_session_consume_connection(conn_->session_, unconsumed_);
    unconsumed_ = 0;
    conn_->want_write();
  }
  in_signal_.notify();
  out_signal_.notify();
  if (code != NGHTTP2_NO_ERROR || !in_end_) cancel_.emit(asio::cancellation_type::terminal);
}

Status H2Stream::closed_status() const {
  if (conn_->dead_ && close_code_ == NGHTTP2_NO_ERROR)
    return unavailable(fmt::format("stream {}: connection closed", id_));
  if (close_code_ == NGHTTP2_CANCEL)
    return cancelled(fmt::format("stream {}: reset (CANCEL)", id_));
  if (close_code_ == NGHTTP2_REFUSED_STREAM)
    return unavailable(fmt::format("stream {}: refused by peer", id_));
  return unavailable(
      fmt::format("stream {}: closed ({})", id_, nghttp2_http2_strerror(close_code_)));
}

asio::awaitable<Status> H2Stream::wait_headers() {
  while (!headers_done_ && !closed_) CO_RETURN_IF_ERROR(co_await in_signal_.wait());
  if (headers_done_) co_return ok_status();
  co_return closed_status();
}

asio::awaitable<Result<std::string>> H2Stream::read() {
  while (in_buf_.empty() && !in_end_ && !closed_) {
    CO_RETURN_IF_ERROR(co_await in_signal_.wait());
  }
  if (!in_buf_.empty()) co_return take_buffered();
  if (in_end_) co_return std::string();
  co_return closed_status();
}

std::string H2Stream::take_buffered() {
  std::string out;
  out.swap(in_buf_);
  if (!out.empty()) conn_->consume(*this, out.size());
  return out;
}

Status H2Stream::send_response(int status, const Headers& headers, bool end_stream) {
  if (out_started_) return failed_precondition("response headers already sent");
  if (closed_ || conn_->dead_) return closed_status();
  std::string status_text = std::to_string(status);
  ASSIGN_OR_RETURN(auto nva, make_nva({{":status", status_text}}, headers));
  nghttp2_data_provider prd;
  prd.source.ptr = this;
  prd.read_callback = H2Callbacks::read_data;
  int rv = nghttp2_submit_response(conn_->session_, id_, nva.data(), nva.size(),
                                   end_stream ? nullptr : &prd);
  RETURN_IF_ERROR(from_nghttp2(rv, "submit response"));
  out_started_ = true;
  if (end_stream) out_end_ = true;
  conn_->want_write();
  return ok_status();
}

asio::awaitable<Status> H2Stream::write(std::string_view data, bool end_stream) {
  if (out_end_) co_return failed_precondition("write after end of stream");
  if (closed_ || conn_->dead_) co_return closed_status();
  if (!out_started_) co_return failed_precondition("write before headers");
  out_buf_.append(data);
  if (end_stream) out_end_ = true;
  conn_->resume(*this);
  while (out_buf_.size() - out_off_ > conn_->options_.stream_write_buffer) {
    if (closed_ || conn_->dead_) co_return closed_status();
    CO_RETURN_IF_ERROR(co_await out_signal_.wait());
  }
  if (closed_ && close_code_ != NGHTTP2_NO_ERROR) co_return closed_status();
  co_return ok_status();
}

Status H2Stream::send_trailers(const Headers& trailers) {
  if (out_end_) return failed_precondition("trailers after end of stream");
  if (closed_ || conn_->dead_) return closed_status();
  if (!out_started_) return failed_precondition("trailers before headers");
  for (const auto& h : trailers) RETURN_IF_ERROR(validate_header_field(h.name, h.value));
  out_trailers_ = trailers;
  has_trailers_ = true;
  out_end_ = true;
  conn_->resume(*this);
  return ok_status();
}

asio::awaitable<Status> H2Stream::drain() {
  while (out_buf_.size() > out_off_) {
    if (closed_ || conn_->dead_) co_return closed_status();
    CO_RETURN_IF_ERROR(co_await out_signal_.wait());
  }
  co_return ok_status();
}

void H2Stream::discard_input() {
  discard_input_ = true;
  in_buf_.clear();
  if (unconsumed_ > 0) conn_->consume(*this, unconsumed_);
}

void H2Stream::reset(uint32_t error_code) {
  if (closed_ || conn_->dead_ || conn_->session_ == nullptr) return;
  nghttp2_submit_rst_stream(conn_->session_, NGHTTP2_FLAG_NONE, id_, error_code);
  conn_->want_write();
}

asio::awaitable<void> H2Stream::wait_closed() {
  while (!closed_) {
    Status awaited = co_await in_signal_.wait();
    if (!awaited.ok()) co_return;
  }
}

// ---- H2Connection ----

std::shared_ptr<H2Connection> H2Connection::make(std::unique_ptr<net::Stream> stream, Side side,
                                                 H2Options options, StreamHandler on_stream,
                                                 std::string initial_bytes) {
  return std::shared_ptr<H2Connection>(new H2Connection(
      std::move(stream), side, options, std::move(on_stream), std::move(initial_bytes)));
}

H2Connection::H2Connection(std::unique_ptr<net::Stream> stream, Side side, H2Options options,
                           StreamHandler on_stream, std::string initial_bytes)
    : executor_(stream->executor()),
      stream_(std::move(stream)),
      side_(side),
      options_(options),
      on_stream_(std::move(on_stream)),
      initial_bytes_(std::move(initial_bytes)),
      write_signal_(executor_),
      writer_done_signal_(executor_),
      ping_signal_(executor_) {
  nghttp2_session_callbacks* cbs;
  CB_CHECK(nghttp2_session_callbacks_new(&cbs) == 0);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, H2Callbacks::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, H2Callbacks::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, H2Callbacks::on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, H2Callbacks::on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, H2Callbacks::on_stream_close);
  nghttp2_option* opt;
  CB_CHECK(nghttp2_option_new(&opt) == 0);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_send_header_block_length(opt, 256u << 10);
  int rv = side_ == Side::kServer ? nghttp2_session_server_new2(&session_, cbs, this, opt)
                                  : nghttp2_session_client_new2(&session_, cbs, this, opt);
  CB_CHECK(rv == 0);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);

  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, options_.stream_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, options_.max_header_list_size},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, options_.max_frame_size},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  size_t n = side_ == Side::kServer ? 4 : 5;  // ENABLE_PUSH is a client-only setting
  CB_CHECK(nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, n) == 0);
  if (options_.connection_window > 65535) {
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          static_cast<int32_t>(options_.connection_window));
  }
}

H2Connection::~H2Connection() {
  if (session_ != nullptr) nghttp2_session_del(session_);
}

void H2Connection::start() {
  auto self = shared_from_this();
  asio::co_spawn(
      executor_, [self]() -> asio::awaitable<void> { co_await self->run(); }, asio::detached);
}

asio::awaitable<Status> H2Connection::run() {
  auto self = shared_from_this();  // run() keeps the connection alive until it ends
  asio::co_spawn(executor_, writer_loop(), [self](std::exception_ptr) {
    self->writer_done_ = true;
    self->writer_done_signal_.notify();
  });
  if (options_.keepalive_interval.count() > 0) {
    asio::co_spawn(executor_, keepalive_loop(), asio::detached);
  }
  Status st = co_await reader_loop();
  dead_ = true;
  want_write();
  // The writer flushes what is queued (a GOAWAY, final frames) unless the peer is gone; give
  // it a moment, then close the transport, which also ends a blocked write.
  auto grace = net::after(std::chrono::seconds(1));
  while (!writer_done_) {
    Status awaited = co_await writer_done_signal_.wait_until(grace);
    if (!awaited.ok()) break;
  }
  stream_->close();
  while (!writer_done_) {
    Status awaited = co_await writer_done_signal_.wait();
    if (!awaited.ok()) break;
  }
  fail_all_streams();
  ping_signal_.notify();
  end_status_ = st;
  co_return st;
}

asio::awaitable<Status> H2Connection::reader_loop() {
  if (!initial_bytes_.empty()) {
    auto rv = nghttp2_session_mem_recv(
        session_, reinterpret_cast<const uint8_t*>(initial_bytes_.data()), initial_bytes_.size());
    initial_bytes_.clear();
    initial_bytes_.shrink_to_fit();
    if (rv < 0) co_return from_nghttp2(static_cast<int>(rv), "http2 receive");
    want_write();
  }
  std::vector<char> buf(64u << 10);
  while (!dead_) {
    if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_))
      co_return ok_status();
    auto n = co_await stream_->read_some(buf);
    if (!n.ok()) {
      if (n.status().code() == Code::kUnavailable || dead_) co_return ok_status();  // EOF
      co_return n.status();
    }
    auto rv = nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buf.data()), *n);
    if (rv < 0) {
      log::debug("http2 receive failed",
                 {{"peer", stream_->peer()}, {"error", nghttp2_strerror(static_cast<int>(rv))}});
      co_return from_nghttp2(static_cast<int>(rv), "http2 receive");
    }
    want_write();
  }
  co_return ok_status();
}

asio::awaitable<void> H2Connection::writer_loop() {
  std::string out;
  out.reserve(64u << 10);
  for (;;) {
    while (out.size() < (64u << 10) && nghttp2_session_want_write(session_)) {
      const uint8_t* data = nullptr;
      auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        dead_ = true;
        stream_->close();
        co_return;
      }
      if (n == 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (!out.empty()) {
      Status st = co_await stream_->write(out);
      out.clear();
      if (!st.ok()) {
        dead_ = true;
        stream_->close();
        co_return;
      }
      continue;
    }
    if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
      // Both sides are done (GOAWAY exchanged, streams finished).
      dead_ = true;
      stream_->close();
      co_return;
    }
    if (dead_) co_return;
    Status awaited = co_await write_signal_.wait();
    if (!awaited.ok()) co_return;
  }
}

asio::awaitable<void> H2Connection::keepalive_loop() {
  auto self = shared_from_this();
  auto next = net::after(options_.keepalive_interval);
  while (!dead_) {
    // ping_signal_ also wakes on every PING ACK and when the connection dies.
    Status waited = co_await ping_signal_.wait_until(next);
    if (dead_) co_return;
    if (waited.code() != Code::kDeadlineExceeded) continue;
    next = net::after(options_.keepalive_interval);
    Status st = co_await ping(net::after(options_.keepalive_timeout));
    if (!st.ok() && !dead_) {
      log::info("http2 keepalive timeout, closing", {{"peer", stream_->peer()}});
      close();
      co_return;
    }
  }
}

asio::awaitable<Status> H2Connection::ping(net::Deadline deadline) {
  if (dead_) co_return unavailable("connection closed");
  uint64_t target = pings_acked_ + 1;
  uint8_t opaque[8] = {};
  std::memcpy(opaque, &target, sizeof target);
  int rv = nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, opaque);
  CO_RETURN_IF_ERROR(from_nghttp2(rv, "ping"));
  want_write();
  auto self = shared_from_this();
  while (pings_acked_ < target) {
    if (dead_) co_return unavailable("connection closed");
    CO_RETURN_IF_ERROR(co_await ping_signal_.wait_until(deadline));
  }
  co_return ok_status();
}

Result<std::shared_ptr<H2Stream>> H2Connection::open_stream(const RequestHead& request,
                                                            bool end_stream) {
  if (side_ != Side::kClient) return failed_precondition("open_stream on a server connection");
  if (dead_ || goaway_) return unavailable("connection is closing");
  std::string scheme =
      request.scheme.empty() ? (stream_->is_tls() ? "https" : "http") : request.scheme;
  ASSIGN_OR_RETURN(auto nva, make_nva({{":method", request.method},
                                       {":scheme", scheme},
                                       {":path", request.path},
                                       {":authority", request.authority}},
                                      request.headers));
  std::shared_ptr<H2Stream> s(new H2Stream(shared_from_this(), 0));
  s->request_ = request;
  nghttp2_data_provider prd;
  prd.source.ptr = s.get();
  prd.read_callback = H2Callbacks::read_data;
  int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                      end_stream ? nullptr : &prd, s.get());
  if (id < 0) return from_nghttp2(id, "submit request");
  s->id_ = id;
  s->out_started_ = true;
  if (end_stream) s->out_end_ = true;
  streams_[id] = s;
  want_write();
  return s;
}

void H2Connection::consume(H2Stream& s, size_t n) {
  s.unconsumed_ -= std::min(s.unconsumed_, n);
  if (session_ == nullptr || dead_) return;
  if (s.closed_ || nghttp2_session_consume(session_, s.id_, n) != 0)
    nghttp2_session_consume_connection(session_, n);
  want_write();
}

void H2Connection::resume(H2Stream& s) {
  if (s.out_deferred_ && !s.closed_ && !dead_) {
    s.out_deferred_ = false;
    nghttp2_session_resume_data(session_, s.id_);
  }
  want_write();
}

void H2Connection::spawn_handler(std::shared_ptr<H2Stream> s) {
  if (!on_stream_) {
    s->reset(NGHTTP2_REFUSED_STREAM);
    return;
  }
  auto slot = s->cancellation_slot();
  auto handler = on_stream_;
  asio::co_spawn(
      executor_,
      [handler, s]() -> asio::awaitable<void> {
        // Cancellation reaches the handler as kCancelled results from the stream and signals,
        // not as an exception from the next co_await (Asio's default): house style H8.
        co_await asio::this_coro::throw_if_cancelled(false);
        co_await handler(s);
        // A handler that returned without ending its response leaves the client waiting:
        // reset the stream so the peer learns at once.
        if (!s->closed_ && !s->out_end_) s->reset(NGHTTP2_INTERNAL_ERROR);
        // Nobody reads this stream any more; do not let its DATA pin flow-control windows.
        if (!s->closed_) s->discard_input();
      },
      asio::bind_cancellation_slot(slot, [s](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log::error("http2 stream handler threw", {{"stream", s->id_}, {"what", ex.what()}});
        }
        s->reset(NGHTTP2_INTERNAL_ERROR);
      }));
}

void H2Connection::shutdown() {
  if (dead_ || session_ == nullptr) return;
  goaway_ = true;
  // GOAWAY naming the last stream we processed: those finish, no new ones start. The pump
  // ends once nghttp2 wants neither to read nor to write (all streams closed).
  int32_t last = side_ == Side::kServer ? nghttp2_session_get_last_proc_stream_id(session_) : 0;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, nullptr, 0);
  want_write();
}

void H2Connection::close() {
  if (dead_) return;
  if (session_ != nullptr) nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
  dead_ = true;
  want_write();
  // The writer sends the GOAWAY then exits; the reader's pending read fails once the run()
  // closes the transport after the writer is done.
  asio::post(executor_, [self = shared_from_this()] { self->stream_->close(); });
}

void H2Connection::fail_all_streams() {
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, s] : streams) {
    if (session_ != nullptr) nghttp2_session_set_stream_user_data(session_, id, nullptr);
    s->on_closed(NGHTTP2_NO_ERROR);
    s->cancel_.emit(asio::cancellation_type::terminal);
  }
}

}  // namespace cb::http
