#include "state/scanner.h"

#include "base/check.h"
#include "state/workers_internal.h"

#include <algorithm>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <grp.h>
#include <memory>
#include <mutex>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>

namespace cb::state {

namespace {

constexpr size_t kMaxNotes = 1000;
constexpr int kReadAttempts = 3;
// A reading buffer holds this many largest chunks: a file's chunks come in batches of at least
// 7 * max_size bytes (about 28 chunks of the default 64 KiB average), which
// StateKeys::chunk_ids() hashes side by side.
constexpr size_t kBufferChunks = 8;
// Files smaller than the largest chunk are read this many to a job, each whole into one
// reading buffer (they fit: kBufferChunks of them), so that their chunks hash side by side
// too: on their own, most of them are one chunk, hashed in one lane instead of four.
constexpr size_t kGroupFiles = kBufferChunks;
// What the walk asks the kernel to read ahead of each file it queues: the whole of a small
// file, the start of a large one (the reading thread's sequential reads bring the rest).
// A first save of scripts/bench state's tree with the page cache emptied just before took
// 5.84-6.72 s without it and 5.31-5.58 s with it (three interleaved runs each, 2026-12-02),
// and the same with the tree in the cache (4.54-4.63 s against 4.54-4.66 s).
constexpr off_t kPrefetchBytes = off_t(4) << 20;
static_assert(kGroupFiles <= kBufferChunks, "a group's files, each under max_size, fit a buffer");

int64_t to_ns(const struct timespec& t) { return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

int64_t realtime_ns() {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return to_ns(t);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A regular file to read, opened by the walk: the walk's directory descriptors do not outlive
// it, the file's does.
struct FileJob {
  Fd fd;
  std::string path;
  std::string os_path;
};

// What a reading thread takes: one file, or up to kGroupFiles files smaller than the largest
// chunk.
using ReadJob = std::vector<FileJob>;

// Reads |fd| from offset 0 into |out| until |want| bytes or the end of the file: the count, or
// -1 with errno set.
ssize_t read_from_start(int fd, uint8_t* out, size_t want) {
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, out + got, want - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    got += size_t(n);
  }
  return ssize_t(got);
}

// Out of descriptors is the scan's error, not the file's: skipping the file (or, for a folder,
// its subtree) would save a snapshot without it.
Status open_error(const std::string& os_path, int err) {
  if (err == EMFILE || err == ENFILE) {
    return resource_exhausted("open " + os_path + ": " + strerror(err));
  }
  return ok_status();
}

// Whether a file read |size| bytes between the stats |before| and |after| was left alone.
bool read_whole_unchanged(const struct stat& before, const struct stat& after, uint64_t size) {
  return after.st_size == before.st_size && to_ns(after.st_mtim) == to_ns(before.st_mtim) &&
         to_ns(after.st_ctim) == to_ns(before.st_ctim) && size == uint64_t(after.st_size);
}

class Scanner {
 public:
  Scanner(const ScanOptions& options, const Manifest* previous, const StateKeys& keys,
          ChunkSink& sink)
      : options_(options), previous_(previous), keys_(keys), sink_(sink) {
    if (options_.read_threads > 1) {
      // At most 2n jobs wait, their files open, ahead of the readers: with the n being read
      // and the walk's gathering, up to 24n + 7 files open (a job holds up to kGroupFiles).
      // Woken once the queue is half empty (Workers), the walk queues several jobs before it
      // sleeps again.
      readers_ = std::make_unique<internal::Workers<ReadJob>>(
          options_.read_threads, size_t(options_.read_threads) * 2,
          [this](ReadJob& job) { return read_job(job); });
    }
  }

  Result<ScanResult> run() {
    result_.manifest.scan_started_ns = realtime_ns();
    for (const ScanRoot& root : options_.roots) {
      Fd fd(::open(root.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (fd.get() < 0) {
        int err = errno;
        std::string msg = "root " + root.dir + ": " + strerror(err);
        return err == ENOENT || err == ENOTDIR ? not_found(msg)
               : err == EACCES                 ? permission_denied(msg)
                                               : internal_error(msg);
      }
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return internal_error("fstat " + root.dir);
      if (excluded(root.name)) continue;
      add_entry(make_entry(root.name, EntryKind::kDir, st));
      RETURN_IF_ERROR(walk_dir(fd.get(), root.name, root.dir));
    }
    RETURN_IF_ERROR(submit_small_files());
    if (readers_ != nullptr) RETURN_IF_ERROR(readers_->finish());
    sort_entries(result_.manifest);
    if (Status s = validate_manifest(result_.manifest); !s.ok()) {
      return internal_error("scan produced an invalid manifest: " + std::string(s.message()));
    }
    return std::move(result_);
  }

 private:
  // What the reading threads share with the walk (the result, the name caches) is
  // guarded by mu_.
  void note(std::string line) {
    std::lock_guard lock(mu_);
    ++result_.stats.skipped;
    if (result_.notes.size() < kMaxNotes) result_.notes.push_back(std::move(line));
  }

  bool excluded(const std::string& path) const {
    for (const std::string& pattern : options_.exclude) {
      if (::fnmatch(pattern.c_str(), path.c_str(), 0) == 0) return true;
    }
    return false;
  }

  const std::string& user_name(uint32_t uid) {
    auto it = users_.find(uid);
    if (it != users_.end()) return it->second;
    std::string name;
    struct passwd pw, *found = nullptr;
    std::vector<char> buf(16384);
    if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      name = found->pw_name;
    }
    if (name.size() > kMaxNameSize) name.clear();
    return users_.emplace(uid, std::move(name)).first->second;
  }

  const std::string& group_name(uint32_t gid) {
    auto it = groups_.find(gid);
    if (it != groups_.end()) return it->second;
    std::string name;
    struct group gr, *found = nullptr;
    std::vector<char> buf(16384);
    if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      name = found->gr_name;
    }
    if (name.size() > kMaxNameSize) name.clear();
    return groups_.emplace(gid, std::move(name)).first->second;
  }

  Entry make_entry(const std::string& path, EntryKind kind, const struct stat& st) {
    Entry e;
    e.path = path;
    e.kind = kind;
    e.mode = uint32_t(st.st_mode & 07777);
    e.uid = st.st_uid;
    e.gid = st.st_gid;
    {
      std::lock_guard lock(mu_);
      e.user = user_name(st.st_uid);
      e.group = group_name(st.st_gid);
    }
    e.mtime_ns = to_ns(st.st_mtim);
    e.ctime_ns = to_ns(st.st_ctim);
    e.inode = st.st_ino;
    return e;
  }

  void add_entry(Entry e) {
    std::lock_guard lock(mu_);
    result_.manifest.entries.push_back(std::move(e));
  }

  // The names in the directory |fd|, sorted bytewise (so the walk is in path order).
  Result<std::vector<std::string>> read_names(int fd, const std::string& where) {
    int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return internal_error("dup " + where + ": " + strerror(errno));
    std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(dup), ::closedir);
    if (!d) {
      ::close(dup);
      return internal_error("fdopendir " + where + ": " + strerror(errno));
    }
    std::vector<std::string> names;
    while (true) {
      errno = 0;
      dirent* e = ::readdir(d.get());
      if (e == nullptr) {
        if (errno != 0) return internal_error("readdir " + where + ": " + strerror(errno));
        break;
      }
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      names.emplace_back(e->d_name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  Status walk_dir(int dir_fd, const std::string& dir_path, const std::string& dir_os) {
    ASSIGN_OR_RETURN(std::vector<std::string> names, read_names(dir_fd, dir_os));
    for (const std::string& name : names) {
      const std::string path = dir_path + "/" + name;
      const std::string os_path = dir_os + "/" + name;
      if (name.rfind(kRestoreTempPrefix, 0) == 0 || excluded(path)) continue;
      if (path.size() > kMaxPathSize) {
        note(os_path.substr(0, 200) + "...: path longer than 4096 bytes, skipped");
        continue;
      }
      struct stat st;
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        note(os_path + ": " + strerror(errno) + ", skipped");
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        Fd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.get() < 0) {
          const int err = errno;
          RETURN_IF_ERROR(open_error(os_path, err));
          note(os_path + ": " + strerror(err) + ", skipped");
          continue;
        }
        if (::fstat(sub.get(), &st) != 0) {
          note(os_path + ": " + strerror(errno) + ", skipped");
          continue;
        }
        add_entry(make_entry(path, EntryKind::kDir, st));
        RETURN_IF_ERROR(walk_dir(sub.get(), path, os_path));
      } else if (S_ISLNK(st.st_mode)) {
        std::string target(kMaxPathSize + 1, '\0');
        ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
        if (n <= 0 || size_t(n) > kMaxPathSize) {
          note(os_path + ": symlink unreadable or too long, skipped");
          continue;
        }
        target.resize(size_t(n));
        Entry e = make_entry(path, EntryKind::kSymlink, st);
        e.target = std::move(target);
        add_entry(std::move(e));
      } else if (S_ISREG(st.st_mode)) {
        RETURN_IF_ERROR(add_file(dir_fd, name, path, os_path, st));
      } else {
        const char* kind = S_ISSOCK(st.st_mode)   ? "socket"
                           : S_ISFIFO(st.st_mode) ? "FIFO"
                           : S_ISCHR(st.st_mode)  ? "character device"
                           : S_ISBLK(st.st_mode)  ? "block device"
                                                  : "special file";
        note(os_path + ": " + kind + ", skipped");
      }
    }
    return ok_status();
  }

  bool unchanged(const Entry* old, const struct stat& st) const {
    return old != nullptr && old->kind == EntryKind::kFile && old->size == uint64_t(st.st_size) &&
           old->mtime_ns == to_ns(st.st_mtim) && old->ctime_ns == to_ns(st.st_ctim) &&
           old->inode == uint64_t(st.st_ino) &&
           old->mtime_ns < previous_->scan_started_ns - options_.racy_window_ns;
  }

  Status add_file(int dir_fd, const std::string& name, const std::string& path,
                  const std::string& os_path, const struct stat& st) {
    const Entry* old = previous_ != nullptr ? previous_->find(path) : nullptr;
    if (unchanged(old, st)) {
      Entry e = make_entry(path, EntryKind::kFile, st);
      e.size = old->size;
      e.chunks = old->chunks;
      add_entry(std::move(e));
      std::lock_guard lock(mu_);
      ++result_.stats.files_reused;
      return ok_status();
    }
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC);
    if (fd < 0 && errno == EPERM) {
      // O_NOATIME needs ownership or CAP_FOWNER; read without it.
      fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      const int err = errno;
      RETURN_IF_ERROR(open_error(os_path, err));
      note(os_path + ": " + strerror(err) + ", skipped");
      return ok_status();
    }
    // The file waits in the queue behind the jobs being read: the disk fetches its first bytes
    // meanwhile, instead of a reading thread waiting for them (a hint; its failure changes
    // nothing). A file already in the page cache costs a lookup.
    if (st.st_size > 0)  // a length of 0 would mean the whole file
      (void)::posix_fadvise(fd, 0, std::min<off_t>(st.st_size, kPrefetchBytes),
                            POSIX_FADV_WILLNEED);
    FileJob file{Fd(fd), path, os_path};
    if (uint64_t(st.st_size) < options_.chunker.max_size) {
      small_files_.push_back(std::move(file));
      return small_files_.size() == kGroupFiles ? submit_small_files() : ok_status();
    }
    ReadJob job;
    job.push_back(std::move(file));
    return submit(job);
  }

  // Hands the small files the walk has gathered to a reading thread (or reads them).
  Status submit_small_files() {
    if (small_files_.empty()) return ok_status();
    ReadJob job = std::move(small_files_);
    small_files_.clear();
    return submit(job);
  }

  Status submit(ReadJob& job) {
    if (readers_ != nullptr) return readers_->submit(std::move(job));
    return read_job(job);
  }

  Status read_job(ReadJob& job) {
    if (job.size() == 1) return read_file(job.front());
    return read_small_files(job);
  }

  // A reading buffer of buffer_size() bytes, given back to the pool when destroyed: one per
  // job being read, reused from job to job.
  struct BufferDeleter {
    Scanner* scanner;
    void operator()(uint8_t* p) const {
      std::lock_guard lock(scanner->mu_);
      scanner->buffers_.emplace_back(p);
    }
  };
  using Buffer = std::unique_ptr<uint8_t[], BufferDeleter>;
  size_t buffer_size() const { return size_t(options_.chunker.max_size) * kBufferChunks; }
  Buffer take_buffer() {
    std::lock_guard lock(mu_);
    if (buffers_.empty()) return Buffer(new uint8_t[buffer_size()], BufferDeleter{this});
    Buffer b(buffers_.back().release(), BufferDeleter{this});
    buffers_.pop_back();
    return b;
  }

  // Reads the files of |files|, each smaller than the largest chunk, whole into one buffer;
  // chunks them as read_file() would and hashes all their chunks at once; passes the chunks
  // to the sink and adds the entries. A file that does not read exactly as its stat says,
  // or changes while read, is read again alone by read_file(), which retries and notes.
  Status read_small_files(const ReadJob& files) {
    struct Read {
      const FileJob* file;
      struct stat before;
      std::span<const uint8_t> data;
      size_t first_chunk;  // in |batch|
      size_t chunks;
    };
    std::vector<Read> reads;
    std::vector<const FileJob*> alone;
    std::vector<std::span<const uint8_t>> batch;
    {
      Buffer buffer = take_buffer();
      size_t used = 0;
      for (const FileJob& file : files) {
        Read r{&file, {}, {}, batch.size(), 0};
        if (::fstat(file.fd.get(), &r.before) != 0 || !S_ISREG(r.before.st_mode) ||
            uint64_t(r.before.st_size) >= options_.chunker.max_size) {
          alone.push_back(&file);
          continue;
        }
        // One byte more than the stat says, to see a file that grew. Each file takes less
        // than max_size + 1 bytes, and a job has at most kBufferChunks files.
        const size_t want = size_t(r.before.st_size) + 1;
        CB_CHECK(used + want <= buffer_size());
        const ssize_t n = read_from_start(file.fd.get(), buffer.get() + used, want);
        if (n != r.before.st_size) {
          alone.push_back(&file);
          continue;
        }
        r.data = std::span<const uint8_t>(buffer.get() + used, size_t(n));
        used += size_t(n);
        // The whole file is here, so its end is the stream's: the cuts ChunkReader makes.
        for (std::span<const uint8_t> rest = r.data; !rest.empty();) {
          const size_t cut = find_cut(rest, options_.chunker);
          batch.push_back(rest.first(cut));
          rest = rest.subspan(cut);
        }
        r.chunks = batch.size() - r.first_chunk;
        reads.push_back(r);
      }
      std::vector<ChunkId> ids(batch.size());
      keys_.chunk_ids(batch, ids);
      RETURN_IF_ERROR(add_chunks(batch, ids));
      for (const Read& r : reads) {
        std::vector<ChunkRef> chunks;
        for (size_t i = r.first_chunk; i < r.first_chunk + r.chunks; ++i) {
          chunks.push_back(ChunkRef{ids[i], uint32_t(batch[i].size())});
        }
        struct stat after;
        if (::fstat(r.file->fd.get(), &after) != 0) {
          return internal_error("fstat " + r.file->os_path);
        }
        if (!read_whole_unchanged(r.before, after, r.data.size())) {
          alone.push_back(r.file);
          continue;
        }
        {
          std::lock_guard lock(mu_);
          result_.stats.bytes_read += r.data.size();
        }
        add_file_entry(*r.file, after, r.data.size(), std::move(chunks), true);
      }
    }  // the buffer back before read_file() takes one
    for (const FileJob* file : alone) RETURN_IF_ERROR(read_file(*file));
    return ok_status();
  }

  // Passes |chunks|, whose ids are |ids|, to the sink (which compresses and seals the new
  // ones: most of a first save's work), shared with the reading threads that have no job
  // meanwhile. The sealing of a large file read last no longer runs on one core alone (its
  // reading, cutting and hashing still do): at the end of scripts/bench state's first save,
  // one core waited for the other about 0.24 s of 4.4 s.
  Status add_chunks(std::span<const std::span<const uint8_t>> chunks,
                    std::span<const ChunkId> ids) {
    const std::function<Status(size_t)> add = [&](size_t i) {
      return sink_.add(ids[i], chunks[i]);
    };
    if (readers_ == nullptr || chunks.size() <= 1) {
      for (size_t i = 0; i < chunks.size(); ++i) RETURN_IF_ERROR(add(i));
      return ok_status();
    }
    return readers_->share(chunks.size(), add);
  }

  // Adds the entry of a file read |size| bytes into |chunks|, with its stat |after| the read;
  // unless |unchanged|, the file changed while being read.
  void add_file_entry(const FileJob& file, const struct stat& after, uint64_t size,
                      std::vector<ChunkRef> chunks, bool unchanged) {
    Entry e = make_entry(file.path, EntryKind::kFile, after);
    e.size = size;
    e.chunks = std::move(chunks);
    if (!unchanged) e.ctime_ns = 0;  // never matches a real ctime: the next scan reads it again
    add_entry(std::move(e));
    std::lock_guard lock(mu_);
    ++result_.stats.files_read;
    if (!unchanged && result_.notes.size() < kMaxNotes) {
      // Still being written: kept as read (a later save catches up, since the stat recorded
      // is the one after the read) and said.
      result_.notes.push_back(file.os_path + ": changed while being read; saved as read");
    }
  }

  // Reads, chunks and hashes the open file of |job| (and closes it), passing its chunks to
  // the sink, and adds its entry.
  Status read_file(const FileJob& job) {
    Buffer buffer = take_buffer();
    std::vector<std::span<const uint8_t>> batch;
    std::vector<ChunkId> ids;
    const int fd = job.fd.get();
    const std::string& os_path = job.os_path;
    for (int attempt = 1;; ++attempt) {
      struct stat before;
      if (::fstat(fd, &before) != 0 || !S_ISREG(before.st_mode)) {
        note(os_path + ": changed type while saving, skipped");
        return ok_status();
      }
      if (::lseek(fd, 0, SEEK_SET) != 0) return internal_error("lseek " + os_path);
      std::vector<ChunkRef> chunks;
      uint64_t size = 0;
      ChunkReader reader(fd, options_.chunker, std::span(buffer.get(), buffer_size()));
      while (true) {
        // The chunks of a whole buffer at once, so that they hash side by side.
        if (Status read = reader.next_batch(batch); !read.ok()) {
          note(os_path + ": " + std::string(read.message()) + ", skipped");
          return ok_status();
        }
        if (batch.empty()) break;
        ids.resize(batch.size());
        keys_.chunk_ids(batch, ids);
        RETURN_IF_ERROR(add_chunks(batch, ids));
        for (size_t i = 0; i < batch.size(); ++i) {
          chunks.push_back(ChunkRef{ids[i], uint32_t(batch[i].size())});
          size += batch[i].size();
        }
      }
      {
        std::lock_guard lock(mu_);
        result_.stats.bytes_read += size;
      }
      struct stat after;
      if (::fstat(fd, &after) != 0) return internal_error("fstat " + os_path);
      const bool stable = read_whole_unchanged(before, after, size);
      if (!stable && attempt < kReadAttempts) continue;
      add_file_entry(job, after, size, std::move(chunks), stable);
      return ok_status();
    }
  }

  const ScanOptions& options_;
  const Manifest* previous_;
  const StateKeys& keys_;
  ChunkSink& sink_;
  std::mutex mu_;
  ScanResult result_;                                 // guarded by mu_
  std::unordered_map<uint32_t, std::string> users_;   // guarded by mu_
  std::unordered_map<uint32_t, std::string> groups_;  // guarded by mu_
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;   // free reading buffers; guarded by mu_
  ReadJob small_files_;  // gathered by the walk, not yet submitted; the walk's only
  // Last: its threads stop before the rest is destroyed.
  std::unique_ptr<internal::Workers<ReadJob>> readers_;
};

}  // namespace

Result<ScanResult> scan_tree(const ScanOptions& options, const Manifest* previous,
                             const StateKeys& keys, ChunkSink& sink) {
  RETURN_IF_ERROR(validate_chunker_params(options.chunker));
  for (size_t i = 0; i < options.roots.size(); ++i) {
    const ScanRoot& r = options.roots[i];
    if (Status s = validate_path(r.name); !s.ok()) return s.with_prefix("root " + r.dir);
    if (r.dir.empty()) return invalid_argument("root " + r.name + ": empty directory");
    for (size_t j = 0; j < i; ++j) {
      if (path_within(r.name, options.roots[j].name) ||
          path_within(options.roots[j].name, r.name)) {
        return invalid_argument("roots " + options.roots[j].name + " and " + r.name + " overlap");
      }
    }
  }
  return Scanner(options, previous, keys, sink).run();
}

}  // namespace cb::state
