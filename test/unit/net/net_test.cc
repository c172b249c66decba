#include "net/blocking.h"
#include "net/signal.h"
#include "net/stream.h"
#include "net/tls.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cb::net {
namespace {

using test::run_sync;
namespace fs = std::filesystem;

// A throwaway CA-less self-signed certificate for localhost/127.0.0.1 in a temp dir.
struct TempCert {
  fs::path dir;
  std::string cert, key;
  TempCert() {
    char tmpl[] = "/tmp/cb-net-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    cert = (dir / "cert.pem").string();
    key = (dir / "key.pem").string();
    std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
        key + " -out " + cert + " >/dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  ~TempCert() { fs::remove_all(dir); }
};

TEST_CASE("TcpListener: port 0 picks a port and a dialer reaches it", "[net][unit]") {
  asio::io_context io;
  auto l = TcpListener::listen(io.get_executor(), "127.0.0.1", 0);
  REQUIRE(l.ok());
  CHECK(l->port() != 0);
  CHECK(l->is_loopback());
  std::string got;
  run_sync(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    using namespace asio::experimental::awaitable_operators;
    // Awaitables are lazy: accept and dial must run together.
    auto [accepted, client] = co_await (
        l->accept() && dial_tcp(ex, "127.0.0.1", l->port(), after(std::chrono::seconds(2))));
    REQUIRE(accepted.ok());
    REQUIRE(client.ok());
    auto a = make_stream(std::move(*accepted));
    auto c = make_stream(std::move(*client));
    Status w = co_await c->write(std::string_view("ping"));
    REQUIRE(w.ok());
    char buf[16];
    auto n = co_await a->read_some(buf);
    REQUIRE(n.ok());
    got.assign(buf, *n);
    c->close();
    auto eof = co_await a->read_some(buf);
    CHECK(eof.status().code() == Code::kUnavailable);
  }());
  CHECK(got == "ping");
}

TEST_CASE("TcpListener: a host that is not an IP literal is refused by name", "[net][unit]") {
  asio::io_context io;
  auto l = TcpListener::listen(io.get_executor(), "example.invalid", 0);
  REQUIRE_FALSE(l.ok());
  CHECK(l.status().code() == Code::kInvalidArgument);
}

TEST_CASE("dial_tcp: a closed port is kUnavailable", "[net][unit]") {
  asio::io_context io;
  uint16_t port;
  {
    auto l = TcpListener::listen(io.get_executor(), "127.0.0.1", 0);
    REQUIRE(l.ok());
    port = l->port();
  }
  Status st;
  run_sync(io, [&]() -> asio::awaitable<void> {
    auto r =
        co_await dial_tcp(io.get_executor(), "127.0.0.1", port, after(std::chrono::seconds(2)));
    st = r.status();
  }());
  CHECK(st.code() == Code::kUnavailable);
}

TEST_CASE("with_deadline: a read that never completes ends as kDeadlineExceeded", "[net][unit]") {
  asio::io_context io;
  auto l = TcpListener::listen(io.get_executor(), "127.0.0.1", 0);
  REQUIRE(l.ok());
  Status st;
  run_sync(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    using namespace asio::experimental::awaitable_operators;
    auto [accepted, client] = co_await (
        l->accept() && dial_tcp(ex, "127.0.0.1", l->port(), after(std::chrono::seconds(2))));
    REQUIRE(accepted.ok());
    REQUIRE(client.ok());
    auto a = make_stream(std::move(*accepted));
    char buf[4];
    auto r =
        co_await with_deadline(a->read_some(buf), after(std::chrono::milliseconds(50)), "read");
    st = r.status();
  }());
  CHECK(st.code() == Code::kDeadlineExceeded);
}

TEST_CASE("Signal: wakes every waiter and honours wait_until deadlines", "[net][unit]") {
  asio::io_context io;
  Signal signal(io.get_executor());
  int woke = 0;
  bool ready = false;
  auto waiter = [&]() -> asio::awaitable<void> {
    while (!ready) {
      Status st = co_await signal.wait();
      REQUIRE(st.ok());
    }
    ++woke;
  };
  asio::co_spawn(io, waiter(), asio::detached);
  asio::co_spawn(io, waiter(), asio::detached);
  Status timed;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        timed = co_await signal.wait_until(after(std::chrono::milliseconds(20)));
        ready = true;
        signal.notify();
      },
      asio::detached);
  io.run();
  CHECK(woke == 2);
  CHECK(timed.code() == Code::kDeadlineExceeded);
}

