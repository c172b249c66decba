#pragma once
// Server-Sent Events: the "text/event-stream" format of the WHATWG HTML Living Standard
// (§9.2 "Server-sent events", "Parsing an event stream" and "Interpreting an event stream").
//
// SseWriter streams events as one response on a ServerRequest, so it works over HTTP/2 (DATA
// frames) and HTTP/1.1 (one chunk per event, written at once). SseParser is the sans-I/O
// reading side, for clients and tests: bytes in, events out.
//
//   auto sse = co_await SseWriter::start(req);
//   if (!sse.ok()) co_return;
//   Status st = co_await sse->send("tick", "line 1\nline 2", "42");
//   -> "event: tick\nid: 42\ndata: line 1\ndata: line 2\n\n"
//
// Affinity: SseWriter lives on the ServerRequest's executor and is used by one coroutine at a
// time; SseParser is a plain value with no affinity. Both are movable.

#include "base/result.h"
#include "http/headers.h"
#include "http/server.h"
#include "net/asio.h"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cb::http {

class SseWriter {
 public:
  // Answers 200 with "content-type: text/event-stream", "cache-control: no-cache" and
  // |extra|, leaving the body open. |req| is not owned and must outlive the writer.
  // Errors: as ServerRequest::send_headers (kFailedPrecondition when headers were sent).
  static asio::awaitable<Result<SseWriter>> start(ServerRequest& req, Headers extra = {});

  // Sends one event: "event:" when |event| is not empty (clients then see "message"),
  // "id:" when |id| is not empty, and one "data:" line per line of |data| (split at CRLF, LF
  // or CR), then the blank line that dispatches it. The views are used only during this call
  // (the text is formatted before it returns), not while the write is awaited.
  // Errors: kInvalidArgument (CR or LF in |event| or |id|, NUL in |id|: they would change
  // the stream's meaning), and the errors of ServerRequest::write (kCancelled, kUnavailable
  // once the client has gone).
  asio::awaitable<Status> send(std::string_view event, std::string_view data,
                               std::string_view id = {});
  // Sends ": |text|" comment lines, which clients ignore: a keepalive that stops proxies and
  // idle timers from closing a quiet stream. Errors as ServerRequest::write.
  asio::awaitable<Status> comment(std::string_view text);
  // Sends "retry: <ms>": how long the client waits before reconnecting after a drop.
  asio::awaitable<Status> retry(std::chrono::milliseconds interval);
  // Ends the response. Errors as ServerRequest::write.
  asio::awaitable<Status> close();

 private:
  explicit SseWriter(ServerRequest& req) : req_(&req) {}
  ServerRequest* req_;  // not owned
};

// The bytes SseWriter::send() writes for one event. Errors: kInvalidArgument as send().
Result<std::string> format_sse_event(std::string_view event, std::string_view data,
                                     std::string_view id);

// One dispatched event.
struct SseEvent {
  std::string type = "message";  // the event field, or "message" when the event had none
  std::string data;              // data lines joined with "\n"
  // The stream's last event ID when this event was dispatched: id fields persist across
  // events until another id field changes them.
  std::string last_event_id;

  bool operator==(const SseEvent&) const = default;
};

class SseParser {
 public:
  // 1 MiB bounds one line and one event's data, so a peer cannot make the parser buffer
  // without limit; large enough for any event a person or a UI would send.
  static constexpr size_t kDefaultMaxEventBytes = 1u << 20;
  explicit SseParser(size_t max_event_bytes = kDefaultMaxEventBytes)
      : max_event_bytes_(max_event_bytes) {}

  // Parses |bytes|, which may split lines and events anywhere, and returns the events they
  // completed, in order. A leading UTF-8 BOM is skipped; lines end with CRLF, LF or CR;
  // comment lines and unknown fields are ignored. Events still incomplete when the stream
  // ends are never dispatched (as the standard says), so there is no finish().
  // Errors: kResourceExhausted when a line or an event's data exceeds max_event_bytes; the
  // error is sticky.
  Result<std::vector<SseEvent>> feed(std::string_view bytes);

  // The reconnection time from the last valid "retry" field (ASCII digits only), if any.
  std::optional<std::chrono::milliseconds> retry() const { return retry_; }
  const std::string& last_event_id() const { return last_event_id_; }

 private:
  Status process_line(std::vector<SseEvent>& out);
  void dispatch(std::vector<SseEvent>& out);

  size_t max_event_bytes_;
  Status error_;
  std::string bom_prefix_;  // first bytes of the stream while they may still be a BOM
  bool bom_done_ = false;
  bool after_cr_ = false;  // the last byte ended a line with CR; a following LF is part of it
  std::string line_;
  std::string data_;
  std::string type_;
  std::string id_buffer_;
  std::string last_event_id_;
  std::optional<std::chrono::milliseconds> retry_;
};

}  // namespace cb::http
