#pragma once
// Sealed values: a byte string encrypted and authenticated under a 32-byte key with
// XChaCha20-Poly1305 (IETF variant, libsodium crypto_aead_xchacha20poly1305_ietf; computed by
// OpenSSL where it can, byte for byte the same), bound to caller-chosen additional data that
// is authenticated but not stored. The server seals secret columns with additional data
// naming table, row and column, so a sealed value copied to another row does not open.
//
// Format (README.md §FORMAT, "Sealed value"):
//   sealed := version:uint8 (= 1) || nonce:uint8[24] || ciphertext:uint8[len(plaintext)] ||
//             tag:uint8[16]
// The nonce is random (24 bytes, so random nonces do not collide in practice). The AEAD's
// additional data is the version byte followed by the caller's |additional_data|, so the
// header is authenticated as well.
//
// Thread-safety: free functions; safe from any thread given a thread-safe Random (or one per
// thread).

#include "base/result.h"
#include "crypto/random.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cb::crypto {

inline constexpr size_t kSealKeySize = 32;
inline constexpr uint8_t kSealVersion = 1;
inline constexpr size_t kSealNonceSize = 24;
inline constexpr size_t kSealTagSize = 16;
// Bytes a sealed value adds to its plaintext: version + nonce + tag = 41.
inline constexpr size_t kSealOverhead = 1 + kSealNonceSize + kSealTagSize;

// Encrypts |plaintext| under |key| and binds it to |additional_data|, with a fresh nonce from
// |random|. The result is kSealOverhead bytes longer than |plaintext|. Never fails.
std::string seal(std::span<const uint8_t, kSealKeySize> key, std::string_view plaintext,
                 std::string_view additional_data, Random& random);

// The plaintext of |sealed|, which seal() made under |key| with the same |additional_data|.
// The plaintext is the caller's; wipe() it (bytes.h) if it is secret.
// Errors: kInvalidArgument if |sealed| is shorter than kSealOverhead or its version byte is
//           not kSealVersion (a truncated or foreign blob);
//         kDataLoss if authentication fails: the blob was altered, or |key| or
//           |additional_data| differ from the ones it was sealed with.
Result<std::string> open(std::span<const uint8_t, kSealKeySize> key, std::string_view sealed,
                         std::string_view additional_data);

// Sealed values whose nonce is not stored (README.md §FORMAT, "Sealed value, nonce not
// stored"): version 2 || ciphertext || tag, 17 bytes of overhead instead of 41. The caller
// passes the same |nonce| to both calls. It must never give two different plaintexts the
// same nonce under one key: the state layer seals a chunk with the first 24 bytes of its id,
// a keyed hash of the plaintext, so only equal plaintexts share a nonce, and they seal to
// equal bytes (which the id, the object's name, reveals anyway).
inline constexpr uint8_t kSealVersionNonceNotStored = 2;
inline constexpr size_t kSealOverheadNonceNotStored = 1 + kSealTagSize;

// Encrypts |plaintext| under |key| and |nonce|, bound to |additional_data|. Never fails.
std::string seal_with_nonce(std::span<const uint8_t, kSealKeySize> key,
                            std::span<const uint8_t, kSealNonceSize> nonce,
                            std::string_view plaintext, std::string_view additional_data);

// The plaintext of |sealed| from seal_with_nonce() with the same key, nonce and additional
// data. Errors as open(): kInvalidArgument for a blob shorter than
// kSealOverheadNonceNotStored or without version 2; kDataLoss if it does not authenticate.
Result<std::string> open_with_nonce(std::span<const uint8_t, kSealKeySize> key,
                                    std::span<const uint8_t, kSealNonceSize> nonce,
                                    std::string_view sealed, std::string_view additional_data);

}  // namespace cb::crypto
