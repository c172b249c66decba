#pragma once
// Unparsed: the bytes an HTTP/1.1 connection read and has not parsed yet (http1_server.cc,
// http1_client.cc), each path tested on its own in test/unit/http/http1_server_test.cc.
//
// Thread-safety: none; one connection's executor.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace cb::http {

// The window [begin_, end_) of one buffer. Parsing a piece moves begin_, not the bytes after
// it, and a read that arrives while the window is empty becomes the buffer instead of being
// copied into it. A read that arrives while the window holds bytes (a handler slower than the
// socket) is still copied in; when the tail lacks room, the window moves to the front only if
// it is no longer than the bytes consumed before it, else the buffer grows: each byte moves
// at most once more. Before, a std::string erase()d each parsed piece from its front, moving
// the rest of a 256 KiB read-ahead, and appended every read.
class Unparsed {
 public:
  bool empty() const { return begin_ == end_; }
  size_t size() const { return end_ - begin_; }
  size_t capacity() const { return cap_; }
  const char* data() const { return buf_.get() + begin_; }
  // Drops the first |n| bytes (at most size()).
  void consume(size_t n) { begin_ += std::min(n, size()); }

  // Adds the first |n| bytes of |read|, a buffer of |read_cap| bytes. Into an empty window,
  // |read| becomes the buffer and gets the old one back if it has the same size, else a new
  // one: a window grown past the read size shrinks back this way.
  void add_read(std::unique_ptr<char[]>& read, size_t read_cap, size_t n) {
    if (!empty()) return append(read.get(), n);
    std::unique_ptr<char[]> old = std::exchange(buf_, std::move(read));
    read = cap_ == read_cap ? std::move(old) : std::make_unique_for_overwrite<char[]>(read_cap);
    cap_ = read_cap;
    begin_ = 0;
    end_ = n;
  }

  // Copies |n| bytes at |p| in after the window (room as prepare() makes it).
  void append(const char* p, size_t n) {
    make_room(n);
    if (n > 0) std::memcpy(buf_.get() + end_, p, n);
    end_ += n;
  }

  // At least |n| bytes of room after the window, for a read straight into the buffer; the
  // bytes it wrote join the window with commit(). The room is never zeroed.
  std::span<char> prepare(size_t n) {
    make_room(n);
    return std::span<char>(buf_.get() + end_, cap_ - end_);
  }
  // REQUIRES: n <= the room prepare() gave, and nothing changed the window since.
  void commit(size_t n) { end_ += n; }

  // The bytes; the buffer is freed.
  std::string take() {
    std::string out(data(), size());
    release();
    return out;
  }

  // Frees the buffer and drops the bytes.
  void release() {
    buf_.reset();
    cap_ = begin_ = end_ = 0;
  }

 private:
  // Room for |n| bytes at the tail: there already, else after moving the window to the front
  // (if it then fits, and the window is no longer than the bytes before it), else in a buffer
  // twice as large (or just large enough).
  void make_room(size_t n) {
    if (cap_ - end_ < n) {
      const size_t kept = size();
      if (kept + n <= cap_ && kept <= begin_) {
        if (kept > 0) std::memmove(buf_.get(), data(), kept);
      } else {
        const size_t cap = std::max(kept + n, 2 * cap_);
        auto grown = std::make_unique_for_overwrite<char[]>(cap);
        if (kept > 0) std::memcpy(grown.get(), data(), kept);
        buf_ = std::move(grown);
        cap_ = cap;
      }
      begin_ = 0;
      end_ = kept;
    }
  }

  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace cb::http
