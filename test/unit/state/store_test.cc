#include "state/fs_store.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
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

// The store's pack files and pack indexes of group |group| (<root>/.packs/<group>/).
std::vector<std::string> pack_files(const test::TempDir& dir, const std::string& group = "u") {
  std::vector<std::string> names;
  const auto folder = dir.path() / "store/.packs" / group;
  if (!std::filesystem::exists(folder)) return names;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

size_t count_ending(const std::vector<std::string>& names, std::string_view suffix) {
  return size_t(std::count_if(names.begin(), names.end(),
                              [&](const std::string& n) { return n.ends_with(suffix); }));
}

// Thread t of |threads| put_deferred()s key(t, i) for i < puts, each |size| bytes of 'a' + t,
// all at once (and stat()s each key after its put with |stat_after|); every thread's status.
template <typename Key>
std::vector<Status> put_on_threads(FsStore& store, int threads, int puts, const Key& key,
                                   size_t size, bool stat_after) {
  std::vector<std::thread> running;
  std::vector<Status> results(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      for (int i = 0; i < puts && results[t].ok(); ++i) {
        results[t] = store.put_deferred(key(t, i), std::string(size, char('a' + t)));
        if (results[t].ok() && stat_after) (void)store.stat(key(t, i));
      }
    });
  }
  for (std::thread& thread : running) thread.join();
  return results;
}

// A deferred put goes into an open pack, a temporary until sync(): nothing names it (a crash
// leaves only a temporary for remove_temporaries()), then sync() publishes it whole; one never
// synced is deleted with the store.
TEST_CASE("FsStore: deferred puts appear whole at sync(), in one pack, never before",
          "[state][unit]") {
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
    CHECK(temporaries() == 1);  // the open pack
    REQUIRE(store->sync().ok());
    CHECK(temporaries() == 0);
    CHECK(temporary_folders() == 0);
    const auto packs = pack_files(dir);
    REQUIRE(packs.size() == 1);
    CHECK(packs[0].ends_with(".pack"));
    CHECK(!std::filesystem::exists(dir.path() / "store/u/chunks/cd"));  // no file per object
    CHECK(*store->get("u/chunks/ab/abc") == "data");
    CHECK(*store->get("u/chunks/cd/cde") == "more data");
    CHECK(*store->stat("u/chunks/cd/cde") == 9);
    CHECK(keys_of(*list_all(*store, "")) ==
          std::vector<std::string>{"u/chunks/ab/abc", "u/chunks/ab/old", "u/chunks/cd/cde"});
    CHECK(keys_of(*list_all(*store, "u/chunks/c")) == std::vector<std::string>{"u/chunks/cd/cde"});
    REQUIRE(store->sync().ok());  // nothing pending: a no-op
    CHECK(pack_files(dir).size() == 1);
    REQUIRE(store->put_deferred("u/chunks/ef/never", "dropped").ok());
    CHECK(temporaries() == 1);
  }
  CHECK(temporaries() == 0);
  CHECK(temporary_folders() == 0);
  // Another store over the root reads the pack's index.
  auto store = open_store(dir);
  CHECK(store->stat("u/chunks/ef/never").status().code() == Code::kNotFound);
  CHECK(*store->get("u/chunks/ab/abc") == "data");
  CHECK(store->put_deferred("../bad", "x").code() == Code::kInvalidArgument);
  // A put() replaces a packed object (as a tampered chunk does in the restore tests); a
  // delete removes both.
  REQUIRE(store->put("u/chunks/ab/abc", "a file").ok());
  CHECK(*store->get("u/chunks/ab/abc") == "a file");
  CHECK(*store->stat("u/chunks/ab/abc") == 6);
  CHECK(*list_all(*store, "u/chunks/ab/abc") == std::vector<ObjectInfo>{{"u/chunks/ab/abc", 6}});
  const std::vector<std::string> both{"u/chunks/ab/abc"};
  REQUIRE(store->delete_batch(both).ok());
  CHECK(store->get("u/chunks/ab/abc").status().code() == Code::kNotFound);
}

