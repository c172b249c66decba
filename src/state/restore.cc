#include "state/restore.h"

#include "base/check.h"
#include "crypto/hash.h"
#include "state/chunk.h"
#include "state/scanner.h"
#include "state/snapshot.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <errno.h>
#include <fcntl.h>
#include <filesystem>
#include <grp.h>
#include <memory>
#include <mutex>
#include <optional>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace cb::state {

namespace {

constexpr mode_t kImplicitDirMode = 0755;

Status errno_status(const std::string& what, int err) {
  std::string msg = what + ": " + strerror(err);
  switch (err) {
    case EACCES:
    case EPERM:
      return permission_denied(msg);
    case ENOSPC:
    case EDQUOT:
      return resource_exhausted(msg);
    case EEXIST:
      return already_exists(msg);
    default:
      return internal_error(msg);
  }
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

struct timespec ns_to_timespec(int64_t ns) {
  struct timespec t;
  t.tv_sec = time_t(ns / 1'000'000'000);
  t.tv_nsec = long(ns % 1'000'000'000);
  if (t.tv_nsec < 0) {
    t.tv_nsec += 1'000'000'000;
    t.tv_sec -= 1;
  }
  return t;
}

std::string_view parent_of(std::string_view rel) {
  size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
}

std::string_view name_of(std::string_view rel) {
  size_t slash = rel.rfind('/');
  return slash == std::string_view::npos ? rel : rel.substr(slash + 1);
}

// A position in manifest order: (selected entry, chunk). The error a restore reports is the
// one at the least position, so it is the same whatever order the threads reached them in.
struct Position {
  size_t entry = 0;
  size_t chunk = 0;
  bool operator<(const Position& o) const {
    return entry != o.entry ? entry < o.entry : chunk < o.chunk;
  }
};

// A created file whose chunks are being written; the task that writes its last range applies
// its owner, mode and mtime and closes it.
struct OpenFile {
  Fd fd;
  const Entry* entry = nullptr;
  std::atomic<size_t> ranges_left{0};
};

// Chunks [first, end) of a file, written at |offset| with pwritev().
struct Range {
  Position at;
  // Shared by the ranges of one file; the last one to finish closes it.
  std::shared_ptr<OpenFile> file;
  size_t first = 0;
  size_t end = 0;
  uint64_t offset = 0;
};

// What a write thread does at once: ranges of kChunksPerTask chunks in all (fewer for the
// restore's last task), of one file or of several small ones, in manifest order. Their chunks
// are fetched with one Store::get_many(), which the agent's store over the api's door sends
// as one request (chunk_batch.h): most files of a home folder have one chunk, and a task per
// file cost a box's restore a round trip per chunk.
struct WriteTask {
  std::vector<Range> ranges;
  size_t chunks = 0;

  Position at() const { return ranges.front().at; }
};

// About 1 MiB of chunks at the default chunk size: a large file is written by several threads
// at once, and a task is small enough that a store's latency overlaps across tasks.
constexpr size_t kChunksPerTask = 16;

class Restorer {
 public:
  Restorer(Store& store, const StateKeys& keys, std::string_view user,
           const RestoreOptions& options)
      : store_(store), keys_(keys), user_(user), options_(options) {
    chown_ = (options.restore_owners || options.owner) && ::geteuid() == 0;
  }

  ~Restorer() { stop_threads(); }
  Restorer(const Restorer&) = delete;
  Restorer& operator=(const Restorer&) = delete;

  // Writes |entries| (path order) under the directory |root|, whose path is |root_path|.
  //
  // This thread creates the directories and files in path order and queues the files'
  // chunks, in tasks of kChunksPerTask (WriteTask), for options_.fetch_threads threads that
  // fetch, open (decrypt, decompress, verify) and pwrite() them; the range that finishes a
  // file sets its owner, mode and mtime. So fetching, opening and writing run on every
  // thread, while files are still created one at a time in path order. Errors are kept with
  // their position in path order and the least one is returned: the first bad chunk in
  // manifest order, whichever thread met it first. Once an error is known no more entries are
  // created and tasks after it are skipped (every task before it still runs, as it might
  // hold an earlier error).
  Status write_all(int root, const std::vector<std::pair<std::string, const Entry*>>& entries) {
    root_ = root;
    if (options_.fetch_threads > 1) {
      max_queued_ = size_t(options_.fetch_threads) * 4;
      for (int i = 0; i < options_.fetch_threads; ++i) threads_.emplace_back([this] { work(); });
    }
    std::vector<std::pair<std::string, const Entry*>> dirs, links;
    for (size_t i = 0; i < entries.size() && !error_known(); ++i) {
      const auto& [rel, e] = entries[i];
      if (rel.empty()) {  // the target itself
        dirs.emplace_back(rel, e);
        continue;
      }
      Status s = create_entry(i, rel, *e, dirs, links);
      if (!s.ok()) {
        std::lock_guard lock(mu_);
        note_error(Position{i, 0}, std::move(s));
      }
    }
    if (!pending_.ranges.empty()) (void)submit(std::move(pending_));
    stop_threads();  // every queued task has run (or was skipped after an error)
    {
      std::lock_guard lock(mu_);
      if (error_.has_value()) return error_->second;
    }
    cached_dir_.reset();
    cached_rel_.clear();
    for (const auto& [rel, e] : links) {
      ASSIGN_OR_RETURN(int parent, open_parent(rel));
      const std::string name(name_of(rel));
      if (::symlinkat(e->target.c_str(), parent, name.c_str()) != 0) {
        return errno_status("symlink " + e->path, errno);
      }
      if (chown_) {
        auto [uid, gid] = owner_of(*e);
        if (::fchownat(parent, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
          return errno_status("chown " + e->path, errno);
        }
      }
      struct timespec times[2] = {ns_to_timespec(e->mtime_ns), ns_to_timespec(e->mtime_ns)};
      if (::utimensat(parent, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
        return errno_status("utimes " + e->path, errno);
      }
      ++symlinks_;
    }
    // Directories last and deepest first: their mtimes change while children are created,
    // and a read-only mode must not stop the creation of their children.
    cached_dir_.reset();
    cached_rel_.clear();
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
      const auto& [rel, e] = *it;
      Fd dir;
      if (rel.empty()) {
        dir = Fd(::dup(root_));
      } else {
        ASSIGN_OR_RETURN(int parent, open_parent(rel));
        dir = Fd(::openat(parent, std::string(name_of(rel)).c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      }
      if (dir.get() < 0) return errno_status("open " + e->path, errno);
      RETURN_IF_ERROR(apply_metadata(dir.get(), *e));
    }
    return ok_status();
  }

  // REQUIRES: write_all() returned (its threads are stopped).
  RestoreResult result() const {
    RestoreResult r;
    r.files = files_;
    r.dirs = dirs_;
    r.symlinks = symlinks_;
    r.bytes = bytes_;
    r.chunks_fetched = chunks_fetched_.load();
    return r;
  }

 private:
  // Called from the write threads too: the name caches are behind owners_mu_.
  std::pair<uid_t, gid_t> owner_of(const Entry& e) {
    if (options_.owner) return {options_.owner->first, options_.owner->second};
    std::lock_guard lock(owners_mu_);
    uid_t uid = e.uid;
    gid_t gid = e.gid;
    if (!e.user.empty()) {
      auto it = uids_.find(e.user);
      if (it == uids_.end()) {
        uid_t found = e.uid;
        struct passwd pw, *p = nullptr;
        std::vector<char> buf(16384);
        if (::getpwnam_r(e.user.c_str(), &pw, buf.data(), buf.size(), &p) == 0 && p != nullptr) {
          found = p->pw_uid;
        }
        it = uids_.emplace(e.user, found).first;
      }
      // A name unknown here falls back to the saved number.
      uid = it->second;
    }
    if (!e.group.empty()) {
      auto it = gids_.find(e.group);
      if (it == gids_.end()) {
        gid_t found = e.gid;
        struct group gr, *g = nullptr;
        std::vector<char> buf(16384);
        if (::getgrnam_r(e.group.c_str(), &gr, buf.data(), buf.size(), &g) == 0 && g != nullptr) {
          found = g->gr_gid;
        }
        it = gids_.emplace(e.group, found).first;
      }
      gid = it->second;
    }
    return {uid, gid};
  }

  // chown (if restoring owners), then chmod (chown clears set-id bits), then the mtime.
  Status apply_metadata(int fd, const Entry& e) {
    if (chown_) {
      auto [uid, gid] = owner_of(e);
      if (::fchown(fd, uid, gid) != 0) return errno_status("chown " + e.path, errno);
    }
    if (::fchmod(fd, mode_t(e.mode)) != 0) return errno_status("chmod " + e.path, errno);
    struct timespec times[2] = {ns_to_timespec(e.mtime_ns), ns_to_timespec(e.mtime_ns)};
    if (::futimens(fd, times) != 0) return errno_status("utimes " + e.path, errno);
    return ok_status();
  }

  // The directory holding |rel| (relative to the root), opened component by component with
  // O_NOFOLLOW so no symlink is ever traversed; missing components (ancestors that are not
  // entries) are created. The descriptor stays owned by the one-entry cache.
  Result<int> open_parent(std::string_view rel) {
    std::string_view dir = parent_of(rel);
    if (dir.empty()) return root_;
    if (cached_dir_.get() >= 0 && cached_rel_ == dir) return cached_dir_.get();
    Fd at(::dup(root_));
    if (at.get() < 0) return errno_status("dup", errno);
    size_t start = 0;
    while (start <= dir.size()) {
      size_t slash = dir.find('/', start);
      size_t end = slash == std::string_view::npos ? dir.size() : slash;
      const std::string part(dir.substr(start, end - start));
      int next = ::openat(at.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0 && errno == ENOENT) {
        if (::mkdirat(at.get(), part.c_str(), kImplicitDirMode) != 0 && errno != EEXIST) {
          return errno_status("mkdir " + std::string(dir.substr(0, end)), errno);
        }
        next = ::openat(at.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next >= 0 && chown_ && options_.owner &&
            ::fchown(next, options_.owner->first, options_.owner->second) != 0) {
          const int err = errno;
          ::close(next);
          return errno_status("chown " + std::string(dir.substr(0, end)), err);
        }
      }
      if (next < 0) return errno_status("open " + std::string(dir.substr(0, end)), errno);
      at = Fd(next);
      start = end + 1;
    }
    cached_dir_ = std::move(at);
    cached_rel_.assign(dir);
    return cached_dir_.get();
  }

  Status create_entry(size_t index, const std::string& rel, const Entry& e,
                      std::vector<std::pair<std::string, const Entry*>>& dirs,
                      std::vector<std::pair<std::string, const Entry*>>& links) {
    ASSIGN_OR_RETURN(int parent, open_parent(rel));
    const std::string name(name_of(rel));
    switch (e.kind) {
      case EntryKind::kDir:
        if (::mkdirat(parent, name.c_str(), 0700) != 0) {
          return errno_status("mkdir " + e.path, errno);
        }
        dirs.emplace_back(rel, &e);
        ++dirs_;
        return ok_status();
      case EntryKind::kFile:
        return create_file(index, parent, name, e);
      case EntryKind::kSymlink:
        links.emplace_back(rel, &e);
        return ok_status();
    }
    return ok_status();
  }

  // Creates the file and adds its chunks to the pending task in ranges that fill it, queuing
  // each task that is full (or running it here, without threads).
  Status create_file(size_t index, int parent, const std::string& name, const Entry& e) {
    auto file = std::make_shared<OpenFile>();
    file->fd = Fd(
        ::openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (file->fd.get() < 0) return errno_status("create " + e.path, errno);
    file->entry = &e;
    if (e.chunks.empty()) return finish_file(*file);
    // Every range is counted before the first one can run and finish the file.
    std::vector<Range> ranges;
    uint64_t offset = 0;
    for (size_t first = 0, room = kChunksPerTask - pending_.chunks; first < e.chunks.size();
         room = kChunksPerTask) {
      Range r{Position{index, first}, file, first, std::min(first + room, e.chunks.size()), offset};
      for (size_t c = r.first; c < r.end; ++c) offset += e.chunks[c].size;
      first = r.end;
      ranges.push_back(std::move(r));
    }
    file->ranges_left = ranges.size();
    for (Range& r : ranges) {
      pending_.chunks += r.end - r.first;
      pending_.ranges.push_back(std::move(r));
      if (pending_.chunks < kChunksPerTask) continue;
      WriteTask full = std::move(pending_);
      pending_ = WriteTask();
      if (!submit(std::move(full))) break;  // an error is known; write_all() stops
    }
    return ok_status();
  }

  bool error_known() {
    std::lock_guard lock(mu_);
    return error_.has_value();
  }

  // REQUIRES: mu_ held.
  void note_error(Position at, Status s) {
    if (!error_.has_value() || at < error_->first) error_.emplace(at, std::move(s));
  }

  // Queues |task| for the threads, waiting for room, or runs it here without threads.
  // Returns false once an error before |task| is known.
  bool submit(WriteTask&& task) {
    if (threads_.empty()) {
      Position failed;
      Status s = run(task, &failed);
      if (s.ok()) return true;
      std::lock_guard lock(mu_);
      note_error(failed, std::move(s));
      return false;
    }
    std::unique_lock lock(mu_);
    // A task before the known error still runs: it may hold an earlier one (the creating
    // thread's error at entry i leaves the pending ranges of entries before i).
    auto after_error = [&] { return error_.has_value() && error_->first < task.at(); };
    room_cv_.wait(lock, [&] { return queue_.size() < max_queued_ || after_error(); });
    if (after_error()) return false;
    queue_.push_back(std::move(task));
    work_cv_.notify_one();
    return true;
  }

  // A write thread: runs queued tasks until stop_threads() and an empty queue.
  void work() {
    std::unique_lock lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      WriteTask task = std::move(queue_.front());
      queue_.pop_front();
      room_cv_.notify_one();
      // A task after a known error cannot change which error is reported.
      if (error_.has_value() && error_->first < task.at()) continue;
      lock.unlock();
      Position failed;
      Status s = run(task, &failed);
      task.ranges.clear();  // the last range of a file closes it, outside the lock
      lock.lock();
      if (!s.ok()) {
        note_error(failed, std::move(s));
        room_cv_.notify_all();  // submit() stops waiting
      }
    }
  }

  void stop_threads() {
    if (threads_.empty()) return;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // Fetches the task's chunks with one get_many(), opens them all, checks every id at once
  // (side by side in SIMD lanes, 4 or 8 with AVX2 or AVX-512: most files are one chunk, so a
  // check per file would hash one at a time), then writes the ranges in order. Opening stops
  // at the first chunk that fails to open; a mismatch in an earlier range wins over it. On
  // error sets |failed| to the failing range's position; the ranges before it are written.
  Status run(const WriteTask& task, Position* failed) {
    std::vector<std::string> keys;
    keys.reserve(task.chunks);
    for (const Range& r : task.ranges)
      for (size_t c = r.first; c < r.end; ++c)
        keys.push_back(chunk_key(user_, r.file->entry->chunks[c].id));
    std::vector<Result<std::string>> sealed = store_.get_many(keys);
    CB_CHECK(sealed.size() == keys.size());
    // Opened, their ids not yet checked: the chunks of ranges [0, bad), and maybe some of
    // range |bad|, which failed with |error|.
    std::vector<std::string> plain(keys.size());
    std::vector<std::span<const uint8_t>> views;
    std::vector<ChunkId> ids;
    views.reserve(keys.size());
    ids.reserve(keys.size());
    size_t bad = task.ranges.size();
    Status error = ok_status();
    for (size_t k = 0, next = 0; k < task.ranges.size() && bad == task.ranges.size(); ++k) {
      const Range& r = task.ranges[k];
      const Entry& e = *r.file->entry;
      for (size_t c = r.first; c < r.end; ++c, ++next) {
        auto opened = open_sealed(e, e.chunks[c], std::move(sealed[next]));
        if (!opened.ok()) {
          bad = k;
          error = opened.status();
          break;
        }
        plain[next] = std::move(*opened);
        views.push_back({reinterpret_cast<const uint8_t*>(plain[next].data()), plain[next].size()});
        ids.push_back(e.chunks[c].id);
        chunks_fetched_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    size_t mismatch = SIZE_MAX;
    if (Status s = check_chunk_ids(keys_, ids, views, &mismatch); !s.ok()) {
      CB_CHECK(mismatch < ids.size());
      size_t k = 0;  // the range of chunk |mismatch|
      for (size_t before = 0; before + (task.ranges[k].end - task.ranges[k].first) <= mismatch; ++k)
        before += task.ranges[k].end - task.ranges[k].first;
      if (k < bad) {
        bad = k;
        error =
            data_loss("file " + task.ranges[k].file->entry->path + ": " + std::string(s.message()));
      }
    }
    for (size_t k = 0, next = 0; k < bad; ++k) {
      const Range& r = task.ranges[k];
      const size_t n = r.end - r.first;
      Status s = write_range(r, std::span(plain).subspan(next, n));
      next += n;
      if (!s.ok()) {
        *failed = r.at;
        return s;
      }
    }
    if (bad < task.ranges.size()) {
      *failed = task.ranges[bad].at;
      return error;
    }
    return ok_status();
  }

  // Writes the range's chunks (opened and checked) with one pwritev(): one system call and
  // no partly written page between two chunks; the file's last range finishes the file.
  Status write_range(const Range& range, std::span<const std::string> plain) {
    const Entry& e = *range.file->entry;
    std::array<struct iovec, kChunksPerTask> iov;
    CB_CHECK(plain.size() == range.end - range.first && plain.size() <= kChunksPerTask);
    size_t n = 0;
    for (const std::string& p : plain) iov[n++] = {const_cast<char*>(p.data()), p.size()};
    uint64_t offset = range.offset;
    for (struct iovec* next = iov.data(); n > 0;) {
      ssize_t written = ::pwritev(range.file->fd.get(), next, int(n), off_t(offset));
      if (written < 0) {
        if (errno == EINTR) continue;
        return errno_status("write " + e.path, errno);
      }
      if (written == 0) return internal_error("write " + e.path + ": no progress");
      offset += uint64_t(written);
      for (size_t left = size_t(written); left > 0;) {  // drop what was written
        const size_t take = std::min(left, next->iov_len);
        next->iov_base = static_cast<char*>(next->iov_base) + take;
        next->iov_len -= take;
        left -= take;
        if (next->iov_len == 0) ++next, --n;
      }
      while (n > 0 && next->iov_len == 0) ++next, --n;  // empty chunks
    }
    // A failed range returned above, so a file whose ranges all ran is complete here.
    if (range.file->ranges_left.fetch_sub(1) == 1) return finish_file(*range.file);
    return ok_status();
  }

  Result<std::string> open_sealed(const Entry& e, const ChunkRef& ref, Result<std::string> sealed) {
    const std::string what = "file " + e.path + ": chunk " + ref.id.hex();
    if (!sealed.ok()) {
      if (sealed.status().code() == Code::kNotFound) return data_loss(what + ": missing");
      return sealed.status().with_prefix(what);
    }
    auto plain = open_chunk_unchecked(keys_, ref.id, *sealed);  // run() checks the id
    if (!plain.ok())
      return data_loss("file " + e.path + ": " + std::string(plain.status().message()));
    if (plain->size() != ref.size) return data_loss(what + ": size differs from the manifest");
    return plain;
  }

  // Owner, mode and mtime of a written file; counts it and reports progress.
  Status finish_file(OpenFile& file) {
    const Entry& e = *file.entry;
    RETURN_IF_ERROR(apply_metadata(file.fd.get(), e));
    std::lock_guard lock(progress_mu_);
    ++files_;
    bytes_ += e.size;
    if (options_.progress) options_.progress(files_, bytes_);
    return ok_status();
  }

  Store& store_;
  const StateKeys& keys_;
  std::string user_;
  const RestoreOptions& options_;
  bool chown_ = false;
  int root_ = -1;
  // The calling thread's (open_parent()).
  Fd cached_dir_;
  std::string cached_rel_;
  uint64_t dirs_ = 0;      // the calling thread's
  uint64_t symlinks_ = 0;  // the calling thread's
  std::atomic<uint64_t> chunks_fetched_{0};
  std::mutex progress_mu_;
  uint64_t files_ = 0;  // guarded by progress_mu_
  uint64_t bytes_ = 0;  // guarded by progress_mu_
  std::mutex owners_mu_;
  std::unordered_map<std::string, uid_t> uids_;  // guarded by owners_mu_
  std::unordered_map<std::string, gid_t> gids_;  // guarded by owners_mu_
  // The write threads (write_all()).
  std::mutex mu_;
  std::condition_variable work_cv_;  // a task queued, or stopping
  std::condition_variable room_cv_;  // room in the queue, or an error
  std::deque<WriteTask> queue_;      // guarded by mu_
  WriteTask pending_;                // the calling thread's: ranges not yet queued
  size_t max_queued_ = 0;
  bool stopping_ = false;                             // guarded by mu_
  std::optional<std::pair<Position, Status>> error_;  // the least so far; guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace

Result<RestoreResult> restore_snapshot(Store& store, const StateKeys& keys, std::string_view user,
                                       const Manifest& manifest, const RestoreOptions& options,
                                       crypto::Random& random) {
  // A manifest from open_manifest() is valid already; one built by hand may not be, and an
  // entry below a symlink entry must never reach the file system.
  if (Status s = validate_manifest(manifest); !s.ok()) return s.with_prefix("manifest");
  for (const std::string& p : options.paths) {
    if (Status s = validate_path(p); !s.ok()) return s.with_prefix("scope");
  }
  if (!options.strip.empty()) {
    if (Status s = validate_path(options.strip); !s.ok()) return s.with_prefix("strip");
  }
  const std::filesystem::path target(options.target);
  if (!target.is_absolute() || !target.has_filename() || target.filename() == "." ||
      target.filename() == "..") {
    return invalid_argument("target: want an absolute path naming a directory to create");
  }
  const std::filesystem::path parent = target.parent_path();
  struct stat st;
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return invalid_argument("target: parent " + parent.string() + " is not a directory");
  }
  const bool target_exists = ::lstat(target.c_str(), &st) == 0;
  if (target_exists && !options.replace) {
    return already_exists("target " + target.string() + ": exists");
  }
  if (target_exists && !S_ISDIR(st.st_mode)) {
    return failed_precondition("target " + target.string() + ": not a directory");
  }

  // The selection: entries within strip and within the scope, plus their ancestors within
  // strip (so a file restored alone keeps its directories' modes and times).
  std::vector<std::pair<std::string, const Entry*>> selected;
  ASSIGN_OR_RETURN(std::vector<const Entry*> scoped, select_entries(manifest, options.paths));
  std::vector<bool> take(manifest.entries.size(), false);
  const Entry* base = manifest.entries.data();
  for (const Entry* e : scoped) {
    if (!path_within(e->path, options.strip)) continue;
    take[size_t(e - base)] = true;
    for (std::string_view up = parent_of(e->path); !up.empty(); up = parent_of(up)) {
      if (!path_within(up, options.strip)) break;
      if (const Entry* a = manifest.find(up); a != nullptr) take[size_t(a - base)] = true;
    }
  }
  for (size_t i = 0; i < take.size(); ++i) {
    if (!take[i]) continue;
    const Entry& e = manifest.entries[i];
    std::string rel = options.strip.empty() ? e.path
                      : e.path.size() == options.strip.size()
                          ? std::string()
                          : e.path.substr(options.strip.size() + 1);
    if (rel.empty() && e.kind != EntryKind::kDir) {
      return invalid_argument("strip: \"" + options.strip + "\" is not a directory");
    }
    selected.emplace_back(std::move(rel), &e);
  }
  if (selected.empty()) return not_found("restore: the scope selects nothing in the snapshot");

  std::array<uint8_t, 8> suffix;
  random.fill(suffix);
  const std::filesystem::path temp =
      parent /
      (std::string(kRestoreTempPrefix) + crypto::hex_encode(std::span<const uint8_t>(suffix)));
  if (::mkdir(temp.c_str(), 0700) != 0) return errno_status("mkdir " + temp.string(), errno);
  auto cleanup = [&](const std::filesystem::path& p) {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  };
  Fd root(::open(temp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (root.get() < 0) {
    Status s = errno_status("open " + temp.string(), errno);
    cleanup(temp);
    return s;
  }
  if (::fchmod(root.get(), kImplicitDirMode) != 0) {
    Status s = errno_status("chmod " + temp.string(), errno);
    cleanup(temp);
    return s;
  }
  if (options.owner && ::geteuid() == 0 &&
      ::fchown(root.get(), options.owner->first, options.owner->second) != 0) {
    Status s = errno_status("chown " + temp.string(), errno);
    cleanup(temp);
    return s;
  }
  Restorer restorer(store, keys, user, options);
  if (Status s = restorer.write_all(root.get(), selected); !s.ok()) {
    root.reset();
    cleanup(temp);
    return s;
  }
  root.reset();

  const unsigned flags = target_exists ? RENAME_EXCHANGE : RENAME_NOREPLACE;
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), flags) != 0) {
    Status s = errno_status("rename to " + target.string(), errno);
    cleanup(temp);
    return s;
  }
  if (target_exists) cleanup(temp);  // now the old tree
  return restorer.result();
}

}  // namespace cb::state
