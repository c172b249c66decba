#include "state/fs_store.h"

#include "crypto/hash.h"
#include "crypto/random.h"

#include <algorithm>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <memory>
#include <set>
#include <span>
#include <string.h>
#include <string>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace cb::state {

namespace {

// A pack being written asks the kernel to start writing each further kWritebackBytes of it.
constexpr uint64_t kWritebackBytes = 8u << 20;

// Starts writing the bytes [from, to) of |fd| to disk, without waiting for the writes (it
// may wait for room in the device's queue): a hint, whose failure the fdatasync() before
// publishing reports.
void start_writeback(int fd, uint64_t from, uint64_t to) {
  (void)::sync_file_range(fd, off64_t(from), off64_t(to - from), SYNC_FILE_RANGE_WRITE);
}

Status errno_status(std::string_view what, int err) {
  std::string msg = std::string(what) + ": " + strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:  // a file where a folder of the path should be
      return not_found(msg);
    case EACCES:
    case EPERM:
      return permission_denied(msg);
    case ENOSPC:
    case EDQUOT:
      return resource_exhausted(msg);
    default:
      return internal_error(msg);
  }
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

Status fsync_path(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return errno_status("open " + path, errno);
  if (::fsync(fd.get()) != 0) return errno_status("fsync " + path, errno);
  return ok_status();
}

Status write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("write " + path, errno);
    }
    data.remove_prefix(size_t(n));
  }
  return ok_status();
}

std::string parent_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

struct DirChild {
  std::string name;
  std::string sort_key;  // name, plus '/' for a directory: the order of the keys below it
  bool is_dir;
};

// Calls |fn| with each entry of |dir|, "." and ".." too.
// Errors: kNotFound if |dir| is missing (or a file); opendir's and readdir's others.
template <typename Fn>
Status read_dir(const std::string& dir, Fn&& fn) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return errno_status("opendir " + dir, errno);
  while (true) {
    errno = 0;
    const dirent* e = ::readdir(d.get());
    if (e == nullptr) return errno == 0 ? ok_status() : errno_status("readdir " + dir, errno);
    fn(*e);
  }
}

// The children of |dir| that can be keys or hold keys, in key order.
Result<std::vector<DirChild>> read_children(const std::string& dir) {
  std::vector<DirChild> out;
  RETURN_IF_ERROR(read_dir(dir, [&](const dirent& e) {
    std::string name = e.d_name;
    if (name.empty() || name[0] == '.') return;  // ".", "..", temporaries
    bool is_dir = false;
    if (e.d_type == DT_DIR) {
      is_dir = true;
    } else if (e.d_type == DT_UNKNOWN) {
      struct stat st;
      if (::lstat((dir + "/" + name).c_str(), &st) != 0) return;
      is_dir = S_ISDIR(st.st_mode);
    } else if (e.d_type != DT_REG) {
      return;
    }
    out.push_back({name, is_dir ? name + "/" : name, is_dir});
  }));
  std::sort(out.begin(), out.end(),
            [](const DirChild& a, const DirChild& b) { return a.sort_key < b.sort_key; });
  return out;
}

struct Walk {
  std::string_view prefix;
  std::string_view start_after;
  size_t limit;
  ListPage page;
};

// Appends the objects under |dir| (whose keys start with |key_base|) to walk.page, in key
// order; stops once the page holds limit + 1 objects (the extra one sets truncated).
Status walk(const std::string& dir, const std::string& key_base, Walk& w) {
  auto children = read_children(dir);
  if (!children.ok()) {
    if (children.status().code() == Code::kNotFound) return ok_status();  // deleted meanwhile
    return children.status();
  }
  for (const DirChild& child : *children) {
    if (w.page.objects.size() > w.limit) return ok_status();
    const std::string key = key_base + child.name;
    if (child.is_dir) {
      const std::string sub = key + "/";
      // Every key below is sub + something: skip the subtree when none can match the prefix
      // or all sort at or before start_after.
      bool can_match = sub.compare(0, std::min(sub.size(), w.prefix.size()), w.prefix, 0,
                                   std::min(sub.size(), w.prefix.size())) == 0;
      if (!can_match) continue;
      // Every key below sorts before key + "0" ('0' follows '/').
      if (!w.start_after.empty() && w.start_after >= std::string_view(key + "0")) continue;
      RETURN_IF_ERROR(walk(dir + "/" + child.name, sub, w));
    } else {
      if (key.compare(0, w.prefix.size(), w.prefix) != 0) continue;
      if (std::string_view(key) <= w.start_after) continue;
      struct stat st;
      if (::stat((dir + "/" + child.name).c_str(), &st) != 0) continue;  // deleted meanwhile
      w.page.objects.push_back({key, uint64_t(st.st_size)});
    }
  }
  return ok_status();
}

Status pwrite_all(int fd, std::string_view data, uint64_t offset, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd, data.data(), data.size(), off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("write " + path, errno);
    }
    data.remove_prefix(size_t(n));
    offset += uint64_t(n);
  }
  return ok_status();
}

Status pread_exact(int fd, std::span<char> out, uint64_t offset, const std::string& path) {
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, off_t(offset + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("read " + path, errno);
    }
    if (n == 0) return data_loss(path + ": shorter than its index says");
    got += size_t(n);
  }
  return ok_status();
}

// Appends |size| bytes of |fd| at |offset| to |out|, read straight into it; on an error |out|
// is as it was.
Status pread_append(int fd, uint64_t size, uint64_t offset, const std::string& path,
                    std::string& out) {
  const size_t start = out.size();
  out.resize(start + size_t(size));
  Status read = pread_exact(fd, std::span<char>(out).subspan(start), offset, path);
  if (!read.ok()) out.resize(start);
  return read;
}

