#pragma once
// save_snapshot(): one save of a box, end to end (README.md §Saving):
//
//   1. read the head; load its manifest (or take the caller's cached copy of it)
//   2. scan the roots with it (scanner.h): unchanged files keep their chunk lists unread
//   3. every chunk of a file read is stored unless it is known: in the parent manifest,
//      already stored by this save, or found in the store (stat) — the last is what makes a
//      second box of the same user upload nothing for a file the first one saved
//   4. commit (snapshot.h): manifest, record, timeline, then the head
//
// A failure at any step leaves the head, and every committed snapshot, as they were.
//
// This is the direct form, for a caller that holds the Store (the api, tests, benchmarks).
// The agent's form (issue 7 item 2) splits step 3 at the api: it scans with its own
// ChunkSink that collects the new ids, asks the api which ones the store lacks and uploads
// those through presigned URLs; scan_tree(), seal_chunk() and commit_snapshot() are the
// pieces it reuses.
//
// Thread-safety: reentrant; concurrent saves of one box must be serialized by the caller.

#include "base/clock.h"
#include "base/result.h"
#include "crypto/random.h"
#include "state/keys.h"
#include "state/manifest.h"
#include "state/scanner.h"
#include "state/snapshot.h"
#include "state/store.h"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace cb::state {

namespace internal {
template <typename Job>
class Workers;
}  // namespace internal

struct SaveOptions {
  ScanOptions scan;
  bool quiesced = false;  // recorded: the caller made the copy consistent (§25.5 Snapshot)
  // The head's manifest if the caller kept it from its last save or restore; used only when
  // cached_parent_id equals the head's snapshot id, else the manifest is loaded.
  const Manifest* cached_parent = nullptr;
  std::string cached_parent_id;
  // Chunk puts in flight at once (StoreChunkSink's put threads); 1 puts on the scanning
  // thread, 0 asks the store (Store::put_concurrency(): 8 for a remote store, whose puts are
  // round trips; 1 for FsStore, whose puts are a write each). docs/benchmarks.md "state: a
  // save seals where it reads, and publishes off the reading threads".
  int put_threads = 0;
  // Files read, chunked and hashed at once (scan.read_threads is replaced by this): 0 is one
  // per core, at most kMaxDefaultReadThreads. A first save of scripts/bench state's tree on
  // 2 cores took 3.70-3.75 s with 2, 3.78-4.05 s with 3 and 3.89-4.00 s with 1 (three
  // interleaved runs each, 2026-12-01).
  int read_threads = 0;
};

inline constexpr int kMaxDefaultReadThreads = 4;

struct SaveResult {
  Record record;
  Manifest manifest;
  ScanStats scan;
  std::vector<std::string> notes;  // entries skipped by the scan
};

// Saves |options.scan.roots| as a new snapshot of |location|, at clock.now().
// Errors: the scan's errors (scanner.h); kDataLoss if the head's manifest does not open;
//   store errors; commit errors (snapshot.h).
Result<SaveResult> save_snapshot(Store& store, const StateKeys& keys, const BoxLocation& location,
                                 const SaveOptions& options, const Clock& clock,
                                 crypto::Random& random);

// The ChunkSink of save_snapshot(): stores each chunk that is neither in |known| nor in the
// store, and counts what it stored. Exposed for callers that drive scan_tree() themselves.
//
// add() may run on several threads at once (ScanOptions::read_threads). The known-check, the
// stat, the compressing and the sealing run on the calling thread. With put_threads <= 1 the
// put does too; with put_threads > 1 the sink queues the sealed chunk (at most 8 * put_threads
// of them; add() waits for room) for that many threads of its own to put. finish() waits for
// every put: every chunk added is stored only once it returned ok, so call it before
// committing. Chunks go to Store::put_deferred(): none of them need be durable or visible
// before finish() called Store::sync().
class StoreChunkSink final : public ChunkSink {
 public:
  // |store| and |keys| are not owned and must outlive the sink.
  StoreChunkSink(Store& store, const StateKeys& keys, std::string user, int put_threads = 1);
  ~StoreChunkSink() override;
  StoreChunkSink(const StoreChunkSink&) = delete;
  StoreChunkSink& operator=(const StoreChunkSink&) = delete;

  // Marks every chunk of |manifest| as already stored.
  void add_known(const Manifest& manifest);

  // Errors: the stat's, or the first failed put's (then the sink stores nothing more).
  Status add(const ChunkId& id, std::span<const uint8_t> plaintext) override;

  // Waits for the puts in flight, stops the threads and syncs the store (the chunks are put
  // with Store::put_deferred()). Errors: the first failed put's, or the sync's; kUnavailable
  // when a deferred put of the store failed since the sink was made, even if another
  // saver's sync() was the one told (Store::failed_deferred_puts()).
  Status finish();

  uint64_t added_chunks() const { return added_chunks_; }
  uint64_t added_bytes() const { return added_bytes_; }
  uint64_t added_stored_bytes() const { return added_stored_bytes_; }

 private:
  Status stop_threads();  // the first failed put's error
  Store& store_;
  const StateKeys& keys_;
  std::string user_;
  const uint64_t failed_before_;  // store_.failed_deferred_puts() when the sink was made
  std::unordered_set<ChunkId, ChunkIdHash> known_;
  struct Put {
    std::string key;
    std::string sealed;
  };
  std::mutex mu_;  // guards known_ and the counts: add() runs on several threads
  uint64_t added_chunks_ = 0;
  uint64_t added_bytes_ = 0;
  uint64_t added_stored_bytes_ = 0;
  // None with put_threads <= 1. Last: its threads stop before the rest is destroyed.
  std::unique_ptr<internal::Workers<Put>> putters_;
};

}  // namespace cb::state
