#include "state/fs_store.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

namespace cb::state {
namespace {

// Options publishing deferred puts once |bytes| wait.
FsStore::Options flushing_at(size_t bytes) {
  FsStore::Options o;
  o.flush_bytes = bytes;
  return o;
}

std::unique_ptr<FsStore> open_store(const test::TempDir& dir,
                                    FsStore::Options options = FsStore::Options()) {
  auto store = FsStore::open(dir.path() / "store", options);
  REQUIRE(store.ok());
  return std::move(store).value();
}

// Files in the store's temporaries' folders (<root>/.tmp-<pid>-<n>/<bucket>/).
std::size_t count_temporaries(const test::TempDir& dir) {
  std::size_t count = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "store")) {
    const std::string under = e.path().lexically_relative(dir.path() / "store").string();
    if (e.is_regular_file() && under.rfind(".tmp-", 0) == 0) ++count;
  }
  return count;
}

std::vector<std::string> keys_of(const std::vector<ObjectInfo>& objects) {
  std::vector<std::string> keys;
  for (const auto& o : objects) keys.push_back(o.key);
  return keys;
}

TEST_CASE("validate_key: accepts the layout's keys and refuses the rest", "[state][unit]") {
  CHECK(validate_key("u1/chunks/ab/abcdef").ok());
  CHECK(validate_key("u1/boxes/b-2/snapshots/20261130T080512.123Z-1a2b3c4d.record").ok());
  for (const char* bad : {"", "/abs", "a//b", "a/", "a/../b", "a/./b", ".hidden", "a/.tmp-1",
                          "sp ace", "a\\b", "caf\xc3\xa9"}) {
    INFO(bad);
    CHECK(validate_key(bad).code() == Code::kInvalidArgument);
  }
  CHECK(validate_key(std::string(1025, 'a')).code() == Code::kInvalidArgument);
}

