#include "mcp/server.h"

#include "base/log.h"

#include <utility>

namespace cb::mcp {
// One request in progress: the cancellation the client (or close()) asked for.
struct RequestContext::InProgress {
  explicit InProgress(const net::Executor& ex, bool cancellable)
      : signal(ex), cancellable(cancellable) {}
  net::Signal signal;
  bool cancellable;  // initialize must not be cancelled (cancellation spec)
  bool cancel_requested = false;
};

// ---- RequestContext

RequestContext::RequestContext(ServerSession& session, const Message& request,
                               RequestChannel& channel, const TransportContext& transport,
                               InProgress& entry)
    : session_(session),
      request_(request),
      channel_(channel),
      transport_(transport),
      entry_(entry) {
  if (request.params.is_object()) {
    auto meta = request.params.find("_meta");
    if (meta != request.params.end() && meta->is_object()) {
      meta_ = *meta;
      auto token = meta->find("progressToken");
      // Progress tokens are strings or integers (progress spec).
      if (token != meta->end() && is_valid_id(*token)) progress_token_ = *token;
    }
  }
}

const std::string* RequestContext::header(std::string_view name) const {
  if (transport_.http == nullptr) return nullptr;
  return http::find_header(transport_.http->headers, name);
}

bool RequestContext::cancel_requested() const { return entry_.cancel_requested; }

asio::awaitable<Status> RequestContext::report_progress(double progress,
                                                        std::optional<double> total,
                                                        std::string message) {
  if (!has_progress_token()) co_return ok_status();
  if (entry_.cancel_requested) co_return cancelled("request cancelled");
  if (last_progress_ && progress <= *last_progress_) co_return ok_status();
  last_progress_ = progress;
  Json params = Json::object();
  params["progressToken"] = progress_token_;
  params["progress"] = progress;
  if (total) params["total"] = *total;
  if (!message.empty()) params["message"] = std::move(message);
  Message m = Message::notification(std::string(kProgress), std::move(params));
  co_return co_await channel_.send(m);
}

asio::awaitable<Status> RequestContext::notify(std::string method, Json params) {
  if (entry_.cancel_requested) co_return cancelled("request cancelled");
  Message m = Message::notification(std::move(method), std::move(params));
  co_return co_await channel_.send(m);
}

// ---- ToolTable

void ToolTable::add(Tool tool, Handler handler) {
  auto shared = std::make_shared<Handler>(std::move(handler));
  for (Entry& e : entries_) {
    if (e.tool.name == tool.name) {
      e.tool = std::move(tool);
      e.handler = std::move(shared);
      return;
    }
  }
  entries_.push_back(Entry{std::move(tool), std::move(shared)});
}

bool ToolTable::remove(std::string_view name) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->tool.name == name) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

bool ToolTable::contains(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.tool.name == name) return true;
  }
  return false;
}

std::vector<Tool> ToolTable::tools() const {
  std::vector<Tool> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.tool);
  return out;
}

asio::awaitable<Result<std::vector<Tool>>> ToolTable::list_tools(RequestContext&) {
  co_return tools();
}

asio::awaitable<Reply> ToolTable::call_tool(RequestContext& ctx, const std::string& name,
                                            const Json& arguments) {
  std::shared_ptr<Handler> handler;
  for (const Entry& e : entries_) {
    if (e.tool.name == name) handler = e.handler;
  }
  if (!handler) co_return Reply::unknown_tool(name);
  // |handler| is held by this frame, so removing the tool meanwhile cannot destroy the
  // function (and the lambda captures its coroutine may use) under the running call.
  Result<ToolResult> result = co_await (*handler)(ctx, arguments);
  if (!result.ok()) {
    const Status failure = result.status();  // status() returns a copy: keep it alive
    std::string_view msg = failure.message();
    if (msg.empty()) msg = code_name(failure.code());
    co_return Reply::from_tool_result(ToolResult::error(msg));
  }
  co_return Reply::from_tool_result(*result);
}

// ---- Server

Server::Server(ServerOptions options, ToolProvider& tools)
    : options_(std::move(options)), tools_(tools) {}

Server::~Server() { CB_DCHECK(sessions_.empty()); }

void Server::set_method(std::string method, MethodHandler handler) {
  methods_[std::move(method)] = std::make_shared<MethodHandler>(std::move(handler));
}

void Server::set_fallback(MethodHandler handler) {
  fallback_ = std::make_shared<MethodHandler>(std::move(handler));
}

void Server::set_notification_handler(NotificationHandler handler) {
  notification_handler_ = std::move(handler);
}

void Server::notify_tools_list_changed() {
  for (ServerSession* s : sessions_) s->notify_tools_list_changed();
}

void Server::notify_all(const std::string& method, const Json& params) {
  for (ServerSession* s : sessions_) s->notify(method, params);
}

std::unique_ptr<ServerSession> Server::open_session(net::Executor executor, SessionOutlet& outlet,
                                                    std::string id) {
  return std::unique_ptr<ServerSession>(
      new ServerSession(*this, std::move(executor), outlet, std::move(id)));
}

