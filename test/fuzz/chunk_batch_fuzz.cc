// libFuzzer target for the chunk batch codec (src/state/chunk_batch.h): the api's door decodes
// a box's get and put requests, and the agent decodes the door's answers. Either side may be
// the one that misbehaves.
//
// Beyond "no crash, no sanitizer report" it checks what the contract promises:
// - decode_batch_ids() and decode_put_items() fail only with kInvalidArgument, and
//   decode_batch_items() only with kUnavailable;
// - what they accept encodes back to the same bytes (ids, put items), and an accepted answer's
//   items (1..count of them) encode back to an answer that decodes to the same items;
// - a put item's data lies within the input.
//
// Build and run: scripts/fuzz chunk_batch_fuzz 60

#include "state/chunk_batch.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace st = cb::state;

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the item count of an answer; the rest is the body for all three.
  const size_t count = data[0] % 8;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = st::decode_batch_ids(body);
  if (ids.ok()) {
    require(st::encode_batch_ids(*ids) == body);
  } else {
    require(ids.status().code() == cb::Code::kInvalidArgument);
  }

  auto puts = st::decode_put_items(body);
  if (puts.ok()) {
    std::string again;
    for (const st::PutItem& p : *puts) {
      require(p.data.data() >= body.data() &&
              p.data.data() + p.data.size() <= body.data() + body.size());
      st::append_put_item(again, p.id, p.data);
    }
    require(again == body);
  } else {
    require(puts.status().code() == cb::Code::kInvalidArgument);
  }

  auto items = st::decode_batch_items(body, count);
  if (items.ok()) {
    require(items->size() <= count && (count == 0 || !items->empty()));
    std::string again;
    for (const auto& item : *items) {
      require(item.ok() || item.status().message().size() <= st::kMaxBatchMessage);
      st::append_batch_item(again, item);
    }
    auto back = st::decode_batch_items(again, count);
    require(back.ok());
    require(back->size() == items->size());
    for (size_t i = 0; i < items->size(); ++i) {
      require((*back)[i].ok() == (*items)[i].ok());
      if ((*items)[i].ok()) {
        require(*(*back)[i] == *(*items)[i]);
      } else {
        require((*back)[i].status() == (*items)[i].status());
      }
    }
  } else {
    require(items.status().code() == cb::Code::kUnavailable);
  }
  return 0;
}
