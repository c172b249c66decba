#pragma once
// prune_box(): retention applied to one box (product design §25.3 "Prune", per box, under the
// box's lock):
//
//   1. apply the rule (retention.h) to the timeline; the head and pinned snapshots are kept;
//   2. write the timeline without the dropped snapshots       <- the only commit point
//   3. delete the dropped snapshots' records, then their manifests, and every record or
//      manifest under snapshots/ that the new timeline does not name (a save that failed
//      after writing them, or a prune that crashed between 2 and 3).
//
// Crash safety: before 2 nothing changed; after 2 every reader (restore, browse, the sweep's
// mark) takes the kept set from the timeline, so objects still lying around are invisible
// and the next prune finds them by listing. Deletes never touch what the timeline or the head
// names. Records go before manifests so a half-done step 3 leaves manifests without records
// (garbage), never a record naming a missing manifest. Chunks are not touched: the per-user
// sweep (sweep.h) removes those nothing references any more.
//
// The caller holds the box's lock: no save of this box may run meanwhile (a save writes its
// manifest and record before the timeline names them, and step 3 would delete them).
//
// Thread-safety: reentrant; prunes of one box must be serialized by the caller.

#include "base/result.h"
#include "crypto/random.h"
#include "state/keys.h"
#include "state/retention.h"
#include "state/snapshot.h"
#include "state/store.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cb::state {

struct PruneOptions {
  RetentionRule rule = RetentionRule::time_machine();
  std::chrono::system_clock::time_point now;  // retention's "now"
  bool dry_run = false;                       // decide and list, change nothing
};

struct PruneResult {
  std::string head;    // the head's snapshot id ("" for a box never saved)
  RetentionPlan plan;  // one decision per timeline entry
  bool timeline_rewritten = false;
  size_t compacted = 0;              // kept delta manifests rebased or made whole (step 1b)
  std::vector<std::string> deleted;  // keys deleted (records, then manifests), in order
  uint64_t deleted_bytes = 0;        // their sizes from the listing
};

// Prunes |location| as above. In a dry run `deleted` lists what would be deleted.
// Errors: kInvalidArgument for a bad location; kDataLoss if the head or the timeline does not
//   open (nothing is changed then); store errors (the timeline may be rewritten and some
//   deletes done: run it again).
Result<PruneResult> prune_box(Store& store, const StateKeys& keys, const BoxLocation& location,
                              const PruneOptions& options, crypto::Random& random);

// The boxes of |user| that have any object in the store (<user>/boxes/<box>/...), sorted.
// One list call per box, not per object.
// Errors: kInvalidArgument for a bad user; store errors.
Result<std::vector<std::string>> list_boxes(Store& store, std::string_view user);

}  // namespace cb::state
