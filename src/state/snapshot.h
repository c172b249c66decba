#pragma once
// Snapshots of one box in a store: where each object lives (README.md §Layout), the small
// sealed metadata objects (record, timeline, head; README.md §Metadata objects) and the
// commit that makes a snapshot visible, in the order that keeps every committed snapshot
// restorable after a crash at any point (README.md §Commit):
//
//   1. chunks     every chunk the manifest names is stored (the caller, before commit)
//   2. manifest   <box>/snapshots/<id>.manifest
//   3. record     <box>/snapshots/<id>.record
//   4. timeline   <box>/timeline, rewritten with the new snapshot appended
//   5. head       <box>/head, rewritten to name it: the commit point
//
// Each put is atomic, so a crash leaves the head at the previous snapshot (whose objects are
// untouched) and at worst unreferenced chunks or an orphan manifest/record, which the GC
// (product design §25.3) removes. A snapshot named by the timeline but not yet by the head is
// complete too. Concurrent saves of one box must be serialized by the caller (the api holds
// the box's lock); nothing here locks.
//
// Thread-safety: free functions; safe from any thread given a thread-safe Store and Random.

#include "base/result.h"
#include "crypto/random.h"
#include "state/keys.h"
#include "state/manifest.h"
#include "state/store.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cb::state {

// One box of one user. Both are store key segments (validate_location).
struct BoxLocation {
  std::string user;
  std::string box;
};

// Errors: kInvalidArgument unless user and box are non-empty, at most 128 bytes, of
//   [A-Za-z0-9._-] and do not start with '.'.
Status validate_location(const BoxLocation& location);

// Keys (README.md §Layout).
std::string user_prefix(std::string_view user);                   // <user>/
std::string chunks_prefix(std::string_view user);                 // <user>/chunks/
std::string chunk_key(std::string_view user, const ChunkId& id);  // <user>/chunks/<hh>/<hex>
// The id of the chunk |key| is the key of: chunk_key(user, id) == key.
// Errors: kInvalidArgument for any other key (another user's, a malformed or foreign object).
Result<ChunkId> chunk_id_of(std::string_view user, std::string_view key);
std::string box_prefix(const BoxLocation& location);        // <user>/boxes/<box>/
std::string snapshots_prefix(const BoxLocation& location);  // .../snapshots/
std::string manifest_key(const BoxLocation& location, std::string_view snapshot_id);
std::string record_key(const BoxLocation& location, std::string_view snapshot_id);
std::string timeline_key(const BoxLocation& location);  // .../timeline
std::string head_key(const BoxLocation& location);      // .../head

// A new snapshot id for a save at |at|: "YYYYMMDDTHHMMSS.mmmZ-" + 8 random hex digits, so
// ids sort by time and two saves in one millisecond still differ.
std::string new_snapshot_id(std::chrono::system_clock::time_point at, crypto::Random& random);

// Errors: kInvalidArgument unless |id| is 1..64 bytes of [A-Za-z0-9._-] not starting with '.'.
Status validate_snapshot_id(std::string_view id);

struct SnapshotStats {
  uint64_t files = 0;  // regular files in the manifest
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t logical_bytes = 0;       // sum of the files' sizes
  uint64_t changed_files = 0;       // files (re)read by this save: new or stat changed
  uint64_t added_chunks = 0;        // chunks this save stored
  uint64_t added_bytes = 0;         // their plaintext bytes
  uint64_t added_stored_bytes = 0;  // their sealed bytes
  uint64_t skipped = 0;             // sockets, devices, FIFOs, unreadable or vanished entries

  bool operator==(const SnapshotStats&) const = default;
};

// What one save committed: immutable once written.
struct Record {
  std::string snapshot_id;
  std::string box;
  int64_t saved_at_ms = 0;
  std::string parent;  // the snapshot the save started from ("" for the first)
  bool quiesced = false;
  std::string manifest;         // the key of its manifest object (manifest_key())
  uint64_t manifest_bytes = 0;  // size of the sealed manifest object
  SnapshotStats stats;

  bool operator==(const Record&) const = default;
};

// The kept snapshots of a box, oldest first; what ListSnapshots shows and what retention,
// restore and the GC mark take the kept set from (never from a listing).
struct TimelineEntry {
  std::string snapshot_id;
  int64_t saved_at_ms = 0;
  bool pinned = false;
  bool quiesced = false;
  SnapshotStats stats;
  // The snapshot this one's manifest object may be a delta of (README.md §Delta manifests),
  // or "" when it is whole. A hint for prune: "" always means whole; a base may be stale (the
  // object was made whole since), never the other way round.
  std::string manifest_base;

