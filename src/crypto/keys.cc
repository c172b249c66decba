#include "crypto/keys.h"

#include "base/check.h"
#include "crypto/bytes.h"
#include "crypto/sodium_internal.h"

#include <sodium.h>

#include <algorithm>

namespace cb::crypto {

static_assert(kEd25519SeedSize == crypto_sign_SEEDBYTES);
static_assert(kEd25519PublicKeySize == crypto_sign_PUBLICKEYBYTES);
static_assert(kEd25519SignatureSize == crypto_sign_BYTES);
static_assert(crypto_sign_SECRETKEYBYTES == 64);
static_assert(kX25519KeySize == crypto_scalarmult_BYTES);
static_assert(kX25519KeySize == crypto_scalarmult_SCALARBYTES);

namespace {

Status want_size(std::string_view what, std::string_view bytes, size_t size) {
  if (bytes.size() == size) return ok_status();
  return invalid_argument(std::string(what) + ": want " + std::to_string(size) + " bytes, got " +
                          std::to_string(bytes.size()));
}

template <size_t N>
void copy_into(std::array<uint8_t, N>& out, std::string_view bytes) {
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(out.data()));
}

// Moves secret arrays: copy, then wipe the source. Used by every move of a key type.
template <size_t N>
void move_secret(std::array<uint8_t, N>& to, std::array<uint8_t, N>& from) {
  to = from;
  wipe(from);
}

}  // namespace

// SymmetricKey

SymmetricKey SymmetricKey::generate(Random& random) {
  SymmetricKey key;
  random.fill(key.bytes_);
  return key;
}

Result<SymmetricKey> SymmetricKey::from_bytes(std::string_view bytes) {
  RETURN_IF_ERROR(want_size("symmetric key", bytes, kSymmetricKeySize));
  SymmetricKey key;
  copy_into(key.bytes_, bytes);
  return key;
}

SymmetricKey::SymmetricKey(SymmetricKey&& other) noexcept { move_secret(bytes_, other.bytes_); }

SymmetricKey& SymmetricKey::operator=(SymmetricKey&& other) noexcept {
  if (this != &other) move_secret(bytes_, other.bytes_);
  return *this;
}

SymmetricKey::~SymmetricKey() { wipe(bytes_); }

// SigningKey

SigningKey SigningKey::generate(Random& random) {
  std::array<uint8_t, kEd25519SeedSize> seed;
  random.fill(seed);
  auto key = from_seed(char_view(seed));
  wipe(seed);
  CB_CHECK(key.ok());
  return std::move(key).value();
}

Result<SigningKey> SigningKey::from_seed(std::string_view seed) {
  RETURN_IF_ERROR(want_size("ed25519 seed", seed, kEd25519SeedSize));
  internal::ensure_initialized();
  SigningKey key;
  crypto_sign_seed_keypair(key.public_key_.data(), key.secret_.data(),
                           reinterpret_cast<const unsigned char*>(seed.data()));
  return key;
}

SigningKey::SigningKey(SigningKey&& other) noexcept {
  move_secret(secret_, other.secret_);
  move_secret(public_key_, other.public_key_);
}

SigningKey& SigningKey::operator=(SigningKey&& other) noexcept {
  if (this != &other) {
    move_secret(secret_, other.secret_);
    move_secret(public_key_, other.public_key_);
  }
  return *this;
}

SigningKey::~SigningKey() { wipe(secret_); }

Ed25519Signature SigningKey::sign(std::string_view message) const {
  Ed25519Signature signature;
  crypto_sign_detached(signature.data(), nullptr,
                       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       secret_.data());
  return signature;
}

std::string SigningKey::seed() const {
  return std::string(char_view(std::span(secret_).first<kEd25519SeedSize>()));
}

Result<Ed25519PublicKey> ed25519_public_key_from_bytes(std::string_view bytes) {
  RETURN_IF_ERROR(want_size("ed25519 public key", bytes, kEd25519PublicKeySize));
  internal::ensure_initialized();
  Ed25519PublicKey key;
  copy_into(key, bytes);
  if (crypto_core_ed25519_is_valid_point(key.data()) != 1) {
    return invalid_argument("ed25519 public key: not a valid point of prime order");
  }
  return key;
}

bool verify_ed25519(const Ed25519PublicKey& public_key, std::string_view message,
                    std::string_view signature) {
  if (signature.size() != kEd25519SignatureSize) return false;
  internal::ensure_initialized();
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(), public_key.data()) == 0;
}

bool verify_ed25519(const Ed25519PublicKey& public_key, std::string_view message,
                    const Ed25519Signature& signature) {
  return verify_ed25519(public_key, message, char_view(signature));
}

// X25519KeyPair

X25519KeyPair X25519KeyPair::generate(Random& random) {
  std::array<uint8_t, kX25519KeySize> secret;
  random.fill(secret);
  auto pair = from_secret(char_view(secret));
  wipe(secret);
  CB_CHECK(pair.ok());
  return std::move(pair).value();
}

Result<X25519KeyPair> X25519KeyPair::from_secret(std::string_view secret) {
  RETURN_IF_ERROR(want_size("x25519 secret key", secret, kX25519KeySize));
  internal::ensure_initialized();
  X25519KeyPair pair;
  copy_into(pair.secret_, secret);
  crypto_scalarmult_base(pair.public_key_.data(), pair.secret_.data());
  return pair;
}

X25519KeyPair::X25519KeyPair(X25519KeyPair&& other) noexcept {
  move_secret(secret_, other.secret_);
  move_secret(public_key_, other.public_key_);
}

X25519KeyPair& X25519KeyPair::operator=(X25519KeyPair&& other) noexcept {
  if (this != &other) {
    move_secret(secret_, other.secret_);
    move_secret(public_key_, other.public_key_);
  }
  return *this;
}

X25519KeyPair::~X25519KeyPair() { wipe(secret_); }

std::string X25519KeyPair::secret() const { return std::string(char_view(secret_)); }

Result<X25519PublicKey> x25519_public_key_from_bytes(std::string_view bytes) {
  RETURN_IF_ERROR(want_size("x25519 public key", bytes, kX25519KeySize));
  X25519PublicKey key;
  copy_into(key, bytes);
  return key;
}

Result<SymmetricKey> x25519_shared(const X25519KeyPair& secret,
                                   const X25519PublicKey& peer_public) {
  internal::ensure_initialized();
  std::array<uint8_t, kX25519KeySize> shared;
  // libsodium returns -1 when the result is all zeros; sodium_is_zero repeats the check so
  // the refusal does not depend on that library detail.
  int rc = crypto_scalarmult(shared.data(), secret.secret_.data(), peer_public.data());
  if (rc != 0 || sodium_is_zero(shared.data(), shared.size())) {
    wipe(shared);
    return invalid_argument("x25519: peer public key is a low-order point (all-zero output)");
  }
  auto key = SymmetricKey::from_bytes(char_view(shared));
  wipe(shared);
  return key;
}

}  // namespace cb::crypto