TEST_CASE("FsStore: packs are per first key segment; a failed publish fails the sync",
          "[state][unit]") {
  test::TempDir dir;
  auto temporaries = [&] { return count_temporaries(dir); };
  auto store = open_store(dir);
  auto key = [](int i) { return fmt::format("u/chunks/{:02x}/object-{}", i % 64, i); };
  constexpr int kPuts = 1500;
  for (int i = 0; i < kPuts; ++i) REQUIRE(store->put_deferred(key(i), std::to_string(i)).ok());
  REQUIRE(store->put_deferred("v/chunks/00/other", "v's").ok());
  REQUIRE(store->sync().ok());
  CHECK(temporaries() == 0);
  CHECK(pack_files(dir, "u").size() == 1);
  CHECK(pack_files(dir, "v").size() == 1);
  CHECK(list_all(*store, "")->size() == size_t(kPuts + 1));
  CHECK(list_all(*store, "u/")->size() == size_t(kPuts));
  for (int i = 0; i < kPuts; i += 97) CHECK(*store->get(key(i)) == std::to_string(i));

  // w's pack folder cannot exist (a file holds its name): sync() fails naming it and leaves
  // no temporary; u's pack of the same sync() is published.
  std::filesystem::create_directories(dir.path() / "store/.packs");
  { std::ofstream(dir.path() / "store/.packs/w") << "in the way"; }
  REQUIRE(store->put_deferred("u/chunks/00/again", "x").ok());
  REQUIRE(store->put_deferred("w/chunks/00/blocked", "x").ok());
  Status failed = store->sync();
  CHECK(!failed.ok());
  CHECK(std::string(failed.message()).find(".packs/w") != std::string::npos);
  CHECK(temporaries() == 0);
  CHECK(*store->get("u/chunks/00/again") == "x");
  CHECK(store->stat("w/chunks/00/blocked").status().code() == Code::kNotFound);
}

TEST_CASE("FsStore: the put that fills a pack to flush_bytes starts its publish", "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir, flushing_at(10));
  REQUIRE(store->put_deferred("u/chunks/ab/first", "12345").ok());
  CHECK(store->stat("u/chunks/ab/first").status().code() == Code::kNotFound);
  CHECK(count_temporaries(dir) == 1);
  REQUIRE(store->put_deferred("u/chunks/cd/second", "678901").ok());  // 11 bytes in the pack
  // Published on a thread of its own, without a sync().
  store->wait_publishes();
  CHECK(*store->get("u/chunks/ab/first") == "12345");
  CHECK(*store->get("u/chunks/cd/second") == "678901");
  CHECK(count_temporaries(dir) == 0);
  // A new pack, which waits for sync(), which also makes the renames durable.
  REQUIRE(store->put_deferred("u/chunks/ef/third", "x").ok());
  CHECK(store->stat("u/chunks/ef/third").status().code() == Code::kNotFound);
  REQUIRE(store->sync().ok());
  CHECK(*store->get("u/chunks/ef/third") == "x");
  CHECK(pack_files(dir).size() == 2);

  // A publish that fails removes its temporary, and the next sync() fails naming the folder:
  // the puts of that pack returned ok, and are lost. It is reported once.
  std::filesystem::create_directories(dir.path() / "store/.packs");
  { std::ofstream(dir.path() / "store/.packs/w") << "in the way"; }
  REQUIRE(store->put_deferred("w/chunks/zz/blocked", "1234").ok());
  REQUIRE(store->put_deferred("w/chunks/ab/after", "1234567").ok());  // fills the pack
  store->wait_publishes();
  CHECK(count_temporaries(dir) == 0);
  Status failed = store->sync();
  CHECK(!failed.ok());
  CHECK(std::string(failed.message()).find(".packs/w") != std::string::npos);
  CHECK(store->sync().ok());
  CHECK(!store->stat("w/chunks/zz/blocked").ok());
  CHECK(!store->stat("w/chunks/ab/after").ok());
}

TEST_CASE("FsStore: a store destroyed while a full pack is being published publishes it whole",
          "[state][unit]") {
  test::TempDir dir;
  {
    auto store = open_store(dir, flushing_at(1000));
    for (int i = 0; i < 15; ++i) {
      REQUIRE(store
                  ->put_deferred(fmt::format("u/chunks/{:02x}/o{}", i, i),
                                 std::string(100, char('a' + i)))
                  .ok());
    }
    // The 10th put filled the first pack; the second, half full, is deleted with the store.
  }
  CHECK(count_temporaries(dir) == 0);
  auto fresh = open_store(dir);
  for (int i = 0; i < 15; ++i) {
    INFO(i);
    auto got = fresh->get(fmt::format("u/chunks/{:02x}/o{}", i, i));
    if (i < 10) {
      REQUIRE(got.ok());
      CHECK(*got == std::string(100, char('a' + i)));
    } else {
      CHECK(got.status().code() == Code::kNotFound);
    }
  }
}

