#include "state/keys.h"

#include "base/check.h"
#include "crypto/blake2b.h"
#include "crypto/blake2b_many.h"
#include "crypto/bytes.h"
#include "crypto/hash.h"

#include <algorithm>
#include <vector>

namespace cb::state {

static_assert(sizeof(kKdfContext) - 1 == crypto::kKdfContextSize);
static_assert(kChunkIdSize == crypto::kBlake2b256Size);

namespace {
enum Subkey : uint64_t {
  kChunkIdSubkey = 1,
  kChunkSealSubkey = 2,
  kManifestSealSubkey = 3,
  kMetadataSealSubkey = 4,
};
constexpr std::string_view kContext(kKdfContext, sizeof(kKdfContext) - 1);
}  // namespace

std::string ChunkId::hex() const { return crypto::hex_encode(std::span<const uint8_t>(bytes)); }

Result<ChunkId> ChunkId::from_hex(std::string_view hex) {
  if (hex.size() != 2 * kChunkIdSize) {
    return invalid_argument("chunk id: want 64 hex characters, got " + std::to_string(hex.size()));
  }
  auto raw = crypto::hex_decode(hex);
  if (!raw.ok()) return invalid_argument("chunk id: not hex");
  ChunkId id;
  std::copy(raw->begin(), raw->end(), reinterpret_cast<char*>(id.bytes.data()));
  return id;
}

StateKeys::StateKeys(const crypto::SymmetricKey& state_key)
    : chunk_id_(crypto::derive_subkey(state_key, kChunkIdSubkey, kContext)),
      chunk_seal_(crypto::derive_subkey(state_key, kChunkSealSubkey, kContext)),
      manifest_seal_(crypto::derive_subkey(state_key, kManifestSealSubkey, kContext)),
      metadata_seal_(crypto::derive_subkey(state_key, kMetadataSealSubkey, kContext)) {}

ChunkId StateKeys::chunk_id(std::span<const uint8_t> plaintext) const {
  return chunk_id(crypto::char_view(plaintext));
}

ChunkId StateKeys::chunk_id(std::string_view plaintext) const {
  return ChunkId{crypto::blake2b_256(chunk_id_.bytes(), plaintext)};
}

void StateKeys::chunk_ids(std::span<const std::span<const uint8_t>> plaintexts,
                          std::span<ChunkId> out) const {
  CB_CHECK(out.size() == plaintexts.size());
  std::vector<std::string_view> views;
  views.reserve(plaintexts.size());
  for (const auto& p : plaintexts) views.push_back(crypto::char_view(p));
  std::vector<crypto::Blake2b256Digest> digests(plaintexts.size());
  crypto::blake2b_256_many(chunk_id_.bytes(), views, digests);
  for (size_t i = 0; i < out.size(); ++i) out[i] = ChunkId{digests[i]};
}

}  // namespace cb::state
