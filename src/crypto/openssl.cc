#include "crypto/bytes.h"
#include "crypto/openssl_internal.h"

#include <openssl/evp.h>
#include <sodium.h>

#if !defined(OPENSSL_IS_BORINGSSL)
#include <openssl/core_names.h>
#include <openssl/params.h>
#endif

#include <climits>

#include <array>
#include <cstring>
#include <memory>

namespace cb::crypto::internal {

#if defined(OPENSSL_IS_BORINGSSL)

// BoringSSL has neither keyed BLAKE2b nor ChaCha20-Poly1305 as an EVP_CIPHER: libsodium does it.
bool openssl_blake2b_256(std::span<const uint8_t, 32>, std::string_view, std::span<uint8_t, 32>) {
  return false;
}
OpensslAead openssl_xchacha20poly1305_encrypt(std::span<const uint8_t, 32>,
                                              std::span<const uint8_t, 24>, std::string_view,
                                              std::string_view, uint8_t*) {
  return OpensslAead::kUnavailable;
}
OpensslAead openssl_xchacha20poly1305_decrypt(std::span<const uint8_t, 32>,
                                              std::span<const uint8_t, 24>, std::string_view,
                                              std::string_view, uint8_t*) {
  return OpensslAead::kUnavailable;
}

#else

namespace {

constexpr size_t kTagSize = 16;

// Fetched once: an implicit fetch per call would take the provider store's lock every time.
EVP_MAC* blake2b_mac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "BLAKE2BMAC", nullptr);
  return mac;
}

EVP_CIPHER* chacha20_poly1305() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "ChaCha20-Poly1305", nullptr);
  return cipher;
}

struct MacCtxFree {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};

EVP_MAC_CTX* thread_mac_ctx() {
  thread_local std::unique_ptr<EVP_MAC_CTX, MacCtxFree> ctx(
      blake2b_mac() ? EVP_MAC_CTX_new(blake2b_mac()) : nullptr);
  return ctx.get();
}

EVP_CIPHER_CTX* thread_cipher_ctx() {
  thread_local std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  return ctx.get();
}

const unsigned char* uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// EVP_CipherUpdate takes an int length: feed |in| in pieces that fit.
bool update(EVP_CIPHER_CTX* ctx, unsigned char* out, std::string_view in) {
  constexpr size_t kPiece = size_t{1} << 30;
  while (!in.empty()) {
    const size_t n = std::min(in.size(), kPiece);
    int written = 0;
    if (EVP_CipherUpdate(ctx, out, &written, uchars(in.substr(0, n)), int(n)) != 1) return false;
    if (out != nullptr) out += written;
    in.remove_prefix(n);
  }
  return true;
}

// Sets up |ctx| for XChaCha20-Poly1305 with |key| and |nonce| (encrypt or decrypt) and feeds
// the additional data. The subkey is wiped before returning.
bool start(EVP_CIPHER_CTX* ctx, std::span<const uint8_t, 32> key,
           std::span<const uint8_t, 24> nonce, std::string_view additional_data, bool encrypt) {
  std::array<uint8_t, 32> subkey;
  crypto_core_hchacha20(subkey.data(), nonce.data(), key.data(), nullptr);
  std::array<uint8_t, 12> iv{};
  std::memcpy(iv.data() + 4, nonce.data() + 16, 8);
  const bool ok = EVP_CipherInit_ex2(ctx, chacha20_poly1305(), subkey.data(), iv.data(),
                                     encrypt ? 1 : 0, nullptr) == 1 &&
                  update(ctx, nullptr, additional_data);
  wipe(subkey);
  return ok;
}

}  // namespace

bool openssl_blake2b_256(std::span<const uint8_t, 32> key, std::string_view data,
                         std::span<uint8_t, 32> out) {
  EVP_MAC_CTX* ctx = thread_mac_ctx();
  if (ctx == nullptr) return false;
  size_t size = out.size();
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                               OSSL_PARAM_construct_end()};
  size_t written = 0;
  return EVP_MAC_init(ctx, key.data(), key.size(), params) == 1 &&
         EVP_MAC_update(ctx, uchars(data), data.size()) == 1 &&
         EVP_MAC_final(ctx, out.data(), &written, out.size()) == 1 && written == out.size();
}

OpensslAead openssl_xchacha20poly1305_encrypt(std::span<const uint8_t, 32> key,
                                              std::span<const uint8_t, 24> nonce,
                                              std::string_view additional_data,
                                              std::string_view plaintext, uint8_t* out) {
  EVP_CIPHER_CTX* ctx = thread_cipher_ctx();
  if (ctx == nullptr || chacha20_poly1305() == nullptr) return OpensslAead::kUnavailable;
  int written = 0;
  if (!start(ctx, key, nonce, additional_data, true) || !update(ctx, out, plaintext) ||
      EVP_CipherFinal_ex(ctx, out + plaintext.size(), &written) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, int(kTagSize), out + plaintext.size()) != 1) {
    return OpensslAead::kUnavailable;
  }
  return OpensslAead::kOk;
}

OpensslAead openssl_xchacha20poly1305_decrypt(std::span<const uint8_t, 32> key,
                                              std::span<const uint8_t, 24> nonce,
                                              std::string_view additional_data,
                                              std::string_view sealed, uint8_t* out) {
  EVP_CIPHER_CTX* ctx = thread_cipher_ctx();
  if (ctx == nullptr || chacha20_poly1305() == nullptr || sealed.size() < kTagSize) {
    return OpensslAead::kUnavailable;
  }
  const std::string_view ciphertext = sealed.substr(0, sealed.size() - kTagSize);
  std::array<uint8_t, kTagSize> tag;
  std::memcpy(tag.data(), sealed.data() + ciphertext.size(), kTagSize);
  if (!start(ctx, key, nonce, additional_data, false) || !update(ctx, out, ciphertext) ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, int(kTagSize), tag.data()) != 1) {
    return OpensslAead::kUnavailable;
  }
  int written = 0;
  if (EVP_CipherFinal_ex(ctx, out + ciphertext.size(), &written) != 1) {
    // Never hand back plaintext that did not authenticate.
    sodium_memzero(out, ciphertext.size());
    return OpensslAead::kAuthFailed;
  }
  return OpensslAead::kOk;
}

#endif

}  // namespace cb::crypto::internal
