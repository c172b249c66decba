// Benchmark driver for `scripts/bench boxes` (issue 3): the box lifecycle and the edge, measured
// against a running `cocoonbox api` over h2c. Test-only; never part of the product binary.
//
//   COCOONBOX_TOKEN=... boxes_bench --port N --data-dir DIR [--boxes 20] [--hello-calls 2000]
//                                   [--streams 32] [--qps-seconds 5]
//
// The token comes from the environment (never argv) and must belong to a user allowed to run
// --boxes boxes at once. DIR is the api's data dir: the driver reads master.key and opens
// edge-key.sealed with it (roles/api/keys.h), the way the api does, to sign credentials for the
// direct calls to a box's agent socket (<DIR>/boxes/<id>/run/agent.sock). It never creates a
// key: both files must exist.
//
// Phases, one after the other:
//   lifecycle  Ensure(wait) bench-00..NN from ABSENT (create-to-RUNNING); Hibernate and
//              WatchOperation until DONE (hibernate); Ensure(wait) again (wake-to-RUNNING).
//              Sequential, one box at a time.
//   latency    unary Session.Hello on one box, sequentially, through the edge (TCP to the api,
//              authorization + x-cocoonbox-box) and straight to the agent socket
//              (x-cocoonbox-credential), alternating in blocks so drift hits both alike.
//   qps        --streams coroutines on one connection each looping Hello for --qps-seconds
//              after a 1 s warm-up, edge then direct.
//   cleanup    Delete + WatchOperation for every bench box (also after a failure).
//
// Output: markdown tables on stdout; progress on stderr. Exit 0, 1 on a failed call, 2 on bad
// usage.

#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "cocoonbox/control/v1/boxes.cbgrpc.h"
#include "crypto/credential.h"
#include "grpc/client.h"
#include "roles/api/keys.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace cb::bench {
namespace {

namespace cv1 = ::cocoonbox::control::v1;
namespace av1 = ::cocoonbox::agent::v1;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  int port = 0;
  std::string data_dir;
  int boxes = 20;
  int hello_calls = 2000;
  int streams = 32;
  int qps_seconds = 5;
  std::string token;
};

// A failed step: the run stops (after cleanup) with this reason.
struct Failure {
  std::string reason;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Nearest-rank percentile of |v| (sorted in place), p in [0, 100].
double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Summary {
  double p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
  size_t n = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  s.p50 = percentile(v, 50);
  s.p90 = percentile(v, 90);
  s.p99 = percentile(v, 99);
  s.min = v.front();
  s.max = v.back();
  return s;
}

std::string box_name(int i) { return fmt::format("bench-{:02d}", i); }

class Bench {
 public:
  Bench(asio::io_context& io, Options options) : io_(io), o_(std::move(options)) {
    grpc::ChannelOptions api;
    api.dial.host = "127.0.0.1";
    api.dial.port = static_cast<uint16_t>(o_.port);
    control_channel_ = grpc::Channel::create(io_.get_executor(), api);
    edge_channel_ = grpc::Channel::create(io_.get_executor(), api);
  }

  asio::awaitable<int> run() {
    co_await asio::this_coro::throw_if_cancelled(false);
    std::optional<Failure> failed = co_await lifecycle();
    if (!failed) failed = co_await hello_phases();
    std::optional<Failure> cleaned = co_await cleanup();
    control_channel_->close();
    edge_channel_->close();
    if (direct_channel_) direct_channel_->close();
    if (failed) {
      std::cerr << "boxes_bench: FAIL: " << failed->reason << "\n";
      co_return 1;
    }
    if (cleaned) {
      std::cerr << "boxes_bench: FAIL: cleanup: " << cleaned->reason << "\n";
      co_return 1;
    }
    print_report();
    co_return 0;
  }