std::string_view first_segment(std::string_view key) { return key.substr(0, key.find('/')); }

// A folder's change stamp. A change after the stamp was taken gives it another mtime unless
// it came within the same tick of the file system's coarse clock: a stamp is trusted only once
// its mtime is older than kRacyStamp at the time it was taken (as git's racy index entries).
struct DirStamp {
  bool exists = false;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  ino_t ino = 0;

  bool operator==(const DirStamp&) const = default;
};
constexpr int64_t kRacyStampNs = 100'000'000;
// A file system that stamps whole seconds (both times without nanoseconds) needs longer.
constexpr int64_t kRacyStampCoarseNs = 2'000'000'000;

bool trusted_stamp(const DirStamp& stamp, int64_t read_at_ns) {
  if (!stamp.exists) return true;
  const bool coarse = stamp.mtime_ns % 1'000'000'000 == 0 && stamp.ctime_ns % 1'000'000'000 == 0;
  return stamp.mtime_ns < read_at_ns - (coarse ? kRacyStampCoarseNs : kRacyStampNs);
}

int64_t ns_of(const timespec& t) { return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

int64_t realtime_ns() {
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  return ns_of(now);
}

Result<DirStamp> stamp_of(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return DirStamp{};
    return errno_status("stat " + dir, errno);
  }
  return DirStamp{true, ns_of(st.st_mtim), ns_of(st.st_ctim), st.st_ino};
}

// A group folder's packs by name, each with its newest index generation (0: the pack's own).
// Index files of older generations, or without a pack, go to |stale| if given.
Result<std::map<std::string, uint64_t>> read_pack_dir(const std::string& dir,
                                                      std::vector<std::string>* stale) {
  std::map<std::string, uint64_t> packs;
  std::vector<std::pair<std::string, uint64_t>> indexes;  // (pack name, generation)
  std::vector<std::string> index_files;
  Status read = read_dir(dir, [&](const dirent& e) {
    const std::string_view name = e.d_name;
    if (name.ends_with(".pack")) {
      packs.emplace(std::string(name.substr(0, name.size() - 5)), 0);
    } else if (name.ends_with(".idx")) {
      // <pack>.<generation>.idx
      const std::string_view stem = name.substr(0, name.size() - 4);
      const size_t dot = stem.rfind('.');
      if (dot == std::string_view::npos) return;
      uint64_t gen = 0;
      const std::string_view digits = stem.substr(dot + 1);
      if (digits.empty() || digits.size() > 18) return;
      bool numeric = true;
      for (char c : digits) {
        if (c < '0' || c > '9') numeric = false;
        gen = gen * 10 + uint64_t(c - '0');
      }
      if (!numeric || gen == 0) return;
      indexes.emplace_back(std::string(stem.substr(0, dot)), gen);
      index_files.emplace_back(name);
    }
  });
  if (read.code() == Code::kNotFound) return packs;  // none yet (or none possible)
  RETURN_IF_ERROR(read);
  for (const auto& [pack, gen] : indexes) {
    auto it = packs.find(pack);
    if (it != packs.end()) it->second = std::max(it->second, gen);
  }
  if (stale != nullptr) {
    for (size_t i = 0; i < indexes.size(); ++i) {
      auto it = packs.find(indexes[i].first);
      if (it == packs.end() || indexes[i].second < it->second) {
        stale->push_back(dir + "/" + index_files[i]);
      }
    }
  }
  return packs;
}

std::string index_path(const std::string& dir, const std::string& pack, uint64_t gen) {
  return dir + "/" + pack + "." + std::to_string(gen) + ".idx";
}

// The index of generation |gen| of the pack open as |fd| (|size| bytes) at |path|.
Result<PackIndex> read_pack_index(int fd, uint64_t size, const std::string& path,
                                  const std::string& dir, const std::string& pack, uint64_t gen) {
  if (gen == 0) {
    // The pack's own index, at its end: the last 64 KiB hold all of a small one.
    std::string tail(size_t(std::min<uint64_t>(size, 64u << 10)), '\0');
    RETURN_IF_ERROR(pread_exact(fd, tail, size - tail.size(), path));
    ASSIGN_OR_RETURN(size_t index_size, pack_index_size(tail, path));
    if (index_size + kPackFooterSize > tail.size()) {
      if (index_size + kPackFooterSize > size) return data_loss(path + ": index beyond the file");
      tail.resize(index_size + kPackFooterSize);
      RETURN_IF_ERROR(pread_exact(fd, tail, size - tail.size(), path));
    }
    size_t consumed = 0;
    ASSIGN_OR_RETURN(PackIndex index, decode_pack_index(tail, path, &consumed));
    if (index.data_size != size - consumed) return data_loss(path + ": data size mismatch");
    return index;
  }
  const std::string file = index_path(dir, pack, gen);
  Fd idx(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (idx.get() < 0) return errno_status("open " + file, errno);
  struct stat st;
  if (::fstat(idx.get(), &st) != 0) return errno_status("stat " + file, errno);
  if (uint64_t(st.st_size) > kMaxPackIndexSize + kPackFooterSize) {
    return data_loss(file + ": too large");
  }
  std::string bytes(size_t(st.st_size), '\0');
  RETURN_IF_ERROR(pread_exact(idx.get(), bytes, 0, file));
  size_t consumed = 0;
  ASSIGN_OR_RETURN(PackIndex index, decode_pack_index(bytes, file, &consumed));
  if (consumed != bytes.size()) return data_loss(file + ": bytes before the index");
  if (size < kPackFooterSize || index.data_size > size - kPackFooterSize) {
    return data_loss(file + ": data beyond the pack");
  }
  return index;
}

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  crypto::system_random().fill({reinterpret_cast<uint8_t*>(raw.data()), raw.size()});
  return crypto::hex_encode(raw);
}

}  // namespace

