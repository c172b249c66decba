#include "http/server.h"

#include "base/log.h"

#include <fmt/format.h>

#include <algorithm>

namespace cb::http {

namespace {

constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

class H2ServerRequest final : public ServerRequest {
 public:
  explicit H2ServerRequest(std::shared_ptr<H2Stream> s) : s_(std::move(s)) {}
  const RequestHead& head() const override { return s_->request(); }
  asio::awaitable<Result<std::string>> read() override { return s_->read(); }
  asio::awaitable<Status> send_headers(int status, const Headers& headers,
                                       bool end_stream) override {
    Status st = s_->send_response(status, headers, end_stream);
    if (st.ok()) sent_ = true;
    co_return st;
  }
  asio::awaitable<Status> write(std::string_view data, bool end_stream) override {
    return s_->write(data, end_stream);
  }
  asio::awaitable<Status> finish(const Headers& trailers) override {
    co_return s_->send_trailers(trailers);
  }
  void reset() override { s_->reset(NGHTTP2_CANCEL); }
  bool headers_sent() const override { return sent_; }
  bool is_http2() const override { return true; }
  std::string peer() const override { return s_->connection().transport().peer(); }
  H2Stream* h2_stream() override { return s_.get(); }

 private:
  std::shared_ptr<H2Stream> s_;
  bool sent_ = false;
};

}  // namespace

asio::awaitable<Status> respond(ServerRequest& req, int status, std::string_view content_type,
                                std::string_view body, Headers extra) {
  Headers h;
  h.push_back(Header{std::string("content-type"), std::string(content_type)});
  h.push_back(Header{std::string("content-length"), std::to_string(body.size())});
  for (auto& e : extra) h.push_back(std::move(e));
  bool head_only = req.head().method == "HEAD" || body.empty();
  CO_RETURN_IF_ERROR(co_await req.send_headers(status, h, head_only));
  if (head_only) co_return ok_status();
  co_return co_await req.write(body, true);
}

void Router::handle(std::string method, std::string path, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), false, std::move(handler)});
}

void Router::handle_prefix(std::string method, std::string prefix, Handler handler) {
  routes_.push_back({std::move(method), std::move(prefix), true, std::move(handler)});
}

asio::awaitable<void> Router::dispatch(ServerRequest& req) const {
  std::string_view path = req.head().path_only();
  const Route* best = nullptr;
  std::vector<std::string> allowed;
  for (const auto& r : routes_) {
    bool match = r.prefix ? path.substr(0, r.path.size()) == r.path : path == r.path;
    if (!match) continue;
    if (!r.method.empty() && r.method != req.head().method) {
      allowed.push_back(r.method);
      continue;
    }
    // Exact beats prefix; a longer prefix beats a shorter one.
    if (best == nullptr || (best->prefix && !r.prefix) ||
        (best->prefix && r.prefix && r.path.size() > best->path.size()))
      best = &r;
  }
  if (best != nullptr) {
    co_await best->handler(req);
    co_return;
  }
  if (!allowed.empty()) {
    std::string allow;
    for (const auto& m : allowed) {
      if (!allow.empty()) allow += ", ";
      allow += m;
    }
    // gcc 12 rejects brace-initialized aggregates holding string literals inside coroutines
    // ("array used as initializer"), so fields are built with explicit std::string.
    Headers extra;
    extra.push_back(Header{std::string("allow"), allow});
    (void)co_await respond(req, 405, "text/plain; charset=utf-8", "method not allowed\n",
                           std::move(extra));
    co_return;
  }
  if (fallback_) {
    co_await fallback_(req);
    co_return;
  }
  (void)co_await respond(req, 404, "text/plain; charset=utf-8", "not found\n");
}

Server::Server(net::Executor executor, const Router& router, ServerOptions options)
    : executor_(std::move(executor)),
      router_(router),
      options_(std::move(options)),
      alive_(std::make_shared<bool>(true)) {}

Server::~Server() {
  *alive_ = false;
  for (auto& l : tcp_) l.close();
  for (auto& l : unix_) l.close();
  for (const auto& c : h2_conns_) c->close();
  for (auto* s : h1_streams_) s->close();
}

Status Server::listen_tcp(std::string_view host, uint16_t port) {
  ASSIGN_OR_RETURN(auto l, net::TcpListener::listen(executor_, host, port));
  tcp_.push_back(std::move(l));
  return ok_status();
}

Status Server::listen_unix(const std::string& path) {
  ASSIGN_OR_RETURN(auto l, net::UnixListener::listen(executor_, path));
  unix_.push_back(std::move(l));
  return ok_status();
}

uint16_t Server::port() const { return tcp_.empty() ? 0 : tcp_.front().port(); }

void Server::start() {
  for (size_t i = 0; i < tcp_.size(); ++i) asio::co_spawn(executor_, accept_tcp(i), asio::detached);
  for (size_t i = 0; i < unix_.size(); ++i)
    asio::co_spawn(executor_, accept_unix(i), asio::detached);
}

