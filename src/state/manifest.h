#pragma once
// Manifest: the file tree of one snapshot (README.md §Manifest): directories, regular files
// with their chunk lists, and symlinks, each with mode, owner (ids and names), mtime and the
// stat fields a later scan compares to skip unchanged files. Serialized in a compact binary
// form (prefix-compressed paths, varints, a name table), compressed with zstd and sealed
// under the manifest subkey, bound to the box and snapshot it belongs to.
//
// Paths are box paths without the leading '/' ("home/user/notes.txt"): '/'-separated,
// no empty, "." or ".." component, no NUL, at most kMaxPathSize bytes. Entries are sorted in
// path order (path_less: component by component, so a directory's subtree follows it
// contiguously) and unique. A path's ancestors need not be entries (the roots' parents are
// not), but any ancestor that is an entry is a directory.
//
// Thread-safety: values; const access from several threads is safe.

#include "base/result.h"
#include "crypto/random.h"
#include "state/keys.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::state {

inline constexpr size_t kMaxPathSize = 4096;
inline constexpr size_t kMaxNameSize = 256;  // user and group names
// The largest manifest plaintext open_manifest() accepts (about 10 M files).
inline constexpr size_t kMaxManifestSize = size_t(1) << 30;

enum class EntryKind : uint8_t { kFile = 1, kDir = 2, kSymlink = 3 };

struct ChunkRef {
  ChunkId id;
  uint32_t size = 0;  // plaintext bytes, 1..kMaxChunkSize

  bool operator==(const ChunkRef&) const = default;
};

struct Entry {
  std::string path;
  EntryKind kind = EntryKind::kFile;
  uint32_t mode = 0;  // permission bits: st_mode & 07777
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;   // name of uid when saved ("" if it had none)
  std::string group;  // name of gid when saved
  int64_t mtime_ns = 0;
  uint64_t size = 0;             // files: content bytes (= sum of chunk sizes); else 0
  std::vector<ChunkRef> chunks;  // files only
  std::string target;            // symlinks only: the link text, never followed
  // Change detection on the box that saved (meaningless elsewhere).
  int64_t ctime_ns = 0;
  uint64_t inode = 0;

  bool operator==(const Entry&) const = default;
};

struct Manifest {
  // CLOCK_REALTIME when the scan that produced it started: a file modified near or after it
  // is re-read by the next scan even if its stat looks unchanged (README.md §Scanning).
  int64_t scan_started_ns = 0;
  std::vector<Entry> entries;  // sorted by path_less, unique

  // The entry at |path|, or nullptr. O(log n).
  const Entry* find(std::string_view path) const;

  bool operator==(const Manifest&) const = default;
};

// Path order: bytewise, except that '/' sorts before every other byte, which is the order of
// a depth-first walk that visits each directory's names in byte order.
bool path_less(std::string_view a, std::string_view b);

// Errors: kInvalidArgument naming the problem unless |path| is a valid manifest path.
Status validate_path(std::string_view path);

// True when |path| is |dir| or lies below it ("" is the parent of everything).
bool path_within(std::string_view path, std::string_view dir);

// Sorts |manifest|'s entries by path_less. Producers that build entries out of order call it
// before encode_manifest().
void sort_entries(Manifest& manifest);

// A manifest kept as its difference to another snapshot's (README.md §Delta manifests,
// product design §25.8): applied to the base snapshot's whole manifest it gives this one.
struct ManifestDelta {
  std::string base;                  // the snapshot id of the manifest it applies to
  std::vector<std::string> removed;  // paths of the base that are gone, in path order
  Manifest changes;  // entries new or different from the base's, and scan_started_ns
  bool operator==(const ManifestDelta&) const = default;
};

// The delta that turns |base| (the whole manifest of snapshot |base_id|) into |target|.
// REQUIRES: both valid (validate_manifest).
ManifestDelta diff_manifests(const Manifest& base, std::string_view base_id,
                             const Manifest& target);

// |base| with |delta| applied.
// Errors: kDataLoss naming the path if the delta does not fit the base (a removed path the
//   base lacks) or the result breaks a rule of this header.
Result<Manifest> apply_delta(const Manifest& base, const ManifestDelta& delta);

// What a manifest object holds: a whole manifest or a delta.
struct ManifestObject {
  std::optional<ManifestDelta> delta;  // set for a delta; then |whole| is empty
  Manifest whole;
};

// The binary form (README.md §Manifest), before compression and sealing.
// REQUIRES: validate_manifest(manifest).ok().
std::string encode_manifest(const Manifest& manifest);

// The binary form of a delta (README.md §Delta manifests).
// REQUIRES: validate_manifest(delta.changes).ok(), removed sorted by path_less and unique,
//   validate_snapshot_id(delta.base).ok().
std::string encode_manifest_delta(const ManifestDelta& delta);

// Errors: kDataLoss naming the problem if |data| is not a valid encoding of a whole manifest
//   or a delta, or what it encodes breaks a rule of this header (validate_manifest).
Result<ManifestObject> decode_manifest_object(std::string_view data);

// As decode_manifest_object() for a whole manifest only.
// Errors: those of decode_manifest_object(); kFailedPrecondition naming the base for a delta
//   (its reader must resolve it: snapshot.h load_manifest()).
Result<Manifest> decode_manifest(std::string_view data);

// Errors: kInvalidArgument naming the entry that breaks a rule of this header: bad or
//   unsorted or duplicate path, a file whose size is not the sum of its chunks, an empty
//   chunk, chunks on a non-file, an ancestor entry that is not a directory, a too long name.
Status validate_manifest(const Manifest& manifest);

// The sealed object: sealed(subkey(3), zstd(encode_manifest(m)), additional_data).
std::string seal_manifest(const StateKeys& keys, const Manifest& manifest,
                          std::string_view additional_data, crypto::Random& random);

// The sealed delta, under the same key and with the same additional data as a whole one.
std::string seal_manifest_delta(const StateKeys& keys, const ManifestDelta& delta,
                                std::string_view additional_data, crypto::Random& random);

// Errors: kDataLoss "manifest: ..." if it does not authenticate under the key and
//   |additional_data|, or does not decompress or decode.
Result<ManifestObject> open_manifest_object(const StateKeys& keys, std::string_view sealed,
                                            std::string_view additional_data);

// As open_manifest_object() for a whole manifest only.
// Errors: those of open_manifest_object(); kFailedPrecondition naming the base for a delta.
Result<Manifest> open_manifest(const StateKeys& keys, std::string_view sealed,
                               std::string_view additional_data);

// Every chunk the manifest references, sorted and unique (the GC mark, a restore's needs).
std::vector<ChunkId> referenced_chunks(const Manifest& manifest);

// Entries in the scope: those within any of |paths| (all entries if |paths| is empty), in
// manifest order.
// Errors: kInvalidArgument if a path is not a valid manifest path.
Result<std::vector<const Entry*>> select_entries(const Manifest& manifest,
                                                 std::span<const std::string> paths);

// The direct children of the directory |dir| ("" lists the top-level entries: those with no
// ancestor entry), in manifest order (State.Browse).
// Errors: kInvalidArgument for a bad path; kNotFound if |dir| is neither "" nor an entry;
//   kFailedPrecondition if it is not a directory.
Result<std::vector<const Entry*>> list_directory(const Manifest& manifest, std::string_view dir);

}  // namespace cb::state
