#include "mcp/http_server.h"

#include "base/log.h"
#include "crypto/random.h"
#include "http/sse.h"
#include "net/signal.h"

#include <algorithm>
#include <deque>
#include <utility>

namespace cb::mcp {
namespace {

constexpr std::string_view kSessionHeader = "mcp-session-id";
constexpr std::string_view kVersionHeader = "mcp-protocol-version";
constexpr std::string_view kJson = "application/json";
constexpr std::string_view kEventStream = "text/event-stream";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

// "application/json; charset=utf-8" -> "application/json".
std::string_view media_essence(std::string_view value) {
  return trim(value.substr(0, value.find(';')));
}

// The body of an HTTP error: a JSON-RPC error response without an id (transports spec).
std::string error_body(int code, std::string_view message) {
  return serialize(Message::error_response(nullptr, rpc_error(code, std::string(message))));
}

http::Headers header_list(std::string_view name, std::string_view value) {
  http::Headers h;
  h.push_back(http::Header{std::string(name), std::string(value)});
  return h;
}

asio::awaitable<void> send_error(http::ServerRequest& req, int status, int code,
                                 std::string message, http::Headers extra = {}) {
  std::string body = error_body(code, message);
  Status sent = co_await http::respond(req, status, kJson, body, std::move(extra));
  (void)sent;  // the peer may be gone; nothing more to do
}

bool has_progress_token(const Message& m) {
  if (!m.params.is_object()) return false;
  auto meta = m.params.find("_meta");
  return meta != m.params.end() && meta->is_object() && meta->contains("progressToken");
}

// The host of an origin "scheme://host[:port]", without brackets for IPv6.
std::string_view origin_host(std::string_view origin) {
  size_t scheme = origin.find("://");
  if (scheme == std::string_view::npos) return {};
  std::string_view rest = origin.substr(scheme + 3);
  rest = rest.substr(0, rest.find('/'));
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    return close == std::string_view::npos ? std::string_view() : rest.substr(1, close - 1);
  }
  return rest.substr(0, rest.find(':'));
}

}  // namespace

bool accept_allows(std::string_view accept, std::string_view media_type) {
  std::string_view type = media_type.substr(0, media_type.find('/'));
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    std::string_view range = media_essence(item);
    // q=0 means "not acceptable".
    bool refused = false;
    std::string_view params = item.substr(std::min(item.size(), item.find(';')));
    while (!params.empty()) {
      params.remove_prefix(1);
      size_t semi = params.find(';');
      std::string_view p = trim(params.substr(0, semi));
      params = semi == std::string_view::npos ? std::string_view() : params.substr(semi);
      if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
        std::string_view q = p.substr(2);
        refused = q.find_first_not_of("0.") == std::string_view::npos;
      }
    }
    if (refused) continue;
    if (range == "*/*" || iequals(range, media_type)) return true;
    if (range.size() == type.size() + 2 && iequals(range.substr(0, type.size()), type) &&
        range.substr(type.size()) == "/*") {
      return true;
    }
  }
  return false;
}

// ---- HttpSession: one MCP session and its GET stream's queue.

struct HttpServerTransport::HttpSession final : public SessionOutlet {
  HttpSession(const net::Executor& ex, size_t max_pending) : signal(ex), max_pending(max_pending) {}
  ~HttpSession() override {
    if (session) session->close();
  }

  void post(Message message) override {
    if (closed) return;
    pending.push_back(std::move(message));
    while (pending.size() > max_pending) pending.pop_front();
    signal.notify();
  }

  std::unique_ptr<ServerSession> session;
  std::string id;
  std::string principal;
  std::chrono::steady_clock::time_point last_active;
  int busy = 0;  // POSTs with requests in progress, plus the GET stream
  bool get_open = false;
  bool closed = false;
  std::deque<Message> pending;  // for the GET stream
  net::Signal signal;           // pending grew, or the session closed
  size_t max_pending;
};

// The reply side of one POST: JSON, or an SSE stream once a related message goes out (or at
// once when the request asked for progress).
class HttpServerTransport::PostChannel final : public RequestChannel {
 public:
  PostChannel(http::ServerRequest& req, http::Headers extra, const net::Executor& ex)
      : req_(req), extra_(std::move(extra)), lock_signal_(ex) {}

  asio::awaitable<Status> send(const Message& message) override {
    while (busy_) {
      Status waited = co_await lock_signal_.wait();
      if (!waited.ok()) co_return waited;
    }
    busy_ = true;
    Status st = co_await send_locked(message);
    busy_ = false;
    lock_signal_.notify();
    co_return st;
  }

