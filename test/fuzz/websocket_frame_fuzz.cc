// libFuzzer target for the WebSocket frame parser (src/http/websocket.h): every byte a
// DevTools endpoint (Chromium, or whatever answers on its port) sends the agent goes through
// ws::FrameParser::feed().
//
// Input: the first byte picks how the rest is split into feed() calls (1..16 bytes, or all at
// once), so split headers and payloads are exercised too; the rest is the byte stream.
//
// Beyond "no crash, no sanitizer report" it checks what the contract promises:
// - feed() fails only with kInvalidArgument (close 1002 or 1007) or kResourceExhausted (1009),
//   and the error sticks;
// - no message is larger than max_message, a text message and a close reason are UTF-8,
//   control payloads are at most 125 bytes, a close code is one a peer may send;
// - nothing is parsed after a close frame;
// - every message re-encoded as one server frame parses back to the same message.
//
// Build and run: scripts/fuzz websocket_frame_fuzz 60

#include "http/websocket.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

namespace ws = cb::http::ws;

void require(bool condition) {
  if (!condition) std::abort();
}

constexpr size_t kMax = 4096;

void check_message(const ws::Message& m) {
  switch (m.opcode) {
    case ws::Opcode::kText:
      require(ws::is_valid_utf8(m.payload));
      [[fallthrough]];
    case ws::Opcode::kBinary: {
      require(m.payload.size() <= kMax);
      ws::FrameParser again(ws::FrameParserOptions{kMax, true});
      require(again.feed(ws::encode_server_frame(m.opcode, m.payload, true)).ok());
      auto back = again.next();
      require(back && back->opcode == m.opcode && back->payload == m.payload);
      break;
    }
    case ws::Opcode::kPing:
    case ws::Opcode::kPong:
      require(m.payload.size() <= ws::kMaxControlPayload);
      break;
    case ws::Opcode::kClose:
      require(m.payload.size() <= ws::kMaxControlPayload);
      require(m.close_code == ws::kCloseNoStatus || ws::is_valid_close_code(m.close_code));
      require(ws::is_valid_utf8(m.close_reason));
      break;
    case ws::Opcode::kContinuation:
      require(false);  // never comes out whole
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = data[0] % 17;  // 0: everything at once
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  ws::FrameParser p(ws::FrameParserOptions{kMax, true});
  bool failed = false;
  bool closed = false;
  while (!rest.empty()) {
    const size_t n = step == 0 ? rest.size() : std::min(step, rest.size());
    cb::Status s = p.feed(rest.substr(0, n));
    rest.remove_prefix(n);
    if (!s.ok()) {
      require(s.code() == cb::Code::kInvalidArgument || s.code() == cb::Code::kResourceExhausted);
      require(p.close_code() == ws::kCloseProtocolError ||
              p.close_code() == ws::kCloseInvalidPayload || p.close_code() == ws::kCloseTooBig);
      require(!p.feed("\x81\x00").ok());  // sticks
      failed = true;
    }
    while (auto m = p.next()) {
      require(!closed);
      check_message(*m);
      if (m->opcode == ws::Opcode::kClose) closed = true;
    }
    if (failed) break;
  }
  return 0;
}