TEST_CASE("FsStore: put, get, stat and overwrite", "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  REQUIRE(store->put("u/chunks/ab/abc", "hello").ok());
  auto got = store->get("u/chunks/ab/abc");
  REQUIRE(got.ok());
  CHECK(*got == "hello");
  CHECK(*store->stat("u/chunks/ab/abc") == 5);
  REQUIRE(store->put("u/chunks/ab/abc", std::string(10000, 'x')).ok());
  CHECK(*store->stat("u/chunks/ab/abc") == 10000);
  CHECK(store->get("u/none").status().code() == Code::kNotFound);
  CHECK(store->stat("u/none").status().code() == Code::kNotFound);
  CHECK(store->stat("u/chunks").status().code() == Code::kNotFound);  // a directory
  CHECK(store->put("../escape", "x").code() == Code::kInvalidArgument);
  CHECK(store->get("/etc/passwd").status().code() == Code::kInvalidArgument);
  // Objects are private files under the root.
  struct stat st;
  REQUIRE(::stat((dir.path() / "store/u/chunks/ab/abc").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // The temporaries of the two puts were renamed away.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "store/u/chunks/ab")) {
    names.push_back(e.path().filename().string());
  }
  CHECK(names == std::vector<std::string>{"abc"});
}

TEST_CASE("FsStore: list pages in key order with sizes, within the prefix", "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  // '-' (0x2d) sorts before '/' (0x2f): "a-b" comes before "a/..." although the directory
  // "a" sorts before the file "a-b" by name.
  std::vector<std::string> keys = {"a/x", "a/y/z", "a-b", "a0", "b/c/d/e", "ab"};
  for (const auto& k : keys) REQUIRE(store->put(k, k).ok());
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());

  auto all = list_all(*store, "");
  REQUIRE(all.ok());
  CHECK(keys_of(*all) == sorted);
  for (const auto& o : *all) CHECK(o.size == o.key.size());

  SECTION("pages of one") {
    std::vector<std::string> paged;
    std::string after;
    while (true) {
      auto page = store->list("", after, 1);
      REQUIRE(page.ok());
      if (page->objects.empty()) break;
      REQUIRE(page->objects.size() == 1);
      paged.push_back(page->objects[0].key);
      after = paged.back();
      if (!page->truncated) break;
    }
    CHECK(paged == sorted);
  }
  SECTION("a prefix ending inside a segment") {
    CHECK(keys_of(*list_all(*store, "a")) ==
          std::vector<std::string>{"a-b", "a/x", "a/y/z", "a0", "ab"});
    CHECK(keys_of(*list_all(*store, "a/")) == std::vector<std::string>{"a/x", "a/y/z"});
    CHECK(keys_of(*list_all(*store, "b/c/")) == std::vector<std::string>{"b/c/d/e"});
    CHECK(list_all(*store, "zzz")->empty());
  }
  SECTION("start_after skips whole subtrees and stays exclusive") {
    auto page = store->list("", "a/x", 10);
    REQUIRE(page.ok());
    CHECK(keys_of(page->objects) == std::vector<std::string>{"a/y/z", "a0", "ab", "b/c/d/e"});
    CHECK(!page->truncated);
  }
  SECTION("bad limits are refused") {
    CHECK(store->list("", "", 0).status().code() == Code::kInvalidArgument);
    CHECK(store->list("", "", kDefaultListLimit + 1).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("FsStore: delete_batch removes objects, ignores missing ones, caps the batch",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  REQUIRE(store->put("u/a", "1").ok());
  REQUIRE(store->put("u/b", "2").ok());
  std::vector<std::string> batch = {"u/a", "u/missing"};
  REQUIRE(store->delete_batch(batch).ok());
  CHECK(store->stat("u/a").status().code() == Code::kNotFound);
  CHECK(store->stat("u/b").ok());
  std::vector<std::string> too_many(kMaxDeleteBatch + 1, "u/b");
  CHECK(store->delete_batch(too_many).code() == Code::kInvalidArgument);
  CHECK(store->stat("u/b").ok());
  REQUIRE(delete_all(*store, too_many).ok());  // delete_all splits into batches
  CHECK(store->stat("u/b").status().code() == Code::kNotFound);
}

TEST_CASE("FsStore: temporaries of interrupted puts are invisible and removable", "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  REQUIRE(store->put("u/chunks/ab/abc", "data").ok());
  { std::ofstream(dir.path() / "store/u/chunks/ab/.tmp-999-1") << "partial"; }
  CHECK(keys_of(*list_all(*store, "")) == std::vector<std::string>{"u/chunks/ab/abc"});
  auto removed = store->remove_temporaries();
  REQUIRE(removed.ok());
  CHECK(*removed == 1);
  CHECK(!std::filesystem::exists(dir.path() / "store/u/chunks/ab/.tmp-999-1"));
  CHECK(*store->get("u/chunks/ab/abc") == "data");
}

TEST_CASE("FsStore: a crashed process's folder of temporaries is removed with them",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  const auto crashed = dir.path() / "store/.tmp-999-0";
  std::filesystem::create_directories(crashed / "7");
  std::filesystem::create_directories(crashed / "8");
  { std::ofstream(crashed / "7/7") << "partial"; }
  { std::ofstream(crashed / "8/24") << "partial"; }
  REQUIRE(store->put("u/chunks/ab/abc", "data").ok());
  CHECK(keys_of(*list_all(*store, "")) == std::vector<std::string>{"u/chunks/ab/abc"});
  auto removed = store->remove_temporaries();
  REQUIRE(removed.ok());
  CHECK(*removed == 2);
  CHECK(!std::filesystem::exists(crashed));
  CHECK(*store->get("u/chunks/ab/abc") == "data");
  // Objects are still put afterwards (the store's own folder is made again when needed).
  REQUIRE(store->put("u/chunks/cd/cde", "more").ok());
  CHECK(*store->get("u/chunks/cd/cde") == "more");
}

// A deferred put is a temporary until sync(): nothing names it (a crash leaves only a
// temporary for remove_temporaries()), then sync() renames it into place; one never synced
// is deleted with the store.
TEST_CASE("FsStore: deferred puts appear whole at sync(), never before", "[state][unit]") {
  test::TempDir dir;
  auto temporaries = [&] { return count_temporaries(dir); };
  // Folders of temporaries left at the root.
  auto temporary_folders = [&] {
    std::size_t count = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() / "store")) {
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) ++count;
    }
    return count;
  };
  {
    auto store = open_store(dir);
    REQUIRE(store->put("u/chunks/ab/old", "before").ok());
    REQUIRE(store->put_deferred("u/chunks/ab/abc", "data").ok());
    REQUIRE(store->put_deferred("u/chunks/cd/cde", "more data").ok());
    CHECK(store->stat("u/chunks/ab/abc").status().code() == Code::kNotFound);
    CHECK(store->get("u/chunks/cd/cde").status().code() == Code::kNotFound);
    CHECK(keys_of(*list_all(*store, "")) == std::vector<std::string>{"u/chunks/ab/old"});
    CHECK(temporaries() == 2);
    REQUIRE(store->sync().ok());
    CHECK(temporaries() == 0);
    // The folder that held them is gone too: ext4 never shrinks a folder, and a save's
    // thousands of temporaries would leave it that large.
    CHECK(temporary_folders() == 0);
    CHECK(*store->get("u/chunks/ab/abc") == "data");
    CHECK(*store->get("u/chunks/cd/cde") == "more data");
    CHECK(keys_of(*list_all(*store, "")) ==
          std::vector<std::string>{"u/chunks/ab/abc", "u/chunks/ab/old", "u/chunks/cd/cde"});
    REQUIRE(store->sync().ok());  // nothing pending: a no-op
    REQUIRE(store->put_deferred("u/chunks/ef/never", "dropped").ok());
    CHECK(temporaries() == 1);
  }
  CHECK(temporaries() == 0);
  CHECK(temporary_folders() == 0);
  auto store = open_store(dir);
  CHECK(store->stat("u/chunks/ef/never").status().code() == Code::kNotFound);
  CHECK(store->put_deferred("../bad", "x").code() == Code::kInvalidArgument);
}

