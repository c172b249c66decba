#include "grpc/wire.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

namespace cb::grpc {
namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

http::Header h(std::string name, std::string value) {
  return http::Header{std::move(name), std::move(value)};
}

std::string all_bytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(char(i));
  return s;
}

TEST_CASE("parse_timeout: every unit converts to nanoseconds", "[grpc][unit]") {
  CHECK(*parse_timeout("2H") == nanoseconds(2h));
  CHECK(*parse_timeout("3M") == nanoseconds(3min));
  CHECK(*parse_timeout("4S") == nanoseconds(4s));
  CHECK(*parse_timeout("250m") == nanoseconds(250ms));
  CHECK(*parse_timeout("100u") == nanoseconds(100us));
  CHECK(*parse_timeout("7n") == 7ns);
  CHECK(*parse_timeout("0m") == 0ns);
  CHECK(*parse_timeout("00000010S") == nanoseconds(10s));
}

TEST_CASE("parse_timeout: at most 8 digits are accepted", "[grpc][unit]") {
  CHECK(*parse_timeout("99999999n") == 99999999ns);
  CHECK(*parse_timeout("12345678S") == nanoseconds(12345678s));
  CHECK(parse_timeout("123456789n").status().code() == Code::kInvalidArgument);
  CHECK(parse_timeout("000000001S").status().code() == Code::kInvalidArgument);
  SECTION("the largest hour value does not overflow") {
    auto r = parse_timeout("99999999H");
    REQUIRE(r.ok());
    CHECK(*r > nanoseconds(24h * 365 * 50));
  }
}

TEST_CASE("parse_timeout: a bad unit, an empty value or a non-digit is kInvalidArgument",
          "[grpc][unit]") {
  for (const char* bad :
       {"", "S", "1", "10", "1s", "1h", "1x", "1 S", " 1S", "-1S", "+1S", "1.5S", "aS", "1SS"}) {
    INFO("value " << bad);
    CHECK(parse_timeout(bad).status().code() == Code::kInvalidArgument);
  }
  CHECK(parse_timeout(std::string_view("1\0S", 3)).status().code() == Code::kInvalidArgument);
}

TEST_CASE("format_timeout: the encoding parses back to the same or a slightly longer timeout",
          "[grpc][unit]") {
  for (nanoseconds t :
       {nanoseconds(1), nanoseconds(999), nanoseconds(99999999), nanoseconds(100000000),
        nanoseconds(100000001), nanoseconds(1s), nanoseconds(200ms), nanoseconds(123456789123),
        nanoseconds(1h), nanoseconds(24h * 365), nanoseconds(24h * 365 * 90)}) {
    std::string enc = format_timeout(t);
    INFO("timeout " << t.count() << "ns encoded " << enc);
    CHECK(enc.size() >= 2);
    CHECK(enc.size() <= 9);
    auto back = parse_timeout(enc);
    REQUIRE(back.ok());
    CHECK(*back >= t);
    // Rounded up by less than one step of the unit chosen.
    CHECK(*back - t < nanoseconds(std::chrono::hours(1)));
    if (t < nanoseconds(1s)) CHECK(*back - t < nanoseconds(1ms));
  }
}

TEST_CASE("format_timeout: exact values stay exact and others round up, never down",
          "[grpc][unit]") {
  CHECK(format_timeout(1ns) == "1n");
  CHECK(format_timeout(99999999ns) == "99999999n");
  CHECK(format_timeout(100000000ns) == "100000u");
  CHECK(format_timeout(100000001ns) == "100001u");  // 100000.001u rounds up
  CHECK(format_timeout(nanoseconds(1s)) == "1000000u");
  CHECK(format_timeout(nanoseconds(200s)) == "200000m");
  CHECK(format_timeout(nanoseconds(200s) + 1ns) == "200001m");
  SECTION("zero or negative becomes the smallest positive timeout") {
    CHECK(format_timeout(0ns) == "1n");
    CHECK(format_timeout(-5s) == "1n");
  }
  SECTION("the largest duration still fits") {
    std::string enc = format_timeout(nanoseconds::max());
    CHECK(enc.back() == 'H');
    CHECK(parse_timeout(enc).ok());
  }
}

