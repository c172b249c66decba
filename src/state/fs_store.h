#pragma once
// FsStore: a Store in a local directory, the default backend (architecture §6: the api's
// <data-dir>/store/). An object's key is its path under the root, so the fan-out of the key
// layout (chunks/<2 hex>/<id>) is the fan-out of the directories. README.md §Filesystem store.
//
//   put     write <root>/.tmp-<pid>-<store>/<n % 16>/<n> (O_EXCL), fsync it, rename over
//           <dir>/<name> (creating <dir> and its missing parents), fsync <dir> (and every
//           directory put created, with its parent), so an object is either absent, the old
//           one or all of the new one, also after a power loss
//   put_deferred  append to this store's open pack for the key's first segment (a user's
//           prefix): one file of many objects, <root>/.packs/<segment>/<16 hex>.pack once
//           published, with an index of keys, offsets and sizes at its end (pack.h). A pack
//           is published when it holds Options::flush_bytes (or flush_index_bytes of index;
//           on a thread of its own, while the puts go on with a new one) or
//           at sync(): fdatasync, rename into place, fsync the folders up to the root, so an
//           index never names bytes that are not on disk and a published pack is durable. A
//           crash before leaves only temporaries (remove_temporaries()). 24,000 chunks cost
//           a dozen files, not 24,000 creates, renames and inode writebacks
//   get     the file if there is one (a put() replaces what is there), else the packed object
//           the pack indexes name; stat: its size
//   list    a sorted walk that skips subtrees before start_after and stops at the limit,
//           merged with the pack indexes' keys
//   delete  unlink the file (missing files are fine; directories stay); for a packed object,
//           write its pack's next index, <name>.<n>.idx, without it (fsync, rename; the one
//           before stays for readers until the next delete). Once less than half of a pack's bytes
//           are named, its named objects move to a new pack and the old one goes. Deletes of one
//           pack, from any process, take turns under flock(2) on it
//
// Each FsStore keeps the pack indexes it read in memory, per first segment, and reads the
// pack folder again when its mtime changed (or is too recent to prove anything, as a
// racy-git stamp), so a pack published or a delete done by another FsStore or process is
// seen by the next call. A pack whose index does not decode is left out (its objects read as
// missing: a restore fails with DATA_LOSS, a save stores them again).
//
// Files and directories are created 0600 / 0700. Names starting with '.' are never keys
// (validate_key), so temporaries never show in list(); a crash can leave some behind, and
// remove_temporaries() deletes them (call it at start, before any put).
//
// Thread-safety: all methods may run on several threads and in several processes at once
// over one root; puts to one key race like S3's (last rename wins, each whole).

#include "state/pack.h"
#include "state/store.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unistd.h>
#include <vector>

namespace cb::state {

class FsStore final : public Store {
 public:
  struct Options {
    // fsync files and directories on put. Off only for throwaway stores (benchmarks that
    // measure the rest); durability and the commit order depend on it.
    bool sync = true;
    // The bytes at which a pack is published (on the store's publishing thread) once a
    // put_deferred() filled it, instead of waiting for sync(), so that its writeback overlaps
    // the rest of the save. (With a
    // file per object, before packs, a first save of scripts/bench state's tree took 3.9-4.1 s
    // publishing every 64 MiB, 4.3-4.7 s leaving all to sync(); 2026-12-01.)
    size_t flush_bytes = 64u << 20;
    // Likewise for the pack's index (about 24 bytes plus the key per object), so that many
    // tiny objects never make an index above kMaxPackIndexSize.
    size_t flush_index_bytes = 16u << 20;
  };

  // A store rooted at |root|, created (0700, with parents) if missing.
  // Errors: kInternal / kPermissionDenied if it cannot be created or is not a directory.
  static Result<std::unique_ptr<FsStore>> open(const std::filesystem::path& root, Options options);
  static Result<std::unique_ptr<FsStore>> open(const std::filesystem::path& root) {
    return open(root, Options());
  }

  Status put(std::string_view key, std::string_view data) override;
  Status put_deferred(std::string_view key, std::string_view data) override;
  Status sync() override;
  // Waits for the publishes under way (packs that filled up, published on a thread of the
  // store's), not for the open packs, which sync() publishes. A failed one's error waits for
  // sync().
  void wait_publishes();
  // Publishes that failed since the store opened. sync() reports a failure once, to whichever
  // call comes first; a saver that shares the store with others compares this count from
  // before its first put with the one after its sync() (StoreChunkSink::finish()).
  uint64_t failed_deferred_puts() const override { return failed_publishes_.load(); }
  // 1: a put is a write into the open pack, which the reading thread that sealed the chunk
  // does itself; put threads only added switches between threads (docs/benchmarks.md,
  // "state: a save seals where it reads, and publishes off the reading threads").
  int put_concurrency() const override;
  Result<std::string> get(std::string_view key) override;
  Status get_append(std::string_view key, std::string& out) override;
  Result<uint64_t> stat(std::string_view key) override;
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit = kDefaultListLimit) override;
  Status delete_batch(std::span<const std::string> keys) override;

  // Deletes leftover temporaries of puts interrupted by a crash; returns how many.
  Result<size_t> remove_temporaries();

  const std::filesystem::path& root() const { return root_; }

 private:
  FsStore(std::filesystem::path root, Options options);

