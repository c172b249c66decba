#pragma once
// A Chrome DevTools Protocol client (README.md): JSON commands with ids over one WebSocket to
// a browser's DevTools endpoint, their replies, and the events the browser sends meanwhile.
// Pages are driven through flat sessions: Target.attachToTarget {flatten: true} returns a
// sessionId, and commands for that page carry it next to their id on the same socket.
//
//   CO_ASSIGN_OR_RETURN(auto cdp, co_await cdp::Connection::connect(ex, "127.0.0.1", port,
//                                                                    "/devtools/browser/…", dl));
//   CO_ASSIGN_OR_RETURN(json r, co_await cdp->call("Target.getTargets", {}, "", dl));
//
// There is no background reader: call() and wait_event() read the socket until what they wait
// for arrives, queueing the events they meet on the way (the newest kMaxQueuedEvents), so one
// coroutine drives the connection at a time. A reply whose caller gave up (deadline,
// cancellation) is dropped when it arrives.
//
// Affinity: the executor passed to connect(). REQUIRES: at most one call() or wait_event() at
// a time.

#include "base/result.h"
#include "http/websocket_client.h"
#include "net/asio.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

namespace cb::cdp {

// One event: a message without an id.
struct Event {
  std::string method;
  nlohmann::json params;
  std::string session_id;  // "" for the browser's own events
};

inline constexpr size_t kMaxQueuedEvents = 1000;

class Connection {
 public:
  // Connects to ws://|host|:|port||path| (the path DevToolsActivePort's second line names).
  // Errors as http::WebSocketClient::connect().
  static asio::awaitable<Result<std::unique_ptr<Connection>>> connect(
      net::Executor ex, std::string host, uint16_t port, std::string path, net::Deadline deadline);

  explicit Connection(std::unique_ptr<http::WebSocketClient> socket);

  // Sends |method| with |params| (an object; null sends none) to the browser, or to the page
  // attached as |session_id|, and returns the reply's "result".
  // Errors: kFailedPrecondition for an error reply ("METHOD: message (code)", the browser's
  // words); kUnavailable (the browser closed the connection or went away), kDeadlineExceeded,
  // kCancelled, kInvalidArgument (the browser sent something that is not a CDP message).
  asio::awaitable<Result<nlohmann::json>> call(std::string method, nlohmann::json params,
                                               std::string session_id, net::Deadline deadline);

  // The oldest queued event named |method| for |session_id| (taken off the queue), or the
  // next one that arrives. Errors as call(), without error replies.
  asio::awaitable<Result<Event>> wait_event(std::string method, std::string session_id,
                                            net::Deadline deadline);

  // Forgets the queued events.
  void clear_events() { events_.clear(); }
  const std::deque<Event>& events() const { return events_; }

  bool is_open() const { return socket_->is_open(); }
  // Closing handshake, at most until |deadline|.
  asio::awaitable<void> close(net::Deadline deadline);

 private:
  // Reads one message; a reply is stored in |reply| when its id is |want|, an event is queued.
  // Returns true when |reply| was filled.
  asio::awaitable<Result<bool>> read_one(int64_t want, nlohmann::json& reply,
                                         net::Deadline deadline);

  std::unique_ptr<http::WebSocketClient> socket_;
  int64_t next_id_ = 1;
  std::deque<Event> events_;
};

}  // namespace cb::cdp
