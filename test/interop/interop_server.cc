// The gRPC interop test server (grpc.testing.TestService) on cocoonbox's gRPC layer, for the
// interop matrix (run_interop.sh) and the benchmark (scripts/bench grpc).
//
//   interop_server --port=0 [--use_tls=true --tls_cert_file=F --tls_key_file=F]
//
// With --port=0 it prints "listening on port N" once it accepts connections.

#include "base/log.h"
#include "grpc/server.h"
#include "grpc/testing/test.cbgrpc.h"
#include "http/server.h"
#include "net/tls.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

namespace cb::interop {
namespace {

using grpc::CallContext;
using grpc::ServerReader;
using grpc::ServerWriter;
namespace gt = ::grpc::testing;

constexpr std::string_view kEchoInitial = "x-grpc-test-echo-initial";
constexpr std::string_view kEchoTrailing = "x-grpc-test-echo-trailing-bin";

void echo_metadata(CallContext& ctx) {
  if (const std::string* v = ctx.metadata(kEchoInitial))
    ctx.add_initial_metadata(std::string(kEchoInitial), *v);
  if (const std::string* v = ctx.metadata(kEchoTrailing))
    ctx.add_trailing_metadata(std::string(kEchoTrailing), *v);
}

Status status_of(const gt::EchoStatus& s) { return Status(code_from_int(s.code()), s.message()); }

gt::Payload zero_payload(int32_t size) {
  gt::Payload p;
  p.set_type(gt::COMPRESSABLE);
  p.mutable_body()->assign(static_cast<size_t>(std::max(size, 0)), '\0');
  return p;
}

// Sleeps |us| microseconds unless the call is cancelled first.
asio::awaitable<Status> sleep_us(int32_t us) {
  if (us <= 0) co_return ok_status();
  if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
    co_return cancelled("call cancelled");
  net::Timer t(co_await asio::this_coro::executor, net::after(std::chrono::microseconds(us)));
  auto [ec] = co_await t.async_wait();
  if (ec) co_return cancelled("call cancelled");
  co_return ok_status();
}

asio::awaitable<Status> stream_responses(const gt::StreamingOutputCallRequest& req,
                                         ServerWriter<gt::StreamingOutputCallResponse>& w) {
  for (const auto& p : req.response_parameters()) {
    CO_RETURN_IF_ERROR(co_await sleep_us(p.interval_us()));
    gt::StreamingOutputCallResponse resp;
    *resp.mutable_payload() = zero_payload(p.size());
    CO_RETURN_IF_ERROR(co_await w.write(resp));
  }
  co_return ok_status();
}

class TestServiceImpl final : public gt::TestService::Service {
 public:
  asio::awaitable<Result<gt::Empty>> EmptyCall(CallContext& ctx, gt::Empty&&) override {
    echo_metadata(ctx);
    co_return gt::Empty();
  }

  asio::awaitable<Result<gt::SimpleResponse>> UnaryCall(CallContext& ctx,
                                                        gt::SimpleRequest&& req) override {
    echo_metadata(ctx);
    if (req.has_response_status() && req.response_status().code() != 0)
      co_return status_of(req.response_status());
    gt::SimpleResponse resp;
    *resp.mutable_payload() = zero_payload(req.response_size());
    co_return resp;
  }

  asio::awaitable<Result<gt::SimpleResponse>> CacheableUnaryCall(CallContext& ctx,
                                                                 gt::SimpleRequest&& req) override {
    co_return co_await UnaryCall(ctx, std::move(req));
  }

  asio::awaitable<Status> StreamingOutputCall(
      CallContext& ctx, gt::StreamingOutputCallRequest&& req,
      ServerWriter<gt::StreamingOutputCallResponse>& w) override {
    echo_metadata(ctx);
    CO_RETURN_IF_ERROR(co_await stream_responses(req, w));
    if (req.has_response_status() && req.response_status().code() != 0)
      co_return status_of(req.response_status());
    co_return ok_status();
  }

