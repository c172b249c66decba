#include "proc/output_ring.h"

#include "base/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace cb::proc {

OutputRing::OutputRing(std::size_t capacity) : buffer_(capacity) { CB_CHECK(capacity > 0); }

void OutputRing::write(std::string_view bytes) {
  total_written_ += bytes.size();
  const std::size_t cap = buffer_.size();
  if (bytes.size() >= cap) {
    std::memcpy(buffer_.data(), bytes.data() + bytes.size() - cap, cap);
    head_ = 0;
    size_ = cap;
    return;
  }
  // Write at the tail, wrapping once at most (bytes.size() < cap).
  std::size_t tail = (head_ + size_) % cap;
  std::size_t first = std::min(bytes.size(), cap - tail);
  std::memcpy(buffer_.data() + tail, bytes.data(), first);
  std::memcpy(buffer_.data(), bytes.data() + first, bytes.size() - first);
  std::size_t grown = size_ + bytes.size();
  if (grown > cap) {
    head_ = (head_ + grown - cap) % cap;  // the oldest grown - cap bytes were overwritten
    size_ = cap;
  } else {
    size_ = grown;
  }
}

void OutputRing::copy_out(std::size_t skip, std::size_t n, std::string& out) const {
  const std::size_t cap = buffer_.size();
  std::size_t from = (head_ + skip) % cap;
  std::size_t first = std::min(n, cap - from);
  out.append(buffer_.data() + from, first);
  out.append(buffer_.data(), n - first);
}

Result<OutputRing::Chunk> OutputRing::read_from(uint64_t offset, std::size_t max_bytes) const {
  if (offset > end_offset()) {
    return out_of_range(fmt::format("output offset {} is past the end {}", offset, end_offset()));
  }
  Chunk chunk;
  chunk.offset = std::max(offset, start_offset());
  chunk.missed = chunk.offset - offset;
  std::size_t skip = static_cast<std::size_t>(chunk.offset - start_offset());
  std::size_t n = std::min(size_ - skip, max_bytes);
  chunk.data.reserve(n);
  copy_out(skip, n, chunk.data);
  return chunk;
}

std::string OutputRing::contents() const {
  std::string out;
  out.reserve(size_);
  copy_out(0, size_, out);
  return out;
}

}  // namespace cb::proc
