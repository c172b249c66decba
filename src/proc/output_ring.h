#pragma once
// An OutputRing keeps the newest |capacity| bytes of a stream (a process's output) and
// numbers every byte ever written with an absolute offset, so a reader that went away can
// ask for "everything after offset N" and learn how much it missed if the ring has moved
// past N.
//
//   offsets:  0 ........ start_offset() ........ end_offset()
//             [ dropped ][ held: size() bytes    ]
//
// A pure data structure: no I/O; write() never allocates.
// Thread-safety: none; owned by one executor. Copyable and movable (a value type).

#include "base/result.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cb::proc {

class OutputRing {
 public:
  // REQUIRES: |capacity| > 0.
  explicit OutputRing(std::size_t capacity);

  // Appends |bytes|. When the ring is full the oldest bytes are dropped; if |bytes| alone is
  // longer than the capacity only its last capacity() bytes are kept.
  void write(std::string_view bytes);

  std::size_t capacity() const { return buffer_.size(); }
  // Bytes currently held: min(total_written(), capacity()).
  std::size_t size() const { return size_; }
  // Bytes ever written; also the absolute offset one past the newest byte.
  uint64_t total_written() const { return total_written_; }
  // Bytes written but no longer held; also the absolute offset of the oldest held byte.
  uint64_t total_dropped() const { return total_written_ - size_; }
  uint64_t start_offset() const { return total_dropped(); }
  uint64_t end_offset() const { return total_written_; }

  struct Chunk {
    uint64_t offset = 0;  // absolute offset of data[0]; resume at offset + data.size()
    std::string data;
    uint64_t missed = 0;  // bytes between the requested offset and |offset| that were dropped
  };

  // Returns at most |max_bytes| held bytes starting at absolute |offset|. An offset older
  // than start_offset() starts at start_offset() and reports the gap in Chunk::missed; an
  // offset equal to end_offset() returns no data.
  // Errors: kOutOfRange if |offset| > end_offset() (the reader is ahead of the writer).
  Result<Chunk> read_from(uint64_t offset, std::size_t max_bytes = SIZE_MAX) const;

  // Everything held, oldest first.
  std::string contents() const;

 private:
  // Copies |n| held bytes starting |skip| bytes after the oldest one into |out|.
  void copy_out(std::size_t skip, std::size_t n, std::string& out) const;

  std::vector<char> buffer_;
  std::size_t head_ = 0;  // index in buffer_ of the oldest held byte
  std::size_t size_ = 0;
  uint64_t total_written_ = 0;
};

}  // namespace cb::proc
