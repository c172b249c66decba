#include "base/base64.h"

#include <catch2/catch.hpp>

namespace cb {
namespace {

TEST_CASE("base64: RFC 4648 test vectors round-trip", "[base][unit]") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (auto [plain, enc] : vectors) {
    CHECK(base64_encode(plain) == enc);
    CHECK(*base64_decode(enc) == plain);
  }
  CHECK(base64url_encode("\xfb\xff") == "-_8");
  CHECK(*base64url_decode("-_8") == "\xfb\xff");
  CHECK(*base64url_decode("Zm8=") == "fo");
}

TEST_CASE("base64: bad characters, truncation and non-canonical bits are refused", "[base][unit]") {
  CHECK(base64_decode("Zm9v!").status().code() == Code::kInvalidArgument);
  CHECK(base64url_decode("Zm9v+").status().code() == Code::kInvalidArgument);
  CHECK(base64_decode("Z").status().code() == Code::kInvalidArgument);
  CHECK(base64_decode("Zh==").status().code() == Code::kInvalidArgument);  // "Zg==" canonical
}

}  // namespace
}  // namespace cb