TEST_CASE("FsStore: deferred puts on many threads, flushed along the way, all land at sync()",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir, flushing_at(4096));
  auto key = [](int t, int i) { return fmt::format("u/chunks/{:02x}/t{}-{}", i % 32, t, i); };
  constexpr int kThreads = 4, kPuts = 400;
  for (const Status& s : put_on_threads(*store, kThreads, kPuts, key, 100, false)) {
    REQUIRE(s.ok());
  }
  REQUIRE(store->sync().ok());
  CHECK(count_temporaries(dir) == 0);
  CHECK(pack_files(dir).size() > 1);
  CHECK(list_all(*store, "")->size() == size_t(kThreads * kPuts));
  auto other = open_store(dir);  // every object, as another store reads the indexes
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPuts; ++i) {
      INFO(key(t, i));
      CHECK(*other->get(key(t, i)) == std::string(100, char('a' + t)));
    }
  }
}

// Deletes of packed objects: a next index while most of the pack is live, a new pack with the
// live objects once less than half is, no pack once none is; another store sees each at once.
TEST_CASE("FsStore: deleting packed objects writes indexes, compacts and removes packs",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  auto other = open_store(dir);
  auto key = [](int i) { return fmt::format("u/chunks/{:02x}/o{}", i, i); };
  constexpr int kObjects = 10;
  for (int i = 0; i < kObjects; ++i)
    REQUIRE(store->put_deferred(key(i), std::string(100, 'a' + i)).ok());
  REQUIRE(store->sync().ok());
  for (int i = 0; i < kObjects; ++i) REQUIRE(other->stat(key(i)).ok());  // read its index
  const auto first = pack_files(dir);
  REQUIRE(first.size() == 1);

  const std::vector<std::string> three{key(0), key(1), key(2)};
  REQUIRE(store->delete_batch(three).ok());
  auto names = pack_files(dir);
  CHECK(count_ending(names, ".pack") == 1);
  CHECK(count_ending(names, ".1.idx") == 1);
  CHECK(std::count(names.begin(), names.end(), first[0]) == 1);  // 7 of 10 live: it stays
  for (auto* s : {store.get(), other.get()}) {
    for (int i = 0; i < kObjects; ++i) {
      INFO(key(i));
      if (i < 3) {
        CHECK(s->stat(key(i)).status().code() == Code::kNotFound);
        CHECK(s->get(key(i)).status().code() == Code::kNotFound);
      } else {
        CHECK(*s->get(key(i)) == std::string(100, 'a' + i));
      }
    }
    CHECK(list_all(*s, "u/")->size() == 7);
  }
  // Deleting them again, from the other store, changes nothing.
  REQUIRE(other->delete_batch(three).ok());
  CHECK(pack_files(dir) == names);

  // 3 of 10 live: the live objects move to a new pack and the old one goes with its index.
  const std::vector<std::string> four{key(3), key(4), key(5), key(6)};
  REQUIRE(other->delete_batch(four).ok());
  names = pack_files(dir);
  REQUIRE(names.size() == 1);
  CHECK(names[0] != first[0]);
  CHECK(std::filesystem::file_size(dir.path() / "store/.packs/u" / names[0]) < 400);
  for (auto* s : {store.get(), other.get()}) {
    CHECK(keys_of(*list_all(*s, "u/")) == std::vector<std::string>{key(7), key(8), key(9)});
    for (int i = 7; i < kObjects; ++i) CHECK(*s->get(key(i)) == std::string(100, 'a' + i));
    CHECK(s->stat(key(3)).status().code() == Code::kNotFound);
  }

  // None live: no pack.
  const std::vector<std::string> rest{key(7), key(8), key(9)};
  REQUIRE(store->delete_batch(rest).ok());
  CHECK(pack_files(dir).empty());
  CHECK(list_all(*other, "")->empty());
}