  asio::awaitable<Result<gt::StreamingInputCallResponse>> StreamingInputCall(
      CallContext& ctx, ServerReader<gt::StreamingInputCallRequest>& r) override {
    echo_metadata(ctx);
    int64_t total = 0;
    for (;;) {
      CO_ASSIGN_OR_RETURN(auto req, co_await r.read());
      if (!req) break;
      total += static_cast<int64_t>(req->payload().body().size());
    }
    gt::StreamingInputCallResponse resp;
    resp.set_aggregated_payload_size(static_cast<int32_t>(total));
    co_return resp;
  }

  asio::awaitable<Status> FullDuplexCall(
      CallContext& ctx, ServerReader<gt::StreamingOutputCallRequest>& r,
      ServerWriter<gt::StreamingOutputCallResponse>& w) override {
    echo_metadata(ctx);
    // Initial metadata goes out at once, so a client waiting for it before its first
    // message (custom_metadata) is not held up.
    CO_RETURN_IF_ERROR(ctx.send_initial_metadata());
    for (;;) {
      CO_ASSIGN_OR_RETURN(auto req, co_await r.read());
      if (!req) co_return ok_status();
      if (req->has_response_status() && req->response_status().code() != 0)
        co_return status_of(req->response_status());
      CO_RETURN_IF_ERROR(co_await stream_responses(*req, w));
    }
  }

  asio::awaitable<Status> HalfDuplexCall(
      CallContext& ctx, ServerReader<gt::StreamingOutputCallRequest>& r,
      ServerWriter<gt::StreamingOutputCallResponse>& w) override {
    echo_metadata(ctx);
    std::vector<gt::StreamingOutputCallRequest> all;
    for (;;) {
      CO_ASSIGN_OR_RETURN(auto req, co_await r.read());
      if (!req) break;
      all.push_back(std::move(*req));
    }
    for (const auto& req : all) CO_RETURN_IF_ERROR(co_await stream_responses(req, w));
    co_return ok_status();
  }
  // UnimplementedCall keeps the generated UNIMPLEMENTED answer.
};

int run(int argc, char** argv) {
  CLI::App app("gRPC interop test server on cocoonbox's gRPC layer");
  int port = 0;
  bool use_tls = false;
  std::string cert, key, host = "127.0.0.1";
  app.add_option("--port", port, "TCP port; 0 picks a free one")->check(CLI::Range(0, 65535));
  app.add_option("--use_tls", use_tls, "serve TLS (true/false)");
  app.add_option("--tls_cert_file", cert, "PEM certificate chain (with --use_tls)");
  app.add_option("--tls_key_file", key, "PEM private key (with --use_tls)");
  app.add_option("--host", host, "listen address (loopback by default)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  log::init_from_env();
  asio::io_context io;
  http::ServerOptions options;
  if (use_tls) {
    if (cert.empty() || key.empty()) {
      std::cerr << "interop_server: --use_tls needs --tls_cert_file and --tls_key_file\n";
      return 2;
    }
    auto ctx = net::TlsContext::server({cert, key, {"h2"}});
    if (!ctx.ok()) {
      std::cerr << "interop_server: " << ctx.status().to_string() << "\n";
      return 1;
    }
    options.tls = *ctx;
  }
  TestServiceImpl service;
  grpc::Server grpc_server;
  grpc_server.add_service(service);
  http::Router router;
  grpc_server.register_with(router);
  http::Server server(io.get_executor(), router, options);
  if (Status st = server.listen_tcp(host, static_cast<uint16_t>(port)); !st.ok()) {
    std::cerr << "interop_server: " << st.to_string() << "\n";
    return 1;
  }
  server.start();
  std::printf("listening on port %u\n", server.port());
  std::fflush(stdout);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const std::error_code&, int) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          co_await server.shutdown(net::after(std::chrono::seconds(2)));
          io.stop();
        },
        asio::detached);
  });
  io.run();
  return 0;
}

}  // namespace
}  // namespace cb::interop

int main(int argc, char** argv) { return cb::interop::run(argc, argv); }
