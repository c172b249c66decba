#include "http/http1_codec.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace cb::http {
namespace {

std::string join_fields(const Headers& fields) {
  std::string out;
  for (const Header& h : fields) out += fmt::format("{}={};", h.name, h.value);
  return out;
}

// Records events as one transcript line per event; consecutive body pieces are merged so
// that transcripts do not depend on how the input was split.
class RequestRecorder : public Http1RequestVisitor {
 public:
  void on_request_head(Http1RequestHead&& head) override {
    log +=
        fmt::format("head {} {} 1.{} [{}] ka={} up={} cl={} chunked={}\n", head.method, head.target,
                    head.version_minor, join_fields(head.headers), head.keep_alive, head.upgrade,
                    head.content_length ? std::to_string(*head.content_length) : "-", head.chunked);
    heads.push_back(std::move(head));
    in_body_ = false;
  }
  void on_body(std::span<const char> data) override {
    if (!in_body_) log += "body ";
    log.append(data.data(), data.size());
    in_body_ = true;
  }
  void on_message_complete(Headers&& trailers) override {
    if (in_body_) log += "\n";
    in_body_ = false;
    log += fmt::format("complete [{}]\n", join_fields(trailers));
    ++completed;
  }

  std::string log;
  std::vector<Http1RequestHead> heads;
  int completed = 0;

 private:
  bool in_body_ = false;
};

class ResponseRecorder : public Http1ResponseVisitor {
 public:
  void on_response_head(Http1ResponseHead&& head) override {
    log +=
        fmt::format("head {} {} 1.{} [{}] ka={} up={} cl={} chunked={}\n", head.status, head.reason,
                    head.version_minor, join_fields(head.headers), head.keep_alive, head.upgrade,
                    head.content_length ? std::to_string(*head.content_length) : "-", head.chunked);
    heads.push_back(std::move(head));
    in_body_ = false;
  }
  void on_body(std::span<const char> data) override {
    if (!in_body_) log += "body ";
    log.append(data.data(), data.size());
    in_body_ = true;
  }
  void on_message_complete(Headers&& trailers) override {
    if (in_body_) log += "\n";
    in_body_ = false;
    log += fmt::format("complete [{}]\n", join_fields(trailers));
    ++completed;
  }

  std::string log;
  std::vector<Http1ResponseHead> heads;
  int completed = 0;

