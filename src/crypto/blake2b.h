#pragma once
// Keyed BLAKE2b (RFC 7693) as a MAC / keyed content hash, and key derivation with libsodium's
// crypto_kdf (BLAKE2b with the subkey id as salt and an 8-byte context as personalisation).
// The state layer (src/state) uses both: chunk ids are keyed BLAKE2b-256 of the chunk under a
// subkey derived from the user's state key, so only holders of the key can compute or test
// an id. Backed by OpenSSL's BLAKE2BMAC where available (same bytes, faster) and libsodium
// (crypto_generichash, crypto_kdf_derive_from_key).
//
// Thread-safety: free functions; safe from any thread.

#include "crypto/keys.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace cb::crypto {

inline constexpr size_t kBlake2b256Size = 32;
inline constexpr size_t kKdfContextSize = 8;
using Blake2b256Digest = std::array<uint8_t, kBlake2b256Size>;

// BLAKE2b with a 32-byte digest of |data|, keyed with |key| (BLAKE2b's own keyed mode, not
// HMAC). Equal to Python's hashlib.blake2b(data, digest_size=32, key=key).
Blake2b256Digest blake2b_256(std::span<const uint8_t, kSymmetricKeySize> key,
                             std::string_view data);

// The 32-byte subkey number |subkey_id| of |master| in |context| (crypto_kdf_derive_from_key:
// BLAKE2b-256 of the empty message keyed with |master|, salt = uint64le(subkey_id) || 8 zero
// bytes, personal = context || 8 zero bytes). Subkeys with different ids or contexts are
// independent; none reveals |master| or another subkey.
// REQUIRES: |context| is exactly kKdfContextSize bytes (a constant of the caller; a violation
// is a bug and aborts).
SymmetricKey derive_subkey(const SymmetricKey& master, uint64_t subkey_id,
                           std::string_view context);

}  // namespace cb::crypto
