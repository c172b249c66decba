#pragma once
// Keys: ed25519 signing (RFC 8032) for box credentials, X25519 key agreement (RFC 7748), and
// SymmetricKey, a 32-byte secret such as a sealing key (sealed.h) or an X25519 output.
// Backed by libsodium.
//
// SigningKey, X25519KeyPair and SymmetricKey hold secret material: it is wiped
// (sodium_memzero) when the object is destroyed or moved from. They are movable, not copyable.
// A moved-from key holds zeros; only assign to it or destroy it. Public keys and signatures
// are plain std::array values.
//
// Serialized forms are raw bytes: an ed25519 key is its 32-byte seed (RFC 8032 "private key"),
// an X25519 key its 32-byte scalar, a public key its 32 bytes. Parsers check the length and
// return kInvalidArgument naming what is wrong.
//
// Thread-safety: const methods and the free functions may run on many threads at once over
// distinct or shared const objects. Mutation (assignment) needs external synchronisation.

#include "base/result.h"
#include "crypto/random.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cb::crypto {

inline constexpr size_t kEd25519SeedSize = 32;
inline constexpr size_t kEd25519PublicKeySize = 32;
inline constexpr size_t kEd25519SignatureSize = 64;
inline constexpr size_t kX25519KeySize = 32;
inline constexpr size_t kSymmetricKeySize = 32;

using Ed25519PublicKey = std::array<uint8_t, kEd25519PublicKeySize>;
using Ed25519Signature = std::array<uint8_t, kEd25519SignatureSize>;
using X25519PublicKey = std::array<uint8_t, kX25519KeySize>;

// A 32-byte secret.
class SymmetricKey {
 public:
  static SymmetricKey generate(Random& random);
  // Errors: kInvalidArgument if |bytes| is not exactly 32 bytes.
  static Result<SymmetricKey> from_bytes(std::string_view bytes);

  SymmetricKey(const SymmetricKey&) = delete;
  SymmetricKey& operator=(const SymmetricKey&) = delete;
  SymmetricKey(SymmetricKey&& other) noexcept;
  SymmetricKey& operator=(SymmetricKey&& other) noexcept;
  ~SymmetricKey();

  // The key bytes, owned by this object: the span dies with it (or is zeroed by a move).
  std::span<const uint8_t, kSymmetricKeySize> bytes() const { return bytes_; }

 private:
  SymmetricKey() = default;
  std::array<uint8_t, kSymmetricKeySize> bytes_{};
};

// An ed25519 private key (with its public key).
class SigningKey {
 public:
  // A fresh key from 32 bytes of |random|.
  static SigningKey generate(Random& random);
  // The key whose RFC 8032 private key (seed) is |seed|.
  // Errors: kInvalidArgument if |seed| is not exactly 32 bytes.
  static Result<SigningKey> from_seed(std::string_view seed);

  SigningKey(const SigningKey&) = delete;
  SigningKey& operator=(const SigningKey&) = delete;
  SigningKey(SigningKey&& other) noexcept;
  SigningKey& operator=(SigningKey&& other) noexcept;
  ~SigningKey();

  const Ed25519PublicKey& public_key() const { return public_key_; }

  // The deterministic RFC 8032 signature of |message|.
  Ed25519Signature sign(std::string_view message) const;

  // The 32-byte seed, for storing the key. The caller owns the copy and should wipe() it
  // (bytes.h) when done.
  std::string seed() const;

 private:
  SigningKey() = default;
  std::array<uint8_t, 64> secret_{};  // libsodium's layout: seed followed by the public key
  Ed25519PublicKey public_key_{};
};

// Errors: kInvalidArgument if |bytes| is not exactly 32 bytes or is not a valid point of
// prime order (crypto_core_ed25519_is_valid_point), since no honest key looks like that.
Result<Ed25519PublicKey> ed25519_public_key_from_bytes(std::string_view bytes);

// True when |signature| is a valid ed25519 signature of |message| under |public_key|. A
// signature that is not exactly 64 bytes is simply invalid.
bool verify_ed25519(const Ed25519PublicKey& public_key, std::string_view message,
                    std::string_view signature);
bool verify_ed25519(const Ed25519PublicKey& public_key, std::string_view message,
                    const Ed25519Signature& signature);

// An X25519 secret scalar (with its public key).
class X25519KeyPair {
 public:
  static X25519KeyPair generate(Random& random);
  // The pair whose secret is |secret| (clamped by X25519 itself, RFC 7748 §5).
  // Errors: kInvalidArgument if |secret| is not exactly 32 bytes.
  static Result<X25519KeyPair> from_secret(std::string_view secret);

  X25519KeyPair(const X25519KeyPair&) = delete;
  X25519KeyPair& operator=(const X25519KeyPair&) = delete;
  X25519KeyPair(X25519KeyPair&& other) noexcept;
  X25519KeyPair& operator=(X25519KeyPair&& other) noexcept;
  ~X25519KeyPair();

  const X25519PublicKey& public_key() const { return public_key_; }

  // The 32-byte secret, for storing the key. The caller owns the copy and should wipe() it.
  std::string secret() const;

 private:
  friend Result<SymmetricKey> x25519_shared(const X25519KeyPair& secret,
                                            const X25519PublicKey& peer_public);
  X25519KeyPair() = default;
  std::array<uint8_t, kX25519KeySize> secret_{};
  X25519PublicKey public_key_{};
};

// Errors: kInvalidArgument if |bytes| is not exactly 32 bytes.
Result<X25519PublicKey> x25519_public_key_from_bytes(std::string_view bytes);

// The raw X25519 shared secret between |secret| and |peer_public| (RFC 7748 §6.1). Hash it
// together with both public keys before using it as a key; do not use it directly.
// Errors: kInvalidArgument if the output is all zeros, which happens exactly when
// |peer_public| is a low-order point (RFC 7748 §6.1 says to check for this).
Result<SymmetricKey> x25519_shared(const X25519KeyPair& secret, const X25519PublicKey& peer_public);

}  // namespace cb::crypto
