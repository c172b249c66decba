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

const unsigned char* uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// The AEAD's additional data: the version byte, then the caller's bytes.
std::string aead_additional_data(std::string_view additional_data) {
  std::string ad;
  ad.reserve(1 + additional_data.size());
  ad += char(kSealVersion);
  ad += additional_data;
  return ad;
}

}  // namespace

std::string seal(std::span<const uint8_t, kSealKeySize> key, std::string_view plaintext,
                 std::string_view additional_data, Random& random) {
  internal::ensure_initialized();
  CB_CHECK(plaintext.size() <= crypto_aead_xchacha20poly1305_ietf_MESSAGEBYTES_MAX);
  std::string out(kHeaderSize + plaintext.size() + kSealTagSize, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  bytes[0] = kSealVersion;
  random.fill(std::span<uint8_t>(bytes + 1, kSealNonceSize));
  const std::string ad = aead_additional_data(additional_data);
  const std::span<const uint8_t, kSealNonceSize> nonce(bytes + 1, kSealNonceSize);
  if (internal::openssl_xchacha20poly1305_encrypt(key, nonce, ad, plaintext, bytes + kHeaderSize) ==
      internal::OpensslAead::kOk) {
    return out;
  }
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(bytes + kHeaderSize, &written, uchars(plaintext),
                                             plaintext.size(), uchars(ad), ad.size(), nullptr,
                                             bytes + 1, key.data());
  CB_CHECK(written == plaintext.size() + kSealTagSize);
  return out;
}

Result<std::string> open(std::span<const uint8_t, kSealKeySize> key, std::string_view sealed,
                         std::string_view additional_data) {
  if (sealed.size() < kSealOverhead) {
    return invalid_argument("sealed value: truncated: " + std::to_string(sealed.size()) +
                            " bytes, need at least " + std::to_string(kSealOverhead));
  }
  if (uint8_t(sealed[0]) != kSealVersion) {
    return invalid_argument("sealed value: unknown version " +
                            std::to_string(unsigned(uint8_t(sealed[0]))));
  }
  internal::ensure_initialized();
  const std::string_view body = sealed.substr(kHeaderSize);
  std::string plaintext(body.size() - kSealTagSize, '\0');
  const std::string ad = aead_additional_data(additional_data);
  auto* out = reinterpret_cast<unsigned char*>(plaintext.data());
  const std::span<const uint8_t, kSealNonceSize> nonce(
      reinterpret_cast<const uint8_t*>(sealed.data()) + 1, kSealNonceSize);
  switch (internal::openssl_xchacha20poly1305_decrypt(key, nonce, ad, body, out)) {
    case internal::OpensslAead::kOk:
      return plaintext;
    case internal::OpensslAead::kAuthFailed:
      return data_loss(kAuthenticationFailed);
    case internal::OpensslAead::kUnavailable:
      break;
  }
  unsigned long long written = 0;
  int rc = crypto_aead_xchacha20poly1305_ietf_decrypt(
      reinterpret_cast<unsigned char*>(plaintext.data()), &written, nullptr, uchars(body),
      body.size(), uchars(ad), ad.size(), uchars(sealed.substr(1, kSealNonceSize)), key.data());
  if (rc != 0) {
    return data_loss(kAuthenticationFailed);
  }
  CB_CHECK(written == plaintext.size());
  return plaintext;
}

}  // namespace cb::crypto
