#pragma once
// The model client: one call to a model through the gateway, on the model's native wire
// (OpenAI chat completions or Anthropic messages, see wire.h), streamed or not, with the
// retries that are safe.
//
//   auto ep = parse_endpoint("unix:/run/cocoonbox/model.sock");   // the model door, no key
//   Client client(co_await asio::this_coro::executor, std::move(*ep));
//   CallOptions o;
//   o.on_delta = [&](const Delta& d) { if (d.kind == Delta::Kind::kText) show(d.text); };
//   o.deadline = net::after(10min);
//   Result<Response> r = co_await client.call(model, request, o);
//   // r->message: the assistant turn (text and tool calls); r->stop_reason; r->usage.
//
// The key. In the box the client has no key: the api's model door adds it (seed §12.2).
// Where a key is given (Endpoint::api_key, the api side), it is sent as
// "authorization: Bearer" (OpenAI) or "x-api-key" (Anthropic) and appears in no log line and
// no Status message.
//
// Errors (every Status names what happened and includes the gateway's own message):
//   HTTP 401 kUnauthenticated, 403 kPermissionDenied, 400 kInvalidArgument, 429
//   kResourceExhausted, 5xx/529 kUnavailable (wire.h error_status());
//   an error event inside a 200 stream: mapped the same way, "model stream error (type): ...";
//   a stream cut before its terminal event: kUnavailable "... stream cut ...";
//   connect failures: kUnavailable; the deadline: kDeadlineExceeded; cancellation:
//   kCancelled.
// Retries (RetryPolicy): only while no delta has reached the caller, and only for connect
// failures, 408, 429 and 5xx answers, and overloaded/rate-limit/api errors or cuts before the
// first delta; never for 400, 401, 403 or 404. The wait is Retry-After (or retry-after-ms)
// when the gateway sent one, else exponential backoff with jitter.
//
// Cancellation: cancelling the awaiting coroutine (asio per-operation cancellation, e.g. the
// losing side of `||`) closes the connection, which ends the request at the gateway, and the
// call returns kCancelled. As everywhere here, the coroutine root must have done
// `co_await asio::this_coro::throw_if_cancelled(false)` (Asio 1.22 throws otherwise).
//
// Connections: HTTP/1.1, kept alive between calls. A connection whose answer was read to its
// end goes back to a small idle set and the next call reuses it if it is younger than
// kMaxIdleAge (below the door's idle timeout, 60 s, and common gateways' 5 s), which saves a
// socket/connect and the door's accept per agent step. A kept connection the other side
// closed meanwhile shows when the request is sent: the request then never reached it, and the
// call dials once more at once (not counted as an attempt). A request that was sent but got
// no answer is not re-sent on that ground: the retry policy below decides, as for a fresh
// connection. Error answers, cut or cancelled streams close their connection.
//
// Affinity: the executor given to the constructor; call() may run several times concurrently.

#include "base/result.h"
#include "http/headers.h"
#include "model/conversation.h"
#include "net/asio.h"
#include "net/tls.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::http {
class Http1Client;
}

namespace cb::model {

// Where the gateway (or the model door in front of it) is.
struct Endpoint {
  // As given to parse_endpoint(), for messages; never holds a key.
  std::string url;
  std::string host;  // tcp: host name or IP literal (no brackets)
  uint16_t port = 0;
  bool tls = false;
  std::string unix_path;        // set for "unix:" endpoints; host/port are then unused
  std::string path_prefix;      // prepended to /v1/...: "https://gw/api" -> "/api"
  http::Headers extra_headers;  // sent with every request (after ours; they may override)
  std::string api_key;          // empty in the box
  // TLS for https; when null, a context with the system roots is made on first use.
  std::shared_ptr<net::TlsContext> tls_context;
};

// Accepts "http://host:port[/prefix]", "https://host[:port][/prefix]" and "unix:/abs/path"
// (the model door). Errors: kInvalidArgument naming what is wrong.
Result<Endpoint> parse_endpoint(std::string_view url);

struct RetryPolicy {
  int max_attempts = 4;  // 1: no retries
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{20000};
  // A Retry-After longer than this is not waited for: the call fails with the 429/5xx.
  std::chrono::milliseconds max_retry_after{60000};
};

class RequestEncoder;  // wire.h

struct CallOptions {
  // Called for each delta of a streamed answer, on the client's executor, before call()
  // returns. Must not block; it may not call back into the client.
  std::function<void(const Delta&)> on_delta;
  // Observes each retry before its wait: the attempt that failed (1-based), its error and the
  // wait chosen. For logs and tests.
  std::function<void(int attempt, const Status& error, std::chrono::milliseconds wait)> on_retry;
  bool stream = true;
  // The whole call, retries and waits included.
  net::Deadline deadline = net::kNoDeadline;
  // Longest silence allowed between two reads of the answer (a hung upstream).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  RetryPolicy retry;
  // Builds the body incrementally across calls (wire.h); null: request_body() each call.
  // The body is sent from the encoder's pieces, without copying the conversation into one
  // string. Not owned; must outlive the call and not be used by anyone else meanwhile.
  RequestEncoder* encoder = nullptr;
  // With |encoder|: request.messages[0, n) are those of the encoder's previous call,
  // unchanged (RequestEncoder::body()'s |unchanged|).
  size_t encoder_unchanged = 0;
};

class Client {
 public:
  Client(net::Executor executor, Endpoint endpoint);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // How long an idle connection may wait for the next call, and how many are kept.
  static constexpr std::chrono::milliseconds kMaxIdleAge{4000};
  static constexpr size_t kMaxIdle = 2;

  // Sends |request| to |model| on the model's wire and returns the assembled answer.
  // Errors: see the file comment.
  asio::awaitable<Result<Response>> call(const ModelInfo& model, const Request& request,
                                         CallOptions options);

  const Endpoint& endpoint() const { return endpoint_; }

 private:
  struct Attempt;
  // |body|: the request body as pieces written one after the other (wire.h).
  asio::awaitable<Result<Response>> attempt(const ModelInfo& model,
                                            std::span<const std::string_view> body,
                                            size_t body_size, const CallOptions& options,
                                            Attempt& state);
  asio::awaitable<Status> ensure_tls();
  // The newest idle connection young enough to reuse, or null; older ones are closed.
  std::unique_ptr<http::Http1Client> take_idle();
  // Keeps |conn| for the next call when it is reusable(), else closes it.
  void keep(std::unique_ptr<http::Http1Client> conn);

  struct Idle {
    std::unique_ptr<http::Http1Client> conn;
    std::chrono::steady_clock::time_point since;
  };

  net::Executor executor_;
  Endpoint endpoint_;
  uint64_t jitter_state_;
  std::vector<Idle> idle_;  // oldest first
};

// The request fields the client sends for |model| (content-type, accept, the wire's version
// and key fields, then |endpoint|'s extra headers). Exposed for the door and for tests.
http::Headers request_headers(const Endpoint& endpoint, const ModelInfo& model, bool stream);

// The wait a response asks for: "retry-after-ms" (milliseconds), else "retry-after" as
// delta-seconds (an HTTP-date is not honoured: it depends on clocks agreeing). nullopt when
// absent or malformed.
std::optional<std::chrono::milliseconds> retry_after(const http::Headers& headers);

// True for the HTTP statuses worth retrying: 408, 429, 500-599.
bool retryable_http_status(int status);

}  // namespace cb::model
