#include "mcp/client.h"

#include "base/log.h"
#include "http/server.h"
#include "mcp/http_server.h"
#include "support/run_sync.h"
#include "test_tools.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::mcp {
namespace {

using namespace std::chrono_literals;
using cb::test::run_sync;

// Our client against our server, over a real http::Server on 127.0.0.1:0.
struct ClientFixture {
  explicit ClientFixture(HttpServerOptions http_options = {}) {
    transport = std::make_unique<HttpServerTransport>(server, io.get_executor(), http_options);
    transport->mount(router, "/mcp");
    http_server = std::make_unique<http::Server>(io.get_executor(), router, http::ServerOptions{});
    REQUIRE(http_server->listen_tcp("127.0.0.1", 0).ok());
    http_server->start();
  }
  ~ClientFixture() {
    http_server.reset();
    transport.reset();
  }

  template <typename F>
  void run(F body) {
    run_sync(io, [&]() -> asio::awaitable<void> {
      std::exception_ptr failure;
      try {
        co_await body();
      } catch (...) {
        failure = std::current_exception();
      }
      transport->close_all();
      for (auto& c : connections) c->close();
      co_await http_server->shutdown(net::after(5s));
      if (failure) std::rethrow_exception(failure);
    }());
  }

  asio::awaitable<std::shared_ptr<http::H2Connection>> dial() {
    http::DialOptions d;
    d.host = "127.0.0.1";
    d.port = http_server->port();
    auto conn = co_await http::dial_h2(io.get_executor(), d, net::after(10s));
    REQUIRE(conn.ok());
    connections.push_back(*conn);
    co_return *conn;
  }

  // Coroutine parameters are references to named objects: gcc 12 destroys a by-value
  // parameter built from a default argument twice.
  asio::awaitable<std::unique_ptr<Client>> h2_client(const ClientOptions& options) {
    auto conn = co_await dial();
    ClientOptions o = options;
    o.authority = "127.0.0.1";
    co_return Client::over_h2(conn, std::move(o));
  }
  asio::awaitable<std::unique_ptr<Client>> h2_client() {
    ClientOptions o;
    co_return co_await h2_client(o);
  }

  std::unique_ptr<Client> h1_client(ClientOptions o = {}) {
    http::Http1DialOptions d;
    d.host = "127.0.0.1";
    d.port = http_server->port();
    return Client::over_http1(io.get_executor(), d, std::move(o));
  }

