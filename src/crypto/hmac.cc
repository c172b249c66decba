#include "crypto/hmac.h"

#include "crypto/sodium_internal.h"

#include <sodium.h>

namespace cb::crypto {

static_assert(crypto_auth_hmacsha256_BYTES == kSha256Size);

Sha256Digest hmac_sha256(std::string_view key, std::string_view message) {
  internal::ensure_initialized();
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(key.data()),
                              key.size());
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(message.data()),
                                message.size());
  Sha256Digest mac;
  crypto_auth_hmacsha256_final(&state, mac.data());
  sodium_memzero(&state, sizeof(state));
  return mac;
}

}  // namespace cb::crypto