 private:
  bool in_body_ = false;
};

struct Outcome {
  Status status;
  std::string leftover;  // bytes not consumed
};

// Feeds |input| in pieces of |piece| bytes, as a connection would: unconsumed bytes are kept
// and passed again with the next piece. Stops at an error or once the parser is done().
template <typename Parser>
Outcome feed_in_pieces(Parser& parser, std::string_view input, std::size_t piece) {
  std::string pending;
  std::size_t pos = 0;
  while (pos < input.size()) {
    const std::size_t n = std::min(piece, input.size() - pos);
    pending.append(input.substr(pos, n));
    pos += n;
    auto consumed = parser.feed(pending);
    if (!consumed.ok()) return {consumed.status(), pending};
    pending.erase(0, *consumed);
    if (parser.done()) break;
  }
  pending.append(input.substr(pos));
  return {ok_status(), pending};
}

template <typename Parser>
Outcome feed_all(Parser& parser, std::string_view input) {
  return feed_in_pieces(parser, input, input.size() + 1);
}

// Parses one request and returns the error; the parser's status is checked by the caller.
struct RequestRun {
  RequestRecorder recorder;
  Http1RequestParser parser;
  Outcome outcome;
  explicit RequestRun(std::string_view input, Http1ParserOptions options = {})
      : parser(recorder, options), outcome(feed_all(parser, input)) {}
};

TEST_CASE("Http1RequestParser: a simple GET yields a head and a completion", "[http][unit]") {
  RequestRun run("GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n");
  REQUIRE(run.outcome.status.ok());
  CHECK(run.outcome.leftover.empty());
  CHECK(run.recorder.log ==
        "head GET /index.html?q=1 1.1 [host=example.com;accept=*/*;] ka=true up=false cl=- "
        "chunked=false\ncomplete []\n");
  CHECK(run.parser.error_http_status() == 0);
  CHECK_FALSE(run.parser.done());
}

TEST_CASE("Http1RequestParser: header names are lower-cased and values trimmed", "[http][unit]") {
  RequestRun run(
      "GET / HTTP/1.1\r\nHOST: h\r\nX-Mixed-Case:   padded value \t\r\nX-Empty:\r\n"
      "X-Last:\r\n\r\n");
  REQUIRE(run.outcome.status.ok());
  REQUIRE(run.recorder.heads.size() == 1);
  const Headers& h = run.recorder.heads[0].headers;
  REQUIRE(h.size() == 4);
  CHECK(h[0] == Header{"host", "h"});
  CHECK(h[1] == Header{"x-mixed-case", "padded value"});
  CHECK(h[2] == Header{"x-empty", ""});
  CHECK(h[3] == Header{"x-last", ""});
  REQUIRE(find_header(h, "X-MIXED-case") != nullptr);
  CHECK(*find_header(h, "X-MIXED-case") == "padded value");
  CHECK(find_header(h, "absent") == nullptr);
}

TEST_CASE("Http1RequestParser: a Content-Length body gives the same events at every split",
          "[http][unit]") {
  const std::string input =
      "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world";
  RequestRun whole(input);
  REQUIRE(whole.outcome.status.ok());
  REQUIRE(whole.recorder.log ==
          "head POST /upload 1.1 [host=h;content-length=11;] ka=true up=false cl=11 "
          "chunked=false\nbody hello world\ncomplete []\n");

  for (std::size_t split = 0; split <= input.size(); ++split) {
    RequestRecorder recorder;
    Http1RequestParser parser(recorder);
    std::string pending = input.substr(0, split);
    auto first = parser.feed(pending);
    REQUIRE(first.ok());
    pending.erase(0, *first);
    pending += input.substr(split);
    auto second = parser.feed(pending);
    REQUIRE(second.ok());
    CHECK(*second == pending.size());
    INFO("split at " << split);
    CHECK(recorder.log == whole.recorder.log);
  }

  RequestRecorder bytewise;
  Http1RequestParser parser(bytewise);
  auto outcome = feed_in_pieces(parser, input, 1);
  REQUIRE(outcome.status.ok());
  CHECK(outcome.leftover.empty());
  CHECK(bytewise.log == whole.recorder.log);
}

TEST_CASE("Http1RequestParser: a chunked body with extensions and trailers is decoded",
          "[http][unit]") {
  const std::string input =
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value;quoted=\"a b\"\r\nhello\r\n"
      "6 ; ext\r\n world\r\n"
      "A\r\n0123456789\r\n"
      "0\r\nChecksum: abc\r\nX-Trailer:  t \r\n\r\n";
  const std::string expected =
      "head POST /c 1.1 [host=h;transfer-encoding=chunked;] ka=true up=false cl=- "
      "chunked=true\nbody hello world0123456789\ncomplete [checksum=abc;x-trailer=t;]\n";
  for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{7}, input.size()}) {
    INFO("piece size " << piece);
    RequestRecorder recorder;
    Http1RequestParser parser(recorder);
    auto outcome = feed_in_pieces(parser, input, piece);
    REQUIRE(outcome.status.ok());
    CHECK(outcome.leftover.empty());
    CHECK(recorder.log == expected);
  }
}