struct FsStore::PackFile {
  std::string name;  // 16 hex digits
  std::string path;  // <group folder>/<name>.pack
  uint64_t gen = 0;  // the current index: 0 the pack's own, else <name>.<gen>.idx
};

struct FsStore::Loc {
  std::shared_ptr<const PackFile> pack;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct FsStore::Group {
  std::string name;
  std::string dir;  // <root>/.packs/<name>
  std::mutex mu;
  // Guarded by mu:
  bool read = false;     // the folder was read at least once
  DirStamp stamp;        // of the folder at that read
  bool trusted = false;  // the stamp proves no change when equal (not racy)
  std::map<std::string, std::shared_ptr<const PackFile>> packs;  // by name
  // Usually one location per key; two packs may hold a key (two saves of a user storing one
  // chunk at once, or a crash in a compaction), and a delete takes it out of both.
  std::multimap<std::string, Loc, std::less<>> keys;
};

struct FsStore::OpenPack {
  std::string group;
  std::string temp;
  int fd = -1;
  uint64_t end = 0;          // bytes reserved so far
  uint64_t index_bytes = 0;  // an upper bound of the index's size before zstd
  int writers = 0;           // pwrites under way
  uint64_t flushing = 0;     // writeback started for the bytes before this offset
  Status error;              // the first failed write
  std::vector<PackEntry> entries;
};

Result<std::unique_ptr<FsStore>> FsStore::open(const std::filesystem::path& root, Options options) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return internal_error("store " + root.string() + ": " + ec.message());
  if (!std::filesystem::is_directory(root, ec)) {
    return internal_error("store " + root.string() + ": not a directory");
  }
  return std::unique_ptr<FsStore>(new FsStore(root, options));
}

FsStore::FsStore(std::filesystem::path root, Options options)
    : root_(std::move(root)), options_(options), packs_dir_((root_ / ".packs").string()) {
  static std::atomic<uint64_t> stores{0};
  temp_dir_ =
      (root_ / (".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(stores.fetch_add(1))))
          .string();
}

FsStore::~FsStore() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  publish_cv_.notify_one();
  if (publisher_.joinable()) publisher_.join();  // after it published what is queued
  for (auto& [group, p] : open_) {
    ::close(p->fd);
    ::unlink(p->temp.c_str());
  }
  remove_temp_dir();
}

std::string FsStore::temp_bucket(uint64_t n) const {
  static constexpr char kHex[] = "0123456789abcdef";
  static_assert(kTempFanOut <= 16);
  return temp_dir_ + "/" + kHex[n % kTempFanOut];
}

void FsStore::remove_temp_dir() {
  // Each rmdir fails, harmlessly, while a temporary is left in that folder.
  for (uint64_t b = 0; b < kTempFanOut; ++b) ::rmdir(temp_bucket(b).c_str());
  ::rmdir(temp_dir_.c_str());
}

Result<int> FsStore::create_temp(std::string& temp) {
  int raw = -1;
  // The folders are created when missing: at the first put, and again after a sync()
  // removed them (a concurrent sync() may remove one between the mkdir and the open: try
  // again).
  const uint64_t first = temp_counter_.fetch_add(1);
  const std::string bucket = temp_bucket(first);
  for (int attempt = 0; raw < 0; ++attempt) {
    temp = bucket + "/" + std::to_string(attempt == 0 ? first : temp_counter_.fetch_add(1));
    raw = ::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (raw >= 0 || attempt >= 8) break;
    if (errno == ENOENT) {
      // ENOENT for the bucket: a sync() removed the folder in between; the next attempt
      // makes both again.
      for (const std::string& dir : {temp_dir_, bucket}) {
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST && errno != ENOENT) {
          return errno_status("mkdir " + dir, errno);
        }
      }
    } else if (errno != EEXIST) {
      break;
    }
  }
  if (raw < 0) return errno_status("create " + temp, errno);
  return raw;
}

Status FsStore::write_temp(std::string_view data, bool fsync_file, std::string& temp) {
  ASSIGN_OR_RETURN(int raw, create_temp(temp));
  Fd fd(raw);
  Status s = write_all(fd.get(), data, temp);
  if (s.ok() && fsync_file && ::fsync(fd.get()) != 0) s = errno_status("fsync " + temp, errno);
  if (s.ok() && ::close(fd.release()) != 0) s = errno_status("close " + temp, errno);
  if (!s.ok()) ::unlink(temp.c_str());
  return s;
}

