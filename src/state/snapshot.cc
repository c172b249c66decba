#include "state/snapshot.h"

#include "crypto/hash.h"
#include "crypto/sealed.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <time.h>

namespace cb::state {

namespace {

using Json = nlohmann::ordered_json;

constexpr int kMetadataVersion = 1;

Status validate_segment(std::string_view what, std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) {
    return invalid_argument(std::string(what) + ": want 1.." + std::to_string(max) + " bytes");
  }
  if (s.front() == '.') return invalid_argument(std::string(what) + ": starts with '.'");
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return invalid_argument(std::string(what) + ": a character outside [A-Za-z0-9._-]");
  }
  return ok_status();
}

Json stats_json(const SnapshotStats& s) {
  return Json{{"files", s.files},
              {"dirs", s.dirs},
              {"symlinks", s.symlinks},
              {"logical_bytes", s.logical_bytes},
              {"changed_files", s.changed_files},
              {"added_chunks", s.added_chunks},
              {"added_bytes", s.added_bytes},
              {"added_stored_bytes", s.added_stored_bytes},
              {"skipped", s.skipped}};
}

// Members missing from older writers read as 0; others are ignored (the format can grow).
SnapshotStats stats_from(const Json& j) {
  SnapshotStats s;
  s.files = j.value("files", uint64_t{0});
  s.dirs = j.value("dirs", uint64_t{0});
  s.symlinks = j.value("symlinks", uint64_t{0});
  s.logical_bytes = j.value("logical_bytes", uint64_t{0});
  s.changed_files = j.value("changed_files", uint64_t{0});
  s.added_chunks = j.value("added_chunks", uint64_t{0});
  s.added_bytes = j.value("added_bytes", uint64_t{0});
  s.added_stored_bytes = j.value("added_stored_bytes", uint64_t{0});
  s.skipped = j.value("skipped", uint64_t{0});
  return s;
}

std::string record_ad(const BoxLocation& l, std::string_view id) {
  return "record/" + l.box + "/" + std::string(id);
}
std::string timeline_ad(const BoxLocation& l) { return "timeline/" + l.box; }
std::string head_ad(const BoxLocation& l) { return "head/" + l.box; }

Status put_sealed_json(Store& store, const StateKeys& keys, const std::string& key, const Json& doc,
                       const std::string& ad, crypto::Random& random) {
  return store.put(key, crypto::seal(keys.metadata_seal_key().bytes(), doc.dump(), ad, random));
}

// The JSON document sealed at |key|, or nullopt if there is no object (when |missing_ok|).
// |parse| turns it into T and may throw nlohmann's exceptions, which become kDataLoss here.
template <typename T, typename Parse>
Result<std::optional<T>> get_sealed_json(Store& store, const StateKeys& keys,
                                         const std::string& key, const std::string& ad,
                                         bool missing_ok, Parse parse) {
  auto sealed = store.get(key);
  if (!sealed.ok()) {
    if (sealed.status().code() == Code::kNotFound) {
      if (missing_ok) return std::optional<T>();
      return data_loss(key + ": missing");
    }
    return sealed.status();
  }
  auto plain = crypto::open(keys.metadata_seal_key().bytes(), *sealed, ad);
  if (!plain.ok()) {
    return data_loss(key + ": does not authenticate (" + std::string(plain.status().message()) +
                     ")");
  }
  Json doc = Json::parse(*plain, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return data_loss(key + ": not a JSON object");
  try {
    if (doc.value("v", 0) != kMetadataVersion) return data_loss(key + ": unknown version");
    return std::optional<T>(parse(doc));
  } catch (const nlohmann::json::exception& e) {
    return data_loss(key + ": malformed: " + e.what());
  }
}

Json timeline_json(const Timeline& t) {
  Json list = Json::array();
  for (const TimelineEntry& e : t.entries) {
    list.push_back(Json{{"id", e.snapshot_id},
                        {"saved_at_ms", e.saved_at_ms},
                        {"pinned", e.pinned},
                        {"quiesced", e.quiesced},
                        {"stats", stats_json(e.stats)}});
    if (!e.manifest_base.empty()) list.back()["base"] = e.manifest_base;
  }
  return Json{{"v", kMetadataVersion}, {"snapshots", std::move(list)}};
}

Timeline timeline_from(const Json& j) {
  Timeline t;
  for (const Json& e : j.at("snapshots")) {
    TimelineEntry entry;
    entry.snapshot_id = e.at("id").get<std::string>();
    entry.saved_at_ms = e.at("saved_at_ms").get<int64_t>();
    entry.pinned = e.value("pinned", false);
    entry.quiesced = e.value("quiesced", false);
    entry.stats = stats_from(e.value("stats", Json::object()));
    entry.manifest_base = e.value("base", "");
    t.entries.push_back(std::move(entry));
  }
  return t;
}

}  // namespace

