#include "http/sse.h"

#include "http/http1_client.h"
#include "http/server.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::http {
namespace {

using namespace std::chrono_literals;
using test::run_sync;

SseEvent event(std::string type, std::string data, std::string id = "") {
  SseEvent e;
  e.type = std::move(type);
  e.data = std::move(data);
  e.last_event_id = std::move(id);
  return e;
}

std::vector<SseEvent> parse_all(std::string_view bytes) {
  SseParser p;
  auto r = p.feed(bytes);
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("SseWriter: an event is formatted as event, id and one data line per line",
          "[http][unit]") {
  auto e = format_sse_event("tick", "line 1\nline 2\r\nline 3\rline 4", "42");
  REQUIRE(e.ok());
  CHECK(*e == "event: tick\nid: 42\ndata: line 1\ndata: line 2\ndata: line 3\ndata: line 4\n\n");
  auto plain = format_sse_event("", "x", "");
  REQUIRE(plain.ok());
  CHECK(*plain == "data: x\n\n");
  auto empty = format_sse_event("", "", "");
  REQUIRE(empty.ok());
  CHECK(*empty == "data: \n\n");
  CHECK(format_sse_event("a\nb", "x", "").status().code() == Code::kInvalidArgument);
  CHECK(format_sse_event("a", "x", "1\r").status().code() == Code::kInvalidArgument);
  CHECK(format_sse_event("a", "x", std::string_view("1\0", 2)).status().code() ==
        Code::kInvalidArgument);
  // What the writer formats, the parser reads back.
  CHECK(parse_all(*e) == std::vector{event("tick", "line 1\nline 2\nline 3\nline 4", "42")});
  CHECK(parse_all(*empty) == std::vector{event("message", "")});
}

TEST_CASE("SseParser: the standard's examples parse as specified", "[http][unit]") {
  // WHATWG HTML §9.2.6: three data lines make one event joined with LF.
  CHECK(parse_all("data: YHOO\ndata: +2\ndata: 10\n\n") ==
        std::vector{event("message", "YHOO\n+2\n10")});
  // Comments are ignored; id persists; a data field with no colon has empty data.
  CHECK(parse_all(": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
                  "data:  third event\n\n") == std::vector{event("message", "first event", "1"),
                                                           event("message", "second event", ""),
                                                           event("message", " third event", "")});
  // "data" alone adds an empty line; an event with only "data" has empty data.
  CHECK(parse_all("data\n\ndata\ndata\n\ndata:\n") ==
        std::vector{event("message", ""), event("message", "\n")});
  // Exactly one space after the colon is dropped.
  CHECK(parse_all("data:test\n\ndata: test\n\n") ==
        std::vector{event("message", "test"), event("message", "test")});
}

TEST_CASE("SseParser: CRLF, LF and CR end lines, split anywhere", "[http][unit]") {
  const std::string stream =
      "\xEF\xBB\xBF"
      "event: a\r\ndata: 1\r\n\r\n"
      "event: b\rdata: 2\r\r"
      "event: c\ndata: 3\ndata: 4\n\n"
      ": keepalive\r\n"
      "id: 9\r\ndata: 5\r\n\r\n";
  const std::vector<SseEvent> want = {event("a", "1"), event("b", "2"), event("c", "3\n4"),
                                      event("message", "5", "9")};
  CHECK(parse_all(stream) == want);
  for (size_t split = 0; split <= stream.size(); ++split) {
    INFO("split at " << split);
    SseParser p;
    auto first = p.feed(std::string_view(stream).substr(0, split));
    REQUIRE(first.ok());
    auto second = p.feed(std::string_view(stream).substr(split));
    REQUIRE(second.ok());
    std::vector<SseEvent> got = *first;
    got.insert(got.end(), second->begin(), second->end());
    CHECK(got == want);
  }
  // One byte at a time.
  SseParser p;
  std::vector<SseEvent> got;
  for (char c : stream) {
    auto r = p.feed(std::string_view(&c, 1));
    REQUIRE(r.ok());
    got.insert(got.end(), r->begin(), r->end());
  }
  CHECK(got == want);
}

TEST_CASE("SseParser: retry, id, unknown fields and unfinished events", "[http][unit]") {
  SseParser p;
  auto r = p.feed("retry: 1500\n\nretry: 12a\nretry:\nretry: -1\nfoo: bar\nid: 7\ndata: x\n\n");
  REQUIRE(r.ok());
  REQUIRE(p.retry().has_value());
  CHECK(*p.retry() == 1500ms);
  CHECK(*r == std::vector{event("message", "x", "7")});
  CHECK(p.last_event_id() == "7");
  // An id with NUL is ignored; an empty id resets; the last id is kept without data too.
  std::string with_nul = std::string("id: a") + '\0' + "b\ndata: y\n\nid\n\nid: 8\n\n";
  auto r2 = p.feed(with_nul);
  REQUIRE(r2.ok());
  CHECK(*r2 == std::vector{event("message", "y", "7")});
  CHECK(p.last_event_id() == "8");
  // The event type resets after each event; an event not ended by a blank line is held.
  auto r3 = p.feed("event: special\ndata: s\n\ndata: plain\n\ndata: pending\n");
  REQUIRE(r3.ok());
  CHECK(*r3 == std::vector{event("special", "s", "8"), event("message", "plain", "8")});
}

TEST_CASE("SseParser: a line over the limit is kResourceExhausted and sticky", "[http][unit]") {
  SseParser p(16);
  auto ok = p.feed("data: 0123456\n\n");
  REQUIRE(ok.ok());
  auto big = p.feed("data: 0123456789abcdef\n");
  CHECK(big.status().code() == Code::kResourceExhausted);
  CHECK(p.feed("data: x\n\n").status().code() == Code::kResourceExhausted);

  SseParser q(16);
  auto many = q.feed("data: 0123456\ndata: 0123456\ndata: 0123456\n\n");
  CHECK(many.status().code() == Code::kResourceExhausted);
}

// An events route: three events, a comment and a retry, then the end of the response.
void add_events(Router& router) {
  router.handle("GET", "/events", [](ServerRequest& req) -> asio::awaitable<void> {
    Headers extra;
    extra.push_back(Header{std::string("x-stream"), std::string("yes")});
    auto sse = co_await SseWriter::start(req, std::move(extra));
    REQUIRE(sse.ok());
    Status s1 = co_await sse->send("", "first");
    REQUIRE(s1.ok());
    Status c = co_await sse->comment("keepalive");
    REQUIRE(c.ok());
    Status s2 = co_await sse->send("update", "two\nlines", "2");
    REQUIRE(s2.ok());
    Status rt = co_await sse->retry(3s);
    REQUIRE(rt.ok());
    std::string big(50000, 'q');
    Status s3 = co_await sse->send("big", big, "3");
    REQUIRE(s3.ok());
    Status bad = co_await sse->send("bad\nname", "x");
    CHECK(bad.code() == Code::kInvalidArgument);
    Status done = co_await sse->close();
    REQUIRE(done.ok());
  });
}

std::vector<SseEvent> expected_events() {
  return {event("message", "first"), event("update", "two\nlines", "2"),
          event("big", std::string(50000, 'q'), "3")};
}

template <typename F>
void with_server(Router& router, F body) {
  asio::io_context io;
  Server server(io.get_executor(), router, {});
  REQUIRE(server.listen_tcp("127.0.0.1", 0).ok());
  server.start();
  run_sync(io, [&]() -> asio::awaitable<void> {
    // A failed REQUIRE throws out of |body|; shut down anyway so that run_sync returns.
    std::exception_ptr failure;
    try {
      co_await body(server);
    } catch (...) {
      failure = std::current_exception();
    }
    co_await server.shutdown(net::after(2s));
    if (failure) std::rethrow_exception(failure);
  }());
}

TEST_CASE("SseWriter: events arrive in order over HTTP/1.1 chunks", "[http][unit]") {
  Router router;
  add_events(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    Http1DialOptions d;
    d.host = "127.0.0.1";
    d.port = server.port();
    auto c = co_await dial_http1(co_await asio::this_coro::executor, d, net::after(5s));
    REQUIRE(c.ok());
    Http1Client& client = **c;
    Status sent = co_await client.send_head("GET", "/events", {}, net::after(5s));
    REQUIRE(sent.ok());
    auto head = co_await client.read_head(net::after(5s));
    REQUIRE(head.ok());
    CHECK(head->status == 200);
    CHECK(*find_header(head->headers, "content-type") == "text/event-stream");
    CHECK(*find_header(head->headers, "cache-control") == "no-cache");
    CHECK(*find_header(head->headers, "x-stream") == "yes");
    CHECK(*find_header(head->headers, "transfer-encoding") == "chunked");
    SseParser parser;
    std::vector<SseEvent> got;
    for (;;) {
      auto piece = co_await client.read_body(net::after(5s));
      REQUIRE(piece.ok());
      if (piece->empty()) break;
      auto events = parser.feed(*piece);
      REQUIRE(events.ok());
      got.insert(got.end(), events->begin(), events->end());
    }
    CHECK(got == expected_events());
    REQUIRE(parser.retry().has_value());
    CHECK(*parser.retry() == 3000ms);
    CHECK(client.reusable());
    client.close();
  });
}

TEST_CASE("SseWriter: events arrive in order over HTTP/2", "[http][unit]") {
  Router router;
  add_events(router);
  with_server(router, [](Server& server) -> asio::awaitable<void> {
    DialOptions d;
    d.host = "127.0.0.1";
    d.port = server.port();
    auto conn = co_await dial_h2(co_await asio::this_coro::executor, d, net::after(5s));
    REQUIRE(conn.ok());
    RequestHead head;
    head.method = "GET";
    head.path = "/events";
    head.authority = "localhost";
    auto s = (*conn)->open_stream(head, true);
    REQUIRE(s.ok());
    Status got_headers = co_await (*s)->wait_headers();
    REQUIRE(got_headers.ok());
    CHECK((*s)->status() == 200);
    CHECK(*find_header((*s)->headers(), "content-type") == "text/event-stream");
    SseParser parser;
    std::vector<SseEvent> got;
    for (;;) {
      auto piece = co_await (*s)->read();
      REQUIRE(piece.ok());
      if (piece->empty()) break;
      auto events = parser.feed(*piece);
      REQUIRE(events.ok());
      got.insert(got.end(), events->begin(), events->end());
    }
    CHECK(got == expected_events());
    (*conn)->close();
  });
}

}  // namespace
}  // namespace cb::http