 private:
  grpc::CallOptions control_options() const {
    grpc::CallOptions c;
    c.deadline = net::after(std::chrono::seconds(60));
    c.metadata.push_back(http::Header{std::string("authorization"), "Bearer " + o_.token});
    return c;
  }

  // Follows |op_id| until DONE or FAILED.
  asio::awaitable<std::optional<Failure>> watch_until_done(const std::string& op_id) {
    cv1::Boxes::Stub stub(control_channel_);
    cv1::WatchOperationRequest req;
    req.set_operation_id(op_id);
    auto reader = co_await stub.WatchOperation(req, control_options());
    if (!reader.ok())
      co_return Failure{fmt::format("WatchOperation {}: {}", op_id, reader.status().to_string())};
    cv1::Phase last = cv1::PHASE_PENDING;
    std::string detail;
    while (auto ev = co_await reader->read()) {
      last = ev->phase();
      detail = ev->detail();
    }
    Status st = co_await reader->finish();
    if (!st.ok()) co_return Failure{fmt::format("WatchOperation {}: {}", op_id, st.to_string())};
    if (last != cv1::PHASE_DONE)
      co_return Failure{
          fmt::format("operation {} ended in phase {}: {}", op_id, cv1::Phase_Name(last), detail)};
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> ensure_running(const std::string& name, double& ms,
                                                         std::string* id) {
    cv1::Boxes::Stub stub(control_channel_);
    cv1::EnsureRequest req;
    req.set_name(name);
    req.set_wait(true);
    auto t0 = Clock::now();
    auto box = co_await stub.Ensure(req, control_options());
    ms = ms_since(t0);
    if (!box.ok()) co_return Failure{fmt::format("Ensure {}: {}", name, box.status().to_string())};
    if (box->state() != cv1::STATE_RUNNING)
      co_return Failure{
          fmt::format("Ensure {} gave {}: {}", name, cv1::State_Name(box->state()), box->detail())};
    if (id != nullptr) *id = box->id();
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> lifecycle() {
    cv1::Boxes::Stub stub(control_channel_);
    // A box left over from an earlier run would measure a wake, not a create.
    auto listed = co_await stub.List(cv1::ListBoxesRequest(), control_options());
    if (!listed.ok()) co_return Failure{"List: " + listed.status().to_string()};
    for (const auto& b : listed->boxes()) {
      if (b.name().rfind("bench-", 0) == 0)
        co_return Failure{fmt::format("box {} exists already: start from an empty user", b.name())};
    }
    Status connected = co_await control_channel_->connect(net::after(std::chrono::seconds(5)));
    if (!connected.ok()) co_return Failure{"connect to the api: " + connected.to_string()};

    std::cerr << "boxes_bench: create " << o_.boxes << " boxes\n";
    for (int i = 0; i < o_.boxes; ++i) {
      double ms = 0;
      std::string id;
      created_.push_back(box_name(i));
      auto f = co_await ensure_running(box_name(i), ms, &id);
      if (f) co_return f;
      ids_.push_back(id);
      create_ms_.push_back(ms);
    }
    std::cerr << "boxes_bench: hibernate " << o_.boxes << " boxes\n";
    for (int i = 0; i < o_.boxes; ++i) {
      cv1::BoxRef ref;
      ref.set_box(box_name(i));
      auto t0 = Clock::now();
      auto op = co_await stub.Hibernate(ref, control_options());
      if (!op.ok())
        co_return Failure{fmt::format("Hibernate {}: {}", box_name(i), op.status().to_string())};
      auto f = co_await watch_until_done(op->id());
      if (f) co_return f;
      hibernate_ms_.push_back(ms_since(t0));
    }
    std::cerr << "boxes_bench: wake " << o_.boxes << " boxes\n";
    for (int i = 0; i < o_.boxes; ++i) {
      double ms = 0;
      auto f = co_await ensure_running(box_name(i), ms, nullptr);
      if (f) co_return f;
      wake_ms_.push_back(ms);
    }
    co_return std::nullopt;
  }

  // Loads the edge key from the api's data dir (read-only: never creates one).
  std::optional<Failure> load_edge_key() {
    fs::path dir = o_.data_dir;
    for (const char* f : {"master.key", "edge-key.sealed"}) {
      if (!fs::exists(dir / f))
        return Failure{
            fmt::format("{} not found: --data-dir must be the api's", (dir / f).string())};
    }
    auto master = api::load_or_create_master_key(dir);
    if (!master.ok()) return Failure{"master.key: " + master.status().to_string()};
    auto key = api::load_or_create_edge_key(dir, *master);
    if (!key.ok()) return Failure{"edge-key.sealed: " + key.status().to_string()};
    edge_key_.emplace(std::move(*key));
    return std::nullopt;
  }

  std::string mint_credential(const std::string& box_id, const std::string& wake_id) const {
    auto exp = std::chrono::duration_cast<std::chrono::seconds>(
                   (std::chrono::system_clock::now() + std::chrono::minutes(10)).time_since_epoch())
                   .count();
    return crypto::issue_credential(edge_key_->key, edge_key_->key_id, box_id, wake_id, exp);
  }

  grpc::CallOptions edge_options() const {
    grpc::CallOptions c;
    c.deadline = net::after(std::chrono::seconds(10));
    c.metadata.push_back(http::Header{std::string("authorization"), "Bearer " + o_.token});
    c.metadata.push_back(http::Header{std::string("x-cocoonbox-box"), box_name(0)});
    return c;
  }

  grpc::CallOptions direct_options() const {
    grpc::CallOptions c;
    c.deadline = net::after(std::chrono::seconds(10));
    c.metadata.push_back(http::Header{std::string("x-cocoonbox-credential"), credential_});
    return c;
  }

  // One Hello; the elapsed time in ms, or a failure.
  asio::awaitable<std::optional<Failure>> hello(bool edge, double* ms) {
    av1::Session::Stub stub(edge ? edge_channel_ : direct_channel_);
    av1::HelloRequest req;
    req.set_client("boxes_bench");
    auto t0 = Clock::now();
    grpc::CallOptions options = edge ? edge_options() : direct_options();
    auto resp = co_await stub.Hello(req, std::move(options));
    if (ms != nullptr) *ms = ms_since(t0);
    if (!resp.ok())
      co_return Failure{fmt::format("Hello {}: {}", edge ? "through the edge" : "direct",
                                    resp.status().to_string())};
    if (resp->wake_id() != wake_id_)
      co_return Failure{fmt::format("Hello {} answered for wake {}, want {}",
                                    edge ? "through the edge" : "direct", resp->wake_id(),
                                    wake_id_)};
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> hello_phases() {
    if (auto f = load_edge_key()) co_return f;
    // The box's current wake, from the agent itself through the edge.
    {
      av1::Session::Stub stub(edge_channel_);
      av1::HelloRequest req;
      req.set_client("boxes_bench");
      auto resp = co_await stub.Hello(req, edge_options());
      if (!resp.ok())
        co_return Failure{"first Hello through the edge: " + resp.status().to_string()};
      if (resp->box_id() != ids_.at(0))
        co_return Failure{fmt::format("Hello came from box {}, want {}", resp->box_id(), ids_[0])};
      wake_id_ = resp->wake_id();
    }
    credential_ = mint_credential(ids_[0], wake_id_);
    grpc::ChannelOptions direct;
    direct.dial.unix_path =
        (fs::path(o_.data_dir) / "boxes" / ids_[0] / "run" / "agent.sock").string();
    direct_channel_ = grpc::Channel::create(io_.get_executor(), direct);

    // Sequential latency: warm both paths, then alternate blocks.
    std::cerr << "boxes_bench: " << o_.hello_calls << " sequential Hello calls per path\n";
    for (int i = 0; i < 200; ++i) {
      for (bool edge : {true, false}) {
        auto f = co_await hello(edge, nullptr);
        if (f) co_return f;
      }
    }
    constexpr int kBlock = 100;
    for (int done = 0; done < o_.hello_calls; done += kBlock) {
      int n = std::min(kBlock, o_.hello_calls - done);
      for (bool edge : {true, false}) {
        for (int i = 0; i < n; ++i) {
          double ms = 0;
          auto f = co_await hello(edge, &ms);
          if (f) co_return f;
          (edge ? edge_hello_ms_ : direct_hello_ms_).push_back(ms);
        }
      }
    }

    for (bool edge : {true, false}) {
      std::cerr << "boxes_bench: " << o_.streams << " concurrent streams, " << o_.qps_seconds
                << " s, " << (edge ? "edge" : "direct") << "\n";
      auto r = co_await qps(edge);
      if (!r.ok()) co_return Failure{r.status().to_string()};
      (edge ? edge_qps_ : direct_qps_) = *r;
    }
    co_return std::nullopt;
  }

  // Runs --streams loops of Hello on one connection; the calls per second completed in the
  // measured window (after a 1 s warm-up).
  asio::awaitable<Result<double>> qps(bool edge) {
    auto start = Clock::now();
    auto measure_from = start + std::chrono::seconds(1);
    auto stop_at = measure_from + std::chrono::seconds(o_.qps_seconds);
    uint64_t counted = 0;
    std::optional<Failure> failure;
    auto loop = [&]() -> asio::awaitable<void> {
      while (!failure && Clock::now() < stop_at) {
        auto f = co_await hello(edge, nullptr);
        if (f) {
          failure = std::move(f);
          co_return;
        }
        auto now = Clock::now();
        if (now >= measure_from && now < stop_at) ++counted;
      }
    };
    auto ex = co_await asio::this_coro::executor;
    int remaining = o_.streams;
    net::Signal finished(ex);
    for (int i = 0; i < o_.streams; ++i) {
      asio::co_spawn(ex, loop(), [&](std::exception_ptr) {
        if (--remaining == 0) finished.notify();
      });
    }
    while (remaining > 0) (void)co_await finished.wait();
    if (failure) co_return internal_error(failure->reason);
    co_return static_cast<double>(counted) / o_.qps_seconds;
  }

  // Deletes every bench box this run created (or tried to).
  asio::awaitable<std::optional<Failure>> cleanup() {
    cv1::Boxes::Stub stub(control_channel_);
    std::optional<Failure> first;
    if (!created_.empty()) std::cerr << "boxes_bench: delete " << created_.size() << " boxes\n";
    for (const auto& name : created_) {
      cv1::BoxRef ref;
      ref.set_box(name);
      auto op = co_await stub.Delete(ref, control_options());
      if (!op.ok()) {
        if (op.status().code() == Code::kNotFound) continue;
        if (!first) first = Failure{fmt::format("Delete {}: {}", name, op.status().to_string())};
        continue;
      }
      auto f = co_await watch_until_done(op->id());
      if (f && !first) first = f;
    }
    co_return first;
  }

  void print_report() {
    auto row = [](const std::string& what, const Summary& s) {
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", what, s.n, s.p50, s.p90,
                 s.min, s.max);
    };
    Summary create = summarize(create_ms_), hib = summarize(hibernate_ms_),
            wake = summarize(wake_ms_);
    fmt::print(
        "| box lifecycle (local backend) | boxes | median ms | p90 ms | min ms | max ms |\n");
    fmt::print("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    row("create to RUNNING (Ensure wait=true)", create);
    row("Hibernate + WatchOperation to DONE", hib);
    row("wake to RUNNING (Ensure wait=true)", wake);
    fmt::print("\n");

    Summary e = summarize(edge_hello_ms_), d = summarize(direct_hello_ms_);
    fmt::print(
        "| Session.Hello, unary | calls | median ms | p90 ms | p99 ms | QPS, {} streams on one "
        "connection |\n",
        o_.streams);
    fmt::print("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    fmt::print("| through the edge (api, TCP h2c) | {} | {:.3f} | {:.3f} | {:.3f} | {:.0f} |\n",
               e.n, e.p50, e.p90, e.p99, edge_qps_);
    fmt::print("| direct to the agent socket | {} | {:.3f} | {:.3f} | {:.3f} | {:.0f} |\n", d.n,
               d.p50, d.p90, d.p99, direct_qps_);
    fmt::print("| edge - direct | | {:+.3f} | {:+.3f} | {:+.3f} | |\n", e.p50 - d.p50,
               e.p90 - d.p90, e.p99 - d.p99);
    fmt::print("| edge / direct | | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
               d.p50 > 0 ? e.p50 / d.p50 : 0.0, d.p90 > 0 ? e.p90 / d.p90 : 0.0,
               d.p99 > 0 ? e.p99 / d.p99 : 0.0, direct_qps_ > 0 ? edge_qps_ / direct_qps_ : 0.0);
    fmt::print("\n");
    const double overhead = e.p50 - d.p50;
    fmt::print(
        "Goals (issue 3): wake median {:.1f} ms (goal <= 20 ms: {}); edge overhead {:.3f} ms "
        "per unary call at the median (goal <= 0.3 ms: {}).\n",
        wake.p50, wake.p50 <= 20.0 ? "met" : "NOT met", overhead,
        overhead <= 0.3 ? "met" : "NOT met");
  }

  asio::io_context& io_;
  Options o_;
  std::shared_ptr<grpc::Channel> control_channel_;  // Boxes calls
  std::shared_ptr<grpc::Channel> edge_channel_;     // Session through the api's edge
  std::shared_ptr<grpc::Channel> direct_channel_;   // Session on the agent socket
  std::optional<api::EdgeKey> edge_key_;
  std::string wake_id_;
  std::string credential_;
  std::vector<std::string> created_;  // names Ensure was called for
  std::vector<std::string> ids_;
  std::vector<double> create_ms_, hibernate_ms_, wake_ms_;
  std::vector<double> edge_hello_ms_, direct_hello_ms_;
  double edge_qps_ = 0, direct_qps_ = 0;
};

int run(int argc, char** argv) {
  CLI::App app("boxes_bench: box lifecycle and edge benchmark against a running cocoonbox api");
  Options o;
  app.add_option("--port", o.port, "the api's h2c port on 127.0.0.1")
      ->required()
      ->check(CLI::Range(1, 65535));
  app.add_option("--data-dir", o.data_dir, "the api's data dir (edge key for direct calls)")
      ->required();
  app.add_option("--boxes", o.boxes, "boxes to create")->check(CLI::Range(1, 99));
  app.add_option("--hello-calls", o.hello_calls, "sequential Hello calls per path")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--streams", o.streams, "concurrent streams for QPS")->check(CLI::Range(1, 1000));
  app.add_option("--qps-seconds", o.qps_seconds, "measured seconds per QPS run")
      ->check(CLI::Range(1, 600));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const char* token = std::getenv("COCOONBOX_TOKEN");
  if (token == nullptr || *token == '\0') {
    std::cerr << "boxes_bench: set COCOONBOX_TOKEN (a token of the user to run boxes as)\n";
    return 2;
  }
  o.token = token;
  asio::io_context io;
  Bench bench(io, std::move(o));
  int rc = 1;
  asio::co_spawn(io, bench.run(), [&](std::exception_ptr e, int r) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::cerr << "boxes_bench: " << ex.what() << "\n";
      }
      rc = 1;
    } else {
      rc = r;
    }
  });
  io.run();
  return rc;
}

}  // namespace
}  // namespace cb::bench

int main(int argc, char** argv) { return cb::bench::run(argc, argv); }
