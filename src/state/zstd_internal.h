#pragma once
// Private to src/state: zstd one-shot compression with a per-thread context (creating a
// context costs more than compressing a small chunk), and bounded decompression.

#include "base/result.h"

#include <cstddef>
#include <string>
#include <string_view>

namespace cb::state::internal {

// A frame as the zstd format defines it, or the same without its 4-byte magic number (what
// chunk objects store: the codec byte already says what follows).
enum class ZstdFrame { kStandard, kMagicless };

// A zstd frame of |data| at |level| (the frame records the content size).
std::string zstd_compress(std::string_view data, int level);

// Appends a zstd frame of |data| at |level| to |out| (the frame records the content size),
// compressing straight into |out|; returns the frame's size.
size_t zstd_compress_append(std::string_view data, int level, ZstdFrame format, std::string& out);

// The content of the single zstd frame |frame|, which must declare its content size and
// decompress to exactly that many bytes, at most |max_size|.
// Errors: kDataLoss naming |what| (not a frame, no or too large a content size, corrupt).
Result<std::string> zstd_decompress(std::string_view frame, size_t max_size, std::string_view what,
                                    ZstdFrame format = ZstdFrame::kStandard);

}  // namespace cb::state::internal
