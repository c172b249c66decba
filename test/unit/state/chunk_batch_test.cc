#include "state/chunk_batch.h"

#include "state/fs_store.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::state {
namespace {

ChunkId id_of(uint8_t b) {
  ChunkId id;
  id.bytes.fill(b);
  id.bytes[31] = uint8_t(b ^ 0x5a);
  return id;
}

TEST_CASE("chunk batch: ids of a get request round-trip; bad bodies name the problem",
          "[state][unit]") {
  const std::vector<ChunkId> ids = {id_of(1), id_of(2), id_of(3)};
  const std::string body = encode_batch_ids(ids);
  CHECK(body.size() == 3 * kChunkIdSize);
  auto back = decode_batch_ids(body);
  REQUIRE(back.ok());
  CHECK(*back == ids);

  CHECK(decode_batch_ids("").status().code() == Code::kInvalidArgument);
  CHECK(decode_batch_ids(body.substr(0, 40)).status().code() == Code::kInvalidArgument);
  std::vector<ChunkId> too_many(kMaxBatchChunks, id_of(7));
  CHECK(decode_batch_ids(encode_batch_ids(too_many)).ok());
  const std::string over = encode_batch_ids(too_many) + std::string(kChunkIdSize, 'x');
  auto refused = decode_batch_ids(over);
  CHECK(refused.status().code() == Code::kInvalidArgument);
  CHECK(refused.status().message().find("1 to 256 chunk ids") != std::string_view::npos);
}

TEST_CASE("chunk batch: a get answer carries objects and per-chunk errors in order",
          "[state][unit]") {
  std::string answer;
  append_batch_item(answer, std::string("first object"));
  append_batch_item(answer, Result<std::string>(not_found("u/chunks/ab/abab: no such object")));
  append_batch_item(answer, std::string());  // an empty object is an object
  append_batch_item(answer, Result<std::string>(unavailable(std::string(10000, 'm'))));
  auto items = decode_batch_items(answer, 4);
  REQUIRE(items.ok());
  REQUIRE(items->size() == 4);
  CHECK((*items)[0].value() == "first object");
  CHECK((*items)[1].status() == not_found("u/chunks/ab/abab: no such object"));
  CHECK((*items)[2].value().empty());
  CHECK((*items)[3].status().code() == Code::kUnavailable);
  CHECK((*items)[3].status().message().size() == kMaxBatchMessage);  // cut, not refused

  // A door that stopped early answers the first ids only: the client asks again for the rest.
  auto first = decode_batch_items(answer, 5);
  REQUIRE(first.ok());
  CHECK(first->size() == 4);
  // More items than asked for, a cut item, none, an unknown code: the whole answer is refused.
  CHECK(decode_batch_items(answer, 3).status().code() == Code::kUnavailable);
  CHECK(decode_batch_items(answer.substr(0, 10), 1).status().code() == Code::kUnavailable);
  CHECK(decode_batch_items("", 2).status().code() == Code::kUnavailable);
  std::string unknown = answer;
  unknown[0] = char(99);
  auto bad = decode_batch_items(unknown, 4);
  CHECK(bad.status().code() == Code::kUnavailable);
  CHECK(bad.status().message().find("item 0 has the unknown code 99") != std::string_view::npos);
  // An error item whose message is longer than any encoder writes.
  std::string long_error;
  long_error += char(uint8_t(Code::kInternal));
  const uint32_t n = kMaxBatchMessage + 1;
  for (int i = 0; i < 4; ++i) long_error += char(uint8_t(n >> (8 * i)));
  long_error += std::string(n, 'e');
  CHECK(decode_batch_items(long_error, 1).status().code() == Code::kUnavailable);
  CHECK(decode_batch_items("", 0).ok());
}

// The api's door builds its answers with append_stored_item(): each object read straight into
// the answer, from a file or a pack, or the error of its read.
TEST_CASE("chunk batch: stored objects are read into the answer; a failed read is its item",
          "[state][unit]") {
  test::TempDir dir;
  FsStore::Options options;
  options.sync = false;
  auto store = std::move(FsStore::open(dir.path() / "store", options)).value();
  REQUIRE(store->put("u/chunks/ab/file", "a file's object").ok());
  REQUIRE(store->put_deferred("u/chunks/cd/packed", "a packed object").ok());
  REQUIRE(store->sync().ok());
  std::string answer;
  CHECK(append_stored_item(answer, *store, "u/chunks/ab/file").value() == 15);
  auto missing = append_stored_item(answer, *store, "u/chunks/ef/none");
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(append_stored_item(answer, *store, "u/chunks/cd/packed").value() == 15);
  CHECK(append_stored_item(answer, *store, "../bad").status().code() == Code::kInvalidArgument);
  auto items = decode_batch_items(answer, 4);
  REQUIRE(items.ok());
  REQUIRE(items->size() == 4);
  CHECK((*items)[0].value() == "a file's object");
  CHECK((*items)[1].status() == missing.status());
  CHECK((*items)[2].value() == "a packed object");
  CHECK((*items)[3].status().code() == Code::kInvalidArgument);
}

TEST_CASE("chunk batch: a put request's chunks decode as views of the body", "[state][unit]") {
  std::string body;
  append_put_item(body, id_of(1), "sealed one");
  append_put_item(body, id_of(2), "");
  append_put_item(body, id_of(3), std::string(70000, 's'));
  auto items = decode_put_items(body);
  REQUIRE(items.ok());
  REQUIRE(items->size() == 3);
  CHECK((*items)[0].id == id_of(1));
  CHECK((*items)[0].data == "sealed one");
  CHECK((*items)[1].data.empty());
  CHECK((*items)[2].id == id_of(3));
  CHECK((*items)[2].data.size() == 70000);

  CHECK(decode_put_items("").status().code() == Code::kInvalidArgument);
  auto cut = decode_put_items(std::string_view(body).substr(0, body.size() - 1));
  CHECK(cut.status().code() == Code::kInvalidArgument);
  CHECK(cut.status().message().find("item 2") != std::string_view::npos);
  auto header = decode_put_items(std::string_view(body).substr(0, 20));
  CHECK(header.status().message().find("item 0: truncated header") != std::string_view::npos);
  std::string many;
  for (size_t i = 0; i <= kMaxBatchChunks; ++i) append_put_item(many, id_of(uint8_t(i)), "x");
  CHECK(decode_put_items(many).status().code() == Code::kInvalidArgument);
}

TEST_CASE("chunk batch: item heads and chunks sent as pieces make the same put request",
          "[state][unit]") {
  const std::string chunks[] = {"sealed one", "", std::string(70000, 's')};
  std::string whole, pieces;
  for (uint8_t i = 0; i < 3; ++i) {
    append_put_item(whole, id_of(i), chunks[i]);
    std::string head;
    append_put_item_head(head, id_of(i), chunks[i].size());
    CHECK(head.size() == kPutItemHeadSize);
    pieces += head;
    pieces += chunks[i];
  }
  CHECK(pieces == whole);
  auto items = decode_put_items(pieces);
  REQUIRE(items.ok());
  REQUIRE(items->size() == 3);
  CHECK((*items)[2].id == id_of(2));
  CHECK((*items)[2].data == chunks[2]);
}

}  // namespace
}  // namespace cb::state
