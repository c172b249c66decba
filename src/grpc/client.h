#pragma once
// The gRPC client on cocoonbox's HTTP/2 stack. A Channel owns one HTTP/2 connection to one
// target (TCP, TLS or a unix socket), opened on first use and re-opened after it fails; every
// call is one stream on it.
//
// ClientCall follows the grpc++ shape: write()/writes_done() send, read() returns messages
// until nullopt, and finish() gives the call's final Status (grpc-status, or what the
// transport implied: DEADLINE_EXCEEDED at the deadline, CANCELLED after cancel(),
// UNAVAILABLE when the connection died, the HTTP-status mapping for non-gRPC answers).
// A deadline sends grpc-timeout and is enforced locally too (RST_STREAM when it passes).
//
// Affinity: a Channel and its calls live on the Channel's executor.

#include "base/result.h"
#include "grpc/frame.h"
#include "grpc/wire.h"
#include "http/h2_connection.h"
#include "http/server.h"
#include "net/asio.h"
#include "net/signal.h"

#include <memory>
#include <optional>
#include <string>

namespace cb::grpc {

struct ChannelOptions {
  http::DialOptions dial;  // host/port or unix_path, TLS context, server name, h2 options
  std::string authority;   // :authority; default "host:port" (or "localhost" for unix)
  size_t max_receive_message_size = kDefaultMaxMessageSize;
  size_t max_send_message_size = SIZE_MAX;
  std::chrono::milliseconds connect_timeout{20000};
  std::string user_agent = "cocoonbox-grpc/0.1";
};

struct CallOptions {
  net::Deadline deadline = net::kNoDeadline;
  Metadata metadata;
};

class ClientCall {
 public:
  ClientCall(std::shared_ptr<http::H2Stream> stream, const ChannelOptions& options,
             net::Deadline deadline);
  ClientCall(const ClientCall&) = delete;
  ClientCall& operator=(const ClientCall&) = delete;
  ~ClientCall();

  // Sends one message. Errors: the call's status when it already ended, kResourceExhausted
  // above the send limit.
  asio::awaitable<Status> write(std::string_view message);
  // Half-closes the request stream.
  asio::awaitable<Status> writes_done();
  // The next response message, or nullopt when the call ended (see finish()).
  asio::awaitable<std::optional<std::string>> read();
  // Reads and drops any remaining messages, then returns the final status.
  asio::awaitable<Status> finish();
  // Waits for the response headers. Errors: the call's final status if it ended first.
  asio::awaitable<Status> wait_initial_metadata();
  // RST_STREAM(CANCEL); the final status becomes CANCELLED.
  void cancel();

  const Metadata& initial_metadata() const { return initial_metadata_; }
  const Metadata& trailing_metadata() const { return trailing_metadata_; }
  // The final status once known.
  const std::optional<Status>& status() const { return status_; }

 private:
  asio::awaitable<Status> ensure_headers();
  void end(Status status);
  Status status_from_fields(const http::Headers& fields, int http_status) const;
  Status transport_status(const Status& st) const;