 public:
  ~FsStore() override;  // deletes the open packs never published

 private:
  struct PackFile;  // a published pack and which of its indexes is current
  struct Loc;       // where a packed object is
  struct Group;     // the packs of one first key segment, and the keys they hold
  struct OpenPack;  // a pack being written

  // Creates a fresh temporary in temp_dir_ (and the folders when missing); sets |temp|.
  Result<int> create_temp(std::string& temp);
  // Writes |data| to a fresh temporary and closes it (fsync first if |fsync_file|).
  Status write_temp(std::string_view data, bool fsync_file, std::string& temp);
  // Renames |temp| to |path|, creating |path|'s missing parents (recorded in |created|).
  Status rename_into_place(const std::string& temp, const std::string& path,
                           std::vector<std::string>& created);
  // fsyncs |dir| and, for the folders in |created|, their parents. Nothing without sync.
  Status sync_dirs(const std::string& dir, const std::vector<std::string>& created) const;

  Group& group(std::string_view name);
  // Reads g's folder again if it changed since the last read, or always with |force|.
  // REQUIRES: g.mu.
  Status refresh(Group& g, bool force);
  // Where |key| is packed, or nullopt; reads the folder again first when stale, and once
  // more on a miss if |force_on_miss|.
  Result<std::optional<Loc>> find_packed(std::string_view key, bool force_on_miss);
  // Appends the packed object at |loc| to |out|; on an error |out| is as it was.
  Status read_packed(const Loc& loc, std::string& out);
  struct KeptPack;  // a published pack's descriptor, kept for the next reads of it
  // A descriptor of |pack|: one of the kKeptPacks last read, or opened now and kept. A
  // restore reads many objects of each pack, and opening the pack for each was 2 of a get's 5
  // system calls. Errors: kNotFound when the pack is gone, as open(2)'s.
  Result<std::shared_ptr<const KeptPack>> kept_pack(const std::shared_ptr<const PackFile>& pack);
  // Closes the kept descriptors of the pack at |path| (once no read holds them): it was
  // deleted, by this store or, as refresh() finds, by another.
  void forget_kept_pack(std::string_view path);

  // Waits for p's writes, appends its index, syncs, renames it into its group's folder and
  // adds its keys to the group. Deletes the temporary on error.
  Status publish(std::unique_ptr<OpenPack> p);
  void end_publish();  // counts a publish as ended and wakes a waiting sync()
  // Queues |p| for the publishing thread (started with the first; here if none starts).
  // REQUIRES: busy_ counts it.
  void publish_in_background(std::unique_ptr<OpenPack> p);
  void publish_queued();  // the publishing thread: until stopping_ and nothing is queued
  // publish() (an exception counts as a failed publish), then end_publish().
  void publish_counted(std::unique_ptr<OpenPack> p);

  // Removes |keys| (all of one group) from the packs that hold them.
  Status delete_packed(Group& g, std::vector<std::string> keys);
  // Removes |keys| from |pack| under flock: a next index, or the pack gone, or compacted.
  // Does nothing if the pack went meanwhile (the caller looks the keys up again).
  Status delete_from_pack(Group& g, const PackFile& pack, const std::vector<std::string>& keys);
  // Moves |index|'s objects from the pack open as |fd| into a new pack of |g|.
  Status compact(Group& g, int fd, const PackFile& pack, const PackIndex& index);

  std::filesystem::path root_;
  Options options_;
  std::string packs_dir_;  // <root>/.packs
  // <root>/.tmp-<pid>-<n>: this store's temporaries, one folder per FsStore of a process, in
  // kTempFanOut buckets: with every temporary of a save in one folder, the put threads'
  // creates queued on that folder's lock (perf: 5.7 % of a first save in rwsem_spin_on_owner).
  static constexpr uint64_t kTempFanOut = 16;
  std::string temp_bucket(uint64_t n) const;  // temp_dir_/<hex digit of n % kTempFanOut>
  void remove_temp_dir();                     // the buckets and the folder, when empty
  std::string temp_dir_;
  std::atomic<uint64_t> temp_counter_{0};
  std::mutex mu_;
  std::condition_variable idle_cv_;  // busy_ fell to 0, or an open pack's writers did
  // Guarded by mu_:
  std::map<std::string, std::unique_ptr<OpenPack>, std::less<>> open_;  // by group
  std::map<std::string, std::unique_ptr<Group>, std::less<>> groups_;
  Status publish_error_;  // a failed publish's, until sync() reports it
  int busy_ = 0;          // publishes under way (a flush, or a sync(): alone)
  std::deque<std::unique_ptr<OpenPack>> to_publish_;  // full packs, for the publishing thread
  bool stopping_ = false;                             // the destructor ran
  std::condition_variable publish_cv_;                // to_publish_ or stopping_ changed
  std::thread publisher_;  // started with the first full pack; joined by the destructor
  std::atomic<uint64_t> failed_publishes_{0};
  // At most this many. A pack this store deletes is closed at once; one another store
  // deletes, when this one next reads the pack's folder.
  static constexpr size_t kKeptPacks = 8;
  std::mutex kept_mu_;
  std::deque<std::shared_ptr<const KeptPack>> kept_packs_;  // last used first; kept_mu_
};

}  // namespace cb::state
