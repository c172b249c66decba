#include "crypto/hash.h"

#include <catch2/catch.hpp>

#include <array>
#include <set>

namespace cb::crypto {
namespace {

TEST_CASE("sha256: matches the FIPS 180-4 known answers", "[crypto][unit]") {
  CHECK(hex_encode(sha256("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex_encode(sha256("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex_encode(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("Sha256: incremental updates equal the one-shot digest", "[crypto][unit]") {
  Sha256 h;
  h.update("a");
  h.update("");
  h.update("bc");
  CHECK(h.finish() == sha256("abc"));

  SECTION("a copy continues from the same state") {
    Sha256 prefix;
    prefix.update("ab");
    Sha256 fork = prefix;
    prefix.update("c");
    fork.update("x");
    CHECK(prefix.finish() == sha256("abc"));
    CHECK(fork.finish() == sha256("abx"));
  }
  SECTION("input crossing block boundaries") {
    const std::string long_input(1000, 'q');
    Sha256 pieces;
    for (size_t at = 0; at < long_input.size(); at += 37) {
      pieces.update(std::string_view(long_input).substr(at, 37));
    }
    CHECK(pieces.finish() == sha256(long_input));
  }
}

TEST_CASE("hex: encodes lower case and decodes either case", "[crypto][unit]") {
  CHECK(hex_encode(std::string_view("\x00\xff\x10", 3)) == "00ff10");
  CHECK(hex_encode(std::string_view()) == "");
  auto bytes = hex_decode("00FFa0");
  REQUIRE(bytes.ok());
  CHECK(*bytes == std::string("\x00\xff\xa0", 3));
  CHECK(hex_decode("")->empty());

  SECTION("odd length is kInvalidArgument") {
    CHECK(hex_decode("abc").status().code() == Code::kInvalidArgument);
  }
  SECTION("a non-hex character is kInvalidArgument") {
    CHECK(hex_decode("zz").status().code() == Code::kInvalidArgument);
    CHECK(hex_decode("00 1").status().code() == Code::kInvalidArgument);
    CHECK(hex_decode("0g").status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("constant_time_equal: compares content and length", "[crypto][unit]") {
  CHECK(constant_time_equal("", ""));
  CHECK(constant_time_equal("secret", "secret"));
  CHECK_FALSE(constant_time_equal("secret", "secreT"));
  CHECK_FALSE(constant_time_equal("secret", "secret!"));
  CHECK_FALSE(constant_time_equal("", "x"));
  CHECK(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0b", 3)));
  CHECK_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST_CASE("table_hash: the same in a process; inputs alike but for their end spread out",
          "[crypto][unit]") {
  std::array<uint8_t, 32> a{};
  std::array<uint8_t, 32> b{};
  b[31] = 1;
  CHECK(table_hash(a) == table_hash(a));
  CHECK(table_hash(a) != table_hash(b));
  CHECK(table_hash(std::span<const uint8_t>()) == table_hash(std::span<const uint8_t>()));
  // 1000 inputs that differ only in their last two bytes, as a peer choosing keys for one
  // bucket would send, fill nearly all of 64 buckets.
  std::set<uint64_t> buckets;
  for (int i = 0; i < 1000; ++i) {
    std::array<uint8_t, 32> x{};
    x[30] = uint8_t(i >> 8);
    x[31] = uint8_t(i);
    buckets.insert(table_hash(x) % 64);
  }
  CHECK(buckets.size() >= 60);
}

}  // namespace
}  // namespace cb::crypto