TEST_CASE("TLS: ALPN picks the server's first protocol the client offers and the name is verified",
          "[net][unit]") {
  TempCert cert;
  auto server_ctx = TlsContext::server({cert.cert, cert.key, {"h2", "http/1.1"}});
  REQUIRE(server_ctx.ok());

  auto handshake = [&](std::vector<std::string> client_alpn, std::string name,
                       std::string ca) -> std::pair<Status, std::string> {
    asio::io_context io;
    auto l = TcpListener::listen(io.get_executor(), "127.0.0.1", 0);
    REQUIRE(l.ok());
    auto client_ctx = TlsContext::client({ca, true, client_alpn});
    REQUIRE(client_ctx.ok());
    std::pair<Status, std::string> out;
    run_sync(io, [&]() -> asio::awaitable<void> {
      auto ex = co_await asio::this_coro::executor;
      auto server_side = [&]() -> asio::awaitable<void> {
        auto s = co_await l->accept();
        if (!s.ok()) co_return;
        auto tls = co_await tls_accept(*server_ctx, std::move(*s), after(std::chrono::seconds(2)));
        if (tls.ok()) {
          char buf[1];
          (void)co_await (*tls)->read_some(buf);  // until the client closes
        }
      };
      asio::co_spawn(ex, server_side(), asio::detached);
      auto sock = co_await dial_tcp(ex, "127.0.0.1", l->port(), after(std::chrono::seconds(2)));
      REQUIRE(sock.ok());
      auto tls =
          co_await tls_connect(*client_ctx, std::move(*sock), name, after(std::chrono::seconds(2)));
      out.first = tls.status();
      if (tls.ok()) {
        out.second = (*tls)->alpn();
        CHECK((*tls)->is_tls());
        (*tls)->close();
      }
    }());
    return out;
  };

  auto h2 = handshake({"h2", "http/1.1"}, "localhost", cert.cert);
  REQUIRE(h2.first.ok());
  CHECK(h2.second == "h2");
  auto h1 = handshake({"http/1.1"}, "127.0.0.1", cert.cert);
  REQUIRE(h1.first.ok());
  CHECK(h1.second == "http/1.1");
  auto wrong_name = handshake({"h2"}, "not-localhost.test", cert.cert);
  CHECK(wrong_name.first.code() == Code::kUnavailable);
  TempCert other;
  auto wrong_ca = handshake({"h2"}, "localhost", other.cert);
  CHECK(wrong_ca.first.code() == Code::kUnavailable);
}

TEST_CASE("TlsContext: missing or mismatched files name the file", "[net][unit]") {
  TempCert a, b;
  auto missing = TlsContext::server({"/nonexistent/cert.pem", a.key, {"h2"}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("/nonexistent/cert.pem") != std::string_view::npos);
  auto mismatch = TlsContext::server({a.cert, b.key, {"h2"}});
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace cb::net

namespace cb::net {
namespace {

TEST_CASE("run_blocking(pool): many jobs at once all finish, on the pool's threads only",
          "[net][unit]") {
  asio::thread_pool pool(2);
  asio::io_context io;
  const std::thread::id loop_thread = std::this_thread::get_id();
  std::mutex mu;
  std::set<std::thread::id> seen;
  std::vector<int> results(50, -1);
  for (int i = 0; i < 50; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          auto job = [&, i]() -> Result<int> {
            std::lock_guard lock(mu);
            seen.insert(std::this_thread::get_id());
            return i * 2;
          };
          Result<int> r = co_await run_blocking(pool, job);
          // Resumed on the loop's thread, with the job's result.
          const bool on_loop = std::this_thread::get_id() == loop_thread;
          results[size_t(i)] = !on_loop ? -3 : r.ok() ? *r : -2;
        },
        asio::detached);
  }
  io.run();
  for (int i = 0; i < 50; ++i) CHECK(results[size_t(i)] == i * 2);
  CHECK(seen.size() <= 2);
  CHECK(seen.count(loop_thread) == 0);
}

TEST_CASE("run_blocking: an exception escaping the job becomes kInternal, in both forms",
          "[net][unit]") {
  asio::thread_pool pool(1);
  auto throws = []() -> Status { throw std::runtime_error("disk on fire"); };
  Status on_pool = test::run_sync(run_blocking(pool, throws));
  CHECK(on_pool.code() == Code::kInternal);
  CHECK(std::string(on_pool.message()).find("disk on fire") != std::string::npos);
  Status on_thread = test::run_sync(run_blocking(throws));
  CHECK(on_thread.code() == Code::kInternal);
  CHECK(std::string(on_thread.message()).find("disk on fire") != std::string::npos);
}

TEST_CASE("run_blocking(pool): join() runs the jobs still queued, as the api's door relies on",
          "[net][unit]") {
  std::atomic<int> ran{0};
  std::atomic<bool> release{false};
  asio::thread_pool pool(1);
  // The first job holds the only thread, so the others are still queued when join() starts.
  asio::post(pool, [&] {
    while (!release.load()) std::this_thread::yield();
    ++ran;
  });
  for (int i = 0; i < 10; ++i) asio::post(pool, [&] { ++ran; });
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  pool.join();
  releaser.join();
  CHECK(ran.load() == 11);
}

}  // namespace
}  // namespace cb::net
