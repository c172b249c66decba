#include "crypto/random.h"

#include "base/base64.h"

#include <catch2/catch.hpp>

#include <array>
#include <set>

namespace cb::crypto {
namespace {

TEST_CASE("crypto::init: succeeds and is idempotent", "[crypto][unit]") {
  CHECK(init().ok());
  CHECK(init().ok());
}

TEST_CASE("SeededRandom: the same seed gives the same sequence", "[crypto][unit]") {
  SeededRandom a(42), b(42), c(43);
  std::array<uint8_t, 48> x{}, y{}, z{};
  a.fill(x);
  b.fill(y);
  c.fill(z);
  CHECK(x == y);
  CHECK(x != z);

  SECTION("successive calls differ") {
    std::array<uint8_t, 48> next{};
    a.fill(next);
    CHECK(next != x);
  }
  SECTION("a copy replays the same future output") {
    SeededRandom copy = a;
    std::array<uint8_t, 16> p{}, q{};
    a.fill(p);
    copy.fill(q);
    CHECK(p == q);
  }
  SECTION("an empty fill is allowed") { a.fill(std::span<uint8_t>()); }
}

TEST_CASE("system_random: fills buffers with differing bytes", "[crypto][unit]") {
  std::array<uint8_t, 32> a{}, b{};
  system_random().fill(a);
  system_random().fill(b);
  CHECK(a != b);
}

TEST_CASE("random_token: is base64url of the requested byte count", "[crypto][unit]") {
  SeededRandom random(7);
  const std::string token = random_token(random, 32);
  CHECK(token.size() == 43);
  CHECK(
      token.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
      std::string::npos);
  auto raw = base64url_decode(token);
  REQUIRE(raw.ok());
  CHECK(raw->size() == 32);
  CHECK(random_token(random, 0).empty());

  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) seen.insert(random_token(system_random(), 16));
  CHECK(seen.size() == 100);
}

}  // namespace
}  // namespace cb::crypto
