// End-to-end calls over loopback: a real http::Server with our grpc::Server routes, and our
// Channel as the client. Every server binds 127.0.0.1:0.

#include "grpc/client.h"
#include "grpc/server.h"
#include "grpc/testing/messages.pb.h"
#include "grpc/testing/test.cbgrpc.h"
#include "http/server.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace Catch {
template <>
struct StringMaker<cb::Status> {
  static std::string convert(const cb::Status& s) { return s.to_string(); }
};
}  // namespace Catch

namespace cb::grpc {
namespace {

namespace gt = ::grpc::testing;
using namespace std::chrono_literals;
using test::run_sync;

constexpr std::string_view kEchoInitial = "x-echo-initial";
constexpr std::string_view kEchoInitialBin = "x-echo-initial-bin";
constexpr std::string_view kEchoTrailingBin = "x-echo-trailing-bin";

const std::string kSpecialMessage =
    "\t\ntest with whitespace\r\nand Unicode BMP \xe2\x98\xba and non-BMP \xf0\x9f\x98\x88\t\n";

std::string all_bytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(char(i));
  return s;
}

void echo_metadata(CallContext& ctx) {
  for (std::string_view key : {kEchoInitial, kEchoInitialBin}) {
    if (const std::string* v = ctx.metadata(key)) ctx.add_initial_metadata(std::string(key), *v);
  }
  if (const std::string* v = ctx.metadata(kEchoTrailingBin))
    ctx.add_trailing_metadata(std::string(kEchoTrailingBin), *v);
}

gt::Payload payload(size_t size) {
  gt::Payload p;
  p.mutable_body()->assign(size, 'p');
  return p;
}

// The interop service, reduced to what these tests drive.
class TestServiceImpl final : public gt::TestService::Service {
 public:
  asio::awaitable<Result<gt::Empty>> EmptyCall(CallContext& ctx, gt::Empty&&) override {
    echo_metadata(ctx);
    co_return gt::Empty();
  }

  asio::awaitable<Result<gt::SimpleResponse>> UnaryCall(CallContext& ctx,
                                                        gt::SimpleRequest&& req) override {
    echo_metadata(ctx);
    if (req.response_status().code() != 0)
      co_return Status(code_from_int(req.response_status().code()),
                       req.response_status().message());
    gt::SimpleResponse resp;
    *resp.mutable_payload() = payload(size_t(req.response_size()));
    co_return resp;
  }

  asio::awaitable<Status> StreamingOutputCall(
      CallContext& ctx, gt::StreamingOutputCallRequest&& req,
      ServerWriter<gt::StreamingOutputCallResponse>& w) override {
    echo_metadata(ctx);
    for (const auto& p : req.response_parameters()) {
      gt::StreamingOutputCallResponse resp;
      *resp.mutable_payload() = payload(size_t(p.size()));
      CO_RETURN_IF_ERROR(co_await w.write(resp));
    }
    co_return Status(code_from_int(req.response_status().code()), req.response_status().message());
  }

  asio::awaitable<Result<gt::StreamingInputCallResponse>> StreamingInputCall(
      CallContext& ctx, ServerReader<gt::StreamingInputCallRequest>& r) override {
    echo_metadata(ctx);
    int32_t total = 0;
    for (;;) {
      CO_ASSIGN_OR_RETURN(auto req, co_await r.read());
      if (!req) break;
      total += int32_t(req->payload().body().size());
    }
    gt::StreamingInputCallResponse resp;
    resp.set_aggregated_payload_size(total);
    co_return resp;
  }

