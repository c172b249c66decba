#pragma once
// sweep_user(): the per-user chunk sweep of product design §25.3, run after the prune of each
// of the user's boxes:
//
//   1. mark, without a lock: every box's timeline and head, and the chunks of every snapshot
//      they name (its manifest); list <user>/chunks/. Manifests are immutable and pruning only
//      removes, so what is marked stays true; only saves committing later add references.
//   2. take the user's lock exclusively (user_lock.h). Every save holds it shared from its
//      start to its commit, so no save is now between "this chunk is stored" and its commit.
//      Re-list the boxes, re-read their timelines and heads, and mark the snapshots
//      committed since step 1.
//   3. garbage = the chunks listed in step 1 that nothing marked. (A chunk stored after the
//      listing is not in it, so never garbage this time: a save in progress during the mark
//      cannot lose what it uploaded.)
//   4. still under the lock: SweepOptions::before_delete (where an api that keeps a chunk
//      index rewrites it without the garbage: the index goes first), then delete the garbage
//      in batches, then release.
//
// Crash safety: the mark only reads; a crash during the deletes leaves some garbage, which
// the next sweep finds. The deletes stay under the lock: once it is released a save may
// store a garbage chunk again, and a late delete would remove it. Any error while marking
// (a timeline or manifest that does not open or is missing) stops the sweep before any
// delete: a sweep never deletes on an incomplete mark.
//
// Thread-safety: reentrant; sweeps of one user must be serialized by the caller (the GC
// pass runs one per user).

#include "base/result.h"
#include "state/keys.h"
#include "state/store.h"
#include "state/user_lock.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace cb::state {

struct SweepOptions {
  size_t delete_batch = kMaxDeleteBatch;  // keys per delete_batch() call, 1..1000
  bool dry_run = false;                   // mark and count, change nothing
  // Step 4, under the lock, before the first delete; an error stops the sweep (nothing
  // deleted). Unset: the store's listing is the index (save_snapshot() stats the store).
  std::function<Status(std::span<const ChunkId> garbage)> before_delete;
  // Step 4, before each delete_batch() call: the chunks deleted so far and the garbage total
  // (progress for a human, and an observable point between the index and the deletes).
  std::function<void(uint64_t deleted, uint64_t total)> before_batch;
  // For tests: runs between the mark and taking the lock.
  std::function<void()> after_mark_for_test;
};

struct SweepResult {
  size_t boxes = 0;            // boxes seen under the lock
  size_t snapshots = 0;        // kept snapshots marked
  size_t late_snapshots = 0;   // of those, marked under the lock (committed during step 1)
  uint64_t marked_chunks = 0;  // distinct chunks they reference
  uint64_t listed_chunks = 0;  // chunk objects listed in step 1
  uint64_t listed_bytes = 0;
  uint64_t garbage_chunks = 0;  // deleted (or, in a dry run, to delete)
  uint64_t garbage_bytes = 0;
  uint64_t foreign_objects = 0;  // objects under chunks/ that are not a chunk key: left alone
};

// Sweeps |user|'s chunks as above, taking |lock| exclusively for steps 2-4.
// Errors: kInvalidArgument for a bad user or delete_batch; kDataLoss if a timeline, head or
//   a kept snapshot's manifest does not open or is missing (nothing deleted); the lock's
//   errors; store errors (some garbage may be deleted: run it again).
Result<SweepResult> sweep_user(Store& store, const StateKeys& keys, std::string_view user,
                               UserLock& lock, const SweepOptions& options);

// The same in two halves, for a caller with its own kind of lock (the api's coroutine
// locks): sweep_mark() is step 1 and needs no lock; sweep_finish() is steps 2-4 and must
// be called with |user|'s lock held exclusively, with the mark of the same user.
struct SweepMark {
  std::string user;
  std::unordered_set<ChunkId, ChunkIdHash> chunks;
  std::map<std::string, std::set<std::string>> snapshots;  // box -> snapshot ids marked
  std::vector<ObjectInfo> listed;                          // <user>/chunks/ at step 1
};
Result<SweepMark> sweep_mark(Store& store, const StateKeys& keys, std::string_view user);
Result<SweepResult> sweep_finish(Store& store, const StateKeys& keys, SweepMark&& mark,
                                 const SweepOptions& options);

// The chunks referenced by every snapshot a timeline or head of |user| names (step 1's
// mark, without the lock): what an offline check of a sweep compares against.
// Errors: as sweep_user's mark.
Result<std::unordered_set<ChunkId, ChunkIdHash>> mark_user_chunks(Store& store,
                                                                  const StateKeys& keys,
                                                                  std::string_view user);

}  // namespace cb::state
