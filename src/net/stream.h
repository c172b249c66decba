#pragma once
// Stream is a connected, ordered byte stream (TCP, unix socket, or TLS over TCP) for
// coroutines on one executor. HTTP/1.1 and HTTP/2 connections pump bytes through it.
//
// At most one read_some() and one write() may be outstanding at a time (the same rule as an
// Asio socket); that is how the HTTP/2 reader and writer share one Stream. close() cancels
// both and may be called from the stream's executor at any time, repeatedly.
//
// read_some() and write() are unbounded (documented exception to the deadline rule): the
// connection above owns idle timeouts and keepalive and calls close() to end them.
//
// Affinity: the executor returned by executor(). Not copyable; owned by unique_ptr.

#include "base/result.h"
#include "net/asio.h"

#include <memory>
#include <span>
#include <string>

namespace cb::net {

class Stream {
 public:
  virtual ~Stream() = default;

  // Reads at least one byte. Errors: kUnavailable (peer closed: eof, reset), kCancelled
  // (close() or the caller's cancellation), kUnknown.
  virtual asio::awaitable<Result<size_t>> read_some(std::span<char> buffer) = 0;
  // Writes every byte of |data|. Errors as read_some.
  virtual asio::awaitable<Status> write(std::span<const char> data) = 0;
  // Half-close for writing (TLS: close_notify; TCP/unix: shutdown(SHUT_WR)).
  virtual asio::awaitable<Status> shutdown_write() = 0;
  virtual void close() = 0;

  virtual Executor executor() = 0;
  // The protocol TLS negotiated with ALPN ("h2", "http/1.1"), or "" for plaintext or none.
  virtual std::string alpn() const { return {}; }
  virtual bool is_tls() const { return false; }
  // "127.0.0.1:5123", "unix:/run/x.sock", for logs.
  virtual std::string peer() const = 0;
};

std::unique_ptr<Stream> make_stream(TcpSocket&& socket);
std::unique_ptr<Stream> make_stream(UnixSocket&& socket);

// Listens on |host|:|port| (port 0 picks a free one) with SO_REUSEADDR.
// Errors: kInvalidArgument (host is not an IP literal or "localhost"), kUnavailable (bind).
class TcpListener {
 public:
  static Result<TcpListener> listen(const Executor& ex, std::string_view host, uint16_t port);
  TcpListener(TcpListener&&) = default;
  TcpListener& operator=(TcpListener&&) = default;

  uint16_t port() const;
  std::string address() const;  // "127.0.0.1:7443"
  bool is_loopback() const;
  // Errors: kCancelled after close(); kUnavailable/kUnknown for accept failures.
  asio::awaitable<Result<TcpSocket>> accept();
  void close();

 private:
  explicit TcpListener(TcpAcceptor&& a) : acceptor_(std::move(a)) {}
  TcpAcceptor acceptor_;
};

// Listens on a unix socket path; a stale socket file at |path| is replaced.
class UnixListener {
 public:
  static Result<UnixListener> listen(const Executor& ex, const std::string& path);
  UnixListener(UnixListener&&) = default;
  UnixListener& operator=(UnixListener&&) = default;
  const std::string& path() const { return path_; }
  asio::awaitable<Result<UnixSocket>> accept();
  void close();

 private:
  UnixListener(UnixAcceptor&& a, std::string path)
      : acceptor_(std::move(a)), path_(std::move(path)) {}
  UnixAcceptor acceptor_;
  std::string path_;
};

// Connects to |host|:|port| (IP literal or a name resolved with getaddrinfo), trying each
// address until |deadline|. Sets TCP_NODELAY. Errors: kUnavailable, kDeadlineExceeded,
// kInvalidArgument (unresolvable name).
asio::awaitable<Result<TcpSocket>> dial_tcp(Executor ex, std::string host, uint16_t port,
                                            Deadline deadline);
asio::awaitable<Result<UnixSocket>> dial_unix(Executor ex, std::string path, Deadline deadline);

// Runs |op| until |deadline|; when the deadline comes first the op is cancelled and the
// result is kDeadlineExceeded naming |what|.
template <typename T>
asio::awaitable<Result<T>> with_deadline(asio::awaitable<Result<T>> op, Deadline deadline,
                                         std::string_view what) {
  if (deadline == Deadline::max()) co_return co_await std::move(op);
  using namespace asio::experimental::awaitable_operators;
  Timer timer(co_await asio::this_coro::executor, deadline);
  auto winner = co_await (std::move(op) || timer.async_wait());
  if (winner.index() == 1) co_return deadline_exceeded(std::string(what) + ": deadline exceeded");
  co_return std::move(std::get<0>(winner));
}

}  // namespace cb::net
