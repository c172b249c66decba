// The gRPC interop test client on cocoonbox's gRPC layer: runs the public interop cases (and
// two message-size cases of ours) against any TestService server.
//
//   interop_client --server_host=127.0.0.1 --server_port=N --test_case=large_unary|all
//                  [--use_tls=true --ca_file=F --server_host_override=NAME]
//
// Exit 0 when every requested case passed; otherwise 1 with "case: FAIL: reason" lines on
// stderr; 2 on bad usage.

#include "grpc/client.h"
#include "grpc/testing/test.cbgrpc.h"
#include "net/tls.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>
#include <iostream>
#include <map>

namespace cb::interop {
namespace {

namespace gt = ::grpc::testing;
using grpc::CallOptions;

// A failed check: the case stops with this reason.
struct Failure {
  std::string reason;
};

#define EXPECT(cond, ...) \
  if (!(cond)) co_return Failure{fmt::format(__VA_ARGS__)};

using CaseResult = std::optional<Failure>;
using Case = std::function<asio::awaitable<CaseResult>(gt::TestService::Stub&,
                                                       gt::UnimplementedService::Stub&)>;

gt::Payload zeros(size_t n) {
  gt::Payload p;
  p.set_type(gt::COMPRESSABLE);
  p.mutable_body()->assign(n, '\0');
  return p;
}

bool all_zero(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '\0'; });
}

gt::StreamingOutputCallRequest stream_req(int32_t resp_size, size_t payload,
                                          int32_t interval_us = 0) {
  gt::StreamingOutputCallRequest r;
  auto* p = r.add_response_parameters();
  p->set_size(resp_size);
  p->set_interval_us(interval_us);
  *r.mutable_payload() = zeros(payload);
  return r;
}

std::string code_text(const Status& s) { return s.to_string(); }

// A body size that makes SimpleRequest{response_size, payload{body}} serialize to |target|.
size_t body_for_request_size(size_t target, int32_t response_size) {
  gt::SimpleRequest r;
  r.set_response_size(response_size);
  size_t n = target - 16;
  for (int i = 0; i < 8; ++i) {
    *r.mutable_payload() = zeros(n);
    size_t size = r.ByteSizeLong();
    if (size == target) break;
    n = n + target - size;
  }
  return n;
}

const std::string kInitialValue = "test_initial_metadata_value";
const std::string kTrailingValue = "\xab\xab\xab";

