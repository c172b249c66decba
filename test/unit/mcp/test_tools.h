#pragma once
// Tools shared by the MCP unit tests: real handlers on a real ToolTable.
//   echo         {"text"} -> the text
//   image        a 4-byte PNG header as image content
//   structured   {"a":1} as structuredContent only (mirrored as text)
//   fail         a tool execution error (Status)
//   slow         reports progress 1, 2, 3 of 3, then waits until cancelled; records that
//   progress     reports progress 1, 2, 3 of 3, then returns "done"
//   throws       throws std::runtime_error

#include "mcp/server.h"
#include "net/signal.h"

#include <stdexcept>
#include <string>

namespace cb::mcp::testing {

struct TestTools {
  ToolTable table;
  bool slow_started = false;
  bool slow_cancelled = false;
  int slow_calls = 0;
  // Notified when slow starts waiting (after its progress) and when it observed cancellation.
  std::unique_ptr<net::Signal> slow_signal;

  static Tool tool(std::string name, std::string description) {
    Tool t;
    t.name = std::move(name);
    t.description = std::move(description);
    return t;
  }

  explicit TestTools(const net::Executor& ex) : slow_signal(std::make_unique<net::Signal>(ex)) {
    Tool echo = tool("echo", "Echoes its text argument");
    echo.input_schema = Json::parse(
        R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})");
    echo.annotations = Json{{"readOnlyHint", true}};
    table.add(echo, [](RequestContext&, const Json& args) -> asio::awaitable<Result<ToolResult>> {
      auto text = args.find("text");
      if (text == args.end() || !text->is_string()) {
        co_return invalid_argument("text: must be a string");
      }
      co_return ToolResult::text(text->get<std::string>());
    });
    table.add(tool("image", "A tiny image"),
              [](RequestContext&, const Json&) -> asio::awaitable<Result<ToolResult>> {
                ToolResult r;
                r.content.push_back(image_content(std::string("\x89PNG", 4), "image/png"));
                co_return r;
              });
    table.add(tool("structured", "Structured output"),
              [](RequestContext&, const Json&) -> asio::awaitable<Result<ToolResult>> {
                co_return ToolResult::structured_result(Json{{"a", 1}});
              });
    table.add(tool("fail", "Always fails"),
              [](RequestContext&, const Json&) -> asio::awaitable<Result<ToolResult>> {
                co_return failed_precondition("the tool failed on purpose");
              });
    table.add(tool("slow", "Reports progress, then waits until cancelled"),
              [this](RequestContext& ctx, const Json&) -> asio::awaitable<Result<ToolResult>> {
                ++slow_calls;
                for (int i = 1; i <= 3; ++i) {
                  std::optional<double> total = 3.0;
                  std::string message = "step " + std::to_string(i);
                  Status sent = co_await ctx.report_progress(i, total, message);
                  if (!sent.ok()) co_return sent;
                }
                slow_started = true;
                slow_signal->notify();
                net::Signal never(co_await asio::this_coro::executor);
                Status waited = co_await never.wait();
                if (waited.code() == Code::kCancelled) {
                  slow_cancelled = true;
                  slow_signal->notify();
                }
                co_return ToolResult::text("finished");
              });
    table.add(tool("progress", "Reports progress, then finishes"),
              [](RequestContext& ctx, const Json&) -> asio::awaitable<Result<ToolResult>> {
                for (int i = 1; i <= 3; ++i) {
                  std::optional<double> total = 3.0;
                  std::string message = "step " + std::to_string(i);
                  Status sent = co_await ctx.report_progress(i, total, message);
                  if (!sent.ok()) co_return sent;
                }
                co_return ToolResult::text("done");
              });
    table.add(tool("throws", "Throws"),
              [](RequestContext&, const Json&) -> asio::awaitable<Result<ToolResult>> {
                throw std::runtime_error("boom");
                co_return ToolResult::text("unreachable");
              });
  }
};

}  // namespace cb::mcp::testing
