#pragma once
// The Store contract (src/state/store.h) as one check every backend must pass: the
// filesystem store in store_test.cc, the S3 store against a real radosgw in
// test/state/s3_radosgw_test.cc. |store| must be empty under "contract/".

#include "state/store.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace cb::state::test_util {

inline std::vector<std::string> keys_of_objects(const std::vector<ObjectInfo>& objects) {
  std::vector<std::string> keys;
  for (const auto& o : objects) keys.push_back(o.key);
  return keys;
}

inline void check_store_contract(Store& store) {
  // put, get, stat, overwrite; missing objects.
  REQUIRE(store.put("contract/u/chunks/ab/abc", "hello").ok());
  auto got = store.get("contract/u/chunks/ab/abc");
  REQUIRE(got.ok());
  CHECK(*got == "hello");
  auto size = store.stat("contract/u/chunks/ab/abc");
  REQUIRE(size.ok());
  CHECK(*size == 5);
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 7 + i / 251);
  REQUIRE(store.put("contract/u/chunks/ab/abc", big).ok());
  got = store.get("contract/u/chunks/ab/abc");
  REQUIRE(got.ok());
  CHECK(*got == big);
  CHECK(*store.stat("contract/u/chunks/ab/abc") == big.size());
  REQUIRE(store.put("contract/empty", "").ok());
  CHECK(*store.get("contract/empty") == "");
  CHECK(*store.stat("contract/empty") == 0);
  CHECK(store.get("contract/u/none").status().code() == Code::kNotFound);
  // get_append: the object after what |out| holds; on an error |out| is as it was.
  std::string out = "before:";
  REQUIRE(store.get_append("contract/u/chunks/ab/abc", out).ok());
  CHECK(out == "before:" + big);
  CHECK(store.get_append("contract/u/none", out).code() == Code::kNotFound);
  CHECK(store.get_append("../escape", out).code() == Code::kInvalidArgument);
  CHECK(out == "before:" + big);
  CHECK(store.stat("contract/u/none").status().code() == Code::kNotFound);
  CHECK(store.put("../escape", "x").code() == Code::kInvalidArgument);
  CHECK(store.get("/etc/passwd").status().code() == Code::kInvalidArgument);
  CHECK(store.stat("contract/.tmp").status().code() == Code::kInvalidArgument);

  // list: key order (bytewise: '-' 0x2d sorts before '/' 0x2f), sizes, prefix, paging.
  std::vector<std::string> keys = {"contract/l/a/x", "contract/l/a/y/z", "contract/l/a-b",
                                   "contract/l/a0",  "contract/l/b/c/d", "contract/l/ab"};
  for (const auto& k : keys) REQUIRE(store.put(k, k).ok());
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  auto all = list_all(store, "contract/l/");
  REQUIRE(all.ok());
  CHECK(keys_of_objects(*all) == sorted);
  for (const auto& o : *all) CHECK(o.size == o.key.size());

  std::vector<std::string> paged;
  std::string after;
  int pages = 0;
  while (true) {
    auto page = store.list("contract/l/", after, 2);
    REQUIRE(page.ok());
    REQUIRE(page->objects.size() <= 2);
    ++pages;
    for (const auto& o : page->objects) paged.push_back(o.key);
    if (!page->truncated) break;
    REQUIRE(!page->objects.empty());
    after = page->objects.back().key;
    REQUIRE(pages < 10);
  }
  CHECK(paged == sorted);

  auto in_a = list_all(store, "contract/l/a/");
  REQUIRE(in_a.ok());
  CHECK(keys_of_objects(*in_a) == std::vector<std::string>{"contract/l/a/x", "contract/l/a/y/z"});
  auto starting_a = list_all(store, "contract/l/a");
  REQUIRE(starting_a.ok());
  CHECK(starting_a->size() == 5);  // every key but b/c/d
  auto after_a0 = store.list("contract/l/", "contract/l/a0", 1000);
  REQUIRE(after_a0.ok());
  CHECK(keys_of_objects(after_a0->objects) ==
        std::vector<std::string>{"contract/l/ab", "contract/l/b/c/d"});
  CHECK(!after_a0->truncated);
  auto none = store.list("contract/nothing/", "", 1000);
  REQUIRE(none.ok());
  CHECK(none->objects.empty());
  CHECK(!none->truncated);
  CHECK(store.list("contract/", "", 0).status().code() == Code::kInvalidArgument);
  CHECK(store.list("contract/", "", kDefaultListLimit + 1).status().code() ==
        Code::kInvalidArgument);

  // delete_batch: removes, ignores missing keys, caps the batch.
  std::vector<std::string> gone = {"contract/l/a/x", "contract/l/ab", "contract/l/missing"};
  REQUIRE(store.delete_batch(gone).ok());
  CHECK(store.get("contract/l/a/x").status().code() == Code::kNotFound);
  CHECK(store.stat("contract/l/ab").status().code() == Code::kNotFound);
  auto left = list_all(store, "contract/l/");
  REQUIRE(left.ok());
  CHECK(keys_of_objects(*left) == std::vector<std::string>{"contract/l/a-b", "contract/l/a/y/z",
                                                           "contract/l/a0", "contract/l/b/c/d"});
  CHECK(store.delete_batch({}).ok());
  std::vector<std::string> too_many(kMaxDeleteBatch + 1, "contract/x");
  CHECK(store.delete_batch(too_many).code() == Code::kInvalidArgument);
  std::vector<std::string> bad = {"contract/ok", "bad//key"};
  CHECK(store.delete_batch(bad).code() == Code::kInvalidArgument);

  // A full batch in one call, and delete_all over more than one batch.
  std::vector<std::string> many;
  for (int i = 0; i < 1003; ++i) many.push_back("contract/m/" + std::to_string(10000 + i));
  for (const auto& k : many) REQUIRE(store.put(k, "x").ok());
  auto listed = list_all(store, "contract/m/");
  REQUIRE(listed.ok());
  CHECK(listed->size() == many.size());
  REQUIRE(delete_all(store, many).ok());
  auto emptied = list_all(store, "contract/m/");
  REQUIRE(emptied.ok());
  CHECK(emptied->empty());
}

}  // namespace cb::state::test_util
