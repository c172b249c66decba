// MCP interop test server on cocoonbox's src/mcp: the peer the MCP TypeScript SDK client
// (mcp_sdk_client.mjs) checks, over stdio and over Streamable HTTP.
//
//   mcp_test_server --stdio
//   mcp_test_server --http --port=0          prints "listening on port N"; endpoint /mcp
//
// Tools (tools/list pages hold 2, so clients must follow cursors):
//   echo {text}          the text
//   add {a, b}           structured output {sum} with an outputSchema (mirrored as text)
//   image                a 1x1 PNG as image content
//   fail                 a tool execution error (isError)
//   slow {steps}         progress 1..steps of steps, then waits until cancelled
//   stats                {"slow_cancelled": n}: how many slow calls saw their cancellation
//   toggle               adds or removes the tool "extra" and sends list_changed
//   extra                (only while toggled on) "extra"

#include "base/log.h"
#include "http/server.h"
#include "mcp/http_server.h"
#include "mcp/server.h"
#include "mcp/stdio.h"
#include "net/signal.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

namespace cb::interop {
namespace {

using mcp::Json;

// A 1x1 transparent PNG.
const unsigned char kPng[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
    0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
    0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78,
    0x9c, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00,
    0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

mcp::Tool tool(const std::string& name, const std::string& description, const char* schema) {
  mcp::Tool t;
  t.name = name;
  t.description = description;
  t.input_schema = Json::parse(schema);
  return t;
}

class TestTools {
 public:
  TestTools() {
    tools_.add(
        tool("echo", "Echoes its text",
             R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})"),
        [](mcp::RequestContext&, const Json& args) -> asio::awaitable<Result<mcp::ToolResult>> {
          auto text = args.find("text");
          if (text == args.end() || !text->is_string()) {
            co_return invalid_argument("text: must be a string");
          }
          co_return mcp::ToolResult::text(text->get<std::string>());
        });
    mcp::Tool add = tool(
        "add", "Adds two numbers",
        R"({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]})");
    add.output_schema = Json::parse(
        R"({"type":"object","properties":{"sum":{"type":"number"}},"required":["sum"]})");
    add.annotations = Json::parse(R"({"readOnlyHint":true})");
    tools_.add(
        add,
        [](mcp::RequestContext&, const Json& args) -> asio::awaitable<Result<mcp::ToolResult>> {
          if (!args.contains("a") || !args["a"].is_number() || !args.contains("b") ||
              !args["b"].is_number()) {
            co_return invalid_argument("a and b must be numbers");
          }
          Json sum = Json::object();
          sum["sum"] = args["a"].get<double>() + args["b"].get<double>();
          co_return mcp::ToolResult::structured_result(sum);
        });
    tools_.add(tool("image", "A 1x1 PNG", R"({"type":"object"})"),
               [](mcp::RequestContext&, const Json&) -> asio::awaitable<Result<mcp::ToolResult>> {
                 mcp::ToolResult r;
                 std::string png(reinterpret_cast<const char*>(kPng), sizeof(kPng));
                 std::string mime = "image/png";
                 r.content.push_back(mcp::image_content(png, mime));
                 co_return r;
               });
    tools_.add(tool("fail", "Always fails", R"({"type":"object"})"),
               [](mcp::RequestContext&, const Json&) -> asio::awaitable<Result<mcp::ToolResult>> {
                 co_return failed_precondition("this tool always fails");
               });
    tools_.add(tool("slow", "Reports progress, then runs until cancelled",
                    R"({"type":"object","properties":{"steps":{"type":"integer"}}})"),
               [this](mcp::RequestContext& ctx,
                      const Json& args) -> asio::awaitable<Result<mcp::ToolResult>> {
                 const int steps = args.value("steps", 3);
                 for (int i = 1; i <= steps; ++i) {
                   std::optional<double> total = steps;
                   std::string message = "step " + std::to_string(i);
                   Status sent = co_await ctx.report_progress(i, total, message);
                   if (!sent.ok()) co_return sent;
                 }
                 net::Signal never(co_await asio::this_coro::executor);
                 Status waited = co_await never.wait();
                 if (waited.code() == Code::kCancelled) ++slow_cancelled_;
                 co_return mcp::ToolResult::text("cancelled");
               });
    tools_.add(
        tool("stats", "Counters", R"({"type":"object"})"),
        [this](mcp::RequestContext&, const Json&) -> asio::awaitable<Result<mcp::ToolResult>> {
          Json stats = Json::object();
          stats["slow_cancelled"] = slow_cancelled_;
          co_return mcp::ToolResult::structured_result(stats);
        });
    tools_.add(
        tool("toggle", "Adds or removes the tool extra", R"({"type":"object"})"),
        [this](mcp::RequestContext&, const Json&) -> asio::awaitable<Result<mcp::ToolResult>> {
          bool added = false;
          if (!tools_.remove("extra")) {
            tools_.add(
                tool("extra", "Exists while toggled on", R"({"type":"object"})"),
                [](mcp::RequestContext&, const Json&) -> asio::awaitable<Result<mcp::ToolResult>> {
                  co_return mcp::ToolResult::text("extra");
                });
            added = true;
          }
          server_->notify_tools_list_changed();
          co_return mcp::ToolResult::text(added ? "added" : "removed");
        });
  }

  mcp::ToolTable& table() { return tools_; }
  void set_server(mcp::Server* server) { server_ = server; }

 private:
  mcp::ToolTable tools_;
  mcp::Server* server_ = nullptr;
  int slow_cancelled_ = 0;
};

int run(int argc, char** argv) {
  CLI::App app("MCP interop test server on cocoonbox's src/mcp");
  bool stdio = false;
  bool http = false;
  int port = 0;
  std::string host = "127.0.0.1";
  app.add_flag("--stdio", stdio, "serve one session on stdin/stdout");
  app.add_flag("--http", http, "serve Streamable HTTP on /mcp");
  app.add_option("--port", port, "TCP port; 0 picks a free one")->check(CLI::Range(0, 65535));
  app.add_option("--host", host, "listen address (loopback by default)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (stdio == http) {
    std::cerr << "mcp_test_server: give exactly one of --stdio and --http\n";
    return 2;
  }
  log::init_from_env();
  std::signal(SIGPIPE, SIG_IGN);

  asio::io_context io;
  TestTools tools;
  mcp::ServerOptions options;
  options.info.name = "cocoonbox-mcp-test-server";
  options.info.version = "1.0.0";
  options.instructions = "A test server for interop checks.";
  options.tools_page_size = 2;
  mcp::Server server(options, tools.table());
  tools.set_server(&server);

  if (stdio) {
    Status result;
    mcp::StdioOptions stdio_options;
    asio::co_spawn(io, mcp::serve_stdio(server, io.get_executor(), stdio_options),
                   [&](std::exception_ptr e, Status st) {
                     result = e ? internal_error("serve_stdio threw") : std::move(st);
                   });
    io.run();
    if (!result.ok()) log::warn("stdio session ended", {{"status", result.to_string()}});
    return result.ok() ? 0 : 1;
  }

  http::Router router;
  mcp::HttpServerTransport transport(server, io.get_executor(), mcp::HttpServerOptions{});
  transport.mount(router, "/mcp");
  http::Server http_server(io.get_executor(), router, http::ServerOptions{});
  if (Status st = http_server.listen_tcp(host, static_cast<uint16_t>(port)); !st.ok()) {
    std::cerr << "mcp_test_server: " << st.to_string() << "\n";
    return 1;
  }
  http_server.start();
  std::printf("listening on port %u\n", http_server.port());
  std::fflush(stdout);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const std::error_code&, int) {
    transport.close_all();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          co_await http_server.shutdown(net::after(std::chrono::seconds(2)));
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
