#include "state/chunk.h"

#include "crypto/bytes.h"
#include "crypto/hash.h"
#include "crypto/sealed.h"
#include "state/keys.h"
#include "state/snapshot.h"
#include "state/zstd_internal.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <unordered_set>

namespace cb::state {
namespace {

crypto::SymmetricKey key_from(uint64_t seed) {
  crypto::SeededRandom random(seed);
  return crypto::SymmetricKey::generate(random);
}

TEST_CASE("StateKeys: one key gives one id per content; another key another id", "[state][unit]") {
  StateKeys a(key_from(1));
  StateKeys a_again(key_from(1));
  StateKeys b(key_from(2));
  CHECK(a.chunk_id("hello") == a_again.chunk_id("hello"));
  CHECK(a.chunk_id("hello") != a.chunk_id("hello!"));
  CHECK(a.chunk_id("hello") != b.chunk_id("hello"));
  // The subkeys are distinct from each other.
  CHECK(!crypto::constant_time_equal(crypto::char_view(a.chunk_seal_key().bytes()),
                                     crypto::char_view(a.manifest_seal_key().bytes())));
}

TEST_CASE("ChunkId: hex round trips and bad hex is refused", "[state][unit]") {
  StateKeys keys(key_from(1));
  ChunkId id = keys.chunk_id("x");
  CHECK(id.hex().size() == 64);
  auto back = ChunkId::from_hex(id.hex());
  REQUIRE(back.ok());
  CHECK(*back == id);
  CHECK(ChunkId::from_hex("abc").status().code() == Code::kInvalidArgument);
  CHECK(ChunkId::from_hex(std::string(64, 'g')).status().code() == Code::kInvalidArgument);
}

TEST_CASE("ChunkIdHash: ids a box chose to share their first 24 bytes spread over a table",
          "[state][unit]") {
  std::unordered_set<ChunkId, ChunkIdHash> ids;
  for (int i = 0; i < 4096; ++i) {
    ChunkId id;
    id.bytes.fill(0xab);
    id.bytes[30] = uint8_t(i >> 8);
    id.bytes[31] = uint8_t(i);
    ids.insert(id);
  }
  size_t largest = 0;
  for (size_t b = 0; b < ids.bucket_count(); ++b) largest = std::max(largest, ids.bucket_size(b));
  CHECK(largest <= 16);  // an unkeyed hash of the first 8 bytes put all 4096 in one
}

TEST_CASE("seal_chunk: round trips compressible and incompressible chunks", "[state][unit]") {
  StateKeys keys(key_from(1));
  crypto::SeededRandom random(9);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i % 17) + " of a log\n";
  std::string noise(50000, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(noise.data()), noise.size()));
  // Beyond the 1 MiB seal_chunk() seals in its thread's kept buffer, and a small chunk after
  // large ones (nothing of theirs may show).
  std::string big_noise(3 << 20, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(big_noise.data()), big_noise.size()));
  std::string big_text;
  while (big_text.size() < (2u << 20)) big_text += text;
  for (const std::string& plain : {std::string(), std::string("x"), text, noise, big_noise,
                                   big_text, std::string("y"), text}) {
    ChunkId id = keys.chunk_id(plain);
    std::string sealed = seal_chunk(keys, id, crypto::byte_view(plain));
    if (plain == text) CHECK(sealed.size() < plain.size() / 4);  // compressed
    if (plain == noise || plain == big_noise)
      CHECK(sealed.size() == plain.size() + 1 + crypto::kSealOverheadNonceNotStored);
    if (plain == big_text) CHECK(sealed.size() < plain.size() / 4);
    auto opened = open_chunk(keys, id, sealed);
    REQUIRE(opened.ok());
    CHECK(*opened == plain);
  }
}

TEST_CASE("seal_chunk: deterministic, the nonce is the id's and not stored", "[state][unit]") {
  StateKeys keys(key_from(1));
  const std::string plain = "same bytes, same object";
  const ChunkId id = keys.chunk_id(plain);
  const std::string sealed = seal_chunk(keys, id, crypto::byte_view(plain));
  CHECK(sealed == seal_chunk(keys, id, crypto::byte_view(plain)));
  CHECK(uint8_t(sealed[0]) == crypto::kSealVersionNonceNotStored);
  CHECK(sealed.size() == plain.size() + 1 + crypto::kSealOverheadNonceNotStored);
  // Another user's key seals the same plaintext to other bytes under another id.
  StateKeys other(key_from(2));
  CHECK(seal_chunk(other, other.chunk_id(plain), crypto::byte_view(plain)) != sealed);
}

