#include "state/fs_store.h"

#include <algorithm>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <memory>
#include <string.h>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace cb::state {

namespace {

Status errno_status(std::string_view what, int err) {
  std::string msg = std::string(what) + ": " + strerror(err);
  switch (err) {
    case ENOENT:
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

// The children of |dir| that can be keys or hold keys, in key order.
Result<std::vector<DirChild>> read_children(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return errno_status("opendir " + dir, errno);
  std::vector<DirChild> out;
  while (true) {
    errno = 0;
    dirent* e = ::readdir(d.get());
    if (e == nullptr) {
      if (errno != 0) return errno_status("readdir " + dir, errno);
      break;
    }
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;  // ".", "..", temporaries
    bool is_dir = false;
    if (e->d_type == DT_DIR) {
      is_dir = true;
    } else if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      if (::lstat((dir + "/" + name).c_str(), &st) != 0) continue;
      is_dir = S_ISDIR(st.st_mode);
    } else if (e->d_type != DT_REG) {
      continue;
    }
    out.push_back({name, is_dir ? name + "/" : name, is_dir});
  }
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

}  // namespace

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
    : root_(std::move(root)), options_(options) {
  static std::atomic<uint64_t> stores{0};
  temp_dir_ =
      (root_ / (".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(stores.fetch_add(1))))
          .string();
}

FsStore::~FsStore() {
  for (const Deferred& d : deferred_) ::unlink(d.temp.c_str());
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

Status FsStore::write_temp(std::string_view key, std::string_view data, bool fsync_file,
                           std::string& temp, std::string& path) {
  RETURN_IF_ERROR(validate_key(key));
  path = (root_ / key).string();
  int raw = -1;
  // The folders are created when missing: at the first put, and again after a sync()
  // removed them (a concurrent sync() may remove one between the mkdir and the open: try
  // again).
  const uint64_t first = temp_counter_.fetch_add(1);
  const std::string bucket = temp_bucket(first);
  for (int attempt = 0; raw < 0; ++attempt) {
    temp = bucket + "/" + std::to_string(attempt == 0 ? first : temp_counter_.fetch_add(1));
    raw = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (raw >= 0 || attempt >= 8) break;
    if (errno == ENOENT) {
      for (const std::string& dir : {temp_dir_, bucket}) {
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
          return errno_status("mkdir " + dir, errno);
        }
      }
    } else if (errno != EEXIST) {
      break;
    }
  }
  if (raw < 0) return errno_status("create " + temp, errno);
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
  // one level at a time, remembering them to fsync their parents, and try once more. A save
  // puts thousands of chunks into 256 folders, so this runs 256 times, not per chunk.
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

Status FsStore::put(std::string_view key, std::string_view data) {
  std::string temp, path;
  RETURN_IF_ERROR(write_temp(key, data, options_.sync, temp, path));
  std::vector<std::string> created;
  if (Status s = rename_into_place(temp, path, created); !s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  if (options_.sync) {
    RETURN_IF_ERROR(fsync_path(parent_of(path)));
    for (const std::string& d : created) RETURN_IF_ERROR(fsync_path(parent_of(d)));
  }
  return ok_status();
}

Status FsStore::put_deferred(std::string_view key, std::string_view data) {
  if (!options_.sync) return put(key, data);
  std::string temp, path;
  RETURN_IF_ERROR(write_temp(key, data, false, temp, path));
  std::vector<Deferred> batch;
  {
    std::lock_guard lock(mu_);
    deferred_.push_back(Deferred{std::move(temp), std::move(path)});
    deferred_bytes_ += data.size();
    // Enough waiting: this thread makes them durable and visible now, while the other put
    // threads go on, instead of leaving all of a save's writeback and renames to the end
    // (one at a time: a flush waits for the disk, and a second would wait for the same).
    if (deferred_bytes_ < options_.flush_bytes || busy_ != 0) return ok_status();
    take_deferred(batch);
  }
  Status s = publish(batch);
  end_publish();
  return s;
}

void FsStore::take_deferred(std::vector<Deferred>& batch) {
  batch.swap(deferred_);
  deferred_bytes_ = 0;
  ++busy_;
}

Status FsStore::publish(std::vector<Deferred>& batch) {
  if (batch.empty()) return ok_status();
  size_t renamed = 0;
  auto fail = [&](Status s) {
    for (size_t i = renamed; i < batch.size(); ++i) ::unlink(batch[i].temp.c_str());
    std::lock_guard lock(mu_);
    if (renamed > 0) renamed_unsynced_ = true;
    return s;
  };
  // 1. Every temporary's bytes (and the directories holding them) on disk: one syncfs
  //    instead of an fsync per object.
  if (Status synced = syncfs_root(); !synced.ok()) return fail(synced);
  // 2. Only then the names: an object's name never points at bytes not on disk. The names,
  //    and folders created for them, become durable with sync()'s last syncfs.
  std::vector<std::string> created;
  for (; renamed < batch.size(); ++renamed) {
    const Deferred& d = batch[renamed];
    if (Status s = rename_into_place(d.temp, d.path, created); !s.ok()) return fail(s);
  }
  std::lock_guard lock(mu_);
  renamed_unsynced_ = true;
  return ok_status();
}

Status FsStore::sync() {
  std::vector<Deferred> batch;
  {
    // After any flush under way (it may hold puts deferred before this call), and alone: a
    // concurrent sync() returns only once this one's renames are durable too.
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return busy_ == 0; });
    if (deferred_.empty() && !renamed_unsynced_) return ok_status();
    take_deferred(batch);
  }
  Status s = publish(batch);
  // 3. The renames, this one's and the flushes' before it.
  if (s.ok()) {
    {
      std::lock_guard lock(mu_);
      renamed_unsynced_ = false;  // set again by a flush from here on, or below on failure
    }
    s = syncfs_root();
  }
  // The temporaries' folder grew to hold every one of them at once and ext4 never shrinks a
  // folder: remove it when empty (it is not, harmlessly, while another put is writing).
  if (s.ok()) remove_temp_dir();
  if (!s.ok()) {
    std::lock_guard lock(mu_);
    renamed_unsynced_ = true;
  }
  end_publish();
  return s;
}

Status FsStore::syncfs_root() const {
  Fd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) return errno_status("open " + root_.string(), errno);
  if (::syncfs(root.get()) != 0) return errno_status("syncfs " + root_.string(), errno);
  return ok_status();
}

void FsStore::end_publish() {
  std::lock_guard lock(mu_);
  --busy_;
  idle_cv_.notify_all();
}

int FsStore::put_concurrency() const {
  const int cores = int(std::thread::hardware_concurrency());
  return std::clamp(cores + 2, 3, 8);
}

Result<std::string> FsStore::get(std::string_view key) {
  RETURN_IF_ERROR(validate_key(key));
  const std::string path = (root_ / key).string();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno_status("open " + std::string(key), errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return not_found(std::string(key) + ": not an object");
  // Objects are written to a temporary and renamed into place, never changed in place, so
  // the open file keeps the size fstat() saw: read exactly that, without a read() for EOF.
  std::string out;
  out.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("read " + path, errno);
    }
    if (n == 0) return data_loss(path + ": shorter than its size");
    got += size_t(n);
  }
  return out;
}

Result<uint64_t> FsStore::stat(std::string_view key) {
  RETURN_IF_ERROR(validate_key(key));
  struct stat st;
  if (::stat((root_ / key).c_str(), &st) != 0) return errno_status(std::string(key), errno);
  if (!S_ISREG(st.st_mode)) return not_found(std::string(key) + ": not an object");
  return uint64_t(st.st_size);
}

Result<ListPage> FsStore::list(std::string_view prefix, std::string_view start_after,
                               size_t limit) {
  if (limit == 0 || limit > kDefaultListLimit) {
    return invalid_argument("list: limit must be 1.." + std::to_string(kDefaultListLimit));
  }
  Walk w{prefix, start_after, limit, {}};
  RETURN_IF_ERROR(walk(root_.string(), "", w));
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
  for (const auto& key : keys) {
    if (::unlink((root_ / key).c_str()) != 0 && errno != ENOENT) {
      return errno_status("unlink " + key, errno);
    }
  }
  return ok_status();
}

Result<size_t> FsStore::remove_temporaries() {
  // Temporaries' folders at the root (.tmp-<pid>-<n>/<bucket>/), and loose .tmp-* files
  // anywhere, which is where stores before those folders wrote their temporaries.
  std::vector<std::filesystem::path> files, dirs;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
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
