#include "mcp/client.h"

#include "base/log.h"
#include "http/sse.h"
#include "net/stream.h"

#include <utility>

namespace cb::mcp {

using namespace std::chrono_literals;

// ---- Transports: one HTTP exchange at a time, HTTP/2 or HTTP/1.1.

class Client::Exchange {
 public:
  virtual ~Exchange() = default;
  // The next piece of the response body, "" at its end.
  virtual asio::awaitable<Result<std::string>> read() = 0;

  int status = 0;
  http::Headers headers;
};

class Client::Transport {
 public:
  virtual ~Transport() = default;
  // Sends a request with |body| and waits for the response head.
  virtual asio::awaitable<Result<std::unique_ptr<Exchange>>> start(std::string method,
                                                                   http::Headers headers,
                                                                   std::string body) = 0;
  virtual void set_connection(std::shared_ptr<http::H2Connection> conn) {}
};

namespace {

// An exchange dropped before its end is abandoned: RST_STREAM.
class H2Exchange final : public Client::Exchange {
 public:
  explicit H2Exchange(std::shared_ptr<http::H2Stream> stream) : stream_(std::move(stream)) {
    status = stream_->status();
    headers = stream_->headers();
  }
  ~H2Exchange() override {
    if (!stream_->closed() && !stream_->end_of_stream_received()) stream_->reset();
  }
  asio::awaitable<Result<std::string>> read() override { co_return co_await stream_->read(); }

 private:
  std::shared_ptr<http::H2Stream> stream_;
};

class H2Transport final : public Client::Transport {
 public:
  H2Transport(std::shared_ptr<http::H2Connection> conn, const ClientOptions& options)
      : conn_(std::move(conn)),
        path_(options.path),
        authority_(options.authority),
        scheme_(options.scheme) {}

  void set_connection(std::shared_ptr<http::H2Connection> conn) override {
    conn_ = std::move(conn);
  }

  asio::awaitable<Result<std::unique_ptr<Client::Exchange>>> start(std::string method,
                                                                   http::Headers headers,
                                                                   std::string body) override {
    if (!conn_) co_return unavailable("mcp client: no connection");
    // Held by this frame: set_connection() meanwhile must not free the connection in use.
    std::shared_ptr<http::H2Connection> conn = conn_;
    http::RequestHead head;
    head.method = std::move(method);
    head.path = path_;
    head.authority = authority_;
    head.scheme = scheme_;
    head.headers = std::move(headers);
    auto opened = conn->open_stream(head, body.empty());
    if (!opened.ok()) co_return opened.status();
    std::shared_ptr<http::H2Stream> stream = *opened;
    // From here on an early return abandons the stream.
    auto exchange = std::make_unique<H2Exchange>(stream);
    if (!body.empty()) CO_RETURN_IF_ERROR(co_await stream->write(body, true));
    CO_RETURN_IF_ERROR(co_await stream->wait_headers());
    exchange->status = stream->status();
    exchange->headers = stream->headers();
    co_return std::unique_ptr<Client::Exchange>(std::move(exchange));
  }

 private:
  std::shared_ptr<http::H2Connection> conn_;
  std::string path_;
  std::string authority_;
  std::string scheme_;
};

class H1Transport;

// The connection goes back to the idle list when the response was read to its end and the
// server keeps it alive; otherwise it is closed.
class H1Exchange final : public Client::Exchange {
 public:
  H1Exchange(std::unique_ptr<http::Http1Client> client, H1Transport& owner)
      : client_(std::move(client)), owner_(owner) {}
  ~H1Exchange() override;
  http::Http1Client& client() { return *client_; }
  asio::awaitable<Result<std::string>> read() override {
    auto piece = co_await client_->read_body(net::kNoDeadline);
    if (piece.ok() && piece->empty()) done_ = true;
    co_return piece;
  }

