#include "base/failpoint.h"

#include <catch2/catch.hpp>

namespace cb {
namespace {

TEST_CASE("failpoint: a listed name gets its action, others are off", "[base][unit]") {
  const char* spec = "boxes.ensure.started=pause, boxes.hibernate.frozen = pause ,bad,=x";
  CHECK(parse_failpoint(spec, "boxes.ensure.started") == "pause");
  CHECK(parse_failpoint(spec, "boxes.hibernate.frozen") == "pause");
  CHECK(parse_failpoint(spec, "boxes.ensure") == "");  // whole names only
  CHECK(parse_failpoint(spec, "bad") == "");           // no '=': ignored
  CHECK(parse_failpoint("", "boxes.ensure.started") == "");
  CHECK(parse_failpoint("a=1,a=2", "a") == "1");  // the first entry wins
}

TEST_CASE("failpoint: off when the environment does not name it", "[base][unit]") {
  // ctest runs this without COCOONBOX_FAILPOINTS; a name nobody uses is off either way.
  CHECK(failpoint_action("test.never.configured") == "");
}

}  // namespace
}  // namespace cb
