#include "grpc/frame.h"

#include <fmt/format.h>

namespace cb::grpc {

void append_message(std::string& out, std::string_view message) {
  uint32_t n = static_cast<uint32_t>(message.size());
  char header[kFrameHeaderSize] = {0, char(n >> 24), char(n >> 16), char(n >> 8), char(n)};
  out.append(header, kFrameHeaderSize);
  out.append(message);
}

std::string encode_message(std::string_view message) {
  std::string out;
  out.reserve(kFrameHeaderSize + message.size());
  append_message(out, message);
  return out;
}

Status FrameDecoder::feed(std::string_view data) {
  if (!error_.ok()) return error_;
  buffer_.append(data);
  size_t pos = 0;
  while (buffer_.size() - pos >= kFrameHeaderSize) {
    auto flag = static_cast<uint8_t>(buffer_[pos]);
    uint32_t len = (uint32_t(uint8_t(buffer_[pos + 1])) << 24) |
                   (uint32_t(uint8_t(buffer_[pos + 2])) << 16) |
                   (uint32_t(uint8_t(buffer_[pos + 3])) << 8) | uint32_t(uint8_t(buffer_[pos + 4]));
    if (flag == 1) {
      error_ = internal_error("compressed message received but no grpc-encoding was negotiated");
      return error_;
    }
    if (flag != 0) {
      error_ = internal_error(fmt::format("invalid compressed-flag {} in message prefix", flag));
      return error_;
    }
    if (len > max_) {
      error_ = resource_exhausted(
          fmt::format("received message larger than max ({} vs. {})", len, max_));
      return error_;
    }
    if (buffer_.size() - pos - kFrameHeaderSize < len) break;
    messages_.emplace_back(buffer_.substr(pos + kFrameHeaderSize, len));
    pos += kFrameHeaderSize + len;
  }
  buffer_.erase(0, pos);
  return ok_status();
}

std::optional<std::string> FrameDecoder::next() {
  if (messages_.empty()) return std::nullopt;
  std::string m = std::move(messages_.front());
  messages_.pop_front();
  return m;
}

}  // namespace cb::grpc
