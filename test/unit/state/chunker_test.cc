#include "state/chunker.h"

#include "crypto/random.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <numeric>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace cb::state {
namespace {

constexpr ChunkerParams kSmall{1024, 4096, 16384};

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  crypto::SeededRandom random(seed);
  std::vector<uint8_t> out(n);
  random.fill(out);
  return out;
}

// The chunks of |data| as strings, in order.
std::vector<std::string> chunks_of(const std::vector<uint8_t>& data, const ChunkerParams& p) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t len : split_chunks(data, p)) {
    out.emplace_back(reinterpret_cast<const char*>(data.data()) + at, len);
    at += len;
  }
  return out;
}

TEST_CASE("chunker: the gear table is the documented splitmix64 sequence", "[state][unit]") {
  // README.md §Chunking gives these first entries; they are part of the on-store format.
  CHECK(gear_table()[0] == 0x34682955402c1178ULL);
  CHECK(gear_table()[1] == 0xdb994fe3ac1573a5ULL);
  CHECK(gear_table()[255] == 0x4ba2fb3b5286e5f0ULL);
  std::set<uint64_t> distinct(gear_table().begin(), gear_table().end());
  CHECK(distinct.size() == 256);
}

TEST_CASE("chunker: params outside the documented bounds are refused", "[state][unit]") {
  CHECK(validate_chunker_params(kDefaultChunkerParams).ok());
  CHECK(validate_chunker_params(kSmall).ok());
  CHECK(!validate_chunker_params({32, 4096, 16384}).ok());
  CHECK(!validate_chunker_params({1024, 3000, 16384}).ok());
  CHECK(!validate_chunker_params({8192, 4096, 16384}).ok());
  CHECK(!validate_chunker_params({1024, 4096, 4096}).ok());
  CHECK(!validate_chunker_params({1024, 4096, 128u * 1024 * 1024}).ok());
}

TEST_CASE("chunker: chunks respect min and max and cover the data", "[state][unit]") {
  auto data = random_bytes(1 << 20, 1);
  auto lengths = split_chunks(data, kSmall);
  CHECK(std::accumulate(lengths.begin(), lengths.end(), size_t{0}) == data.size());
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    CHECK(lengths[i] > kSmall.min_size);
    CHECK(lengths[i] <= kSmall.max_size);
  }
  // Normalized chunking keeps the mean near avg (FastCDC NC2: within a factor of 1.5).
  double mean = double(data.size()) / double(lengths.size());
  CHECK(mean > kSmall.avg_size / 1.5);
  CHECK(mean < kSmall.avg_size * 1.5);
}

TEST_CASE("chunker: constant data is cut at max_size, short data is one chunk", "[state][unit]") {
  std::vector<uint8_t> zeros(100000, 0);
  auto lengths = split_chunks(zeros, kSmall);
  for (size_t i = 0; i + 1 < lengths.size(); ++i) CHECK(lengths[i] == kSmall.max_size);
  std::vector<uint8_t> tiny(kSmall.min_size, 7);
  CHECK(split_chunks(tiny, kSmall) == std::vector<size_t>{kSmall.min_size});
  CHECK(split_chunks(std::vector<uint8_t>(), kSmall).empty());
}

// xorshift64* (Vigna), seed 1, each output as 8 little-endian bytes: easy to reproduce in
// any language.
std::vector<uint8_t> xorshift_bytes(size_t n) {
  uint64_t x = 1;
  std::vector<uint8_t> out;
  while (out.size() < n) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    uint64_t v = x * 0x2545f4914f6cdd1dULL;
    for (int i = 0; i < 8 && out.size() < n; ++i) out.push_back(uint8_t(v >> (8 * i)));
  }
  return out;
}

TEST_CASE("chunker: boundaries match an independent implementation of README.md §Chunking",
          "[state][unit]") {
  // Pinned from a Python transcription of the README's algorithm: a change here changes
  // every chunk id in every store.
  auto data = xorshift_bytes(300000);
  auto lengths = split_chunks(data, kSmall);
  CHECK(lengths == split_chunks(data, kSmall));
  REQUIRE(lengths.size() == 68);
  CHECK(std::vector<size_t>(lengths.begin(), lengths.begin() + 5) ==
        std::vector<size_t>{4354, 1665, 4729, 1552, 4739});
}

