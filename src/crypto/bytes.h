#pragma once
// Byte helpers shared by the cb::crypto headers. Fixed-size values (keys, digests, signatures)
// are std::array<uint8_t, N>; variable-length byte strings (messages, sealed values, serialized
// keys) are std::string / std::string_view, as in base/base64.h. char_view() and byte_view()
// move between the two spellings without copying; wipe() erases secret material with
// sodium_memzero, which the compiler may not optimise away.
//
// Thread-safety: free functions over caller-owned memory; no shared state.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cb::crypto {

// A view of |bytes| as chars. The view borrows |bytes|' storage: it must not outlive it.
inline std::string_view char_view(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A view of |text| as bytes. The view borrows |text|' storage: it must not outlive it.
inline std::span<const uint8_t> byte_view(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// Overwrites |bytes| with zeros.
void wipe(std::span<uint8_t> bytes);

// Overwrites the characters of |text| with zeros, then clears it. Copies the string made
// earlier (for example when it grew and reallocated) are out of reach; keep secrets in
// fixed-size storage where that matters.
void wipe(std::string& text);

}  // namespace cb::crypto
