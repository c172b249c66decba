#include "crypto/blake2b.h"

#include "base/check.h"
#include "crypto/bytes.h"
#include "crypto/openssl_internal.h"
#include "crypto/sodium_internal.h"

#include <sodium.h>

namespace cb::crypto {

static_assert(kKdfContextSize == crypto_kdf_CONTEXTBYTES);
static_assert(kSymmetricKeySize == crypto_kdf_KEYBYTES);
static_assert(kBlake2b256Size >= crypto_generichash_BYTES_MIN &&
              kBlake2b256Size <= crypto_generichash_BYTES_MAX);
static_assert(kSymmetricKeySize >= crypto_generichash_KEYBYTES_MIN &&
              kSymmetricKeySize <= crypto_generichash_KEYBYTES_MAX);

Blake2b256Digest blake2b_256(std::span<const uint8_t, kSymmetricKeySize> key,
                             std::string_view data) {
  Blake2b256Digest digest;
  if (internal::openssl_blake2b_256(key, data, digest)) return digest;
  internal::ensure_initialized();
  int rc = crypto_generichash(digest.data(), digest.size(),
                              reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                              key.data(), key.size());
  CB_CHECK(rc == 0);
  return digest;
}

SymmetricKey derive_subkey(const SymmetricKey& master, uint64_t subkey_id,
                           std::string_view context) {
  CB_CHECK(context.size() == kKdfContextSize);
  internal::ensure_initialized();
  std::array<uint8_t, kSymmetricKeySize> out;
  int rc = crypto_kdf_derive_from_key(out.data(), out.size(), subkey_id, context.data(),
                                      master.bytes().data());
  CB_CHECK(rc == 0);
  auto key = SymmetricKey::from_bytes(char_view(out));
  wipe(out);
  CB_CHECK(key.ok());
  return std::move(key).value();
}

}  // namespace cb::crypto