  std::shared_ptr<http::H2Stream> stream_;
  size_t max_send_;
  net::Deadline deadline_;
  FrameDecoder decoder_;
  bool headers_checked_ = false;
  bool ended_ = false;
  bool half_closed_ = false;
  std::optional<Status> status_;
  Metadata initial_metadata_;
  Metadata trailing_metadata_;
  std::string out_;
};

class Channel : public std::enable_shared_from_this<Channel> {
 public:
  static std::shared_ptr<Channel> create(net::Executor executor, ChannelOptions options);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Opens a stream for |path| ("/pkg.Service/Method"). Errors: kUnavailable (cannot
  // connect), kDeadlineExceeded, kInvalidArgument (bad metadata).
  asio::awaitable<Result<std::shared_ptr<ClientCall>>> start_call(std::string path,
                                                                  CallOptions options);
  // Connects now (otherwise the first call does). Errors as start_call.
  asio::awaitable<Status> connect(net::Deadline deadline);
  // Sends a PING on the current connection. Errors: kUnavailable, kDeadlineExceeded.
  asio::awaitable<Status> ping(net::Deadline deadline);
  void close();
  net::Executor executor() const { return executor_; }
  const ChannelOptions& options() const { return options_; }
  // The channel's HTTP/2 connection, dialed when there is none or the last one died: for
  // other protocols sharing it (the MCP bridge's Streamable HTTP clients). Errors as connect.
  asio::awaitable<Result<std::shared_ptr<http::H2Connection>>> connection(net::Deadline deadline);

 private:
  Channel(net::Executor executor, ChannelOptions options);

  net::Executor executor_;
  ChannelOptions options_;
  std::shared_ptr<http::H2Connection> conn_;
  bool connecting_ = false;
  Status last_error_;
  net::Signal connected_;
};

// ---- typed helpers (used by generated stubs) ----

template <typename Resp, typename Req>
asio::awaitable<Result<Resp>> unary_call(Channel& channel, std::string path, const Req& req,
                                         CallOptions options) {
  std::string bytes;
  if (!req.SerializeToString(&bytes)) co_return internal_error("request failed to serialize");
  CO_ASSIGN_OR_RETURN(auto call, co_await channel.start_call(std::move(path), std::move(options)));
  Status w = co_await call->write(bytes);
  if (w.ok()) w = co_await call->writes_done();
  std::optional<std::string> reply = co_await call->read();
  Status st = co_await call->finish();
  if (!st.ok()) co_return st;
  if (!w.ok()) co_return w;
  if (!reply) co_return internal_error("server ended a unary call without a response");
  Resp resp;
  if (!resp.ParseFromString(*reply)) co_return internal_error("response failed to parse");
  co_return resp;
}

// A response stream (server-streaming and bidi calls).
template <typename Resp>
class ClientReader {
 public:
  explicit ClientReader(std::shared_ptr<ClientCall> call) : call_(std::move(call)) {}
  // The next response, or nullopt at the end (then call finish()).
  asio::awaitable<std::optional<Resp>> read() {
    auto bytes = co_await call_->read();
    if (!bytes) co_return std::nullopt;
    Resp resp;
    if (!resp.ParseFromString(*bytes)) {
      call_->cancel();
      co_return std::nullopt;
    }
    co_return resp;
  }
  asio::awaitable<Status> finish() { return call_->finish(); }
  ClientCall& call() { return *call_; }

 protected:
  std::shared_ptr<ClientCall> call_;
};

// A request stream with a response stream (bidi) or a single response (client streaming).
template <typename Req, typename Resp>
class ClientReaderWriter : public ClientReader<Resp> {
 public:
  using ClientReader<Resp>::ClientReader;
  asio::awaitable<Status> write(const Req& req) {
    std::string bytes;
    if (!req.SerializeToString(&bytes)) co_return internal_error("request failed to serialize");
    co_return co_await this->call_->write(bytes);
  }
  asio::awaitable<Status> writes_done() { return this->call_->writes_done(); }
  // Client streaming: half-closes, reads the single response and the status.
  asio::awaitable<Result<Resp>> close_and_receive() {
    Status w = co_await writes_done();
    auto resp = co_await this->read();
    Status st = co_await this->finish();
    if (!st.ok()) co_return st;
    if (!w.ok()) co_return w;
    if (!resp) co_return internal_error("server ended the call without a response");
    co_return std::move(*resp);
  }
};

template <typename Resp, typename Req>
asio::awaitable<Result<ClientReader<Resp>>> server_streaming_call(Channel& channel,
                                                                  std::string path, const Req& req,
                                                                  CallOptions options) {
  std::string bytes;
  if (!req.SerializeToString(&bytes)) co_return internal_error("request failed to serialize");
  CO_ASSIGN_OR_RETURN(auto call, co_await channel.start_call(std::move(path), std::move(options)));
  Status w = co_await call->write(bytes);
  if (w.ok()) w = co_await call->writes_done();
  co_return ClientReader<Resp>(std::move(call));
}

template <typename Req, typename Resp>
asio::awaitable<Result<ClientReaderWriter<Req, Resp>>> streaming_call(Channel& channel,
                                                                      std::string path,
                                                                      CallOptions options) {
  CO_ASSIGN_OR_RETURN(auto call, co_await channel.start_call(std::move(path), std::move(options)));
  co_return ClientReaderWriter<Req, Resp>(std::move(call));
}

}  // namespace cb::grpc