 private:
  std::unique_ptr<http::Http1Client> client_;
  H1Transport& owner_;
  bool done_ = false;
};

class H1Transport final : public Client::Transport {
 public:
  H1Transport(net::Executor executor, http::Http1DialOptions dial, const ClientOptions& options)
      : executor_(std::move(executor)), dial_(std::move(dial)), path_(options.path) {}

  asio::awaitable<Result<std::unique_ptr<Client::Exchange>>> start(std::string method,
                                                                   http::Headers headers,
                                                                   std::string body) override {
    std::unique_ptr<http::Http1Client> client;
    while (!idle_.empty() && !client) {
      client = std::move(idle_.back());
      idle_.pop_back();
      if (!client->reusable()) client.reset();
    }
    if (!client) {
      auto dialed = co_await http::dial_http1(executor_, dial_, net::after(30s));
      if (!dialed.ok()) co_return dialed.status();
      client = std::move(*dialed);
    }
    if (!body.empty()) {
      headers.push_back(http::Header{std::string("content-length"), std::to_string(body.size())});
    }
    auto exchange = std::make_unique<H1Exchange>(std::move(client), *this);
    http::Http1Client& c = exchange->client();
    CO_RETURN_IF_ERROR(co_await c.send_head(method, path_, std::move(headers), net::kNoDeadline));
    if (!body.empty()) {
      CO_RETURN_IF_ERROR(co_await c.write_body(std::move(body), net::kNoDeadline));
      http::Headers no_trailers;
      CO_RETURN_IF_ERROR(co_await c.finish_body(std::move(no_trailers), net::kNoDeadline));
    }
    auto head = co_await c.read_head(net::kNoDeadline);
    if (!head.ok()) co_return head.status();
    exchange->status = head->status;
    exchange->headers = std::move(head->headers);
    co_return std::unique_ptr<Client::Exchange>(std::move(exchange));
  }

  void give_back(std::unique_ptr<http::Http1Client> client) {
    if (client->reusable() && idle_.size() < 8) {
      idle_.push_back(std::move(client));
    } else {
      client->close();
    }
  }

 private:
  net::Executor executor_;
  http::Http1DialOptions dial_;
  std::string path_;
  std::vector<std::unique_ptr<http::Http1Client>> idle_;
};

H1Exchange::~H1Exchange() {
  if (done_) {
    owner_.give_back(std::move(client_));
  } else {
    client_->close();  // abandoned mid-response: the connection cannot be reused
  }
}

std::string_view media_essence(std::string_view value) {
  value = value.substr(0, value.find(';'));
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return value;
}

// The Status for a non-2xx answer; the message names the status and the JSON-RPC error text
// of the body when it has one.
Status http_error(int status, std::string_view body) {
  std::string detail;
  Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    detail = j["error"]["message"].get<std::string>();
  } else {
    detail = std::string(body.substr(0, 200));
  }
  std::string msg = "mcp server answered HTTP " + std::to_string(status);
  if (!detail.empty()) msg += ": " + detail;
  switch (status) {
    case 400:
      return invalid_argument(msg);
    case 401:
      return unauthenticated(msg);
    case 403:
      return permission_denied(msg);
    case 404:
      return not_found(msg);
    case 405:
      return unimplemented(msg);
    case 406:
    case 415:
      return failed_precondition(msg);
    default:
      return status >= 500 ? unavailable(msg) : unknown_error(msg);
  }
}

// Builders kept out of coroutine bodies (gcc 12 and braced lists of string literals).
Json initialize_params(const ClientOptions& o) {
  Json p = Json::object();
  p["protocolVersion"] = o.protocol_version;
  p["capabilities"] = o.capabilities.is_object() ? o.capabilities : Json::object();
  p["clientInfo"] = o.client_info.to_json();
  return p;
}
Json cancel_params(int64_t id, const char* reason) {
  Json p = Json::object();
  p["requestId"] = id;
  p["reason"] = reason;
  return p;
}
Json cursor_params(const std::string& cursor) {
  Json p = Json::object();
  if (!cursor.empty()) p["cursor"] = cursor;
  return p;
}
Json call_params(std::string name, Json arguments) {
  Json p = Json::object();
  p["name"] = std::move(name);
  p["arguments"] = arguments.is_null() ? Json::object() : std::move(arguments);
  return p;
}
bool is_reply_to(const Message& m, const Json& id) {
  if (!m.is_reply()) return false;
  // An error with id null answers a request the server could not read: ours.
  return m.id == id || (m.kind == MessageKind::kErrorResponse && m.id.is_null());
}
Reply reply_of(Message&& m) {
  if (m.kind == MessageKind::kResponse) return Reply::success(std::move(m.result));
  return Reply::failure(std::move(m.error));
}

}  // namespace

