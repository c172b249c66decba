#pragma once
// Private to src/state: the primitive encodings of README.md §Manifest (varint, svarint and
// bytes: LEB128 varints, ZigZag, length-prefixed strings) and a bounds-checked reader whose every
// failure is kDataLoss, because the bytes it reads were authenticated by the AEAD and can only be
// wrong through a bug or a format mismatch, never through a peer's choice.

#include "base/result.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace cb::state::internal {

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}

// ZigZag, as protobuf's sint64: small negative numbers stay short.
inline void put_svarint(std::string& out, int64_t v) {
  put_varint(out, (uint64_t(v) << 1) ^ uint64_t(v >> 63));
}

inline void put_bytes(std::string& out, std::string_view s) {
  put_varint(out, s.size());
  out += s;
}

// Fixed-width little-endian, for sizes that precede their bytes (pack footers, chunk batches).
inline void put_u32le(char* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = char(uint8_t(v >> (8 * i)));
}
inline void put_u32le(std::string& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + 4);
  put_u32le(out.data() + at, v);
}

// REQUIRES: |at| holds at least 4 bytes.
inline uint32_t get_u32le(std::string_view at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(at[size_t(i)])) << (8 * i);
  return v;
}

// Reads from a borrowed buffer; |what| names the object in error messages.
class Reader {
 public:
  Reader(std::string_view data, std::string_view what) : data_(data), what_(what) {}

  bool done() const { return data_.empty(); }
  size_t remaining() const { return data_.size(); }

  Result<uint64_t> varint() {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (data_.empty()) return truncated();
      uint8_t b = uint8_t(data_.front());
      data_.remove_prefix(1);
      if (shift == 63 && b > 1) return bad("varint overflows 64 bits");
      v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return bad("varint longer than 10 bytes");
  }

  Result<int64_t> svarint() {
    ASSIGN_OR_RETURN(uint64_t u, varint());
    return int64_t(u >> 1) ^ -int64_t(u & 1);
  }

  Result<uint8_t> byte() {
    if (data_.empty()) return truncated();
    uint8_t b = uint8_t(data_.front());
    data_.remove_prefix(1);
    return b;
  }

  Result<std::string_view> raw(size_t n) {
    if (data_.size() < n) return truncated();
    std::string_view out = data_.substr(0, n);
    data_.remove_prefix(n);
    return out;
  }

  // A length-prefixed string of at most |max| bytes.
  Result<std::string_view> bytes(size_t max) {
    ASSIGN_OR_RETURN(uint64_t n, varint());
    if (n > max)
      return bad("string of " + std::to_string(n) + " bytes, limit " + std::to_string(max));
    return raw(size_t(n));
  }

  Status bad(std::string_view why) const {
    return data_loss(std::string(what_) + ": malformed: " + std::string(why));
  }

 private:
  Status truncated() const { return data_loss(std::string(what_) + ": truncated"); }

  std::string_view data_;
  std::string_view what_;
};

}  // namespace cb::state::internal
