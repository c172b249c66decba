#include "state/chunker.h"

#include "base/check.h"

#include <bit>
#include <errno.h>
#include <string.h>
#include <string>
#include <unistd.h>

namespace cb::state {

namespace {

// splitmix64 (Steele, Lea, Flood 2014; Vigna's reference code), from the fixed seed in
// README.md §Chunking. constexpr so the table is data, not start-up work.
constexpr std::array<uint64_t, 256> make_gear_table() {
  std::array<uint64_t, 256> table{};
  uint64_t state = 0x636f636f6f6e6278ULL;  // "cocoonbx"
  for (auto& value : table) {
    state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    value = z ^ (z >> 31);
  }
  return table;
}

constexpr std::array<uint64_t, 256> kGear = make_gear_table();

// The top |bits| bits of a 64-bit word. With hash = (hash << 1) + gear[byte], bit 63-k
// depends on the last 64-k bytes, so the top bits see the widest window.
constexpr uint64_t top_bits(unsigned bits) { return bits == 0 ? 0 : ~uint64_t{0} << (64 - bits); }

}  // namespace

const std::array<uint64_t, 256>& gear_table() { return kGear; }

Status validate_chunker_params(const ChunkerParams& p) {
  if (p.min_size < 64 || p.min_size >= p.avg_size || p.avg_size >= p.max_size ||
      p.max_size > 64u * 1024 * 1024 || !std::has_single_bit(p.avg_size)) {
    return invalid_argument(
        "chunker params: want 64 <= min < avg < max <= 64 MiB, avg a power of two");
  }
  return ok_status();
}

size_t find_cut(std::span<const uint8_t> data, const ChunkerParams& params) {
  const size_t n = data.size();
  if (n <= params.min_size) return n;
  const unsigned bits = unsigned(std::countr_zero(params.avg_size));
  // Normalized chunking, level 2: two more mask bits before avg, two fewer after.
  const uint64_t mask_small = top_bits(bits + 2);
  const uint64_t mask_large = top_bits(bits - 2);
  const size_t end = n < params.max_size ? n : params.max_size;
  const size_t normal = end < params.avg_size ? end : params.avg_size;
  const uint8_t* bytes = data.data();
  uint64_t hash = 0;
  size_t i = params.min_size;
  for (; i < normal; ++i) {
    hash = (hash << 1) + kGear[bytes[i]];
    if ((hash & mask_small) == 0) return i + 1;
  }
  for (; i < end; ++i) {
    hash = (hash << 1) + kGear[bytes[i]];
    if ((hash & mask_large) == 0) return i + 1;
  }
  return end;
}

std::vector<size_t> split_chunks(std::span<const uint8_t> data, const ChunkerParams& params) {
  std::vector<size_t> lengths;
  while (!data.empty()) {
    size_t cut = find_cut(data, params);
    lengths.push_back(cut);
    data = data.subspan(cut);
  }
  return lengths;
}

ChunkReader::ChunkReader(int fd, const ChunkerParams& params)
    : fd_(fd), params_(params), owned_(new uint8_t[size_t(params.max_size) * 2]) {
  CB_CHECK(validate_chunker_params(params).ok());
  buffer_ = std::span<uint8_t>(owned_.get(), size_t(params.max_size) * 2);
}

ChunkReader::ChunkReader(int fd, const ChunkerParams& params, std::span<uint8_t> buffer)
    : fd_(fd), params_(params), buffer_(buffer) {
  CB_CHECK(validate_chunker_params(params).ok());
  CB_CHECK(buffer.size() >= size_t(params.max_size) * 2);
}

Status ChunkReader::fill() {
  if (begin_ > 0) {
    memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (!eof_ && end_ < buffer_.size()) {
    ssize_t got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      std::string msg = std::string("read: ") + strerror(err);
      return err == EACCES ? permission_denied(msg) : internal_error(msg);
    }
    if (got == 0) eof_ = true;
    end_ += size_t(got);
  }
  return ok_status();
}

Result<std::span<const uint8_t>> ChunkReader::next() {
  // Keep at least max_size bytes ahead of begin_ unless the file ended, as find_cut needs.
  if (!eof_ && end_ - begin_ < params_.max_size) RETURN_IF_ERROR(fill());
  std::span<const uint8_t> rest(buffer_.data() + begin_, end_ - begin_);
  size_t cut = find_cut(rest, params_);
  begin_ += cut;
  offset_ += cut;
  return rest.first(cut);
}

Status ChunkReader::next_batch(std::vector<std::span<const uint8_t>>& chunks) {
  chunks.clear();
  RETURN_IF_ERROR(fill());
  // Each cut needs max_size bytes after its start, or the end of the file.
  while (begin_ < end_ && (eof_ || end_ - begin_ >= params_.max_size)) {
    std::span<const uint8_t> rest(buffer_.data() + begin_, end_ - begin_);
    size_t cut = find_cut(rest, params_);
    chunks.push_back(rest.first(cut));
    begin_ += cut;
    offset_ += cut;
  }
  return ok_status();
}

}  // namespace cb::state
