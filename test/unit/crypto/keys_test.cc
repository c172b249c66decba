#include "crypto/keys.h"

#include "crypto/bytes.h"
#include "crypto/hash.h"

#include <catch2/catch.hpp>

#include <algorithm>

namespace cb::crypto {
namespace {

std::string unhex(std::string_view hex) {
  auto bytes = hex_decode(hex);
  REQUIRE(bytes.ok());
  return *bytes;
}

template <size_t N>
bool all_zero(const std::array<uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

TEST_CASE("SigningKey: matches RFC 8032 §7.1 test vectors", "[crypto][unit]") {
  SECTION("TEST 1: public key from seed") {
    auto key = SigningKey::from_seed(
        unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
    REQUIRE(key.ok());
    CHECK(hex_encode(key->public_key()) ==
          "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  }
  SECTION("TEST 2: public key and signature of 0x72") {
    auto key = SigningKey::from_seed(
        unhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"));
    REQUIRE(key.ok());
    CHECK(hex_encode(key->public_key()) ==
          "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c");
    const Ed25519Signature signature = key->sign("\x72");
    CHECK(hex_encode(signature) ==
          "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
          "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00");
    CHECK(verify_ed25519(key->public_key(), "\x72", signature));
  }
}

TEST_CASE("verify_ed25519: accepts only the signer's signature of the same message",
          "[crypto][unit]") {
  SeededRandom random(1);
  const SigningKey key = SigningKey::generate(random);
  const SigningKey other = SigningKey::generate(random);
  const Ed25519Signature signature = key.sign("hello");
  CHECK(verify_ed25519(key.public_key(), "hello", signature));
  CHECK_FALSE(verify_ed25519(key.public_key(), "hello!", signature));
  CHECK_FALSE(verify_ed25519(other.public_key(), "hello", signature));

  Ed25519Signature flipped = signature;
  flipped[10] ^= 0x01;
  CHECK_FALSE(verify_ed25519(key.public_key(), "hello", flipped));

  const std::string text(char_view(signature));
  CHECK(verify_ed25519(key.public_key(), "hello", std::string_view(text)));
  CHECK_FALSE(verify_ed25519(key.public_key(), "hello", std::string_view(text).substr(0, 63)));
  CHECK_FALSE(verify_ed25519(key.public_key(), "hello", text + "x"));
  CHECK_FALSE(verify_ed25519(key.public_key(), "hello", std::string_view()));
}

TEST_CASE("SigningKey: generation is deterministic under a seeded Random", "[crypto][unit]") {
  SeededRandom a(9), b(9);
  CHECK(SigningKey::generate(a).public_key() == SigningKey::generate(b).public_key());
}

TEST_CASE("SigningKey: serializes to its seed and back", "[crypto][unit]") {
  SeededRandom random(2);
  const SigningKey key = SigningKey::generate(random);
  std::string seed = key.seed();
  CHECK(seed.size() == kEd25519SeedSize);
  auto again = SigningKey::from_seed(seed);
  REQUIRE(again.ok());
  CHECK(again->public_key() == key.public_key());
  CHECK(again->sign("m") == key.sign("m"));
  wipe(seed);
  CHECK(seed.empty());
}

TEST_CASE("SigningKey: a seed of the wrong length is kInvalidArgument", "[crypto][unit]") {
  auto key = SigningKey::from_seed(std::string(31, 'x'));
  REQUIRE_FALSE(key.ok());
  CHECK(key.status().code() == Code::kInvalidArgument);
  CHECK(key.status().message() == "ed25519 seed: want 32 bytes, got 31");
  CHECK(SigningKey::from_seed(std::string(33, 'x')).status().code() == Code::kInvalidArgument);
  CHECK(SigningKey::from_seed("").status().code() == Code::kInvalidArgument);
}

TEST_CASE("SigningKey: moving leaves zeros behind", "[crypto][unit]") {
  SeededRandom random(3);
  SigningKey key = SigningKey::generate(random);
  const Ed25519PublicKey public_key = key.public_key();
  SigningKey moved = std::move(key);
  CHECK(moved.public_key() == public_key);
  CHECK(all_zero(key.public_key()));  // NOLINT(bugprone-use-after-move): the point of the test
  CHECK(key.seed() == std::string(32, '\0'));
}

TEST_CASE("ed25519_public_key_from_bytes: checks length and point validity", "[crypto][unit]") {
  SeededRandom random(4);
  const SigningKey key = SigningKey::generate(random);
  auto parsed = ed25519_public_key_from_bytes(char_view(key.public_key()));
  REQUIRE(parsed.ok());
  CHECK(*parsed == key.public_key());

  auto short_key = ed25519_public_key_from_bytes(std::string(31, '\x01'));
  CHECK(short_key.status().code() == Code::kInvalidArgument);
  CHECK(short_key.status().message() == "ed25519 public key: want 32 bytes, got 31");

  // The identity point (y = 1) has order 1: not a key anyone could hold.
  std::string identity_point(32, '\0');
  identity_point[0] = '\x01';
  auto low_order = ed25519_public_key_from_bytes(identity_point);
  CHECK(low_order.status().code() == Code::kInvalidArgument);
  CHECK(ed25519_public_key_from_bytes(std::string(32, '\0')).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("x25519: matches the RFC 7748 §6.1 Diffie-Hellman vector", "[crypto][unit]") {
  auto alice = X25519KeyPair::from_secret(
      unhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"));
  auto bob = X25519KeyPair::from_secret(
      unhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"));
  REQUIRE(alice.ok());
  REQUIRE(bob.ok());
  CHECK(hex_encode(alice->public_key()) ==
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
  CHECK(hex_encode(bob->public_key()) ==
        "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
  auto k1 = x25519_shared(*alice, bob->public_key());
  auto k2 = x25519_shared(*bob, alice->public_key());
  REQUIRE(k1.ok());
  REQUIRE(k2.ok());
  CHECK(hex_encode(k1->bytes()) ==
        "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");
  CHECK(hex_encode(k2->bytes()) == hex_encode(k1->bytes()));
}

TEST_CASE("x25519_shared: a low-order peer key is kInvalidArgument", "[crypto][unit]") {
  SeededRandom random(5);
  const X25519KeyPair pair = X25519KeyPair::generate(random);
  X25519PublicKey zero{};
  auto shared = x25519_shared(pair, zero);
  REQUIRE_FALSE(shared.ok());
  CHECK(shared.status().code() == Code::kInvalidArgument);
  X25519PublicKey one{};  // u = 1 has order 1 on the curve
  one[0] = 1;
  CHECK(x25519_shared(pair, one).status().code() == Code::kInvalidArgument);
}

TEST_CASE("X25519KeyPair: serializes to its secret and checks lengths", "[crypto][unit]") {
  SeededRandom random(6);
  const X25519KeyPair pair = X25519KeyPair::generate(random);
  auto again = X25519KeyPair::from_secret(pair.secret());
  REQUIRE(again.ok());
  CHECK(again->public_key() == pair.public_key());

  auto bad = X25519KeyPair::from_secret("short");
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message() == "x25519 secret key: want 32 bytes, got 5");

  auto peer = x25519_public_key_from_bytes(char_view(pair.public_key()));
  REQUIRE(peer.ok());
  CHECK(*peer == pair.public_key());
  CHECK(x25519_public_key_from_bytes(std::string(33, 'a')).status().message() ==
        "x25519 public key: want 32 bytes, got 33");
}

TEST_CASE("SymmetricKey: checks length and wipes on move", "[crypto][unit]") {
  auto key = SymmetricKey::from_bytes(std::string(32, '\x07'));
  REQUIRE(key.ok());
  CHECK(key->bytes()[31] == 7);
  SymmetricKey moved = std::move(*key);
  CHECK(moved.bytes()[0] == 7);
  CHECK(key->bytes()[0] == 0);  // NOLINT(bugprone-use-after-move)
  CHECK(SymmetricKey::from_bytes("").status().message() == "symmetric key: want 32 bytes, got 0");
}

}  // namespace
}  // namespace cb::crypto