TEST_CASE("open_chunk: a version-1 chunk (random nonce stored) as earlier saves wrote it opens",
          "[state][unit]") {
  StateKeys keys(key_from(1));
  crypto::SeededRandom random(9);
  const std::string plain = "saved before the nonce was derived from the id";
  const ChunkId id = keys.chunk_id(plain);
  const std::string inner = char(ChunkCodec::kStored) + plain;
  const std::string v1 =
      crypto::seal(keys.chunk_seal_key().bytes(), inner, chunk_additional_data(id), random);
  REQUIRE(uint8_t(v1[0]) == crypto::kSealVersion);
  auto opened = open_chunk(keys, id, v1);
  REQUIRE(opened.ok());
  CHECK(*opened == plain);
  std::string tampered = v1;
  tampered[5] = char(tampered[5] ^ 1);  // in the stored nonce
  CHECK(open_chunk(keys, id, tampered).status().code() == Code::kDataLoss);
  // The same body with the version byte of the other format does not open either.
  std::string as_v2 = v1;
  as_v2[0] = char(crypto::kSealVersionNonceNotStored);
  CHECK(open_chunk(keys, id, as_v2).status().code() == Code::kDataLoss);
}

TEST_CASE("seal_chunk: zstd frames are stored without their magic number", "[state][unit]") {
  StateKeys keys(key_from(1));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i % 17) + " of a log\n";
  const ChunkId id = keys.chunk_id(text);
  const std::string sealed = seal_chunk(keys, id, crypto::byte_view(text));
  std::span<const uint8_t, crypto::kSealNonceSize> nonce(id.bytes.data(), crypto::kSealNonceSize);
  auto inner = crypto::open_with_nonce(keys.chunk_seal_key().bytes(), nonce, sealed,
                                       chunk_additional_data(id));
  REQUIRE(inner.ok());
  REQUIRE(inner->size() > 5);
  CHECK(uint8_t((*inner)[0]) == uint8_t(ChunkCodec::kZstdMagicless));
  // It is a standard frame without its first 4 bytes, the magic number.
  const std::string frame = inner->substr(1);
  auto magicless =
      internal::zstd_decompress(frame, kMaxChunkSize, "chunk", internal::ZstdFrame::kMagicless);
  REQUIRE(magicless.ok());
  CHECK(*magicless == text);
  const std::string magic = internal::zstd_compress("", 1).substr(0, 4);
  auto standard = internal::zstd_decompress(magic + frame, kMaxChunkSize, "chunk");
  REQUIRE(standard.ok());
  CHECK(*standard == text);
  CHECK(internal::zstd_decompress(frame, kMaxChunkSize, "chunk").status().code() ==
        Code::kDataLoss);
}

TEST_CASE("open_chunk: a codec-1 chunk (zstd frame with its magic) as earlier saves wrote it opens",
          "[state][unit]") {
  StateKeys keys(key_from(1));
  std::string text;
  for (int i = 0; i < 500; ++i) text += "record " + std::to_string(i % 7) + " unchanged\n";
  const ChunkId id = keys.chunk_id(text);
  std::span<const uint8_t, crypto::kSealNonceSize> nonce(id.bytes.data(), crypto::kSealNonceSize);
  auto seal_inner = [&](const std::string& inner) {
    return crypto::seal_with_nonce(keys.chunk_seal_key().bytes(), nonce, inner,
                                   chunk_additional_data(id));
  };
  const std::string frame = internal::zstd_compress(text, kChunkZstdLevel);
  auto opened = open_chunk(keys, id, seal_inner(char(ChunkCodec::kZstd) + frame));
  REQUIRE(opened.ok());
  CHECK(*opened == text);
  // Each codec reads only its own frames: a frame under the other codec's byte is kDataLoss.
  CHECK(
      open_chunk(keys, id, seal_inner(char(ChunkCodec::kZstdMagicless) + frame)).status().code() ==
      Code::kDataLoss);
  CHECK(
      open_chunk(keys, id, seal_inner(char(ChunkCodec::kZstd) + frame.substr(4))).status().code() ==
      Code::kDataLoss);
  CHECK(open_chunk(keys, id, seal_inner(std::string(1, char(3)) + frame)).status().code() ==
        Code::kDataLoss);
}