// ---- ServerSession

ServerSession::ServerSession(Server& server, net::Executor executor, SessionOutlet& outlet,
                             std::string id)
    : server_(server), executor_(std::move(executor)), outlet_(outlet), id_(std::move(id)) {
  server_.sessions_.insert(this);
}

ServerSession::~ServerSession() {
  // Requests in progress hold references into this session: the transport waits for them.
  CB_DCHECK(in_progress_.empty());
  server_.sessions_.erase(this);
}

bool ServerSession::batches_allowed() const {
  return state_ == State::kInitialized && protocol_allows_batches(protocol_version_);
}

void ServerSession::close() {
  state_ = State::kClosed;
  for (auto& [key, entry] : in_progress_) {
    entry->cancel_requested = true;
    entry->signal.notify();
  }
}

void ServerSession::notify_tools_list_changed() {
  if (state_ != State::kInitialized) return;
  outlet_.post(Message::notification(std::string(kToolsListChanged)));
}

void ServerSession::notify(const std::string& method, const Json& params) {
  if (state_ != State::kInitialized) return;
  outlet_.post(Message::notification(method, params));
}

void ServerSession::handle_notification(const Message& notification) {
  const std::string& method = notification.method;
  if (method == kInitialized) {
    if (state_ == State::kInitialized) client_ready_ = true;
    return;
  }
  if (method == kCancelled) {
    // Malformed or unknown cancellations are ignored (cancellation spec, "Error Handling").
    if (!notification.params.is_object()) return;
    auto id = notification.params.find("requestId");
    if (id == notification.params.end() || !is_valid_id(*id)) return;
    std::string reason;
    auto r = notification.params.find("reason");
    if (r != notification.params.end() && r->is_string()) reason = r->get<std::string>();
    auto it = in_progress_.find(id_key(*id));
    if (it == in_progress_.end() || !it->second->cancellable) {
      // Normal when the transport already cancelled it (stream reset) or it just finished.
      log::debug("mcp cancellation for no request in progress",
                 {{"session", id_}, {"request", id_key(*id)}, {"reason", reason}});
      return;
    }
    log::debug("mcp request cancelled by the client",
               {{"session", id_}, {"request", it->first}, {"reason", reason}});
    it->second->cancel_requested = true;
    it->second->signal.notify();
    return;
  }
  if (server_.notification_handler_ && state_ != State::kClosed) {
    server_.notification_handler_(*this, notification);
  }
}

asio::awaitable<std::optional<Message>> ServerSession::handle_request(
    Message request, RequestChannel& channel, const TransportContext& transport) {
  if (state_ == State::kClosed) {
    co_return Message::error_response(request.id, rpc_error(kInvalidRequest, "session closed"));
  }
  const std::string key = id_key(request.id);
  if (in_progress_.count(key) != 0) {
    co_return Message::error_response(
        request.id, rpc_error(kInvalidRequest, "a request with this id is in progress"));
  }
  RequestContext::InProgress entry(executor_, request.method != kInitialize);
  in_progress_.emplace(key, &entry);
  RequestContext ctx(*this, request, channel, transport, entry);
  std::optional<Reply> reply;
  {
    using namespace asio::experimental::awaitable_operators;
    // The handler races the client's cancellation: whichever ends first cancels the other,
    // and both have finished when the co_await returns, so |ctx| and |entry| outlive them.
    auto winner = co_await (run_handler(ctx) || wait_cancel(entry));
    if (winner.index() == 0) reply = std::move(std::get<0>(winner));
  }
  in_progress_.erase(key);
  if (entry.cancel_requested || !reply) co_return std::nullopt;
  if (reply->ok()) co_return Message::response(request.id, std::move(reply->result));
  co_return Message::error_response(request.id, std::move(*reply->error));
}

asio::awaitable<void> ServerSession::wait_cancel(RequestContext::InProgress& entry) {
  // The root of its own coroutine (a branch of ||): see house style on cancellation.
  co_await asio::this_coro::throw_if_cancelled(false);
  while (!entry.cancel_requested) {
    Status waited = co_await entry.signal.wait();
    if (!waited.ok()) co_return;  // the handler finished first
  }
}

asio::awaitable<Reply> ServerSession::run_handler(RequestContext& ctx) {
  // A cancelled handler sees kCancelled from what it awaits instead of an exception.
  co_await asio::this_coro::throw_if_cancelled(false);
  try {
    co_return co_await dispatch(ctx);
  } catch (const std::exception& e) {
    log::error("mcp request handler threw", {{"method", ctx.method()}, {"what", e.what()}});
  }
  co_return Reply::failure(kInternalError, "internal error");
}

