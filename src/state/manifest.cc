#include "state/manifest.h"

#include "crypto/sealed.h"
#include "state/chunk.h"
#include "state/encoding_internal.h"
#include "state/zstd_internal.h"

#include <algorithm>
#include <unordered_map>

namespace cb::state {

namespace {

constexpr std::string_view kMagic = "CBM1";
constexpr int kManifestZstdLevel = 3;
constexpr uint64_t kMaxEntries = 100'000'000;
constexpr uint64_t kMaxNames = 1'000'000;

unsigned order_byte(char c) { return c == '/' ? 0u : unsigned(uint8_t(c)) + 1; }

std::string entry_name(const Entry& e) { return "entry \"" + e.path + "\""; }

}  // namespace

bool path_less(std::string_view a, std::string_view b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return order_byte(a[i]) < order_byte(b[i]);
  }
  return a.size() < b.size();
}

Status validate_path(std::string_view path) {
  if (path.empty()) return invalid_argument("path: empty");
  if (path.size() > kMaxPathSize) return invalid_argument("path: longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos) return invalid_argument("path: contains NUL");
  if (path.front() == '/') return invalid_argument("path: absolute (starts with '/')");
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view part = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty()) return invalid_argument("path: empty component");
    if (part == "." || part == "..") return invalid_argument("path: \".\" or \"..\" component");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return ok_status();
}

