#include "roles/api/api.h"

#include "base/log.h"
#include "grpc/server.h"
#include "http/server.h"
#include "net/tls.h"
#include "roles/api/boxes.h"
#include "roles/api/boxes_service.h"
#include "roles/api/control_tools.h"
#include "roles/api/data_dir_lock.h"
#include "roles/api/edge.h"
#include "roles/api/keys.h"
#include "roles/api/machines/local.h"
#include "roles/api/model_door.h"
#include "roles/api/state_gc.h"
#include "roles/api/state_manager.h"
#include "roles/api/store/admin.h"
#include "roles/api/store/store.h"
#include "roles/api/store/token_index.h"
#include "state/fs_store.h"
#include "state/s3_store.h"
#include "state/store_url.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sys/stat.h>
#include <unistd.h>

namespace cb::api {

namespace {

namespace fs = std::filesystem;

struct Config {
  std::string listen = "127.0.0.1:7443";
  std::string tls_cert;
  std::string tls_key;
  std::string data_dir;
  std::string backend = "local";
  std::string idle_hibernate = "30m";
  std::string gateway_url;       // the default model gateway (model_door.h)
  std::string gateway_key_file;  // its key; never on the command line itself
  std::string state_dir;         // the filesystem store (default <data-dir>/state)
  std::string state_store;       // a store URL (state/store_url.h); excludes state_dir
  std::string autosave = "6h";   // save each running box this often (0 = never)
  // The state GC pass (state_gc.h): the retention rule, how often (0 = never), delete batch.
  std::string state_keep = "hourly=24h,daily=30d,weekly=26w";
  std::string state_gc_interval = "24h";
  int state_gc_batch = 1000;
};

fs::path default_data_dir() {
  if (::geteuid() == 0) return "/var/lib/cocoonbox-api";
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x != '\0')
    return fs::path(x) / "cocoonbox";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return fs::path(h) / ".local/share/cocoonbox";
  return "/tmp/cocoonbox";
}

// "30m", "10s", "250ms", "2h", "0" -> milliseconds. Errors name the flag.
Result<std::chrono::milliseconds> parse_duration(std::string_view v, std::string_view flag) {
  size_t i = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
  if (i == 0 || i > 9)
    return invalid_argument(
        fmt::format("{} {:?}: want a number and a unit (ms, s, m, h)", flag, v));
  int64_t n = std::stoll(std::string(v.substr(0, i)));
  std::string_view unit = v.substr(i);
  using namespace std::chrono;
  if (unit.empty() && n == 0) return milliseconds(0);
  if (unit == "ms") return milliseconds(n);
  if (unit == "s") return duration_cast<milliseconds>(seconds(n));
  if (unit == "m") return duration_cast<milliseconds>(minutes(n));
  if (unit == "h") return duration_cast<milliseconds>(hours(n));
  return invalid_argument(fmt::format("{} {:?}: unknown unit (ms, s, m, h)", flag, v));
}

// The GC pass's options from --state-keep and --state-gc-batch. Errors name the flag.
Result<GcOptions> gc_options(const Config& cfg) {
  GcOptions gc;
  auto rule = state::parse_retention_rule(cfg.state_keep);
  if (!rule.ok())
    return invalid_argument(
        fmt::format("--state-keep {:?}: {}", cfg.state_keep, rule.status().message()));
  gc.rule = std::move(*rule);
  if (cfg.state_gc_batch < 1 || cfg.state_gc_batch > static_cast<int>(state::kMaxDeleteBatch))
    return invalid_argument(
        fmt::format("--state-gc-batch {}: want 1..{}", cfg.state_gc_batch, state::kMaxDeleteBatch));
  gc.delete_batch = static_cast<size_t>(cfg.state_gc_batch);
  return gc;
}

Result<std::pair<std::string, uint16_t>> parse_listen(std::string_view v) {
  auto colon = v.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == v.size())
    return invalid_argument(fmt::format("--listen {:?}: want HOST:PORT", v));
  std::string host(v.substr(0, colon));
  int port = 0;
  for (char c : v.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535)
      return invalid_argument(fmt::format("--listen {:?}: bad port", v));
    port = port * 10 + (c - '0');
  }
  if (port > 65535) return invalid_argument(fmt::format("--listen {:?}: bad port", v));
  return std::make_pair(host, static_cast<uint16_t>(port));
}