TEST_CASE("percent_encode: the interop special status message round-trips", "[grpc][unit]") {
  const std::string special =
      "\t\ntest with whitespace\r\nand Unicode BMP \xe2\x98\xba and non-BMP \xf0\x9f\x98\x88\t\n";
  const std::string encoded =
      "%09%0Atest with whitespace%0D%0Aand Unicode BMP %E2%98%BA and non-BMP %F0%9F%98%88%09%0A";
  CHECK(percent_encode(special) == encoded);
  CHECK(percent_decode(encoded) == special);
  CHECK(percent_decode("%e2%98%ba") == "\xe2\x98\xba");  // lower-case hex decodes too
}

TEST_CASE("percent_encode: '%' itself is escaped and printable ASCII is kept", "[grpc][unit]") {
  CHECK(percent_encode("100%") == "100%25");
  CHECK(percent_decode("100%25") == "100%");
  CHECK(percent_encode("%25") == "%2525");
  CHECK(percent_decode(percent_encode("%25")) == "%25");
  std::string printable;
  for (char c = 0x20; c < 0x7f; ++c)
    if (c != '%') printable.push_back(c);
  CHECK(percent_encode(printable) == printable);
  std::string bytes = all_bytes();
  CHECK(percent_decode(percent_encode(bytes)) == bytes);
  CHECK(percent_encode(std::string_view("\0\x7f", 2)) == "%00%7F");
}

TEST_CASE("percent_decode: malformed escapes are kept verbatim", "[grpc][unit]") {
  CHECK(percent_decode("%") == "%");
  CHECK(percent_decode("%4") == "%4");
  CHECK(percent_decode("a%4") == "a%4");
  CHECK(percent_decode("%zz") == "%zz");
  CHECK(percent_decode("%G1ok") == "%G1ok");
  CHECK(percent_decode("%4g") == "%4g");
  CHECK(percent_decode("50% off") == "50% off");
  CHECK(percent_decode("%%41") == "%A");
  CHECK(percent_decode("%41") == "A");  // an escape at the very end
  CHECK(percent_decode("") == "");
}

TEST_CASE("metadata_to_wire: -bin values go out as unpadded base64 and come back as bytes",
          "[grpc][unit]") {
  Metadata md;
  md.push_back(h("x-text", "plain value"));
  md.push_back(h("x-data-bin", all_bytes()));
  md.push_back(h("x-one-bin", "f"));
  md.push_back(h("x-empty-bin", ""));
  REQUIRE(validate_metadata(md).ok());
  auto wire = metadata_to_wire(md);
  REQUIRE(wire.size() == 4);
  CHECK(wire[0] == h("x-text", "plain value"));
  CHECK(wire[2] == h("x-one-bin", "Zg"));
  CHECK(wire[3] == h("x-empty-bin", ""));
  for (const auto& f : wire) {
    CHECK(f.value.find('=') == std::string::npos);
    for (char c : f.value) CHECK((c >= 0x20 && c < 0x7f));
  }
  auto back = metadata_from_wire(wire);
  REQUIRE(back.ok());
  CHECK(*back == md);
}

