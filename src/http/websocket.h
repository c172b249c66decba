#pragma once
// The WebSocket wire (RFC 6455), client side, without I/O (house style H13): the frame
// parser for what a server sends, the frame encoder for what a client sends, and the
// opening handshake's key and accept values. websocket_client.h pumps bytes through it.
// The frame grammar and the rules enforced are in README.md §WebSocket.
//
//   ws::FrameParser p;
//   if (Status s = p.feed(bytes); !s.ok()) { send encode_close(p.close_code(), ...); close; }
//   while (auto m = p.next()) { ... m->opcode, m->payload ... }
//
// No extension is ever negotiated, so RSV1-3 must be zero. Thread-compatible: one parser per
// connection.

#include "base/result.h"
#include "base/status.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace cb::http::ws {

enum class Opcode : uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xA,
};

// Close codes (RFC 6455 §7.4.1).
inline constexpr uint16_t kCloseNormal = 1000;
inline constexpr uint16_t kCloseGoingAway = 1001;
inline constexpr uint16_t kCloseProtocolError = 1002;
inline constexpr uint16_t kCloseUnsupportedData = 1003;
inline constexpr uint16_t kCloseNoStatus = 1005;  // never sent: a close frame without a code
inline constexpr uint16_t kCloseAbnormal = 1006;  // never sent: the connection dropped
inline constexpr uint16_t kCloseInvalidPayload = 1007;
inline constexpr uint16_t kClosePolicy = 1008;
inline constexpr uint16_t kCloseTooBig = 1009;
inline constexpr uint16_t kCloseInternalError = 1011;

// Control frames carry at most this many payload bytes.
inline constexpr size_t kMaxControlPayload = 125;

// True for a code a peer may put in a close frame: 1000-1003, 1007-1014, 3000-4999.
bool is_valid_close_code(uint16_t code);

// True if |s| is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// One whole message, or one control frame.
struct Message {
  Opcode opcode = Opcode::kText;  // kText, kBinary, kClose, kPing or kPong
  std::string payload;            // for kClose: see close_code/close_reason
  uint16_t close_code = kCloseNoStatus;
  std::string close_reason;
};

struct FrameParserOptions {
  // Largest message (all fragments together) accepted; more is kResourceExhausted and close
  // code 1009. Checked from the frame headers, before the payload is buffered.
  size_t max_message = 16u << 20;
  // The frames come from a server: a masked frame is a protocol error (RFC 6455 §5.1).
  // False parses a client's frames (which must be masked) instead.
  bool from_server = true;
};

// Parses frames in the order they arrive. Text and binary messages come out whole
// (fragments joined); control frames come out as they arrive, also between fragments.
// After the first error, or after a close frame, feed() ignores further bytes.
class FrameParser {
 public:
  explicit FrameParser(FrameParserOptions options = {});

  // Parses |data|. Errors: kInvalidArgument for a protocol violation (close code 1002) or
  // invalid UTF-8 in a text message or close reason (1007); kResourceExhausted for a message
  // over max_message (1009). The error sticks: later calls return it again.
  Status feed(std::string_view data);

  // The next parsed message, oldest first.
  std::optional<Message> next();

  // The close code that answers the error feed() returned (1002, 1007 or 1009).
  uint16_t close_code() const { return close_code_; }
  // A close frame was parsed.
  bool closed() const { return closed_; }
  // Bytes buffered: a frame not yet complete.
  size_t buffered() const { return in_.size() - pos_; }

 private:
  Status fail(uint16_t code, std::string_view message);
  // Parses one frame from in_ at pos_; false when more bytes are needed.
  Result<bool> parse_one();
  Status deliver(Opcode opcode, bool fin, std::string&& payload);

  FrameParserOptions options_;
  std::string in_;
  size_t pos_ = 0;
  bool in_message_ = false;  // a fragmented message is open
  Opcode message_opcode_ = Opcode::kText;
  std::string message_;
  std::deque<Message> out_;
  Status error_;
  uint16_t close_code_ = kCloseProtocolError;
  bool closed_ = false;
};

// One client frame: masked with |mask| (RFC 6455 §5.3; every client frame is masked).
std::string encode_frame(Opcode opcode, std::string_view payload, bool fin,
                         const std::array<uint8_t, 4>& mask);
// An unmasked frame, as a server sends it (for tests and the fuzz target's round trip).
std::string encode_server_frame(Opcode opcode, std::string_view payload, bool fin);
// A client close frame with |code| and |reason| (the reason cut to fit 125 bytes).
std::string encode_close(uint16_t code, std::string_view reason,
                         const std::array<uint8_t, 4>& mask);

// The opening handshake (RFC 6455 §4): Sec-WebSocket-Key from 16 random bytes, and the
// Sec-WebSocket-Accept a server must answer for a key: base64(SHA-1(key + GUID)).
std::string handshake_key(const std::array<uint8_t, 16>& random);
std::string handshake_accept(std::string_view key);

}  // namespace cb::http::ws
