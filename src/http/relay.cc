#include "http/relay.h"

#include "base/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace cb::http {

namespace {

// Client body -> upstream. Ends the upstream request when the client's body ends.
asio::awaitable<Status> pump_request(ServerRequest& client, H2Stream& up, RelayStats* stats) {
  for (;;) {
    auto chunk = co_await client.read();
    if (!chunk.ok()) {
      up.reset(NGHTTP2_CANCEL);
      co_return chunk.status();
    }
    bool end = chunk->empty();
    if (stats != nullptr) stats->request_bytes += chunk->size();
    Status w = co_await up.write(*chunk, end);
    if (!w.ok()) co_return w;
    if (end) co_return ok_status();
  }
}

// Upstream response -> client: headers (or a headers-only answer), body, trailers.
asio::awaitable<Status> pump_response(ServerRequest& client, H2Stream& up, RelayStats* stats) {
  Status h = co_await up.wait_headers();
  if (!h.ok()) {
    if (!client.headers_sent()) {
      Headers extra;
      (void)co_await respond(client, 502, "text/plain; charset=utf-8",
                             fmt::format("upstream failed: {}\n", h.message()));
    } else {
      client.reset();
    }
    co_return unavailable(fmt::format("upstream: {}", h.message()));
  }
  Headers headers = up.headers();
  // A response whose HEADERS carried END_STREAM (a gRPC trailers-only answer) stays one.
  bool headers_only = up.end_of_stream_received();
  Status sent = co_await client.send_headers(up.status(), headers, headers_only);
  if (!sent.ok() || headers_only) co_return sent;
  for (;;) {
    auto chunk = co_await up.read();
    if (!chunk.ok()) {
      client.reset();
      co_return unavailable(fmt::format("upstream: {}", chunk.status().message()));
    }
    if (chunk->empty()) break;
    if (stats != nullptr) stats->response_bytes += chunk->size();
    Status w = co_await client.write(*chunk, false);
    if (!w.ok()) {
      up.reset(NGHTTP2_CANCEL);
      co_return w;
    }
  }
  if (!up.trailers().empty()) co_return co_await client.finish(up.trailers());
  co_return co_await client.write({}, true);
}

// |head| without the connection-specific fields HTTP/2 forbids (RFC 9113 §8.2.2): an
// HTTP/1.1 client's connection, keep-alive, proxy-connection, transfer-encoding and upgrade,
// the fields its connection header names, and te unless it is "trailers".
RequestHead for_h2(const RequestHead& head) {
  RequestHead out = head;
  std::vector<std::string> named;
  if (const std::string* c = find_header(head.headers, "connection")) {
    std::string_view rest = *c;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view token = rest.substr(0, comma);
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
        token.remove_prefix(1);
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t'))
        token.remove_suffix(1);
      std::string lower(token);
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (!lower.empty()) named.push_back(std::move(lower));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::erase_if(out.headers, [&](const Header& h) {
    if (h.name == "connection" || h.name == "keep-alive" || h.name == "proxy-connection" ||
        h.name == "transfer-encoding" || h.name == "upgrade")
      return true;
    if (h.name == "te") return h.value != "trailers";
    return std::find(named.begin(), named.end(), h.name) != named.end();
  });
  return out;
}

}  // namespace

asio::awaitable<Status> relay(ServerRequest& client, H2Connection& upstream,
                              const RequestHead& head, RelayStats* stats) {
  auto up = upstream.open_stream(for_h2(head), false);
  if (!up.ok()) {
    (void)co_await respond(client, 502, "text/plain; charset=utf-8",
                           fmt::format("upstream unavailable: {}\n", up.status().message()));
    co_return unavailable(up.status().message());
  }
  std::shared_ptr<H2Stream> stream = *up;
  // The request pump runs beside the response pump; the response side decides the end. Its
  // state is shared (co-owners: this frame and the pump) so neither outlives the other's data.
  auto ex = co_await asio::this_coro::executor;
  struct RequestSide {
    explicit RequestSide(const net::Executor& e) : signal(e) {}
    bool done = false;
    Status status;
    net::Signal signal;
    asio::cancellation_signal cancel;
  };
  auto side = std::make_shared<RequestSide>(ex);
  asio::co_spawn(
      ex,
      [&client, stream, stats, side]() -> asio::awaitable<void> {
        co_await asio::this_coro::throw_if_cancelled(false);
        side->status = co_await pump_request(client, *stream, stats);
        side->done = true;
        side->signal.notify();
      },
      asio::bind_cancellation_slot(side->cancel.slot(), asio::detached));
  Status response_status = co_await pump_response(client, *stream, stats);
  // The response is complete (or failed): a request body still open has no reader any more.
  // Stop the pump (it waits in client.read()) before this frame, which |client| outlives, ends.
  if (!side->done) {
    if (!stream->closed()) stream->reset(NGHTTP2_CANCEL);
    side->cancel.emit(asio::cancellation_type::terminal);
    while (!side->done) {
      Status w = co_await side->signal.wait();
      if (!w.ok()) break;
    }
  }
  Status request_status = side->status;
  if (!response_status.ok()) co_return response_status;
  if (!request_status.ok() && request_status.code() != Code::kFailedPrecondition)
    co_return request_status;
  co_return ok_status();
}

}  // namespace cb::http
