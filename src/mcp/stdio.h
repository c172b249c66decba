#pragma once
// The stdio transport (MCP basic/transports, "stdio"): one session over newline-delimited
// JSON-RPC, messages in on one file descriptor (stdin), out on another (stdout). Logs never go
// to the output descriptor (cb::log writes to stderr).
//
//   mcp::Server server(options, tools);
//   Status st = co_await mcp::serve_stdio(server, co_await asio::this_coro::executor, {});
//
// Framing: README.md §stdio. Requests run concurrently; responses and notifications are
// written whole, one per line, in the order they were produced. When the input ends the
// transport waits for the requests in progress, writes their responses and returns; when the
// output fails (the client is gone) it cancels them and returns. Cancelling the coroutine
// cancels the requests too.
//
// The process must ignore SIGPIPE (a client that exits makes the next write fail with EPIPE
// instead of killing us). The descriptors are not closed; their O_NONBLOCK flag is restored
// on return.
//
// Affinity: runs on |executor|, the executor of the Server's sessions.

#include "base/result.h"
#include "mcp/server.h"
#include "net/asio.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cb::mcp {

struct StdioOptions {
  int in_fd = 0;
  int out_fd = 1;
  // A longer line is dropped and answered with kInvalidRequest "message too large".
  size_t max_line_bytes = 16u << 20;
  // Output waiting to be written beyond this makes request handlers wait (backpressure from
  // a client that does not read).
  size_t max_queued_bytes = 8u << 20;
};

// Serves one session until the input ends or the output fails. Returns ok at the end of the
// input; kUnavailable when writing failed; kCancelled when cancelled.
asio::awaitable<Status> serve_stdio(Server& server, net::Executor executor, StdioOptions options);

// Splits a byte stream into lines (sans-I/O, house style H13). A line ends with LF; a CR
// before the LF is dropped. Exposed for tests.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line_bytes) : max_(max_line_bytes) {}
  struct Line {
    std::string text;
    bool too_long = false;  // the line exceeded the limit; |text| is empty
  };
  // Appends |bytes| and returns the lines they completed.
  std::vector<Line> feed(std::string_view bytes);
  // The unterminated last line at the end of input, if any.
  std::vector<Line> finish();

 private:
  size_t max_;
  std::string partial_;
  bool discarding_ = false;  // inside a line that is too long
};

}  // namespace cb::mcp