std::map<std::string, Case> cases() {
  std::map<std::string, Case> c;
  c["empty_unary"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto r = co_await stub.EmptyCall(gt::Empty());
    EXPECT(r.ok(), "EmptyCall: {}", code_text(r.status()));
    co_return std::nullopt;
  };
  c["large_unary"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    gt::SimpleRequest req;
    req.set_response_size(314159);
    *req.mutable_payload() = zeros(271828);
    auto r = co_await stub.UnaryCall(req);
    EXPECT(r.ok(), "UnaryCall: {}", code_text(r.status()));
    EXPECT(r->payload().body().size() == 314159, "response body is {} bytes",
           r->payload().body().size());
    EXPECT(all_zero(r->payload().body()), "response body is not all zeros");
    co_return std::nullopt;
  };
  c["client_streaming"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto call = co_await stub.StreamingInputCall();
    EXPECT(call.ok(), "start: {}", code_text(call.status()));
    for (size_t n : {27182, 8, 1828, 45904}) {
      gt::StreamingInputCallRequest req;
      *req.mutable_payload() = zeros(n);
      Status w = co_await call->write(req);
      EXPECT(w.ok(), "write: {}", code_text(w));
    }
    auto resp = co_await call->close_and_receive();
    EXPECT(resp.ok(), "StreamingInputCall: {}", code_text(resp.status()));
    EXPECT(resp->aggregated_payload_size() == 74922, "aggregated size {}",
           resp->aggregated_payload_size());
    co_return std::nullopt;
  };
  c["server_streaming"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    gt::StreamingOutputCallRequest req;
    const int32_t sizes[] = {31415, 9, 2653, 58979};
    for (int32_t s : sizes) req.add_response_parameters()->set_size(s);
    auto call = co_await stub.StreamingOutputCall(req);
    EXPECT(call.ok(), "start: {}", code_text(call.status()));
    size_t i = 0;
    while (auto resp = co_await call->read()) {
      EXPECT(i < 4, "more than 4 responses");
      EXPECT(resp->payload().body().size() == size_t(sizes[i]), "response {} is {} bytes", i,
             resp->payload().body().size());
      ++i;
    }
    Status st = co_await call->finish();
    EXPECT(st.ok(), "StreamingOutputCall: {}", code_text(st));
    EXPECT(i == 4, "{} responses, want 4", i);
    co_return std::nullopt;
  };
  c["ping_pong"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto call = co_await stub.FullDuplexCall();
    EXPECT(call.ok(), "start: {}", code_text(call.status()));
    const std::pair<int32_t, size_t> steps[] = {
        {31415, 27182}, {9, 8}, {2653, 1828}, {58979, 45904}};
    for (auto [resp_size, payload] : steps) {
      Status w = co_await call->write(stream_req(resp_size, payload));
      EXPECT(w.ok(), "write: {}", code_text(w));
      auto resp = co_await call->read();
      EXPECT(resp.has_value(), "no response: {}", code_text(co_await call->finish()));
      EXPECT(resp->payload().body().size() == size_t(resp_size), "response is {} bytes",
             resp->payload().body().size());
    }
    Status d = co_await call->writes_done();
    EXPECT(d.ok(), "writes_done: {}", code_text(d));
    auto extra = co_await call->read();
    EXPECT(!extra.has_value(), "unexpected extra response");
    Status st = co_await call->finish();
    EXPECT(st.ok(), "FullDuplexCall: {}", code_text(st));
    co_return std::nullopt;
  };
  c["empty_stream"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto call = co_await stub.FullDuplexCall();
    EXPECT(call.ok(), "start: {}", code_text(call.status()));
    Status d = co_await call->writes_done();
    EXPECT(d.ok(), "writes_done: {}", code_text(d));
    auto resp = co_await call->read();
    EXPECT(!resp.has_value(), "unexpected response");
    Status st = co_await call->finish();
    EXPECT(st.ok(), "FullDuplexCall: {}", code_text(st));
    co_return std::nullopt;
  };
  c["cancel_after_begin"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto call = co_await stub.StreamingInputCall();
    EXPECT(call.ok(), "start: {}", code_text(call.status()));
    call->call().cancel();
    Status st = co_await call->finish();
    EXPECT(st.code() == Code::kCancelled, "status {}, want CANCELLED", code_text(st));
    co_return std::nullopt;
  };
  c["cancel_after_first_response"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto call = co_await stub.FullDuplexCall();
    EXPECT(call.ok(), "start: {}", code_text(call.status()));
    Status w = co_await call->write(stream_req(31415, 27182));
    EXPECT(w.ok(), "write: {}", code_text(w));
    auto resp = co_await call->read();
    EXPECT(resp.has_value(), "no first response");
    call->call().cancel();
    Status st = co_await call->finish();
    EXPECT(st.code() == Code::kCancelled, "status {}, want CANCELLED", code_text(st));
    co_return std::nullopt;
  };
  c["timeout_on_sleeping_server"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    CallOptions o;
    o.deadline = net::after(std::chrono::milliseconds(1));
    auto call = co_await stub.FullDuplexCall(std::move(o));
    if (!call.ok()) {
      EXPECT(call.status().code() == Code::kDeadlineExceeded, "start: {}",
             code_text(call.status()));
      co_return std::nullopt;
    }
    (void)co_await call->write(stream_req(1, 27182, 1000000));
    auto resp = co_await call->read();
    Status st = co_await call->finish();
    EXPECT(!resp.has_value(), "got a response from a sleeping server");
    EXPECT(st.code() == Code::kDeadlineExceeded, "status {}, want DEADLINE_EXCEEDED",
           code_text(st));
    co_return std::nullopt;
  };
  auto status_case = [](std::string message) -> Case {
    return [message](auto& stub, auto&) -> asio::awaitable<CaseResult> {
      gt::SimpleRequest req;
      req.mutable_response_status()->set_code(2);
      req.mutable_response_status()->set_message(message);
      auto r = co_await stub.UnaryCall(req);
      EXPECT(r.status().code() == Code::kUnknown, "UnaryCall status {}, want UNKNOWN",
             code_text(r.status()));
      EXPECT(r.status().message() == message, "UnaryCall message {:?}, want {:?}",
             r.status().message(), message);
      auto call = co_await stub.FullDuplexCall();
      EXPECT(call.ok(), "start: {}", code_text(call.status()));
      gt::StreamingOutputCallRequest sreq;
      sreq.mutable_response_status()->set_code(2);
      sreq.mutable_response_status()->set_message(message);
      (void)co_await call->write(sreq);
      (void)co_await call->writes_done();
      Status st = co_await call->finish();
      EXPECT(st.code() == Code::kUnknown, "FullDuplexCall status {}, want UNKNOWN", code_text(st));
      EXPECT(st.message() == message, "FullDuplexCall message {:?}", st.message());
      co_return std::nullopt;
    };
  };
  c["status_code_and_message"] = status_case("test status message");
  c["special_status_message"] = status_case(
      "\t\ntest with whitespace\r\nand Unicode BMP \xe2\x98\xba and non-BMP "
      "\xf0\x9f\x98\x88\t\n");
  c["custom_metadata"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto options = [] {
      CallOptions o;
      o.metadata.push_back({"x-grpc-test-echo-initial", kInitialValue});
      o.metadata.push_back({"x-grpc-test-echo-trailing-bin", kTrailingValue});
      return o;
    };
    // Unary, through the raw call to see both metadata sets.
    {
      gt::SimpleRequest req;
      req.set_response_size(314159);
      *req.mutable_payload() = zeros(271828);
      std::string bytes = req.SerializeAsString();
      auto& channel = stub.channel();
      auto call = co_await channel.start_call("/grpc.testing.TestService/UnaryCall", options());
      EXPECT(call.ok(), "start: {}", code_text(call.status()));
      (void)co_await (*call)->write(bytes);
      (void)co_await (*call)->writes_done();
      auto resp = co_await (*call)->read();
      Status st = co_await (*call)->finish();
      EXPECT(st.ok(), "UnaryCall: {}", code_text(st));
      EXPECT(resp.has_value(), "no response");
      const std::string* i =
          http::find_header((*call)->initial_metadata(), "x-grpc-test-echo-initial");
      const std::string* t =
          http::find_header((*call)->trailing_metadata(), "x-grpc-test-echo-trailing-bin");
      EXPECT(i && *i == kInitialValue, "UnaryCall initial metadata not echoed");
      EXPECT(t && *t == kTrailingValue, "UnaryCall trailing metadata not echoed");
    }
    {
      auto call = co_await stub.FullDuplexCall(options());
      EXPECT(call.ok(), "start: {}", code_text(call.status()));
      (void)co_await call->write(stream_req(314159, 271828));
      (void)co_await call->writes_done();
      auto resp = co_await call->read();
      EXPECT(resp.has_value(), "no response");
      Status st = co_await call->finish();
      EXPECT(st.ok(), "FullDuplexCall: {}", code_text(st));
      const std::string* i =
          http::find_header(call->call().initial_metadata(), "x-grpc-test-echo-initial");
      const std::string* t =
          http::find_header(call->call().trailing_metadata(), "x-grpc-test-echo-trailing-bin");
      EXPECT(i && *i == kInitialValue, "FullDuplexCall initial metadata not echoed");
      EXPECT(t && *t == kTrailingValue, "FullDuplexCall trailing metadata not echoed");
    }
    co_return std::nullopt;
  };
  c["unimplemented_method"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    auto r = co_await stub.UnimplementedCall(gt::Empty());
    EXPECT(r.status().code() == Code::kUnimplemented, "status {}, want UNIMPLEMENTED",
           code_text(r.status()));
    co_return std::nullopt;
  };
  c["unimplemented_service"] = [](auto&, auto& unimpl) -> asio::awaitable<CaseResult> {
    auto r = co_await unimpl.UnimplementedCall(gt::Empty());
    EXPECT(r.status().code() == Code::kUnimplemented, "status {}, want UNIMPLEMENTED",
           code_text(r.status()));
    co_return std::nullopt;
  };
  c["max_message_under"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    const size_t target = (4u << 20) - 64;
    const int32_t resp_size = int32_t(target) - 10;  // SimpleResponse{payload{body}} adds 10
    gt::SimpleRequest req;
    req.set_response_size(resp_size);
    *req.mutable_payload() = zeros(body_for_request_size(target, resp_size));
    EXPECT(req.ByteSizeLong() == target, "request is {} bytes", req.ByteSizeLong());
    auto r = co_await stub.UnaryCall(req);
    EXPECT(r.ok(), "UnaryCall of a {}-byte request: {}", target, code_text(r.status()));
    EXPECT(r->payload().body().size() == size_t(resp_size), "response body {} bytes",
           r->payload().body().size());
    co_return std::nullopt;
  };
  c["max_message_over"] = [](auto& stub, auto&) -> asio::awaitable<CaseResult> {
    const size_t target = (4u << 20) + 64;
    gt::SimpleRequest req;
    *req.mutable_payload() = zeros(body_for_request_size(target, 0));
    EXPECT(req.ByteSizeLong() == target, "request is {} bytes", req.ByteSizeLong());
    auto r = co_await stub.UnaryCall(req);
    EXPECT(r.status().code() == Code::kResourceExhausted, "status {}, want RESOURCE_EXHAUSTED",
           code_text(r.status()));
    co_return std::nullopt;
  };
  return c;
}