  asio::io_context io;
  testing::TestTools tools{io.get_executor()};
  ServerOptions options = [] {
    ServerOptions o;
    o.info.name = "client-test-server";
    o.info.version = "7";
    o.instructions = "be nice";
    o.tools_page_size = 3;
    return o;
  }();
  Server server{options, tools.table};
  http::Router router;
  std::unique_ptr<HttpServerTransport> transport;
  std::unique_ptr<http::Server> http_server;
  std::vector<std::shared_ptr<http::H2Connection>> connections;
};

// Built outside coroutine bodies: gcc 12 and braced lists holding string literals.
Json text_args(const std::string& text) { return Json{{"text", text}}; }

// Checks everything a client does with a server, over either protocol.
asio::awaitable<void> exercise(Client& client, ClientFixture& f) {
  auto init = co_await client.initialize(net::after(10s));
  REQUIRE(init.ok());
  CHECK(init->protocol_version == "2025-11-25");
  CHECK(init->server_info.name == "client-test-server");
  CHECK(init->server_info.version == "7");
  CHECK(init->instructions == "be nice");
  CHECK(init->capabilities["tools"]["listChanged"] == true);
  CHECK(client.initialized());
  CHECK_FALSE(client.session_id().empty());
  CHECK(f.transport->session_count() == 1);

  Status pinged = co_await client.ping(net::after(10s));
  CHECK(pinged.ok());

  // Pagination: 7 tools in pages of 3.
  auto first = co_await client.list_tools("", {});
  REQUIRE(first.ok());
  CHECK(first->tools.size() == 3);
  CHECK_FALSE(first->next_cursor.empty());
  auto all = co_await client.list_all_tools({});
  REQUIRE(all.ok());
  REQUIRE(all->size() == 7);
  CHECK((*all)[0].name == "echo");
  CHECK((*all)[0].annotations["readOnlyHint"] == true);

  auto echo = co_await client.call_tool("echo", text_args("round trip"), {});
  REQUIRE(echo.ok());
  CHECK_FALSE(echo->is_error);
  CHECK(echo->content[0]["text"] == "round trip");

  auto image = co_await client.call_tool("image", Json::object(), {});
  REQUIRE(image.ok());
  CHECK(image->content[0]["type"] == "image");

  auto structured = co_await client.call_tool("structured", Json::object(), {});
  REQUIRE(structured.ok());
  CHECK(structured->structured["a"] == 1);

  auto failed = co_await client.call_tool("fail", Json::object(), {});
  REQUIRE(failed.ok());
  CHECK(failed->is_error);

  auto unknown = co_await client.call_tool("nope", Json::object(), {});
  CHECK(unknown.status().code() == Code::kInvalidArgument);

  // Raw requests pass JSON-RPC errors through.
  auto raw = co_await client.request("no/such", Json::object(), {});
  REQUIRE(raw.ok());
  REQUIRE_FALSE(raw->ok());
  CHECK(raw->error->code == kMethodNotFound);

  // Progress reaches the call's callback, in order; the result follows.
  std::vector<double> progress;
  CallOptions with_progress;
  with_progress.on_progress = [&](const Json& p) -> asio::awaitable<void> {
    progress.push_back(p["progress"].get<double>());
    CHECK(p["total"] == 3);
    co_return;
  };
  auto done = co_await client.call_tool("progress", Json::object(), with_progress);
  REQUIRE(done.ok());
  CHECK(done->content[0]["text"] == "done");
  CHECK(progress == std::vector<double>{1, 2, 3});
}

TEST_CASE("Client: our client and our server over HTTP/2", "[mcp][unit]") {
  ClientFixture f;
  f.run([&]() -> asio::awaitable<void> {
    auto client = co_await f.h2_client();
    co_await exercise(*client, f);
    Status closed = co_await client->close(net::after(10s));
    CHECK(closed.ok());
    CHECK(f.transport->session_count() == 0);
    CHECK_FALSE(client->initialized());
  });
}

TEST_CASE("Client: our client and our server over HTTP/1.1", "[mcp][unit]") {
  ClientFixture f;
  f.run([&]() -> asio::awaitable<void> {
    auto client = f.h1_client();
    co_await exercise(*client, f);
    Status closed = co_await client->close(net::after(10s));
    CHECK(closed.ok());
    CHECK(f.transport->session_count() == 0);
  });
}

TEST_CASE("Client: listen() delivers list_changed from the GET stream", "[mcp][unit]") {
  for (bool h2 : {true, false}) {
    INFO((h2 ? "HTTP/2" : "HTTP/1.1"));
    ClientFixture f;
    f.run([&]() -> asio::awaitable<void> {
      std::unique_ptr<Client> client;
      if (h2) {
        client = co_await f.h2_client();
      } else {
        client = f.h1_client();
      }
      auto init = co_await client->initialize(net::after(10s));
      REQUIRE(init.ok());
      int changes = 0;
      net::Signal got(f.io.get_executor());
      client->set_notification_handler([&](const Message& m) -> asio::awaitable<void> {
        if (m.method == "notifications/tools/list_changed") ++changes;
        got.notify();
        co_return;
      });
      auto trigger = [&]() -> asio::awaitable<void> {
        f.server.notify_tools_list_changed();  // kept until the GET stream opens
        while (changes < 1) {
          Status waited = co_await got.wait();
          REQUIRE(waited.ok());
        }
        f.server.notify_tools_list_changed();
        while (changes < 2) {
          Status waited = co_await got.wait();
          REQUIRE(waited.ok());
        }
      };
      using namespace asio::experimental::awaitable_operators;
      auto winner = co_await (client->listen() || trigger());
      CHECK(winner.index() == 1);  // the trigger finished; listen() was cancelled
      CHECK(changes == 2);
    });
  }
}

TEST_CASE("Client: a cancelled call sends notifications/cancelled and the server stops it",
          "[mcp][unit]") {
  std::vector<std::string> lines;
  log::set_min_level(log::Level::kDebug);
  log::set_sink([&](std::string_view line) { lines.emplace_back(line); });
  for (bool h2 : {true, false}) {
    INFO((h2 ? "HTTP/2" : "HTTP/1.1"));
    ClientFixture f;
    lines.clear();
    f.run([&]() -> asio::awaitable<void> {
      std::unique_ptr<Client> client;
      if (h2) {
        client = co_await f.h2_client();
      } else {
        client = f.h1_client();
      }
      auto init = co_await client->initialize(net::after(10s));
      REQUIRE(init.ok());
      int progress = 0;
      net::Signal progressed(f.io.get_executor());
      CallOptions options;
      options.on_progress = [&](const Json&) -> asio::awaitable<void> {
        ++progress;
        progressed.notify();
        co_return;
      };
      // Cancels the call once the client has seen all of its progress.
      auto stop_when_waiting = [&]() -> asio::awaitable<void> {
        while (progress < 3) {
          Status waited = co_await progressed.wait();
          REQUIRE(waited.ok());
        }
      };
      using namespace asio::experimental::awaitable_operators;
      auto winner =
          co_await (client->call_tool("slow", Json::object(), options) || stop_when_waiting());
      CHECK(winner.index() == 1);
      CHECK(progress == 3);
      while (!f.tools.slow_cancelled) {
        Status waited = co_await f.tools.slow_signal->wait();
        REQUIRE(waited.ok());
      }
      // The session goes on.
      auto echo = co_await client->call_tool("echo", text_args("after"), {});
      REQUIRE(echo.ok());
      CHECK(echo->content[0]["text"] == "after");
    });
    bool notified = false;
    for (const auto& l : lines)
      notified = notified || l.find("cancelled by the client") != std::string::npos;
    CHECK(notified);
  }
  log::set_sink({});
  log::set_min_level(log::Level::kInfo);
}

TEST_CASE("Client: a deadline abandons the call with kDeadlineExceeded", "[mcp][unit]") {
  ClientFixture f;
  f.run([&]() -> asio::awaitable<void> {
    auto client = co_await f.h2_client();
    auto init = co_await client->initialize(net::after(10s));
    REQUIRE(init.ok());
    CallOptions options;
    options.deadline = net::after(50ms);
    auto r = co_await client->call_tool("slow", Json::object(), options);
    CHECK(r.status().code() == Code::kDeadlineExceeded);
    while (!f.tools.slow_cancelled) {
      Status waited = co_await f.tools.slow_signal->wait();
      REQUIRE(waited.ok());
    }
  });
}

TEST_CASE("Client: a session the server ended is kNotFound; initialize starts a new one",
          "[mcp][unit]") {
  ClientFixture f;
  f.run([&]() -> asio::awaitable<void> {
    auto client = co_await f.h2_client();
    auto init = co_await client->initialize(net::after(10s));
    REQUIRE(init.ok());
    const std::string old_id = client->session_id();
    f.transport->close_all();
    auto gone = co_await client->call_tool("echo", text_args("x"), {});
    CHECK(gone.status().code() == Code::kNotFound);
    CHECK_FALSE(client->initialized());
    auto refused = co_await client->call_tool("echo", text_args("x"), {});
    CHECK(refused.status().code() == Code::kFailedPrecondition);
    auto again = co_await client->initialize(net::after(10s));
    REQUIRE(again.ok());
    CHECK(client->session_id() != old_id);
    auto echo = co_await client->call_tool("echo", text_args("back"), {});
    REQUIRE(echo.ok());
  });
}

TEST_CASE("Client: extra headers reach the server; a new connection keeps the session",
          "[mcp][unit]") {
  HttpServerOptions o;
  o.authenticate = [](const http::RequestHead& head) -> asio::awaitable<Result<std::string>> {
    const std::string* auth = http::find_header(head.headers, "authorization");
    if (auth == nullptr || *auth != "Bearer good") co_return unauthenticated("bad token");
    co_return std::string("user-1");
  };
  ClientFixture f(o);
  std::string box;
  Tool which;
  which.name = "which_box";
  f.tools.table.add(which,
                    [&](RequestContext& ctx, const Json&) -> asio::awaitable<Result<ToolResult>> {
                      if (const std::string* b = ctx.header("x-cocoonbox-box")) box = *b;
                      co_return ToolResult::text(ctx.principal());
                    });
  f.run([&]() -> asio::awaitable<void> {
    ClientOptions bad;
    bad.headers.push_back(http::Header{"authorization", "Bearer bad"});
    auto refused = co_await f.h2_client(bad);
    auto no = co_await refused->initialize(net::after(10s));
    CHECK(no.status().code() == Code::kUnauthenticated);

    ClientOptions good;
    good.headers.push_back(http::Header{"authorization", "Bearer good"});
    good.headers.push_back(http::Header{"x-cocoonbox-box", "main"});
    auto client = co_await f.h2_client(good);
    auto init = co_await client->initialize(net::after(10s));
    REQUIRE(init.ok());
    auto who = co_await client->call_tool("which_box", Json::object(), {});
    REQUIRE(who.ok());
    CHECK(who->content[0]["text"] == "user-1");
    CHECK(box == "main");

    // The first connection goes away; the session continues on a new one.
    f.connections.back()->close();
    auto conn = co_await f.dial();
    client->set_connection(conn);
    auto again = co_await client->call_tool("which_box", Json::object(), {});
    REQUIRE(again.ok());
  });
}

}  // namespace
}  // namespace cb::mcp