  bool operator==(const TimelineEntry&) const = default;
};

struct Timeline {
  std::vector<TimelineEntry> entries;

  const TimelineEntry* find(std::string_view snapshot_id) const;
  bool operator==(const Timeline&) const = default;
};

struct Head {
  std::string snapshot_id;
  int64_t saved_at_ms = 0;

  bool operator==(const Head&) const = default;
};

// A delta chain (README.md §Delta manifests) is at most this many deltas long: restoring the
// oldest snapshot of a run reads this many small objects and one whole manifest.
inline constexpr size_t kMaxDeltaChain = 16;

// Commits the snapshot |record| describes (steps 2-5 above) and returns the record as
// written (manifest and manifest_bytes filled in). The record's snapshot_id, box and
// saved_at_ms must be set; box must equal location.box.
//
// With |parent_manifest| (the whole manifest of record.parent, the previous head), a step 6
// follows the commit: the parent's manifest object is rewritten as a delta of this one
// (product design §25.8), unless that would make a chain longer than kMaxDeltaChain. The
// step is space, not safety: if it fails the parent stays whole and the commit stands.
//
// Errors: kInvalidArgument for a bad location, id or box; kDataLoss if the current timeline
//   does not open; store errors. On error the head is unchanged unless the error came from
//   the head's own put (then it is either unchanged or committed, as the store's put is
//   atomic).
Result<Record> commit_snapshot(Store& store, const StateKeys& keys, const BoxLocation& location,
                               const Manifest& manifest, Record record, crypto::Random& random,
                               const Manifest* parent_manifest = nullptr);

// The head, or nullopt if the box was never saved.
// Errors: kDataLoss if it does not open; store errors.
Result<std::optional<Head>> load_head(Store& store, const StateKeys& keys,
                                      const BoxLocation& location);

// The timeline (empty if the box was never saved).
// Errors: kDataLoss if it does not open; store errors.
Result<Timeline> load_timeline(Store& store, const StateKeys& keys, const BoxLocation& location);

// Rewrites the timeline (retention drops entries, pinning flips a flag).
Status store_timeline(Store& store, const StateKeys& keys, const BoxLocation& location,
                      const Timeline& timeline, crypto::Random& random);

// The record / manifest of a committed snapshot.
// Errors: kDataLoss naming the snapshot if the object is missing (a committed snapshot's
//   objects must exist) or does not open; store errors.
Result<Record> load_record(Store& store, const StateKeys& keys, const BoxLocation& location,
                           std::string_view snapshot_id);
Result<Manifest> load_manifest(Store& store, const StateKeys& keys, const BoxLocation& location,
                               std::string_view snapshot_id);

// Reads whole manifests of one box's snapshots, resolving delta chains (README.md §Delta
// manifests). It remembers the last two manifests it resolved, so reading a timeline newest
// first reads each object once. Not thread-safe; the store must outlive it.
class ManifestReader {
 public:
  ManifestReader(Store& store, const StateKeys& keys, BoxLocation location)
      : store_(store), keys_(keys), location_(std::move(location)) {}

  // The whole manifest of |snapshot_id|.
  // Errors: those of load_manifest(), and kDataLoss naming the snapshot if a chain names a
  //   missing or invalid base, does not fit its base, or is longer than 64.
  Result<Manifest> load(std::string_view snapshot_id);

  // The object as stored: whole, or a delta (without resolving it).
  // Errors: as load_manifest().
  Result<ManifestObject> load_object(std::string_view snapshot_id);

 private:
  Store& store_;
  const StateKeys& keys_;
  BoxLocation location_;
  std::vector<std::pair<std::string, Manifest>> recent_;  // newest last, at most 2
};

// Makes the manifest object of |snapshot_id| whole again if it is a delta (the same key,
// sealed the same way) and returns it. A restore through presigned URLs needs this: the agent
// reads one object. Content never changes, so readers of the old object are unaffected.
// Errors: those of ManifestReader::load(); store errors of the put.
Result<Manifest> materialize_manifest(Store& store, const StateKeys& keys,
                                      const BoxLocation& location, std::string_view snapshot_id,
                                      crypto::Random& random);

// The additional data each object is sealed with (README.md §Metadata objects).
std::string manifest_additional_data(const BoxLocation& location, std::string_view snapshot_id);

}  // namespace cb::state
