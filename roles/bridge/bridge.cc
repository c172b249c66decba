#include "roles/bridge/bridge.h"

#include "base/file.h"
#include "base/log.h"
#include "client/config.h"
#include "client/connect.h"
#include "mcp/client.h"
#include "mcp/server.h"
#include "mcp/stdio.h"
#include "tools/contract.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cb::bridge {

namespace fs = std::filesystem;
using mcp::Json;
using namespace std::chrono_literals;

namespace {

constexpr auto kFirstBackoff = 1s;
constexpr auto kMaxBackoff = 60s;

fs::path cache_file() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/')
    return fs::path(x) / "cocoonbox" / "tools.json";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/')
    return fs::path(h) / ".cache" / "cocoonbox" / "tools.json";
  return {};
}

std::vector<mcp::Tool> parse_tools(const Json& array) {
  std::vector<mcp::Tool> out;
  if (!array.is_array()) return out;
  for (const auto& t : array) {
    auto tool = mcp::Tool::from_json(t);
    if (tool.ok()) out.push_back(std::move(*tool));
  }
  return out;
}

Json tools_json(const std::vector<mcp::Tool>& tools) {
  Json a = Json::array();
  for (const auto& t : tools) a.push_back(t.to_json());
  return a;
}

// Where the box tools came from, for the log and for deciding whether a live list is news.
enum class Source { kCompiled, kCache, kLive };

class Bridge final : public mcp::ToolProvider {
 public:
  Bridge(std::optional<client::Connection> conn, std::string login_error, std::string default_box,
         bool no_wake)
      : conn_(std::move(conn)),
        login_error_(std::move(login_error)),
        default_box_(std::move(default_box)),
        no_wake_(no_wake),
        cache_(cache_file()) {
    control_tools_ = parse_tools(tools::control_tools());
    box_tools_ = parse_tools(tools::box_tools());
    if (auto cached = read_cache(); !cached.empty()) {
      box_tools_ = std::move(cached);
      box_source_ = Source::kCache;
    }
  }

  void set_server(mcp::Server* server) { server_ = server; }

  asio::awaitable<Result<std::vector<mcp::Tool>>> list_tools(mcp::RequestContext&) override {
    co_return merged();
  }

