#include "crypto/hmac.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::crypto {
namespace {

TEST_CASE("hmac_sha256: RFC 4231 test cases 1, 2 and 6", "[crypto][unit]") {
  CHECK(hex_encode(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex_encode(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block size is hashed first.
  CHECK(hex_encode(hmac_sha256(std::string(131, '\xaa'),
                               "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

}  // namespace
}  // namespace cb::crypto
