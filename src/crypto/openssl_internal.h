#pragma once
// Private to src/crypto: OpenSSL 3's implementations of two primitives libsodium 1.0.18 also
// provides, used because they are 2-3x faster on x86-64 and compute exactly the same bytes
// (tests/unit/crypto compares both on random inputs):
//   - keyed BLAKE2b-256 (OpenSSL's BLAKE2BMAC with size 32 is RFC 7693 keyed BLAKE2b, as
//     libsodium's crypto_generichash with a key): 1171 vs 586 MB/s on 64 KiB;
//   - XChaCha20-Poly1305 IETF (libsodium's HChaCha20 for the subkey, then OpenSSL's RFC 8439
//     ChaCha20-Poly1305 with nonce 0^4 || nonce[16..24], as libsodium does): 4045 vs
//     1358 MB/s.
// The state layer hashes and seals every chunk of a save and opens and re-hashes every chunk
// of a restore, so these two dominate its CPU (docs/benchmarks.md, state).
// Each function reports whether OpenSSL could do the work; when it could not (built against
// BoringSSL, or the provider lacks the algorithm) the caller uses libsodium.
//
// Thread-safety: safe from any thread (per-thread contexts).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace cb::crypto::internal {

// Keyed BLAKE2b with a 32-byte digest into |out|. False: OpenSSL cannot; |out| untouched.
bool openssl_blake2b_256(std::span<const uint8_t, 32> key, std::string_view data,
                         std::span<uint8_t, 32> out);

// XChaCha20-Poly1305 IETF. Encrypt writes |plaintext|.size() + 16 bytes (ciphertext || tag)
// to |out|; decrypt reads ciphertext || tag from |sealed| and writes |sealed|.size() - 16 bytes.
enum class OpensslAead { kOk, kAuthFailed, kUnavailable };
OpensslAead openssl_xchacha20poly1305_encrypt(std::span<const uint8_t, 32> key,
                                              std::span<const uint8_t, 24> nonce,
                                              std::string_view additional_data,
                                              std::string_view plaintext, uint8_t* out);
OpensslAead openssl_xchacha20poly1305_decrypt(std::span<const uint8_t, 32> key,
                                              std::span<const uint8_t, 24> nonce,
                                              std::string_view additional_data,
                                              std::string_view sealed, uint8_t* out);

}  // namespace cb::crypto::internal