Status validate_location(const BoxLocation& location) {
  RETURN_IF_ERROR(validate_segment("user", location.user, 128));
  RETURN_IF_ERROR(validate_segment("box", location.box, 128));
  return ok_status();
}

Status validate_snapshot_id(std::string_view id) { return validate_segment("snapshot id", id, 64); }

std::string user_prefix(std::string_view user) { return std::string(user) + "/"; }
std::string chunks_prefix(std::string_view user) { return std::string(user) + "/chunks/"; }
std::string chunk_key(std::string_view user, const ChunkId& id) {
  const std::string hex = id.hex();
  return chunks_prefix(user) + hex.substr(0, 2) + "/" + hex;
}
Result<ChunkId> chunk_id_of(std::string_view user, std::string_view key) {
  auto id = ChunkId::from_hex(key.substr(key.rfind('/') + 1));  // npos + 1: the whole key
  if (!id.ok() || chunk_key(user, *id) != key)
    return invalid_argument(std::string(key) + ": not a chunk key of " + std::string(user));
  return id;
}
std::string box_prefix(const BoxLocation& l) { return l.user + "/boxes/" + l.box + "/"; }
std::string snapshots_prefix(const BoxLocation& l) { return box_prefix(l) + "snapshots/"; }
std::string manifest_key(const BoxLocation& l, std::string_view id) {
  return snapshots_prefix(l) + std::string(id) + ".manifest";
}
std::string record_key(const BoxLocation& l, std::string_view id) {
  return snapshots_prefix(l) + std::string(id) + ".record";
}
std::string timeline_key(const BoxLocation& l) { return box_prefix(l) + "timeline"; }
std::string head_key(const BoxLocation& l) { return box_prefix(l) + "head"; }

std::string manifest_additional_data(const BoxLocation& l, std::string_view id) {
  return "manifest/" + l.box + "/" + std::string(id);
}

std::string new_snapshot_id(std::chrono::system_clock::time_point at, crypto::Random& random) {
  const int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
  time_t secs = time_t(ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  std::array<uint8_t, 4> suffix;
  random.fill(suffix);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d%02d%02dT%02d%02d%02d.%03dZ-%s", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000),
                crypto::hex_encode(std::span<const uint8_t>(suffix)).c_str());
  return buf;
}

const TimelineEntry* Timeline::find(std::string_view snapshot_id) const {
  for (const TimelineEntry& e : entries) {
    if (e.snapshot_id == snapshot_id) return &e;
  }
  return nullptr;
}