asio::awaitable<Reply> ServerSession::dispatch(RequestContext& ctx) {
  const std::string& method = ctx.method();
  if (method == kInitialize) co_return on_initialize(ctx.params());
  if (method == kPing) co_return Reply::success(Json::object());
  if (state_ != State::kInitialized) {
    co_return Reply::failure(kInvalidRequest,
                             "the session is not initialized: send initialize first");
  }
  auto custom = server_.methods_.find(method);
  if (custom != server_.methods_.end()) {
    // Held by this frame: replacing the method meanwhile cannot destroy the running handler.
    std::shared_ptr<MethodHandler> handler = custom->second;
    co_return co_await (*handler)(ctx);
  }
  if (method == kToolsList) co_return co_await on_tools_list(ctx);
  if (method == kToolsCall) co_return co_await on_tools_call(ctx);
  if (server_.fallback_) {
    std::shared_ptr<MethodHandler> handler = server_.fallback_;
    co_return co_await (*handler)(ctx);
  }
  co_return Reply::failure(kMethodNotFound, "Method not found: " + method);
}

Reply ServerSession::on_initialize(const Json& params) {
  if (state_ != State::kAwaitingInitialize) {
    return Reply::failure(kInvalidRequest, "the session is already initialized");
  }
  if (!params.is_object()) return Reply::failure(kInvalidParams, "initialize needs params");
  auto version = params.find("protocolVersion");
  if (version == params.end() || !version->is_string()) {
    return Reply::failure(kInvalidParams, "protocolVersion must be a string");
  }
  auto caps = params.find("capabilities");
  if (caps != params.end() && !caps->is_object()) {
    return Reply::failure(kInvalidParams, "capabilities must be an object");
  }
  auto info = params.find("clientInfo");
  if (info != params.end()) {
    auto parsed = Implementation::from_json(*info);
    if (!parsed.ok())
      return Reply::failure(kInvalidParams,
                            "clientInfo: " + std::string(parsed.status().message()));
    client_info_ = std::move(*parsed);
  }
  if (caps != params.end()) client_capabilities_ = *caps;
  protocol_version_ = negotiate_protocol_version(version->get<std::string>());
  state_ = State::kInitialized;

  const ServerOptions& options = server_.options_;
  Json capabilities = options.capabilities.is_object() ? options.capabilities : Json::object();
  if (!capabilities.contains("tools")) capabilities["tools"] = Json{{"listChanged", true}};
  Json result = Json::object();
  result["protocolVersion"] = protocol_version_;
  result["capabilities"] = std::move(capabilities);
  result["serverInfo"] = options.info.to_json();
  if (!options.instructions.empty()) result["instructions"] = options.instructions;
  log::debug("mcp session initialized", {{"session", id_},
                                         {"version", protocol_version_},
                                         {"client", client_info_.name},
                                         {"client_version", client_info_.version}});
  return Reply::success(std::move(result));
}

asio::awaitable<Reply> ServerSession::on_tools_list(RequestContext& ctx) {
  size_t offset = 0;
  const Json& params = ctx.params();
  if (params.is_object()) {
    auto cursor = params.find("cursor");
    if (cursor != params.end() && !cursor->is_null()) {
      if (!cursor->is_string()) co_return Reply::failure(kInvalidParams, "cursor must be a string");
      auto decoded = decode_tools_cursor(cursor->get<std::string>());
      if (!decoded.ok()) co_return Reply::failure(kInvalidParams, "invalid cursor");
      offset = *decoded;
    }
  }
  Result<std::vector<Tool>> tools = co_await server_.tools_.list_tools(ctx);
  if (!tools.ok()) co_return Reply::failure(kInternalError, std::string(tools.status().message()));
  // An offset past the end means the list shrank since the cursor was made: refuse it, the
  // client lists again from the start.
  if (offset > tools->size()) co_return Reply::failure(kInvalidParams, "invalid cursor");
  const size_t page = server_.options_.tools_page_size;
  const size_t end = page == 0 ? tools->size() : std::min(tools->size(), offset + page);
  Json list = Json::array();
  for (size_t i = offset; i < end; ++i) list.push_back((*tools)[i].to_json());
  Json result = Json::object();
  result["tools"] = std::move(list);
  if (end < tools->size()) result["nextCursor"] = encode_tools_cursor(end);
  co_return Reply::success(std::move(result));
}

asio::awaitable<Reply> ServerSession::on_tools_call(RequestContext& ctx) {
  const Json& params = ctx.params();
  if (!params.is_object()) co_return Reply::failure(kInvalidParams, "tools/call needs params");
  auto name = params.find("name");
  if (name == params.end() || !name->is_string()) {
    co_return Reply::failure(kInvalidParams, "name must be a string");
  }
  Json arguments = Json::object();
  auto args = params.find("arguments");
  if (args != params.end() && !args->is_null()) {
    if (!args->is_object()) co_return Reply::failure(kInvalidParams, "arguments must be an object");
    arguments = *args;
  }
  const std::string tool_name = name->get<std::string>();
  co_return co_await server_.tools_.call_tool(ctx, tool_name, arguments);
}

}  // namespace cb::mcp
