#include "proc/output_ring.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

namespace cb::proc {
namespace {

OutputRing::Chunk read_or_fail(const OutputRing& ring, uint64_t offset,
                               std::size_t max_bytes = SIZE_MAX) {
  auto chunk = ring.read_from(offset, max_bytes);
  INFO(chunk.status().to_string());
  REQUIRE(chunk.ok());
  return std::move(chunk).value();
}

TEST_CASE("OutputRing: an empty ring holds nothing and starts at offset 0", "[proc][unit]") {
  OutputRing ring(8);
  CHECK(ring.capacity() == 8);
  CHECK(ring.size() == 0);
  CHECK(ring.total_written() == 0);
  CHECK(ring.total_dropped() == 0);
  auto chunk = read_or_fail(ring, 0);
  CHECK(chunk.offset == 0);
  CHECK(chunk.data.empty());
  CHECK(chunk.missed == 0);
  CHECK(ring.read_from(1).status().code() == Code::kOutOfRange);
}

TEST_CASE("OutputRing: below capacity every byte is kept", "[proc][unit]") {
  OutputRing ring(8);
  ring.write("abc");
  ring.write("");
  ring.write("de");
  CHECK(ring.contents() == "abcde");
  CHECK(ring.size() == 5);
  CHECK(ring.total_written() == 5);
  CHECK(ring.total_dropped() == 0);
  CHECK(read_or_fail(ring, 2).data == "cde");
}

TEST_CASE("OutputRing: overflow keeps the newest bytes and counts the dropped ones",
          "[proc][unit]") {
  OutputRing ring(8);
  ring.write("abcdef");
  ring.write("ghijk");  // wraps: 11 bytes into 8
  CHECK(ring.contents() == "defghijk");
  CHECK(ring.size() == 8);
  CHECK(ring.total_written() == 11);
  CHECK(ring.total_dropped() == 3);
  CHECK(ring.start_offset() == 3);
  CHECK(ring.end_offset() == 11);

  SECTION("a reader behind the ring learns how much it missed") {
    auto chunk = read_or_fail(ring, 1);
    CHECK(chunk.offset == 3);
    CHECK(chunk.missed == 2);
    CHECK(chunk.data == "defghijk");
  }
  SECTION("a reader inside the ring resumes where it left off") {
    auto first = read_or_fail(ring, 5, 3);
    CHECK(first.offset == 5);
    CHECK(first.missed == 0);
    CHECK(first.data == "fgh");
    auto second = read_or_fail(ring, first.offset + first.data.size());
    CHECK(second.data == "ijk");
    ring.write("lm");
    auto third = read_or_fail(ring, second.offset + second.data.size());
    CHECK(third.offset == 11);
    CHECK(third.data == "lm");
  }
  SECTION("a reader at the end gets nothing, and past the end an error") {
    CHECK(read_or_fail(ring, 11).data.empty());
    CHECK(ring.read_from(12).status().code() == Code::kOutOfRange);
  }
}

TEST_CASE("OutputRing: a write longer than the capacity keeps only its tail", "[proc][unit]") {
  OutputRing ring(4);
  ring.write("xy");
  ring.write("0123456789");
  CHECK(ring.contents() == "6789");
  CHECK(ring.total_written() == 12);
  CHECK(ring.total_dropped() == 8);
  ring.write("ab");
  CHECK(ring.contents() == "89ab");
  ring.write("WXYZ");  // exactly the capacity
  CHECK(ring.contents() == "WXYZ");
  CHECK(ring.total_dropped() == 14);
}

TEST_CASE("OutputRing: matches a simple model over many wrapping writes", "[proc][unit]") {
  constexpr std::size_t kCapacity = 37;
  OutputRing ring(kCapacity);
  std::string all;
  uint32_t seed = 12345;  // fixed: the test is deterministic
  auto next = [&seed] {
    seed = seed * 1103515245u + 12345u;  // the C standard's example LCG
    return (seed >> 16) & 0x7fff;
  };
  for (int i = 0; i < 500; ++i) {
    std::string bytes(next() % 50, '\0');
    for (auto& c : bytes) c = static_cast<char>('a' + next() % 26);
    ring.write(bytes);
    all += bytes;
    std::string want = all.size() > kCapacity ? all.substr(all.size() - kCapacity) : all;
    REQUIRE(ring.contents() == want);
    REQUIRE(ring.total_written() == all.size());
    REQUIRE(ring.total_dropped() == all.size() - want.size());
    uint64_t from = next() % (all.size() + 1);
    auto chunk = read_or_fail(ring, from);
    REQUIRE(chunk.offset == std::max<uint64_t>(from, all.size() - want.size()));
    REQUIRE(chunk.data == all.substr(chunk.offset));
  }
}

}  // namespace
}  // namespace cb::proc