TEST_CASE("FsStore: a large sync() renames every object, and a failed rename leaves no temporary",
          "[state][unit]") {
  test::TempDir dir;
  auto temporaries = [&] { return count_temporaries(dir); };
  auto store = open_store(dir);
  // Many puts over many folders.
  auto key = [](int i) { return fmt::format("u/chunks/{:02x}/object-{}", i % 64, i); };
  constexpr int kPuts = 1500;
  for (int i = 0; i < kPuts; ++i) REQUIRE(store->put_deferred(key(i), std::to_string(i)).ok());
  REQUIRE(store->sync().ok());
  CHECK(temporaries() == 0);
  CHECK(list_all(*store, "")->size() == size_t(kPuts));
  for (int i = 0; i < kPuts; i += 97) CHECK(*store->get(key(i)) == std::to_string(i));

  // One object's folder cannot exist (a file holds its name): sync() fails naming it, and
  // removes every temporary it did not rename.
  REQUIRE(store->put("u/chunks/zz", "a file, not a folder").ok());
  for (int i = 0; i < kPuts; ++i) {
    REQUIRE(store->put_deferred(fmt::format("u/chunks/{:02x}/again-{}", i % 64, i), "x").ok());
  }
  REQUIRE(store->put_deferred("u/chunks/zz/blocked", "x").ok());
  Status failed = store->sync();
  CHECK(!failed.ok());
  CHECK(std::string(failed.message()).find("u/chunks/zz/blocked") != std::string::npos);
  CHECK(temporaries() == 0);
}

TEST_CASE("FsStore: the put that brings deferred bytes to flush_bytes publishes them",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir, flushing_at(10));
  REQUIRE(store->put_deferred("u/chunks/ab/first", "12345").ok());
  CHECK(store->stat("u/chunks/ab/first").status().code() == Code::kNotFound);
  CHECK(count_temporaries(dir) == 1);
  REQUIRE(store->put_deferred("u/chunks/cd/second", "678901").ok());  // 11 bytes waiting
  CHECK(*store->get("u/chunks/ab/first") == "12345");
  CHECK(*store->get("u/chunks/cd/second") == "678901");
  CHECK(count_temporaries(dir) == 0);
  // Below the threshold again: waits for sync(), which also makes the renames durable.
  REQUIRE(store->put_deferred("u/chunks/ef/third", "x").ok());
  CHECK(store->stat("u/chunks/ef/third").status().code() == Code::kNotFound);
  REQUIRE(store->sync().ok());
  CHECK(*store->get("u/chunks/ef/third") == "x");

  // A publish that fails fails the put that ran it, naming the object, and removes the
  // temporaries it did not rename; the next sync() has nothing left to do.
  REQUIRE(store->put("u/chunks/zz", "a file, not a folder").ok());
  REQUIRE(store->put_deferred("u/chunks/zz/blocked", "1234").ok());
  Status failed = store->put_deferred("u/chunks/ab/after", "1234567");
  CHECK(!failed.ok());
  CHECK(std::string(failed.message()).find("u/chunks/zz/blocked") != std::string::npos);
  CHECK(count_temporaries(dir) == 0);
  CHECK(store->sync().ok());
  CHECK(!store->stat("u/chunks/zz/blocked").ok());
}

TEST_CASE("FsStore: deferred puts on many threads, flushed along the way, all land at sync()",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir, flushing_at(4096));
  auto key = [](int t, int i) { return fmt::format("u/chunks/{:02x}/t{}-{}", i % 32, t, i); };
  constexpr int kThreads = 4, kPuts = 400;
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPuts && results[t].ok(); ++i) {
        results[t] = store->put_deferred(key(t, i), std::string(100, char('a' + t)));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& s : results) REQUIRE(s.ok());
  REQUIRE(store->sync().ok());
  CHECK(count_temporaries(dir) == 0);
  CHECK(list_all(*store, "")->size() == size_t(kThreads * kPuts));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPuts; i += 37)
      CHECK(*store->get(key(t, i)) == std::string(100, char('a' + t)));
  }
}

}  // namespace
}  // namespace cb::state