Result<Record> commit_snapshot(Store& store, const StateKeys& keys, const BoxLocation& location,
                               const Manifest& manifest, Record record, crypto::Random& random,
                               const Manifest* parent_manifest) {
  RETURN_IF_ERROR(validate_location(location));
  RETURN_IF_ERROR(validate_snapshot_id(record.snapshot_id));
  if (record.box != location.box) return invalid_argument("record: box differs from the location");
  if (Status s = validate_manifest(manifest); !s.ok()) return s.with_prefix("manifest");
  // Read the timeline first: if it cannot be appended to, nothing is written.
  ASSIGN_OR_RETURN(Timeline timeline, load_timeline(store, keys, location));
  if (timeline.find(record.snapshot_id) != nullptr) {
    return already_exists("snapshot " + record.snapshot_id + ": already in the timeline");
  }

  const std::string sealed_manifest =
      seal_manifest(keys, manifest, manifest_additional_data(location, record.snapshot_id), random);
  record.manifest = manifest_key(location, record.snapshot_id);
  record.manifest_bytes = sealed_manifest.size();
  RETURN_IF_ERROR(store.put(record.manifest, sealed_manifest));

  Json rec{{"v", kMetadataVersion},
           {"id", record.snapshot_id},
           {"box", record.box},
           {"saved_at_ms", record.saved_at_ms},
           {"parent", record.parent},
           {"quiesced", record.quiesced},
           {"manifest", record.manifest},
           {"manifest_bytes", record.manifest_bytes},
           {"stats", stats_json(record.stats)}};
  RETURN_IF_ERROR(put_sealed_json(store, keys, record_key(location, record.snapshot_id), rec,
                                  record_ad(location, record.snapshot_id), random));

  // Step 6 (after the commit) makes the parent's manifest a delta of this one, when its run
  // of deltas stays within kMaxDeltaChain; the timeline says so first (a hint may name a base
  // the object does not have yet, never the reverse: README.md §Delta manifests).
  bool parent_to_delta = false;
  if (parent_manifest != nullptr && !record.parent.empty()) {
    for (size_t i = timeline.entries.size(); i-- > 0;) {
      if (timeline.entries[i].snapshot_id != record.parent) continue;
      size_t run = 0;  // deltas right before the parent, whose chains will pass through it
      while (run < i && !timeline.entries[i - run - 1].manifest_base.empty()) ++run;
      if (timeline.entries[i].manifest_base.empty() && run + 1 <= kMaxDeltaChain) {
        timeline.entries[i].manifest_base = record.snapshot_id;
        parent_to_delta = true;
      }
      break;
    }
  }
  TimelineEntry entry;
  entry.snapshot_id = record.snapshot_id;
  entry.saved_at_ms = record.saved_at_ms;
  entry.quiesced = record.quiesced;
  entry.stats = record.stats;
  timeline.entries.push_back(std::move(entry));
  RETURN_IF_ERROR(store_timeline(store, keys, location, timeline, random));

  Json head{
      {"v", kMetadataVersion}, {"id", record.snapshot_id}, {"saved_at_ms", record.saved_at_ms}};
  RETURN_IF_ERROR(
      put_sealed_json(store, keys, head_key(location), head, head_ad(location), random));

  if (parent_to_delta) {
    // Best effort: on failure the parent stays whole, which costs only space.
    ManifestDelta delta = diff_manifests(manifest, record.snapshot_id, *parent_manifest);
    (void)store.put(manifest_key(location, record.parent),
                    seal_manifest_delta(keys, delta,
                                        manifest_additional_data(location, record.parent), random));
  }
  return record;
}

Result<std::optional<Head>> load_head(Store& store, const StateKeys& keys,
                                      const BoxLocation& location) {
  RETURN_IF_ERROR(validate_location(location));
  return get_sealed_json<Head>(
      store, keys, head_key(location), head_ad(location), true, [](const Json& j) {
        return Head{j.at("id").get<std::string>(), j.at("saved_at_ms").get<int64_t>()};
      });
}

Result<Timeline> load_timeline(Store& store, const StateKeys& keys, const BoxLocation& location) {
  RETURN_IF_ERROR(validate_location(location));
  ASSIGN_OR_RETURN(auto t, get_sealed_json<Timeline>(store, keys, timeline_key(location),
                                                     timeline_ad(location), true, timeline_from));
  if (!t.has_value()) return Timeline();
  return std::move(*t);
}

Status store_timeline(Store& store, const StateKeys& keys, const BoxLocation& location,
                      const Timeline& timeline, crypto::Random& random) {
  RETURN_IF_ERROR(validate_location(location));
  return put_sealed_json(store, keys, timeline_key(location), timeline_json(timeline),
                         timeline_ad(location), random);
}

