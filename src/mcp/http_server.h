#pragma once
// The Streamable HTTP transport, server side (MCP basic/transports, "Streamable HTTP"):
// one endpoint path on an http::Router, answering POST (client messages), GET (the stream of
// server messages not tied to a request) and DELETE (end of session), over HTTP/2 and
// HTTP/1.1 alike (http::Server serves both through one Router).
//
//   mcp::Server server(options, tools);
//   mcp::HttpServerTransport mcp_http(server, executor, {});
//   mcp_http.mount(router, "/mcp");
//   http::Server http_server(executor, router, {});     // router and mcp_http outlive it
//
// Per-request authentication (the control MCP): HttpServerOptions::authenticate runs for every
// HTTP request and returns the caller's principal; a session belongs to the principal that
// initialized it (another principal gets 404), and each RequestContext carries the principal
// and the request's headers.
//
// The exchange rules (status codes, JSON or SSE replies, sessions) are in README.md
// §Streamable HTTP.
//
// Affinity: the HTTP server's executor. Lifetime: the Server outlives the transport, and the
// transport outlives the http::Server using its routes (destroy it after shutdown()).

#include "base/clock.h"
#include "base/result.h"
#include "http/server.h"
#include "mcp/server.h"
#include "net/asio.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace cb::mcp {

struct HttpServerOptions {
  // A session with no request in progress and no GET stream open is closed when it has been
  // idle this long; its id then gets 404. Checked on every request and by
  // expire_idle_sessions().
  std::chrono::milliseconds session_idle_timeout = std::chrono::minutes(30);
  // Live sessions; an initialize beyond this (after expiring idle ones) gets 503.
  size_t max_sessions = 10000;
  // A POST body beyond this gets 413.
  size_t max_body_bytes = 4u << 20;
  // GET opens the server-to-client SSE stream; when false GET gets 405.
  bool enable_get_stream = true;
  // DELETE ends the session; when false DELETE gets 405.
  bool enable_delete = true;
  // Notifications kept for a session while its GET stream is not open; older ones are dropped.
  size_t max_pending_notifications = 64;
  // A comment line on an open GET stream this often (0: never), so idle proxies and dead
  // peers are noticed.
  std::chrono::milliseconds sse_keepalive = std::chrono::seconds(30);
  // Called for a request with an Origin header; false answers 403 (DNS rebinding defence).
  // Empty: allow origins whose host is localhost, 127.0.0.1 or [::1], and the request's own
  // authority (same origin); refuse the rest, "null" included.
  std::function<bool(std::string_view origin, const http::RequestHead& head)> origin_allowed;
  // Called for every request before anything else but the Origin check; returns the caller's
  // principal (e.g. a user id). kUnauthenticated -> 401 (with "www-authenticate: Bearer"),
  // kPermissionDenied -> 403, kUnavailable -> 503, anything else -> 500. Empty: everyone is
  // principal "".
  std::function<asio::awaitable<Result<std::string>>(const http::RequestHead& head)> authenticate;
  // Time for idle expiry; nullptr = system_clock().
  const Clock* clock = nullptr;
};

class HttpServerTransport {
 public:
  HttpServerTransport(Server& server, net::Executor executor, HttpServerOptions options);
  // Closes every session.
  ~HttpServerTransport();
  HttpServerTransport(const HttpServerTransport&) = delete;
  HttpServerTransport& operator=(const HttpServerTransport&) = delete;

  // Routes every method on |path| to handle().
  void mount(http::Router& router, std::string path);
  // Handles one request to the MCP endpoint (for routers that match it themselves, e.g. a
  // prefix).
  asio::awaitable<void> handle(http::ServerRequest& req);

  // Closes idle sessions (see session_idle_timeout). Also runs on every request.
  void expire_idle_sessions();
  // Closes every session: requests in progress are cancelled and GET streams end, so an
  // http::Server shutdown does not wait for them. Later requests with their ids get 404.
  void close_all();
  size_t session_count() const { return sessions_.size(); }

 private:
  struct HttpSession;
  class PostChannel;

  asio::awaitable<void> handle_post(http::ServerRequest& req, const std::string& principal);
  asio::awaitable<void> handle_get(http::ServerRequest& req, const std::string& principal);
  asio::awaitable<void> handle_delete(http::ServerRequest& req, const std::string& principal);
  // The session named by the request's Mcp-Session-Id, after answering 400/404 when there is
  // none. nullptr when an error was sent.
  asio::awaitable<std::shared_ptr<HttpSession>> find_session(http::ServerRequest& req,
                                                             const std::string& principal);
  void close_session(const std::string& id);
  bool origin_allowed(std::string_view origin, const http::RequestHead& head) const;
  std::chrono::steady_clock::time_point now() const;

  Server& server_;
  net::Executor executor_;
  HttpServerOptions options_;
  // Co-owners of a session: this map (until it closes) and the handlers using it.
  std::map<std::string, std::shared_ptr<HttpSession>, std::less<>> sessions_;
};

// True when the Accept field value |accept| allows |media_type| ("application/json"): exact,
// "type/*" or "*/*", without q=0. Exposed for tests.
bool accept_allows(std::string_view accept, std::string_view media_type);

}  // namespace cb::mcp
