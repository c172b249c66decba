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
  queued_last_ = false;
  CO_ASSIGN_OR_RETURN(http::ws::Message m, co_await socket_->read(deadline));
  json j = json::parse(m.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    co_return invalid_argument("devtools: a message that is not a JSON object");
  auto id = j.find("id");
  if (id != j.end()) {
    if (!id->is_number_integer())
      co_return invalid_argument("devtools: a reply without an integer id");
    const int64_t got = id->get<int64_t>();
    if (got == want) {
      reply = std::move(j);
      co_return true;
    }
    // A reply a later wait_reply() will want, or one whose caller gave up (dropped).
    if (auto it = expected_.find(got); it != expected_.end()) it->second = std::move(j);
    co_return false;
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
  queued_last_ = true;
  while (events_.size() > kMaxQueuedEvents) events_.pop_front();
  co_return false;
}

bool Connection::interrupted(std::string_view except) const {
  return queued_last_ && !events_.empty() && events_.back().method != except &&
         interrupting_.count(events_.back().method) != 0;
}

std::optional<Event> Connection::take_event(const std::function<bool(const Event&)>& match) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (!match(*it)) continue;
    Event e = std::move(*it);
    events_.erase(it);
    return e;
  }
  return std::nullopt;
}

asio::awaitable<Result<Connection::Pending>> Connection::send(std::string method, json params,
                                                              std::string session_id) {
  Pending p;
  p.id = next_id_++;
  p.method = std::move(method);
  json msg = {{"id", p.id}, {"method", p.method}};
  if (!params.is_null()) msg["params"] = std::move(params);
  if (!session_id.empty()) msg["sessionId"] = session_id;
  std::string text = msg.dump(-1, ' ', false, json::error_handler_t::replace);
  Status sent = co_await socket_->send_text(text);
  if (!sent.ok()) co_return sent.with_prefix("devtools " + p.method);
  co_return p;
}

asio::awaitable<Result<json>> Connection::wait_reply(Pending pending, net::Deadline deadline) {
  json reply;
  auto kept = expected_.find(pending.id);
  if (kept != expected_.end() && !kept->second.is_null()) {
    reply = std::move(kept->second);
    expected_.erase(kept);
  } else {
    if (kept != expected_.end()) expected_.erase(kept);
    while (true) {
      auto got = co_await read_one(pending.id, reply, deadline);
      if (!got.ok()) co_return got.status().with_prefix("devtools " + pending.method);
      if (*got) break;
      if (interrupted("")) {
        // The reply may still come: keep it when it does (forget() drops it).
        expected_.emplace(pending.id, json(nullptr));
        co_return aborted(
            fmt::format("devtools {}: interrupted by {}", pending.method, events_.back().method));
      }
    }
  }
  if (auto e = reply.find("error"); e != reply.end()) {
    std::string message = e->is_object() ? e->value("message", std::string("error")) : e->dump();
    std::string data = e->is_object() && e->contains("data") && (*e)["data"].is_string()
                           ? ": " + (*e)["data"].get<std::string>()
                           : std::string();
    const int64_t code =
        e->is_object() && (*e)["code"].is_number_integer() ? (*e)["code"].get<int64_t>() : 0;
    co_return failed_precondition(
        fmt::format("{}: {}{} ({})", pending.method, message, data, code));
  }
  auto r = reply.find("result");
  if (r == reply.end()) co_return json::object();
  co_return std::move(*r);
}

asio::awaitable<Result<json>> Connection::call(std::string method, json params,
                                               std::string session_id, net::Deadline deadline) {
  auto pending = co_await send(std::move(method), std::move(params), std::move(session_id));
  if (!pending.ok()) co_return pending.status();
  auto r = co_await wait_reply(*pending, deadline);
  if (!r.ok() && r.status().code() == Code::kAborted) forget(*pending);
  co_return r;
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
    if (interrupted(method)) {
      co_return aborted(
          fmt::format("devtools waiting for {}: interrupted by {}", method, events_.back().method));
    }
  }
}

asio::awaitable<void> Connection::close(net::Deadline deadline) {
  co_await socket_->close(http::ws::kCloseNormal, "", deadline);
}

}  // namespace cb::cdp
