#pragma once
// Content-defined chunking, FastCDC style (Xia et al., "FastCDC", USENIX ATC 2016 and the
// 2020 TPDS follow-up): a gear rolling hash, cut-point skipping below min_size, and
// normalized chunking (a harder mask before avg_size, an easier one after it, level 2), so
// chunk sizes cluster around avg_size. Boundaries depend only on the bytes at most 64 before
// them, so an insert or a delete moves the boundaries next to it and leaves the rest
// (shifted) in place: that is what makes dedup across versions of a file work.
//
// The algorithm and its gear table are part of the on-store format (README.md §Chunking): a
// chunk id is the keyed hash of the chunk's bytes, so changing either changes every id and
// defeats dedup against what is already stored. Never change them; add new parameters.
//
// find_cut() is sans-I/O (house style H13); ChunkReader feeds it from a file descriptor.
//
// Thread-safety: find_cut() is a pure function. A ChunkReader is used by one thread.

#include "base/result.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace cb::state {

struct ChunkerParams {
  uint32_t min_size = 0;  // no cut before this many bytes (unless the data ends)
  uint32_t avg_size = 0;  // a power of two: the size the masks aim for
  uint32_t max_size = 0;  // a cut at this many bytes at the latest
};

// The sizes every save uses; chosen with test/bench/chunking_bench (docs/benchmarks.md
// "state: chunking"): 16 KiB / 64 KiB / 256 KiB.
inline constexpr ChunkerParams kDefaultChunkerParams{16 * 1024, 64 * 1024, 256 * 1024};

// Errors: kInvalidArgument unless 64 <= min_size < avg_size < max_size <= 64 MiB and avg_size
// is a power of two.
Status validate_chunker_params(const ChunkerParams& params);

// The length of the first chunk of |data|:
//   - data.size() if data.size() <= min_size;
//   - else the first cut point in (min_size, min(max_size, data.size())], or that bound if
//     there is none.
// |data| must hold at least max_size bytes unless it is the end of the stream; otherwise a
// chunk may end early where the data happens to end.
// REQUIRES: validate_chunker_params(params).ok().
size_t find_cut(std::span<const uint8_t> data, const ChunkerParams& params);

// The chunk lengths of a whole buffer (sum == data.size(); empty data gives no chunk).
std::vector<size_t> split_chunks(std::span<const uint8_t> data, const ChunkerParams& params);

// The gear table (README.md §Chunking): splitmix64 from a fixed seed.
const std::array<uint64_t, 256>& gear_table();

// Reads a file descriptor chunk by chunk. The chunks returned by next() or next_batch() are
// views into the reader's buffer, valid until the next call or the reader's destruction.
class ChunkReader {
 public:
  // |fd| is not owned; it is read from its current offset to EOF. The reader's own buffer
  // holds 2 * max_size bytes.
  // REQUIRES: validate_chunker_params(params).ok().
  ChunkReader(int fd, const ChunkerParams& params);
  // The same in |buffer| (not owned, not read): next_batch() returns at least
  // buffer.size() - max_size bytes of chunks per call until the file's last ones.
  // REQUIRES: also buffer.size() >= 2 * params.max_size.
  ChunkReader(int fd, const ChunkerParams& params, std::span<uint8_t> buffer);

  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // The next chunk, or an empty span at the end of the file.
  // Errors: kInternal / kPermissionDenied from read(2), naming errno.
  Result<std::span<const uint8_t>> next();

  // Replaces |chunks| with the next chunks, consecutive, as many as the buffer holds; none at
  // the end of the file. The same chunks as calls of next() would give. Errors: as next().
  Status next_batch(std::vector<std::span<const uint8_t>>& chunks);

  // Bytes handed out so far.
  uint64_t offset() const { return offset_; }

 private:
  // Moves the bytes not handed out to the front and reads until the buffer is full or the
  // file ends.
  Status fill();

  int fd_;
  ChunkerParams params_;
  std::unique_ptr<uint8_t[]> owned_;  // the buffer, unless the caller gave one
  std::span<uint8_t> buffer_;
  size_t begin_ = 0;  // first byte not yet handed out
  size_t end_ = 0;    // one past the last byte read
  bool eof_ = false;
  uint64_t offset_ = 0;
};

}  // namespace cb::state
