#include "state/prune.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>

namespace cb::state {

namespace {

constexpr std::string_view kRecordSuffix = ".record";
constexpr std::string_view kManifestSuffix = ".manifest";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Rebases, newest first, every kept delta whose base is not kept (or whose chain would grow
// past kMaxDeltaChain) onto the next newer kept snapshot, or makes it whole. Newest first, so
// each new base is already independent of what step 3 deletes; every put keeps the content,
// so a crash here changes nothing a reader sees. Updates the hints in |kept| and returns
// whether any changed.
Result<bool> compact_kept(Store& store, const StateKeys& keys, const BoxLocation& location,
                          Timeline& kept, const std::set<std::string, std::less<>>& named,
                          bool dry_run, crypto::Random& random, PruneResult& result) {
  ManifestReader reader(store, keys, location);
  std::map<std::string, size_t, std::less<>> chain;  // kept id -> deltas to a whole manifest
  bool changed = false;
  const TimelineEntry* next = nullptr;  // the next newer kept snapshot
  for (size_t i = kept.entries.size(); i-- > 0; next = &kept.entries[i]) {
    TimelineEntry& e = kept.entries[i];
    if (e.manifest_base.empty()) {  // whole, by the hint's rule
      chain[e.snapshot_id] = 0;
      continue;
    }
    ASSIGN_OR_RETURN(ManifestObject object, reader.load_object(e.snapshot_id));
    if (!object.delta.has_value()) {  // made whole since: fix the hint
      e.manifest_base.clear();
      changed = true;
      chain[e.snapshot_id] = 0;
      continue;
    }
    auto base = chain.find(object.delta->base);
    if (named.count(object.delta->base) != 0 && base != chain.end() &&
        base->second + 1 <= kMaxDeltaChain) {
      chain[e.snapshot_id] = base->second + 1;
      if (e.manifest_base != object.delta->base) {
        e.manifest_base = object.delta->base;
        changed = true;
      }
      continue;
    }
    // Rebase: resolve it (its chain is intact until step 3) and store it anew.
    ++result.compacted;
    changed = true;
    const bool as_delta = next != nullptr && chain.at(next->snapshot_id) + 1 <= kMaxDeltaChain;
    e.manifest_base = as_delta ? next->snapshot_id : "";
    chain[e.snapshot_id] = as_delta ? chain.at(next->snapshot_id) + 1 : 0;
    if (dry_run) continue;
    ASSIGN_OR_RETURN(Manifest whole, reader.load(e.snapshot_id));
    const std::string ad = manifest_additional_data(location, e.snapshot_id);
    std::string sealed;
    if (as_delta) {
      ASSIGN_OR_RETURN(Manifest next_whole, reader.load(next->snapshot_id));
      sealed = seal_manifest_delta(keys, diff_manifests(next_whole, next->snapshot_id, whole), ad,
                                   random);
    } else {
      sealed = seal_manifest(keys, whole, ad, random);
    }
    RETURN_IF_ERROR(store.put(manifest_key(location, e.snapshot_id), sealed));
  }
  return changed;
}

}  // namespace

Result<std::vector<std::string>> list_boxes(Store& store, std::string_view user) {
  RETURN_IF_ERROR(validate_location(BoxLocation{std::string(user), "x"}));
  const std::string prefix = user_prefix(user) + "boxes/";
  std::vector<std::string> boxes;
  std::string after;
  while (true) {
    ASSIGN_OR_RETURN(ListPage page, store.list(prefix, after, 1));
    if (page.objects.empty()) break;
    const std::string& key = page.objects.front().key;
    const size_t slash = key.find('/', prefix.size());
    if (slash == std::string::npos) {
      after = key;  // an object right under boxes/ (not ours): step over it
      continue;
    }
    boxes.push_back(key.substr(prefix.size(), slash - prefix.size()));
    // Every key under <box>/ sorts before <box>0 ('0' follows '/', and no key character lies
    // between them), and every other box's keys after it or before <box>/.
    after = prefix + boxes.back() + "0";
  }
  // Key order puts "b.x" before "b" ('.' < '/'): sort by name.
  std::sort(boxes.begin(), boxes.end());
  return boxes;
}

Result<PruneResult> prune_box(Store& store, const StateKeys& keys, const BoxLocation& location,
                              const PruneOptions& options, crypto::Random& random) {
  RETURN_IF_ERROR(validate_location(location));
  PruneResult result;

  // 1. Decide. Both reads must succeed: a timeline that does not open is never rewritten.
  ASSIGN_OR_RETURN(std::optional<Head> head, load_head(store, keys, location));
  ASSIGN_OR_RETURN(Timeline timeline, load_timeline(store, keys, location));
  if (head.has_value()) result.head = head->snapshot_id;
  result.plan = apply_retention(timeline, result.head, options.rule, options.now);

  std::set<std::string, std::less<>> named;  // what the new timeline (and the head) names
  Timeline kept;
  for (size_t i = 0; i < timeline.entries.size(); ++i) {
    if (!result.plan.decisions[i].keep) continue;
    kept.entries.push_back(timeline.entries[i]);
    named.insert(timeline.entries[i].snapshot_id);
  }
  if (!result.head.empty()) named.insert(result.head);

  // 1b. Compaction (§25.8): no kept manifest may be a delta of one step 3 deletes.
  ASSIGN_OR_RETURN(bool hints_changed, compact_kept(store, keys, location, kept, named,
                                                    options.dry_run, random, result));

  // 2. The timeline without the dropped snapshots: the commit point.
  if (kept.entries.size() != timeline.entries.size() || hints_changed) {
    if (!options.dry_run) RETURN_IF_ERROR(store_timeline(store, keys, location, kept, random));
    result.timeline_rewritten = true;
  }

  // 3. Records, then manifests, of every snapshot the timeline does not name.
  ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, list_all(store, snapshots_prefix(location)));
  const size_t base = snapshots_prefix(location).size();
  std::vector<std::string> records, manifests;
  for (const ObjectInfo& o : objects) {
    std::string_view name = std::string_view(o.key).substr(base);
    std::string_view id;
    std::vector<std::string>* out = nullptr;
    if (ends_with(name, kRecordSuffix)) {
      id = name.substr(0, name.size() - kRecordSuffix.size());
      out = &records;
    } else if (ends_with(name, kManifestSuffix)) {
      id = name.substr(0, name.size() - kManifestSuffix.size());
      out = &manifests;
    } else {
      continue;  // not a snapshot object: not ours to delete
    }
    if (id.empty() || id.find('/') != std::string_view::npos || named.count(id) != 0) continue;
    out->push_back(o.key);
    result.deleted_bytes += o.size;
  }
  result.deleted = records;
  result.deleted.insert(result.deleted.end(), manifests.begin(), manifests.end());
  if (!options.dry_run) {
    RETURN_IF_ERROR(delete_all(store, records));
    RETURN_IF_ERROR(delete_all(store, manifests));
  }
  return result;
}

}  // namespace cb::state