bool path_within(std::string_view path, std::string_view dir) {
  if (dir.empty()) return true;
  if (path.size() < dir.size() || path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || path[dir.size()] == '/';
}

const Entry* Manifest::find(std::string_view path) const {
  auto it =
      std::lower_bound(entries.begin(), entries.end(), path,
                       [](const Entry& e, std::string_view p) { return path_less(e.path, p); });
  if (it == entries.end() || it->path != path) return nullptr;
  return &*it;
}

void sort_entries(Manifest& manifest) {
  std::sort(manifest.entries.begin(), manifest.entries.end(),
            [](const Entry& a, const Entry& b) { return path_less(a.path, b.path); });
}

Status validate_manifest(const Manifest& manifest) {
  std::vector<const Entry*> ancestors;  // the chain of entries enclosing the current one
  const Entry* previous = nullptr;
  for (const Entry& e : manifest.entries) {
    if (Status s = validate_path(e.path); !s.ok()) return s.with_prefix(entry_name(e));
    if (previous != nullptr && !path_less(previous->path, e.path)) {
      return invalid_argument(entry_name(e) + ": out of order or duplicate");
    }
    previous = &e;
    if (e.kind != EntryKind::kFile && e.kind != EntryKind::kDir && e.kind != EntryKind::kSymlink) {
      return invalid_argument(entry_name(e) + ": unknown kind");
    }
    if (e.mode > 07777) return invalid_argument(entry_name(e) + ": mode above 07777");
    if (e.user.size() > kMaxNameSize || e.group.size() > kMaxNameSize) {
      return invalid_argument(entry_name(e) + ": owner name longer than 256 bytes");
    }
    if (e.kind == EntryKind::kFile) {
      uint64_t sum = 0;
      for (const ChunkRef& c : e.chunks) {
        if (c.size == 0 || c.size > kMaxChunkSize) {
          return invalid_argument(entry_name(e) + ": chunk size out of range");
        }
        sum += c.size;
      }
      if (sum != e.size) return invalid_argument(entry_name(e) + ": size is not the sum of chunks");
      if (!e.target.empty()) return invalid_argument(entry_name(e) + ": a file with a link target");
    } else {
      if (!e.chunks.empty() || e.size != 0) {
        return invalid_argument(entry_name(e) + ": content on a non-file");
      }
      if (e.kind == EntryKind::kSymlink) {
        if (e.target.empty() || e.target.size() > kMaxPathSize ||
            e.target.find('\0') != std::string::npos) {
          return invalid_argument(entry_name(e) + ": bad link target");
        }
      } else if (!e.target.empty()) {
        return invalid_argument(entry_name(e) + ": a directory with a link target");
      }
    }
    while (!ancestors.empty() && !path_within(e.path, ancestors.back()->path)) ancestors.pop_back();
    if (!ancestors.empty() && ancestors.back()->kind != EntryKind::kDir) {
      return invalid_argument(entry_name(e) + ": below \"" + ancestors.back()->path +
                              "\", which is not a directory");
    }
    ancestors.push_back(&e);
  }
  return ok_status();
}

namespace {

constexpr uint64_t kFlagDelta = 1;
constexpr size_t kMaxBaseIdSize = 64;

// Appends shared:varint suffix:bytes for |path| after |previous| (README.md §Manifest).
void put_path(std::string& out, std::string_view previous, std::string_view path) {
  size_t shared = 0;
  const size_t limit = std::min(previous.size(), path.size());
  while (shared < limit && previous[shared] == path[shared]) ++shared;
  internal::put_varint(out, shared);
  internal::put_bytes(out, path.substr(shared));
}

Result<std::string> read_path(internal::Reader& r, const std::string& previous) {
  ASSIGN_OR_RETURN(uint64_t shared, r.varint());
  if (shared > previous.size()) return r.bad("shared prefix longer than the previous path");
  ASSIGN_OR_RETURN(std::string_view suffix, r.bytes(kMaxPathSize));
  std::string path = previous.substr(0, size_t(shared));
  path += suffix;
  if (path.size() > kMaxPathSize) return r.bad("path longer than 4096 bytes");
  return path;
}

// scan_started_ns, the name table and the entries: the part a whole manifest and a delta
// share.
void encode_body(std::string& out, const Manifest& manifest) {
  using internal::put_bytes;
  using internal::put_svarint;
  using internal::put_varint;
  // The name table: every distinct non-empty user or group name, in first-use order.
  std::vector<std::string_view> names;
  std::unordered_map<std::string_view, uint64_t> name_index;
  auto index_of = [&](const std::string& name) -> uint64_t {
    if (name.empty()) return 0;
    auto [it, added] = name_index.emplace(name, names.size() + 1);
    if (added) names.push_back(name);
    return it->second;
  };
  for (const Entry& e : manifest.entries) {
    index_of(e.user);
    index_of(e.group);
  }
  out.reserve(out.size() + 64 + manifest.entries.size() * 48);
  put_svarint(out, manifest.scan_started_ns);
  put_varint(out, names.size());
  for (std::string_view n : names) put_bytes(out, n);
  put_varint(out, manifest.entries.size());
  std::string_view previous;
  for (const Entry& e : manifest.entries) {
    put_path(out, previous, e.path);
    previous = e.path;
    out += char(e.kind);
    put_varint(out, e.mode);
    put_varint(out, e.uid);
    put_varint(out, e.gid);
    put_varint(out, index_of(e.user));
    put_varint(out, index_of(e.group));
    put_svarint(out, e.mtime_ns);
    put_svarint(out, e.ctime_ns);
    put_varint(out, e.inode);
    if (e.kind == EntryKind::kFile) {
      put_varint(out, e.size);
      put_varint(out, e.chunks.size());
      for (const ChunkRef& c : e.chunks) {
        out.append(reinterpret_cast<const char*>(c.id.bytes.data()), c.id.bytes.size());
        put_varint(out, c.size);
      }
    } else if (e.kind == EntryKind::kSymlink) {
      put_bytes(out, e.target);
    }
  }
}

Result<Manifest> decode_body(internal::Reader& r) {
  Manifest m;
  ASSIGN_OR_RETURN(m.scan_started_ns, r.svarint());
  ASSIGN_OR_RETURN(uint64_t name_count, r.varint());
  if (name_count > kMaxNames || name_count > r.remaining()) return r.bad("too many names");
  std::vector<std::string_view> names(static_cast<size_t>(name_count));
  for (auto& n : names) {
    ASSIGN_OR_RETURN(n, r.bytes(kMaxNameSize));
  }
  auto name_at = [&](uint64_t i) -> Result<std::string> {
    if (i == 0) return std::string();
    if (i > names.size()) return r.bad("name index out of range");
    return std::string(names[size_t(i - 1)]);
  };
  ASSIGN_OR_RETURN(uint64_t count, r.varint());
  // Every entry takes at least 12 bytes, so a count beyond that is a lie, not a big manifest.
  if (count > kMaxEntries || count > r.remaining() / 12 + 1) return r.bad("too many entries");
  m.entries.reserve(size_t(count));
  std::string previous;
  for (uint64_t i = 0; i < count; ++i) {
    Entry e;
    ASSIGN_OR_RETURN(e.path, read_path(r, previous));
    ASSIGN_OR_RETURN(uint8_t kind, r.byte());
    e.kind = EntryKind(kind);
    ASSIGN_OR_RETURN(uint64_t mode, r.varint());
    ASSIGN_OR_RETURN(uint64_t uid, r.varint());
    ASSIGN_OR_RETURN(uint64_t gid, r.varint());
    if (mode > 07777 || uid > UINT32_MAX || gid > UINT32_MAX) return r.bad("mode or owner range");
    e.mode = uint32_t(mode);
    e.uid = uint32_t(uid);
    e.gid = uint32_t(gid);
    ASSIGN_OR_RETURN(uint64_t user, r.varint());
    ASSIGN_OR_RETURN(e.user, name_at(user));
    ASSIGN_OR_RETURN(uint64_t group, r.varint());
    ASSIGN_OR_RETURN(e.group, name_at(group));
    ASSIGN_OR_RETURN(e.mtime_ns, r.svarint());
    ASSIGN_OR_RETURN(e.ctime_ns, r.svarint());
    ASSIGN_OR_RETURN(e.inode, r.varint());
    if (e.kind == EntryKind::kFile) {
      ASSIGN_OR_RETURN(e.size, r.varint());
      ASSIGN_OR_RETURN(uint64_t chunks, r.varint());
      if (chunks > r.remaining() / (kChunkIdSize + 1)) return r.bad("too many chunks");
      e.chunks.resize(size_t(chunks));
      for (ChunkRef& c : e.chunks) {
        ASSIGN_OR_RETURN(std::string_view id, r.raw(kChunkIdSize));
        std::copy(id.begin(), id.end(), reinterpret_cast<char*>(c.id.bytes.data()));
        ASSIGN_OR_RETURN(uint64_t size, r.varint());
        if (size == 0 || size > kMaxChunkSize) return r.bad("chunk size out of range");
        c.size = uint32_t(size);
      }
    } else if (e.kind == EntryKind::kSymlink) {
      ASSIGN_OR_RETURN(std::string_view target, r.bytes(kMaxPathSize));
      e.target.assign(target);
    }
    previous = e.path;
    m.entries.push_back(std::move(e));
  }
  if (!r.done()) return r.bad("trailing bytes");
  if (Status s = validate_manifest(m); !s.ok()) {
    return data_loss("manifest: invalid: " + std::string(s.message()));
  }
  return m;
}

Status data_loss_at(std::string_view path, std::string_view what) {
  return data_loss("manifest delta: \"" + std::string(path) + "\": " + std::string(what));
}

}  // namespace

std::string encode_manifest(const Manifest& manifest) {
  std::string out(kMagic);
  internal::put_varint(out, 0);  // flags
  encode_body(out, manifest);
  return out;
}

std::string encode_manifest_delta(const ManifestDelta& delta) {
  std::string out(kMagic);
  internal::put_varint(out, kFlagDelta);
  internal::put_bytes(out, delta.base);
  internal::put_varint(out, delta.removed.size());
  std::string_view previous;
  for (const std::string& path : delta.removed) {
    put_path(out, previous, path);
    previous = path;
  }
  encode_body(out, delta.changes);
  return out;
}

Result<ManifestObject> decode_manifest_object(std::string_view data) {
  internal::Reader r(data, "manifest");
  ASSIGN_OR_RETURN(std::string_view magic, r.raw(kMagic.size()));
  if (magic != kMagic) return r.bad("unknown magic (not a version 1 manifest)");
  ASSIGN_OR_RETURN(uint64_t flags, r.varint());
  if (flags != 0 && flags != kFlagDelta) return r.bad("unknown flags " + std::to_string(flags));
  ManifestObject object;
  if (flags == kFlagDelta) {
    ManifestDelta delta;
    ASSIGN_OR_RETURN(std::string_view base, r.bytes(kMaxBaseIdSize));
    if (base.empty()) return r.bad("delta without a base");
    delta.base.assign(base);
    ASSIGN_OR_RETURN(uint64_t removed, r.varint());
    // Every removed path takes at least 2 bytes.
    if (removed > kMaxEntries || removed > r.remaining() / 2) return r.bad("too many removed");
    delta.removed.reserve(size_t(removed));
    std::string previous;
    for (uint64_t i = 0; i < removed; ++i) {
      ASSIGN_OR_RETURN(std::string path, read_path(r, previous));
      if (Status s = validate_path(path); !s.ok()) {
        return data_loss("manifest: removed path: " + std::string(s.message()));
      }
      if (i > 0 && !path_less(previous, path)) return r.bad("removed paths out of order");
      previous = path;
      delta.removed.push_back(std::move(path));
    }
    ASSIGN_OR_RETURN(delta.changes, decode_body(r));
    object.delta = std::move(delta);
  } else {
    ASSIGN_OR_RETURN(object.whole, decode_body(r));
  }
  return object;
}

Result<Manifest> decode_manifest(std::string_view data) {
  ASSIGN_OR_RETURN(ManifestObject object, decode_manifest_object(data));
  if (object.delta.has_value()) {
    return failed_precondition("manifest: a delta of snapshot " + object.delta->base +
                               ", not a whole manifest");
  }
  return std::move(object.whole);
}

ManifestDelta diff_manifests(const Manifest& base, std::string_view base_id,
                             const Manifest& target) {
  ManifestDelta delta;
  delta.base = std::string(base_id);
  delta.changes.scan_started_ns = target.scan_started_ns;
  auto b = base.entries.begin();
  auto t = target.entries.begin();
  while (b != base.entries.end() || t != target.entries.end()) {
    if (t == target.entries.end() || (b != base.entries.end() && path_less(b->path, t->path))) {
      delta.removed.push_back(b->path);
      ++b;
    } else if (b == base.entries.end() || path_less(t->path, b->path)) {
      delta.changes.entries.push_back(*t);
      ++t;
    } else {
      if (!(*b == *t)) delta.changes.entries.push_back(*t);
      ++b;
      ++t;
    }
  }
  return delta;
}

Result<Manifest> apply_delta(const Manifest& base, const ManifestDelta& delta) {
  Manifest out;
  out.scan_started_ns = delta.changes.scan_started_ns;
  out.entries.reserve(base.entries.size() + delta.changes.entries.size());
  auto b = base.entries.begin();
  auto c = delta.changes.entries.begin();
  auto r = delta.removed.begin();
  while (b != base.entries.end() || c != delta.changes.entries.end()) {
    const bool take_base = c == delta.changes.entries.end() ||
                           (b != base.entries.end() && path_less(b->path, c->path));
    if (take_base) {
      // A removed path the merge passes must be this base entry.
      if (r != delta.removed.end() && path_less(*r, b->path)) {
        return data_loss_at(*r, "removed, but not in the base");
      }
      if (r != delta.removed.end() && *r == b->path) {
        ++r;
      } else {
        out.entries.push_back(*b);
      }
      ++b;
      continue;
    }
    if (b != base.entries.end() && b->path == c->path) {
      if (r != delta.removed.end() && *r == b->path) {
        return data_loss_at(*r, "both removed and changed");
      }
      ++b;  // replaced
    }
    out.entries.push_back(*c);
    ++c;
  }
  if (r != delta.removed.end()) return data_loss_at(*r, "removed, but not in the base");
  if (Status s = validate_manifest(out); !s.ok()) {
    return data_loss("manifest delta: the result is invalid: " + std::string(s.message()));
  }
  return out;
}

std::string seal_manifest(const StateKeys& keys, const Manifest& manifest,
                          std::string_view additional_data, crypto::Random& random) {
  std::string compressed = internal::zstd_compress(encode_manifest(manifest), kManifestZstdLevel);
  return crypto::seal(keys.manifest_seal_key().bytes(), compressed, additional_data, random);
}

std::string seal_manifest_delta(const StateKeys& keys, const ManifestDelta& delta,
                                std::string_view additional_data, crypto::Random& random) {
  std::string compressed =
      internal::zstd_compress(encode_manifest_delta(delta), kManifestZstdLevel);
  return crypto::seal(keys.manifest_seal_key().bytes(), compressed, additional_data, random);
}

Result<ManifestObject> open_manifest_object(const StateKeys& keys, std::string_view sealed,
                                            std::string_view additional_data) {
  auto compressed = crypto::open(keys.manifest_seal_key().bytes(), sealed, additional_data);
  if (!compressed.ok()) {
    return data_loss("manifest " + std::string(additional_data) + ": does not authenticate (" +
                     std::string(compressed.status().message()) + ")");
  }
  ASSIGN_OR_RETURN(std::string plain,
                   internal::zstd_decompress(*compressed, kMaxManifestSize, "manifest"));
  return decode_manifest_object(plain);
}

Result<Manifest> open_manifest(const StateKeys& keys, std::string_view sealed,
                               std::string_view additional_data) {
  ASSIGN_OR_RETURN(ManifestObject object, open_manifest_object(keys, sealed, additional_data));
  if (object.delta.has_value()) {
    return failed_precondition("manifest " + std::string(additional_data) +
                               ": a delta of snapshot " + object.delta->base +
                               ", not a whole manifest");
  }
  return std::move(object.whole);
}

std::vector<ChunkId> referenced_chunks(const Manifest& manifest) {
  std::vector<ChunkId> ids;
  for (const Entry& e : manifest.entries) {
    for (const ChunkRef& c : e.chunks) ids.push_back(c.id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Result<std::vector<const Entry*>> select_entries(const Manifest& manifest,
                                                 std::span<const std::string> paths) {
  for (const std::string& p : paths) RETURN_IF_ERROR(validate_path(p));
  std::vector<const Entry*> out;
  for (const Entry& e : manifest.entries) {
    bool in = paths.empty();
    for (size_t i = 0; !in && i < paths.size(); ++i) in = path_within(e.path, paths[i]);
    if (in) out.push_back(&e);
  }
  return out;
}

Result<std::vector<const Entry*>> list_directory(const Manifest& manifest, std::string_view dir) {
  std::vector<const Entry*> out;
  if (dir.empty()) {
    // Top-level entries: those with no ancestor entry. In path order a subtree is contiguous,
    // so an entry is top-level unless it lies within the last top-level one.
    const Entry* top = nullptr;
    for (const Entry& e : manifest.entries) {
      if (top != nullptr && path_within(e.path, top->path)) continue;
      top = &e;
      out.push_back(&e);
    }
    return out;
  }
  RETURN_IF_ERROR(validate_path(dir));
  const Entry* d = manifest.find(dir);
  if (d == nullptr) return not_found("\"" + std::string(dir) + "\": not in the snapshot");
  if (d->kind != EntryKind::kDir) {
    return failed_precondition("\"" + std::string(dir) + "\": not a directory");
  }
  // The subtree follows d contiguously; children are the entries whose parent is dir.
  for (const Entry* e = d + 1; e != manifest.entries.data() + manifest.entries.size(); ++e) {
    if (!path_within(e->path, dir)) break;
    std::string_view rest = std::string_view(e->path).substr(dir.size() + 1);
    if (rest.find('/') == std::string_view::npos) out.push_back(e);
  }
  return out;
}

}  // namespace cb::state
