#include "state/pack.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::state {
namespace {

PackIndex sample() {
  PackIndex index;
  index.data_size = 1000;
  index.entries = {{"u/chunks/ab/abcdef", 0, 100},
                   {"u/chunks/cd/cdef01", 100, 50},
                   {"u/chunks/ef/ef0123", 400, 600}};
  return index;
}

TEST_CASE("pack index: encodes, decodes after a pack's objects, and names its size",
          "[state][unit]") {
  const PackIndex index = sample();
  const std::string tail = encode_pack_index(index);
  CHECK(tail.ends_with(kPackMagic));
  const std::string pack = std::string(1000, 'o') + tail;
  size_t consumed = 0;
  auto back = decode_pack_index(pack, "p", &consumed);
  REQUIRE(back.ok());
  CHECK(back->data_size == 1000);
  CHECK(back->entries == index.entries);
  CHECK(consumed == tail.size());
  CHECK(back->live_bytes() == 750);
  CHECK(*pack_index_size(pack, "p") == tail.size() - kPackFooterSize);
  // An index of no entries (all deleted but the pack is kept: never written, still valid).
  auto empty = decode_pack_index(encode_pack_index(PackIndex{5, {}}), "p");
  REQUIRE(empty.ok());
  CHECK(empty->entries.empty());
}

TEST_CASE("pack index: anything malformed is DATA_LOSS naming the file", "[state][unit]") {
  const std::string good = encode_pack_index(sample());
  auto code_of = [](std::string_view bytes) {
    return decode_pack_index(bytes, "u/.packs/x.pack").status().code();
  };
  CHECK(code_of("") == Code::kDataLoss);
  CHECK(code_of("CBPACK01") == Code::kDataLoss);  // no size
  std::string bad_magic = good;
  bad_magic.back() = '2';
  CHECK(code_of(bad_magic) == Code::kDataLoss);
  std::string too_long = good;
  too_long[too_long.size() - kPackFooterSize] = char(0xff);  // an index size beyond the file
  CHECK(code_of(too_long) == Code::kDataLoss);
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  CHECK(code_of(flipped) == Code::kDataLoss);
  // Entries beyond the data, overlapping or with a bad key.
  for (PackIndex index : {PackIndex{100, {{"u/a", 0, 101}}}, PackIndex{100, {{"u/a", 90, 20}}},
                          PackIndex{100, {{"u/../a", 0, 1}}}}) {
    auto status = decode_pack_index(encode_pack_index(index), "u/.packs/x.pack").status();
    CHECK(status.code() == Code::kDataLoss);
    CHECK(std::string(status.message()).find("u/.packs/x.pack") != std::string::npos);
  }
}

}  // namespace
}  // namespace cb::state
