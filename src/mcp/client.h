#pragma once
// The Streamable HTTP transport, client side: an MCP client session over an existing HTTP/2
// connection (shared with other users: the bridge holds one connection to the api for the
// control and the box endpoints), or over HTTP/1.1 connections it dials itself.
//
//   mcp::ClientOptions o;
//   o.path = "/cocoonbox.mcp/control";
//   o.headers = {{"authorization", "Bearer " + token}};
//   auto client = mcp::Client::over_h2(conn, o);
//   auto init = co_await client->initialize(net::after(10s));
//   auto tools = co_await client->list_all_tools({});
//   mcp::CallOptions call;
//   call.on_progress = [&](const mcp::Json& p) -> asio::awaitable<void> { ...; co_return; };
//   auto result = co_await client->call_tool("box_status", args, call);
//
// Replies may come as JSON or as an SSE stream; progress for a call goes to its on_progress,
// every other server message (list_changed, progress without a handler, notifications on the
// GET stream) to the notification handler. Server requests are answered: ping with {}, others
// with -32601.
//
// Cancellation: when the coroutine awaiting request() (or a call built on it) is cancelled or
// its deadline passes, the client abandons the HTTP exchange (HTTP/2: RST_STREAM; HTTP/1.1:
// closes that connection), sends notifications/cancelled for the request and returns
// kCancelled (kDeadlineExceeded). The coroutine's throw_if_cancelled is set to false.
//
// Errors shared by every call: kFailedPrecondition (not initialized; or 406/415 from the
// server), kUnavailable (connection lost, 5xx, a reply stream that ended without the
// response), kNotFound (404: the server ended the session; call initialize() again),
// kUnauthenticated (401), kPermissionDenied (403), kInvalidArgument (400), kUnimplemented
// (405), kDeadlineExceeded, kCancelled, kInternal (a reply that is not what MCP allows).
//
// Affinity: the connection's executor. Calls may run concurrently from several coroutines.
// Lifetime: the client must outlive its calls in progress.

#include "base/result.h"
#include "http/h2_connection.h"
#include "http/headers.h"
#include "http/http1_client.h"
#include "mcp/jsonrpc.h"
#include "mcp/protocol.h"
#include "net/asio.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cb::mcp {

struct ClientOptions {
  std::string path = "/mcp";
  std::string authority = "localhost";  // :authority / Host
  std::string scheme = "http";
  // Sent with every request: authorization, x-cocoonbox-box, ...
  http::Headers headers;
  Implementation client_info = default_client_info();
  Json capabilities = Json::object();
  // What initialize asks for; the server may answer another supported revision.
  std::string protocol_version = std::string(kLatestProtocolVersion);
  // Deadline of a call that gives none.
  std::chrono::milliseconds request_timeout = std::chrono::minutes(5);
  // A JSON reply or one SSE event beyond this is kResourceExhausted.
  size_t max_message_bytes = 16u << 20;

  static Implementation default_client_info() {
    Implementation i;
    i.name = "cocoonbox";
    i.version = "0";
    return i;
  }
};

// Server notifications and progress are delivered through async callbacks, awaited in order
// while the reply is read (a slow callback slows that reply down).
using JsonCallback = std::function<asio::awaitable<void>(const Json& params)>;
using MessageCallback = std::function<asio::awaitable<void>(const Message& message)>;

struct CallOptions {
  // kNoDeadline: now + ClientOptions::request_timeout.
  net::Deadline deadline = net::kNoDeadline;
  // When set, the request carries _meta.progressToken and each notifications/progress for it
  // is passed here (its params: progressToken, progress, total, message).
  JsonCallback on_progress;
};

struct InitializeResult {
  std::string protocol_version;
  Implementation server_info;
  Json capabilities = Json::object();
  std::string instructions;
  Json raw;  // the whole result object
};

class Client {
 public:
  // Requests go on new streams of |conn| (shared with other users).
  static std::unique_ptr<Client> over_h2(std::shared_ptr<http::H2Connection> conn,
                                         ClientOptions options);
  // Each exchange takes an idle connection or dials one (keep-alive connections are reused).
  static std::unique_ptr<Client> over_http1(net::Executor executor, http::Http1DialOptions dial,
                                            ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // HTTP/2 only: later requests use |conn| (e.g. after the old one died); the MCP session is
  // not tied to a connection and goes on.
  void set_connection(std::shared_ptr<http::H2Connection> conn);

  // Receives every server message not consumed by a call's on_progress: notifications
  // (notifications/tools/list_changed, progress without a handler, ...) from replies and
  // from listen().
  void set_notification_handler(MessageCallback handler);

  // initialize, then notifications/initialized. May be called again to start a new session
  // (after kNotFound). Errors as above, and kUnimplemented when the server answers a
  // protocol revision we do not speak.
  asio::awaitable<Result<InitializeResult>> initialize(net::Deadline deadline);

  // A raw request: the server's Reply (a result, or a JSON-RPC error passed through as is).
  // A non-ok Status means no reply: see the header comment. |params| null sends none.
  asio::awaitable<Result<Reply>> request(std::string method, Json params, CallOptions options);
  // A raw notification (202 expected).
  asio::awaitable<Status> notify(std::string method, Json params);

  asio::awaitable<Status> ping(net::Deadline deadline);
  // One page of tools/list; |cursor| "" for the first.
  asio::awaitable<Result<ToolsPage>> list_tools(std::string cursor, CallOptions options);
  // Every page of tools/list (at most 1000 pages).
  asio::awaitable<Result<std::vector<Tool>>> list_all_tools(CallOptions options);
  // tools/call. A tool execution error is a ToolResult with is_error; a JSON-RPC error is a
  // Status (status_from_rpc_error: kInvalidArgument for an unknown tool or bad params).
  asio::awaitable<Result<ToolResult>> call_tool(std::string name, Json arguments,
                                                CallOptions options);

  // Opens the GET stream and passes the server's messages to the notification handler until
  // the server ends the stream (ok), the session ends (kNotFound), or the coroutine is
  // cancelled (kCancelled). kUnimplemented when the server offers no stream (405).
  asio::awaitable<Status> listen();

  // DELETE: ends the session on the server (405 is taken as ok) and forgets it.
  asio::awaitable<Status> close(net::Deadline deadline);

  bool initialized() const { return initialized_; }
  const std::string& session_id() const { return session_id_; }
  const std::string& protocol_version() const { return protocol_version_; }
  const InitializeResult& server() const { return server_; }

  // Internal: one HTTP exchange (HTTP/2 stream or HTTP/1.1 request). Public for client.cc.
  class Exchange;
  class Transport;

 private:
  Client(std::unique_ptr<Transport> transport, ClientOptions options);

  http::Headers request_headers(bool post) const;
  asio::awaitable<Result<Reply>> exchange(const Message& request, const CallOptions& options,
                                          bool initialize);
  asio::awaitable<Status> post_message(const Message& message, net::Deadline deadline);
  asio::awaitable<void> dispatch(const Message& message, const Json& own_id,
                                 const CallOptions* options);
  void forget_session();

  std::unique_ptr<Transport> transport_;
  ClientOptions options_;
  MessageCallback notification_handler_;
  int64_t next_id_ = 1;
  bool initialized_ = false;
  std::string session_id_;
  std::string protocol_version_;
  InitializeResult server_;
};

}  // namespace cb::mcp
