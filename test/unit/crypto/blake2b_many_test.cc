#include "crypto/blake2b_many.h"

#include "crypto/random.h"

#include <catch2/catch.hpp>
#include <sodium.h>

#include <string>
#include <vector>

namespace cb::crypto {
namespace {

// libsodium's keyed BLAKE2b-256 of |data|: the reference every width is held to.
Blake2b256Digest sodium_blake2b_256(const SymmetricKey& key, std::string_view data) {
  Blake2b256Digest out;
  REQUIRE(crypto_generichash(out.data(), out.size(),
                             reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                             key.bytes().data(), key.bytes().size()) == 0);
  return out;
}

size_t below(SeededRandom& random, size_t n) {
  uint64_t v = 0;
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&v), sizeof(v)));
  return size_t(v % n);
}

std::string random_bytes(SeededRandom& random, size_t n) {
  std::string s(n, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(s.data()), n));
  return s;
}

TEST_CASE("blake2b_256_many: every width gives libsodium's digests", "[crypto][unit]") {
  REQUIRE(sodium_init() >= 0);
  SeededRandom random(42);
  const SymmetricKey key = SymmetricKey::generate(random);
  // Sizes around the block edges (0, 1, 127-129, 255-257), and chunk-like ones that make
  // lanes run out at different times and take the next message.
  std::vector<size_t> sizes = {0, 1, 2, 127, 128, 129, 255, 256, 257, 1000, 4096, 65536};
  for (int i = 0; i < 40; ++i) sizes.push_back(below(random, 300000));
  std::vector<std::string> messages;
  for (size_t n : sizes) messages.push_back(random_bytes(random, n));
  std::vector<std::string_view> views(messages.begin(), messages.end());
  std::vector<Blake2b256Digest> expected;
  for (const std::string& m : messages) expected.push_back(sodium_blake2b_256(key, m));

  INFO("this CPU hashes " << blake2b_many_lanes() << " messages at once");
  for (int lanes : {0, 1, 4, 8}) {
    INFO("lanes " << lanes);
    // Every count from 0 to all, so each lane count meets a batch smaller than itself too.
    for (size_t count :
         {size_t(0), size_t(1), size_t(2), size_t(3), size_t(5), size_t(9), views.size()}) {
      INFO("count " << count);
      std::vector<Blake2b256Digest> out(count);
      blake2b_256_many(key.bytes(), std::span(views).first(count), out, lanes);
      for (size_t i = 0; i < count; ++i) {
        INFO("message " << i << " of " << sizes[i] << " bytes");
        CHECK(out[i] == expected[i]);
      }
    }
  }
}

TEST_CASE("blake2b_256_many: equal messages in a batch get equal digests", "[crypto][unit]") {
  SeededRandom random(7);
  const SymmetricKey key = SymmetricKey::generate(random);
  const std::string a = random_bytes(random, 70000), b = random_bytes(random, 300);
  std::vector<std::string_view> views = {a, b, a, a, b, a, a, a, a, b};
  std::vector<Blake2b256Digest> out(views.size());
  blake2b_256_many(key.bytes(), views, out);
  for (size_t i = 0; i < views.size(); ++i) CHECK(out[i] == blake2b_256(key.bytes(), views[i]));
}

}  // namespace
}  // namespace cb::crypto
