#include "crypto/hash.h"

#include "base/check.h"
#include "crypto/sodium_internal.h"

#include <sodium.h>

#include <cstring>
#include <new>

namespace cb::crypto {

namespace {
crypto_hash_sha256_state* state_of(std::array<unsigned char, 128>& storage) {
  return std::launder(reinterpret_cast<crypto_hash_sha256_state*>(storage.data()));
}
const unsigned char* uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}
}  // namespace

Sha256Digest sha256(std::string_view data) {
  internal::ensure_initialized();
  Sha256Digest digest;
  crypto_hash_sha256(digest.data(), uchars(data), data.size());
  return digest;
}

Sha256::Sha256() {
  static_assert(sizeof(crypto_hash_sha256_state) <= sizeof(state_));
  static_assert(alignof(crypto_hash_sha256_state) <= 8);
  static_assert(crypto_hash_sha256_BYTES == kSha256Size);
  internal::ensure_initialized();
  crypto_hash_sha256_init(new (state_.data()) crypto_hash_sha256_state);
}

// memcpy, unlike an element-wise array copy, starts the lifetime of the state object in the
// destination storage (C++20 [cstring.syn]).
Sha256::Sha256(const Sha256& other) : finished_(other.finished_) {
  std::memcpy(state_.data(), other.state_.data(), state_.size());
}

Sha256& Sha256::operator=(const Sha256& other) {
  if (this != &other) {
    std::memcpy(state_.data(), other.state_.data(), state_.size());
    finished_ = other.finished_;
  }
  return *this;
}

void Sha256::update(std::string_view data) {
  CB_CHECK(!finished_);
  crypto_hash_sha256_update(state_of(state_), uchars(data), data.size());
}

Sha256Digest Sha256::finish() {
  CB_CHECK(!finished_);
  finished_ = true;
  Sha256Digest digest;
  crypto_hash_sha256_final(state_of(state_), digest.data());
  return digest;
}

std::string hex_encode(std::string_view bytes) {
  std::string hex(bytes.size() * 2 + 1, '\0');  // sodium_bin2hex writes a terminating NUL
  sodium_bin2hex(hex.data(), hex.size(), uchars(bytes), bytes.size());
  hex.pop_back();
  return hex;
}

std::string hex_encode(std::span<const uint8_t> bytes) {
  return hex_encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

Result<std::string> hex_decode(std::string_view hex) {
  if (hex.size() % 2 != 0) return invalid_argument("hex: odd number of digits");
  std::string bytes(hex.size() / 2, '\0');
  size_t written = 0;
  const char* end = nullptr;
  int rc = sodium_hex2bin(reinterpret_cast<unsigned char*>(bytes.data()), bytes.size(), hex.data(),
                          hex.size(), nullptr, &written, &end);
  if (rc != 0 || end != hex.data() + hex.size() || written != bytes.size()) {
    return invalid_argument("hex: invalid character");
  }
  return bytes;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

uint64_t table_hash(std::span<const uint8_t> data) {
  static const std::array<unsigned char, crypto_shorthash_KEYBYTES> key = [] {
    internal::ensure_initialized();
    std::array<unsigned char, crypto_shorthash_KEYBYTES> k;
    randombytes_buf(k.data(), k.size());
    return k;
  }();
  static_assert(crypto_shorthash_BYTES == sizeof(uint64_t));
  unsigned char out[crypto_shorthash_BYTES];
  crypto_shorthash(out, data.data(), data.size(), key.data());
  uint64_t h;
  std::memcpy(&h, out, sizeof(h));
  return h;
}

}  // namespace cb::crypto