Status FsStore::rename_into_place(const std::string& temp, const std::string& path,
                                  std::vector<std::string>& created) {
  if (::rename(temp.c_str(), path.c_str()) == 0) return ok_status();
  if (errno != ENOENT) return errno_status("rename " + path, errno);
  // The object's folder is missing (the first object under it): create the missing parents
  // one level at a time, remembering them to fsync their parents, and try once more.
  const std::string root = root_.string();
  for (size_t slash = path.find('/', root.size() + 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string at = path.substr(0, slash);
    if (::mkdir(at.c_str(), 0700) == 0) {
      created.push_back(at);
    } else if (errno != EEXIST) {
      return errno_status("mkdir " + at, errno);
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) return errno_status("rename " + path, errno);
  return ok_status();
}

Status FsStore::sync_dirs(const std::string& dir, const std::vector<std::string>& created) const {
  if (!options_.sync) return ok_status();
  RETURN_IF_ERROR(fsync_path(dir));
  for (const std::string& d : created) RETURN_IF_ERROR(fsync_path(parent_of(d)));
  return ok_status();
}

Status FsStore::put(std::string_view key, std::string_view data) {
  RETURN_IF_ERROR(validate_key(key));
  const std::string path = (root_ / key).string();
  std::string temp;
  RETURN_IF_ERROR(write_temp(data, options_.sync, temp));
  std::vector<std::string> created;
  if (Status s = rename_into_place(temp, path, created); !s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  return sync_dirs(parent_of(path), created);
}

Status FsStore::put_deferred(std::string_view key, std::string_view data) {
  RETURN_IF_ERROR(validate_key(key));
  const std::string_view group = first_segment(key);
  OpenPack* p = nullptr;
  uint64_t offset = 0;
  {
    std::lock_guard lock(mu_);
    auto it = open_.find(group);
    if (it == open_.end()) {
      auto fresh = std::make_unique<OpenPack>();
      fresh->group = std::string(group);
      ASSIGN_OR_RETURN(fresh->fd, create_temp(fresh->temp));
      it = open_.emplace(fresh->group, std::move(fresh)).first;
    }
    p = it->second.get();
    offset = p->end;
    p->end += data.size();
    p->entries.push_back(PackEntry{std::string(key), offset, data.size()});
    p->index_bytes += key.size() + 24;  // the key, its length and two varints
    ++p->writers;
  }
  // Outside the lock: the threads that put write their objects into one pack side by side.
  const Status written = pwrite_all(p->fd, data, offset, p->temp);
  if (written.ok() && options_.sync) {
    // The disk writes the pack while it fills, so that its publish's fdatasync, which holds
    // up the thread that publishes, finds little left to write.
    uint64_t from = 0, to = 0;
    {
      std::lock_guard lock(mu_);
      if (offset + data.size() >= p->flushing + kWritebackBytes) {
        from = p->flushing;
        to = p->flushing = offset + data.size();
      }
    }
    // Still one of the pack's writers: its descriptor stays open.
    if (to > from) start_writeback(p->fd, from, to);
  }
  std::unique_ptr<OpenPack> full;
  {
    std::lock_guard lock(mu_);
    --p->writers;
    if (!written.ok() && p->error.ok()) p->error = written;
    idle_cv_.notify_all();
    auto it = open_.find(group);
    if (it == open_.end() || it->second.get() != p) return written;  // taken by a sync()
    // Full: published on a thread of its own while the puts go on with a new pack (one
    // publish at a time: a second would wait for the same disk), or at once when its index
    // nears the limit (many tiny objects). A pack that failed a write goes too: its publish
    // fails and sync() reports it, and later puts go to a new pack.
    const bool full_data =
        p->end >= options_.flush_bytes || p->index_bytes >= options_.flush_index_bytes;
    const bool must = !written.ok() || p->index_bytes >= kMaxPackIndexSize / 2;
    if (!must && (!full_data || busy_ != 0)) return written;
    full = std::move(it->second);
    open_.erase(it);
    ++busy_;
  }
  publish_in_background(std::move(full));
  return written;
}

void FsStore::publish_in_background(std::unique_ptr<OpenPack> p) {
  // Published on the thread that filled it, the fdatasync held that thread up for 0.1-0.2 s,
  // a dozen times in a save (docs/benchmarks.md, "state: a save seals where it reads, and
  // publishes off the reading threads"). One thread publishes them all, in turn.
  {
    std::lock_guard lock(mu_);
    to_publish_.push_back(std::move(p));
    if (!publisher_.joinable()) {
      try {
        publisher_ = std::thread([this] { publish_queued(); });
      } catch (...) {
        p = std::move(to_publish_.back());  // no thread to be had: published here
        to_publish_.pop_back();
      }
    }
  }
  if (p == nullptr) {
    publish_cv_.notify_one();
    return;
  }
  publish_counted(std::move(p));
}

void FsStore::publish_queued() {
  std::unique_lock lock(mu_);
  for (;;) {
    publish_cv_.wait(lock, [&] { return stopping_ || !to_publish_.empty(); });
    if (to_publish_.empty()) return;  // stopping, with nothing left to publish
    std::unique_ptr<OpenPack> p = std::move(to_publish_.front());
    to_publish_.pop_front();
    lock.unlock();
    publish_counted(std::move(p));
    lock.lock();
  }
}

void FsStore::publish_counted(std::unique_ptr<OpenPack> p) {
  try {
    (void)publish(std::move(p));  // its error waits in publish_error_ for sync()
  } catch (...) {
    // Only an allocation can throw here; the pack's temporary stays for
    // remove_temporaries().
    std::lock_guard lock(mu_);
    if (publish_error_.ok()) publish_error_ = internal_error("publishing a pack: out of memory");
    failed_publishes_.fetch_add(1);
  }
  end_publish();
}

void FsStore::wait_publishes() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return busy_ == 0; });
}

