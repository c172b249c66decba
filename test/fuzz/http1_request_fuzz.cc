// libFuzzer target for the HTTP/1.1 codec (src/http/http1_codec.h): request bytes come from
// any client on the network, response bytes from any server we call.
//
// Input: the first byte steers the run, the rest is the wire bytes.
//   bits 0-5: size of the pieces the bytes are fed in (1..64), as reads would split them;
//   bit 6:    pause_after_message;
//   bit 7:    methods the response parser expects (GET/POST, or HEAD/CONNECT).
//
// Beyond "no crash, no sanitizer report" it checks properties the contract promises:
// - events come in order: head, body pieces (never empty), completion;
// - feed() never consumes more than it was given; an error is kInvalidArgument, carries one of
//   the documented statuses, and is returned again by every later call;
// - every request head the parser accepts serializes without error and parses back to the
//   same method, target and fields (the serializer and the parser agree on what is valid).
//
// Build and run by hand:
//   clang++ -std=c++20 -fsanitize=fuzzer,address,undefined -DFMT_HEADER_ONLY -Isrc \
//     test/fuzz/http1_request_fuzz.cc src/http/http1_codec.cc src/base/*.cc -lhttp_parser \
//     -o /tmp/http1_fuzz
//   /tmp/http1_fuzz -max_total_time=60 test/fuzz/corpus/http1_request

#include "http/http1_codec.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

using cb::Code;
using cb::http::Headers;
using cb::http::Http1ParserOptions;
using cb::http::Http1RequestHead;
using cb::http::Http1RequestParser;
using cb::http::Http1RequestVisitor;
using cb::http::Http1ResponseHead;
using cb::http::Http1ResponseParser;
using cb::http::Http1ResponseVisitor;

void require(bool condition) {
  if (!condition) std::abort();
}

// Small limits, so that short inputs reach the 431/414/413 paths.
Http1ParserOptions fuzz_options(bool pause) {
  Http1ParserOptions options;
  options.max_header_bytes = 2048;
  options.max_headers = 16;
  options.max_uri_bytes = 256;
  options.max_body_bytes = 4096;
  options.pause_after_message = pause;
  return options;
}

// Checks the event order common to both visitors.
class Order {
 public:
  void head() {
    require(!in_message_);
    in_message_ = true;
  }
  void body(std::span<const char> data) { require(in_message_ && !data.empty()); }
  void complete() {
    require(in_message_);
    in_message_ = false;
  }

 private:
  bool in_message_ = false;
};

class RequestVisitor : public Http1RequestVisitor {
 public:
  void on_request_head(Http1RequestHead&& head) override {
    order.head();
    if (heads.size() < 8) heads.push_back(std::move(head));
  }
  void on_body(std::span<const char> data) override { order.body(data); }
  void on_message_complete(Headers&&) override { order.complete(); }

  Order order;
  std::vector<Http1RequestHead> heads;
};

class ResponseVisitor : public Http1ResponseVisitor {
 public:
  void on_response_head(Http1ResponseHead&&) override { order.head(); }
  void on_body(std::span<const char> data) override { order.body(data); }
  void on_message_complete(Headers&&) override { order.complete(); }

  Order order;
};

bool is_documented_status(int status) {
  return status == 400 || status == 413 || status == 414 || status == 431 || status == 501 ||
         status == 505;
}

// Feeds |input| in |piece|-byte reads, keeping unconsumed bytes as a connection would.
// Returns false once the parser reported an error.
template <typename Parser>
bool feed_in_pieces(Parser& parser, std::string_view input, std::size_t piece,
                    bool may_continue_upgrade) {
  std::string pending;
  std::size_t pos = 0;
  while (pos < input.size()) {
    const std::size_t n = std::min(piece, input.size() - pos);
    pending.append(input.substr(pos, n));
    pos += n;
    auto consumed = parser.feed(pending);
    if (!consumed.ok()) {
      require(consumed.status().code() == Code::kInvalidArgument);
      auto again = parser.feed(pending);
      require(!again.ok() && again.status() == consumed.status());
      require(parser.finish() == consumed.status());
      return false;
    }
    require(*consumed <= pending.size());
    pending.erase(0, *consumed);
    if constexpr (std::is_same_v<Parser, Http1RequestParser>) {
      if (parser.upgraded() && may_continue_upgrade) {
        parser.continue_after_upgrade();
        may_continue_upgrade = false;
      }
    }
    if (parser.done()) return true;
  }
  return parser.finish().ok();
}

// A head the parser accepted must serialize, and parse back to the same request.
void check_round_trip(const Http1RequestHead& head) {
  if (head.version_minor == 0) return;  // serialized as HTTP/1.1, where Host is required
  auto wire = cb::http::serialize_request_head(head.method, head.target, head.headers);
  require(wire.ok());
  RequestVisitor visitor;
  Http1RequestParser parser(visitor, fuzz_options(false));
  auto consumed = parser.feed(*wire);
  require(consumed.ok());
  require(visitor.heads.size() == 1);
  const Http1RequestHead& again = visitor.heads[0];
  require(again.method == head.method);
  require(again.target == head.target);
  require(again.headers == head.headers);
  require(again.upgrade == head.upgrade);
  require(again.content_length == head.content_length);
  require(again.chunked == head.chunked);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t control = data[0];
  const std::size_t piece = (control & 0x3f) + 1;
  const bool pause = (control & 0x40) != 0;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

  {
    RequestVisitor visitor;
    Http1RequestParser parser(visitor, fuzz_options(pause));
    if (!feed_in_pieces(parser, input, piece, /*may_continue_upgrade=*/true)) {
      require(is_documented_status(parser.error_http_status()));
    } else {
      require(parser.error_http_status() == 0);
    }
    for (const Http1RequestHead& head : visitor.heads) check_round_trip(head);
  }

  {
    ResponseVisitor visitor;
    Http1ResponseParser parser(visitor, fuzz_options(pause));
    const bool odd = (control & 0x80) != 0;
    for (int i = 0; i < 4; ++i)
      parser.expect_response(odd ? (i % 2 ? "CONNECT" : "HEAD") : (i % 2 ? "POST" : "GET"));
    feed_in_pieces(parser, input, piece, /*may_continue_upgrade=*/false);
  }
  return 0;
}
