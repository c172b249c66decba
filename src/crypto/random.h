#pragma once
// Random is the seam through which cb::crypto code draws random bytes (house style H17):
// production code passes system_random(), which reads libsodium's CSPRNG (getrandom(2));
// tests pass a SeededRandom, whose output is a pure function of its seed and call sequence.
// Never use SeededRandom outside tests: its output is predictable by design.
//
// Thread-safety: system_random() may be called from any thread at once. A SeededRandom is
// not thread-safe (fill() advances a counter); give each test its own.
//
// init() initialises libsodium. It is idempotent and thread-safe; main.cc calls it early so
// a broken environment fails at start, and every cb::crypto entry point that needs libsodium
// also makes sure it ran, so callers (and tests) need not.

#include "base/status.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cb::crypto {

// Initialises libsodium (sodium_init) once per process; later calls return the first result.
// Errors: kInternal if libsodium cannot initialise (for example no random source).
Status init();

class Random {
 public:
  virtual ~Random() = default;
  // Fills all of |out| with random bytes. Never fails: a source that cannot deliver aborts.
  virtual void fill(std::span<uint8_t> out) = 0;
};

// The process-wide CSPRNG (libsodium randombytes_buf). Never destroyed. Aborts if libsodium
// cannot initialise.
Random& system_random();

// A deterministic Random for tests. Call n of fill() writes randombytes_buf_deterministic
// output under a per-call seed BLAKE2b-256(key = seed, message = uint64le(n)), so two
// SeededRandoms built from the same seed produce the same byte sequence given the same calls.
// Copyable: a copy replays the same future output.
class SeededRandom final : public Random {
 public:
  static constexpr size_t kSeedSize = 32;  // randombytes_SEEDBYTES in libsodium 1.0.18

  // The seed is |seed| as 8 little-endian bytes followed by 24 zero bytes.
  explicit SeededRandom(uint64_t seed);
  explicit SeededRandom(std::span<const uint8_t, kSeedSize> seed);
  SeededRandom(const SeededRandom&) = default;
  SeededRandom& operator=(const SeededRandom&) = default;

  void fill(std::span<uint8_t> out) override;

 private:
  std::array<uint8_t, kSeedSize> seed_{};
  uint64_t calls_ = 0;
};

// |bytes| random bytes from |random|, base64url-encoded without padding (RFC 4648 §5), so
// the token is safe in URLs, headers and file names. 32 bytes give a 43-character token.
// bytes == 0 gives "".
std::string random_token(Random& random, size_t bytes);

}  // namespace cb::crypto
