#pragma once
// The MCP server, independent of the transport: the session lifecycle (initialize,
// notifications/initialized, ping), tools/list with cursors, tools/call dispatched to an async
// ToolProvider, progress notifications, notifications/cancelled, and list_changed.
//
// Pieces:
//   Server          configuration (serverInfo, instructions, capabilities, page size), the
//                   ToolProvider, extra method handlers, and the set of live sessions (so the
//                   owner can tell every client that the tool list changed).
//   ServerSession   one client's session: lifecycle state, negotiated version, requests in
//                   progress. Transports (stdio.h, http_server.h) create it through
//                   Server::open_session and feed it messages.
//   RequestContext  what a handler sees of its request: params, _meta, progress reporting,
//                   related notifications, the session, the HTTP request head and the
//                   authenticated principal.
//   ToolProvider    the owner's tools, async and free to change at runtime; ToolTable is the
//                   ready-made provider for a fixed or edited set of tools.
//
// A static server:
//
//   mcp::ToolTable tools;
//   tools.add(echo_tool, [](mcp::RequestContext& ctx, const mcp::Json& args)
//                            -> asio::awaitable<Result<mcp::ToolResult>> {
//     co_return mcp::ToolResult::text(args.value("text", ""));
//   });
//   mcp::Server server(options, tools);
//   co_await mcp::serve_stdio(server, ex, {});                 // or HttpServerTransport
//
// Concurrency: requests of one session run concurrently (a slow tool never blocks ping or a
// cancellation). A request handler runs as its own coroutine bound to a cancellation slot that
// fires when the client sends notifications/cancelled for it, when the session closes, or when
// the transport loses the request (HTTP: the POST's stream is reset or its connection lost):
// everything it awaits then completes with kCancelled, and no response is sent for it.
//
// Affinity: Server, every ServerSession and every handler live on one executor (house style
// H10). Lifetime: the Server and its ToolProvider outlive every session and transport.