// ---- Client

std::unique_ptr<Client> Client::over_h2(std::shared_ptr<http::H2Connection> conn,
                                        ClientOptions options) {
  auto transport = std::make_unique<H2Transport>(std::move(conn), options);
  return std::unique_ptr<Client>(new Client(std::move(transport), std::move(options)));
}

std::unique_ptr<Client> Client::over_http1(net::Executor executor, http::Http1DialOptions dial,
                                           ClientOptions options) {
  auto transport = std::make_unique<H1Transport>(std::move(executor), std::move(dial), options);
  return std::unique_ptr<Client>(new Client(std::move(transport), std::move(options)));
}

Client::Client(std::unique_ptr<Transport> transport, ClientOptions options)
    : transport_(std::move(transport)), options_(std::move(options)) {}

Client::~Client() = default;

void Client::set_connection(std::shared_ptr<http::H2Connection> conn) {
  transport_->set_connection(std::move(conn));
}

void Client::set_notification_handler(MessageCallback handler) {
  notification_handler_ = std::move(handler);
}

void Client::forget_session() {
  initialized_ = false;
  session_id_.clear();
  protocol_version_.clear();
}

http::Headers Client::request_headers(bool post) const {
  http::Headers h;
  if (post) {
    h.push_back(http::Header{"content-type", "application/json"});
    h.push_back(http::Header{"accept", "application/json, text/event-stream"});
  } else {
    h.push_back(http::Header{"accept", "text/event-stream"});
  }
  if (!session_id_.empty()) h.push_back(http::Header{"mcp-session-id", session_id_});
  if (!protocol_version_.empty())
    h.push_back(http::Header{"mcp-protocol-version", protocol_version_});
  for (const auto& extra : options_.headers) h.push_back(extra);
  return h;
}

asio::awaitable<void> Client::dispatch(const Message& message, const Json& own_id,
                                       const CallOptions* options) {
  if (message.is_notification()) {
    if (message.method == kProgress && options != nullptr && options->on_progress &&
        message.params.is_object() && message.params.value("progressToken", Json()) == own_id) {
      co_await options->on_progress(message.params);
      co_return;
    }
    if (notification_handler_) {
      // Held by this frame: replacing the handler meanwhile cannot free the running one.
      MessageCallback handler = notification_handler_;
      co_await handler(message);
    }
    co_return;
  }
  if (message.is_request()) {
    // We offer no client capabilities; ping is answered as the lifecycle requires.
    Message answer =
        message.method == kPing
            ? Message::response(message.id, Json::object())
            : Message::error_response(
                  message.id, rpc_error(kMethodNotFound, "Method not found: " + message.method));
    Status sent = co_await post_message(answer, net::after(30s));
    if (!sent.ok())
      log::debug("mcp client could not answer a server request", {{"error", sent.to_string()}});
  }
}

asio::awaitable<Status> Client::post_message(const Message& message, net::Deadline deadline) {
  auto run = [this, &message]() -> asio::awaitable<Result<bool>> {
    co_await asio::this_coro::throw_if_cancelled(false);
    std::string body = serialize(message);
    auto started =
        co_await transport_->start(std::string("POST"), request_headers(true), std::move(body));
    if (!started.ok()) co_return started.status();
    Exchange& ex = **started;
    std::string text;
    for (;;) {
      auto piece = co_await ex.read();
      if (!piece.ok()) co_return piece.status();
      if (piece->empty()) break;
      if (text.size() < 4096) text += *piece;
    }
    if (ex.status < 200 || ex.status >= 300) co_return http_error(ex.status, text);
    co_return true;
  };
  Result<bool> done = co_await net::with_deadline(run(), deadline, "mcp notification");
  co_return done.status();
}

