#include "state/save.h"

#include "state/chunk.h"
#include "state/workers_internal.h"

#include <algorithm>
#include <thread>

namespace cb::state {

StoreChunkSink::StoreChunkSink(Store& store, const StateKeys& keys, std::string user,
                               int put_threads)
    : store_(store),
      keys_(keys),
      user_(std::move(user)),
      failed_before_(store.failed_deferred_puts()) {
  if (put_threads <= 1) return;
  // The put threads only put what add() sealed. 8 chunks a thread may wait, so that a reading
  // thread, woken once the queue is half empty (Workers), queues several before it sleeps
  // again: the switches between threads are a cost of their own (docs/benchmarks.md, "a
  // save's context switches").
  putters_ = std::make_unique<internal::Workers<Put>>(
      put_threads, size_t(put_threads) * 8,
      [this](Put& put) { return store_.put_deferred(put.key, put.sealed); });
}

StoreChunkSink::~StoreChunkSink() { (void)stop_threads(); }

void StoreChunkSink::add_known(const Manifest& manifest) {
  for (const Entry& e : manifest.entries) {
    for (const ChunkRef& c : e.chunks) known_.insert(c.id);
  }
}

Status StoreChunkSink::add(const ChunkId& id, std::span<const uint8_t> plaintext) {
  {
    // Claimed before the stat: of two reading threads that meet the same new chunk (a
    // duplicated file), one stores it and the other goes on, as the first's put must succeed
    // for the save to.
    std::lock_guard lock(mu_);
    if (!known_.insert(id).second) return ok_status();
  }
  const std::string key = chunk_key(user_, id);
  auto size = store_.stat(key);
  if (size.ok()) return ok_status();
  if (size.status().code() != Code::kNotFound) return size.status();
  // Sealed here, by the reading thread (or a reading thread with no file of its own that
  // helps it, Workers::share()), straight from its buffer and while the chunk is in its
  // caches: on a put thread it needed a copy of the plaintext and a switch between threads
  // (docs/benchmarks.md, "state: a save seals where it reads, and publishes off the reading
  // threads").
  std::string sealed = seal_chunk(keys_, id, plaintext);
  const size_t stored = sealed.size();
  if (putters_ == nullptr) {
    RETURN_IF_ERROR(store_.put_deferred(key, sealed));
  } else {
    RETURN_IF_ERROR(putters_->submit(Put{key, std::move(sealed)}));
  }
  std::lock_guard lock(mu_);
  ++added_chunks_;
  added_bytes_ += plaintext.size();
  added_stored_bytes_ += stored;
  return ok_status();
}

Status StoreChunkSink::stop_threads() {
  if (putters_ == nullptr) return ok_status();
  return putters_->finish();
}

Status StoreChunkSink::finish() {
  RETURN_IF_ERROR(stop_threads());
  // The chunks were put_deferred(): one sync makes them all durable (FsStore: publishes its
  // open packs, a fdatasync each, instead of two fsyncs per chunk) before the caller commits
  // a manifest naming them.
  RETURN_IF_ERROR(store_.sync());
  // A failed publish is reported to one sync(): another saver's on the same store may have
  // taken it, and this save's chunks may have been in that pack.
  if (store_.failed_deferred_puts() != failed_before_) {
    return unavailable("a pack of chunks failed to publish during this save: chunks may be lost");
  }
  return ok_status();
}

Result<SaveResult> save_snapshot(Store& store, const StateKeys& keys, const BoxLocation& location,
                                 const SaveOptions& options, const Clock& clock,
                                 crypto::Random& random) {
  RETURN_IF_ERROR(validate_location(location));
  const auto now = clock.now();
  ASSIGN_OR_RETURN(std::optional<Head> head, load_head(store, keys, location));
  Manifest loaded;
  const Manifest* parent = nullptr;
  if (head.has_value()) {
    if (options.cached_parent != nullptr && options.cached_parent_id == head->snapshot_id) {
      parent = options.cached_parent;
    } else {
      ASSIGN_OR_RETURN(loaded, load_manifest(store, keys, location, head->snapshot_id));
      parent = &loaded;
    }
  }

  StoreChunkSink sink(store, keys, location.user,
                      options.put_threads > 0 ? options.put_threads : store.put_concurrency());
  if (parent != nullptr) sink.add_known(*parent);
  ScanOptions scan_options = options.scan;
  scan_options.read_threads =
      options.read_threads > 0
          ? options.read_threads
          : std::clamp(int(std::thread::hardware_concurrency()), 1, kMaxDefaultReadThreads);
  ASSIGN_OR_RETURN(ScanResult scan, scan_tree(scan_options, parent, keys, sink));
  RETURN_IF_ERROR(sink.finish());  // every chunk stored before the commit writes the manifest

  Record record;
  record.snapshot_id = new_snapshot_id(now, random);
  record.box = location.box;
  record.saved_at_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  record.parent = head.has_value() ? head->snapshot_id : "";
  record.quiesced = options.quiesced;
  SnapshotStats& stats = record.stats;
  for (const Entry& e : scan.manifest.entries) {
    switch (e.kind) {
      case EntryKind::kFile:
        ++stats.files;
        stats.logical_bytes += e.size;
        break;
      case EntryKind::kDir:
        ++stats.dirs;
        break;
      case EntryKind::kSymlink:
        ++stats.symlinks;
        break;
    }
  }
  stats.changed_files = scan.stats.files_read;
  stats.added_chunks = sink.added_chunks();
  stats.added_bytes = sink.added_bytes();
  stats.added_stored_bytes = sink.added_stored_bytes();
  stats.skipped = scan.stats.skipped;

  ASSIGN_OR_RETURN(record, commit_snapshot(store, keys, location, scan.manifest, std::move(record),
                                           random, parent));
  SaveResult result;
  result.record = std::move(record);
  result.manifest = std::move(scan.manifest);
  result.scan = scan.stats;
  result.notes = std::move(scan.notes);
  return result;
}

}  // namespace cb::state