  asio::awaitable<mcp::Reply> call_tool(mcp::RequestContext& ctx, const std::string& name,
                                        const Json& arguments) override {
    const bool control = has(control_tools_, name);
    const bool box = !control && has(box_tools_, name);
    if (!control && !box) co_return mcp::Reply::unknown_tool(name);
    auto ready = co_await ensure_connected();
    if (!ready.ok())
      co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(ready.message()));
    if (control) {
      const std::string no_prefix;
      auto r = co_await call_control(ctx, name, arguments, no_prefix);
      co_return r;
    }
    co_return co_await call_box(ctx, name, arguments);
  }

  // At start, in the background: the live control list, and the default box's tools when it
  // is already RUNNING (never waking it).
  asio::awaitable<void> refresh() {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (!(co_await ensure_connected()).ok()) co_return;
    co_await refresh_control();
    auto st = co_await box_status(default_box_);
    if (st.ok() && st->value("state", "") == "running") co_await refresh_box(st->value("id", ""));
  }

 private:
  static bool has(const std::vector<mcp::Tool>& tools, const std::string& name) {
    return std::any_of(tools.begin(), tools.end(),
                       [&](const mcp::Tool& t) { return t.name == name; });
  }

  // Control tools as they are; box tools with an optional `box` argument.
  std::vector<mcp::Tool> merged() const {
    std::vector<mcp::Tool> out = control_tools_;
    for (mcp::Tool t : box_tools_) {
      if (has(control_tools_, t.name)) continue;
      if (!t.input_schema.contains("properties")) t.input_schema["properties"] = Json::object();
      t.input_schema["properties"]["box"] = {
          {"type", "string"},
          {"description",
           fmt::format("The box to act in: name or id. Default: {}.", default_box_)}};
      out.push_back(std::move(t));
    }
    return out;
  }

  std::vector<mcp::Tool> read_cache() const {
    if (cache_.empty()) return {};
    std::ifstream in(cache_);
    if (!in) return {};
    std::stringstream s;
    s << in.rdbuf();
    Json j = Json::parse(s.str(), nullptr, false);
    return j.is_discarded() ? std::vector<mcp::Tool>() : parse_tools(j);
  }

  void write_cache(const std::vector<mcp::Tool>& tools) const {
    if (cache_.empty()) return;
    AtomicWriteOptions o;
    o.create_parents = true;
    Status st = write_file_atomic(cache_, tools_json(tools).dump(2) + "\n", o);
    if (!st.ok()) log::warn("bridge: cannot write the tool cache", {{"error", st.to_string()}});
  }

  // One connection to the api, dialed on demand; after a failure, fail fast until the backoff
  // (1 s doubling to 60 s) has passed.
  asio::awaitable<Status> ensure_connected() {
    if (!conn_) co_return failed_precondition(login_error_);
    const auto now = std::chrono::steady_clock::now();
    if (now < retry_at_) {
      co_return unavailable(fmt::format(
          "cannot reach the api at {}: {} (next try in {} s)", conn_->endpoint.url, last_error_,
          std::chrono::duration_cast<std::chrono::seconds>(retry_at_ - now).count() + 1));
    }
    auto c = co_await conn_->channel->connection(net::after(10s));
    if (!c.ok()) {
      last_error_ = std::string(c.status().message());
      backoff_ = backoff_ == std::chrono::steady_clock::duration::zero()
                     ? std::chrono::steady_clock::duration(kFirstBackoff)
                     : std::min<std::chrono::steady_clock::duration>(backoff_ * 2, kMaxBackoff);
      retry_at_ = std::chrono::steady_clock::now() + backoff_;
      co_return unavailable(
          fmt::format("cannot reach the api at {}: {}; the bridge keeps "
                      "trying",
                      conn_->endpoint.url, last_error_));
    }
    backoff_ = {};
    if (*c != h2_) {
      h2_ = *c;
      for (auto& [path, client] : clients_) client->set_connection(h2_);
    }
    co_return ok_status();
  }

  // The MCP client for |path| on the shared connection, initialized.
  asio::awaitable<Result<mcp::Client*>> client_for(const std::string& path) {
    auto& slot = clients_[path];
    if (!slot) {
      mcp::ClientOptions o;
      o.path = path;
      o.authority = conn_->endpoint.host;
      o.scheme = conn_->endpoint.tls ? "https" : "http";
      o.headers.push_back(http::Header{std::string("authorization"), "Bearer " + conn_->token});
      o.client_info.name = "cocoonbox-bridge";
      o.client_info.version = COCOONBOX_BRIDGE_VERSION;
      slot = mcp::Client::over_h2(h2_, std::move(o));
      slot->set_notification_handler([this, path](const mcp::Message& m) -> asio::awaitable<void> {
        if (m.method == mcp::kToolsListChanged) {
          if (path == tools::kControlMcpPath)
            co_await refresh_control();
          else
            box_stale_ = true;
        }
      });
    }
    if (!slot->initialized()) {
      auto init = co_await slot->initialize(net::after(30s));
      if (!init.ok()) co_return init.status();
    }
    co_return slot.get();
  }

  // Calls |name| on |path|, passing progress on; re-initializes once when the server forgot
  // the session (404: an api restart, a recreated box).
  asio::awaitable<Result<mcp::ToolResult>> forward(mcp::RequestContext& ctx,
                                                   const std::string& path, const std::string& name,
                                                   const Json& args, const std::string& prefix) {
    double step = 0;
    mcp::CallOptions call;
    if (ctx.has_progress_token()) {
      call.on_progress = [&](const Json& p) -> asio::awaitable<void> {
        std::string message = prefix + p.value("message", "");
        (void)co_await ctx.report_progress(++step, std::nullopt, std::move(message));
      };
    }
    for (int attempt = 0;; ++attempt) {
      auto client = co_await client_for(path);
      if (!client.ok()) co_return client.status();
      auto r = co_await (*client)->call_tool(name, args, call);
      if (r.ok() || r.status().code() != Code::kNotFound || attempt > 0) co_return r;
      auto again = co_await (*client)->initialize(net::after(30s));
      if (!again.ok()) co_return again.status();
    }
  }

  asio::awaitable<mcp::Reply> call_control(mcp::RequestContext& ctx, const std::string& name,
                                           const Json& args, const std::string& prefix) {
    const std::string path(tools::kControlMcpPath);
    auto r = co_await forward(ctx, path, name, args, prefix);
    if (!r.ok())
      co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(describe(r.status())));
    co_return mcp::Reply::from_tool_result(*r);
  }

  std::string describe(const Status& st) const {
    if (st.code() == Code::kUnauthenticated)
      return fmt::format("the api refused the token ({}): run `cocoonbox login`", st.message());
    if (st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded)
      return fmt::format("cannot reach the api at {}: {}", conn_->endpoint.url, st.message());
    return std::string(st.message());
  }

  // box_status through the control MCP: the structured box, or why not.
  asio::awaitable<Result<Json>> box_status(const std::string& box) {
    auto client = co_await client_for(std::string(tools::kControlMcpPath));
    if (!client.ok()) co_return client.status();
    // Built field by field: gcc 12 rejects braced JSON with literals in a coroutine body.
    Json args = Json::object();
    args["box"] = box;
    // Named: gcc 12 destroys a braced temporary passed by value to a coroutine twice.
    const mcp::CallOptions plain;
    const std::string tool = "box_status";
    auto r = co_await (*client)->call_tool(tool, args, plain);
    if (!r.ok()) co_return r.status();
    if (r->is_error) {
      std::string text;
      for (const auto& c : r->content) text += c.value("text", "");
      co_return not_found(text);
    }
    co_return r->structured;
  }

  asio::awaitable<mcp::Reply> call_box(mcp::RequestContext& ctx, const std::string& name,
                                       const Json& arguments) {
    Json args = arguments;
    std::string box = default_box_;
    if (auto it = args.find("box"); it != args.end()) {
      if (!it->is_string() || it->get<std::string>().empty())
        co_return mcp::Reply::from_tool_result(
            mcp::ToolResult::error("arguments.box: want a box name or id"));
      box = it->get<std::string>();
      args.erase("box");
    }
    auto st = co_await box_status(box);
    if (!st.ok())
      co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(describe(st.status())));
    const std::string id = st->value("id", "");
    if (st->value("state", "") != "running") {
      if (no_wake_) {
        co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(fmt::format(
            "box {} is {}: call box_ensure with box \"{}\" to wake it, then call {} again "
            "(this bridge runs with --no-wake)",
            box, st->value("state", "not running"), box, name)));
      }
      Json ensure_args = Json::object();
      ensure_args["box"] = box;
      const std::string ensure_name = "box_ensure";
      auto woke = co_await call_control(ctx, ensure_name, ensure_args, "");
      auto woke_result = mcp::ToolResult::from_json(woke.result);
      if (!woke.ok() || !woke_result.ok() || woke_result->is_error) co_return woke;
    }
    const std::string path = std::string(tools::kBoxMcpPrefix) + id;
    const std::string no_prefix;
    auto r = co_await forward(ctx, path, name, args, no_prefix);
    if (!r.ok())
      co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(describe(r.status())));
    if (box_source_ != Source::kLive || box_stale_) co_await refresh_box(id);
    co_return mcp::Reply::from_tool_result(*r);
  }

  asio::awaitable<void> refresh_control() {
    auto client = co_await client_for(std::string(tools::kControlMcpPath));
    if (!client.ok()) co_return;
    const mcp::CallOptions plain;
    auto list = co_await (*client)->list_all_tools(plain);
    if (!list.ok()) co_return;
    if (tools_json(*list) != tools_json(control_tools_)) {
      control_tools_ = std::move(*list);
      changed();
    }
  }

  asio::awaitable<void> refresh_box(std::string id) {
    if (id.empty()) co_return;
    auto client = co_await client_for(std::string(tools::kBoxMcpPrefix) + id);
    if (!client.ok()) co_return;
    const mcp::CallOptions plain;
    auto list = co_await (*client)->list_all_tools(plain);
    if (!list.ok()) co_return;
    box_stale_ = false;
    box_source_ = Source::kLive;
    write_cache(*list);
    if (tools_json(*list) != tools_json(box_tools_)) {
      box_tools_ = std::move(*list);
      changed();
    }
  }

  void changed() {
    log::info("bridge: tool list changed");
    if (server_ != nullptr) server_->notify_tools_list_changed();
  }

  std::optional<client::Connection> conn_;
  std::string login_error_;
  std::string default_box_;
  bool no_wake_;
  fs::path cache_;
  mcp::Server* server_ = nullptr;
  std::vector<mcp::Tool> control_tools_;
  std::vector<mcp::Tool> box_tools_;
  Source box_source_ = Source::kCompiled;
  bool box_stale_ = false;
  std::shared_ptr<http::H2Connection> h2_;
  std::map<std::string, std::unique_ptr<mcp::Client>> clients_;
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::steady_clock::duration backoff_{};
  std::string last_error_;
};

}  // namespace