  asio::awaitable<Status> FullDuplexCall(
      CallContext& ctx, ServerReader<gt::StreamingOutputCallRequest>& r,
      ServerWriter<gt::StreamingOutputCallResponse>& w) override {
    echo_metadata(ctx);
    for (;;) {
      CO_ASSIGN_OR_RETURN(auto req, co_await r.read());
      if (!req) co_return ok_status();
      for (const auto& p : req->response_parameters()) {
        gt::StreamingOutputCallResponse resp;
        *resp.mutable_payload() = payload(size_t(p.size()));
        CO_RETURN_IF_ERROR(co_await w.write(resp));
      }
    }
  }
};

// What a probe handler saw; tests wait on |finished| before checking the rest.
struct Probe {
  bool started = false;
  bool finished = false;
  bool saw_cancel = false;
  bool cleaned_up = false;
};

constexpr std::string_view kSleepPath = "/cb.test.Probe/Sleep";

// A unary method that sleeps 5 s unless its call is cancelled first, then cleans up with one
// more wait (as a handler that kills and reaps a process does): a cancelled handler must be
// able to co_await its cleanup rather than have it throw.
void add_sleep_method(Server& server, Probe& probe) {
  server.add_unary<gt::Empty, gt::Empty>(
      std::string(kSleepPath),
      [&probe](CallContext&, gt::Empty&&) -> asio::awaitable<Result<gt::Empty>> {
        probe.started = true;
        net::Timer t(co_await asio::this_coro::executor, net::after(5s));
        auto [ec] = co_await t.async_wait();
        probe.saw_cancel = ec == asio::error::operation_aborted;
        probe.finished = true;
        net::Timer cleanup(co_await asio::this_coro::executor, net::after(1ms));
        co_await cleanup.async_wait();
        probe.cleaned_up = true;
        co_return gt::Empty();
      });
}

// Polls |done| every few milliseconds until it holds or |limit| passes.
asio::awaitable<bool> eventually(std::function<bool()> done, std::chrono::milliseconds limit = 2s) {
  auto end = net::after(limit);
  net::Timer t(co_await asio::this_coro::executor);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) co_return false;
    t.expires_after(5ms);
    co_await t.async_wait();
  }
  co_return true;
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  net::Timer t(co_await asio::this_coro::executor, net::after(d));
  co_await t.async_wait();
}

struct Env {
  net::Executor executor;
  http::Server* server;
  std::vector<std::shared_ptr<Channel>> channels;

  std::shared_ptr<Channel> channel(ChannelOptions options = {}) {
    options.dial.host = "127.0.0.1";
    options.dial.port = server->port();
    auto c = Channel::create(executor, std::move(options));
    channels.push_back(c);
    return c;
  }
};

// Serves |grpc_server| on 127.0.0.1:0 and runs |body|; channels are closed and the server shut
// down afterwards even when |body| fails, so run_sync always returns.
template <typename Body>
void with_server(Server& grpc_server, Body body, http::ServerOptions options = {}) {
  asio::io_context io;
  http::Router router;
  grpc_server.register_with(router);
  http::Server server(io.get_executor(), router, options);
  REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
  server.start();
  Env env;
  env.executor = io.get_executor();
  env.server = &server;
  run_sync(io, [&]() -> asio::awaitable<void> {
    std::exception_ptr failure;
    try {
      co_await body(env);
    } catch (...) {
      failure = std::current_exception();
    }
    for (auto& c : env.channels) c->close();
    co_await server.shutdown(net::after(2s));
    if (failure) std::rethrow_exception(failure);
  }());
}

CallOptions with_deadline(std::chrono::milliseconds d) {
  CallOptions o;
  o.deadline = net::after(d);
  return o;
}

TEST_CASE("Channel: a unary call returns the handler's response", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    gt::TestService::Stub stub(env.channel());
    gt::SimpleRequest req;
    req.set_response_size(1234);
    *req.mutable_payload() = payload(100);
    auto resp = co_await stub.UnaryCall(req);
    INFO(resp.status().to_string());
    REQUIRE(resp.ok());
    CHECK(resp->payload().body() == std::string(1234, 'p'));
    auto empty = co_await stub.EmptyCall(gt::Empty());
    CHECK(empty.ok());
  });
}

