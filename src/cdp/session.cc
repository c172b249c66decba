#include "cdp/session.h"

#include <fmt/format.h>

namespace cb::cdp {

using nlohmann::json;

asio::awaitable<Result<std::unique_ptr<Connection>>> Connection::connect(
    net::Executor ex, std::string host, uint16_t port, std::string path, net::Deadline deadline) {
  http::WebSocketOptions options;
  auto socket = co_await http::WebSocketClient::connect(
      std::move(ex), std::move(host), port, std::move(path), std::move(options), deadline);
  if (!socket.ok()) co_return socket.status().with_prefix("devtools");
  co_return std::make_unique<Connection>(std::move(*socket));
}

Connection::Connection(std::unique_ptr<http::WebSocketClient> socket)
    : socket_(std::move(socket)) {}

asio::awaitable<Result<bool>> Connection::read_one(int64_t want, json& reply,
                                                   net::Deadline deadline) {
  CO_ASSIGN_OR_RETURN(http::ws::Message m, co_await socket_->read(deadline));
  json j = json::parse(m.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    co_return invalid_argument("devtools: a message that is not a JSON object");
  auto id = j.find("id");
  if (id != j.end()) {
    if (!id->is_number_integer())
      co_return invalid_argument("devtools: a reply without an integer id");
    if (id->get<int64_t>() != want) co_return false;  // a reply whose caller gave up
    reply = std::move(j);
    co_return true;
  }
  auto method = j.find("method");
  if (method == j.end() || !method->is_string())
    co_return invalid_argument("devtools: a message with neither id nor method");
  Event e;
  e.method = method->get<std::string>();
  if (auto p = j.find("params"); p != j.end()) e.params = std::move(*p);
  if (auto s = j.find("sessionId"); s != j.end() && s->is_string())
    e.session_id = s->get<std::string>();
  events_.push_back(std::move(e));
  while (events_.size() > kMaxQueuedEvents) events_.pop_front();
  co_return false;
}

asio::awaitable<Result<json>> Connection::call(std::string method, json params,
                                               std::string session_id, net::Deadline deadline) {
  const int64_t id = next_id_++;
  json msg = {{"id", id}, {"method", method}};
  if (!params.is_null()) msg["params"] = std::move(params);
  if (!session_id.empty()) msg["sessionId"] = session_id;
  std::string text = msg.dump(-1, ' ', false, json::error_handler_t::replace);
  Status sent = co_await socket_->send_text(text);
  if (!sent.ok()) co_return sent.with_prefix("devtools " + method);
  json reply;
  while (true) {
    auto got = co_await read_one(id, reply, deadline);
    if (!got.ok()) co_return got.status().with_prefix("devtools " + method);
    if (*got) break;
  }
  if (auto e = reply.find("error"); e != reply.end()) {
    std::string message = e->is_object() ? e->value("message", std::string("error")) : e->dump();
    std::string data = e->is_object() && e->contains("data") && (*e)["data"].is_string()
                           ? ": " + (*e)["data"].get<std::string>()
                           : std::string();
    const int64_t code =
        e->is_object() && (*e)["code"].is_number_integer() ? (*e)["code"].get<int64_t>() : 0;
    co_return failed_precondition(fmt::format("{}: {}{} ({})", method, message, data, code));
  }
  auto r = reply.find("result");
  if (r == reply.end()) co_return json::object();
  co_return std::move(*r);
}

asio::awaitable<Result<Event>> Connection::wait_event(std::string method, std::string session_id,
                                                      net::Deadline deadline) {
  auto matches = [&](const Event& e) { return e.method == method && e.session_id == session_id; };
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (!matches(*it)) continue;
    Event e = std::move(*it);
    events_.erase(it);
    co_return e;
  }
  while (true) {
    json unused;
    auto got = co_await read_one(0, unused, deadline);
    if (!got.ok()) co_return got.status().with_prefix("devtools waiting for " + method);
    // Whatever read_one() queued is at the back (a dropped stale reply queues nothing, and the
    // back was looked at before).
    if (!events_.empty() && matches(events_.back())) {
      Event e = std::move(events_.back());
      events_.pop_back();
      co_return e;
    }
  }
}

asio::awaitable<void> Connection::close(net::Deadline deadline) {
  co_await socket_->close(http::ws::kCloseNormal, "", deadline);
}

}  // namespace cb::cdp