// First start: an admin user and its token in <data-dir>/admin.token (0600).
asio::awaitable<Status> ensure_admin(Store& store, const fs::path& data_dir,
                                     const std::string& endpoint) {
  auto users = co_await store.list_users();
  if (!users.ok()) co_return users.status();
  if (!users->empty()) co_return ok_status();
  auto admin = co_await store.add_user("admin");
  if (!admin.ok()) co_return admin.status();
  auto token = co_await store.issue_token("admin", "first start");
  if (!token.ok()) co_return token.status();
  auto path = data_dir / "admin.token";
  CO_RETURN_IF_ERROR(write_file_atomic(path, token->plaintext + "\n", 0600));
  log::info("first start: created user admin", {{"token_file", path.string()}});
  std::cout << "cocoonbox api: first start. Sign in with:\n  cocoonbox login --endpoint "
            << endpoint << " --token - < " << path.string() << "\n";
  std::cout.flush();
  co_return ok_status();
}

int serve(const Config& cfg) {
  fs::path data_dir = cfg.data_dir.empty() ? default_data_dir() : fs::path(cfg.data_dir);
  auto listen = parse_listen(cfg.listen);
  if (!listen.ok()) {
    std::cerr << "cocoonbox api: " << listen.status().message() << "\n";
    return 2;
  }
  auto idle = parse_duration(cfg.idle_hibernate, "--idle-hibernate");
  if (!idle.ok()) {
    std::cerr << "cocoonbox api: " << idle.status().message() << "\n";
    return 2;
  }
  auto autosave = parse_duration(cfg.autosave, "--autosave");
  if (!autosave.ok()) {
    std::cerr << "cocoonbox api: " << autosave.status().message() << "\n";
    return 2;
  }
  auto gc = gc_options(cfg);
  auto gc_interval = parse_duration(cfg.state_gc_interval, "--state-gc-interval");
  if (!gc.ok() || !gc_interval.ok()) {
    std::cerr << "cocoonbox api: " << (gc.ok() ? gc_interval.status() : gc.status()).message()
              << "\n";
    return 2;
  }
  if (cfg.backend != "local") {
    std::cerr << "cocoonbox api: --backend " << cfg.backend
              << ": only \"local\" is built into this binary\n";
    return 2;
  }
  if (cfg.tls_cert.empty() != cfg.tls_key.empty()) {
    std::cerr << "cocoonbox api: --tls-cert and --tls-key go together\n";
    return 2;
  }
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  if (ec) {
    std::cerr << "cocoonbox api: --data-dir " << data_dir << ": " << ec.message() << "\n";
    return 1;
  }
  ::chmod(data_dir.c_str(), 0700);
  // One api per data dir, and no `state prune` beside it (data_dir_lock.h).
  auto data_dir_lock = DataDirLock::acquire(data_dir);
  if (!data_dir_lock.ok()) {
    std::cerr << "cocoonbox api: " << data_dir_lock.status().message() << "\n";
    return 1;
  }

  asio::io_context io;
  http::ServerOptions server_options;
  if (!cfg.tls_cert.empty()) {
    auto tls = net::TlsContext::server({cfg.tls_cert, cfg.tls_key, {"h2", "http/1.1"}});
    if (!tls.ok()) {
      std::cerr << "cocoonbox api: " << tls.status().message() << "\n";
      return 1;
    }
    server_options.tls = *tls;
  }
  auto master = load_or_create_master_key(data_dir);
  if (!master.ok()) {
    std::cerr << "cocoonbox api: " << master.status().message() << "\n";
    return 1;
  }
  auto edge_key = load_or_create_edge_key(data_dir, *master);
  if (!edge_key.ok()) {
    std::cerr << "cocoonbox api: " << edge_key.status().message() << "\n";
    return 1;
  }
  auto store = Store::open(data_dir);
  if (!store.ok()) {
    std::cerr << "cocoonbox api: " << store.status().message() << "\n";
    return 1;
  }
  // The model door (model_door.h): users without their own gateway use this one.
  ModelDoorOptions door_options;
  if (!cfg.gateway_url.empty() || !cfg.gateway_key_file.empty()) {
    auto gw = load_default_gateway(cfg.gateway_url, cfg.gateway_key_file);
    if (!gw.ok()) {
      std::cerr << "cocoonbox api: " << gw.status().message() << "\n";
      return 2;
    }
    door_options.default_gateway = std::move(*gw);
  }
  // The door's /cocoonbox.state/ routes go to the state manager, made below (it needs the
  // box manager, which needs the door).
  StateManager* state_routes_to = nullptr;
  door_options.state_routes = [&state_routes_to](http::ServerRequest& req,
                                                 std::string box_id) -> asio::awaitable<void> {
    if (state_routes_to == nullptr) {
      (void)co_await http::respond(req, 503, "text/plain", "state layer not ready\n");
      co_return;
    }
    co_await state_routes_to->serve_door(req, std::move(box_id));
  };
  ModelDoor door(io.get_executor(), **store, *master, std::move(door_options));

  machines::LocalOptions local_options;
  auto backend = machines::LocalBackend::create(local_options);
  if (!backend.ok()) {
    std::cerr << "cocoonbox api: " << backend.status().message() << "\n";
    return 1;
  }
  if (!(*backend)->isolated()) {
    log::warn("BOXES ARE NOT ISOLATED", {{"why", (*backend)->isolation_note()}});
    std::cerr << "cocoonbox api: WARNING: " << (*backend)->isolation_note() << "\n";
  }

  std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
  BoxManagerOptions box_options;
  box_options.data_dir = data_dir;
  box_options.agent_argv = {exe,          "agent",
                            "--socket",   "/run/cocoonbox/agent.sock",
                            "--identity", "/run/cocoonbox/identity",
                            "--data-dir", "/var/lib/cocoonbox-agent"};
  box_options.idle_hibernate = *idle;
  // A hibernate saves the box first if it changed (state_manager.h; made below).
  StateManager* saves_to = nullptr;
  box_options.before_hibernate =
      [&saves_to](const Box& box,
                  std::shared_ptr<http::H2Connection> conn) -> asio::awaitable<void> {
    if (saves_to != nullptr) co_await saves_to->save_before_hibernate(box, std::move(conn));
  };
  box_options.restore_lost_data =
      [&saves_to](const Box& box,
                  std::shared_ptr<http::H2Connection> conn) -> asio::awaitable<std::string> {
    if (saves_to == nullptr) co_return std::string();
    co_return co_await saves_to->restore_lost(box, std::move(conn));
  };
  box_options.before_boot = [&door](const Box& box, const fs::path& box_dir) {
    Status opened = door.ensure_open(box.id, box_dir / "run" / kModelDoorSocket);
    if (!opened.ok()) log::error("model door", {{"box", box.id}, {"error", opened.to_string()}});
  };
  BoxManager manager(io.get_executor(), **store, **backend, *edge_key, box_options);
  // The state layer (state_manager.h): --state-store URL, else the filesystem store, by
  // default under the data dir.
  std::unique_ptr<state::Store> state_store;
  if (!cfg.state_store.empty()) {
    auto opened = state::open_store_url(cfg.state_store);
    if (!opened.ok()) {
      std::cerr << "cocoonbox api: --state-store: " << opened.status().message() << "\n";
      return 1;
    }
    state_store = std::move(*opened);
  } else {
    fs::path state_dir = cfg.state_dir.empty() ? data_dir / "state" : fs::path(cfg.state_dir);
    auto fs_store = state::FsStore::open(state_dir);
    if (!fs_store.ok()) {
      std::cerr << "cocoonbox api: --state-dir " << state_dir << ": " << fs_store.status().message()
                << "\n";
      return 1;
    }
    state_store = std::move(*fs_store);
  }
  if (auto* fs_store = dynamic_cast<state::FsStore*>(state_store.get()); fs_store != nullptr) {
    (void)fs_store->remove_temporaries();
  } else if (auto* s3 = dynamic_cast<state::S3Store*>(state_store.get()); s3 != nullptr) {
    // A wrong endpoint, bucket or secret fails the start, not the first save.
    Status reachable = s3->check_bucket();
    if (!reachable.ok()) {
      std::cerr << "cocoonbox api: --state-store " << s3->describe() << ": " << reachable.message()
                << "\n";
      return 1;
    }
    log::info("state store", {{"store", s3->describe()}});
  }
  StateManagerOptions state_options;
  state_options.autosave = *autosave;
  StateManager state_manager(io.get_executor(), **store, manager, *master, std::move(state_store),
                             state_options);
  state_routes_to = &state_manager;
  saves_to = &state_manager;
  StateGc state_gc(io.get_executor(), **store, *master, state_manager.locks(),
                   state_manager.store(), std::move(*gc), *gc_interval);
  TokenIndex tokens(**store);
  BoxesService boxes_service(manager, tokens, **store, &state_manager);
  Edge edge(manager, tokens);
  ControlMcp control_mcp(io.get_executor(), manager, tokens);

  grpc::Server grpc_server;
  grpc_server.add_service(boxes_service);
  http::Router router;
  router.handle("GET", "/healthz", [](http::ServerRequest& req) -> asio::awaitable<void> {
    (void)co_await http::respond(req, 200, "text/plain; charset=utf-8", "ok\n");
  });
  router.handle("GET", "/metrics", [&](http::ServerRequest& req) -> asio::awaitable<void> {
    std::map<std::string, int> by_state;
    for (auto s : {BoxState::kAbsent, BoxState::kStarting, BoxState::kRunning,
                   BoxState::kHibernating, BoxState::kHibernated, BoxState::kFailed})
      by_state[std::string(box_state_name(s))] = 0;
    auto all = co_await (*store)->list_all_boxes();
    if (all.ok()) {
      for (const auto& b : *all)
        if (!b.deleted_at_ms) ++by_state[std::string(box_state_name(b.state))];
    }
    std::string text = "# HELP cocoonbox_boxes Boxes by state.\n# TYPE cocoonbox_boxes gauge\n";
    for (const auto& [s, n] : by_state)
      text += fmt::format("cocoonbox_boxes{{state=\"{}\"}} {}\n", s, n);
    text +=
        "# HELP cocoonbox_operations_total Finished box operations.\n"
        "# TYPE cocoonbox_operations_total counter\n";
    for (const auto& [k, n] : manager.counters().operations) {
      auto us = k.rfind('_');
      text += fmt::format("cocoonbox_operations_total{{kind=\"{}\",result=\"{}\"}} {}\n",
                          k.substr(0, us), k.substr(us + 1), n);
    }
    const auto& e = edge.counters();
    text += fmt::format(
        "# HELP cocoonbox_edge_streams_total Streams relayed to boxes.\n"
        "# TYPE cocoonbox_edge_streams_total counter\ncocoonbox_edge_streams_total {}\n"
        "# HELP cocoonbox_edge_streams_open Streams open to boxes now.\n"
        "# TYPE cocoonbox_edge_streams_open gauge\ncocoonbox_edge_streams_open {}\n"
        "# HELP cocoonbox_edge_refused_total Edge calls refused (token, box, start).\n"
        "# TYPE cocoonbox_edge_refused_total counter\ncocoonbox_edge_refused_total {}\n"
        "# HELP cocoonbox_edge_bytes_total Body bytes relayed.\n"
        "# TYPE cocoonbox_edge_bytes_total counter\n"
        "cocoonbox_edge_bytes_total{{direction=\"to_box\"}} {}\n"
        "cocoonbox_edge_bytes_total{{direction=\"from_box\"}} {}\n",
        e.streams_total, e.streams_open, e.refused_total, e.bytes_to_box, e.bytes_from_box);
    text += door.metrics_text();
    (void)co_await http::respond(req, 200, "text/plain; version=0.0.4", text);
  });
  control_mcp.mount(router);  // the exact path wins over the edge's /cocoonbox.mcp/ prefix
  edge.register_with(router);
  grpc_server.register_with(router);

  // h2c only where nobody else can listen in (architecture §4).
  if (!server_options.tls) {
    std::string h = listen->first == "localhost" ? "127.0.0.1" : listen->first;
    if (!h.empty() && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    std::error_code aec;
    auto addr = asio::ip::make_address(h, aec);
    if (aec || !addr.is_loopback()) {
      std::cerr << "cocoonbox api: refusing plaintext on " << cfg.listen
                << " (not loopback); give --tls-cert and --tls-key\n";
      return 2;
    }
  }
  http::Server server(io.get_executor(), router, server_options);
  Status listened = server.listen_tcp(listen->first, listen->second);
  if (!listened.ok()) {
    std::cerr << "cocoonbox api: " << listened.message() << "\n";
    return 1;
  }
  std::string endpoint = fmt::format("{}://{}:{}", server_options.tls ? "https" : "http",
                                     listen->first, server.port());

  int exit_code = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        Status admin = co_await ensure_admin(**store, data_dir, endpoint);
        if (!admin.ok()) {
          std::cerr << "cocoonbox api: first start failed: " << admin.message() << "\n";
          exit_code = 1;
          io.stop();
          co_return;
        }
        auto refreshed = co_await tokens.refresh_if_changed();
        if (!refreshed.ok()) log::error("token index", {{"error", refreshed.status().to_string()}});
        co_await manager.recover();
        // Doors for boxes that kept running across a restart, then kept in step with changes.
        asio::co_spawn(io, door.follow(manager, data_dir / "boxes"), asio::detached);
        manager.start_idle_loop();
        state_manager.start_autosave_loop();
        state_gc.start();
        server.start();
        log::info("listening", {{"endpoint", endpoint},
                                {"data_dir", data_dir.string()},
                                {"backend", std::string((*backend)->name())},
                                {"isolated", (*backend)->isolated()}});
        // Admin changes made by another process (user add or rm, token revoke) apply within a
        // second.
        net::Timer t(co_await asio::this_coro::executor);
        for (;;) {
          t.expires_after(std::chrono::milliseconds(500));
          auto [ec2] = co_await t.async_wait();
          if (ec2) co_return;
          auto r = co_await tokens.refresh_if_changed();
          if (!r.ok()) log::warn("token index refresh", {{"error", r.status().to_string()}});
          // A `user rm` marks the user's boxes deleted; their machines are stopped here.
          if (r.ok() && *r) co_await manager.release_deleted();
        }
      },
      asio::detached);

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const std::error_code&, int sig) {
    log::info("shutting down", {{"signal", sig}});
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          manager.stop();
          state_manager.stop();
          state_gc.stop();
          control_mcp.close_all();
          co_await server.shutdown(net::after(std::chrono::seconds(5)));
          io.stop();
        },
        asio::detached);
  });
  io.run();
  log::info("stopped; boxes keep running and are re-adopted at the next start");
  return exit_code;
}

}  // namespace