Status FsStore::publish(std::unique_ptr<OpenPack> p) {
  {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return p->writers == 0; });
  }
  Fd fd(p->fd);
  Status s = p->error;
  PackIndex index{p->end, std::move(p->entries)};
  if (s.ok()) s = pwrite_all(fd.get(), encode_pack_index(index), p->end, p->temp);
  // The bytes on disk before a name points at them.
  if (s.ok() && options_.sync && ::fdatasync(fd.get()) != 0) {
    s = errno_status("fdatasync " + p->temp, errno);
  }
  if (s.ok() && ::close(fd.release()) != 0) s = errno_status("close " + p->temp, errno);
  Group& g = group(p->group);
  auto pack = std::make_shared<PackFile>();
  pack->name = random_hex(8);
  pack->path = g.dir + "/" + pack->name + ".pack";
  std::vector<std::string> created;
  if (s.ok()) s = rename_into_place(p->temp, pack->path, created);
  // The name durable before the pack counts as stored: its folder, and the folders above it
  // up to the root (another store may have made them and not synced them yet).
  if (s.ok() && options_.sync) {
    for (const std::string& dir : {g.dir, packs_dir_, root_.string()}) {
      if (s.ok()) s = fsync_path(dir);
    }
    if (!s.ok()) ::unlink(pack->path.c_str());  // never a pack of unknown durability
  }
  if (!s.ok()) {
    ::unlink(p->temp.c_str());
    std::lock_guard lock(mu_);
    if (publish_error_.ok()) publish_error_ = s;
    failed_publishes_.fetch_add(1);
    return s;
  }
  std::lock_guard lock(g.mu);
  // A refresh on another thread may have read the pack already: its entries are in then.
  auto [known, inserted] = g.packs.try_emplace(pack->name, pack);
  if (inserted) {
    for (const PackEntry& e : index.entries) {
      g.keys.emplace(e.key, Loc{known->second, e.offset, e.size});
    }
  }
  return ok_status();
}

void FsStore::end_publish() {
  std::lock_guard lock(mu_);
  --busy_;
  idle_cv_.notify_all();
}

Status FsStore::sync() {
  std::vector<std::unique_ptr<OpenPack>> batch;
  {
    // After any publish under way (it may hold puts deferred before this call), and alone.
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return busy_ == 0; });
    if (open_.empty() && publish_error_.ok()) return ok_status();
    for (auto& [group, p] : open_) batch.push_back(std::move(p));
    open_.clear();
    ++busy_;
  }
  // Each publish is durable when it returns (pack, then its folders).
  Status s = ok_status();
  for (auto& p : batch) {
    Status published = publish(std::move(p));
    if (s.ok()) s = published;
  }
  {
    // A failed publish since the last sync(), also one run by a put: the other puts of that
    // pack returned ok and are lost.
    std::lock_guard lock(mu_);
    if (s.ok()) s = publish_error_;
    publish_error_ = ok_status();
  }
  // The temporaries' folder: removed when empty (it is not, harmlessly, while another put is
  // writing).
  if (s.ok()) remove_temp_dir();
  end_publish();
  return s;
}

int FsStore::put_concurrency() const { return 1; }

FsStore::Group& FsStore::group(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    auto g = std::make_unique<Group>();
    g->name = std::string(name);
    g->dir = packs_dir_ + "/" + g->name;
    it = groups_.emplace(g->name, std::move(g)).first;
  }
  return *it->second;
}

