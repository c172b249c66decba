#pragma once
// SHA-256 (FIPS 180-4) one-shot and incremental, hex encoding, a constant-time comparison
// for secrets (tokens, MACs, digests) and a keyed hash for hash tables. Backed by libsodium.
//
// Thread-safety: the free functions are safe from any thread. A Sha256 object is not
// thread-safe; use one per thread. Sha256 is copyable: a copy continues from the same state.

#include "base/result.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cb::crypto {

inline constexpr size_t kSha256Size = 32;
using Sha256Digest = std::array<uint8_t, kSha256Size>;

// The SHA-256 digest of |data|.
Sha256Digest sha256(std::string_view data);

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  Sha256(const Sha256& other);
  Sha256& operator=(const Sha256& other);

  // Appends |data| to the hashed message.
  // REQUIRES: finish() has not been called.
  void update(std::string_view data);

  // The digest of everything passed to update().
  // REQUIRES: finish() has not been called.
  Sha256Digest finish();

 private:
  // Holds libsodium's crypto_hash_sha256_state (104 bytes in 1.0.18; hash.cc checks the fit)
  // so this header does not include sodium.h.
  alignas(8) std::array<unsigned char, 128> state_;
  bool finished_ = false;
};

// Lower-case hex of |bytes|, two characters per byte.
std::string hex_encode(std::string_view bytes);
std::string hex_encode(std::span<const uint8_t> bytes);

// The bytes spelled by |hex| (upper or lower case, no separators; "" gives "").
// Errors: kInvalidArgument if |hex| has an odd length or a non-hex character.
Result<std::string> hex_decode(std::string_view hex);

// True when |a| and |b| hold the same bytes. The time taken depends only on the lengths, never
// on the content (sodium_memcmp), so it is safe for comparing secrets; inputs of different
// lengths are unequal at once, which reveals only that the lengths differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// SipHash-2-4 of |data| under a key drawn at random once per process: the hash of a hash table
// whose keys a peer chooses. A fixed hash would let it choose keys that all share one bucket,
// and make each lookup as slow as a list. Differs between processes: never store or send it.
uint64_t table_hash(std::span<const uint8_t> data);

}  // namespace cb::crypto