asio::awaitable<Result<Reply>> Client::exchange(const Message& request, const CallOptions& options,
                                                bool initialize) {
  co_await asio::this_coro::throw_if_cancelled(false);
  std::string body = serialize(request);
  auto started =
      co_await transport_->start(std::string("POST"), request_headers(true), std::move(body));
  if (!started.ok()) co_return started.status();
  Exchange& ex = **started;
  if (initialize && ex.status >= 200 && ex.status < 300) {
    if (const std::string* id = http::find_header(ex.headers, "mcp-session-id")) session_id_ = *id;
  }
  const size_t limit = options_.max_message_bytes;
  if (ex.status < 200 || ex.status >= 300) {
    std::string text;
    for (;;) {
      auto piece = co_await ex.read();
      if (!piece.ok() || piece->empty()) break;
      if (text.size() < 4096) text += *piece;
    }
    if (ex.status == 404 && !initialize) forget_session();
    co_return http_error(ex.status, text);
  }
  const std::string* content_type = http::find_header(ex.headers, "content-type");
  std::string_view media = content_type != nullptr ? media_essence(*content_type) : "";

  if (media == "application/json") {
    std::string text;
    for (;;) {
      auto piece = co_await ex.read();
      if (!piece.ok()) co_return piece.status();
      if (piece->empty()) break;
      text += *piece;
      if (text.size() > limit) co_return resource_exhausted("mcp reply too large");
    }
    Payload payload = parse_payload(text);
    std::optional<Reply> reply;
    for (Message& m : payload.messages) {
      if (!reply && is_reply_to(m, request.id)) {
        reply = reply_of(std::move(m));
      } else if (m.kind != MessageKind::kInvalid) {
        co_await dispatch(m, request.id, &options);
      }
    }
    if (!reply) co_return internal_error("mcp server sent JSON without the response");
    co_return std::move(*reply);
  }

  if (media == "text/event-stream") {
    http::SseParser parser(limit);
    for (;;) {
      auto piece = co_await ex.read();
      if (!piece.ok()) co_return piece.status();
      if (piece->empty()) break;
      auto events = parser.feed(*piece);
      if (!events.ok()) co_return events.status();
      for (const http::SseEvent& event : *events) {
        if (event.data.empty() || event.type != "message") continue;
        Payload payload = parse_payload(event.data);
        for (Message& m : payload.messages) {
          if (is_reply_to(m, request.id)) co_return reply_of(std::move(m));
          if (m.kind != MessageKind::kInvalid) co_await dispatch(m, request.id, &options);
        }
      }
    }
    co_return unavailable("mcp reply stream ended without the response");
  }
  co_return internal_error("mcp server answered with content-type " +
                           (content_type != nullptr ? *content_type : std::string("(none)")));
}

