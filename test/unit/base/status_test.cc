#include "base/status.h"

#include "base/result.h"

#include <catch2/catch.hpp>

namespace cb {
namespace {

Result<int> half(int x) {
  if (x % 2) return invalid_argument("x: odd");
  return x / 2;
}

Result<int> quarter(int x) {
  ASSIGN_OR_RETURN(int h, half(x));
  ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  RETURN_IF_ERROR(half(x));
  return ok_status();
}

TEST_CASE("Status: ok is the default and carries no message", "[base][unit]") {
  Status s;
  CHECK(s.ok());
  CHECK(s.code() == Code::kOk);
  CHECK(s.message().empty());
  CHECK(s.to_string() == "OK");
}

TEST_CASE("Status: a code and message format as gRPC names them", "[base][unit]") {
  Status s = not_found("box main");
  CHECK_FALSE(s.ok());
  CHECK(s.code() == Code::kNotFound);
  CHECK(s.to_string() == "NOT_FOUND: box main");
  CHECK(fmt::format("{}", s) == "NOT_FOUND: box main");
  CHECK(s.with_prefix("ensure").message() == "ensure: box main");
  Status copy = s;
  CHECK(copy == s);
  CHECK(code_name(Code::kUnauthenticated) == "UNAUTHENTICATED");
  CHECK(code_from_int(42) == Code::kUnknown);
  CHECK(code_from_int(8) == Code::kResourceExhausted);
}

TEST_CASE("Result: holds a value or an error, and the macros propagate errors", "[base][unit]") {
  CHECK(*quarter(8) == 2);
  auto r = quarter(6);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(check_even(4).ok());
  CHECK(check_even(3).code() == Code::kInvalidArgument);
  Result<std::string> s = std::string("x");
  CHECK(s->size() == 1);
  CHECK(Result<int>(internal_error("boom")).value_or(7) == 7);
}

}  // namespace
}  // namespace cb
