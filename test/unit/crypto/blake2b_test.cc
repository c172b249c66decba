#include "crypto/blake2b.h"

#include "crypto/hash.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::crypto {
namespace {

// Key 00 01 .. 1f. The expected values were computed with Python's hashlib.blake2b (an
// implementation independent of libsodium), as in the comment next to each.
SymmetricKey counting_key() {
  std::string bytes;
  for (int i = 0; i < 32; ++i) bytes += char(i);
  return std::move(SymmetricKey::from_bytes(bytes)).value();
}

TEST_CASE("blake2b_256: matches hashlib.blake2b(data, digest_size=32, key=key)", "[crypto][unit]") {
  SymmetricKey key = counting_key();
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes += char(i);
  CHECK(hex_encode(blake2b_256(key.bytes(), "")) ==
        "4e51e7a913fc80137da52880fecca175bf81e117d5c68126dc2774033517ea0d");
  CHECK(hex_encode(blake2b_256(key.bytes(), "abc")) ==
        "d63a32d3e44738d7907f964316c241adaba0abfeabc32349677578a15a203f7f");
  CHECK(hex_encode(blake2b_256(key.bytes(), all_bytes)) ==
        "b42be36ea26392f67d1d3706ffa72b6c61c2ff38e1fabd9a49e154d54b967d83");
}

TEST_CASE("blake2b_256: another key gives another digest", "[crypto][unit]") {
  SeededRandom random(3);
  SymmetricKey a = SymmetricKey::generate(random);
  SymmetricKey b = SymmetricKey::generate(random);
  CHECK(blake2b_256(a.bytes(), "same") == blake2b_256(a.bytes(), "same"));
  CHECK(blake2b_256(a.bytes(), "same") != blake2b_256(b.bytes(), "same"));
}

TEST_CASE("derive_subkey: matches BLAKE2b with salt = uint64le(id) and personal = context",
          "[crypto][unit]") {
  SymmetricKey key = counting_key();
  // hashlib.blake2b(b'', digest_size=32, key=key, salt=id.to_bytes(8,'little')+bytes(8),
  //                 person=context+bytes(8))
  CHECK(hex_encode(derive_subkey(key, 0, "cbstate1").bytes()) ==
        "8de070367025a19271b86fe1e25264ac769c34ada6684581fa6ec7c1d70d0590");
  CHECK(hex_encode(derive_subkey(key, 1, "cbstate1").bytes()) ==
        "8bc483efbd1fa7334dda4c8a63b45cc6555b41ae05acb07ce6da3e7513f1427a");
  CHECK(hex_encode(derive_subkey(key, 7, "cbstate1").bytes()) ==
        "d617492a1277dfde7ee203cf89029ff7bce9720a770d21b236960c75b8a7db80");
  CHECK(hex_encode(derive_subkey(key, UINT64_MAX, "ABCDEFGH").bytes()) ==
        "09cf3596c201721938f6629a5d4afcc8d4cad2e81b360faf8a5a16e40929c417");
}

}  // namespace
}  // namespace cb::crypto