asio::awaitable<void> Server::accept_tcp(size_t index) {
  auto alive = alive_;
  for (;;) {
    auto socket = co_await tcp_[index].accept();
    if (!*alive || stopping_) co_return;
    if (!socket.ok()) {
      if (socket.status().code() == Code::kCancelled) co_return;
      log::warn("accept failed", {{"error", socket.status().to_string()}});
      continue;
    }
    if (options_.tls) {
      auto tls = options_.tls;
      auto timeout = options_.handshake_timeout;
      asio::co_spawn(
          executor_,
          [this, alive, tls, timeout, s = std::move(*socket)]() mutable -> asio::awaitable<void> {
            auto stream = co_await net::tls_accept(tls, std::move(s), net::after(timeout));
            if (!stream.ok()) {
              log::debug("tls handshake failed", {{"error", stream.status().to_string()}});
              co_return;
            }
            if (!*alive) co_return;
            co_await serve(std::move(*stream), true);
          },
          asio::detached);
    } else {
      asio::co_spawn(executor_, serve(net::make_stream(std::move(*socket)), false), asio::detached);
    }
  }
}

asio::awaitable<void> Server::accept_unix(size_t index) {
  auto alive = alive_;
  for (;;) {
    auto socket = co_await unix_[index].accept();
    if (!*alive || stopping_) co_return;
    if (!socket.ok()) {
      if (socket.status().code() == Code::kCancelled) co_return;
      log::warn("accept failed", {{"error", socket.status().to_string()}});
      continue;
    }
    asio::co_spawn(executor_, serve(net::make_stream(std::move(*socket)), false), asio::detached);
  }
}

asio::awaitable<void> Server::serve(std::unique_ptr<net::Stream> stream, bool tls) {
  if (tls) {
    if (stream->alpn() == "h2")
      co_await serve_h2(std::move(stream), {});
    else if (options_.allow_http1)
      co_await serve_h1(std::move(stream), {});
    co_return;
  }
  // Plaintext: the HTTP/2 client preface or else HTTP/1.1. Read until the bytes seen either
  // diverge from the preface or complete it.
  std::string initial;
  std::vector<char> buf(4096);
  while (initial.size() < kH2Preface.size() && kH2Preface.substr(0, initial.size()) == initial) {
    auto n = co_await net::with_deadline(stream->read_some(buf),
                                         net::after(options_.handshake_timeout), "preface");
    if (!n.ok()) co_return;
    initial.append(buf.data(), *n);
  }
  if (initial.substr(0, kH2Preface.size()) == kH2Preface) {
    co_await serve_h2(std::move(stream), std::move(initial));
  } else if (options_.allow_http1) {
    co_await serve_h1(std::move(stream), std::move(initial));
  }
}

asio::awaitable<void> Server::serve_h2(std::unique_ptr<net::Stream> stream, std::string initial) {
  auto alive = alive_;
  const Router* router = &router_;
  auto conn = H2Connection::make(
      std::move(stream), H2Connection::Side::kServer, options_.h2,
      [router](std::shared_ptr<H2Stream> s) -> asio::awaitable<void> {
        H2ServerRequest req(std::move(s));
        co_await router->dispatch(req);
      },
      std::move(initial));
  h2_conns_.insert(conn);
  if (stopping_) conn->shutdown();
  Status st = co_await conn->run();
  if (!st.ok()) log::debug("http2 connection ended", {{"error", st.to_string()}});
  if (*alive) h2_conns_.erase(conn);
}

asio::awaitable<void> Server::shutdown(net::Deadline deadline) {
  stopping_ = true;
  for (auto& l : tcp_) l.close();
  for (auto& l : unix_) l.close();
  for (const auto& c : h2_conns_) c->shutdown();
  net::Timer t(executor_);
  while (connection_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait();
  }
  for (const auto& c : h2_conns_) c->close();
  for (auto* s : h1_streams_) s->close();
}

asio::awaitable<Result<std::shared_ptr<H2Connection>>> dial_h2(net::Executor ex,
                                                               DialOptions options,
                                                               net::Deadline deadline) {
  std::unique_ptr<net::Stream> stream;
  if (!options.unix_path.empty()) {
    CO_ASSIGN_OR_RETURN(auto s, co_await net::dial_unix(ex, options.unix_path, deadline));
    stream = net::make_stream(std::move(s));
  } else {
    CO_ASSIGN_OR_RETURN(auto s, co_await net::dial_tcp(ex, options.host, options.port, deadline));
    if (options.tls) {
      std::string name = options.server_name.empty() ? options.host : options.server_name;
      CO_ASSIGN_OR_RETURN(stream,
                          co_await net::tls_connect(options.tls, std::move(s), name, deadline));
      if (stream->alpn() != "h2")
        co_return failed_precondition(
            fmt::format("{}:{} did not negotiate HTTP/2 over TLS (ALPN {:?})", options.host,
                        options.port, stream->alpn()));
    } else {
      stream = net::make_stream(std::move(s));
    }
  }
  auto conn = H2Connection::make(std::move(stream), H2Connection::Side::kClient, options.h2);
  conn->start();
  co_return conn;
}

}  // namespace cb::http
