#pragma once
// Chunk batches: many chunks in one request to the api's door (README.md §Chunk batches).
// With the filesystem store the door carries a save's and a restore's chunks itself, and one
// request per chunk cost a box's restore of the state bench's tree 24,000 round trips through
// the agent and the api, which share the machine's cores with the restore's own work.
//
//   get request  := id...                       32 raw bytes each, 1..kMaxBatchChunks of them
//   get answer   := item...                     one per requested id, in the request's order,
//                                               for the first 1..n of them: a door stops
//                                               after kMaxBatchAnswer bytes and the client
//                                               asks again for the rest
//   item         := u8(code) u32le(size) bytes  code 0: the object's bytes; else a cb::Code
//                                               and an error message of at most
//                                               kMaxBatchMessage bytes
//   put request  := (id u32le(size) bytes)...   1..kMaxBatchChunks sealed chunks
//
// The decoders read bytes from the other side of a socket (test/fuzz/chunk_batch_fuzz.cc):
// anything malformed is an error naming what is wrong, never a read outside the input.
//
// Thread-safety: free functions; append_stored_item() is as thread-safe as its Store.

#include "base/result.h"
#include "state/keys.h"
#include "state/store.h"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::state {

inline constexpr size_t kMaxBatchChunks = 256;
inline constexpr size_t kMaxBatchMessage = 4096;
// A door answers no more items once its answer holds this many bytes (always one, whatever
// its size), so a request costs it a bounded amount of memory.
inline constexpr size_t kMaxBatchAnswer = 8u << 20;

// The body of a get request for |ids|. REQUIRES: 1..kMaxBatchChunks ids.
std::string encode_batch_ids(std::span<const ChunkId> ids);

// Errors: kInvalidArgument unless |body| is 1..kMaxBatchChunks ids of 32 bytes.
Result<std::vector<ChunkId>> decode_batch_ids(std::string_view body);

// Appends one item of a get answer: |item|'s bytes, or its error (the message cut to
// kMaxBatchMessage bytes).
void append_batch_item(std::string& out, const Result<std::string>& item);

// Appends one item of a get answer: the object |store| holds under |key|, read straight into
// |out| (Store::get_append), or the error of that read. Returns the object's size, or the
// error the item carries.
Result<size_t> append_stored_item(std::string& out, Store& store, std::string_view key);

// The items of a get answer to |asked| ids: each the object or the error the door gave for
// it, for the first 1..|asked| ids (none when |asked| is 0).
// Errors (for the whole answer): kUnavailable naming the problem unless |body| is 1..|asked|
//   well-formed items (a cut item, an unknown code, an error item whose message is too long,
//   more items than asked for, none).
Result<std::vector<Result<std::string>>> decode_batch_items(std::string_view body, size_t asked);

// Appends one chunk to a put request.
void append_put_item(std::string& out, const ChunkId& id, std::string_view sealed);
// Appends what precedes a chunk of |sealed_size| bytes in a put request: a request may then
// be sent as pieces, each item's head followed by its chunk where it already is.
void append_put_item_head(std::string& out, const ChunkId& id, size_t sealed_size);
// The bytes append_put_item_head() appends.
inline constexpr size_t kPutItemHeadSize = kChunkIdSize + 4;

struct PutItem {
  ChunkId id;
  std::string_view data;  // within the decoded body
};

// Errors: kInvalidArgument naming the item unless |body| is 1..kMaxBatchChunks well-formed
//   items with nothing after the last.
Result<std::vector<PutItem>> decode_put_items(std::string_view body);

}  // namespace cb::state