TEST_CASE("FsStore: reads keep 8 packs open, and close a pack when it is deleted",
          "[state][unit]") {
  // 20 packs of 3 objects each (a sync() after every third): reads go round them, so the
  // kept descriptors turn over; then packs this store has open are deleted, by another store
  // and by this one.
  test::TempDir dir;
  auto store = open_store(dir);
  auto other = open_store(dir);
  auto key = [](int i) { return fmt::format("u/chunks/{:02x}/o{}", i % 256, i); };
  auto data = [](int i) { return std::string(100, char('a' + i % 26)) + std::to_string(i); };
  constexpr int kObjects = 60;
  for (int i = 0; i < kObjects; ++i) {
    REQUIRE(store->put_deferred(key(i), data(i)).ok());
    if (i % 3 == 2) REQUIRE(store->sync().ok());
  }
  REQUIRE(count_ending(pack_files(dir), ".pack") == kObjects / 3);
  using test_util::open_fds;
  const size_t before = open_fds();
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kObjects; ++i) {
      INFO(key(i));
      CHECK(*store->get(key(i)) == data(i));
    }
  }
  for (int i = kObjects - 1; i >= 0; --i) CHECK(*store->get(key(i)) == data(i));
  CHECK(open_fds() == before + 8);  // the last 8 packs read: those of key(0) to key(23)
  // key(0)'s pack, deleted whole by the other store: gone here too, and closed.
  const std::vector<std::string> first_pack{key(0), key(1), key(2)};
  REQUIRE(other->delete_batch(first_pack).ok());
  CHECK(count_ending(pack_files(dir), ".pack") == kObjects / 3 - 1);
  for (int i = 0; i < 3; ++i) CHECK(store->get(key(i)).status().code() == Code::kNotFound);
  CHECK(open_fds() == before + 7);
  // key(3)'s pack, deleted whole by this store: closed at once.
  const std::vector<std::string> second_pack{key(3), key(4), key(5)};
  REQUIRE(store->delete_batch(second_pack).ok());
  CHECK(open_fds() == before + 6);
  for (int i = 6; i < kObjects; ++i) CHECK(*store->get(key(i)) == data(i));
  CHECK(open_fds() == before + 8);
}

TEST_CASE("FsStore: two stores deleting from one pack at once both take effect", "[state][unit]") {
  test::TempDir dir;
  auto a = open_store(dir);
  auto b = open_store(dir);
  auto key = [](int i) { return fmt::format("u/chunks/{:02x}/o{}", i % 256, i); };
  constexpr int kObjects = 400;
  for (int i = 0; i < kObjects; ++i) REQUIRE(a->put_deferred(key(i), std::to_string(i)).ok());
  REQUIRE(a->sync().ok());
  // a deletes the even ones below 300, b the odd ones, in batches of 10, at once.
  std::vector<Status> results(2);
  std::thread ta([&] {
    for (int i = 0; i < 300 && results[0].ok(); i += 20) {
      std::vector<std::string> batch;
      for (int j = i; j < i + 20; j += 2) batch.push_back(key(j));
      results[0] = a->delete_batch(batch);
    }
  });
  std::thread tb([&] {
    for (int i = 1; i < 300 && results[1].ok(); i += 20) {
      std::vector<std::string> batch;
      for (int j = i; j < i + 20; j += 2) batch.push_back(key(j));
      results[1] = b->delete_batch(batch);
    }
  });
  ta.join();
  tb.join();
  REQUIRE(results[0].ok());
  REQUIRE(results[1].ok());
  for (auto* s : {a.get(), b.get()}) {
    CHECK(list_all(*s, "u/")->size() == size_t(kObjects - 300));
    for (int i = 0; i < kObjects; ++i) {
      INFO(key(i));
      if (i < 300) {
        CHECK(s->stat(key(i)).status().code() == Code::kNotFound);
      } else {
        CHECK(*s->get(key(i)) == std::to_string(i));
      }
    }
  }
}

