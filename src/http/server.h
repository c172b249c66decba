#pragma once
// The HTTP server: one Router for HTTP/2 (TLS with ALPN "h2", or h2c prior knowledge) and
// HTTP/1.1 (TLS with ALPN "http/1.1" or none, or plaintext), on TCP or unix listeners.
//
// A handler sees one exchange through ServerRequest whatever the protocol: the request head,
// the body as it arrives, and a response sent as headers, data and optional trailers. Over
// HTTP/1.1 a response without content-length is sent chunked, and trailers ride the last
// chunk. Handlers run as coroutines on the server's executor, each bound to a cancellation
// slot that fires when the peer resets the stream or drops the connection.
//
// Affinity: Server, Router and every ServerRequest live on the server's executor.

#include "base/result.h"
#include "http/h2_connection.h"
#include "http/headers.h"
#include "net/asio.h"
#include "net/stream.h"
#include "net/tls.h"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace cb::http {

class ServerRequest {
 public:
  virtual ~ServerRequest() = default;
  virtual const RequestHead& head() const = 0;
  // The next body chunk, "" at the end. Errors: kCancelled (peer reset), kUnavailable.
  virtual asio::awaitable<Result<std::string>> read() = 0;
  // Sends the status line and fields; |end_stream| for a response without body.
  // Errors: kFailedPrecondition (already sent), kUnavailable.
  virtual asio::awaitable<Status> send_headers(int status, const Headers& headers,
                                               bool end_stream) = 0;
  // Sends |data| as body bytes. |data| must stay alive until the returned awaitable
  // completes (HTTP/1.1 writes it from there without a copy).
  virtual asio::awaitable<Status> write(std::string_view data, bool end_stream) = 0;
  // Ends the response with trailing fields (HTTP/1.1: in the last chunk, which requires a
  // chunked response: kFailedPrecondition otherwise).
  virtual asio::awaitable<Status> finish(const Headers& trailers) = 0;
  // Aborts the exchange: RST_STREAM (HTTP/2) or closing the connection (HTTP/1.1).
  virtual void reset() = 0;
  virtual bool headers_sent() const = 0;
  virtual bool is_http2() const = 0;
  virtual std::string peer() const = 0;
  // The underlying HTTP/2 stream, or nullptr over HTTP/1.1. For protocols (gRPC, relays)
  // that need HTTP/2 semantics.
  virtual H2Stream* h2_stream() { return nullptr; }
  // Over HTTP/1.1, after the handler answered an upgrade request (101 Switching Protocols, or
  // 2xx to CONNECT): hands the raw connection to the caller, who owns it from then on, and
  // stores in |leftover| the bytes already read past the request (the new protocol's first
  // bytes). The server no longer serves or tracks the connection. Returns nullptr when there
  // is nothing to take: HTTP/2, no upgrade request, no such answer sent, or already taken.
  // REQUIRES: no read() of this request is outstanding.
  virtual std::unique_ptr<net::Stream> take_upgraded_stream(std::string* leftover) {
    return nullptr;
  }
};

// Sends a complete response with |body| and a content-type.
asio::awaitable<Status> respond(ServerRequest& req, int status, std::string_view content_type,
                                std::string_view body, Headers extra = {});

using Handler = std::function<asio::awaitable<void>(ServerRequest&)>;

// Routes by exact path or longest prefix, then by method. A path that matches with another
// method gets 405 with an allow header; no match gets the fallback (default: 404).
class Router {
 public:
  // |method| "" matches every method.
  void handle(std::string method, std::string path, Handler handler);
  // Matches every path starting with |prefix|.
  void handle_prefix(std::string method, std::string prefix, Handler handler);
  void set_fallback(Handler handler) { fallback_ = std::move(handler); }

  asio::awaitable<void> dispatch(ServerRequest& req) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix;
    Handler handler;
  };
  std::vector<Route> routes_;
  Handler fallback_;
};

struct ServerOptions {
  H2Options h2;
  std::shared_ptr<net::TlsContext> tls;  // null: plaintext
  std::chrono::milliseconds handshake_timeout{10000};
  // HTTP/1.1 connections idle this long between requests are closed.
  std::chrono::milliseconds http1_idle_timeout{60000};
  bool allow_http1 = true;
};

class Server {
 public:
  // |router| must outlive the server.
  Server(net::Executor executor, const Router& router, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds; port 0 picks one. Errors: kInvalidArgument, kUnavailable.
  Status listen_tcp(std::string_view host, uint16_t port);
  Status listen_unix(const std::string& path);
  // The port of the first TCP listener.
  uint16_t port() const;

  // Starts the accept loops (the top-level detached coroutines of house style H11).
  void start();
  // Stops accepting, sends GOAWAY on every connection, waits until they finish or
  // |deadline|, then closes what is left.
  asio::awaitable<void> shutdown(net::Deadline deadline);

  size_t connection_count() const { return h2_conns_.size() + h1_count_; }

 private:
  asio::awaitable<void> accept_tcp(size_t index);
  asio::awaitable<void> accept_unix(size_t index);
  asio::awaitable<void> serve(std::unique_ptr<net::Stream> stream, bool tls);
  asio::awaitable<void> serve_h2(std::unique_ptr<net::Stream> stream, std::string initial);
  asio::awaitable<void> serve_h1(std::unique_ptr<net::Stream> stream, std::string initial);

  net::Executor executor_;
  const Router& router_;
  ServerOptions options_;
  std::vector<net::TcpListener> tcp_;
  std::vector<net::UnixListener> unix_;
  std::set<std::shared_ptr<H2Connection>> h2_conns_;
  std::set<net::Stream*> h1_streams_;
  size_t h1_count_ = 0;
  bool stopping_ = false;
  std::shared_ptr<bool> alive_;
};

// Client side: dials |host|:|port| (or a unix socket when |unix_path| is set), does TLS when
// |tls| is set (ALPN must pick h2), and starts an HTTP/2 connection. Errors: kUnavailable,
// kDeadlineExceeded, kFailedPrecondition (TLS peer did not negotiate h2).
struct DialOptions {
  std::string host;
  uint16_t port = 0;
  std::string unix_path;
  std::shared_ptr<net::TlsContext> tls;
  std::string server_name;  // SNI and verification name; default |host|
  H2Options h2;
};
asio::awaitable<Result<std::shared_ptr<H2Connection>>> dial_h2(net::Executor ex,
                                                               DialOptions options,
                                                               net::Deadline deadline);

}  // namespace cb::http