TEST_CASE("metadata_from_wire: padded, unpadded and comma-joined -bin values decode",
          "[grpc][unit]") {
  http::Headers wire;
  wire.push_back(h("a-bin", "Zm8="));
  wire.push_back(h("b-bin", "Zm8"));
  wire.push_back(h("c-bin", "Zg==,Zm8"));
  wire.push_back(h("d-bin", "Zg, Zm9v"));
  wire.push_back(h("x-text", "a,b"));  // only -bin values are split
  auto md = metadata_from_wire(wire);
  REQUIRE(md.ok());
  Metadata want;
  want.push_back(h("a-bin", "fo"));
  want.push_back(h("b-bin", "fo"));
  want.push_back(h("c-bin", "f"));
  want.push_back(h("c-bin", "fo"));
  want.push_back(h("d-bin", "f"));
  want.push_back(h("d-bin", "foo"));
  want.push_back(h("x-text", "a,b"));
  CHECK(*md == want);

  SECTION("an undecodable -bin value is kInternal") {
    http::Headers bad;
    bad.push_back(h("x-bin", "not base64!"));
    CHECK(metadata_from_wire(bad).status().code() == Code::kInternal);
  }
  SECTION("reserved fields are not application metadata") {
    http::Headers fields;
    fields.push_back(h("content-type", "application/grpc"));
    fields.push_back(h("grpc-status", "0"));
    fields.push_back(h("grpc-message", "x"));
    fields.push_back(h("grpc-timeout", "1S"));
    fields.push_back(h("grpc-encoding", "identity"));
    fields.push_back(h("grpc-accept-encoding", "identity"));
    fields.push_back(h("te", "trailers"));
    fields.push_back(h("user-agent", "ua"));
    fields.push_back(h("grpc-status-details-bin", "AAAA"));
    fields.push_back(h("x-kept", "yes"));
    auto kept = metadata_from_wire(fields);
    REQUIRE(kept.ok());
    REQUIRE(kept->size() == 1);
    CHECK((*kept)[0] == h("x-kept", "yes"));
  }
}

TEST_CASE("validate_metadata: reserved keys, bad key characters and non-ASCII text are refused",
          "[grpc][unit]") {
  for (const char* key :
       {":path", ":authority", "content-type", "te", "user-agent", "grpc-status", "grpc-message",
        "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "grpc-status-details-bin",
        "connection", "host", "content-length", "transfer-encoding", ""}) {
    INFO("key " << key);
    Metadata md;
    md.push_back(h(key, "v"));
    Status st = validate_metadata(md);
    CHECK(st.code() == Code::kInvalidArgument);
  }
  for (const char* key : {"Upper", "x key", "x/y", "x:y", "caf\xc3\xa9"}) {
    INFO("key " << key);
    Metadata md;
    md.push_back(h(key, "v"));
    CHECK(validate_metadata(md).code() == Code::kInvalidArgument);
  }
  SECTION("a non-ASCII or control byte in a text value needs a -bin key") {
    for (std::string value : {std::string("caf\xc3\xa9"), std::string("a\nb"), std::string("\x7f"),
                              std::string("nul\0", 4)}) {
      Metadata md;
      md.push_back(h("x-text", value));
      CHECK(validate_metadata(md).code() == Code::kInvalidArgument);
      Metadata bin;
      bin.push_back(h("x-text-bin", value));
      CHECK(validate_metadata(bin).ok());
    }
  }
  SECTION("ordinary keys pass") {
    Metadata md;
    md.push_back(h("x-request-id", "abc 123 ~!"));
    md.push_back(h("a_b.c-0", ""));
    md.push_back(h("x-bytes-bin", all_bytes()));
    CHECK(validate_metadata(md).ok());
  }
}

TEST_CASE("code_for_http_status: follows the gRPC HTTP-to-code table", "[grpc][unit]") {
  CHECK(code_for_http_status(400) == Code::kInternal);
  CHECK(code_for_http_status(401) == Code::kUnauthenticated);
  CHECK(code_for_http_status(403) == Code::kPermissionDenied);
  CHECK(code_for_http_status(404) == Code::kUnimplemented);
  CHECK(code_for_http_status(429) == Code::kUnavailable);
  CHECK(code_for_http_status(502) == Code::kUnavailable);
  CHECK(code_for_http_status(503) == Code::kUnavailable);
  CHECK(code_for_http_status(504) == Code::kUnavailable);
  for (int other : {100, 200, 301, 405, 415, 500, 505, 0, 999})
    CHECK(code_for_http_status(other) == Code::kUnknown);
}

}  // namespace
}  // namespace cb::grpc