TEST_CASE(
    "FsStore: a crash's leftover pack indexes are ignored and removed; a bad index "
    "leaves its pack's objects missing",
    "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  for (int i = 0; i < 10; ++i) {
    REQUIRE(store->put_deferred(fmt::format("u/chunks/00/o{}", i), std::string(50, 'x')).ok());
  }
  REQUIRE(store->sync().ok());
  REQUIRE(store->put_deferred("u/chunks/01/second", "second pack").ok());
  REQUIRE(store->sync().ok());
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string> one{fmt::format("u/chunks/00/o{}", i)};
    REQUIRE(store->delete_batch(one).ok());
  }
  // After three deletes: the newest index and the one before it (for a reader whose readdir
  // missed the newest).
  auto names = pack_files(dir);
  CHECK(count_ending(names, ".3.idx") == 1);
  CHECK(count_ending(names, ".2.idx") == 1);
  CHECK(count_ending(names, ".1.idx") == 0);
  // What a crash can leave: an older index still there (between the rename and the unlink),
  // and an index whose pack went (between the two unlinks).
  const auto folder = dir.path() / "store/.packs/u";
  std::string newest;
  for (const auto& n : names) {
    if (n.ends_with(".3.idx")) newest = n;
  }
  const std::string pack = newest.substr(0, newest.size() - 6);
  std::filesystem::copy_file(folder / newest, folder / (pack + ".1.idx"));
  std::filesystem::copy_file(folder / newest, folder / "0123456789abcdef.1.idx");
  auto fresh = open_store(dir);
  CHECK(fresh->stat("u/chunks/00/o2").status().code() == Code::kNotFound);
  CHECK(*fresh->get("u/chunks/00/o3") == std::string(50, 'x'));
  CHECK(list_all(*fresh, "u/")->size() == 8);
  auto removed = fresh->remove_temporaries();
  REQUIRE(removed.ok());
  CHECK(*removed == 3);  // generations 1 and 2 of the pack, and the orphan
  names.erase(std::remove(names.begin(), names.end(), pack + ".2.idx"), names.end());
  CHECK(pack_files(dir) == names);
  CHECK(list_all(*fresh, "u/")->size() == 8);

  // The second pack's index damaged: its object reads as missing, the first pack's do not.
  std::string second;
  for (const auto& n : names) {
    if (n.ends_with(".pack") && n != pack + ".pack") second = n;
  }
  REQUIRE(!second.empty());
  {
    std::fstream f(folder / second, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('?');
  }
  auto damaged = open_store(dir);
  CHECK(damaged->stat("u/chunks/01/second").status().code() == Code::kNotFound);
  CHECK(damaged->get("u/chunks/01/second").status().code() == Code::kNotFound);
  CHECK(*damaged->get("u/chunks/00/o3") == std::string(50, 'x'));
  // A save stores it again.
  REQUIRE(damaged->put_deferred("u/chunks/01/second", "second pack").ok());
  REQUIRE(damaged->sync().ok());
  CHECK(*damaged->get("u/chunks/01/second") == "second pack");
}

// A publish on one thread while others stat() and get() (each of which may read the pack
// folder again, and so the pack being published): every key stays found, also after a delete
// in the group rebuilt the store's map.
TEST_CASE("FsStore: packs published while other threads read stay whole in the store's map",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir, flushing_at(2048));
  auto key = [](int t, int i) { return fmt::format("u/chunks/{:02x}/t{}-{}", i % 16, t, i); };
  constexpr int kThreads = 3, kPuts = 300;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) {
      (void)store->stat("u/chunks/00/absent");
      (void)store->get(key(0, 0));
    }
  });
  const auto results = put_on_threads(*store, kThreads, kPuts, key, 64, true);
  REQUIRE(store->sync().ok());
  done = true;
  reader.join();
  for (const Status& s : results) REQUIRE(s.ok());
  const std::vector<std::string> one{key(0, 1)};
  REQUIRE(store->delete_batch(one).ok());
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPuts; ++i) {
      if (t == 0 && i == 1) continue;
      INFO(key(t, i));
      REQUIRE(store->stat(key(t, i)).ok());
    }
  }
  CHECK(list_all(*store, "u/")->size() == size_t(kThreads * kPuts - 1));
}