TEST_CASE("Http1RequestParser: keep-alive follows the version and Connection", "[http][unit]") {
  SECTION("HTTP/1.1 persists by default") {
    RequestRun run("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    REQUIRE(run.recorder.heads.size() == 1);
    CHECK(run.recorder.heads[0].keep_alive);
    CHECK_FALSE(run.parser.done());
  }
  SECTION("Connection: close ends the connection and later bytes are not consumed") {
    RequestRun run("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\n");
    REQUIRE(run.outcome.status.ok());
    REQUIRE(run.recorder.heads.size() == 1);
    CHECK_FALSE(run.recorder.heads[0].keep_alive);
    CHECK(run.parser.done());
    CHECK_FALSE(run.parser.upgraded());
    CHECK(run.outcome.leftover == "GET /2 HTTP/1.1\r\n");
    auto again = run.parser.feed(run.outcome.leftover);
    REQUIRE(again.ok());
    CHECK(*again == 0);
  }
  SECTION("HTTP/1.0 closes by default") {
    RequestRun run("GET / HTTP/1.0\r\n\r\n");
    REQUIRE(run.outcome.status.ok());
    REQUIRE(run.recorder.heads.size() == 1);
    CHECK(run.recorder.heads[0].version_minor == 0);
    CHECK_FALSE(run.recorder.heads[0].keep_alive);
    CHECK(run.parser.done());
  }
  SECTION("HTTP/1.0 with Connection: keep-alive persists") {
    RequestRun run("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    REQUIRE(run.recorder.heads.size() == 1);
    CHECK(run.recorder.heads[0].keep_alive);
    CHECK_FALSE(run.parser.done());
  }
}

TEST_CASE("Http1RequestParser: pipelined requests are parsed in order", "[http][unit]") {
  const std::string input =
      "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
      "GET /b HTTP/1.1\r\nHost: h\r\n\r\n";
  SECTION("without pausing both are consumed in one call") {
    RequestRecorder recorder;
    Http1RequestParser parser(recorder);
    auto consumed = parser.feed(input);
    REQUIRE(consumed.ok());
    CHECK(*consumed == input.size());
    REQUIRE(recorder.heads.size() == 2);
    CHECK(recorder.heads[0].target == "/a");
    CHECK(recorder.heads[1].target == "/b");
    CHECK(recorder.completed == 2);
  }
  SECTION("pause_after_message returns after each request") {
    RequestRecorder recorder;
    Http1RequestParser parser(recorder, Http1ParserOptions{.pause_after_message = true});
    auto first = parser.feed(input);
    REQUIRE(first.ok());
    CHECK(*first == input.find("GET /b"));
    CHECK(recorder.completed == 1);
    auto second = parser.feed(std::string_view(input).substr(*first));
    REQUIRE(second.ok());
    CHECK(*first + *second == input.size());
    CHECK(recorder.completed == 2);
  }
}

TEST_CASE("Http1RequestParser: empty lines before a request and after a chunked one are skipped",
          "[http][unit]") {
  RequestRun run(
      "\r\n\r\nPOST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "1\r\nx\r\n0\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
      "\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n");
  REQUIRE(run.outcome.status.ok());
  REQUIRE(run.recorder.heads.size() == 2);
  // Framing fields in a trailer section change neither the framing nor the connection.
  CHECK(run.recorder.log.find("complete [content-length=9;connection=close;]") !=
        std::string::npos);
  CHECK(run.recorder.heads[1].target == "/b");
  CHECK_FALSE(run.parser.done());
}

TEST_CASE("Http1RequestParser: an Upgrade request leaves the following bytes untouched",
          "[http][unit]") {
  SECTION("h2c") {
    const std::string head =
        "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        "HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n";
    const std::string after = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12", 27);
    for (std::size_t piece : {std::size_t{1}, std::size_t{5}, head.size() + after.size()}) {
      RequestRecorder recorder;
      Http1RequestParser parser(recorder);
      auto outcome = feed_in_pieces(parser, head + after, piece);
      REQUIRE(outcome.status.ok());
      CHECK(parser.upgraded());
      CHECK(parser.done());
      CHECK(outcome.leftover == after);
      REQUIRE(recorder.heads.size() == 1);
      CHECK(recorder.heads[0].upgrade);
      CHECK(recorder.completed == 1);
      auto more = parser.feed(outcome.leftover);
      REQUIRE(more.ok());
      CHECK(*more == 0);
    }
  }
  SECTION("websocket") {
    RequestRun run(
        "GET /chat HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        "\x81\x05hello");
    REQUIRE(run.outcome.status.ok());
    CHECK(run.parser.upgraded());
    CHECK(run.outcome.leftover == "\x81\x05hello");
  }
  SECTION("an upgrade request's body is read before stopping") {
    RequestRun run(
        "POST / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
        "Content-Length: 3\r\n\r\nabcNEW");
    REQUIRE(run.outcome.status.ok());
    CHECK(run.parser.upgraded());
    CHECK(run.outcome.leftover == "NEW");
    CHECK(run.recorder.log.find("body abc\n") != std::string::npos);
  }
  SECTION("CONNECT stops after the head") {
    RequestRun run("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01");
    REQUIRE(run.outcome.status.ok());
    CHECK(run.parser.upgraded());
    REQUIRE(run.recorder.heads.size() == 1);
    CHECK(run.recorder.heads[0].method == "CONNECT");
    CHECK(run.recorder.heads[0].target == "example.com:443");
    CHECK(run.outcome.leftover == "\x16\x03\x01");
  }
  SECTION("a declined upgrade continues as HTTP/1.1") {
    RequestRun run(
        "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
        "GET /next HTTP/1.1\r\nHost: h\r\n\r\n");
    REQUIRE(run.parser.upgraded());
    run.parser.continue_after_upgrade();
    CHECK_FALSE(run.parser.done());
    auto consumed = run.parser.feed(run.outcome.leftover);
    REQUIRE(consumed.ok());
    CHECK(*consumed == run.outcome.leftover.size());
    REQUIRE(run.recorder.heads.size() == 2);
    CHECK(run.recorder.heads[1].target == "/next");
    CHECK_FALSE(run.recorder.heads[1].upgrade);
  }
  SECTION("Upgrade without the Connection option is not an upgrade") {
    RequestRun run("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\n\r\nGET / HTTP/1.1\r\n");
    REQUIRE(run.outcome.status.ok());
    CHECK_FALSE(run.parser.upgraded());
    CHECK(run.outcome.leftover.empty());
  }
  SECTION("Upgrade in an HTTP/1.0 request is ignored") {
    RequestRun run(
        "GET / HTTP/1.0\r\nConnection: Upgrade, keep-alive\r\nUpgrade: h2c\r\n\r\n"
        "GET /2 HTTP/1.0\r\n\r\n");
    REQUIRE(run.outcome.status.ok());
    CHECK_FALSE(run.parser.upgraded());
    REQUIRE(run.recorder.heads.size() == 2);
    CHECK_FALSE(run.recorder.heads[0].upgrade);
  }
}

// Expects |input| to be refused with |http_status| and a message containing |words|, whether
// it arrives at once or one byte at a time.
void check_request_error(std::string_view input, int http_status, std::string_view words,
                         Http1ParserOptions options = {}) {
  for (std::size_t piece : {input.size() + 1, std::size_t{1}}) {
    INFO("input: " << input << "\npiece size " << piece);
    RequestRecorder recorder;
    Http1RequestParser parser(recorder, options);
    Outcome outcome = feed_in_pieces(parser, input, piece);
    REQUIRE_FALSE(outcome.status.ok());
    CHECK(outcome.status.code() == Code::kInvalidArgument);
    CHECK_THAT(std::string(outcome.status.message()), Catch::Contains(std::string(words)));
    CHECK(parser.error_http_status() == http_status);
    // Sticky: the same error comes back, whatever is fed next.
    auto again = parser.feed(std::string_view("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    REQUIRE_FALSE(again.ok());
    CHECK(again.status() == outcome.status);
    CHECK(parser.finish() == outcome.status);
  }
}

TEST_CASE("Http1RequestParser: request smuggling vectors are refused with 400", "[http][unit]") {
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
      "0\r\n\r\n",
      400, "both Transfer-Encoding and Content-Length");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
      "0\r\n\r\n",
      400, "both Transfer-Encoding and Content-Length");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", 400,
      "more than one Content-Length");
  check_request_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\nabcdef", 400,
                      "Content-Length");
  check_request_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400,
                      "Content-Length");
  check_request_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400,
                      "does not end in chunked");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400,
      "does not end in chunked");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
      "\r\n\r\n0\r\n\r\n",
      400, "more than once");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501,
      "unsupported transfer coding \"gzip\"");
  check_request_error("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
                      "HTTP/1.0");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400,
      "chunk data not followed by CRLF");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\rXhello\r\n0\r\n\r\n", 400,
      "CR not followed by LF");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", 400,
      "invalid chunk size");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nhello\r\n", 400,
      "LF in a chunk extension");
  check_request_error(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "fffffffffffffffffff\r\n",
      400, "chunk size too large");
}

