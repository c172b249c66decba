#include "crypto/sealed.h"

#include "base/check.h"
#include "crypto/openssl_internal.h"
#include "crypto/sodium_internal.h"

#include <sodium.h>

#include <array>

namespace cb::crypto {

static_assert(kSealKeySize == crypto_aead_xchacha20poly1305_ietf_KEYBYTES);
static_assert(kSealNonceSize == crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
static_assert(kSealTagSize == crypto_aead_xchacha20poly1305_ietf_ABYTES);

namespace {

constexpr size_t kHeaderSize = 1 + kSealNonceSize;
constexpr std::string_view kAuthenticationFailed =
    "sealed value: authentication failed (altered, or wrong key or additional data)";

using Nonce = std::span<const uint8_t, kSealNonceSize>;

const unsigned char* uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// The AEAD's additional data: the version byte, then the caller's bytes.
std::string aead_additional_data(uint8_t version, std::string_view additional_data) {
  std::string ad;
  ad.reserve(1 + additional_data.size());
  ad += char(version);
  ad += additional_data;
  return ad;
}

// Writes ciphertext || tag (plaintext.size() + kSealTagSize bytes) to |out|.
void encrypt(std::span<const uint8_t, kSealKeySize> key, Nonce nonce, std::string_view ad,
             std::string_view plaintext, unsigned char* out) {
  internal::ensure_initialized();
  CB_CHECK(plaintext.size() <= crypto_aead_xchacha20poly1305_ietf_MESSAGEBYTES_MAX);
  if (internal::openssl_xchacha20poly1305_encrypt(key, nonce, ad, plaintext, out) ==
      internal::OpensslAead::kOk) {
    return;
  }
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out, &written, uchars(plaintext), plaintext.size(),
                                             uchars(ad), ad.size(), nullptr, nonce.data(),
                                             key.data());
  CB_CHECK(written == plaintext.size() + kSealTagSize);
}

// The plaintext of |body| (ciphertext || tag, at least kSealTagSize bytes).
Result<std::string> decrypt(std::span<const uint8_t, kSealKeySize> key, Nonce nonce,
                            std::string_view ad, std::string_view body) {
  internal::ensure_initialized();
  std::string plaintext(body.size() - kSealTagSize, '\0');
  auto* out = reinterpret_cast<unsigned char*>(plaintext.data());
  switch (internal::openssl_xchacha20poly1305_decrypt(key, nonce, ad, body, out)) {
    case internal::OpensslAead::kOk:
      return plaintext;
    case internal::OpensslAead::kAuthFailed:
      return data_loss(kAuthenticationFailed);
    case internal::OpensslAead::kUnavailable:
      break;
  }
  unsigned long long written = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(out, &written, nullptr, uchars(body), body.size(),
                                                 uchars(ad), ad.size(), nonce.data(),
                                                 key.data()) != 0) {
    return data_loss(kAuthenticationFailed);
  }
  CB_CHECK(written == plaintext.size());
  return plaintext;
}

// kInvalidArgument unless |sealed| has at least |overhead| bytes and starts with |version|.
Status check_header(std::string_view sealed, uint8_t version, size_t overhead) {
  if (sealed.size() < overhead) {
    return invalid_argument("sealed value: truncated: " + std::to_string(sealed.size()) +
                            " bytes, need at least " + std::to_string(overhead));
  }
  if (uint8_t(sealed[0]) != version) {
    return invalid_argument("sealed value: unknown version " +
                            std::to_string(unsigned(uint8_t(sealed[0]))));
  }
  return ok_status();
}

}  // namespace

std::string seal(std::span<const uint8_t, kSealKeySize> key, std::string_view plaintext,
                 std::string_view additional_data, Random& random) {
  std::string out(kHeaderSize + plaintext.size() + kSealTagSize, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  bytes[0] = kSealVersion;
  random.fill(std::span<uint8_t>(bytes + 1, kSealNonceSize));
  encrypt(key, Nonce(bytes + 1, kSealNonceSize),
          aead_additional_data(kSealVersion, additional_data), plaintext, bytes + kHeaderSize);
  return out;
}

Result<std::string> open(std::span<const uint8_t, kSealKeySize> key, std::string_view sealed,
                         std::string_view additional_data) {
  RETURN_IF_ERROR(check_header(sealed, kSealVersion, kSealOverhead));
  return decrypt(key, Nonce(reinterpret_cast<const uint8_t*>(sealed.data()) + 1, kSealNonceSize),
                 aead_additional_data(kSealVersion, additional_data), sealed.substr(kHeaderSize));
}

std::string seal_with_nonce(std::span<const uint8_t, kSealKeySize> key,
                            std::span<const uint8_t, kSealNonceSize> nonce,
                            std::string_view plaintext, std::string_view additional_data) {
  std::string out(1 + plaintext.size() + kSealTagSize, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  bytes[0] = kSealVersionNonceNotStored;
  encrypt(key, nonce, aead_additional_data(kSealVersionNonceNotStored, additional_data), plaintext,
          bytes + 1);
  return out;
}

Result<std::string> open_with_nonce(std::span<const uint8_t, kSealKeySize> key,
                                    std::span<const uint8_t, kSealNonceSize> nonce,
                                    std::string_view sealed, std::string_view additional_data) {
  RETURN_IF_ERROR(check_header(sealed, kSealVersionNonceNotStored, kSealOverheadNonceNotStored));
  return decrypt(key, nonce, aead_additional_data(kSealVersionNonceNotStored, additional_data),
                 sealed.substr(1));
}

}  // namespace cb::crypto
