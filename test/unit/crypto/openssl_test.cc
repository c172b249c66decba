// The OpenSSL fast paths (openssl_internal.h) must compute exactly libsodium's bytes: chunk ids
// and sealed values written by either implementation are read by the other (an old store, a
// BoringSSL build). Compared here on random inputs of sizes around BLAKE2b's 128-byte block
// and ChaCha20's 64-byte block, up to the state layer's largest chunk.

#include "crypto/openssl_internal.h"
#include "crypto/random.h"

#include <catch2/catch.hpp>
#include <sodium.h>

#include <array>
#include <string>
#include <vector>

namespace cb::crypto::internal {
namespace {

const std::vector<size_t> kSizes = {0,   1,   15,   16,   63,    64,    65,     127,
                                    128, 129, 1000, 4096, 65535, 65536, 262147, 1 << 20};

std::string random_bytes(Random& random, size_t n) {
  std::string s(n, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(s.data()), s.size()));
  return s;
}

const unsigned char* uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

TEST_CASE("openssl_blake2b_256 equals libsodium's keyed crypto_generichash", "[crypto][unit]") {
  REQUIRE(sodium_init() >= 0);
  SeededRandom random(21);
  for (size_t n : kSizes) {
    std::array<uint8_t, 32> key;
    random.fill(key);
    const std::string data = random_bytes(random, n);
    std::array<uint8_t, 32> ours{}, sodium{};
    INFO("size " << n);
    REQUIRE(openssl_blake2b_256(key, data, ours));
    REQUIRE(crypto_generichash(sodium.data(), sodium.size(), uchars(data), data.size(), key.data(),
                               key.size()) == 0);
    CHECK(ours == sodium);
  }
}

TEST_CASE("openssl XChaCha20-Poly1305 equals libsodium's, both ways", "[crypto][unit]") {
  REQUIRE(sodium_init() >= 0);
  SeededRandom random(22);
  for (size_t n : kSizes) {
    std::array<uint8_t, 32> key;
    std::array<uint8_t, 24> nonce;
    random.fill(key);
    random.fill(nonce);
    const std::string ad = random_bytes(random, n % 50);
    const std::string plaintext = random_bytes(random, n);
    INFO("size " << n);

    std::string ours(n + 16, '\0'), sodium(n + 16, '\0');
    REQUIRE(openssl_xchacha20poly1305_encrypt(key, nonce, ad, plaintext,
                                              reinterpret_cast<uint8_t*>(ours.data())) ==
            OpensslAead::kOk);
    unsigned long long written = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(reinterpret_cast<unsigned char*>(sodium.data()),
                                               &written, uchars(plaintext), n, uchars(ad),
                                               ad.size(), nullptr, nonce.data(), key.data());
    REQUIRE(written == n + 16);
    CHECK(ours == sodium);

    std::string opened(n, '\0');
    REQUIRE(openssl_xchacha20poly1305_decrypt(key, nonce, ad, sodium,
                                              reinterpret_cast<uint8_t*>(opened.data())) ==
            OpensslAead::kOk);
    CHECK(opened == plaintext);
  }
}

TEST_CASE("openssl XChaCha20-Poly1305 decrypt fails on any change and returns no plaintext",
          "[crypto][unit]") {
  SeededRandom random(23);
  std::array<uint8_t, 32> key;
  std::array<uint8_t, 24> nonce;
  random.fill(key);
  random.fill(nonce);
  const std::string plaintext = random_bytes(random, 300);
  std::string sealed(plaintext.size() + 16, '\0');
  REQUIRE(openssl_xchacha20poly1305_encrypt(key, nonce, "ad", plaintext,
                                            reinterpret_cast<uint8_t*>(sealed.data())) ==
          OpensslAead::kOk);
  auto decrypt = [&](std::span<const uint8_t, 32> k, std::span<const uint8_t, 24> iv,
                     std::string_view ad, std::string_view blob, std::string& out) {
    out.assign(blob.size() - 16, '\0');
    return openssl_xchacha20poly1305_decrypt(k, iv, ad, blob,
                                             reinterpret_cast<uint8_t*>(out.data()));
  };
  std::string out;
  for (size_t i : {size_t{0}, size_t{150}, plaintext.size(), sealed.size() - 1}) {
    std::string tampered = sealed;
    tampered[i] = char(tampered[i] ^ 1);
    INFO("byte " << i);
    CHECK(decrypt(key, nonce, "ad", tampered, out) == OpensslAead::kAuthFailed);
    CHECK(out == std::string(plaintext.size(), '\0'));
  }
  std::array<uint8_t, 24> other_nonce = nonce;
  other_nonce[20] ^= 1;  // the part of the nonce that is not in the HChaCha20 subkey
  CHECK(decrypt(key, other_nonce, "ad", sealed, out) == OpensslAead::kAuthFailed);
  other_nonce = nonce;
  other_nonce[3] ^= 1;  // the part that is
  CHECK(decrypt(key, other_nonce, "ad", sealed, out) == OpensslAead::kAuthFailed);
  CHECK(decrypt(key, nonce, "ae", sealed, out) == OpensslAead::kAuthFailed);
  CHECK(decrypt(key, nonce, "ad", sealed, out) == OpensslAead::kOk);
  CHECK(out == plaintext);
}

}  // namespace
}  // namespace cb::crypto::internal
