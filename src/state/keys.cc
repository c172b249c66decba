#include "state/keys.h"

#include "crypto/blake2b.h"
#include "crypto/bytes.h"
#include "crypto/hash.h"

#include <algorithm>

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

}  // namespace cb::state
