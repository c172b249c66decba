#include "state/chunk.h"

#include "base/check.h"
#include "crypto/bytes.h"
#include "crypto/sealed.h"
#include "state/zstd_internal.h"

#include <algorithm>
#include <vector>

namespace cb::state {

std::string chunk_additional_data(const ChunkId& id) { return "chunk/" + id.hex(); }

namespace {

// A chunk's nonce: the first 24 bytes of its id, a keyed hash of the plaintext. Only equal
// plaintexts share it, and those seal to equal objects under equal names.
std::span<const uint8_t, crypto::kSealNonceSize> chunk_nonce(const ChunkId& id) {
  static_assert(kChunkIdSize >= crypto::kSealNonceSize);
  return std::span<const uint8_t, crypto::kSealNonceSize>(id.bytes.data(), crypto::kSealNonceSize);
}

}  // namespace

std::string seal_chunk(const StateKeys& keys, const ChunkId& id, std::span<const uint8_t> plaintext,
                       int zstd_level) {
  CB_CHECK(plaintext.size() <= kMaxChunkSize);
  const std::string_view data = crypto::char_view(plaintext);
  // The codec byte, then the frame compressed straight after it, or the plaintext unless the
  // frame is smaller; in a buffer the thread keeps for chunks up to kKeptInnerSize, so that a
  // save does not allocate and zero-fill a frame's room for every chunk (over
  // scripts/bench state's tree, 1.3 GB of memset).
  constexpr size_t kKeptInnerSize = size_t(1) << 20;
  thread_local std::string kept;
  std::string one_off;
  const size_t room = 1 + internal::zstd_compress_bound(data.size());
  std::string& inner = room <= kKeptInnerSize ? kept : one_off;
  if (inner.size() < room) inner.resize(room);
  size_t size = 1 + internal::zstd_compress_to(data, zstd_level, internal::ZstdFrame::kMagicless,
                                               internal::ZstdTables::kLarge,
                                               std::span<char>(inner.data() + 1, room - 1));
  inner[0] = char(ChunkCodec::kZstdMagicless);
  if (size - 1 >= data.size()) {
    inner[0] = char(ChunkCodec::kStored);
    std::copy(data.begin(), data.end(), inner.begin() + 1);
    size = 1 + data.size();
  }
  return crypto::seal_with_nonce(keys.chunk_seal_key().bytes(), chunk_nonce(id),
                                 std::string_view(inner.data(), size), chunk_additional_data(id));
}

Result<std::string> open_chunk_unchecked(const StateKeys& keys, const ChunkId& id,
                                         std::string_view sealed) {
  const std::string what = "chunk " + id.hex();
  // Version 1 (random nonce, stored) is what earlier saves wrote: both versions open.
  const bool nonce_stored = !sealed.empty() && uint8_t(sealed[0]) == crypto::kSealVersion;
  auto inner = nonce_stored
                   ? crypto::open(keys.chunk_seal_key().bytes(), sealed, chunk_additional_data(id))
                   : crypto::open_with_nonce(keys.chunk_seal_key().bytes(), chunk_nonce(id), sealed,
                                             chunk_additional_data(id));
  if (!inner.ok()) {
    // Truncated, foreign version, tampered, swapped or another key: all mean the stored object
    // is not the chunk this id names.
    return data_loss(what + ": does not authenticate (" + std::string(inner.status().message()) +
                     ")");
  }
  if (inner->empty()) return data_loss(what + ": empty body");
  const uint8_t codec = uint8_t((*inner)[0]);
  const std::string_view body = std::string_view(*inner).substr(1);
  std::string plaintext;
  if (codec == uint8_t(ChunkCodec::kStored)) {
    plaintext.assign(body);
  } else if (codec == uint8_t(ChunkCodec::kZstd) || codec == uint8_t(ChunkCodec::kZstdMagicless)) {
    auto out = internal::zstd_decompress(body, kMaxChunkSize, what,
                                         codec == uint8_t(ChunkCodec::kZstd)
                                             ? internal::ZstdFrame::kStandard
                                             : internal::ZstdFrame::kMagicless);
    if (!out.ok()) return out.status();
    plaintext = std::move(out).value();
  } else {
    return data_loss(what + ": unknown codec " + std::to_string(codec));
  }
  return plaintext;
}

Result<std::string> open_chunk(const StateKeys& keys, const ChunkId& id, std::string_view sealed) {
  ASSIGN_OR_RETURN(std::string plaintext, open_chunk_unchecked(keys, id, sealed));
  if (keys.chunk_id(plaintext) != id) {
    return data_loss("chunk " + id.hex() + ": content does not match its id");
  }
  return plaintext;
}

Status check_chunk_ids(const StateKeys& keys, std::span<const ChunkId> ids,
                       std::span<const std::span<const uint8_t>> plaintexts, size_t* first_bad) {
  CB_CHECK(ids.size() == plaintexts.size());
  std::vector<ChunkId> actual(ids.size());
  keys.chunk_ids(plaintexts, actual);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (actual[i] != ids[i]) {
      if (first_bad != nullptr) *first_bad = i;
      return data_loss("chunk " + ids[i].hex() + ": content does not match its id");
    }
  }
  return ok_status();
}

}  // namespace cb::state