TEST_CASE("open_chunk: tampered, swapped, truncated or foreign chunks are kDataLoss naming the id",
          "[state][unit]") {
  StateKeys keys(key_from(1));
  const std::string plain_a = "the first chunk's bytes";
  const std::string plain_b = "the second chunk's bytes";
  ChunkId a = keys.chunk_id(plain_a);
  ChunkId b = keys.chunk_id(plain_b);
  std::string sealed_a = seal_chunk(keys, a, crypto::byte_view(plain_a));
  std::string sealed_b = seal_chunk(keys, b, crypto::byte_view(plain_b));

  auto expect_loss = [&](const Status& s, const ChunkId& id) {
    CHECK(s.code() == Code::kDataLoss);
    CHECK(std::string(s.message()).find(id.hex()) != std::string::npos);
  };
  SECTION("a flipped bit anywhere") {
    for (size_t i = 0; i < sealed_a.size(); ++i) {
      std::string t = sealed_a;
      t[i] = char(t[i] ^ 1);
      INFO("byte " << i);
      expect_loss(open_chunk(keys, a, t).status(), a);
    }
  }
  SECTION("another chunk's object stored under this id") {
    expect_loss(open_chunk(keys, a, sealed_b).status(), a);
  }
  SECTION("truncated or empty") {
    expect_loss(open_chunk(keys, a, sealed_a.substr(0, sealed_a.size() - 1)).status(), a);
    expect_loss(open_chunk(keys, a, "").status(), a);
  }
  SECTION("sealed under another user's key") {
    StateKeys other(key_from(2));
    expect_loss(open_chunk(other, a, sealed_a).status(), a);
  }
}

TEST_CASE(
    "open_chunk: other bytes sealed under an id are kDataLoss; the unchecked form leaves "
    "that to check_chunk_ids()",
    "[state][unit]") {
  StateKeys keys(key_from(1));
  const std::string plain_a = "the bytes the id names";
  const std::string plain_b = "other bytes, sealed under a's id";
  const ChunkId a = keys.chunk_id(plain_a);
  const ChunkId b = keys.chunk_id(plain_b);
  // Only a holder of the user's key can do this: it authenticates.
  const std::string forged = seal_chunk(keys, a, crypto::byte_view(plain_b));
  Result<std::string> opened = open_chunk(keys, a, forged);
  REQUIRE(!opened.ok());
  CHECK(opened.status().code() == Code::kDataLoss);
  CHECK(std::string(opened.status().message()) ==
        "chunk " + a.hex() + ": content does not match its id");

  Result<std::string> unchecked = open_chunk_unchecked(keys, a, forged);
  REQUIRE(unchecked.ok());
  CHECK(*unchecked == plain_b);
  // Batches of every size the lanes take, with the forged one at each position.
  for (size_t n : {1, 2, 5, 9, 20}) {
    for (size_t bad = 0; bad < n; ++bad) {
      INFO("batch of " << n << ", forged at " << bad);
      std::vector<std::string> plains;
      std::vector<ChunkId> ids;
      for (size_t i = 0; i < n; ++i) {
        plains.push_back(std::string(100 + 700 * i, char('a' + i)));
        ids.push_back(keys.chunk_id(plains.back()));
      }
      std::vector<std::span<const uint8_t>> views;
      for (const std::string& p : plains) views.push_back(crypto::byte_view(p));
      CHECK(check_chunk_ids(keys, ids, views).ok());
      ids[bad] = b;
      Status s = check_chunk_ids(keys, ids, views);
      CHECK(s.code() == Code::kDataLoss);
      CHECK(std::string(s.message()) == "chunk " + b.hex() + ": content does not match its id");
    }
  }
}

TEST_CASE("chunk_id_of: the id of a user's chunk key, and nothing else", "[state][unit]") {
  ChunkId id;
  id.bytes.fill(0xab);
  const std::string key = chunk_key("u1", id);
  auto back = chunk_id_of("u1", key);
  REQUIRE(back.ok());
  CHECK(*back == id);
  // Another user's key, a wrong fan-out folder, no folder, a short id, a foreign object.
  CHECK(chunk_id_of("u2", key).status().code() == Code::kInvalidArgument);
  CHECK(!chunk_id_of("u1", "u1/chunks/00/" + id.hex()).ok());
  CHECK(!chunk_id_of("u1", id.hex()).ok());
  CHECK(!chunk_id_of("u1", key.substr(0, key.size() - 1)).ok());
  CHECK(!chunk_id_of("u1", "u1/chunks/ab/notes.txt").ok());
}

}  // namespace
}  // namespace cb::state
