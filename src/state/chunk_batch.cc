#include "state/chunk_batch.h"

#include "base/check.h"
#include "state/encoding_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace cb::state {

namespace {

using internal::get_u32le;
using internal::put_u32le;

constexpr size_t kItemHeader = 1 + 4;
constexpr size_t kPutHeader = kChunkIdSize + 4;

ChunkId id_at(std::string_view at) {
  ChunkId id;
  std::memcpy(id.bytes.data(), at.data(), kChunkIdSize);
  return id;
}

}  // namespace

std::string encode_batch_ids(std::span<const ChunkId> ids) {
  CB_CHECK(!ids.empty() && ids.size() <= kMaxBatchChunks);
  std::string out;
  out.reserve(ids.size() * kChunkIdSize);
  for (const ChunkId& id : ids)
    out.append(reinterpret_cast<const char*>(id.bytes.data()), kChunkIdSize);
  return out;
}

Result<std::vector<ChunkId>> decode_batch_ids(std::string_view body) {
  if (body.empty() || body.size() % kChunkIdSize != 0 ||
      body.size() / kChunkIdSize > kMaxBatchChunks) {
    return invalid_argument(
        fmt::format("body: want 1 to {} chunk ids of {} bytes each, got {} bytes", kMaxBatchChunks,
                    kChunkIdSize, body.size()));
  }
  std::vector<ChunkId> ids;
  ids.reserve(body.size() / kChunkIdSize);
  for (size_t at = 0; at < body.size(); at += kChunkIdSize) ids.push_back(id_at(body.substr(at)));
  return ids;
}

void append_batch_item(std::string& out, const Result<std::string>& item) {
  if (item.ok()) {
    CB_CHECK(item->size() <= UINT32_MAX);
    out += char(0);
    put_u32le(out, uint32_t(item->size()));
    out += *item;
    return;
  }
  const Status error = item.status();  // a copy: message() views into it
  const std::string_view message = error.message().substr(0, kMaxBatchMessage);
  out += char(uint8_t(error.code()));
  put_u32le(out, uint32_t(message.size()));
  out += message;
}

Result<size_t> append_stored_item(std::string& out, Store& store, std::string_view key) {
  const size_t start = out.size();
  out.append(kItemHeader, '\0');  // its size is known once the object is in
  Status read = store.get_append(key, out);
  const size_t size = out.size() - start - kItemHeader;  // 0 after an error
  if (read.ok() && size > UINT32_MAX)  // a file in the store's folder, not an object a save wrote
    read = data_loss(fmt::format("{}: {} bytes, more than an item holds", key, size));
  if (!read.ok()) {
    out.resize(start);
    append_batch_item(out, read);
    return read;
  }
  out[start] = char(0);
  put_u32le(out.data() + start + 1, uint32_t(size));
  return size;
}

Result<std::vector<Result<std::string>>> decode_batch_items(std::string_view body, size_t asked) {
  std::vector<Result<std::string>> items;
  items.reserve(std::min(asked, kMaxBatchChunks));
  while (!body.empty()) {
    const size_t i = items.size();
    if (i == asked)
      return unavailable(fmt::format("chunk batch: more than the {} items asked for", asked));
    if (body.size() < kItemHeader)
      return unavailable(fmt::format("chunk batch: item {} is cut short", i));
    const uint8_t code = uint8_t(body[0]);
    const uint32_t size = get_u32le(body.substr(1));
    body.remove_prefix(kItemHeader);
    if (body.size() < size) return unavailable(fmt::format("chunk batch: item {} is cut short", i));
    const std::string_view bytes = body.substr(0, size);
    body.remove_prefix(size);
    if (code == 0) {
      items.emplace_back(std::string(bytes));
      continue;
    }
    if (code > uint8_t(Code::kUnauthenticated))
      return unavailable(fmt::format("chunk batch: item {} has the unknown code {}", i, code));
    if (size > kMaxBatchMessage)
      return unavailable(fmt::format("chunk batch: item {}'s error message is {} bytes", i, size));
    items.emplace_back(Status(Code(code), bytes));
  }
  if (items.empty() && asked > 0) return unavailable("chunk batch: an answer without items");
  return items;
}

void append_put_item(std::string& out, const ChunkId& id, std::string_view sealed) {
  append_put_item_head(out, id, sealed.size());
  out += sealed;
}

void append_put_item_head(std::string& out, const ChunkId& id, size_t sealed_size) {
  CB_CHECK(sealed_size <= UINT32_MAX);
  out.append(reinterpret_cast<const char*>(id.bytes.data()), kChunkIdSize);
  put_u32le(out, uint32_t(sealed_size));
}

Result<std::vector<PutItem>> decode_put_items(std::string_view body) {
  std::vector<PutItem> items;
  while (!body.empty()) {
    if (items.size() == kMaxBatchChunks)
      return invalid_argument(fmt::format("body: more than {} chunks", kMaxBatchChunks));
    if (body.size() < kPutHeader)
      return invalid_argument(fmt::format("body: item {}: truncated header", items.size()));
    const uint32_t size = get_u32le(body.substr(kChunkIdSize));
    if (body.size() - kPutHeader < size)
      return invalid_argument(fmt::format("body: item {}: {} bytes announced, {} left",
                                          items.size(), size, body.size() - kPutHeader));
    items.push_back(PutItem{id_at(body), body.substr(kPutHeader, size)});
    body.remove_prefix(kPutHeader + size);
  }
  if (items.empty()) return invalid_argument("body: no chunks");
  return items;
}

}  // namespace cb::state
