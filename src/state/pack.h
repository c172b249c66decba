#pragma once
// Pack indexes: the filesystem store keeps the objects of put_deferred() (a save's chunks) in
// pack files, many objects to a file, and finds them through an index that lists each object's
// key, offset and size (README.md §Filesystem store, §Packs). A pack ends with its first index
// and a footer; a delete writes the pack's next index into a file of its own.
//
//   pack   := object-bytes... index footer
//   footer := u32le(size of index) SHA-256(index)[0:8] "CBPACK01"
//   index  := zstd frame of: varint(1) varint(data size) varint(count) entry...
//   entry  := bytes(key) varint(offset - end of the previous entry) varint(size)
//
// Entries are in offset order and never overlap; every object lies within the data size (the
// bytes before the pack's first index). Packs are the store's own files, but a pack index is
// decoded with the care of untrusted bytes (test/fuzz/pack_index_fuzz.cc): a bad one is
// kDataLoss, never a read outside the pack.

#include "base/result.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cb::state {

inline constexpr std::string_view kPackMagic = "CBPACK01";
inline constexpr size_t kPackDigestSize = 8;
inline constexpr size_t kPackFooterSize = 4 + kPackDigestSize + kPackMagic.size();
inline constexpr size_t kMaxPackIndexSize = 64u << 20;

struct PackEntry {
  std::string key;
  uint64_t offset = 0;
  uint64_t size = 0;

  bool operator==(const PackEntry&) const = default;
};

struct PackIndex {
  uint64_t data_size = 0;          // the pack's object bytes: every entry lies below this
  std::vector<PackEntry> entries;  // in offset order

  uint64_t live_bytes() const;
};

// The index's bytes (zstd frame), then the footer; a pack is its objects followed by this.
// REQUIRES: entries in offset order, not overlapping, within data_size, keys valid.
std::string encode_pack_index(const PackIndex& index);

// Decodes |tail|, which ends with a footer (the last bytes of a pack, or a whole index file).
// Sets |consumed| to the index's and footer's size, so that a pack's data size is its file
// size minus |consumed|.
// Errors: kDataLoss naming |what| for anything malformed: a bad footer or digest, zstd frame or
// entry,
//   an invalid key, entries out of order, overlapping or beyond data_size.
Result<PackIndex> decode_pack_index(std::string_view tail, std::string_view what,
                                    size_t* consumed = nullptr);

// The index size a footer at the end of |tail| names (for reading a pack's tail in two
// steps). Errors: kDataLoss if |tail| is shorter than a footer or the magic is wrong.
Result<size_t> pack_index_size(std::string_view tail, std::string_view what);

}  // namespace cb::state