#include "base/result.h"
#include "http/headers.h"
#include "mcp/jsonrpc.h"
#include "mcp/protocol.h"
#include "net/asio.h"
#include "net/signal.h"

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace cb::mcp {

class Server;
class ServerSession;

// How a request's related messages (progress, other notifications about it) reach the
// client: stdio writes them to stdout, HTTP sends them on the POST's SSE stream. Implemented
// by transports.
class RequestChannel {
 public:
  virtual ~RequestChannel() = default;
  // Errors: kUnavailable (the client is gone), kCancelled.
  virtual asio::awaitable<Status> send(const Message& message) = 0;
};

// How messages not related to a request (notifications/tools/list_changed) reach the client:
// stdout, or the HTTP GET stream. Implemented by transports.
class SessionOutlet {
 public:
  virtual ~SessionOutlet() = default;
  // Queues |message|; never blocks. A transport that cannot deliver it now may keep a bounded
  // number of such messages for later and drop the oldest.
  virtual void post(Message message) = 0;
};

// What the transport knows about the exchange that carried a request.
struct TransportContext {
  // HTTP: the head of the POST that carried the request (valid while the request is handled);
  // nullptr on stdio.
  const http::RequestHead* http = nullptr;
  // HTTP: what HttpServerOptions::authenticate returned for this HTTP request; "" otherwise.
  std::string principal;
};

class RequestContext {
 public:
  const Json& id() const { return request_.id; }
  const std::string& method() const { return request_.method; }
  // The request's params: an object (or array), or null when absent.
  const Json& params() const { return request_.params; }
  // params._meta, or null.
  const Json& meta() const { return meta_; }
  ServerSession& session() { return session_; }

  // HTTP only: the POST's request head; nullptr on stdio.
  const http::RequestHead* http_request() const { return transport_.http; }
  // The first value of header |name| (lower case) of the HTTP request; nullptr on stdio or
  // when absent. E.g. ctx.header("authorization").
  const std::string* header(std::string_view name) const;
  // The authenticated caller (HttpServerOptions::authenticate); "" on stdio.
  const std::string& principal() const { return transport_.principal; }

  // True when the request carried params._meta.progressToken.
  bool has_progress_token() const { return !progress_token_.is_null(); }
  // Sends notifications/progress for this request's token: |progress| so far, |total| when
  // known, |message| when not empty. Does nothing (ok) without a token, and skips a value that
  // does not exceed the last one sent (the spec requires progress to increase).
  // Errors: kCancelled (the request was cancelled), kUnavailable (the client is gone).
  asio::awaitable<Status> report_progress(double progress, std::optional<double> total,
                                          std::string message);
  // Sends any notification related to this request (on its HTTP SSE stream). Errors as above.
  asio::awaitable<Status> notify(std::string method, Json params);

  // True once the client sent notifications/cancelled for this request (or the session
  // closed). The handler's coroutine is cancelled too; this is for code that polls.
  bool cancel_requested() const;

 private:
  friend class ServerSession;
  struct InProgress;
  RequestContext(ServerSession& session, const Message& request, RequestChannel& channel,
                 const TransportContext& transport, InProgress& entry);

  ServerSession& session_;
  const Message& request_;
  RequestChannel& channel_;
  const TransportContext& transport_;
  InProgress& entry_;
  Json meta_;
  Json progress_token_;
  std::optional<double> last_progress_;
};

// The owner's tools. Both calls are async and are made for every tools/list and tools/call,
// so a provider whose tools change at runtime answers from its current state (and calls
// Server::notify_tools_list_changed() when they changed).
class ToolProvider {
 public:
  virtual ~ToolProvider() = default;
  // All tools, in a stable order (tools/list pages through them). A non-ok Status becomes a
  // JSON-RPC error (rpc_error_from_status).
  virtual asio::awaitable<Result<std::vector<Tool>>> list_tools(RequestContext& ctx) = 0;
  // Runs tool |name| with |arguments| (always an object). Reply::from_tool_result() for a
  // result, including tool failures (ToolResult::error: isError true); Reply::unknown_tool()
  // for a name it does not know; any other Reply::failure() is sent as that JSON-RPC error
  // (a forwarding provider passes a remote server's error through unchanged).
  virtual asio::awaitable<Reply> call_tool(RequestContext& ctx, const std::string& name,
                                           const Json& arguments) = 0;
};

// A ToolProvider holding tools and their handlers; tools may be added and removed at any time
// (then call Server::notify_tools_list_changed()). A call in progress keeps its handler alive
// even if the tool is removed meanwhile.
class ToolTable final : public ToolProvider {
 public:
  // Returns the tool's result. A non-ok Status is a tool execution error: the client gets a
  // result with isError true and the Status message as text (the spec's rule for failures
  // the model can act on, bad arguments included).
  using Handler =
      std::function<asio::awaitable<Result<ToolResult>>(RequestContext& ctx, const Json& args)>;

  // Adds |tool|, or replaces the tool of the same name (keeping its place in the order).
  void add(Tool tool, Handler handler);
  bool remove(std::string_view name);
  bool contains(std::string_view name) const;
  std::vector<Tool> tools() const;

  asio::awaitable<Result<std::vector<Tool>>> list_tools(RequestContext& ctx) override;
  asio::awaitable<Reply> call_tool(RequestContext& ctx, const std::string& name,
                                   const Json& arguments) override;

 private:
  struct Entry {
    Tool tool;
    std::shared_ptr<Handler> handler;  // co-owned by calls in progress
  };
  std::vector<Entry> entries_;
};

struct ServerOptions {
  Implementation info;       // serverInfo
  std::string instructions;  // "" = absent
  // Merged into the initialize result's capabilities; "tools" defaults to
  // {"listChanged": true}.
  Json capabilities = Json::object();
  // tools/list page size; 0 sends every tool in one page.
  size_t tools_page_size = 100;
  ParseLimits limits;
};

// A handler for a whole request (see Server::set_method). Its Reply is the response.
using MethodHandler = std::function<asio::awaitable<Reply>(RequestContext& ctx)>;
using NotificationHandler =
    std::function<void(ServerSession& session, const Message& notification)>;

class Server {
 public:
  // |tools| must outlive the server.
  Server(ServerOptions options, ToolProvider& tools);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Handles |method| with |handler|, replacing the built-in handling of tools/list or
  // tools/call when given those names (initialize and ping cannot be replaced). Handlers run
  // only after initialize.
  void set_method(std::string method, MethodHandler handler);
  // Handles every other request method (default: kMethodNotFound). E.g. a bridge forwarding
  // raw requests: ctx.method(), ctx.params().
  void set_fallback(MethodHandler handler);
  // Receives client notifications other than initialized and cancelled.
  void set_notification_handler(NotificationHandler handler);

  // Sends notifications/tools/list_changed to every initialized session.
  void notify_tools_list_changed();
  // Sends a notification to every initialized session.
  void notify_all(const std::string& method, const Json& params);

  // A new session whose unrelated messages go to |outlet| (not owned; outlives the
  // session). |id| is the transport's session id ("" for stdio). Used by transports.
  std::unique_ptr<ServerSession> open_session(net::Executor executor, SessionOutlet& outlet,
                                              std::string id);

  size_t session_count() const { return sessions_.size(); }
  const ServerOptions& options() const { return options_; }
  ToolProvider& tools() { return tools_; }

 private:
  friend class ServerSession;
  ServerOptions options_;
  ToolProvider& tools_;
  std::map<std::string, std::shared_ptr<MethodHandler>, std::less<>> methods_;
  std::shared_ptr<MethodHandler> fallback_;
  NotificationHandler notification_handler_;
  std::set<ServerSession*> sessions_;
};

class ServerSession {
 public:
  enum class State {
    kAwaitingInitialize,  // only initialize and ping are answered
    kInitialized,         // initialize answered (notifications/initialized is not awaited:
                          // over HTTP it may arrive after the next request)
    kClosed,              // every request is refused
  };

  ~ServerSession();
  ServerSession(const ServerSession&) = delete;
  ServerSession& operator=(const ServerSession&) = delete;

  // ---- Transport side.

  // Handles one request and returns the response to send, or nullopt when the request was
  // cancelled (notifications/cancelled, close()) and nothing must be sent. Related messages
  // go to |channel|. |request|, |channel| and |transport| must stay valid until it returns;
  // the session must outlive the call.
  asio::awaitable<std::optional<Message>> handle_request(Message request, RequestChannel& channel,
                                                         const TransportContext& transport);
  // Handles a notification from the client.
  void handle_notification(const Message& notification);
  // JSON-RPC batches are accepted only after a 2025-03-26 initialize.
  bool batches_allowed() const;
  // Cancels every request in progress and refuses new ones. Idempotent.
  void close();
  size_t requests_in_progress() const { return in_progress_.size(); }

  // ---- Owner side.

  // The transport's session id (HTTP: Mcp-Session-Id), "" on stdio.
  const std::string& id() const { return id_; }
  State state() const { return state_; }
  bool initialized() const { return state_ == State::kInitialized; }
  // The negotiated revision, "" before initialize.
  const std::string& protocol_version() const { return protocol_version_; }
  const Implementation& client_info() const { return client_info_; }
  const Json& client_capabilities() const { return client_capabilities_; }
  // True once notifications/initialized arrived.
  bool client_ready() const { return client_ready_; }
  Server& server() { return server_; }
  net::Executor executor() const { return executor_; }

  // notifications/tools/list_changed to this client (ignored before initialize).
  void notify_tools_list_changed();
  // Any notification not related to a request (ignored before initialize).
  void notify(const std::string& method, const Json& params);

  // Owner data attached to the session, e.g. who opened it. Co-owned by the owner.
  std::shared_ptr<void> user_data;

 private:
  friend class Server;
  friend class RequestContext;
  ServerSession(Server& server, net::Executor executor, SessionOutlet& outlet, std::string id);

  asio::awaitable<Reply> run_handler(RequestContext& ctx);
  asio::awaitable<Reply> dispatch(RequestContext& ctx);
  asio::awaitable<void> wait_cancel(RequestContext::InProgress& entry);
  Reply on_initialize(const Json& params);
  asio::awaitable<Reply> on_tools_list(RequestContext& ctx);
  asio::awaitable<Reply> on_tools_call(RequestContext& ctx);

  Server& server_;
  net::Executor executor_;
  SessionOutlet& outlet_;
  std::string id_;
  State state_ = State::kAwaitingInitialize;
  bool client_ready_ = false;
  std::string protocol_version_;
  Implementation client_info_;
  Json client_capabilities_ = Json::object();
  std::map<std::string, RequestContext::InProgress*> in_progress_;  // by id_key()
};

}  // namespace cb::mcp
