#include "state/restore.h"

#include "crypto/hash.h"
#include "state/chunk.h"
#include "state/scanner.h"
#include "state/snapshot.h"

#include <array>
#include <condition_variable>
#include <errno.h>
#include <fcntl.h>
#include <filesystem>
#include <grp.h>
#include <mutex>
#include <optional>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

// Fetches and opens the chunks of |jobs| on threads of its own, at most |window| chunks ahead
// of next(), which returns them in job order. With threads <= 1, next() fetches itself.
// Destroying it stops the threads after the fetches in progress.
class ChunkFetcher {
 public:
  struct Job {
    const Entry* entry;
    const ChunkRef* ref;
  };

  ChunkFetcher(Store& store, const StateKeys& keys, const std::string& user, std::vector<Job> jobs,
               int threads)
      : store_(store), keys_(keys), user_(user), jobs_(std::move(jobs)) {
    if (threads <= 1 || jobs_.size() <= 1) return;
    ring_.resize(size_t(threads) * 4);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~ChunkFetcher() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  ChunkFetcher(const ChunkFetcher&) = delete;
  ChunkFetcher& operator=(const ChunkFetcher&) = delete;

  // The plaintext of the next job's chunk. REQUIRES: fewer calls than jobs.
  Result<std::string> next() {
    const size_t i = consumed_;
    if (threads_.empty()) {
      ++consumed_;
      return fetch(jobs_[i]);
    }
    std::unique_lock lock(mu_);
    std::optional<Result<std::string>>& slot = ring_[i % ring_.size()];
    cv_.wait(lock, [&] { return slot.has_value(); });
    Result<std::string> out = std::move(*slot);
    slot.reset();
    ++consumed_;
    lock.unlock();
    cv_.notify_all();  // room in the window
    return out;
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] {
        return stopping_ || next_job_ >= jobs_.size() || next_job_ < consumed_ + ring_.size();
      });
      if (stopping_ || next_job_ >= jobs_.size()) return;
      const size_t i = next_job_++;
      lock.unlock();
      Result<std::string> r = fetch(jobs_[i]);
      lock.lock();
      ring_[i % ring_.size()].emplace(std::move(r));
      cv_.notify_all();
    }
  }

  Result<std::string> fetch(const Job& job) {
    const Entry& e = *job.entry;
    const ChunkRef& ref = *job.ref;
    const std::string what = "file " + e.path + ": chunk " + ref.id.hex();
    auto sealed = store_.get(chunk_key(user_, ref.id));
    if (!sealed.ok()) {
      if (sealed.status().code() == Code::kNotFound) return data_loss(what + ": missing");
      return sealed.status().with_prefix(what);
    }
    auto plain = open_chunk(keys_, ref.id, *sealed);
    if (!plain.ok())
      return data_loss("file " + e.path + ": " + std::string(plain.status().message()));
    if (plain->size() != ref.size) return data_loss(what + ": size differs from the manifest");
    return plain;
  }

  Store& store_;
  const StateKeys& keys_;
  const std::string& user_;
  const std::vector<Job> jobs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<Result<std::string>>> ring_;  // slot i % size: job i; guarded by mu_
  size_t next_job_ = 0;                                   // guarded by mu_
  size_t consumed_ = 0;    // guarded by mu_ (read unlocked only without threads)
  bool stopping_ = false;  // guarded by mu_
  std::vector<std::thread> threads_;
};

class Restorer {
 public:
  Restorer(Store& store, const StateKeys& keys, std::string_view user,
           const RestoreOptions& options)
      : store_(store), keys_(keys), user_(user), options_(options) {
    chown_ = (options.restore_owners || options.owner) && ::geteuid() == 0;
  }

  // Writes |entries| (path order) under the directory |root|, whose path is |root_path|.
  Status write_all(int root, const std::vector<std::pair<std::string, const Entry*>>& entries) {
    root_ = root;
    std::vector<ChunkFetcher::Job> jobs;
    for (const auto& [rel, e] : entries) {
      if (rel.empty() || e->kind != EntryKind::kFile) continue;
      for (const ChunkRef& ref : e->chunks) jobs.push_back(ChunkFetcher::Job{e, &ref});
    }
    ChunkFetcher fetcher(store_, keys_, user_, std::move(jobs), options_.fetch_threads);
    fetcher_ = &fetcher;
    std::vector<std::pair<std::string, const Entry*>> dirs, links;
    for (const auto& [rel, e] : entries) {
      if (rel.empty()) {  // the target itself
        dirs.emplace_back(rel, e);
        continue;
      }
      ASSIGN_OR_RETURN(int parent, open_parent(rel));
      const std::string name(name_of(rel));
      switch (e->kind) {
        case EntryKind::kDir:
          if (::mkdirat(parent, name.c_str(), 0700) != 0) {
            return errno_status("mkdir " + e->path, errno);
          }
          dirs.emplace_back(rel, e);
          ++result_.dirs;
          break;
        case EntryKind::kFile:
          RETURN_IF_ERROR(write_file(parent, name, *e));
          break;
        case EntryKind::kSymlink:
          links.emplace_back(rel, e);
          break;
      }
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
      ++result_.symlinks;
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

  RestoreResult result() const { return result_; }

 private:
  std::pair<uid_t, gid_t> owner_of(const Entry& e) {
    if (options_.owner) return {options_.owner->first, options_.owner->second};
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

  Status write_file(int parent, const std::string& name, const Entry& e) {
    Fd fd(
        ::openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd.get() < 0) return errno_status("create " + e.path, errno);
    for (size_t c = 0; c < e.chunks.size(); ++c) {
      ASSIGN_OR_RETURN(std::string plain, fetcher_->next());  // e.chunks[c], opened and checked
      ++result_.chunks_fetched;
      std::string_view rest = plain;
      while (!rest.empty()) {
        ssize_t n = ::write(fd.get(), rest.data(), rest.size());
        if (n < 0) {
          if (errno == EINTR) continue;
          return errno_status("write " + e.path, errno);
        }
        rest.remove_prefix(size_t(n));
      }
    }
    RETURN_IF_ERROR(apply_metadata(fd.get(), e));
    ++result_.files;
    result_.bytes += e.size;
    if (options_.progress) options_.progress(result_.files, result_.bytes);
    return ok_status();
  }

  Store& store_;
  const StateKeys& keys_;
  std::string user_;
  const RestoreOptions& options_;
  bool chown_ = false;
  int root_ = -1;
  ChunkFetcher* fetcher_ = nullptr;  // write_all()'s
  Fd cached_dir_;
  std::string cached_rel_;
  RestoreResult result_;
  std::unordered_map<std::string, uid_t> uids_;
  std::unordered_map<std::string, gid_t> gids_;
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
