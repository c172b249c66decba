// libFuzzer target for the pack index decoder (src/state/pack.h): the filesystem store reads
// the indexes at the end of its pack files, and after a delete, from index files of their own.
// They are the store's own files, but a damaged one must cost only its objects, never a read
// outside the pack.
//
// Beyond "no crash, no sanitizer report" it checks what the contract promises:
// - decode_pack_index() fails only with kDataLoss;
// - what it accepts has entries with valid keys, in offset order, not overlapping and within
//   data_size, and its consumed size is at most the input's;
// - encoding what it accepted and decoding that gives the same index.
//
// Build and run: scripts/fuzz pack_index_fuzz 60

#include "state/pack.h"
#include "state/store.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

namespace st = cb::state;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view tail(reinterpret_cast<const char*>(data), size);
  size_t consumed = 0;
  auto index = st::decode_pack_index(tail, "fuzz.pack", &consumed);
  if (!index.ok()) {
    require(index.status().code() == cb::Code::kDataLoss);
    return 0;
  }
  require(consumed <= size);
  uint64_t end = 0;
  for (const st::PackEntry& e : index->entries) {
    require(st::validate_key(e.key).ok());
    require(e.offset >= end);
    require(e.size <= index->data_size && e.offset <= index->data_size - e.size);
    end = e.offset + e.size;
  }
  auto again = st::decode_pack_index(st::encode_pack_index(*index), "again");
  require(again.ok());
  require(again->data_size == index->data_size);
  require(again->entries == index->entries);
  return 0;
}
