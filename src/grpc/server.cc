#include "grpc/server.h"

#include "base/log.h"

#include <fmt/format.h>

namespace cb::grpc {

namespace {
constexpr std::string_view kContentType = "application/grpc";

http::Header field(std::string_view name, std::string value) {
  return http::Header{std::string(name), std::move(value)};
}
}  // namespace

ServerCall::ServerCall(http::H2Stream& stream, const ServerOptions& options,
                       Metadata client_metadata, net::Deadline deadline)
    : stream_(stream),
      options_(options),
      client_metadata_(std::move(client_metadata)),
      deadline_(deadline),
      decoder_(options.max_receive_message_size) {}

asio::awaitable<Result<std::optional<std::string>>> ServerCall::read() {
  for (;;) {
    if (auto m = decoder_.next()) co_return std::optional<std::string>(std::move(*m));
    if (client_done_) co_return std::optional<std::string>();
    auto chunk = co_await stream_.read();
    if (!chunk.ok()) co_return chunk.status();
    if (chunk->empty()) {
      client_done_ = true;
      if (!decoder_.idle()) co_return internal_error("request stream ended inside a message");
      continue;
    }
    Status fed = decoder_.feed(*chunk);
    if (!fed.ok()) co_return fed;
  }
}

http::Headers ServerCall::response_headers(bool trailers_only, const Status* status) {
  http::Headers h;
  if (trailers_only || status == nullptr) {
    h.push_back(field("content-type", std::string(kContentType)));
    // We decode no compressed messages; saying so lets clients skip compression, and an
    // UNIMPLEMENTED for an unsupported grpc-encoding carries it as the spec asks.
    h.push_back(field("grpc-accept-encoding", "identity"));
    for (auto& m : metadata_to_wire(initial_metadata_)) h.push_back(std::move(m));
  }
  if (status != nullptr) {
    h.push_back(field("grpc-status", std::to_string(static_cast<int>(status->code()))));
    if (!status->message().empty())
      h.push_back(field("grpc-message", percent_encode(status->message())));
    for (auto& m : metadata_to_wire(trailing_metadata_)) h.push_back(std::move(m));
  }
  return h;
}

Status ServerCall::send_initial_metadata() {
  if (headers_sent_) return ok_status();
  RETURN_IF_ERROR(validate_metadata(initial_metadata_));
  RETURN_IF_ERROR(stream_.send_response(200, response_headers(false, nullptr), false));
  headers_sent_ = true;
  return ok_status();
}

asio::awaitable<Status> ServerCall::write(std::string_view message) {
  if (expired_) co_return deadline_exceeded("deadline exceeded");
  if (finished_) co_return failed_precondition("write after the call finished");
  if (message.size() > options_.max_send_message_size)
    co_return resource_exhausted(fmt::format("sent message larger than max ({} vs. {})",
                                             message.size(), options_.max_send_message_size));
  CO_RETURN_IF_ERROR(send_initial_metadata());
  out_.clear();
  append_message(out_, message);
  co_return co_await stream_.write(out_);
}

asio::awaitable<Status> ServerCall::finish(const Status& status) {
  if (finished_) co_return ok_status();
  finished_ = true;
  if (stream_.closed()) co_return unavailable("call already ended");
  Status st = expired_ ? deadline_exceeded("deadline exceeded") : status;
  if (!validate_metadata(trailing_metadata_).ok() || !validate_metadata(initial_metadata_).ok()) {
    log::warn("grpc handler set invalid metadata; dropped", {{"method", method()}});
    trailing_metadata_.clear();
    if (!headers_sent_) initial_metadata_.clear();
    if (st.ok()) st = internal_error("handler set invalid metadata");
  }
  if (!headers_sent_) {
    headers_sent_ = true;
    co_return stream_.send_response(200, response_headers(true, &st), true);
  }
  co_return stream_.send_trailers(response_headers(false, &st));
}

namespace internal {
asio::awaitable<Result<std::string>> read_single(ServerCall& call) {
  CO_ASSIGN_OR_RETURN(auto first, co_await call.read());
  if (!first) co_return internal_error("expected one request message, got none");
  CO_ASSIGN_OR_RETURN(auto second, co_await call.read());
  if (second) co_return internal_error("expected one request message, got several");
  co_return std::move(*first);
}
}  // namespace internal

void Server::register_with(http::Router& router) {
  for (auto& [path, handler] : methods_) {
    const RawHandler* h = &handler;
    router.handle("", path, [this, h](http::ServerRequest& req) { return serve(req, h); });
  }
  router.set_fallback([this](http::ServerRequest& req) -> asio::awaitable<void> {
    const std::string* ct = http::find_header(req.head().headers, "content-type");
    if (ct != nullptr && ct->rfind(kContentType, 0) == 0) {
      co_await serve(req, nullptr);
      co_return;
    }
    (void)co_await http::respond(req, 404, "text/plain; charset=utf-8", "not found\n");
  });
}

asio::awaitable<void> Server::serve(http::ServerRequest& req, const RawHandler* handler) {
  http::H2Stream* s = req.h2_stream();
  if (s == nullptr) {
    (void)co_await http::respond(req, 505, "text/plain; charset=utf-8", "gRPC requires HTTP/2\n");
    co_return;
  }
  const auto& head = req.head();
  if (head.method != "POST") {
    (void)co_await http::respond(req, 405, "text/plain; charset=utf-8", "gRPC requires POST\n");
    co_return;
  }
  const std::string* ct = http::find_header(head.headers, "content-type");
  if (ct == nullptr || ct->rfind(kContentType, 0) != 0 ||
      (ct->size() > kContentType.size() && (*ct)[kContentType.size()] != '+' &&
       (*ct)[kContentType.size()] != ';')) {
    (void)co_await http::respond(req, 415, "text/plain; charset=utf-8",
                                 "content-type must be application/grpc\n");
    co_return;
  }

  net::Deadline deadline = net::kNoDeadline;
  Status early;
  if (const std::string* t = http::find_header(head.headers, "grpc-timeout")) {
    auto timeout = parse_timeout(*t);
    if (timeout.ok()) {
      deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(*timeout);
    } else {
      early = internal_error(timeout.status().message());
    }
  }
  auto md = metadata_from_wire(head.headers);
  if (!md.ok() && early.ok()) early = md.status();
  ServerCall call(*s, options_, md.ok() ? std::move(*md) : Metadata{}, deadline);

  if (const std::string* enc = http::find_header(head.headers, "grpc-encoding");
      enc != nullptr && *enc != "identity" && early.ok()) {
    early = unimplemented(fmt::format("grpc-encoding {:?} is not supported", *enc));
  }
  if (early.ok() && authorizer_) early = authorizer_(head);
  if (early.ok() && handler == nullptr)
    early = unimplemented(fmt::format("unknown method {}", head.path_only()));
  if (!early.ok()) {
    (void)co_await call.finish(early);
    co_return;
  }

  if (deadline == net::kNoDeadline) {
    co_await (*handler)(call);
  } else {
    using namespace asio::experimental::awaitable_operators;
    net::Timer timer(s->executor(), deadline);
    // The handler runs as its own branch of the race; when the deadline wins it is cancelled,
    // and Asio would throw at its next co_await. Turn that off for the branch so a cancelled
    // handler can still await its cleanup (kill and reap a process, close a stream) and end
    // normally; it sees the cancellation as operation_aborted results. The call expires the
    // moment the deadline passes, so whatever the handler answers afterwards is not sent.
    auto run_handler = [](const RawHandler& h, ServerCall& c) -> asio::awaitable<void> {
      co_await asio::this_coro::throw_if_cancelled(false);
      co_await h(c);
    };
    auto expire_at_deadline = [](net::Timer& t, ServerCall& c) -> asio::awaitable<void> {
      auto [ec] = co_await t.async_wait();
      if (!ec) c.expire();
    };
    auto winner = co_await (run_handler(*handler, call) || expire_at_deadline(timer, call));
    if (winner.index() == 1) (void)co_await call.finish(deadline_exceeded("deadline exceeded"));
  }
  if (!call.finished()) (void)co_await call.finish(internal_error("handler did not finish"));
}

}  // namespace cb::grpc
