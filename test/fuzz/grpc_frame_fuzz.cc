// libFuzzer target for the gRPC message framing (src/grpc/frame.h): every request body a gRPC
// server reads and every response body a client reads goes through FrameDecoder.
//
// Input: two steering bytes, then the DATA bytes.
//   byte 0: size of the pieces the bytes are fed in (1..64), as DATA frames would split them;
//   byte 1: the max_message_size, one of kMaxSizes;
//   rest:   the bytes of the request or response body.
//
// Beyond "no crash, no sanitizer report" it checks properties the contract promises:
// - no decoded message is larger than max_message_size;
// - an error is kResourceExhausted or kInternal, and every later feed() returns it again;
// - the split does not matter: feeding in pieces gives the same messages and the same error as
//   one feed of everything, and both agree with a plain reading of the spec's grammar;
// - the messages re-encode to exactly the bytes they were decoded from;
// - idle()/at_boundary() tell the truth about a partial message.
//
// Build and run by hand:
//   clang++ -std=c++20 -fsanitize=fuzzer,address,undefined -DFMT_HEADER_ONLY -Isrc \
//     test/fuzz/grpc_frame_fuzz.cc src/grpc/frame.cc src/base/*.cc -o /tmp/grpc_frame_fuzz
//   mkdir -p /tmp/gf-out
//   /tmp/grpc_frame_fuzz -max_total_time=60 /tmp/gf-out test/fuzz/corpus/grpc_frame

#include "grpc/frame.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using cb::Code;
using cb::Status;
using cb::grpc::FrameDecoder;
using cb::grpc::kFrameHeaderSize;

void require(bool condition) {
  if (!condition) std::abort();
}

// Small limits reach the kResourceExhausted path with short inputs; the default is the real one.
constexpr size_t kMaxSizes[] = {0, 1, 4, 16, 255, 1024, cb::grpc::kDefaultMaxMessageSize};

struct Outcome {
  std::vector<std::string> messages;
  Code error = Code::kOk;
  size_t consumed = 0;  // bytes making up |messages|
};

// The grammar read plainly: message := flag(0) . length: uint32 BE . data[length].
Outcome reference(std::string_view wire, size_t max) {
  Outcome out;
  size_t pos = 0;
  while (wire.size() - pos >= kFrameHeaderSize) {
    auto flag = static_cast<uint8_t>(wire[pos]);
    uint32_t len = 0;
    for (size_t i = 1; i < kFrameHeaderSize; ++i) len = (len << 8) | uint8_t(wire[pos + i]);
    if (flag != 0) {
      out.error = Code::kInternal;
      break;
    }
    if (len > max) {
      out.error = Code::kResourceExhausted;
      break;
    }
    if (wire.size() - pos - kFrameHeaderSize < len) break;
    out.messages.emplace_back(wire.substr(pos + kFrameHeaderSize, len));
    pos += kFrameHeaderSize + len;
  }
  out.consumed = pos;
  return out;
}

// Feeds |wire| in pieces of |piece| bytes, taking messages out as they complete.
Outcome decode(std::string_view wire, size_t piece, size_t max) {
  Outcome out;
  FrameDecoder d(max);
  Status error;
  for (size_t pos = 0; pos < wire.size(); pos += piece) {
    Status st = d.feed(wire.substr(pos, piece));
    while (auto m = d.next()) {
      require(m->size() <= max);
      out.consumed += kFrameHeaderSize + m->size();
      out.messages.push_back(std::move(*m));
    }
    if (!st.ok()) {
      require(st.code() == Code::kResourceExhausted || st.code() == Code::kInternal);
      require(!st.message().empty());
      error = st;
      break;
    }
    require(d.at_boundary() == d.idle());  // nothing is left undelivered
  }
  if (!error.ok()) {
    // Sticky: more bytes, good bytes or no bytes, the decoder keeps failing the same way.
    require(d.feed(wire) == error);
    require(d.feed("") == error);
    require(d.feed(cb::grpc::encode_message("ok")) == error);
    require(!d.next().has_value());
    out.error = error.code();
  } else {
    // Without an error, the decoder holds exactly the bytes after the last whole message.
    require(d.idle() == (out.consumed == wire.size()));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t piece = 1 + data[0] % 64;
  size_t max = kMaxSizes[data[1] % std::size(kMaxSizes)];
  std::string_view wire(reinterpret_cast<const char*>(data + 2), size - 2);

  Outcome pieces = decode(wire, piece, max);
  Outcome whole = decode(wire, wire.empty() ? 1 : wire.size(), max);
  Outcome spec = reference(wire, max);
  require(pieces.messages == spec.messages);
  require(pieces.error == spec.error);
  require(pieces.consumed == spec.consumed);
  require(whole.messages == spec.messages);
  require(whole.error == spec.error);

  std::string reencoded;
  for (const auto& m : pieces.messages) cb::grpc::append_message(reencoded, m);
  require(reencoded == wire.substr(0, pieces.consumed));
  return 0;
}