TEST_CASE("chunker: an insert or a delete changes only the chunks next to it (shift resistance)",
          "[state][unit]") {
  auto data = random_bytes(1 << 20, 3);
  auto before = chunks_of(data, kSmall);
  std::set<std::string> before_set(before.begin(), before.end());

  auto count_new = [&](const std::vector<uint8_t>& edited) {
    auto after = chunks_of(edited, kSmall);
    size_t fresh = 0;
    for (const auto& c : after) fresh += before_set.count(c) == 0 ? 1 : 0;
    return std::pair<size_t, size_t>(fresh, after.size());
  };

  SECTION("10 bytes inserted in the middle") {
    auto edited = data;
    auto extra = random_bytes(10, 4);
    edited.insert(edited.begin() + 500000, extra.begin(), extra.end());
    auto [fresh, total] = count_new(edited);
    CHECK(fresh >= 1);
    CHECK(fresh <= 4);
    CHECK(total >= before.size());
  }
  SECTION("1000 bytes deleted near the start") {
    auto edited = data;
    edited.erase(edited.begin() + 20000, edited.begin() + 21000);
    auto [fresh, total] = count_new(edited);
    // Cut-point skipping below min_size can carry a changed boundary a chunk or two further
    // before the old ones are found again.
    CHECK(fresh >= 1);
    CHECK(fresh <= 4);
    CHECK(fresh * 20 < total);
  }
  SECTION("a byte prepended") {
    auto edited = data;
    edited.insert(edited.begin(), uint8_t(1));
    auto [fresh, total] = count_new(edited);
    CHECK(fresh >= 1);
    CHECK(fresh <= 4);
  }
}

TEST_CASE("ChunkReader: yields the same chunks as split_chunks on the whole file",
          "[state][unit]") {
  test::TempDir dir;
  auto data = random_bytes(200000, 5);
  const std::string path = dir.file("f").string();
  test_util::write_file(path, std::string(data.begin(), data.end()));
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ChunkReader reader(fd, kSmall);
  std::vector<size_t> lengths;
  std::string joined;
  while (true) {
    auto chunk = reader.next();
    REQUIRE(chunk.ok());
    if (chunk->empty()) break;
    lengths.push_back(chunk->size());
    joined.append(reinterpret_cast<const char*>(chunk->data()), chunk->size());
  }
  ::close(fd);
  CHECK(lengths == split_chunks(data, kSmall));
  CHECK(joined == std::string(data.begin(), data.end()));
  CHECK(reader.offset() == data.size());
}

TEST_CASE("ChunkReader: next_batch() yields the chunks of next(), a buffer at a time",
          "[state][unit]") {
  test::TempDir dir;
  auto data = random_bytes(200000, 6);
  const std::string path = dir.file("f").string();
  test_util::write_file(path, std::string(data.begin(), data.end()));
  // The smallest buffer allowed, one of several largest chunks, and one larger than the file.
  for (size_t buffer_size :
       {size_t(2 * kSmall.max_size), size_t(7 * kSmall.max_size + 13), data.size() * 2}) {
    INFO(buffer_size);
    int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    std::vector<uint8_t> buffer(buffer_size);
    ChunkReader reader(fd, kSmall, buffer);
    std::vector<size_t> lengths;
    std::string joined;
    std::vector<std::span<const uint8_t>> batch;
    int batches = 0;
    while (true) {
      REQUIRE(reader.next_batch(batch).ok());
      if (batch.empty()) break;
      ++batches;
      size_t bytes = 0;
      for (auto chunk : batch) {
        lengths.push_back(chunk.size());
        bytes += chunk.size();
        joined.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
      }
      // Every batch but the file's last one fills the buffer but for less than one chunk.
      if (reader.offset() < data.size()) CHECK(bytes + kSmall.max_size > buffer_size);
    }
    ::close(fd);
    CHECK(lengths == split_chunks(data, kSmall));
    CHECK(joined == std::string(data.begin(), data.end()));
    CHECK(reader.offset() == data.size());
    CHECK(batches <= int(data.size() / (buffer_size - kSmall.max_size)) + 1);
  }
}

}  // namespace
}  // namespace cb::state