TEST_CASE("Channel: a handler's error Status arrives with the same code and message",
          "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    gt::TestService::Stub stub(env.channel());
    for (int code = 1; code <= 16; ++code) {
      gt::SimpleRequest req;
      req.mutable_response_status()->set_code(code);
      req.mutable_response_status()->set_message(kSpecialMessage + "100% #" + std::to_string(code));
      auto resp = co_await stub.UnaryCall(req);
      INFO("code " << code);
      REQUIRE_FALSE(resp.ok());
      CHECK(resp.status().code() == code_from_int(code));
      CHECK(resp.status().message() == kSpecialMessage + "100% #" + std::to_string(code));
    }
  });
}

TEST_CASE("Server: a handler error before any message is a trailers-only response",
          "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    http::DialOptions d;
    d.host = "127.0.0.1";
    d.port = env.server->port();
    auto conn = co_await http::dial_h2(env.executor, d, net::after(2s));
    REQUIRE(conn.ok());
    http::RequestHead head;
    head.method = "POST";
    head.path = "/grpc.testing.TestService/UnaryCall";
    head.authority = "localhost";
    head.headers.push_back(
        http::Header{std::string("content-type"), std::string("application/grpc")});
    head.headers.push_back(http::Header{std::string("te"), std::string("trailers")});
    gt::SimpleRequest req;
    req.mutable_response_status()->set_code(int(Code::kNotFound));
    req.mutable_response_status()->set_message("gone");
    auto s = (*conn)->open_stream(head, false);
    REQUIRE(s.ok());
    Status w = co_await (*s)->write(encode_message(req.SerializeAsString()), true);
    REQUIRE(w.ok());
    Status h = co_await (*s)->wait_headers();
    REQUIRE(h.ok());
    CHECK((*s)->status() == 200);
    const std::string* gs = http::find_header((*s)->headers(), "grpc-status");
    REQUIRE(gs != nullptr);
    CHECK(*gs == "5");
    const std::string* gm = http::find_header((*s)->headers(), "grpc-message");
    REQUIRE(gm != nullptr);
    CHECK(*gm == "gone");
    auto rest = co_await (*s)->read();
    REQUIRE(rest.ok());
    CHECK(rest->empty());  // END_STREAM rode the HEADERS: no DATA, no trailers
    CHECK((*s)->trailers().empty());
    (*conn)->close();
  });
}

TEST_CASE("Channel: a server-streaming call delivers N messages then the status", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    gt::TestService::Stub stub(env.channel());
    gt::StreamingOutputCallRequest req;
    for (int i = 0; i < 20; ++i) req.add_response_parameters()->set_size(i * 100);
    req.mutable_response_status()->set_code(int(Code::kAborted));
    req.mutable_response_status()->set_message("after twenty");
    auto reader = co_await stub.StreamingOutputCall(req);
    REQUIRE(reader.ok());
    std::vector<size_t> sizes;
    for (;;) {
      auto m = co_await reader->read();
      if (!m) break;
      sizes.push_back(m->payload().body().size());
    }
    Status st = co_await reader->finish();
    REQUIRE(sizes.size() == 20);
    for (size_t i = 0; i < sizes.size(); ++i) CHECK(sizes[i] == i * 100);
    CHECK(st.code() == Code::kAborted);
    CHECK(st.message() == "after twenty");
  });
}

TEST_CASE("Channel: a client-streaming call sends many messages and gets one response",
          "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    gt::TestService::Stub stub(env.channel());
    auto rw = co_await stub.StreamingInputCall();
    REQUIRE(rw.ok());
    int32_t sent = 0;
    for (int i = 0; i < 10; ++i) {
      gt::StreamingInputCallRequest req;
      *req.mutable_payload() = payload(size_t(i) * 1000);
      sent += i * 1000;
      Status w = co_await rw->write(req);
      REQUIRE(w.ok());
    }
    auto resp = co_await rw->close_and_receive();
    INFO(resp.status().to_string());
    REQUIRE(resp.ok());
    CHECK(resp->aggregated_payload_size() == sent);
  });
}

