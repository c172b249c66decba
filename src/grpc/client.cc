#include "grpc/client.h"

#include "base/log.h"

#include <fmt/format.h>

namespace cb::grpc {

namespace {
constexpr std::string_view kContentType = "application/grpc";

http::Header field(std::string_view name, std::string value) {
  return http::Header{std::string(name), std::move(value)};
}
}  // namespace

// ---- ClientCall ----

ClientCall::ClientCall(std::shared_ptr<http::H2Stream> stream, const ChannelOptions& options,
                       net::Deadline deadline)
    : stream_(std::move(stream)),
      max_send_(options.max_send_message_size),
      deadline_(deadline),
      decoder_(options.max_receive_message_size) {}

ClientCall::~ClientCall() {
  // A call dropped before its end must not leave the stream open on the server.
  if (!ended_ && !stream_->closed()) stream_->reset(NGHTTP2_CANCEL);
}

void ClientCall::end(Status status) {
  if (ended_) return;
  ended_ = true;
  status_ = std::move(status);
}

Status ClientCall::transport_status(const Status& st) const {
  if (st.code() == Code::kDeadlineExceeded) return deadline_exceeded("deadline exceeded");
  if (stream_->closed()) {
    switch (stream_->close_code()) {
      case NGHTTP2_NO_ERROR:
        break;
      case NGHTTP2_CANCEL:
        return cancelled("stream reset by server (CANCEL)");
      case NGHTTP2_REFUSED_STREAM:
        return unavailable("stream refused by server");
      case NGHTTP2_ENHANCE_YOUR_CALM:
        return resource_exhausted("server: enhance your calm");
      case NGHTTP2_INADEQUATE_SECURITY:
        return permission_denied("inadequate security");
      default:
        return internal_error(fmt::format("stream reset by server ({})",
                                          nghttp2_http2_strerror(stream_->close_code())));
    }
  }
  if (st.code() == Code::kCancelled) return cancelled(st.message());
  return unavailable(st.message());
}

Status ClientCall::status_from_fields(const http::Headers& fields, int http_status) const {
  const std::string* gs = http::find_header(fields, "grpc-status");
  if (gs == nullptr) {
    if (http_status != 200)
      return Status(code_for_http_status(http_status),
                    fmt::format("received HTTP status {} without grpc-status", http_status));
    return internal_error("server ended the call without grpc-status");
  }
  int code = 0;
  for (char c : *gs) {
    if (c < '0' || c > '9') return unknown_error(fmt::format("invalid grpc-status {:?}", *gs));
    code = code * 10 + (c - '0');
    if (code > 1000) break;
  }
  const std::string* gm = http::find_header(fields, "grpc-message");
  return Status(code_from_int(code), gm ? percent_decode(*gm) : std::string());
}

asio::awaitable<Status> ClientCall::ensure_headers() {
  if (headers_checked_) co_return ok_status();
  auto waited = co_await net::with_deadline(
      [](http::H2Stream& s) -> asio::awaitable<Result<bool>> {
        CO_RETURN_IF_ERROR(co_await s.wait_headers());
        co_return true;
      }(*stream_),
      deadline_, "response headers");
  if (!waited.ok()) {
    Status st = transport_status(waited.status());
    if (waited.status().code() == Code::kDeadlineExceeded) stream_->reset(NGHTTP2_CANCEL);
    end(st);
    co_return st;
  }
  headers_checked_ = true;
  auto md = metadata_from_wire(stream_->headers());
  if (md.ok()) initial_metadata_ = std::move(*md);
  int http_status = stream_->status();
  const std::string* ct = http::find_header(stream_->headers(), "content-type");
  bool is_grpc = ct != nullptr && ct->rfind(kContentType, 0) == 0;
  bool has_status = http::find_header(stream_->headers(), "grpc-status") != nullptr;
  if (has_status) {
    // Trailers-only response: the status rides the headers.
    trailing_metadata_ = initial_metadata_;
    end(status_from_fields(stream_->headers(), http_status));
    co_return *status_;
  }
  if (http_status != 200) {
    end(Status(code_for_http_status(http_status),
               fmt::format("received HTTP status {}", http_status)));
    stream_->reset(NGHTTP2_CANCEL);
    co_return *status_;
  }
  if (!is_grpc) {
    end(unknown_error(
        fmt::format("response content-type {:?} is not gRPC", ct ? *ct : std::string())));
    stream_->reset(NGHTTP2_CANCEL);
    co_return *status_;
  }
  co_return ok_status();
}

asio::awaitable<Status> ClientCall::wait_initial_metadata() {
  Status st = co_await ensure_headers();
  if (!st.ok()) co_return st;
  co_return ok_status();
}

asio::awaitable<Status> ClientCall::write(std::string_view message) {
  if (ended_) co_return status_->ok() ? failed_precondition("call already ended") : *status_;
  if (half_closed_) co_return failed_precondition("write after writes_done");
  if (message.size() > max_send_)
    co_return resource_exhausted(
        fmt::format("sent message larger than max ({} vs. {})", message.size(), max_send_));
  out_.clear();
  append_message(out_, message);
  auto r = co_await net::with_deadline(
      [](http::H2Stream& s, std::string_view data) -> asio::awaitable<Result<bool>> {
        CO_RETURN_IF_ERROR(co_await s.write(data, false));
        co_return true;
      }(*stream_, out_),
      deadline_, "write");
  if (!r.ok()) {
    if (r.status().code() == Code::kDeadlineExceeded) {
      stream_->reset(NGHTTP2_CANCEL);
      end(deadline_exceeded("deadline exceeded"));
    }
    co_return transport_status(r.status());
  }
  co_return ok_status();
}

asio::awaitable<Status> ClientCall::writes_done() {
  if (half_closed_ || ended_) co_return ok_status();
  half_closed_ = true;
  co_return co_await stream_->write({}, true);
}

asio::awaitable<std::optional<std::string>> ClientCall::read() {
  for (;;) {
    if (auto m = decoder_.next()) co_return m;
    if (ended_) co_return std::nullopt;
    Status h = co_await ensure_headers();
    if (!h.ok() || ended_) co_return std::nullopt;
    auto chunk = co_await net::with_deadline(stream_->read(), deadline_, "read");
    if (!chunk.ok()) {
      if (chunk.status().code() == Code::kDeadlineExceeded) stream_->reset(NGHTTP2_CANCEL);
      end(transport_status(chunk.status()));
      co_return std::nullopt;
    }
    if (chunk->empty()) {
      auto md = metadata_from_wire(stream_->trailers());
      if (md.ok()) trailing_metadata_ = std::move(*md);
      if (!decoder_.idle())
        end(internal_error("response stream ended inside a message"));
      else
        end(status_from_fields(stream_->trailers(), 200));
      continue;  // deliver any message decoded before the end
    }
    Status fed = decoder_.feed(*chunk);
    if (!fed.ok()) {
      stream_->reset(NGHTTP2_CANCEL);
      end(fed);
    }
  }
}

asio::awaitable<Status> ClientCall::finish() {
  while (!ended_) (void)co_await read();
  co_return *status_;
}

void ClientCall::cancel() {
  if (ended_) return;
  stream_->reset(NGHTTP2_CANCEL);
  end(cancelled("cancelled by the client"));
}

// ---- Channel ----

std::shared_ptr<Channel> Channel::create(net::Executor executor, ChannelOptions options) {
  return std::shared_ptr<Channel>(new Channel(std::move(executor), std::move(options)));
}

Channel::Channel(net::Executor executor, ChannelOptions options)
    : executor_(std::move(executor)), options_(std::move(options)), connected_(executor_) {
  if (options_.authority.empty()) {
    options_.authority = options_.dial.unix_path.empty()
                             ? fmt::format("{}:{}", options_.dial.host, options_.dial.port)
                             : "localhost";
  }
}

Channel::~Channel() {
  if (conn_) conn_->close();
}

void Channel::close() {
  if (conn_) conn_->close();
  conn_.reset();
}

asio::awaitable<Result<std::shared_ptr<http::H2Connection>>> Channel::connection(
    net::Deadline deadline) {
  for (;;) {
    if (conn_ && conn_->accepting_streams()) co_return conn_;
    if (!connecting_) break;
    // Another call is connecting: wait for its outcome.
    Status w = co_await connected_.wait_until(deadline);
    if (!w.ok()) co_return w;
    if (!connecting_ && !(conn_ && conn_->accepting_streams())) co_return last_error_;
  }
  connecting_ = true;
  auto connect_deadline = std::min(deadline, net::after(options_.connect_timeout));
  auto conn = co_await http::dial_h2(executor_, options_.dial, connect_deadline);
  connecting_ = false;
  if (!conn.ok()) {
    last_error_ = unavailable(conn.status().message());
    connected_.notify();
    // The caller's deadline ran out while connecting: that is the call's status.
    if (std::chrono::steady_clock::now() >= deadline)
      co_return deadline_exceeded("deadline exceeded while connecting");
    co_return last_error_;
  }
  conn_ = *conn;
  connected_.notify();
  co_return conn_;
}

asio::awaitable<Status> Channel::connect(net::Deadline deadline) {
  auto c = co_await connection(deadline);
  co_return c.status();
}

asio::awaitable<Status> Channel::ping(net::Deadline deadline) {
  CO_ASSIGN_OR_RETURN(auto c, co_await connection(deadline));
  co_return co_await c->ping(deadline);
}

asio::awaitable<Result<std::shared_ptr<ClientCall>>> Channel::start_call(std::string path,
                                                                         CallOptions options) {
  CO_RETURN_IF_ERROR(validate_metadata(options.metadata));
  if (options.deadline != net::kNoDeadline && std::chrono::steady_clock::now() >= options.deadline)
    co_return deadline_exceeded("deadline exceeded before the call started");
  CO_ASSIGN_OR_RETURN(auto conn, co_await connection(options.deadline));
  http::RequestHead head;
  head.method = "POST";
  head.path = std::move(path);
  head.authority = options_.authority;
  head.headers.push_back(field("content-type", std::string(kContentType)));
  head.headers.push_back(field("te", "trailers"));
  head.headers.push_back(field("user-agent", options_.user_agent));
  if (options.deadline != net::kNoDeadline) {
    auto left = options.deadline - std::chrono::steady_clock::now();
    head.headers.push_back(
        field("grpc-timeout",
              format_timeout(std::chrono::duration_cast<std::chrono::nanoseconds>(left))));
  }
  for (auto& h : metadata_to_wire(options.metadata)) head.headers.push_back(std::move(h));
  CO_ASSIGN_OR_RETURN(auto stream, conn->open_stream(head, false));
  co_return std::make_shared<ClientCall>(std::move(stream), options_, options.deadline);
}

}  // namespace cb::grpc