  asio::awaitable<Status> start_sse() {
    if (sse_) co_return ok_status();
    auto writer = co_await http::SseWriter::start(req_, extra_);
    if (!writer.ok()) co_return writer.status();
    sse_.emplace(std::move(*writer));
    co_return ok_status();
  }

  // Sends the replies and ends the response: as SSE events when the stream is open, else as
  // one JSON body (an array for a batch). With no reply at all (the request was cancelled)
  // an empty SSE stream ends the exchange.
  asio::awaitable<void> finish(const std::vector<Message>& replies, bool batch) {
    while (busy_) {
      Status waited = co_await lock_signal_.wait();
      if (!waited.ok()) co_return;
    }
    busy_ = true;
    if (!sse_ && !replies.empty()) {
      std::string body = batch ? serialize_batch(replies) : serialize(replies[0]);
      Status sent = co_await http::respond(req_, 200, kJson, body, extra_);
      (void)sent;
      co_return;
    }
    for (const Message& m : replies) {
      Status sent = co_await send_locked(m);
      if (!sent.ok()) co_return;
    }
    if (!sse_) {
      Status started = co_await start_sse();
      if (!started.ok()) co_return;
    }
    Status closed = co_await sse_->close();
    (void)closed;
  }

 private:
  asio::awaitable<Status> send_locked(const Message& message) {
    if (!sse_) CO_RETURN_IF_ERROR(co_await start_sse());
    std::string data = serialize(message);
    co_return co_await sse_->send("message", data);
  }

  http::ServerRequest& req_;
  http::Headers extra_;
  std::optional<http::SseWriter> sse_;
  bool busy_ = false;
  net::Signal lock_signal_;
};

// ---- HttpServerTransport

HttpServerTransport::HttpServerTransport(Server& server, net::Executor executor,
                                         HttpServerOptions options)
    : server_(server), executor_(std::move(executor)), options_(std::move(options)) {}

HttpServerTransport::~HttpServerTransport() { close_all(); }

void HttpServerTransport::mount(http::Router& router, std::string path) {
  // |this| outlives the routes' use: the transport outlives the http::Server (header).
  router.handle("", std::move(path), [this](http::ServerRequest& req) -> asio::awaitable<void> {
    co_await handle(req);
  });
}

std::chrono::steady_clock::time_point HttpServerTransport::now() const {
  return (options_.clock != nullptr ? *options_.clock : system_clock()).steady_now();
}

void HttpServerTransport::expire_idle_sessions() {
  const auto t = now();
  std::vector<std::string> idle;
  for (const auto& [id, s] : sessions_) {
    if (s->busy == 0 && t - s->last_active >= options_.session_idle_timeout) idle.push_back(id);
  }
  for (const std::string& id : idle) {
    log::debug("mcp session expired", {{"session", id}});
    close_session(id);
  }
}

void HttpServerTransport::close_session(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  std::shared_ptr<HttpSession> s = std::move(it->second);
  sessions_.erase(it);
  s->closed = true;
  s->pending.clear();
  s->session->close();
  s->signal.notify();
}

void HttpServerTransport::close_all() {
  while (!sessions_.empty()) close_session(sessions_.begin()->first);
}

bool HttpServerTransport::origin_allowed(std::string_view origin,
                                         const http::RequestHead& head) const {
  if (options_.origin_allowed) return options_.origin_allowed(origin, head);
  std::string_view host = origin_host(origin);
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  size_t scheme = origin.find("://");
  return scheme != std::string_view::npos && !head.authority.empty() &&
         iequals(origin.substr(scheme + 3), head.authority);
}

asio::awaitable<void> HttpServerTransport::handle(http::ServerRequest& req) {
  expire_idle_sessions();
  const http::RequestHead& head = req.head();
  if (const std::string* origin = http::find_header(head.headers, "origin")) {
    if (!origin_allowed(*origin, head)) {
      co_await send_error(req, 403, kServerError, "Forbidden: origin not allowed");
      co_return;
    }
  }
  std::string principal;
  if (options_.authenticate) {
    Result<std::string> who = co_await options_.authenticate(head);
    if (!who.ok()) {
      const Status failure = who.status();
      int status = 500;
      http::Headers extra;
      switch (failure.code()) {
        case Code::kUnauthenticated:
          status = 401;
          extra = header_list("www-authenticate", "Bearer");
          break;
        case Code::kPermissionDenied:
          status = 403;
          break;
        case Code::kUnavailable:
          status = 503;
          break;
        default:
          break;
      }
      co_await send_error(req, status, kServerError, std::string(failure.message()),
                          std::move(extra));
      co_return;
    }
    principal = std::move(*who);
  }
  if (head.method == "POST") {
    co_await handle_post(req, principal);
  } else if (head.method == "GET") {
    co_await handle_get(req, principal);
  } else if (head.method == "DELETE") {
    co_await handle_delete(req, principal);
  } else {
    std::string allow = "POST";
    if (options_.enable_get_stream) allow += ", GET";
    if (options_.enable_delete) allow += ", DELETE";
    co_await send_error(req, 405, kServerError, "Method not allowed", header_list("allow", allow));
  }
}