TEST_CASE("Channel: a bidi call ping-pongs one message at a time", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    gt::TestService::Stub stub(env.channel());
    auto rw = co_await stub.FullDuplexCall();
    REQUIRE(rw.ok());
    for (int i = 1; i <= 8; ++i) {
      gt::StreamingOutputCallRequest req;
      req.add_response_parameters()->set_size(i * 10);
      Status w = co_await rw->write(req);
      REQUIRE(w.ok());
      auto m = co_await rw->read();  // the reply arrives before the next request is sent
      REQUIRE(m.has_value());
      CHECK(m->payload().body().size() == size_t(i) * 10);
    }
    Status done = co_await rw->writes_done();
    CHECK(done.ok());
    auto end = co_await rw->read();
    CHECK_FALSE(end.has_value());
    Status st = co_await rw->finish();
    CHECK(st.ok());
  });
}

TEST_CASE("Channel: a client deadline ends the call and cancels the server handler",
          "[grpc][unit]") {
  Probe probe;
  Server server;
  add_sleep_method(server, probe);
  with_server(server, [&](Env& env) -> asio::awaitable<void> {
    auto channel = env.channel();
    auto resp = co_await unary_call<gt::Empty>(*channel, std::string(kSleepPath), gt::Empty(),
                                               with_deadline(200ms));
    CHECK(resp.status().code() == Code::kDeadlineExceeded);
    bool finished = co_await eventually([&] { return probe.finished; });
    REQUIRE(finished);
    CHECK(probe.saw_cancel);  // its 5 s sleep ended early
    bool cleaned = co_await eventually([&] { return probe.cleaned_up; });
    CHECK(cleaned);
    // The connection is still good.
    Status ping = co_await channel->ping(net::after(2s));
    CHECK(ping.ok());
  });
}

TEST_CASE("Channel: cancel() ends the call as CANCELLED and cancels the server handler",
          "[grpc][unit]") {
  Probe probe;
  Server server;
  add_sleep_method(server, probe);
  with_server(server, [&](Env& env) -> asio::awaitable<void> {
    auto channel = env.channel();
    auto call = co_await channel->start_call(std::string(kSleepPath), CallOptions());
    REQUIRE(call.ok());
    Status w = co_await (*call)->write(gt::Empty().SerializeAsString());
    REQUIRE(w.ok());
    Status done = co_await (*call)->writes_done();
    REQUIRE(done.ok());
    bool started = co_await eventually([&] { return probe.started; });
    REQUIRE(started);
    (*call)->cancel();
    Status st = co_await (*call)->finish();
    CHECK(st.code() == Code::kCancelled);
    bool finished = co_await eventually([&] { return probe.finished; });
    REQUIRE(finished);
    CHECK(probe.saw_cancel);
    bool cleaned = co_await eventually([&] { return probe.cleaned_up; });
    CHECK(cleaned);
  });
}

TEST_CASE("Channel: dropping an unfinished call resets it and cancels the server handler",
          "[grpc][unit]") {
  Probe probe;
  Server server;
  add_sleep_method(server, probe);
  with_server(server, [&](Env& env) -> asio::awaitable<void> {
    auto channel = env.channel();
    {
      auto call = co_await channel->start_call(std::string(kSleepPath), CallOptions());
      REQUIRE(call.ok());
      Status w = co_await (*call)->write(gt::Empty().SerializeAsString());
      REQUIRE(w.ok());
      Status done = co_await (*call)->writes_done();
      REQUIRE(done.ok());
      bool started = co_await eventually([&] { return probe.started; });
      REQUIRE(started);
    }  // the last reference to the ClientCall goes here
    bool finished = co_await eventually([&] { return probe.finished; });
    REQUIRE(finished);
    CHECK(probe.saw_cancel);
    bool cleaned = co_await eventually([&] { return probe.cleaned_up; });
    CHECK(cleaned);
  });
}

