#pragma once
// The gRPC server on cocoonbox's HTTP/2 stack (no grpc++): unary, server-streaming,
// client-streaming and bidi methods; grpc-timeout deadlines; cancellation from the client
// (RST_STREAM) reaching the handler as a cancelled coroutine; metadata including -bin keys;
// trailers-only error responses; percent-encoded grpc-message; a receive limit per message
// (RESOURCE_EXHAUSTED beyond it).
//
// A handler is an `asio::awaitable<Result<Resp>>` (house style H14); its Status becomes
// grpc-status and grpc-message without translation. Generated services (protoc-gen-cbgrpc)
// derive from Service and register typed methods; Server routes them through an http::Router.
//
// Affinity: everything runs on the HTTP server's executor. Server must outlive the router.

#include "base/result.h"
#include "grpc/frame.h"
#include "grpc/wire.h"
#include "http/h2_connection.h"
#include "http/server.h"
#include "net/asio.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace cb::grpc {

struct ServerOptions {
  size_t max_receive_message_size = kDefaultMaxMessageSize;
  // grpc-core's default: sending is not limited.
  size_t max_send_message_size = SIZE_MAX;
};

// One call's transport: the request stream's messages in, response messages and the final
// status out. Typed readers/writers below wrap it.
class ServerCall {
 public:
  ServerCall(http::H2Stream& stream, const ServerOptions& options, Metadata client_metadata,
             net::Deadline deadline);
  ServerCall(const ServerCall&) = delete;
  ServerCall& operator=(const ServerCall&) = delete;

  // The next request message, or nullopt once the client half-closed.
  // Errors: kCancelled (client reset or deadline), kResourceExhausted (too large),
  // kInternal (malformed framing), kUnavailable (connection lost).
  asio::awaitable<Result<std::optional<std::string>>> read();
  // Sends initial metadata (once) and |message|. Errors: kCancelled, kUnavailable,
  // kResourceExhausted (above max_send_message_size).
  asio::awaitable<Status> write(std::string_view message);
  // Sends the initial metadata now, before any message.
  Status send_initial_metadata();
  // Sends the status (trailers, or a trailers-only response if nothing was sent yet).
  // Idempotent: later calls are ignored.
  asio::awaitable<Status> finish(const Status& status);
  bool finished() const { return finished_; }
  // The call's grpc-timeout ran out: from now on write() fails with kDeadlineExceeded and
  // finish() sends DEADLINE_EXCEEDED whatever status it is given (the server calls this; a
  // handler that is still cleaning up cannot answer late).
  void expire() { expired_ = true; }

  const Metadata& client_metadata() const { return client_metadata_; }
  net::Deadline deadline() const { return deadline_; }
  const std::string& method() const { return stream_.request().path; }
  std::string peer() const { return stream_.connection().transport().peer(); }
  Metadata& initial_metadata() { return initial_metadata_; }
  Metadata& trailing_metadata() { return trailing_metadata_; }
  // True once the client reset the stream or the connection died.
  bool cancelled() const { return stream_.closed() && stream_.close_code() != 0; }
  http::H2Stream& stream() { return stream_; }

 private:
  http::Headers response_headers(bool trailers_only, const Status* status);

  http::H2Stream& stream_;
  const ServerOptions& options_;
  Metadata client_metadata_;
  net::Deadline deadline_;
  FrameDecoder decoder_;
  bool client_done_ = false;
  bool headers_sent_ = false;
  bool finished_ = false;
  bool expired_ = false;
  Metadata initial_metadata_;
  Metadata trailing_metadata_;
  std::string out_;
};

// What a handler sees of its call.
class CallContext {
 public:
  explicit CallContext(ServerCall& call) : call_(call) {}
  const Metadata& client_metadata() const { return call_.client_metadata(); }
  // First value of |key|, or nullptr.
  const std::string* metadata(std::string_view key) const {
    return http::find_header(call_.client_metadata(), key);
  }
  net::Deadline deadline() const { return call_.deadline(); }
  const std::string& method() const { return call_.method(); }
  std::string peer() const { return call_.peer(); }
  // Added before the first message (or with the status on a trailers-only response).
  void add_initial_metadata(std::string key, std::string value) {
    call_.initial_metadata().push_back({std::move(key), std::move(value)});
  }
  void add_trailing_metadata(std::string key, std::string value) {
    call_.trailing_metadata().push_back({std::move(key), std::move(value)});
  }
  // Sends initial metadata now (e.g. before a long wait for the first message).
  Status send_initial_metadata() { return call_.send_initial_metadata(); }
  bool cancelled() const { return call_.cancelled(); }
  ServerCall& call() { return call_; }

 private:
  ServerCall& call_;
};

template <typename Req>
class ServerReader {
 public:
  explicit ServerReader(ServerCall& call) : call_(call) {}
  // The next request, or nullopt at the end of the client's stream.
  // Errors: as ServerCall::read, plus kInternal for an unparsable message.
  asio::awaitable<Result<std::optional<Req>>> read() {
    CO_ASSIGN_OR_RETURN(auto bytes, co_await call_.read());
    if (!bytes) co_return std::optional<Req>();
    Req req;
    if (!req.ParseFromString(*bytes)) co_return internal_error("request message failed to parse");
    co_return std::optional<Req>(std::move(req));
  }

 private:
  ServerCall& call_;
};

template <typename Resp>
class ServerWriter {
 public:
  explicit ServerWriter(ServerCall& call) : call_(call) {}
  asio::awaitable<Status> write(const Resp& resp) {
    std::string bytes;
    if (!resp.SerializeToString(&bytes)) co_return internal_error("response failed to serialize");
    co_return co_await call_.write(bytes);
  }

 private:
  ServerCall& call_;
};

class Server;

