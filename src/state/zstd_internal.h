#pragma once
// Private to src/state: zstd one-shot compression with a per-thread context (creating a
// context costs more than compressing a small chunk), and bounded decompression.

#include "base/result.h"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace cb::state::internal {

// A frame as the zstd format defines it, or the same without its 4-byte magic number (what
// chunk objects store: the codec byte already says what follows).
enum class ZstdFrame { kStandard, kMagicless };

// A zstd frame of |data| at |level| (the frame records the content size).
std::string zstd_compress(std::string_view data, int level);

// The match finder's hash and chain tables: the sizes zstd picks for |level| and the input's
// size, or at least 2^17 and 2^16 entries (what level 3 uses above 256 KiB; zstd still caps
// them at twice the input). Chunks use kLarge: over scripts/bench state's tree (24,000
// chunks, most of 16-256 KiB) it stores 0.85 MiB less at the same CPU time (three
// interleaved saves each, user 4.45-4.91 s vs 4.60-4.80 s).
enum class ZstdTables { kLevel, kLarge };

// Appends a zstd frame of |data| at |level| to |out| (the frame records the content size),
// compressing straight into |out|; returns the frame's size.
size_t zstd_compress_append(std::string_view data, int level, ZstdFrame format, ZstdTables tables,
                            std::string& out);

// The most bytes a frame of |size| bytes of data can take: at least |size|.
size_t zstd_compress_bound(size_t size);

// The same frame as zstd_compress_append() makes, written to |out|, which must hold
// zstd_compress_bound(data.size()) bytes; returns the frame's size.
size_t zstd_compress_to(std::string_view data, int level, ZstdFrame format, ZstdTables tables,
                        std::span<char> out);

// The content of the single zstd frame |frame|, which must declare its content size and
// decompress to exactly that many bytes, at most |max_size|.
// Errors: kDataLoss naming |what| (not a frame, no or too large a content size, corrupt).
Result<std::string> zstd_decompress(std::string_view frame, size_t max_size, std::string_view what,
                                    ZstdFrame format = ZstdFrame::kStandard);

}  // namespace cb::state::internal
