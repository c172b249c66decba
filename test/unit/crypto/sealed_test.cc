#include "crypto/sealed.h"

#include "crypto/keys.h"

#include <catch2/catch.hpp>

namespace cb::crypto {
namespace {

struct Fixture {
  SeededRandom random{11};
  SymmetricKey key = SymmetricKey::generate(random);
  SymmetricKey other_key = SymmetricKey::generate(random);
};

TEST_CASE("seal: round trips through open with the same key and additional data",
          "[crypto][unit]") {
  Fixture f;
  for (std::string plaintext :
       {std::string(), std::string("x"), std::string("hello world"), std::string(10000, '\0')}) {
    const std::string sealed = seal(f.key.bytes(), plaintext, "users/7/token", f.random);
    CHECK(sealed.size() == plaintext.size() + kSealOverhead);
    CHECK(uint8_t(sealed[0]) == kSealVersion);
    auto opened = open(f.key.bytes(), sealed, "users/7/token");
    REQUIRE(opened.ok());
    CHECK(*opened == plaintext);
  }
}

TEST_CASE("seal: two seals of the same plaintext differ (fresh nonce)", "[crypto][unit]") {
  Fixture f;
  CHECK(seal(f.key.bytes(), "same", "", f.random) != seal(f.key.bytes(), "same", "", f.random));
}

TEST_CASE("seal: accepts a plain std::array key", "[crypto][unit]") {
  Fixture f;
  std::array<uint8_t, kSealKeySize> raw{};
  raw[0] = 1;
  auto opened = open(raw, seal(raw, "v", "ad", f.random), "ad");
  REQUIRE(opened.ok());
  CHECK(*opened == "v");
}

TEST_CASE("open: any tampering is kDataLoss", "[crypto][unit]") {
  Fixture f;
  const std::string sealed = seal(f.key.bytes(), "attack at dawn", "row 1", f.random);
  auto code_of = [&](std::string_view blob, std::string_view ad = "row 1") {
    return open(f.key.bytes(), blob, ad).status().code();
  };
  REQUIRE(code_of(sealed) == Code::kOk);

  SECTION("a flipped bit anywhere after the version byte") {
    for (size_t i = 1; i < sealed.size(); ++i) {
      std::string tampered = sealed;
      tampered[i] = char(tampered[i] ^ 0x20);
      INFO("byte " << i);
      CHECK(code_of(tampered) == Code::kDataLoss);
    }
  }
  SECTION("the nonce, the ciphertext and the tag each matter") {
    std::string nonce = sealed, body = sealed, tag = sealed;
    nonce[1] = char(nonce[1] ^ 1);
    body[1 + kSealNonceSize] = char(body[1 + kSealNonceSize] ^ 1);
    tag.back() = char(tag.back() ^ 1);
    CHECK(code_of(nonce) == Code::kDataLoss);
    CHECK(code_of(body) == Code::kDataLoss);
    CHECK(code_of(tag) == Code::kDataLoss);
  }
  SECTION("wrong additional data") {
    CHECK(code_of(sealed, "row 2") == Code::kDataLoss);
    CHECK(code_of(sealed, "") == Code::kDataLoss);
    CHECK(code_of(sealed, "row 1 ") == Code::kDataLoss);
  }
  SECTION("wrong key") {
    auto opened = open(f.other_key.bytes(), sealed, "row 1");
    CHECK(opened.status().code() == Code::kDataLoss);
  }
  SECTION("an appended byte") { CHECK(code_of(sealed + "x") == Code::kDataLoss); }
  SECTION("a dropped byte that leaves the blob long enough") {
    CHECK(code_of(std::string_view(sealed).substr(0, sealed.size() - 1)) == Code::kDataLoss);
  }
  SECTION("a ciphertext spliced from another seal under the same key") {
    const std::string other = seal(f.key.bytes(), "attack at dusk", "row 1", f.random);
    std::string spliced = sealed.substr(0, 1 + kSealNonceSize) + other.substr(1 + kSealNonceSize);
    CHECK(code_of(spliced) == Code::kDataLoss);
  }
}

TEST_CASE("open: a truncated or foreign blob is kInvalidArgument", "[crypto][unit]") {
  Fixture f;
  const std::string sealed = seal(f.key.bytes(), "", "", f.random);
  REQUIRE(sealed.size() == kSealOverhead);
  CHECK(open(f.key.bytes(), "", "").status().code() == Code::kInvalidArgument);
  CHECK(open(f.key.bytes(), sealed.substr(0, kSealOverhead - 1), "").status().code() ==
        Code::kInvalidArgument);
  CHECK(open(f.key.bytes(), sealed.substr(0, 1), "").status().code() == Code::kInvalidArgument);

  for (uint8_t version : {uint8_t(0), uint8_t(2), uint8_t(0xff)}) {
    std::string foreign = sealed;
    foreign[0] = char(version);
    auto opened = open(f.key.bytes(), foreign, "");
    CHECK(opened.status().code() == Code::kInvalidArgument);
    CHECK(opened.status().message() ==
          "sealed value: unknown version " + std::to_string(unsigned(version)));
  }
}

TEST_CASE("seal_with_nonce: round trips, deterministic, 17 bytes of overhead, nonce not stored",
          "[crypto][unit]") {
  Fixture f;
  std::array<uint8_t, kSealNonceSize> nonce{};
  f.random.fill(nonce);
  for (std::string plaintext : {std::string(), std::string("x"), std::string(70000, 'z')}) {
    const std::string sealed = seal_with_nonce(f.key.bytes(), nonce, plaintext, "chunk/ab");
    CHECK(sealed.size() == plaintext.size() + kSealOverheadNonceNotStored);
    CHECK(uint8_t(sealed[0]) == kSealVersionNonceNotStored);
    CHECK(sealed == seal_with_nonce(f.key.bytes(), nonce, plaintext, "chunk/ab"));
    auto opened = open_with_nonce(f.key.bytes(), nonce, sealed, "chunk/ab");
    REQUIRE(opened.ok());
    CHECK(*opened == plaintext);
  }
}

TEST_CASE(
    "open_with_nonce: another nonce, key or additional data, or any flipped bit, is kDataLoss",
    "[crypto][unit]") {
  Fixture f;
  std::array<uint8_t, kSealNonceSize> nonce{};
  f.random.fill(nonce);
  const std::string sealed = seal_with_nonce(f.key.bytes(), nonce, "attack at dawn", "ad");
  auto code_of = [&](std::span<const uint8_t, kSealKeySize> key,
                     const std::array<uint8_t, kSealNonceSize>& n, std::string_view blob,
                     std::string_view ad) {
    return open_with_nonce(key, n, blob, ad).status().code();
  };
  REQUIRE(code_of(f.key.bytes(), nonce, sealed, "ad") == Code::kOk);
  for (size_t i = 1; i < sealed.size(); ++i) {
    std::string tampered = sealed;
    tampered[i] = char(tampered[i] ^ 0x20);
    INFO("byte " << i);
    CHECK(code_of(f.key.bytes(), nonce, tampered, "ad") == Code::kDataLoss);
  }
  for (size_t i : {size_t{0}, size_t{15}, size_t{16}, size_t{23}}) {  // subkey and IV parts
    auto other = nonce;
    other[i] ^= 1;
    INFO("nonce byte " << i);
    CHECK(code_of(f.key.bytes(), other, sealed, "ad") == Code::kDataLoss);
  }
  CHECK(code_of(f.other_key.bytes(), nonce, sealed, "ad") == Code::kDataLoss);
  CHECK(code_of(f.key.bytes(), nonce, sealed, "ae") == Code::kDataLoss);
}

TEST_CASE("sealed values: each version opens only through its own call", "[crypto][unit]") {
  Fixture f;
  std::array<uint8_t, kSealNonceSize> nonce{};
  const std::string v2 = seal_with_nonce(f.key.bytes(), nonce, "value", "ad");
  const std::string v1 = seal(f.key.bytes(), "value", "ad", f.random);
  CHECK(open(f.key.bytes(), v2, "ad").status().code() == Code::kInvalidArgument);
  CHECK(open_with_nonce(f.key.bytes(), nonce, v1, "ad").status().code() == Code::kInvalidArgument);
  CHECK(open_with_nonce(f.key.bytes(), nonce, v2.substr(0, kSealOverheadNonceNotStored - 1), "ad")
            .status()
            .code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace cb::crypto
