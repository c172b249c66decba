#pragma once
// Store: the object store the state layer writes to (README.md §Store). A flat namespace of
// keys (README.md §Object keys) to immutable-once-written byte strings, with the five
// operations both backends can do well: put, get, stat, list (with sizes, paged, in key
// order) and delete in batches. The filesystem backend (fs_store.h) is the default; an S3
// backend maps each call to one request (PutObject, GetObject, HeadObject, ListObjectsV2,
// DeleteObjects), which is why the interface has exactly these calls and limits.
//
// Synchronous by design: everything around a store call in a save or a restore is blocking
// work too (reading files, hashing, zstd, sealing, fsync), so callers run the whole job on a
// blocking pool thread (house style H10) and get parallelism from several threads, not from
// coroutines. Implementations must therefore be thread-safe.
//
// Thread-safety: every method may be called from several threads at once.

#include "base/result.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::state {

inline constexpr size_t kMaxKeySize = 1024;        // S3's limit
inline constexpr size_t kMaxDeleteBatch = 1000;    // S3 DeleteObjects' limit
inline constexpr size_t kDefaultListLimit = 1000;  // S3 ListObjectsV2's page

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;

  bool operator==(const ObjectInfo&) const = default;
};

struct ListPage {
  std::vector<ObjectInfo> objects;  // in key order (bytewise)
  bool truncated = false;           // more objects follow the last one
};

class Store {
 public:
  virtual ~Store() = default;

  // Stores |data| under |key|, replacing what is there. Atomic (a reader sees the old object
  // or all of the new one) and durable when it returns ok.
  // Errors: kInvalidArgument for a bad key; kUnavailable / kInternal / kResourceExhausted
  //   from the backend.
  virtual Status put(std::string_view key, std::string_view data) = 0;

  // Like put(), for objects that need be durable only once a later sync() returned ok (a
  // save's chunks, README.md §Saving): until then the object may be invisible to get, stat
  // and list, and a crash may lose it, but never leaves a partial object under |key|. The
  // default is put() (S3: every put is durable already).
  // Errors: as put().
  virtual Status put_deferred(std::string_view key, std::string_view data) {
    return put(key, data);
  }

  // Makes every put_deferred() that returned ok before this call durable and visible.
  // Errors: backend errors; then those objects may be missing (never partial).
  virtual Status sync() { return ok_status(); }

  // How many deferred writes failed since the store opened (FsStore: packs that did not
  // publish). sync() reports a failure once, to the first call after it; a caller sharing the
  // store compares this count from before its puts with the one after its sync().
  virtual uint64_t failed_deferred_puts() const { return 0; }

  // How many puts a save keeps in flight (SaveOptions::put_threads 0). A remote store's puts
  // wait on round trips, so many overlap; a local one's are a file system write each.
  virtual int put_concurrency() const { return 8; }

  // The object under |key|.
  // Errors: kNotFound if there is none; kInvalidArgument for a bad key; backend errors.
  virtual Result<std::string> get(std::string_view key) = 0;

  // Appends the object under |key| to |out|; on an error |out| is as it was. Errors as get().
  // A store that can read into |out| itself overrides this (FsStore: the api's door builds
  // a batch answer of many chunks without a copy of each); the default appends get()'s.
  virtual Status get_append(std::string_view key, std::string& out);

  // The objects under |keys|, in order: each one the object or the error get() gives for it.
  // A store that fetches many objects in one round trip overrides this (the agent's store
  // over the api's door, README.md §Chunk batches); the default calls get() for each.
  virtual std::vector<Result<std::string>> get_many(std::span<const std::string> keys);

  // The size of the object under |key|.
  // Errors: kNotFound if there is none; kInvalidArgument; backend errors.
  virtual Result<uint64_t> stat(std::string_view key) = 0;

  // Up to |limit| objects whose keys start with |prefix| and sort after |start_after| (""
  // for the first page), in key order. Page on with start_after = the last key returned while
  // truncated is set.
  // Errors: kInvalidArgument if |limit| is 0 or above kDefaultListLimit; backend errors.
  virtual Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                                size_t limit = kDefaultListLimit) = 0;

  // Deletes the objects under |keys| (at most kMaxDeleteBatch). A key with no object is not an
  // error. Not atomic: on error some of the keys may be gone.
  // Errors: kInvalidArgument for a bad key or too many keys; backend errors.
  virtual Status delete_batch(std::span<const std::string> keys) = 0;
};

// Errors: kInvalidArgument naming the problem unless |key| matches README.md §Object keys:
//   1..1024 bytes; '/'-separated segments, each non-empty, of [A-Za-z0-9._-], not starting
//   with '.'.
Status validate_key(std::string_view key);

// Every object under |prefix|, paging list() to the end.
Result<std::vector<ObjectInfo>> list_all(Store& store, std::string_view prefix);

// Deletes |keys| in batches of kMaxDeleteBatch, in order.
Status delete_all(Store& store, std::span<const std::string> keys);

}  // namespace cb::state
