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
// Interrupting events: a page that opens a JavaScript dialog stops answering until the dialog
// is handled, so a command waiting for its reply would wait until its deadline. Events named
// with set_interrupting_events() end the wait early (kAborted, the event left queued for the
// caller to take). send() and wait_reply() let a caller handle such an event and then go on
// waiting for the same reply (Page.navigate held by a beforeunload dialog).
//
// Affinity: the executor passed to connect(). REQUIRES: at most one call() or wait_event() at
// a time.

#include "base/result.h"
#include "http/websocket_client.h"
#include "net/asio.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
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

  // call() in two halves. send() writes the command and returns its id; wait_reply() reads
  // until that reply and returns its "result" (errors as call()). When an interrupting event
  // arrives first, wait_reply() returns kAborted and the reply stays expected: a later
  // wait_reply(|pending|) returns it (kept when it arrives meanwhile); forget() gives it up.
  // call() forgets its reply when interrupted.
  struct Pending {
    int64_t id = 0;
    std::string method;
  };
  asio::awaitable<Result<Pending>> send(std::string method, nlohmann::json params,
                                        std::string session_id);
  asio::awaitable<Result<nlohmann::json>> wait_reply(Pending pending, net::Deadline deadline);
  void forget(const Pending& pending) { expected_.erase(pending.id); }

  // The oldest queued event named |method| for |session_id| (taken off the queue), or the
  // next one that arrives. Errors as call(), without error replies; kAborted when an
  // interrupting event other than |method| arrives first (it stays queued).
  asio::awaitable<Result<Event>> wait_event(std::string method, std::string session_id,
                                            net::Deadline deadline);

  // Events (by method, any session) that end a wait for a reply or for another event.
  void set_interrupting_events(std::set<std::string> methods) {
    interrupting_ = std::move(methods);
  }

  // Takes the oldest queued event |match| accepts off the queue, if any.
  std::optional<Event> take_event(const std::function<bool(const Event&)>& match);

  // Forgets the queued events.
  void clear_events() { events_.clear(); }
  const std::deque<Event>& events() const { return events_; }

  bool is_open() const { return socket_->is_open(); }
  // Closing handshake, at most until |deadline|.
  asio::awaitable<void> close(net::Deadline deadline);

 private:
  // Reads one message; a reply is stored in |reply| when its id is |want|, kept when another
  // expected id's, an event is queued. Returns true when |reply| was filled.
  asio::awaitable<Result<bool>> read_one(int64_t want, nlohmann::json& reply,
                                         net::Deadline deadline);
  // True when the last read_one() queued an event that interrupts a wait (and is not named
  // |except|).
  bool interrupted(std::string_view except) const;

  std::unique_ptr<http::WebSocketClient> socket_;
  int64_t next_id_ = 1;
  std::deque<Event> events_;
  std::set<std::string> interrupting_;
  bool queued_last_ = false;  // the last read_one() queued an event (events_.back())
  // Replies still expected after an interrupted wait_reply(): id -> the reply once it came
  // (null before).
  std::map<int64_t, nlohmann::json> expected_;
};

}  // namespace cb::cdp