// Base of every generated service.
class Service {
 public:
  virtual ~Service() = default;
  virtual std::string_view service_name() const = 0;
  virtual void register_methods(Server& server) = 0;
};

class Server {
 public:
  explicit Server(ServerOptions options = {}) : options_(options) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // |service| must outlive the server.
  void add_service(Service& service) { service.register_methods(*this); }

  // Adds a route per method to |router| and a fallback that answers UNIMPLEMENTED to any
  // other gRPC request (and 404 to anything else). The server must outlive |router|'s use.
  void register_with(http::Router& router);

  // Raw method: |handler| drives the call itself and must finish() it.
  using RawHandler = std::function<asio::awaitable<void>(ServerCall&)>;
  void add_method(std::string path, RawHandler handler) {
    methods_[std::move(path)] = std::move(handler);
  }

  template <typename Req, typename Resp>
  void add_unary(std::string path,
                 std::function<asio::awaitable<Result<Resp>>(CallContext&, Req&&)> fn);
  template <typename Req, typename Resp>
  void add_server_streaming(
      std::string path,
      std::function<asio::awaitable<Status>(CallContext&, Req&&, ServerWriter<Resp>&)> fn);
  template <typename Req, typename Resp>
  void add_client_streaming(
      std::string path,
      std::function<asio::awaitable<Result<Resp>>(CallContext&, ServerReader<Req>&)> fn);
  template <typename Req, typename Resp>
  void add_bidi_streaming(
      std::string path,
      std::function<asio::awaitable<Status>(CallContext&, ServerReader<Req>&, ServerWriter<Resp>&)>
          fn);

  // Called for every call before its handler, with the request head (method path and
  // metadata as sent). A non-ok Status ends the call with that status (e.g. UNAUTHENTICATED)
  // and the handler never runs. Used for credentials and tokens.
  using Authorizer = std::function<Status(const http::RequestHead& head)>;
  void set_authorizer(Authorizer authorizer) { authorizer_ = std::move(authorizer); }

  const ServerOptions& options() const { return options_; }

  // Handles one HTTP request as a gRPC call to |handler| (or UNIMPLEMENTED when null).
  asio::awaitable<void> serve(http::ServerRequest& req, const RawHandler* handler);

 private:
  ServerOptions options_;
  std::map<std::string, RawHandler> methods_;
  Authorizer authorizer_;
};

// ---- template definitions ----

namespace internal {
// Reads exactly one request message for unary and server-streaming methods.
// Errors: kInternal when the client sent zero or several messages.
asio::awaitable<Result<std::string>> read_single(ServerCall& call);

// The one request of a unary or server-streaming call, parsed.
// Errors: as read_single, plus kInternal for an unparsable message.
template <typename Req>
asio::awaitable<Result<Req>> read_request(ServerCall& call) {
  CO_ASSIGN_OR_RETURN(auto bytes, co_await read_single(call));
  Req req;
  if (!req.ParseFromString(bytes)) co_return internal_error("request message failed to parse");
  co_return req;
}

// Ends a call that has one response: sends it and OK, or the handler's error.
template <typename Resp>
asio::awaitable<void> finish_single(ServerCall& call, const Result<Resp>& resp) {
  if (!resp.ok()) {
    co_await call.finish(resp.status());
    co_return;
  }
  ServerWriter<Resp> writer(call);
  Status st = co_await writer.write(*resp);
  co_await call.finish(st);
}
}  // namespace internal

template <typename Req, typename Resp>
void Server::add_unary(std::string path,
                       std::function<asio::awaitable<Result<Resp>>(CallContext&, Req&&)> fn) {
  add_method(std::move(path), [fn = std::move(fn)](ServerCall& call) -> asio::awaitable<void> {
    auto req = co_await internal::read_request<Req>(call);
    if (!req.ok()) {
      co_await call.finish(req.status());
      co_return;
    }
    CallContext ctx(call);
    Result<Resp> resp = co_await fn(ctx, std::move(*req));
    co_await internal::finish_single(call, resp);
  });
}

template <typename Req, typename Resp>
void Server::add_server_streaming(
    std::string path,
    std::function<asio::awaitable<Status>(CallContext&, Req&&, ServerWriter<Resp>&)> fn) {
  add_method(std::move(path), [fn = std::move(fn)](ServerCall& call) -> asio::awaitable<void> {
    auto req = co_await internal::read_request<Req>(call);
    if (!req.ok()) {
      co_await call.finish(req.status());
      co_return;
    }
    CallContext ctx(call);
    ServerWriter<Resp> writer(call);
    Status st = co_await fn(ctx, std::move(*req), writer);
    co_await call.finish(st);
  });
}

template <typename Req, typename Resp>
void Server::add_client_streaming(
    std::string path,
    std::function<asio::awaitable<Result<Resp>>(CallContext&, ServerReader<Req>&)> fn) {
  add_method(std::move(path), [fn = std::move(fn)](ServerCall& call) -> asio::awaitable<void> {
    CallContext ctx(call);
    ServerReader<Req> reader(call);
    Result<Resp> resp = co_await fn(ctx, reader);
    co_await internal::finish_single(call, resp);
  });
}

template <typename Req, typename Resp>
void Server::add_bidi_streaming(
    std::string path,
    std::function<asio::awaitable<Status>(CallContext&, ServerReader<Req>&, ServerWriter<Resp>&)>
        fn) {
  add_method(std::move(path), [fn = std::move(fn)](ServerCall& call) -> asio::awaitable<void> {
    CallContext ctx(call);
    ServerReader<Req> reader(call);
    ServerWriter<Resp> writer(call);
    Status st = co_await fn(ctx, reader, writer);
    co_await call.finish(st);
  });
}

}  // namespace cb::grpc
