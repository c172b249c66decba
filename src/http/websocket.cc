#include "http/websocket.h"

#include "base/base64.h"

#include <fmt/format.h>

#include <cstring>

namespace cb::http::ws {

bool is_valid_close_code(uint16_t code) {
  if (code >= 1000 && code <= 1003) return true;
  if (code >= 1007 && code <= 1014) return true;
  return code >= 3000 && code <= 4999;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t min = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, min = 0x10000;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// ---- parser -------------------------------------------------------------------------------

FrameParser::FrameParser(FrameParserOptions options) : options_(options) {}

Status FrameParser::fail(uint16_t code, std::string_view message) {
  close_code_ = code;
  error_ = Status(code == kCloseTooBig ? Code::kResourceExhausted : Code::kInvalidArgument,
                  fmt::format("websocket: {}", message));
  in_.clear();
  pos_ = 0;
  return error_;
}

Status FrameParser::feed(std::string_view data) {
  if (!error_.ok()) return error_;
  if (closed_) return {};
  in_.append(data);
  while (true) {
    auto more = parse_one();
    if (!more.ok()) return more.status();
    if (!*more || closed_) break;
  }
  // Drop what was parsed once it is most of the buffer, so the buffer never grows past one
  // frame plus one read's worth and compaction stays linear overall.
  if (pos_ > 0 && (pos_ >= in_.size() || pos_ > in_.size() / 2)) {
    in_.erase(0, pos_);
    pos_ = 0;
  }
  if (closed_) {
    in_.clear();
    pos_ = 0;
  }
  return {};
}

Result<bool> FrameParser::parse_one() {
  const size_t avail = in_.size() - pos_;
  if (avail < 2) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(in_.data() + pos_);
  const bool fin = (p[0] & 0x80) != 0;
  if ((p[0] & 0x70) != 0) return fail(kCloseProtocolError, "reserved bits set (no extension)");
  const uint8_t op = p[0] & 0x0F;
  const bool masked = (p[1] & 0x80) != 0;
  if (options_.from_server && masked) return fail(kCloseProtocolError, "masked frame from server");
  if (!options_.from_server && !masked)
    return fail(kCloseProtocolError, "unmasked frame from client");
  uint64_t len = p[1] & 0x7F;
  size_t header = 2;
  if (len == 126) {
    if (avail < 4) return false;
    len = (uint64_t{p[2]} << 8) | p[3];
    if (len < 126) return fail(kCloseProtocolError, "length not in its shortest form");
    header = 4;
  } else if (len == 127) {
    if (avail < 10) return false;
    len = 0;
    for (int i = 0; i < 8; ++i) len = (len << 8) | p[2 + i];
    if (len >> 63) return fail(kCloseProtocolError, "64-bit length with the top bit set");
    if (len <= 0xFFFF) return fail(kCloseProtocolError, "length not in its shortest form");
    header = 10;
  }
  const bool control = (op & 0x8) != 0;
  switch (op) {
    case 0x0:
    case 0x1:
    case 0x2:
    case 0x8:
    case 0x9:
    case 0xA:
      break;
    default:
      return fail(kCloseProtocolError, fmt::format("unknown opcode 0x{:x}", op));
  }
  if (control) {
    if (!fin) return fail(kCloseProtocolError, "fragmented control frame");
    if (len > kMaxControlPayload)
      return fail(kCloseProtocolError, "control frame payload over 125 bytes");
  } else {
    if (op == 0x0 && !in_message_) return fail(kCloseProtocolError, "continuation without a start");
    if (op != 0x0 && in_message_)
      return fail(kCloseProtocolError, "new message before the last one's final fragment");
    const uint64_t so_far = op == 0x0 ? message_.size() : 0;
    if (len > options_.max_message || so_far + len > options_.max_message) {
      return fail(kCloseTooBig, fmt::format("message over {} bytes", options_.max_message));
    }
  }
  std::array<uint8_t, 4> mask{};
  if (masked) {
    if (avail < header + 4) return false;
    std::memcpy(mask.data(), p + header, 4);
    header += 4;
  }
  if (avail - header < len) return false;
  std::string payload(in_.data() + pos_ + header, static_cast<size_t>(len));
  if (masked) {
    for (size_t i = 0; i < payload.size(); ++i)
      payload[i] = static_cast<char>(payload[i] ^ mask[i % 4]);
  }
  pos_ += header + static_cast<size_t>(len);
  RETURN_IF_ERROR(deliver(static_cast<Opcode>(op), fin, std::move(payload)));
  return true;
}

Status FrameParser::deliver(Opcode opcode, bool fin, std::string&& payload) {
  switch (opcode) {
    case Opcode::kPing:
    case Opcode::kPong: {
      Message m;
      m.opcode = opcode;
      m.payload = std::move(payload);
      out_.push_back(std::move(m));
      return {};
    }
    case Opcode::kClose: {
      Message m;
      m.opcode = opcode;
      if (payload.size() == 1) return fail(kCloseProtocolError, "close frame with a 1-byte body");
      if (payload.size() >= 2) {
        m.close_code = static_cast<uint16_t>((static_cast<uint8_t>(payload[0]) << 8) |
                                             static_cast<uint8_t>(payload[1]));
        if (!is_valid_close_code(m.close_code))
          return fail(kCloseProtocolError, fmt::format("invalid close code {}", m.close_code));
        m.close_reason = payload.substr(2);
        if (!is_valid_utf8(m.close_reason))
          return fail(kCloseInvalidPayload, "close reason is not UTF-8");
      }
      m.payload = std::move(payload);
      closed_ = true;
      out_.push_back(std::move(m));
      return {};
    }
    case Opcode::kText:
    case Opcode::kBinary:
      message_opcode_ = opcode;
      message_ = std::move(payload);
      in_message_ = true;
      break;
    case Opcode::kContinuation:
      message_ += payload;
      break;
  }
  if (!fin) return {};
  in_message_ = false;
  if (message_opcode_ == Opcode::kText && !is_valid_utf8(message_))
    return fail(kCloseInvalidPayload, "text message is not UTF-8");
  Message m;
  m.opcode = message_opcode_;
  m.payload = std::move(message_);
  message_.clear();
  out_.push_back(std::move(m));
  return {};
}

std::optional<Message> FrameParser::next() {
  if (out_.empty()) return std::nullopt;
  Message m = std::move(out_.front());
  out_.pop_front();
  return m;
}

// ---- encoder ------------------------------------------------------------------------------

namespace {

std::string frame_head(Opcode opcode, size_t len, bool fin, bool masked) {
  std::string out;
  out += static_cast<char>((fin ? 0x80 : 0x00) | static_cast<uint8_t>(opcode));
  const uint8_t mask_bit = masked ? 0x80 : 0x00;
  if (len < 126) {
    out += static_cast<char>(mask_bit | len);
  } else if (len <= 0xFFFF) {
    out += static_cast<char>(mask_bit | 126);
    out += static_cast<char>(len >> 8);
    out += static_cast<char>(len & 0xFF);
  } else {
    out += static_cast<char>(mask_bit | 127);
    for (int i = 7; i >= 0; --i) out += static_cast<char>((uint64_t{len} >> (8 * i)) & 0xFF);
  }
  return out;
}

}  // namespace

std::string encode_frame(Opcode opcode, std::string_view payload, bool fin,
                         const std::array<uint8_t, 4>& mask) {
  std::string out = frame_head(opcode, payload.size(), fin, true);
  out.append(reinterpret_cast<const char*>(mask.data()), 4);
  const size_t start = out.size();
  out.append(payload);
  for (size_t i = 0; i < payload.size(); ++i)
    out[start + i] = static_cast<char>(out[start + i] ^ mask[i % 4]);
  return out;
}

std::string encode_server_frame(Opcode opcode, std::string_view payload, bool fin) {
  std::string out = frame_head(opcode, payload.size(), fin, false);
  out.append(payload);
  return out;
}

std::string encode_close(uint16_t code, std::string_view reason,
                         const std::array<uint8_t, 4>& mask) {
  std::string body;
  body += static_cast<char>(code >> 8);
  body += static_cast<char>(code & 0xFF);
  reason = reason.substr(0, kMaxControlPayload - 2);
  // Do not cut a UTF-8 sequence in two.
  while (!reason.empty() && !is_valid_utf8(reason)) reason.remove_suffix(1);
  body.append(reason);
  return encode_frame(Opcode::kClose, body, true, mask);
}

// ---- handshake ----------------------------------------------------------------------------

namespace {

// SHA-1 (FIPS 180-4), only for Sec-WebSocket-Accept: the handshake uses it as a checksum that
// proves the server speaks WebSocket, not for security.
std::array<uint8_t, 20> sha1(std::string_view data) {
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string msg(data);
  const uint64_t bits = uint64_t{data.size()} * 8;
  msg += static_cast<char>(0x80);
  while (msg.size() % 64 != 56) msg += '\0';
  for (int i = 7; i >= 0; --i) msg += static_cast<char>((bits >> (8 * i)) & 0xFF);
  auto rol = [](uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
  for (size_t off = 0; off < msg.size(); off += 64) {
    uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      const auto* b = reinterpret_cast<const uint8_t*>(msg.data() + off + 4 * i);
      w[i] = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    }
    for (int i = 16; i < 80; ++i) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      uint32_t f, k;
      if (i < 20) {
        f = (b & c) | (~b & d), k = 0x5A827999;
      } else if (i < 40) {
        f = b ^ c ^ d, k = 0x6ED9EBA1;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
      } else {
        f = b ^ c ^ d, k = 0xCA62C1D6;
      }
      const uint32_t t = rol(a, 5) + f + e + k + w[i];
      e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  std::array<uint8_t, 20> out{};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h[i] >> (24 - 8 * j));
  return out;
}

constexpr std::string_view kAcceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

}  // namespace

std::string handshake_key(const std::array<uint8_t, 16>& random) {
  return base64_encode(std::string_view(reinterpret_cast<const char*>(random.data()), 16));
}

std::string handshake_accept(std::string_view key) {
  std::string s(key);
  s += kAcceptGuid;
  const auto digest = sha1(s);
  return base64_encode(std::string_view(reinterpret_cast<const char*>(digest.data()), 20));
}

}  // namespace cb::http::ws