TEST_CASE("Http1RequestParser: malformed header sections are refused with 400", "[http][unit]") {
  check_request_error("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400, "obs-fold");
  check_request_error("GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400, "obs-fold");
  check_request_error("GET / HTTP/1.1\nHost: h\n\n", 400, "bare LF");
  check_request_error("GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", 400, "bare LF");
  check_request_error("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400, "CR not followed by LF");
  check_request_error(std::string_view("GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n", 34), 400,
                      "NUL");
  check_request_error("GET / HTTP/1.1\r\nHost: h\r\nX: a\x01z\r\n\r\n", 400, "invalid character");
  // http-parser leaves the first byte of a value unchecked; found by the fuzzer.
  check_request_error("GET / HTTP/1.1\r\nHost:\x0eh\r\n\r\n", 400,
                      "control byte 0x0e in the value of header \"Host\"");
  check_request_error("GET / HTTP/1.1\r\nHost: h\r\nX: \x7f\r\n\r\n", 400, "control byte 0x7f");
  check_request_error("GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400, "invalid header name");
  check_request_error("GET / HTTP/1.1\r\nHo(st: h\r\n\r\n", 400, "invalid");
  check_request_error("GET / HTTP/1.1\r\n: h\r\n\r\n", 400, "invalid");
  check_request_error("GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n", 400, "request target");
  check_request_error("GET / HTTP/1.1\r\n\r\n", 400, "without Host");
  check_request_error("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host");
  check_request_error("FOO / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "method");
  check_request_error("GET / HTTP/1.x\r\nHost: h\r\n\r\n", 400, "version");
}

TEST_CASE("Http1RequestParser: versions other than 1.x are refused with 505", "[http][unit]") {
  check_request_error("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "unsupported HTTP version 2.0");
  check_request_error("GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505, "unsupported HTTP version 3.0");
  check_request_error("GET / HTTP/0.9\r\n\r\n", 505, "unsupported HTTP version 0.9");
  check_request_error("GET /\r\n\r\n", 505, "unsupported HTTP version 0.9");
  check_request_error("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "HTTP/2 connection preface");
}

TEST_CASE("Http1RequestParser: header and target limits answer 431 and 414", "[http][unit]") {
  SECTION("the default header section limit is 64 KiB") {
    const std::string big(64 * 1024, 'a');
    check_request_error("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + big + "\r\n\r\n", 431,
                        "header section exceeds 65536 bytes");
  }
  SECTION("a header section exactly at the limit is accepted") {
    std::string input = "GET / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n";
    const std::size_t limit = 200;
    input.insert(input.find("X: ") + 3, std::string(limit - input.size(), 'v'));
    REQUIRE(input.size() == limit);
    RequestRun ok_run(input, Http1ParserOptions{.max_header_bytes = limit});
    CHECK(ok_run.outcome.status.ok());
    CHECK(ok_run.recorder.completed == 1);
    check_request_error(input, 431, "header section exceeds 199 bytes",
                        Http1ParserOptions{.max_header_bytes = limit - 1});
  }
  SECTION("100 header fields are accepted, 101 are not") {
    std::string fields = "Host: h\r\n";
    for (int i = 1; i < 100; ++i) fields += fmt::format("X-{}: v\r\n", i);
    RequestRun ok_run("GET / HTTP/1.1\r\n" + fields + "\r\n");
    CHECK(ok_run.outcome.status.ok());
    REQUIRE(ok_run.recorder.heads.size() == 1);
    CHECK(ok_run.recorder.heads[0].headers.size() == 100);
    check_request_error("GET / HTTP/1.1\r\n" + fields + "X-100: v\r\n\r\n", 431,
                        "more than 100 header fields");
  }
  SECTION("trailer sections have the same limits") {
    check_request_error(
        "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 2\r\n"
        "C: 3\r\n\r\n",
        431, "more than 2 trailer fields", Http1ParserOptions{.max_headers = 2});
  }
  SECTION("the target may be 8 KiB, not more") {
    const std::string target = "/" + std::string(8 * 1024 - 1, 'p');
    RequestRun ok_run("GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n");
    CHECK(ok_run.outcome.status.ok());
    check_request_error("GET " + target + "p HTTP/1.1\r\nHost: h\r\n\r\n", 414,
                        "request target longer than 8192 bytes");
  }
}

TEST_CASE("Http1RequestParser: a body over max_body_bytes answers 413", "[http][unit]") {
  const Http1ParserOptions options{.max_body_bytes = 10};
  SECTION("Content-Length is checked before any body byte") {
    check_request_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", 413,
                        "body exceeds 10 bytes", options);
    RequestRun ok_run("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789",
                      options);
    CHECK(ok_run.outcome.status.ok());
  }
  SECTION("chunked bodies are counted across chunks") {
    check_request_error(
        "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\n01234\r\n6\r\n012345\r\n0\r\n\r\n",
        413, "body exceeds 10 bytes", options);
  }
}

TEST_CASE("Http1RequestParser: reset() recovers from an error", "[http][unit]") {
  RequestRecorder recorder;
  Http1RequestParser parser(recorder);
  REQUIRE_FALSE(parser.feed(std::string_view("GET / HTTP/1.1\nHost: h\n\n")).ok());
  CHECK(parser.error_http_status() == 400);
  parser.reset();
  CHECK(parser.error_http_status() == 0);
  auto consumed = parser.feed(std::string_view("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
  REQUIRE(consumed.ok());
  CHECK(recorder.completed == 1);
}

TEST_CASE("Http1RequestParser: finish() fails only inside a request", "[http][unit]") {
  SECTION("between requests") {
    RequestRun run("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    CHECK(run.parser.finish().ok());
  }
  SECTION("inside a body") {
    RequestRun run("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nab");
    Status s = run.parser.finish();
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("3 body bytes missing"));
  }
  SECTION("inside a head") {
    RequestRun run("GET / HTTP/1.1\r\nHo");
    CHECK_FALSE(run.parser.finish().ok());
  }
}

// Response parser.

struct ResponseRun {
  ResponseRecorder recorder;
  Http1ResponseParser parser;
  Outcome outcome;
  ResponseRun(std::string_view method, std::string_view input)
      : parser(recorder), outcome(run(method, input)) {}

 private:
  Outcome run(std::string_view method, std::string_view input) {
    parser.expect_response(method);
    return feed_all(parser, input);
  }
};

TEST_CASE("Http1ResponseParser: a Content-Length body", "[http][unit]") {
  const std::string input = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello";
  for (std::size_t piece : {std::size_t{1}, input.size()}) {
    ResponseRecorder recorder;
    Http1ResponseParser parser(recorder);
    parser.expect_response("GET");
    auto outcome = feed_in_pieces(parser, input, piece);
    REQUIRE(outcome.status.ok());
    CHECK(recorder.log ==
          "head 200 OK 1.1 [content-length=5;server=x;] ka=true up=false cl=5 chunked=false\n"
          "body hello\ncomplete []\n");
    CHECK(parser.finish().ok());
  }
}

TEST_CASE("Http1ResponseParser: a chunked body with trailers", "[http][unit]") {
  ResponseRun run("POST",
                  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;x\r\nd\r\n"
                  "0\r\ngrpc-status: 0\r\n\r\n");
  REQUIRE(run.outcome.status.ok());
  CHECK(run.recorder.log ==
        "head 200 OK 1.1 [transfer-encoding=chunked;] ka=true up=false cl=- chunked=true\n"
        "body abcd\ncomplete [grpc-status=0;]\n");
}

TEST_CASE("Http1ResponseParser: a body without length ends at finish()", "[http][unit]") {
  ResponseRun run("GET", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end");
  REQUIRE(run.outcome.status.ok());
  CHECK(run.outcome.leftover.empty());
  CHECK(run.recorder.completed == 0);
  REQUIRE(run.recorder.heads.size() == 1);
  CHECK_FALSE(run.recorder.heads[0].keep_alive);
  REQUIRE(run.parser.finish().ok());
  CHECK(run.recorder.completed == 1);
  CHECK(run.recorder.log.find("body until the end\ncomplete []\n") != std::string::npos);
}

TEST_CASE("Http1ResponseParser: HEAD, 1xx, 204 and 304 responses have no body", "[http][unit]") {
  SECTION("HEAD") {
    ResponseRecorder recorder;
    Http1ResponseParser parser(recorder);
    parser.expect_response("HEAD");
    parser.expect_response("GET");
    const std::string input =
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
    auto consumed = parser.feed(input);
    REQUIRE(consumed.ok());
    CHECK(*consumed == input.size());
    REQUIRE(recorder.heads.size() == 2);
    CHECK(recorder.heads[0].content_length == 100u);
    CHECK(recorder.completed == 2);
    CHECK(recorder.log.find("body hi\n") != std::string::npos);
    CHECK(parser.finish().ok());
  }
  for (int status : {204, 304}) {
    SECTION(fmt::format("{}", status)) {
      ResponseRecorder recorder;
      Http1ResponseParser parser(recorder);
      parser.expect_response("GET");
      parser.expect_response("GET");
      const std::string input = fmt::format(
          "HTTP/1.1 {} X\r\nContent-Length: 10\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
          status);
      auto consumed = parser.feed(input);
      REQUIRE(consumed.ok());
      CHECK(*consumed == input.size());
      CHECK(recorder.completed == 2);
      CHECK(recorder.log.find("body") == std::string::npos);
    }
  }
  SECTION("interim 100 Continue then the final response") {
    ResponseRun run("POST",
                    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n"
                    "\r\nok");
    REQUIRE(run.outcome.status.ok());
    REQUIRE(run.recorder.heads.size() == 2);
    CHECK(run.recorder.heads[0].status == 100);
    CHECK(run.recorder.heads[1].status == 201);
    CHECK(run.recorder.completed == 2);
    CHECK(run.parser.finish().ok());
  }
}

TEST_CASE("Http1ResponseParser: pause_after_message stops after interim and final responses",
          "[http][unit]") {
  ResponseRecorder recorder;
  Http1ResponseParser parser(recorder, Http1ParserOptions{.pause_after_message = true});
  parser.expect_response("GET");
  parser.expect_response("GET");
  const std::string first = "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n";
  const std::string second = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na";
  const std::string third = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb";
  const std::string input = first + second + third;
  std::size_t off = 0;
  for (const std::string* piece : {&first, &second, &third}) {
    auto consumed = parser.feed(std::string_view(input).substr(off));
    REQUIRE(consumed.ok());
    CHECK(*consumed == piece->size());
    off += *consumed;
  }
  CHECK(recorder.completed == 3);
  CHECK(parser.finish().ok());
}

TEST_CASE("Http1ResponseParser: 101 Switching Protocols leaves the rest to the new protocol",
          "[http][unit]") {
  const std::string head =
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
  const std::string after("\0\0\x06\x04\0\0\0\0\0", 9);
  for (std::size_t piece : {std::size_t{1}, head.size() + after.size()}) {
    ResponseRecorder recorder;
    Http1ResponseParser parser(recorder);
    parser.expect_response("GET");
    auto outcome = feed_in_pieces(parser, head + after, piece);
    REQUIRE(outcome.status.ok());
    CHECK(parser.upgraded());
    CHECK(outcome.leftover == after);
    REQUIRE(recorder.heads.size() == 1);
    CHECK(recorder.heads[0].upgrade);
    CHECK(recorder.completed == 1);
    CHECK(parser.finish().ok());
  }
  SECTION("a 200 to CONNECT opens a tunnel") {
    ResponseRun run("CONNECT", "HTTP/1.1 200 Connection Established\r\n\r\ntunnel bytes");
    REQUIRE(run.outcome.status.ok());
    CHECK(run.parser.upgraded());
    CHECK(run.outcome.leftover == "tunnel bytes");
  }
}

TEST_CASE("Http1ResponseParser: finish() reports bodies cut short", "[http][unit]") {
  SECTION("chunked") {
    ResponseRun run("GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
    REQUIRE(run.outcome.status.ok());
    Status s = run.parser.finish();
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("chunked body"));
    CHECK(run.recorder.completed == 0);
  }
  SECTION("chunked, inside the trailers") {
    ResponseRun run("GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\r\n");
    CHECK_THAT(std::string(run.parser.finish().message()), Catch::Contains("trailer"));
  }
  SECTION("Content-Length") {
    ResponseRun run("GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel");
    CHECK_THAT(std::string(run.parser.finish().message()), Catch::Contains("7 body bytes missing"));
  }
  SECTION("no response at all") {
    ResponseRun run("GET", "");
    CHECK_THAT(std::string(run.parser.finish().message()),
               Catch::Contains("before the response to GET"));
  }
}

TEST_CASE("Http1ResponseParser: malformed or unsolicited responses are errors", "[http][unit]") {
  SECTION("no request outstanding") {
    ResponseRecorder recorder;
    Http1ResponseParser parser(recorder);
    auto r = parser.feed(std::string_view("HTTP/1.1 200 OK\r\n\r\n"));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("no request outstanding"));
  }
  SECTION("smuggling-shaped framing") {
    ResponseRun run("GET",
                    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
    CHECK(run.outcome.status.code() == Code::kInvalidArgument);
  }
  SECTION("HTTP/2.0 status line") {
    ResponseRun run("GET", "HTTP/2.0 200 OK\r\n\r\n");
    CHECK_THAT(std::string(run.outcome.status.message()), Catch::Contains("version"));
  }
  SECTION("obs-fold") {
    ResponseRun run("GET", "HTTP/1.1 200 OK\r\nA: b\r\n\tc\r\n\r\n");
    CHECK_THAT(std::string(run.outcome.status.message()), Catch::Contains("obs-fold"));
  }
}

// Serializers.

TEST_CASE("serialize_request_head: writes the request line and fields", "[http][unit]") {
  auto head = serialize_request_head("GET", "/x?y", {{"Host", "h"}, {"Accept", "*/*"}});
  REQUIRE(head.ok());
  CHECK(*head == "GET /x?y HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n");
}

TEST_CASE("serialize_response_head: uses the reason phrase table", "[http][unit]") {
  CHECK(*serialize_response_head(200, {}) == "HTTP/1.1 200 OK\r\n\r\n");
  CHECK(*serialize_response_head(431, {{"connection", "close"}}) ==
        "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\r\n");
  CHECK(*serialize_response_head(299, {}) == "HTTP/1.1 299 \r\n\r\n");
  CHECK(reason_phrase(404) == "Not Found");
  CHECK(reason_phrase(505) == "HTTP Version Not Supported");
  CHECK_FALSE(serialize_response_head(99, {}).ok());
  CHECK_FALSE(serialize_response_head(1000, {}).ok());
}

TEST_CASE("serializers: CR, LF and NUL injection is refused and names the header", "[http][unit]") {
  auto value_crlf = serialize_request_head("GET", "/", {{"x-user", "a\r\nInjected: 1"}});
  REQUIRE_FALSE(value_crlf.ok());
  CHECK(value_crlf.status().code() == Code::kInvalidArgument);
  CHECK_THAT(std::string(value_crlf.status().message()), Catch::Contains("\"x-user\""));
  CHECK_THAT(std::string(value_crlf.status().message()), Catch::Contains("CR"));

  auto value_lf = serialize_response_head(200, {{"x-lf", "a\nb"}});
  REQUIRE_FALSE(value_lf.ok());
  CHECK_THAT(std::string(value_lf.status().message()), Catch::Contains("\"x-lf\": value holds LF"));

  auto value_nul = serialize_response_head(200, {{"x-nul", std::string("a\0b", 3)}});
  REQUIRE_FALSE(value_nul.ok());
  CHECK_THAT(std::string(value_nul.status().message()), Catch::Contains("NUL"));

  auto name_crlf = serialize_response_head(200, {{"x\r\nevil", "v"}});
  REQUIRE_FALSE(name_crlf.ok());
  CHECK_THAT(std::string(name_crlf.status().message()), Catch::Contains("x\\x0d\\x0aevil"));

  CHECK_FALSE(serialize_request_head("GET", "/a b", {}).ok());
  CHECK_FALSE(serialize_request_head("GET", "/a\r\nX: y", {}).ok());
  CHECK_FALSE(serialize_request_head("GE T", "/", {}).ok());
  CHECK_FALSE(serialize_request_head("GET", "", {}).ok());

  std::string out = "kept";
  Status s = append_last_chunk(out, {{"grpc-message", "bad\r\nvalue"}});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("trailer \"grpc-message\""));
  CHECK(out == "kept");

  // Tabs are legal inside a value.
  CHECK(serialize_response_head(200, {{"x-tab", "a\tb"}}).ok());
}

TEST_CASE("serializers: chunks", "[http][unit]") {
  std::string out;
  append_chunk(out, std::string_view("hello"));
  append_chunk(out, std::string_view(""));
  append_chunk(out, std::string(26, 'z'));
  REQUIRE(append_last_chunk(out, {{"checksum", "1"}}).ok());
  CHECK(out == "5\r\nhello\r\n1a\r\n" + std::string(26, 'z') + "\r\n0\r\nchecksum: 1\r\n\r\n");
}

TEST_CASE("serializers: requests and responses round-trip through the parsers", "[http][unit]") {
  const Headers headers = {
      {"host", "api.internal"}, {"transfer-encoding", "chunked"}, {"x-request-id", "abc 123"}};
  auto head = serialize_request_head("PUT", "/v1/boxes/7?force=1", headers);
  REQUIRE(head.ok());
  std::string wire = *head;
  append_chunk(wire, std::string_view("first,"));
  append_chunk(wire, std::string(300, 'b'));
  REQUIRE(append_last_chunk(wire, {{"x-digest", "d1"}}).ok());

  RequestRecorder recorder;
  Http1RequestParser parser(recorder);
  auto outcome = feed_in_pieces(parser, wire, 3);
  REQUIRE(outcome.status.ok());
  REQUIRE(recorder.heads.size() == 1);
  CHECK(recorder.heads[0].method == "PUT");
  CHECK(recorder.heads[0].target == "/v1/boxes/7?force=1");
  CHECK(recorder.heads[0].headers == headers);
  CHECK(recorder.log.find("body first," + std::string(300, 'b') + "\n") != std::string::npos);
  CHECK(recorder.log.find("complete [x-digest=d1;]") != std::string::npos);

  auto response = serialize_response_head(404, {{"content-length", "4"}, {"x-a", "b"}});
  REQUIRE(response.ok());
  ResponseRun run("GET", *response + "nope");
  REQUIRE(run.outcome.status.ok());
  REQUIRE(run.recorder.heads.size() == 1);
  CHECK(run.recorder.heads[0].status == 404);
  CHECK(run.recorder.heads[0].reason == "Not Found");
  CHECK(run.recorder.heads[0].headers == Headers{{"content-length", "4"}, {"x-a", "b"}});
  CHECK(run.recorder.log.find("body nope\n") != std::string::npos);
}

}  // namespace
}  // namespace cb::http
