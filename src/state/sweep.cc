#include "state/sweep.h"

#include "state/manifest.h"
#include "state/prune.h"
#include "state/snapshot.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace cb::state {

namespace {

// Marks every snapshot the timelines and heads of |mark.user|'s boxes name and |mark| lacks;
// returns how many it added. |boxes| gets the number of boxes.
Result<size_t> mark_boxes(Store& store, const StateKeys& keys, SweepMark& mark, size_t* boxes) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, list_boxes(store, mark.user));
  if (boxes != nullptr) *boxes = names.size();
  size_t added = 0;
  for (const std::string& box : names) {
    BoxLocation location{mark.user, box};
    ASSIGN_OR_RETURN(std::optional<Head> head, load_head(store, keys, location));
    ASSIGN_OR_RETURN(Timeline timeline, load_timeline(store, keys, location));
    // Newest first: deltas are of newer snapshots (README.md §Delta manifests), so the
    // reader resolves each from the one before and reads every object once.
    std::vector<std::string> ids;
    if (head.has_value()) ids.push_back(head->snapshot_id);
    for (auto e = timeline.entries.rbegin(); e != timeline.entries.rend(); ++e) {
      ids.push_back(e->snapshot_id);
    }
    std::set<std::string>& done = mark.snapshots[box];
    ManifestReader reader(store, keys, location);
    for (const std::string& id : ids) {
      if (done.count(id) != 0) continue;
      ASSIGN_OR_RETURN(Manifest manifest, reader.load(id));
      for (const ChunkId& c : referenced_chunks(manifest)) mark.chunks.insert(c);
      done.insert(id);
      ++added;
    }
  }
  return added;
}

}  // namespace

Result<SweepMark> sweep_mark(Store& store, const StateKeys& keys, std::string_view user) {
  RETURN_IF_ERROR(validate_location(BoxLocation{std::string(user), "x"}));
  SweepMark mark;
  mark.user = std::string(user);
  RETURN_IF_ERROR(mark_boxes(store, keys, mark, nullptr).status());
  ASSIGN_OR_RETURN(mark.listed, list_all(store, chunks_prefix(user)));
  return mark;
}

Result<std::unordered_set<ChunkId, ChunkIdHash>> mark_user_chunks(Store& store,
                                                                  const StateKeys& keys,
                                                                  std::string_view user) {
  RETURN_IF_ERROR(validate_location(BoxLocation{std::string(user), "x"}));
  SweepMark mark;
  mark.user = std::string(user);
  RETURN_IF_ERROR(mark_boxes(store, keys, mark, nullptr).status());
  return std::move(mark.chunks);
}

Result<SweepResult> sweep_finish(Store& store, const StateKeys& keys, SweepMark&& mark,
                                 const SweepOptions& options) {
  RETURN_IF_ERROR(validate_location(BoxLocation{mark.user, "x"}));
  if (options.delete_batch == 0 || options.delete_batch > kMaxDeleteBatch) {
    return invalid_argument("sweep: delete_batch must be 1.." + std::to_string(kMaxDeleteBatch));
  }
  SweepResult result;
  // 2. The snapshots committed since the mark.
  size_t before = 0;
  for (const auto& [box, ids] : mark.snapshots) before += ids.size();
  ASSIGN_OR_RETURN(result.late_snapshots, mark_boxes(store, keys, mark, &result.boxes));
  result.snapshots = before + result.late_snapshots;
  result.marked_chunks = mark.chunks.size();

  // 3. Garbage: listed, a well-formed chunk key, and not marked.
  std::vector<ChunkId> garbage;
  std::vector<std::string> garbage_keys;
  for (const ObjectInfo& o : mark.listed) {
    auto id = chunk_id_of(mark.user, o.key);
    if (!id.ok()) {
      ++result.foreign_objects;
      continue;
    }
    ++result.listed_chunks;
    result.listed_bytes += o.size;
    if (mark.chunks.count(*id) != 0) continue;
    garbage.push_back(*id);
    garbage_keys.push_back(o.key);
    ++result.garbage_chunks;
    result.garbage_bytes += o.size;
  }
  if (options.dry_run || garbage.empty()) return result;

  // 4. The index first, then the deletes (the caller still holds the lock).
  if (options.before_delete) RETURN_IF_ERROR(options.before_delete(garbage));
  std::span<const std::string> rest(garbage_keys);
  while (!rest.empty()) {
    const size_t n = std::min(rest.size(), options.delete_batch);
    if (options.before_batch)
      options.before_batch(garbage_keys.size() - rest.size(), garbage_keys.size());
    RETURN_IF_ERROR(store.delete_batch(rest.first(n)));
    rest = rest.subspan(n);
  }
  return result;
}

Result<SweepResult> sweep_user(Store& store, const StateKeys& keys, std::string_view user,
                               UserLock& lock, const SweepOptions& options) {
  if (options.delete_batch == 0 || options.delete_batch > kMaxDeleteBatch) {
    return invalid_argument("sweep: delete_batch must be 1.." + std::to_string(kMaxDeleteBatch));
  }
  // 1. Mark and list, without the lock.
  ASSIGN_OR_RETURN(SweepMark mark, sweep_mark(store, keys, user));
  if (options.after_mark_for_test) options.after_mark_for_test();
  // 2-4 under the lock; |guard| releases it when this returns.
  ASSIGN_OR_RETURN(UserLockGuard guard, UserLockGuard::acquire(lock, std::string(user),
                                                               UserLockGuard::Mode::kExclusive));
  return sweep_finish(store, keys, std::move(mark), options);
}

}  // namespace cb::state