int run(std::span<char* const> args) {
  CLI::App app("cocoonbox api: the control plane and edge", "cocoonbox api");
  Config cfg;
  app.set_config("--config", "", "read flags from a TOML/INI file");
  app.add_option("--listen", cfg.listen, "HOST:PORT to serve (plaintext only on loopback)")
      ->capture_default_str();
  app.add_option("--data-dir", cfg.data_dir,
                 "api.db, keys and boxes (default $XDG_DATA_HOME/cocoonbox, or "
                 "/var/lib/cocoonbox-api as root)");
  app.add_option("--tls-cert", cfg.tls_cert,
                 "PEM certificate chain: serve TLS (ALPN h2, http/1.1)");
  app.add_option("--tls-key", cfg.tls_key, "PEM private key for --tls-cert");
  app.add_option("--backend", cfg.backend, "machines backend")->capture_default_str();
  app.add_option("--gateway-url", cfg.gateway_url,
                 "default model gateway (http(s)://host[:port][/prefix]) for users without one");
  app.add_option("--gateway-key-file", cfg.gateway_key_file,
                 "file (mode 0600) with the default gateway's key");
  app.add_option("--idle-hibernate", cfg.idle_hibernate,
                 "hibernate a box with no client attached this long (0 = never)")
      ->capture_default_str();
  auto* state_dir_opt = app.add_option("--state-dir", cfg.state_dir,
                                       "the filesystem store of saves (default <data-dir>/state)");
  app.add_option("--state-store", cfg.state_store,
                 "the store of saves as a URL: file:///DIR, or s3://BUCKET[/PREFIX]?endpoint="
                 "http(s)://HOST[:PORT]&access_key=ID&secret_file=/ABS/FILE[&region=R]"
                 "[&ca_file=/ABS/PEM] (src/state/README.md)")
      ->excludes(state_dir_opt);
  app.add_option("--autosave", cfg.autosave,
                 "save each running box this often, e.g. 6h (0 = never)")
      ->capture_default_str();
  app.add_option("--state-keep", cfg.state_keep,
                 "retention of saves: hourly=24h,daily=30d,weekly=26w[,all=D] (D: n and s m h d w)")
      ->capture_default_str();
  app.add_option("--state-gc-interval", cfg.state_gc_interval,
                 "run the GC pass (retention, then the chunk sweep) at start and this often "
                 "(0 = never)")
      ->capture_default_str();
  app.add_option("--state-gc-batch", cfg.state_gc_batch,
                 "chunks per delete call of the sweep (1..1000)")
      ->capture_default_str();
  AdminOptions admin;
  add_admin_commands(app, admin);
  StateCommandOptions state_cmd;
  add_state_commands(app, state_cmd);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (admin.command != AdminCommand::kNone) {
    admin.data_dir = cfg.data_dir.empty() ? default_data_dir() : fs::path(cfg.data_dir);
    admin.load_master_key = [](const fs::path& dir) { return load_or_create_master_key(dir); };
    return run_admin_command(admin);
  }
  if (state_cmd.requested) {
    state_cmd.data_dir = cfg.data_dir.empty() ? default_data_dir() : fs::path(cfg.data_dir);
    auto gc_opts = gc_options(cfg);
    if (!gc_opts.ok()) {
      std::cerr << "cocoonbox api state prune: " << gc_opts.status().message() << "\n";
      return 2;
    }
    state_cmd.gc = std::move(*gc_opts);
    // The store the server would open (serve() above): --state-store, else --state-dir.
    state_cmd.open_store = [&cfg, &state_cmd]() -> Result<std::unique_ptr<state::Store>> {
      if (!cfg.state_store.empty()) return state::open_store_url(cfg.state_store);
      fs::path dir = cfg.state_dir.empty() ? state_cmd.data_dir / "state" : fs::path(cfg.state_dir);
      ASSIGN_OR_RETURN(auto fs_store, state::FsStore::open(dir));
      return std::unique_ptr<state::Store>(std::move(fs_store));
    };
    return run_state_command(state_cmd, std::cout, std::cerr);
  }
  try {
    return serve(cfg);
  } catch (const std::exception& e) {
    log::error("api failed", {{"what", e.what()}});
    return 1;
  }
}

}  // namespace cb::api