// Two saves of a user storing one chunk at once leave it in two packs: listed once, and a
// delete takes it out of both (no store, fresh or not, finds it after).
TEST_CASE("FsStore: a key in two packs is listed once and deleted from both", "[state][unit]") {
  test::TempDir dir;
  auto a = open_store(dir);
  auto b = open_store(dir);
  REQUIRE(a->put_deferred("u/chunks/ab/same", "one").ok());
  REQUIRE(a->put_deferred("u/chunks/ab/only-a", "a").ok());
  REQUIRE(b->put_deferred("u/chunks/ab/same", "one").ok());
  REQUIRE(a->sync().ok());
  REQUIRE(b->sync().ok());
  CHECK(count_ending(pack_files(dir), ".pack") == 2);
  CHECK(*list_all(*a, "u/") ==
        std::vector<ObjectInfo>{{"u/chunks/ab/only-a", 1}, {"u/chunks/ab/same", 3}});
  const std::vector<std::string> same{"u/chunks/ab/same"};
  REQUIRE(a->delete_batch(same).ok());
  auto fresh = open_store(dir);
  for (auto* s : {a.get(), b.get(), fresh.get()}) {
    CHECK(s->stat("u/chunks/ab/same").status().code() == Code::kNotFound);
    CHECK(s->get("u/chunks/ab/same").status().code() == Code::kNotFound);
    CHECK(keys_of(*list_all(*s, "u/")) == std::vector<std::string>{"u/chunks/ab/only-a"});
  }
  CHECK(count_ending(pack_files(dir), ".pack") == 1);  // b's pack held only that key
}

// Many tiny (and empty) objects: the pack is published by its index's size, never growing an
// index a reader would refuse.
TEST_CASE("FsStore: tiny objects publish packs by their index's size", "[state][unit]") {
  test::TempDir dir;
  FsStore::Options options;
  options.flush_index_bytes = 4096;
  auto store = open_store(dir, options);
  auto key = [](int i) { return fmt::format("u/chunks/{:02x}/tiny-{}", i % 256, i); };
  constexpr int kPuts = 1000;
  for (int i = 0; i < kPuts; ++i) {
    REQUIRE(store->put_deferred(key(i), i % 2 ? "x" : "").ok());
    store->wait_publishes();  // each publish over before the next put, as a slow saver's
  }
  CHECK(count_ending(pack_files(dir), ".pack") >= 5);  // published along the way
  REQUIRE(store->sync().ok());
  auto fresh = open_store(dir);
  CHECK(list_all(*fresh, "u/")->size() == size_t(kPuts));
  for (int i = 0; i < kPuts; i += 7) CHECK(*fresh->get(key(i)) == (i % 2 ? "x" : ""));
}

// Pages of 1 to 3 over files and packs of several groups, with a key that is both a file and
// packed at a page boundary: every key once, in order.
TEST_CASE("FsStore: list pages merge files and packs of every group in key order",
          "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir);
  REQUIRE(store->put("a/boxes/b/head", "h").ok());
  REQUIRE(store->put_deferred("a/chunks/00/p1", "p").ok());
  REQUIRE(store->put_deferred("a/chunks/00/p2", "pp").ok());
  REQUIRE(store->put_deferred("b/chunks/00/p3", "ppp").ok());
  REQUIRE(store->put_deferred("a/chunks/00/both", "packed").ok());
  REQUIRE(store->sync().ok());
  REQUIRE(store->put("a/chunks/00/both", "file").ok());
  REQUIRE(store->put("b/boxes/c/head", "hh").ok());
  REQUIRE(store->put("ab/x", "x").ok());
  const std::vector<ObjectInfo> all{
      {"a/boxes/b/head", 1}, {"a/chunks/00/both", 4}, {"a/chunks/00/p1", 1}, {"a/chunks/00/p2", 2},
      {"ab/x", 1},           {"b/boxes/c/head", 2},   {"b/chunks/00/p3", 3}};
  for (size_t limit = 1; limit <= 3; ++limit) {
    INFO("limit " << limit);
    std::vector<ObjectInfo> got;
    std::string after;
    for (int pages = 0; pages < 20; ++pages) {
      auto page = store->list("", after, limit);
      REQUIRE(page.ok());
      CHECK(page->objects.size() <= limit);
      got.insert(got.end(), page->objects.begin(), page->objects.end());
      if (!page->truncated) break;
      after = page->objects.back().key;
    }
    CHECK(got == all);
  }
  CHECK(keys_of(*list_all(*store, "a")) ==
        std::vector<std::string>{"a/boxes/b/head", "a/chunks/00/both", "a/chunks/00/p1",
                                 "a/chunks/00/p2", "ab/x"});
  CHECK(keys_of(*list_all(*store, "a/chunks/00/p")) ==
        std::vector<std::string>{"a/chunks/00/p1", "a/chunks/00/p2"});
}

}  // namespace
}  // namespace cb::state
