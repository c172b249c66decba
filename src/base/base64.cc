#include "base/base64.h"

#include <array>

namespace cb {

namespace {
constexpr char kStd[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kUrl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string encode(std::string_view in, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  size_t rest = in.size() - i;
  if (rest == 1) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    if (pad) out += "==";
  } else if (rest == 2) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    if (pad) out += '=';
  }
  return out;
}

Result<std::string> decode(std::string_view in, const char* alphabet, const char* what) {
  std::array<int8_t, 256> map;
  map.fill(-1);
  for (int i = 0; i < 64; ++i) map[uint8_t(alphabet[i])] = int8_t(i);
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return invalid_argument(std::string(what) + ": truncated input");
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int8_t v = map[uint8_t(c)];
    if (v < 0) return invalid_argument(std::string(what) + ": invalid character");
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  // Leftover bits must be zero (canonical encoding), else two strings decode the same.
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
    return invalid_argument(std::string(what) + ": non-canonical trailing bits");
  return out;
}
}  // namespace

std::string base64_encode(std::string_view b) { return encode(b, kStd, true); }
std::string base64url_encode(std::string_view b) { return encode(b, kUrl, false); }
Result<std::string> base64_decode(std::string_view t) { return decode(t, kStd, "base64"); }
Result<std::string> base64url_decode(std::string_view t) { return decode(t, kUrl, "base64url"); }

}  // namespace cb