int run(std::span<char* const> args) {
  std::string box = "main";
  bool no_wake = false;
  CLI::App app("A stdio MCP server for local coding agents: your box's tools and its lifecycle.",
               "cocoonbox mcp");
  app.add_option("--box", box, "the box tools act in unless a call names one (default: main)");
  app.add_flag("--no-wake", no_wake,
               "do not wake a hibernated box for a box tool; the call fails and says to call "
               "box_ensure");
  app.footer(
      "Started by the client itself (see `cocoonbox setup claude|codex|cursor`), with no URL\n"
      "or token in its config: it uses `cocoonbox login`'s. Speaks MCP on stdin/stdout.");
  std::vector<std::string> argv = {"cocoonbox mcp"};
  for (size_t i = 1; i < args.size(); ++i) argv.emplace_back(args[i]);
  std::vector<const char*> cargv;
  for (auto& a : argv) cargv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // stdout is the protocol: logs go to stderr, quiet unless asked.
  if (std::getenv("COCOONBOX_LOG_LEVEL") == nullptr) log::set_min_level(log::Level::kWarn);

  asio::io_context io;
  // The login: endpoint and token, the token kept in memory only. Without one the bridge
  // still answers initialize and tools/list; calls say to log in.
  std::optional<client::Connection> conn;
  std::string login_error;
  auto dir = client::config_dir();
  if (!dir.ok()) {
    login_error = std::string(dir.status().message());
  } else if (auto cfg = client::load_config(*dir); !cfg.ok()) {
    login_error = std::string(cfg.status().message());
  } else if (!*cfg) {
    login_error = "not logged in: run `cocoonbox login` on this machine first";
  } else if (auto endpoint = client::parse_endpoint((*cfg)->endpoint); !endpoint.ok()) {
    login_error = std::string(endpoint.status().message());
  } else {
    std::optional<Result<std::string>> token;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto t = co_await client::load_token(*dir, **cfg);
          token.emplace(std::move(t));
        },
        asio::detached);
    io.run();
    io.restart();
    if (!token || !token->ok()) {
      login_error = token ? std::string(token->status().message()) : "cannot read the token";
    } else {
      auto c = client::open_connection(io.get_executor(), *endpoint, std::move(**token));
      if (c.ok())
        conn = std::move(*c);
      else
        login_error = std::string(c.status().message());
    }
  }
  if (!login_error.empty()) log::warn("bridge: no api", {{"why", login_error}});

  Bridge bridge(std::move(conn), login_error, box, no_wake);
  mcp::ServerOptions options;
  options.info.name = "cocoonbox";
  options.info.title = "cocoonbox";
  options.info.version = COCOONBOX_BRIDGE_VERSION;
  options.instructions = fmt::format(
      "Your cocoonbox boxes: persistent Linux machines in the cloud. Box tools (shell, "
      "read_file, ...) act in box {} unless you pass `box`; a hibernated box is woken on the "
      "first call{}. Lifecycle tools: box_status, box_ensure, box_hibernate, box_upgrade, "
      "box_list, box_create, box_delete.",
      box, no_wake ? " only by box_ensure (--no-wake)" : "");
  mcp::Server server(options, bridge);
  bridge.set_server(&server);
  int rc = 0;
  asio::co_spawn(io, bridge.refresh(), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const mcp::StdioOptions stdio;
        Status st = co_await mcp::serve_stdio(server, io.get_executor(), stdio);
        if (!st.ok()) {
          log::error("bridge: stdio", {{"error", st.to_string()}});
          rc = 1;
        }
        io.stop();
      },
      asio::detached);
  io.run();
  return rc;
}

}  // namespace cb::bridge