asio::awaitable<std::shared_ptr<HttpServerTransport::HttpSession>>
HttpServerTransport::find_session(http::ServerRequest& req, const std::string& principal) {
  const std::string* id = http::find_header(req.head().headers, kSessionHeader);
  if (id == nullptr || id->empty()) {
    co_await send_error(req, 400, kServerError, "Bad Request: Mcp-Session-Id header is required");
    co_return nullptr;
  }
  auto it = sessions_.find(*id);
  // Another principal's session is "not found" too: its existence is not revealed.
  if (it == sessions_.end() || it->second->principal != principal) {
    co_await send_error(req, 404, kSessionNotFound, "Session not found");
    co_return nullptr;
  }
  co_return it->second;
}

asio::awaitable<void> HttpServerTransport::handle_post(http::ServerRequest& req,
                                                       const std::string& principal) {
  const http::RequestHead& head = req.head();
  const std::string* accept = http::find_header(head.headers, "accept");
  if (accept == nullptr || !accept_allows(*accept, kJson) ||
      !accept_allows(*accept, kEventStream)) {
    co_await send_error(req, 406, kServerError,
                        "Not Acceptable: Accept must list application/json and text/event-stream");
    co_return;
  }
  const std::string* content_type = http::find_header(head.headers, "content-type");
  if (content_type == nullptr || !iequals(media_essence(*content_type), kJson)) {
    co_await send_error(req, 415, kServerError,
                        "Unsupported Media Type: Content-Type must be application/json");
    co_return;
  }
  std::string body;
  for (;;) {
    Result<std::string> chunk = co_await req.read();
    if (!chunk.ok()) co_return;  // the client went away
    if (chunk->empty()) break;
    if (body.size() + chunk->size() > options_.max_body_bytes) {
      co_await send_error(req, 413, kServerError, "Payload Too Large");
      co_return;
    }
    body += *chunk;
  }
  ParseLimits limits = server_.options().limits;
  limits.max_bytes = std::max(limits.max_bytes, options_.max_body_bytes);
  Payload payload = parse_payload(body, limits);
  if (!payload.batch && payload.messages[0].kind == MessageKind::kInvalid) {
    std::string error = serialize(payload.messages[0]);
    Status sent = co_await http::respond(req, 400, kJson, error);
    (void)sent;
    co_return;
  }
  const Message& first = payload.messages[0];
  const bool initialize = !payload.batch && first.is_request() && first.method == kInitialize;
  const std::string* session_header = http::find_header(head.headers, kSessionHeader);

  std::shared_ptr<HttpSession> s;
  bool created = false;
  if (initialize && session_header == nullptr) {
    if (sessions_.size() >= options_.max_sessions) {
      co_await send_error(req, 503, kServerError, "Service Unavailable: too many sessions");
      co_return;
    }
    s = std::make_shared<HttpSession>(executor_, options_.max_pending_notifications);
    s->id = crypto::random_token(crypto::system_random(), 24);
    s->principal = principal;
    s->session = server_.open_session(executor_, *s, s->id);
    sessions_[s->id] = s;
    created = true;
  } else {
    s = co_await find_session(req, principal);
    if (!s) co_return;
  }
  if (const std::string* version = http::find_header(head.headers, kVersionHeader)) {
    if (!is_supported_protocol_version(*version)) {
      if (created) close_session(s->id);
      co_await send_error(req, 400, kServerError,
                          "Bad Request: Unsupported protocol version: " + *version);
      co_return;
    }
  }
  if (payload.batch && !s->session->batches_allowed()) {
    std::string version = s->session->protocol_version();
    co_await send_error(req, 400, kInvalidRequest,
                        "JSON-RPC batches are not supported by protocol version " + version);
    co_return;
  }
  s->last_active = now();

  bool needs_reply = false;
  bool wants_stream = false;
  for (const Message& m : payload.messages) {
    needs_reply = needs_reply || m.is_request() || m.kind == MessageKind::kInvalid;
    wants_stream = wants_stream || (m.is_request() && has_progress_token(m));
  }
  if (!needs_reply) {
    for (const Message& m : payload.messages) {
      if (m.is_notification()) s->session->handle_notification(m);
    }
    Status sent = co_await req.send_headers(202, {}, true);
    (void)sent;
    co_return;
  }

  ++s->busy;
  TransportContext transport;
  transport.http = &head;
  transport.principal = principal;
  PostChannel channel(req, header_list(kSessionHeader, s->id), executor_);
  if (wants_stream) {
    Status started = co_await channel.start_sse();
    (void)started;  // a failure shows again on the first send
  }
  std::vector<Message> replies;
  for (Message& m : payload.messages) {
    if (m.kind == MessageKind::kInvalid) {
      replies.push_back(std::move(m));
    } else if (m.is_notification()) {
      s->session->handle_notification(m);
    } else if (m.is_request()) {
      if (payload.batch && m.method == kInitialize) {
        replies.push_back(Message::error_response(
            m.id, rpc_error(kInvalidRequest, "initialize must not be part of a batch")));
        continue;
      }
      std::optional<Message> reply =
          co_await s->session->handle_request(std::move(m), channel, transport);
      if (reply) replies.push_back(std::move(*reply));
    }
  }
  // A failed initialize leaves no session behind.
  if (created && !s->session->initialized()) close_session(s->id);
  co_await channel.finish(replies, payload.batch);
  --s->busy;
  s->last_active = now();
}