asio::awaitable<Result<Reply>> Client::request(std::string method, Json params,
                                               CallOptions options) {
  co_await asio::this_coro::throw_if_cancelled(false);
  const bool initialize = method == kInitialize;
  if (!initialized_ && !initialize) co_return failed_precondition("mcp client: not initialized");
  const int64_t id = next_id_++;
  if (options.on_progress) {
    if (params.is_null()) params = Json::object();
    if (params.is_object()) {
      if (!params.contains("_meta") || !params["_meta"].is_object())
        params["_meta"] = Json::object();
      params["_meta"]["progressToken"] = id;
    }
  }
  Message message = Message::request(id, std::move(method), std::move(params));
  const net::Deadline deadline = options.deadline == net::kNoDeadline
                                     ? net::after(options_.request_timeout)
                                     : options.deadline;
  Result<Reply> reply =
      co_await net::with_deadline(exchange(message, options, initialize), deadline, message.method);
  auto state = co_await asio::this_coro::cancellation_state;
  const bool caller_cancelled = state.cancelled() != asio::cancellation_type::none;
  if (caller_cancelled || (!reply.ok() && reply.status().code() == Code::kDeadlineExceeded)) {
    // The exchange was abandoned (its stream reset); tell the server to stop working on it.
    // The initialize request must not be cancelled (cancellation spec).
    co_await asio::this_coro::reset_cancellation_state();
    if (!initialize && initialized_) {
      Json p =
          cancel_params(id, caller_cancelled ? "cancelled by the client" : "deadline exceeded");
      Status sent =
          co_await post_message(Message::notification(std::string(kCancelled), p), net::after(5s));
      (void)sent;
    }
    if (caller_cancelled) co_return cancelled("mcp request cancelled: " + message.method);
  }
  co_return reply;
}

asio::awaitable<Status> Client::notify(std::string method, Json params) {
  co_await asio::this_coro::throw_if_cancelled(false);
  if (!initialized_) co_return failed_precondition("mcp client: not initialized");
  Message m = Message::notification(std::move(method), std::move(params));
  co_return co_await post_message(m, net::after(options_.request_timeout));
}

asio::awaitable<Result<InitializeResult>> Client::initialize(net::Deadline deadline) {
  co_await asio::this_coro::throw_if_cancelled(false);
  forget_session();
  CallOptions options;
  options.deadline = deadline;
  auto reply = co_await request(std::string(kInitialize), initialize_params(options_), options);
  if (!reply.ok()) co_return reply.status();
  if (!reply->ok()) co_return status_from_rpc_error(*reply->error);
  const Json& result = reply->result;
  if (!result.is_object()) co_return internal_error("initialize result is not an object");
  InitializeResult init;
  auto version = result.find("protocolVersion");
  if (version == result.end() || !version->is_string()) {
    co_return internal_error("initialize result has no protocolVersion");
  }
  init.protocol_version = version->get<std::string>();
  if (!is_supported_protocol_version(init.protocol_version)) {
    co_return unimplemented("mcp server speaks protocol " + init.protocol_version);
  }
  auto info = result.find("serverInfo");
  if (info != result.end()) {
    auto parsed = Implementation::from_json(*info);
    if (parsed.ok()) init.server_info = std::move(*parsed);
  }
  auto caps = result.find("capabilities");
  if (caps != result.end() && caps->is_object()) init.capabilities = *caps;
  auto instructions = result.find("instructions");
  if (instructions != result.end() && instructions->is_string()) {
    init.instructions = instructions->get<std::string>();
  }
  init.raw = result;
  protocol_version_ = init.protocol_version;
  initialized_ = true;
  server_ = init;
  Message initialized = Message::notification(std::string(kInitialized));
  Status sent = co_await post_message(initialized, deadline);
  if (!sent.ok()) {
    forget_session();
    co_return sent;
  }
  co_return init;
}

asio::awaitable<Status> Client::ping(net::Deadline deadline) {
  CallOptions options;
  options.deadline = deadline;
  auto reply = co_await request(std::string(kPing), Json(), options);
  if (!reply.ok()) co_return reply.status();
  if (!reply->ok()) co_return status_from_rpc_error(*reply->error);
  co_return ok_status();
}

asio::awaitable<Result<ToolsPage>> Client::list_tools(std::string cursor, CallOptions options) {
  auto reply = co_await request(std::string(kToolsList), cursor_params(cursor), std::move(options));
  if (!reply.ok()) co_return reply.status();
  if (!reply->ok()) co_return status_from_rpc_error(*reply->error);
  const Json& result = reply->result;
  auto tools = result.find("tools");
  if (!result.is_object() || tools == result.end() || !tools->is_array()) {
    co_return internal_error("tools/list result has no tools array");
  }
  ToolsPage page;
  for (const Json& t : *tools) {
    auto tool = Tool::from_json(t);
    if (!tool.ok()) co_return internal_error("tools/list: " + std::string(tool.status().message()));
    page.tools.push_back(std::move(*tool));
  }
  auto next = result.find("nextCursor");
  if (next != result.end() && next->is_string()) page.next_cursor = next->get<std::string>();
  co_return page;
}