TEST_CASE("Server: grpc-timeout alone ends a sleeping handler with DEADLINE_EXCEEDED",
          "[grpc][unit]") {
  Probe probe;
  Server server;
  add_sleep_method(server, probe);
  with_server(server, [&](Env& env) -> asio::awaitable<void> {
    // A raw stream, so only the server's own deadline can end the call.
    http::DialOptions d;
    d.host = "127.0.0.1";
    d.port = env.server->port();
    auto conn = co_await http::dial_h2(env.executor, d, net::after(2s));
    REQUIRE(conn.ok());
    http::RequestHead head;
    head.method = "POST";
    head.path = std::string(kSleepPath);
    head.authority = "localhost";
    head.headers.push_back(
        http::Header{std::string("content-type"), std::string("application/grpc")});
    head.headers.push_back(http::Header{std::string("grpc-timeout"), std::string("100m")});
    auto s = (*conn)->open_stream(head, false);
    REQUIRE(s.ok());
    Status w = co_await (*s)->write(encode_message(""), true);
    REQUIRE(w.ok());
    Status h = co_await (*s)->wait_headers();
    REQUIRE(h.ok());
    const std::string* gs = http::find_header((*s)->headers(), "grpc-status");
    REQUIRE(gs != nullptr);
    CHECK(*gs == "4");
    bool finished = co_await eventually([&] { return probe.finished; });
    REQUIRE(finished);
    CHECK(probe.saw_cancel);
    bool cleaned = co_await eventually([&] { return probe.cleaned_up; });
    CHECK(cleaned);
    (*conn)->close();
  });
}

TEST_CASE("Channel: a server that ends the stream mid-call gives the client a status",
          "[grpc][unit]") {
  Server server;
  auto one_message_then = [](std::function<void(ServerCall&)> end) {
    return [end](ServerCall& call) -> asio::awaitable<void> {
      auto req = co_await internal::read_single(call);
      if (!req.ok()) co_return;
      Status w = co_await call.write("first");
      if (!w.ok()) co_return;
      // Let the DATA frame leave before the stream ends (nghttp2 sends RST_STREAM ahead of
      // queued DATA).
      Status drained = co_await call.stream().drain();
      if (!drained.ok()) co_return;
      end(call);
    };
  };
  server.add_method("/cb.test.Probe/ResetInternal", one_message_then([](ServerCall& call) {
                      call.stream().reset(NGHTTP2_INTERNAL_ERROR);
                    }));
  server.add_method("/cb.test.Probe/ResetCancel", one_message_then([](ServerCall& call) {
                      call.stream().reset(NGHTTP2_CANCEL);
                    }));
  server.add_method("/cb.test.Probe/NoFinish", one_message_then([](ServerCall&) {}));
  server.add_method("/cb.test.Probe/CloseConnection",
                    one_message_then([](ServerCall& call) { call.stream().connection().close(); }));

  struct Case {
    std::string path;
    Code code;
    bool first_message_arrives;
  };
  std::vector<Case> cases;
  cases.push_back(Case{"/cb.test.Probe/ResetInternal", Code::kInternal, true});
  cases.push_back(Case{"/cb.test.Probe/ResetCancel", Code::kCancelled, true});
  cases.push_back(Case{"/cb.test.Probe/NoFinish", Code::kInternal, true});
  cases.push_back(Case{"/cb.test.Probe/CloseConnection", Code::kUnavailable, false});
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.path) {
      with_server(server, [&](Env& env) -> asio::awaitable<void> {
        auto channel = env.channel();
        auto call = co_await channel->start_call(c.path, CallOptions());
        REQUIRE(call.ok());
        Status w = co_await (*call)->write("request");
        REQUIRE(w.ok());
        Status done = co_await (*call)->writes_done();
        REQUIRE(done.ok());
        auto first = co_await (*call)->read();
        if (c.first_message_arrives) CHECK(first == std::optional<std::string>("first"));
        auto second = co_await (*call)->read();
        CHECK_FALSE(second.has_value());
        Status st = co_await (*call)->finish();
        CHECK(st.code() == c.code);
      });
    }
  }
}