Status FsStore::refresh(Group& g, bool force) {
  for (int attempt = 0;; ++attempt) {
    const int64_t now = realtime_ns();
    ASSIGN_OR_RETURN(DirStamp stamp, stamp_of(g.dir));
    if (!force && g.read && g.trusted && stamp == g.stamp) return ok_status();
    ASSIGN_OR_RETURN(auto names, read_pack_dir(g.dir, nullptr));
    std::map<std::string, std::shared_ptr<const PackFile>> packs;
    std::vector<std::pair<std::shared_ptr<const PackFile>, PackIndex>> loaded;
    bool changed = names.size() != g.packs.size();
    bool vanished = false;
    for (const auto& [name, gen] : names) {
      auto old = g.packs.find(name);
      if (old != g.packs.end() && old->second->gen == gen) {
        packs.emplace(name, old->second);
        continue;
      }
      changed = true;
      auto pack = std::make_shared<PackFile>(PackFile{name, g.dir + "/" + name + ".pack", gen});
      Fd fd(::open(pack->path.c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st;
      if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
        if (errno == ENOENT) {
          vanished = true;  // deleted or compacted since the readdir
          continue;
        }
        return errno_status("open " + pack->path, errno);
      }
      auto index = read_pack_index(fd.get(), uint64_t(st.st_size), pack->path, g.dir, name, gen);
      if (!index.ok()) {
        if (index.status().code() == Code::kNotFound) {
          vanished = true;  // a newer index replaced this one since the readdir
          continue;
        }
        if (index.status().code() != Code::kDataLoss) return index.status();
        continue;  // left out: its objects read as missing
      }
      packs.emplace(name, pack);
      loaded.emplace_back(std::move(pack), std::move(*index));
    }
    if (!vanished) {
      // A readdir is not atomic: a delete that renamed a next index in behind it and removed
      // an older one ahead of it changes the stamp. Read again then.
      ASSIGN_OR_RETURN(DirStamp after, stamp_of(g.dir));
      vanished = !(after == stamp);
    }
    // Still changing after a few reads: what was read, and read again at the next call.
    if (vanished && attempt < 4) continue;
    if (changed) {
      // Rebuilt from the packs kept and the ones read now.
      std::multimap<std::string, Loc, std::less<>> keys;
      for (auto& [key, loc] : g.keys) {
        auto it = packs.find(loc.pack->name);
        if (it != packs.end() && it->second == loc.pack) keys.emplace_hint(keys.end(), key, loc);
      }
      for (auto& [pack, index] : loaded) {
        for (PackEntry& e : index.entries) {
          keys.emplace(std::move(e.key), Loc{pack, e.offset, e.size});
        }
      }
      g.keys = std::move(keys);
      // A pack gone from the folder (deleted or compacted by another store) closes here.
      for (const auto& [name, old] : g.packs) {
        if (!packs.contains(name)) forget_kept_pack(old->path);
      }
      g.packs = std::move(packs);
    }
    g.read = true;
    g.stamp = stamp;
    g.trusted = !vanished && trusted_stamp(stamp, now);
    return ok_status();
  }
}

Result<std::optional<FsStore::Loc>> FsStore::find_packed(std::string_view key, bool force_on_miss) {
  Group& g = group(first_segment(key));
  std::lock_guard lock(g.mu);
  RETURN_IF_ERROR(refresh(g, false));
  auto it = g.keys.find(key);
  if (it == g.keys.end() && force_on_miss) {
    RETURN_IF_ERROR(refresh(g, true));
    it = g.keys.find(key);
  }
  if (it == g.keys.end()) return std::optional<Loc>();
  return std::optional<Loc>(it->second);
}

// A pack's data never changes once published (a delete writes a next index, or removes or
// compacts the pack into another), so a descriptor reads the same bytes for as long as it is
// open, under the PackFile it was opened for.
struct FsStore::KeptPack {
  std::shared_ptr<const PackFile> pack;
  Fd fd;
};

Result<std::shared_ptr<const FsStore::KeptPack>> FsStore::kept_pack(
    const std::shared_ptr<const PackFile>& pack) {
  // The first kept for |pack|, moved to the front; null if none.
  auto take_kept = [&]() -> std::shared_ptr<const KeptPack> {
    for (auto it = kept_packs_.begin(); it != kept_packs_.end(); ++it) {
      if ((*it)->pack != pack) continue;
      std::shared_ptr<const KeptPack> found = *it;
      kept_packs_.erase(it);
      kept_packs_.push_front(found);
      return found;
    }
    return nullptr;
  };
  {
    std::lock_guard lock(kept_mu_);
    if (auto found = take_kept()) return found;
  }
  const int fd = ::open(pack->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open " + pack->path, errno);
  std::shared_ptr<const KeptPack> opened(new KeptPack{pack, Fd(fd)});
  std::shared_ptr<const KeptPack> evicted;  // closed after the lock: the last close of a
                                            // deleted pack frees its blocks
  std::lock_guard lock(kept_mu_);
  if (auto found = take_kept()) return found;  // another thread opened it meanwhile
  kept_packs_.push_front(opened);
  if (kept_packs_.size() > kKeptPacks) {
    evicted = std::move(kept_packs_.back());
    kept_packs_.pop_back();
  }
  return opened;
}

void FsStore::forget_kept_pack(std::string_view path) {
  std::vector<std::shared_ptr<const KeptPack>> forgotten;  // closed after the lock
  std::lock_guard lock(kept_mu_);
  for (auto it = kept_packs_.begin(); it != kept_packs_.end();) {
    if ((*it)->pack->path == path) {
      forgotten.push_back(std::move(*it));
      it = kept_packs_.erase(it);
    } else {
      ++it;
    }
  }
}

Status FsStore::read_packed(const Loc& loc, std::string& out) {
  ASSIGN_OR_RETURN(std::shared_ptr<const KeptPack> kept, kept_pack(loc.pack));
  return pread_append(kept->fd.get(), loc.size, loc.offset, loc.pack->path, out);
}

Result<std::string> FsStore::get(std::string_view key) {
  std::string out;
  RETURN_IF_ERROR(get_append(key, out));
  return out;
}

// A file of the key, else its packed copy: a put() replaces what is there, packed or not.
Status FsStore::get_append(std::string_view key, std::string& out) {
  RETURN_IF_ERROR(validate_key(key));
  const std::string path = (root_ / key).string();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (fd.get() >= 0 && ::fstat(fd.get(), &st) != 0) return errno_status("stat " + path, errno);
  if (fd.get() >= 0 && S_ISREG(st.st_mode)) {
    // Objects are written to a temporary and renamed into place, never changed in place, so
    // the open file keeps the size fstat() saw: read exactly that, without a read() for EOF.
    Status read = pread_append(fd.get(), uint64_t(st.st_size), 0, path, out);
    if (read.code() == Code::kDataLoss) return data_loss(path + ": shorter than its size");
    return read;
  }
  if (fd.get() < 0 && errno != ENOENT && errno != ENOTDIR) {
    return errno_status("open " + std::string(key), errno);
  }
  // Not a file (none, or a folder of other keys): packed, if anywhere. A miss looks at the packs'
  // folder once more, for a pack published or compacted by another store since.
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSIGN_OR_RETURN(std::optional<Loc> loc, find_packed(key, attempt > 0));
    if (!loc.has_value()) {
      if (attempt > 0) break;
      continue;
    }
    Status read = read_packed(*loc, out);
    if (read.ok() || read.code() != Code::kNotFound) return read;
    // The pack went since its index was read: look again.
  }
  return not_found(std::string(key) + ": no such object");
}

Result<uint64_t> FsStore::stat(std::string_view key) {
  RETURN_IF_ERROR(validate_key(key));
  struct stat st;
  if (::stat((root_ / key).c_str(), &st) == 0) {
    if (S_ISREG(st.st_mode)) return uint64_t(st.st_size);
  } else if (errno != ENOENT && errno != ENOTDIR) {
    return errno_status(std::string(key), errno);
  }
  ASSIGN_OR_RETURN(std::optional<Loc> loc, find_packed(key, false));
  if (loc.has_value()) return loc->size;
  return not_found(std::string(key) + ": no such object");
}

Result<ListPage> FsStore::list(std::string_view prefix, std::string_view start_after,
                               size_t limit) {
  if (limit == 0 || limit > kDefaultListLimit) {
    return invalid_argument("list: limit must be 1.." + std::to_string(kDefaultListLimit));
  }
  Walk w{prefix, start_after, limit, {}};
  RETURN_IF_ERROR(walk(root_.string(), "", w));
  // The packed objects of every group that can hold a key with |prefix|; with a file of the
  // same key, the file (as get() reads it).
  std::vector<ObjectInfo> packed;
  auto groups = read_children(packs_dir_);
  if (!groups.ok() && groups.status().code() != Code::kNotFound) return groups.status();
  for (const DirChild& child : groups.ok() ? *groups : std::vector<DirChild>()) {
    if (!child.is_dir) continue;
    if (!prefix.starts_with(child.name + "/") &&
        !std::string_view(child.name).starts_with(prefix)) {
      continue;
    }
    Group& g = group(child.name);
    std::lock_guard lock(g.mu);
    RETURN_IF_ERROR(refresh(g, false));
    const std::string_view from = std::max(prefix, start_after);
    size_t taken = 0;
    for (auto it = g.keys.lower_bound(from); it != g.keys.end() && taken <= limit; ++it) {
      if (!std::string_view(it->first).starts_with(prefix)) {
        if (it->first > prefix) break;
        continue;
      }
      if (std::string_view(it->first) <= start_after) continue;
      if (taken > 0 && packed.back().key == it->first) continue;  // in two packs
      packed.push_back({it->first, it->second.size});
      ++taken;
    }
  }
  if (!packed.empty()) {
    packed.insert(packed.begin(), std::make_move_iterator(w.page.objects.begin()),
                  std::make_move_iterator(w.page.objects.end()));
    std::stable_sort(packed.begin(), packed.end(),
                     [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    packed.erase(
        std::unique(packed.begin(), packed.end(),
                    [](const ObjectInfo& a, const ObjectInfo& b) { return a.key == b.key; }),
        packed.end());
    w.page.objects = std::move(packed);
  }
  if (w.page.objects.size() > limit) {
    w.page.objects.resize(limit);
    w.page.truncated = true;
  }
  return std::move(w.page);
}

Status FsStore::delete_batch(std::span<const std::string> keys) {
  if (keys.size() > kMaxDeleteBatch) {
    return invalid_argument("delete: at most " + std::to_string(kMaxDeleteBatch) + " keys");
  }
  for (const auto& key : keys) RETURN_IF_ERROR(validate_key(key));
  std::map<std::string, std::vector<std::string>, std::less<>> by_group;
  for (const auto& key : keys) {
    if (::unlink((root_ / key).c_str()) != 0 && errno != ENOENT) {
      return errno_status("unlink " + key, errno);
    }
    by_group[std::string(first_segment(key))].push_back(key);
  }
  for (auto& [name, group_keys] : by_group) {
    if (::access((packs_dir_ + "/" + name).c_str(), F_OK) != 0) continue;  // nothing packed
    RETURN_IF_ERROR(delete_packed(group(name), std::move(group_keys)));
  }
  return ok_status();
}

Status FsStore::delete_packed(Group& g, std::vector<std::string> keys) {
  // Until no pack holds any of the keys: a crash in a compaction can leave a key in two
  // packs, and another deleter can move one meanwhile.
  for (int round = 0;; ++round) {
    std::map<std::string, std::pair<std::shared_ptr<const PackFile>, std::vector<std::string>>>
        by_pack;
    {
      std::lock_guard lock(g.mu);
      RETURN_IF_ERROR(refresh(g, round > 0));
      for (const std::string& key : keys) {
        auto [from, to] = g.keys.equal_range(key);
        for (auto it = from; it != to; ++it) {
          auto& slot = by_pack[it->second.pack->name];
          slot.first = it->second.pack;
          slot.second.push_back(key);
        }
      }
    }
    if (by_pack.empty()) break;
    if (round == 8) return unavailable(g.dir + ": packs keep changing");
    for (auto& [name, slot] : by_pack) {
      RETURN_IF_ERROR(delete_from_pack(g, *slot.first, slot.second));
    }
  }
  std::lock_guard lock(g.mu);
  g.trusted = false;  // read the folder again at the next call
  return ok_status();
}

Status FsStore::delete_from_pack(Group& g, const PackFile& pack,
                                 const std::vector<std::string>& keys) {
  Fd fd(::open(pack.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return ok_status();  // gone since: the caller looks again
    return errno_status("open " + pack.path, errno);
  }
  // One deleter of a pack at a time, in any process: the lock goes with the descriptor.
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return errno_status("flock " + pack.path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status("stat " + pack.path, errno);
  if (st.st_nlink == 0) return ok_status();  // compacted or emptied by another deleter meanwhile
  // The current index, read under the lock.
  ASSIGN_OR_RETURN(auto names, read_pack_dir(g.dir, nullptr));
  auto current = names.find(pack.name);
  if (current == names.end()) return ok_status();
  const uint64_t gen = current->second;
  ASSIGN_OR_RETURN(PackIndex index, read_pack_index(fd.get(), uint64_t(st.st_size), pack.path,
                                                    g.dir, pack.name, gen));
  const std::set<std::string_view> gone(keys.begin(), keys.end());
  const size_t before = index.entries.size();
  std::erase_if(index.entries, [&](const PackEntry& e) { return gone.contains(e.key); });
  if (index.entries.size() == before) return ok_status();  // deleted by another deleter already
  const std::vector<std::string> none;
  if (index.entries.empty()) {
    // The pack first: its older indexes without it name nothing.
    if (::unlink(pack.path.c_str()) != 0) return errno_status("unlink " + pack.path, errno);
    forget_kept_pack(pack.path);
    RETURN_IF_ERROR(sync_dirs(g.dir, none));
    for (uint64_t old = 1; old <= gen; ++old) ::unlink(index_path(g.dir, pack.name, old).c_str());
    return ok_status();
  }
  // The next index, durable, before the older one goes: a crash leaves one of the two.
  std::string temp;
  RETURN_IF_ERROR(write_temp(encode_pack_index(index), options_.sync, temp));
  std::vector<std::string> created;
  if (Status s = rename_into_place(temp, index_path(g.dir, pack.name, gen + 1), created); !s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  RETURN_IF_ERROR(sync_dirs(g.dir, created));
  // The one before stays until the next delete: a reader whose readdir missed the new one
  // (renamed in behind its cursor) still finds the one before, never the pack's first.
  if (gen > 1) ::unlink(index_path(g.dir, pack.name, gen - 1).c_str());
  // Mostly dead: the live objects move to a new pack.
  if (index.live_bytes() * 2 < index.data_size) {
    RETURN_IF_ERROR(compact(g, fd.get(), pack, index));
    if (::unlink(pack.path.c_str()) != 0) return errno_status("unlink " + pack.path, errno);
    forget_kept_pack(pack.path);
    RETURN_IF_ERROR(sync_dirs(g.dir, none));
    for (uint64_t old = gen; old <= gen + 1; ++old) {
      if (old > 0) ::unlink(index_path(g.dir, pack.name, old).c_str());
    }
  }
  return ok_status();
}

Status FsStore::compact(Group& g, int fd, const PackFile& pack, const PackIndex& index) {
  std::string temp;
  ASSIGN_OR_RETURN(int raw, create_temp(temp));
  Fd out(raw);
  PackIndex moved{0, {}};
  std::string buf;
  Status s = ok_status();
  for (const PackEntry& e : index.entries) {
    buf.resize(size_t(e.size));
    s = pread_exact(fd, buf, e.offset, pack.path);
    if (s.ok()) s = pwrite_all(out.get(), buf, moved.data_size, temp);
    if (!s.ok()) break;
    moved.entries.push_back(PackEntry{e.key, moved.data_size, e.size});
    moved.data_size += e.size;
  }
  if (s.ok()) s = pwrite_all(out.get(), encode_pack_index(moved), moved.data_size, temp);
  if (s.ok() && options_.sync && ::fdatasync(out.get()) != 0) {
    s = errno_status("fdatasync " + temp, errno);
  }
  if (s.ok() && ::close(out.release()) != 0) s = errno_status("close " + temp, errno);
  std::vector<std::string> created;
  if (s.ok()) s = rename_into_place(temp, g.dir + "/" + random_hex(8) + ".pack", created);
  if (!s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  // Until the old pack goes, both name the live objects: either copy reads the same.
  return sync_dirs(g.dir, created);
}

Result<size_t> FsStore::remove_temporaries() {
  // Temporaries' folders at the root (.tmp-<pid>-<n>/<bucket>/), and loose .tmp-* files
  // anywhere, which is where stores before those folders wrote their temporaries.
  std::vector<std::filesystem::path> files, dirs;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() == 0 && it->path().filename() == ".packs") {
      it.disable_recursion_pending();
      continue;
    }
    if (it->path().filename().string().rfind(".tmp-", 0) != 0) continue;
    if (it->is_directory(ec) && it.depth() == 0) {
      it.disable_recursion_pending();
      dirs.push_back(it->path());
      for (auto below = std::filesystem::recursive_directory_iterator(it->path(), ec);
           !ec && below != std::filesystem::recursive_directory_iterator(); below.increment(ec)) {
        (below->is_directory(ec) ? dirs : files).push_back(below->path());
      }
    } else if (it->is_regular_file(ec)) {
      files.push_back(it->path());
    }
  }
  if (ec) return internal_error("remove temporaries: " + ec.message());
  // Pack indexes a newer one replaced, or whose pack is gone, that a crash left behind.
  auto groups = read_children(packs_dir_);
  if (groups.ok()) {
    for (const DirChild& child : *groups) {
      if (!child.is_dir) continue;
      std::vector<std::string> stale;
      ASSIGN_OR_RETURN(auto names, read_pack_dir(packs_dir_ + "/" + child.name, &stale));
      (void)names;
      files.insert(files.end(), stale.begin(), stale.end());
    }
  } else if (groups.status().code() != Code::kNotFound) {
    return groups.status();
  }
  size_t removed = 0;
  for (const auto& f : files) {
    std::error_code rm;
    if (std::filesystem::remove(f, rm)) ++removed;
  }
  // Deepest first: a bucket before its folder.
  std::sort(dirs.begin(), dirs.end(),
            [](const auto& a, const auto& b) { return a.native().size() > b.native().size(); });
  for (const auto& d : dirs) ::rmdir(d.c_str());
  return removed;
}

}  // namespace cb::state
