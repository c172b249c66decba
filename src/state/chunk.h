#pragma once
// Sealed chunks (README.md §Chunk object): a chunk's plaintext is compressed with zstd when
// that makes it smaller, then sealed with XChaCha20-Poly1305 under the chunk-sealing subkey,
// with "chunk/" + the chunk id as additional data. A chunk stored under another id (swapped),
// altered, truncated or sealed under another user's key does not open; open_chunk() also
// recomputes the id of what it decrypted, so it never returns bytes other than the ones the
// id names.
//
// Thread-safety: free functions; safe from any thread.

#include "base/result.h"
#include "state/keys.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cb::state {

// The largest chunk plaintext open_chunk() accepts: the chunker's hard limit (64 MiB).
inline constexpr size_t kMaxChunkSize = 64u * 1024 * 1024;
// zstd level for chunks: 3 is zstd's default; see docs/benchmarks.md "state: chunking".
inline constexpr int kChunkZstdLevel = 3;

// Codec byte at the start of the sealed plaintext (README.md §Chunk object). Saves write
// kStored or kZstdMagicless; kZstd is what earlier saves wrote, and still opens.
enum class ChunkCodec : uint8_t { kStored = 0, kZstd = 1, kZstdMagicless = 2 };

// The sealed object for the chunk |plaintext| whose id is |id|.
// REQUIRES: id == keys.chunk_id(plaintext) and plaintext.size() <= kMaxChunkSize.
// Deterministic: the nonce is the id's first 24 bytes (README.md §Chunk object).
std::string seal_chunk(const StateKeys& keys, const ChunkId& id, std::span<const uint8_t> plaintext,
                       int zstd_level = kChunkZstdLevel);

// The plaintext of the sealed chunk |sealed| stored as |id|.
// Errors: kDataLoss "chunk <id hex>: ..." when it does not authenticate (tampered, truncated,
//   swapped with another chunk, another user's key), has an unknown codec, does not
//   decompress within kMaxChunkSize, or decrypts to bytes whose id is not |id|.
Result<std::string> open_chunk(const StateKeys& keys, const ChunkId& id, std::string_view sealed);

// open_chunk() but for its last check, that the plaintext's id is |id|: for a caller that
// checks many chunks at once with StateKeys::chunk_ids() and check_chunk_ids(), and must do
// so before it uses a byte of them (a box holding the user's key can seal any bytes under
// any id). Errors: as open_chunk(), but for the id.
Result<std::string> open_chunk_unchecked(const StateKeys& keys, const ChunkId& id,
                                         std::string_view sealed);

// The check open_chunk_unchecked() leaves out, for several chunks at once: ok if
// keys.chunk_id(plaintexts[i]) == ids[i] for every i, else kDataLoss "chunk <id hex>:
// content does not match its id" for the first that differs, whose index goes to |first_bad|
// when given.
// REQUIRES: ids.size() == plaintexts.size().
Status check_chunk_ids(const StateKeys& keys, std::span<const ChunkId> ids,
                       std::span<const std::span<const uint8_t>> plaintexts,
                       size_t* first_bad = nullptr);

// The additional data a chunk is sealed with: "chunk/" + id.hex().
std::string chunk_additional_data(const ChunkId& id);

}  // namespace cb::state