TEST_CASE("Channel: custom metadata round-trips, including -bin bytes 0x00..0xff", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    auto channel = env.channel();
    for (bool fail : {false, true}) {
      INFO((fail ? "trailers-only error" : "ok response"));
      CallOptions options;
      options.metadata.push_back(
          http::Header{std::string(kEchoInitial), std::string("text value")});
      options.metadata.push_back(http::Header{std::string(kEchoInitialBin), all_bytes()});
      options.metadata.push_back(
          http::Header{std::string(kEchoTrailingBin), std::string("\0\xff\x80tail", 7)});
      auto call =
          co_await channel->start_call("/grpc.testing.TestService/UnaryCall", std::move(options));
      REQUIRE(call.ok());
      gt::SimpleRequest req;
      if (fail) req.mutable_response_status()->set_code(int(Code::kPermissionDenied));
      Status w = co_await (*call)->write(req.SerializeAsString());
      REQUIRE(w.ok());
      Status done = co_await (*call)->writes_done();
      REQUIRE(done.ok());
      Status st = co_await (*call)->finish();
      CHECK(st.code() == (fail ? Code::kPermissionDenied : Code::kOk));
      const Metadata& initial = (*call)->initial_metadata();
      const Metadata& trailing = (*call)->trailing_metadata();
      const std::string* text = http::find_header(initial, kEchoInitial);
      const std::string* bin = http::find_header(initial, kEchoInitialBin);
      const std::string* tail = http::find_header(trailing, kEchoTrailingBin);
      REQUIRE(text != nullptr);
      REQUIRE(bin != nullptr);
      REQUIRE(tail != nullptr);
      CHECK(*text == "text value");
      CHECK(*bin == all_bytes());
      CHECK(*tail == std::string("\0\xff\x80tail", 7));
    }
  });
}

TEST_CASE("Channel: calls to an unknown method or service are UNIMPLEMENTED", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    auto channel = env.channel();
    for (const char* path : {"/grpc.testing.TestService/NoSuchMethod", "/no.such.Service/Call",
                             "/grpc.testing.TestService/UnimplementedCall"}) {
      INFO(path);
      auto resp = co_await unary_call<gt::Empty>(*channel, path, gt::Empty(), CallOptions());
      CHECK(resp.status().code() == Code::kUnimplemented);
    }
    auto good = co_await unary_call<gt::Empty>(*channel, "/grpc.testing.TestService/EmptyCall",
                                               gt::Empty(), CallOptions());
    CHECK(good.ok());
  });
}

TEST_CASE("Server: a request just over 4 MiB is RESOURCE_EXHAUSTED and the connection lives on",
          "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    gt::TestService::Stub stub(env.channel());
    gt::SimpleRequest big;
    *big.mutable_payload() = payload(kDefaultMaxMessageSize - 8);
    REQUIRE(big.ByteSizeLong() > kDefaultMaxMessageSize);
    REQUIRE(big.ByteSizeLong() < kDefaultMaxMessageSize + 16);
    auto resp = co_await stub.UnaryCall(big);
    CHECK(resp.status().code() == Code::kResourceExhausted);

    gt::SimpleRequest fits;
    *fits.mutable_payload() = payload(kDefaultMaxMessageSize - 16);
    REQUIRE(fits.ByteSizeLong() <= kDefaultMaxMessageSize);
    auto ok = co_await stub.UnaryCall(fits);
    INFO(ok.status().to_string());
    CHECK(ok.ok());
    CHECK(env.server->connection_count() == 1);  // the same connection served both
  });
}

TEST_CASE("Channel: a response above max_receive_message_size is RESOURCE_EXHAUSTED",
          "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    ChannelOptions options;
    options.max_receive_message_size = 1024;
    gt::TestService::Stub stub(env.channel(options));
    gt::SimpleRequest req;
    req.set_response_size(4096);
    auto resp = co_await stub.UnaryCall(req);
    CHECK(resp.status().code() == Code::kResourceExhausted);
    req.set_response_size(100);
    auto small = co_await stub.UnaryCall(req);
    CHECK(small.ok());
  });
}