int run(int argc, char** argv) {
  CLI::App app("gRPC interop test client on cocoonbox's gRPC layer");
  std::string host = "127.0.0.1", test_case = "all", ca_file, override_name;
  int port = 0;
  bool use_tls = false;
  app.add_option("--server_host", host, "server address");
  app.add_option("--server_port", port, "server port")->required()->check(CLI::Range(1, 65535));
  app.add_option("--test_case", test_case, "case name, or all");
  app.add_option("--use_tls", use_tls, "use TLS (true/false)");
  app.add_option("--ca_file", ca_file, "PEM roots to verify the server with");
  app.add_option("--server_host_override", override_name, "TLS name and :authority");
  app.add_option("--use_test_ca", "ignored (use --ca_file)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto all = cases();
  std::vector<std::string> selected;
  if (test_case == "all") {
    for (const auto& [name, fn] : all) selected.push_back(name);
  } else if (all.count(test_case)) {
    selected.push_back(test_case);
  } else {
    std::cerr << "interop_client: unknown --test_case " << test_case << "\n";
    return 2;
  }

  asio::io_context io;
  grpc::ChannelOptions options;
  options.dial.host = host;
  options.dial.port = static_cast<uint16_t>(port);
  options.max_receive_message_size = 64u << 20;  // the server, not us, must refuse "over"
  if (use_tls) {
    auto ctx = net::TlsContext::client({ca_file, true, {"h2"}});
    if (!ctx.ok()) {
      std::cerr << "interop_client: " << ctx.status().to_string() << "\n";
      return 2;
    }
    options.dial.tls = *ctx;
    options.dial.server_name = override_name.empty() ? host : override_name;
  }
  if (!override_name.empty()) options.authority = override_name;
  auto channel = grpc::Channel::create(io.get_executor(), options);
  gt::TestService::Stub stub(channel);
  gt::UnimplementedService::Stub unimpl(channel);

  int failures = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (const auto& name : selected) {
          CaseResult r = co_await all[name](stub, unimpl);
          if (r) {
            ++failures;
            std::cerr << name << ": FAIL: " << r->reason << "\n";
          } else {
            std::cout << name << ": pass\n";
          }
        }
        channel->close();
      },
      asio::detached);
  io.run();
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace cb::interop

int main(int argc, char** argv) { return cb::interop::run(argc, argv); }
