#pragma once
// The keys of one user's state (product design §22.5): a 32-byte state key per user, held by
// the api sealed under its master key and handed to the agent for a save or a restore. Every
// key the state layer uses is a subkey derived from it with crypto_kdf (README.md §State key
// and subkeys), so the state key itself never touches data:
//
//   subkey 1  chunk ids        keyed BLAKE2b-256 of a chunk's plaintext
//   subkey 2  chunk sealing    XChaCha20-Poly1305 of chunk bodies
//   subkey 3  manifest sealing XChaCha20-Poly1305 of manifests
//   subkey 4  metadata sealing XChaCha20-Poly1305 of records, timelines and heads
//
// Chunk ids are keyed, so two boxes of one user compute the same id for the same bytes (and
// share the stored chunk), while anybody without the key can neither compute an id nor test
// whether the store holds a given file.
//
// Thread-safety: a StateKeys is immutable after construction; share it between threads.

#include "base/result.h"
#include "crypto/hash.h"
#include "crypto/keys.h"

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace cb::state {

inline constexpr size_t kChunkIdSize = 32;
// The crypto_kdf context, 8 bytes (README.md §State key and subkeys).
inline constexpr char kKdfContext[] = "cbstate1";

// A chunk's id: BLAKE2b-256 of its plaintext keyed with the chunk-id subkey.
struct ChunkId {
  std::array<uint8_t, kChunkIdSize> bytes{};

  // 64 lower-case hex characters: the form used in object keys and messages.
  std::string hex() const;
  // Errors: kInvalidArgument unless |hex| is 64 hex characters.
  static Result<ChunkId> from_hex(std::string_view hex);

  auto operator<=>(const ChunkId&) const = default;
  bool operator==(const ChunkId&) const = default;
};

// Keyed per process (crypto::table_hash): the ids of a manifest or a door request come from a
// box, which could choose ids that share their first bytes, and so one bucket of a hash that
// takes them as they are.
struct ChunkIdHash {
  size_t operator()(const ChunkId& id) const { return size_t(crypto::table_hash(id.bytes)); }
};

class StateKeys {
 public:
  // Derives the four subkeys of |state_key|.
  explicit StateKeys(const crypto::SymmetricKey& state_key);

  StateKeys(const StateKeys&) = delete;
  StateKeys& operator=(const StateKeys&) = delete;
  StateKeys(StateKeys&&) noexcept = default;
  StateKeys& operator=(StateKeys&&) noexcept = default;

  // The id of the chunk whose plaintext is |plaintext|.
  ChunkId chunk_id(std::span<const uint8_t> plaintext) const;
  ChunkId chunk_id(std::string_view plaintext) const;
  // out[i] = chunk_id(plaintexts[i]), several hashed at once (crypto/blake2b_many.h).
  // REQUIRES: out.size() == plaintexts.size().
  void chunk_ids(std::span<const std::span<const uint8_t>> plaintexts,
                 std::span<ChunkId> out) const;

  const crypto::SymmetricKey& chunk_seal_key() const { return chunk_seal_; }
  const crypto::SymmetricKey& manifest_seal_key() const { return manifest_seal_; }
  const crypto::SymmetricKey& metadata_seal_key() const { return metadata_seal_; }

 private:
  crypto::SymmetricKey chunk_id_;
  crypto::SymmetricKey chunk_seal_;
  crypto::SymmetricKey manifest_seal_;
  crypto::SymmetricKey metadata_seal_;
};

}  // namespace cb::state