TEST_CASE("Channel: with keepalive on both sides a connection stays up and ping works",
          "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  http::ServerOptions http_options;
  http_options.h2.keepalive_interval = 20ms;
  http_options.h2.keepalive_timeout = 1000ms;
  with_server(
      server,
      [](Env& env) -> asio::awaitable<void> {
        ChannelOptions options;
        options.dial.h2.keepalive_interval = 20ms;
        options.dial.h2.keepalive_timeout = 1000ms;
        auto channel = env.channel(options);
        gt::TestService::Stub stub(channel);
        auto first = co_await stub.EmptyCall(gt::Empty());
        REQUIRE(first.ok());
        co_await sleep_for(300ms);  // many keepalive intervals
        CHECK(env.server->connection_count() == 1);
        Status ping = co_await channel->ping(net::after(2s));
        CHECK(ping.ok());
        auto second = co_await stub.EmptyCall(gt::Empty());
        CHECK(second.ok());
        CHECK(env.server->connection_count() == 1);
      },
      http_options);
}

TEST_CASE("Channel: reconnects after the server closed the connection", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  server.add_unary<gt::Empty, gt::Empty>(
      "/cb.test.Probe/CloseConnection",
      [](CallContext& ctx, gt::Empty&&) -> asio::awaitable<Result<gt::Empty>> {
        ctx.call().stream().connection().close();
        co_return gt::Empty();
      });
  with_server(server, [](Env& env) -> asio::awaitable<void> {
    auto channel = env.channel();
    gt::TestService::Stub stub(channel);
    auto before = co_await stub.EmptyCall(gt::Empty());
    REQUIRE(before.ok());
    auto closing = co_await unary_call<gt::Empty>(*channel, "/cb.test.Probe/CloseConnection",
                                                  gt::Empty(), CallOptions());
    CHECK(closing.status().code() == Code::kUnavailable);
    auto after = co_await stub.EmptyCall(gt::Empty());
    INFO(after.status().to_string());
    CHECK(after.ok());
  });
}

TEST_CASE("Channel: reconnects to a server restarted on the same port", "[grpc][unit]") {
  TestServiceImpl service;
  Server server;
  server.add_service(service);
  http::Router router;
  server.register_with(router);
  asio::io_context io;
  auto first = std::make_unique<http::Server>(io.get_executor(), router, http::ServerOptions());
  REQUIRE(first->listen_tcp("127.0.0.1", 0).ok());
  uint16_t port = first->port();
  first->start();
  std::unique_ptr<http::Server> second;
  std::shared_ptr<Channel> channel;
  run_sync(io, [&]() -> asio::awaitable<void> {
    std::exception_ptr failure;
    try {
      ChannelOptions options;
      options.dial.host = "127.0.0.1";
      options.dial.port = port;
      channel = Channel::create(io.get_executor(), options);
      gt::TestService::Stub stub(channel);
      auto r1 = co_await stub.EmptyCall(gt::Empty());
      REQUIRE(r1.ok());
      co_await first->shutdown(net::after(2s));
      REQUIRE(first->connection_count() == 0);

      second = std::make_unique<http::Server>(io.get_executor(), router, http::ServerOptions());
      REQUIRE(second->listen_tcp("127.0.0.1", port).ok());
      second->start();
      auto r2 = co_await stub.EmptyCall(gt::Empty());
      INFO(r2.status().to_string());
      CHECK(r2.ok());
      CHECK(second->connection_count() == 1);
    } catch (...) {
      failure = std::current_exception();
    }
    if (channel) channel->close();
    co_await first->shutdown(net::after(2s));
    if (second) co_await second->shutdown(net::after(2s));
    if (failure) std::rethrow_exception(failure);
  }());
}

}  // namespace
}  // namespace cb::grpc