asio::awaitable<Result<std::vector<Tool>>> Client::list_all_tools(CallOptions options) {
  std::vector<Tool> all;
  std::string cursor;
  for (int pages = 0; pages < 1000; ++pages) {
    auto page = co_await list_tools(cursor, options);
    if (!page.ok()) co_return page.status();
    for (Tool& t : page->tools) all.push_back(std::move(t));
    if (page->next_cursor.empty()) co_return all;
    cursor = std::move(page->next_cursor);
  }
  co_return internal_error("tools/list: more than 1000 pages");
}

asio::awaitable<Result<ToolResult>> Client::call_tool(std::string name, Json arguments,
                                                      CallOptions options) {
  auto reply =
      co_await request(std::string(kToolsCall), call_params(std::move(name), std::move(arguments)),
                       std::move(options));
  if (!reply.ok()) co_return reply.status();
  if (!reply->ok()) co_return status_from_rpc_error(*reply->error);
  auto result = ToolResult::from_json(reply->result);
  if (!result.ok())
    co_return internal_error("tools/call: " + std::string(result.status().message()));
  co_return std::move(*result);
}

asio::awaitable<Status> Client::listen() {
  co_await asio::this_coro::throw_if_cancelled(false);
  if (!initialized_) co_return failed_precondition("mcp client: not initialized");
  auto started =
      co_await transport_->start(std::string("GET"), request_headers(false), std::string());
  if (!started.ok()) co_return started.status();
  Exchange& ex = **started;
  if (ex.status != 200) {
    std::string text;
    for (;;) {
      auto piece = co_await ex.read();
      if (!piece.ok() || piece->empty()) break;
      if (text.size() < 4096) text += *piece;
    }
    co_return http_error(ex.status, text);
  }
  http::SseParser parser(options_.max_message_bytes);
  const Json no_id;
  for (;;) {
    auto piece = co_await ex.read();
    if (!piece.ok()) {
      auto state = co_await asio::this_coro::cancellation_state;
      if (state.cancelled() != asio::cancellation_type::none)
        co_return cancelled("mcp listen cancelled");
      co_return piece.status();
    }
    if (piece->empty()) co_return ok_status();
    auto events = parser.feed(*piece);
    if (!events.ok()) co_return events.status();
    for (const http::SseEvent& event : *events) {
      if (event.data.empty() || event.type != "message") continue;
      Payload payload = parse_payload(event.data);
      for (const Message& m : payload.messages) {
        if (m.kind != MessageKind::kInvalid) co_await dispatch(m, no_id, nullptr);
      }
    }
  }
}

asio::awaitable<Status> Client::close(net::Deadline deadline) {
  co_await asio::this_coro::throw_if_cancelled(false);
  if (session_id_.empty()) {
    forget_session();
    co_return ok_status();
  }
  auto run = [this]() -> asio::awaitable<Result<int>> {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto started =
        co_await transport_->start(std::string("DELETE"), request_headers(false), std::string());
    if (!started.ok()) co_return started.status();
    Exchange& ex = **started;
    for (;;) {
      auto piece = co_await ex.read();
      if (!piece.ok() || piece->empty()) break;
    }
    co_return ex.status;
  };
  Result<int> status = co_await net::with_deadline(run(), deadline, "mcp close");
  forget_session();
  if (!status.ok()) co_return status.status();
  if ((*status >= 200 && *status < 300) || *status == 404 || *status == 405) co_return ok_status();
  co_return http_error(*status, "");
}

}  // namespace cb::mcp
