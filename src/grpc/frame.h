#pragma once
// gRPC length-prefixed messages (PROTOCOL-HTTP2.md "Length-Prefixed-Message"):
//
//   message := compressed-flag: uint8 (0 or 1) . length: uint32 big-endian . data: byte[length]
//
// FrameDecoder is sans-I/O: feed it DATA bytes as they arrive, take whole messages out.
// Thread-safety: a value type, one owner.

#include "base/result.h"

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace cb::grpc {

// 4 MiB: the default receive limit of every gRPC implementation (grpc-core, grpc-js,
// grpc-go), so peers agree on what is too large without negotiation.
inline constexpr size_t kDefaultMaxMessageSize = 4u << 20;
inline constexpr size_t kFrameHeaderSize = 5;

// Appends the 5-byte prefix and |message| to |out|.
void append_message(std::string& out, std::string_view message);
std::string encode_message(std::string_view message);

class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_message_size = kDefaultMaxMessageSize)
      : max_(max_message_size) {}

  // Consumes |data|. Errors (sticky; the stream must be failed):
  //   kResourceExhausted: a length prefix above max_message_size (checked before buffering);
  //   kInternal: a compressed-flag other than 0, or 1 (compression is not negotiated here).
  Status feed(std::string_view data);
  // The next complete message, if any.
  std::optional<std::string> next();
  // True when no partial message is buffered (a stream may end only here).
  bool at_boundary() const { return buffer_.empty() && messages_.empty(); }
  bool idle() const { return buffer_.empty(); }

 private:
  size_t max_;
  std::string buffer_;
  std::deque<std::string> messages_;
  Status error_;
};

}  // namespace cb::grpc
