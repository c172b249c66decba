#include "grpc/frame.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::grpc {
namespace {

// A 5-byte prefix with an arbitrary flag and length, for inputs encode_message cannot make.
std::string prefix(uint8_t flag, uint32_t length) {
  std::string p(kFrameHeaderSize, '\0');
  p[0] = char(flag);
  p[1] = char(length >> 24);
  p[2] = char(length >> 16);
  p[3] = char(length >> 8);
  p[4] = char(length);
  return p;
}

std::vector<std::string> drain(FrameDecoder& d) {
  std::vector<std::string> out;
  while (auto m = d.next()) out.push_back(std::move(*m));
  return out;
}

TEST_CASE("FrameDecoder: messages split at every byte boundary decode whole", "[grpc][unit]") {
  std::string wire = encode_message("hello") + encode_message("") + encode_message("world!");
  for (size_t cut = 0; cut <= wire.size(); ++cut) {
    INFO("cut at " << cut);
    FrameDecoder d;
    REQUIRE(d.feed(std::string_view(wire).substr(0, cut)).ok());
    REQUIRE(d.feed(std::string_view(wire).substr(cut)).ok());
    CHECK(drain(d) == std::vector<std::string>{"hello", "", "world!"});
    CHECK(d.at_boundary());
  }
  SECTION("one byte at a time") {
    FrameDecoder d;
    std::vector<std::string> got;
    for (size_t i = 0; i < wire.size(); ++i) {
      REQUIRE(d.feed(std::string_view(wire).substr(i, 1)).ok());
      bool boundary = i + 1 == 5 + 5 || i + 1 == 10 + 5 || i + 1 == wire.size();
      CHECK(d.idle() == boundary);
      for (auto& m : drain(d)) got.push_back(std::move(m));
    }
    CHECK(got == std::vector<std::string>{"hello", "", "world!"});
  }
}

TEST_CASE("FrameDecoder: several messages in one feed are all delivered in order", "[grpc][unit]") {
  std::string wire;
  for (int i = 0; i < 100; ++i) append_message(wire, std::string(size_t(i), char('a' + i % 26)));
  FrameDecoder d;
  REQUIRE(d.feed(wire).ok());
  auto got = drain(d);
  REQUIRE(got.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(got[size_t(i)] == std::string(size_t(i), char('a' + i % 26)));
  CHECK(d.at_boundary());
  CHECK_FALSE(d.next().has_value());
}

TEST_CASE("FrameDecoder: an empty message is a message", "[grpc][unit]") {
  FrameDecoder d;
  REQUIRE(d.feed(encode_message("")).ok());
  CHECK_FALSE(d.at_boundary());  // a message waits to be taken
  auto m = d.next();
  REQUIRE(m.has_value());
  CHECK(m->empty());
  CHECK(d.at_boundary());
}

TEST_CASE("FrameDecoder: a partial prefix or body leaves the decoder mid-message", "[grpc][unit]") {
  FrameDecoder d;
  REQUIRE(d.feed(prefix(0, 3).substr(0, 2)).ok());
  CHECK_FALSE(d.idle());
  REQUIRE(d.feed(prefix(0, 3).substr(2) + "ab").ok());
  CHECK_FALSE(d.idle());
  CHECK_FALSE(d.next().has_value());
  REQUIRE(d.feed("c").ok());
  CHECK(d.idle());
  CHECK(d.next() == std::optional<std::string>("abc"));
}

TEST_CASE("FrameDecoder: a length prefix above max is kResourceExhausted before the body arrives",
          "[grpc][unit]") {
  FrameDecoder d(16);
  Status st = d.feed(prefix(0, 17));  // only the prefix: the body was never sent
  CHECK(st.code() == Code::kResourceExhausted);
  CHECK_FALSE(drain(d).size());

  SECTION("exactly at the limit is accepted") {
    FrameDecoder at(16);
    REQUIRE(at.feed(encode_message(std::string(16, 'x'))).ok());
    CHECK(at.next() == std::optional<std::string>(std::string(16, 'x')));
  }
  SECTION("0xFFFFFFFF with the default limit") {
    FrameDecoder big;
    CHECK(big.feed(prefix(0, 0xFFFFFFFFu)).code() == Code::kResourceExhausted);
  }
  SECTION("a limit of zero accepts only empty messages") {
    FrameDecoder zero(0);
    REQUIRE(zero.feed(encode_message("")).ok());
    CHECK(zero.feed(encode_message("x")).code() == Code::kResourceExhausted);
  }
  SECTION("messages before the oversized one are still delivered") {
    FrameDecoder mixed(4);
    Status s = mixed.feed(encode_message("ok") + prefix(0, 5));
    CHECK(s.code() == Code::kResourceExhausted);
    CHECK(mixed.next() == std::optional<std::string>("ok"));
  }
}

TEST_CASE("FrameDecoder: compressed-flag 1 without negotiation is kInternal", "[grpc][unit]") {
  FrameDecoder d;
  CHECK(d.feed(prefix(1, 3) + "abc").code() == Code::kInternal);
}

TEST_CASE("FrameDecoder: compressed-flag 2 (undefined) is kInternal", "[grpc][unit]") {
  for (int flag : {2, 0x80, 0xff}) {
    INFO("flag " << flag);
    FrameDecoder d;
    CHECK(d.feed(prefix(uint8_t(flag), 0)).code() == Code::kInternal);
  }
}

TEST_CASE("FrameDecoder: errors are sticky", "[grpc][unit]") {
  FrameDecoder d(8);
  Status first = d.feed(prefix(0, 9));
  REQUIRE(first.code() == Code::kResourceExhausted);
  // Good input after the error is refused with the same status.
  CHECK(d.feed(encode_message("ok")) == first);
  CHECK(d.feed("") == first);
  CHECK_FALSE(d.next().has_value());

  FrameDecoder c;
  Status flag = c.feed(prefix(1, 0));
  REQUIRE(flag.code() == Code::kInternal);
  CHECK(c.feed(encode_message("ok")) == flag);
}

TEST_CASE("append_message: writes flag 0, a big-endian length and the bytes", "[grpc][unit]") {
  std::string out = "pre";
  append_message(out, "abc");
  CHECK(out == std::string("pre\0\0\0\0\3abc", 11));
  CHECK(encode_message("") == std::string(5, '\0'));
  std::string big(0x010203, 'z');
  std::string enc = encode_message(big);
  REQUIRE(enc.size() == 5 + big.size());
  CHECK(enc.substr(0, 5) == std::string("\0\0\x01\x02\x03", 5));
  CHECK(enc.substr(5) == big);
}

}  // namespace
}  // namespace cb::grpc