asio::awaitable<void> HttpServerTransport::handle_get(http::ServerRequest& req,
                                                      const std::string& principal) {
  const http::RequestHead& head = req.head();
  const std::string* accept = http::find_header(head.headers, "accept");
  if (accept == nullptr || !accept_allows(*accept, kEventStream)) {
    co_await send_error(req, 406, kServerError,
                        "Not Acceptable: Accept must list text/event-stream");
    co_return;
  }
  if (!options_.enable_get_stream) {
    std::string allow = options_.enable_delete ? "POST, DELETE" : "POST";
    co_await send_error(req, 405, kServerError, "Method not allowed: no SSE stream here",
                        header_list("allow", allow));
    co_return;
  }
  std::shared_ptr<HttpSession> s = co_await find_session(req, principal);
  if (!s) co_return;
  if (const std::string* version = http::find_header(head.headers, kVersionHeader)) {
    if (!is_supported_protocol_version(*version)) {
      co_await send_error(req, 400, kServerError,
                          "Bad Request: Unsupported protocol version: " + *version);
      co_return;
    }
  }
  if (s->get_open) {
    co_await send_error(req, 409, kServerError,
                        "Conflict: only one SSE stream is allowed per session");
    co_return;
  }
  auto sse = co_await http::SseWriter::start(req, header_list(kSessionHeader, s->id));
  if (!sse.ok()) co_return;
  s->get_open = true;
  ++s->busy;
  s->last_active = now();
  for (;;) {
    bool failed = false;
    while (!s->pending.empty() && !failed) {
      Message m = std::move(s->pending.front());
      s->pending.pop_front();
      std::string data = serialize(m);
      Status sent = co_await sse->send("message", data);
      failed = !sent.ok();
    }
    if (failed || s->closed) break;
    Status waited;
    if (options_.sse_keepalive.count() > 0) {
      waited = co_await s->signal.wait_until(net::after(options_.sse_keepalive));
    } else {
      waited = co_await s->signal.wait();
    }
    if (waited.code() == Code::kDeadlineExceeded) {
      Status sent = co_await sse->comment("keepalive");
      if (!sent.ok()) break;
      continue;
    }
    if (!waited.ok()) break;  // cancelled: the client went away
  }
  if (s->closed) {
    Status closed = co_await sse->close();
    (void)closed;
  }
  s->get_open = false;
  --s->busy;
  s->last_active = now();
}

asio::awaitable<void> HttpServerTransport::handle_delete(http::ServerRequest& req,
                                                         const std::string& principal) {
  if (!options_.enable_delete) {
    std::string allow = options_.enable_get_stream ? "POST, GET" : "POST";
    co_await send_error(req, 405, kServerError, "Method not allowed: sessions cannot be deleted",
                        header_list("allow", allow));
    co_return;
  }
  std::shared_ptr<HttpSession> s = co_await find_session(req, principal);
  if (!s) co_return;
  close_session(s->id);
  Status sent = co_await req.send_headers(200, {}, true);
  (void)sent;
}

}  // namespace cb::mcp
