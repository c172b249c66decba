#include "net/stream.h"

#include "net/errors.h"

#include <fmt/format.h>

#include <unistd.h>

namespace cb::net {

namespace {

template <typename Socket>
class SocketStream final : public Stream {
 public:
  SocketStream(Socket&& s, std::string peer) : socket_(std::move(s)), peer_(std::move(peer)) {}

  asio::awaitable<Result<size_t>> read_some(std::span<char> buffer) override {
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buffer.data(), buffer.size()));
    if (ec) co_return to_status(ec, "read");
    co_return n;
  }
  asio::awaitable<Status> write(std::span<const char> data) override {
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(data.data(), data.size()));
    co_return to_status(ec, "write");
  }
  asio::awaitable<Status> shutdown_write() override {
    std::error_code ec;
    socket_.shutdown(asio::socket_base::shutdown_send, ec);
    co_return to_status(ec, "shutdown");
  }
  void close() override {
    std::error_code ec;
    socket_.close(ec);
  }
  Executor executor() override { return socket_.get_executor(); }
  std::string peer() const override { return peer_; }

 private:
  Socket socket_;
  std::string peer_;
};

}  // namespace

std::unique_ptr<Stream> make_stream(TcpSocket&& socket) {
  std::error_code ec;
  auto ep = socket.remote_endpoint(ec);
  std::string peer = ec ? "tcp:?" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
  socket.set_option(asio::ip::tcp::no_delay(true), ec);
  return std::make_unique<SocketStream<TcpSocket>>(std::move(socket), std::move(peer));
}

std::unique_ptr<Stream> make_stream(UnixSocket&& socket) {
  std::error_code ec;
  auto ep = socket.local_endpoint(ec);
  std::string peer = "unix:" + (ec ? std::string("?") : ep.path());
  return std::make_unique<SocketStream<UnixSocket>>(std::move(socket), std::move(peer));
}

Result<TcpListener> TcpListener::listen(const Executor& ex, std::string_view host, uint16_t port) {
  std::error_code ec;
  std::string h = host == "localhost" ? "127.0.0.1" : std::string(host);
  if (!h.empty() && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  auto addr = asio::ip::make_address(h, ec);
  if (ec) return invalid_argument(fmt::format("listen address {:?} is not an IP address", host));
  TcpAcceptor acceptor(ex);
  asio::ip::tcp::endpoint ep(addr, port);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable(fmt::format("listen on {}:{}: {}", host, port, ec.message()));
  return TcpListener(std::move(acceptor));
}

uint16_t TcpListener::port() const {
  std::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

std::string TcpListener::address() const {
  std::error_code ec;
  auto ep = acceptor_.local_endpoint(ec);
  if (ep.address().is_v6()) return fmt::format("[{}]:{}", ep.address().to_string(), ep.port());
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

bool TcpListener::is_loopback() const {
  std::error_code ec;
  return acceptor_.local_endpoint(ec).address().is_loopback();
}

asio::awaitable<Result<TcpSocket>> TcpListener::accept() {
  auto [ec, socket] = co_await acceptor_.async_accept();
  if (ec) co_return to_status(ec, "accept");
  co_return std::move(socket);
}

void TcpListener::close() {
  std::error_code ec;
  acceptor_.close(ec);
}

Result<UnixListener> UnixListener::listen(const Executor& ex, const std::string& path) {
  ::unlink(path.c_str());
  std::error_code ec;
  UnixAcceptor acceptor(ex);
  asio::local::stream_protocol::endpoint ep(path);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable(fmt::format("listen on unix:{}: {}", path, ec.message()));
  return UnixListener(std::move(acceptor), path);
}

asio::awaitable<Result<UnixSocket>> UnixListener::accept() {
  auto [ec, socket] = co_await acceptor_.async_accept();
  if (ec) co_return to_status(ec, "accept");
  co_return std::move(socket);
}

void UnixListener::close() {
  std::error_code ec;
  acceptor_.close(ec);
}

namespace {
asio::awaitable<Result<TcpSocket>> dial_tcp_unbounded(Executor ex, std::string host,
                                                      uint16_t port) {
  using Resolver = Token::as_default_on_t<asio::ip::tcp::resolver>;
  std::string h = host;
  if (!h.empty() && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::error_code ec;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  auto addr = asio::ip::make_address(h, ec);
  if (!ec) {
    endpoints.emplace_back(addr, port);
  } else {
    Resolver resolver(ex);
    auto [rec, results] = co_await resolver.async_resolve(h, std::to_string(port));
    if (rec) co_return invalid_argument(fmt::format("resolve {}: {}", host, rec.message()));
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  Status last = unavailable("no address");
  for (const auto& ep : endpoints) {
    TcpSocket socket(ex);
    auto [cec] = co_await socket.async_connect(ep);
    if (!cec) {
      socket.set_option(asio::ip::tcp::no_delay(true), ec);
      co_return std::move(socket);
    }
    last = to_status(cec, fmt::format("connect {}:{}", host, port));
  }
  co_return last;
}

asio::awaitable<Result<UnixSocket>> dial_unix_unbounded(Executor ex, std::string path) {
  UnixSocket socket(ex);
  auto [ec] = co_await socket.async_connect(asio::local::stream_protocol::endpoint(path));
  if (ec) co_return to_status(ec, fmt::format("connect unix:{}", path));
  co_return std::move(socket);
}
}  // namespace

asio::awaitable<Result<TcpSocket>> dial_tcp(Executor ex, std::string host, uint16_t port,
                                            Deadline deadline) {
  std::string what = fmt::format("connect {}:{}", host, port);
  co_return co_await with_deadline(dial_tcp_unbounded(ex, std::move(host), port), deadline, what);
}

asio::awaitable<Result<UnixSocket>> dial_unix(Executor ex, std::string path, Deadline deadline) {
  std::string what = "connect unix:" + path;
  co_return co_await with_deadline(dial_unix_unbounded(ex, std::move(path)), deadline, what);
}

}  // namespace cb::net