Result<Record> load_record(Store& store, const StateKeys& keys, const BoxLocation& location,
                           std::string_view snapshot_id) {
  RETURN_IF_ERROR(validate_location(location));
  RETURN_IF_ERROR(validate_snapshot_id(snapshot_id));
  ASSIGN_OR_RETURN(
      auto r, get_sealed_json<Record>(store, keys, record_key(location, snapshot_id),
                                      record_ad(location, snapshot_id), false, [](const Json& j) {
                                        Record rec;
                                        rec.snapshot_id = j.at("id").get<std::string>();
                                        rec.box = j.at("box").get<std::string>();
                                        rec.saved_at_ms = j.at("saved_at_ms").get<int64_t>();
                                        rec.parent = j.value("parent", "");
                                        rec.quiesced = j.value("quiesced", false);
                                        rec.manifest = j.value("manifest", "");
                                        rec.manifest_bytes = j.value("manifest_bytes", uint64_t{0});
                                        rec.stats = stats_from(j.value("stats", Json::object()));
                                        return rec;
                                      }));
  if (r->snapshot_id != snapshot_id || r->box != location.box) {
    return data_loss(record_key(location, snapshot_id) + ": names another snapshot");
  }
  return std::move(*r);
}

Result<Manifest> load_manifest(Store& store, const StateKeys& keys, const BoxLocation& location,
                               std::string_view snapshot_id) {
  ManifestReader reader(store, keys, location);
  return reader.load(snapshot_id);
}

Result<ManifestObject> ManifestReader::load_object(std::string_view snapshot_id) {
  RETURN_IF_ERROR(validate_location(location_));
  RETURN_IF_ERROR(validate_snapshot_id(snapshot_id));
  const std::string key = manifest_key(location_, snapshot_id);
  auto sealed = store_.get(key);
  if (!sealed.ok()) {
    if (sealed.status().code() == Code::kNotFound) return data_loss(key + ": missing");
    return sealed.status();
  }
  return open_manifest_object(keys_, *sealed, manifest_additional_data(location_, snapshot_id));
}

Result<Manifest> ManifestReader::load(std::string_view snapshot_id) {
  constexpr size_t kMaxWalk = 64;  // past kMaxDeltaChain, for chains prune has not shortened
  std::vector<std::pair<std::string, ManifestDelta>> chain;  // snapshot_id first
  std::string id(snapshot_id);
  Manifest whole;
  while (true) {
    auto cached =
        std::find_if(recent_.begin(), recent_.end(), [&](const auto& r) { return r.first == id; });
    if (cached != recent_.end()) {
      whole = cached->second;
      break;
    }
    if (chain.size() > kMaxWalk) {
      return data_loss("manifest of snapshot " + std::string(snapshot_id) +
                       ": a delta chain longer than " + std::to_string(kMaxWalk));
    }
    auto object = load_object(id);
    if (!object.ok()) {
      if (chain.empty()) return object.status();
      return object.status().with_prefix("manifest of snapshot " + std::string(snapshot_id) +
                                         ": base " + id);
    }
    if (!object->delta.has_value()) {
      whole = std::move(object->whole);
      break;
    }
    std::string base = object->delta->base;
    if (!validate_snapshot_id(base).ok() || base == id) {
      return data_loss("manifest of snapshot " + id + ": a delta of an invalid base");
    }
    chain.emplace_back(id, std::move(*object->delta));
    id = std::move(base);
  }
  // Apply from the whole base back to |snapshot_id|.
  for (size_t i = chain.size(); i-- > 0;) {
    auto next = apply_delta(whole, chain[i].second);
    if (!next.ok()) return next.status().with_prefix("manifest of snapshot " + chain[i].first);
    whole = std::move(*next);
  }
  recent_.erase(std::remove_if(recent_.begin(), recent_.end(),
                               [&](const auto& r) { return r.first == snapshot_id; }),
                recent_.end());
  if (recent_.size() >= 2) recent_.erase(recent_.begin());
  recent_.emplace_back(std::string(snapshot_id), whole);
  return whole;
}

Result<Manifest> materialize_manifest(Store& store, const StateKeys& keys,
                                      const BoxLocation& location, std::string_view snapshot_id,
                                      crypto::Random& random) {
  ManifestReader reader(store, keys, location);
  ASSIGN_OR_RETURN(ManifestObject object, reader.load_object(snapshot_id));
  if (!object.delta.has_value()) return std::move(object.whole);
  ASSIGN_OR_RETURN(Manifest whole, reader.load(snapshot_id));
  RETURN_IF_ERROR(store.put(
      manifest_key(location, snapshot_id),
      seal_manifest(keys, whole, manifest_additional_data(location, snapshot_id), random)));
  return whole;
}

}  // namespace cb::state
