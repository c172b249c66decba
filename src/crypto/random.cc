#include "crypto/random.h"

#include "base/base64.h"
#include "base/check.h"
#include "crypto/bytes.h"
#include "crypto/sodium_internal.h"

#include <sodium.h>

#include <algorithm>

namespace cb::crypto {

static_assert(SeededRandom::kSeedSize == randombytes_SEEDBYTES);

Status init() {
  // sodium_init() is thread-safe and idempotent on its own; the function-local static only
  // makes later calls skip libsodium's lock and remembers a failure.
  static const int rc = sodium_init();
  if (rc < 0) return internal_error("crypto: sodium_init failed");
  return ok_status();
}

namespace internal {
void ensure_initialized() {
  static const bool ok = init().ok();
  CB_CHECK(ok);
}
}  // namespace internal

namespace {
class SystemRandom final : public Random {
 public:
  void fill(std::span<uint8_t> out) override {
    if (!out.empty()) randombytes_buf(out.data(), out.size());
  }
};
}  // namespace

Random& system_random() {
  internal::ensure_initialized();
  static SystemRandom* random = new SystemRandom();  // never destroyed: usable during exit
  return *random;
}

SeededRandom::SeededRandom(uint64_t seed) {
  internal::ensure_initialized();
  for (size_t i = 0; i < 8; ++i) seed_[i] = uint8_t(seed >> (8 * i));
}

SeededRandom::SeededRandom(std::span<const uint8_t, kSeedSize> seed) {
  internal::ensure_initialized();
  std::copy(seed.begin(), seed.end(), seed_.begin());
}

void SeededRandom::fill(std::span<uint8_t> out) {
  // randombytes_buf_deterministic gives the same bytes for the same seed on every call, so
  // each call gets its own seed derived from the call number.
  std::array<uint8_t, 8> counter;
  for (size_t i = 0; i < 8; ++i) counter[i] = uint8_t(calls_ >> (8 * i));
  ++calls_;
  std::array<uint8_t, randombytes_SEEDBYTES> call_seed;
  crypto_generichash(call_seed.data(), call_seed.size(), counter.data(), counter.size(),
                     seed_.data(), seed_.size());
  if (!out.empty()) randombytes_buf_deterministic(out.data(), out.size(), call_seed.data());
  wipe(call_seed);
}

std::string random_token(Random& random, size_t bytes) {
  std::string raw(bytes, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(raw.data()), raw.size()));
  std::string token = base64url_encode(raw);
  wipe(raw);
  return token;
}

}  // namespace cb::crypto
