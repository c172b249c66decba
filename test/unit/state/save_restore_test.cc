#include "base/clock.h"
#include "crypto/bytes.h"
#include "crypto/random.h"
#include "state/chunk.h"
#include "state/fs_store.h"
#include "state/restore.h"
#include "state/save.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace cb::state {
namespace {

using test_util::FaultyStore;
using test_util::kOldMtimeNs;
using test_util::picture;
using test_util::write_file;

constexpr ChunkerParams kSmallChunks{256, 1024, 4096};

class FixedClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override { return now_; }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::time_point();
  }
  void advance(std::chrono::milliseconds d) { now_ += d; }

 private:
  std::chrono::system_clock::time_point now_{std::chrono::milliseconds(1'764'489'600'000)};
};

crypto::SymmetricKey key_from(uint64_t seed) {
  crypto::SeededRandom random(seed);
  return crypto::SymmetricKey::generate(random);
}

std::string noise(size_t n, uint64_t seed) {
  crypto::SeededRandom random(seed);
  std::string s(n, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(s.data()), n));
  return s;
}

// One user's world: a store, a state key, a box's home directory to save.
struct World {
  test::TempDir dir;
  std::unique_ptr<FsStore> store = std::move(FsStore::open(dir.path() / "store")).value();
  StateKeys keys{key_from(1)};
  crypto::SeededRandom random{2};
  FixedClock clock;
  BoxLocation box{"u1", "box1"};

  std::filesystem::path home() const { return dir.path() / "home"; }

  SaveOptions options(const std::filesystem::path& root) const {
    SaveOptions o;
    o.scan.roots = {{root.string(), "home/user"}};
    o.scan.chunker = kSmallChunks;
    return o;
  }

  Result<SaveResult> save(Store& s, const BoxLocation& where, const std::filesystem::path& root) {
    clock.advance(std::chrono::milliseconds(1000));
    return save_snapshot(s, keys, where, options(root), clock, random);
  }
  Result<SaveResult> save() { return save(*store, box, home()); }

  // Restores snapshot |id| of |where| (its home root) into a fresh target; returns the path.
  Result<std::filesystem::path> restore(Store& s, const BoxLocation& where, const std::string& id,
                                        const std::string& name) {
    ASSIGN_OR_RETURN(Manifest m, load_manifest(s, keys, where, id));
    RestoreOptions o;
    o.strip = "home/user";
    o.target = (dir.path() / name).string();
    ASSIGN_OR_RETURN(RestoreResult r, restore_snapshot(s, keys, where.user, m, o, random));
    (void)r;
    return std::filesystem::path(o.target);
  }

  // Options restoring the home root into a fresh folder |name| on |threads| fetch threads.
  RestoreOptions restore_options(const std::string& name, int threads) const {
    RestoreOptions o;
    o.strip = "home/user";
    o.target = (dir.path() / name).string();
    o.fetch_threads = threads;
    return o;
  }

  // Flips one bit in the middle of the stored object |key|.
  void tamper(const std::string& key) {
    std::string sealed = *store->get(key);
    sealed[sealed.size() / 2] ^= 0x01;
    REQUIRE(store->put(key, sealed).ok());
  }

  // No temporary folder of a restore is left in the world's directory.
  void check_no_restore_leftovers() const {
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      CHECK(e.path().filename().string().rfind(".cb-restore-", 0) != 0);
    }
  }

  void make_tree() {
    write_file(home() / "notes.txt", "remember the milk\n", kOldMtimeNs + 1, 0640);
    write_file(home() / "work/big.bin", noise(50000, 7), kOldMtimeNs + 2, 0600);
    write_file(home() / "work/copy.bin", noise(50000, 7), kOldMtimeNs + 3, 0644);  // a duplicate
    write_file(home() / "work/empty", "", kOldMtimeNs + 4, 0444);
    write_file(home() / "work/script.sh", "#!/bin/sh\necho hi\n", kOldMtimeNs + 5, 04755);
    std::filesystem::create_directories(home() / "work/deep/er/still");
    std::filesystem::create_symlink("../notes.txt", home() / "work/link");
    std::filesystem::create_symlink("/etc/passwd", home() / "work/abs-link");
    test_util::set_mtime(home() / "work/link", kOldMtimeNs + 6);
    REQUIRE(::chmod((home() / "work/deep").c_str(), 0700) == 0);
    if (::geteuid() == 0) {
      REQUIRE(::chown((home() / "notes.txt").c_str(), 1234, 5678) == 0);
      REQUIRE(::lchown((home() / "work/link").c_str(), 1234, 5678) == 0);
    }
    for (const char* d : {"work/deep/er/still", "work/deep/er", "work/deep", "work", ""}) {
      test_util::set_mtime(home() / d, kOldMtimeNs + 100);
    }
  }
};

TEST_CASE("save and restore: a restored tree equals the saved one", "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  CHECK(saved->record.stats.files == 5);
  CHECK(saved->record.stats.symlinks == 2);
  CHECK(saved->record.stats.dirs == 5);
  CHECK(saved->record.stats.changed_files == 5);
  CHECK(saved->record.stats.logical_bytes == 18 + 50000 + 50000 + 0 + 18);
  // The duplicate file's chunks were stored once.
  CHECK(saved->record.stats.added_bytes == 18 + 50000 + 18);
  CHECK(saved->record.parent.empty());
  CHECK(saved->record.manifest == manifest_key(w.box, saved->record.snapshot_id));
  CHECK(saved->record.manifest_bytes == *w.store->stat(saved->record.manifest));

  auto target = w.restore(*w.store, w.box, saved->record.snapshot_id, "restored");
  REQUIRE(target.ok());
  auto expected = picture(w.home());
  auto got = picture(*target);
  CHECK(got == expected);
  if (::geteuid() == 0) CHECK(got["notes.txt"].uid == 1234);
  CHECK(got["work/script.sh"].mode == 04755);
  // No temporary folder is left next to the target.
  w.check_no_restore_leftovers();
}

TEST_CASE("save: the record, timeline and head describe each save", "[state][unit]") {
  World w;
  w.make_tree();
  auto first = w.save();
  REQUIRE(first.ok());
  write_file(w.home() / "notes.txt", "remember the milk and eggs\n", kOldMtimeNs + 50);
  auto second = w.save();
  REQUIRE(second.ok());
  CHECK(second->record.parent == first->record.snapshot_id);
  CHECK(second->record.stats.changed_files == 1);
  CHECK(second->record.stats.added_chunks == 1);
  CHECK(second->record.stats.added_bytes == 27);

  auto head = load_head(*w.store, w.keys, w.box);
  REQUIRE(head.ok());
  REQUIRE(head->has_value());
  CHECK((*head)->snapshot_id == second->record.snapshot_id);
  auto timeline = load_timeline(*w.store, w.keys, w.box);
  REQUIRE(timeline.ok());
  REQUIRE(timeline->entries.size() == 2);
  CHECK(timeline->entries[0].snapshot_id == first->record.snapshot_id);
  CHECK(timeline->entries[1].stats == second->record.stats);
  CHECK(timeline->entries[1].saved_at_ms == second->record.saved_at_ms);
  auto record = load_record(*w.store, w.keys, w.box, second->record.snapshot_id);
  REQUIRE(record.ok());
  CHECK(*record == second->record);
  // Both snapshots restore to what they saved.
  auto old_target = w.restore(*w.store, w.box, first->record.snapshot_id, "old");
  REQUIRE(old_target.ok());
  CHECK(test_util::read_file(*old_target / "notes.txt") == "remember the milk\n");
  auto new_target = w.restore(*w.store, w.box, second->record.snapshot_id, "new");
  REQUIRE(new_target.ok());
  CHECK(test_util::read_file(*new_target / "notes.txt") == "remember the milk and eggs\n");
}

// Two saves of one user on one store share its open pack. When that pack fails to publish,
// sync() tells one of them; the other's finish() fails too, as its chunks were in the pack.
TEST_CASE("save: a pack that fails to publish fails every save that shared the store",
          "[state][unit]") {
  World w;
  std::filesystem::create_directories(w.dir.path() / "store/.packs");
  { std::ofstream(w.dir.path() / "store/.packs/u1") << "in the way"; }
  const std::string a = "chunk of the first save", b = "chunk of the second save";
  const auto bytes = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  StoreChunkSink first(*w.store, w.keys, "u1");
  StoreChunkSink second(*w.store, w.keys, "u1");
  REQUIRE(first.add(w.keys.chunk_id(a), bytes(a)).ok());
  REQUIRE(second.add(w.keys.chunk_id(b), bytes(b)).ok());
  const Status told = first.finish();
  CHECK(!told.ok());
  CHECK(std::string(told.message()).find(".packs/u1") != std::string::npos);
  const Status other = second.finish();
  CHECK(other.code() == Code::kUnavailable);
  CHECK(!w.store->stat(chunk_key("u1", w.keys.chunk_id(b))).ok());
  // A save that starts after the failure is not failed by it.
  std::filesystem::remove(w.dir.path() / "store/.packs/u1");
  StoreChunkSink later(*w.store, w.keys, "u1");
  REQUIRE(later.add(w.keys.chunk_id(b), bytes(b)).ok());
  CHECK(later.finish().ok());
  CHECK(w.store->stat(chunk_key("u1", w.keys.chunk_id(b))).ok());
}

TEST_CASE("save: files read on several threads store each distinct chunk once", "[state][unit]") {
  World w;
  // 40 files, each content four times: threads reading copies at once meet the same chunks.
  for (int i = 0; i < 160; ++i) {
    write_file(w.home() / ("d" + std::to_string(i % 7)) / ("f" + std::to_string(i)),
               noise(3000 + 97 * (i % 40), uint64_t(i % 40)), kOldMtimeNs);
  }
  SaveOptions o = w.options(w.home());
  o.read_threads = 4;
  o.put_threads = 3;
  auto saved = save_snapshot(*w.store, w.keys, w.box, o, w.clock, w.random);
  REQUIRE(saved.ok());
  const std::vector<ChunkId> distinct = referenced_chunks(saved->manifest);
  CHECK(saved->record.stats.changed_files == 160);
  CHECK(saved->record.stats.added_chunks == distinct.size());
  uint64_t distinct_bytes = 0;
  for (int i = 0; i < 40; ++i) distinct_bytes += 3000 + 97 * i;
  CHECK(saved->record.stats.added_bytes == distinct_bytes);
  CHECK(list_all(*w.store, "u1/chunks/")->size() == distinct.size());
  auto target = w.restore(*w.store, w.box, saved->record.snapshot_id, "back");
  REQUIRE(target.ok());
  CHECK(picture(*target) == picture(w.home()));
}

TEST_CASE("save: a save without changes reads no file and stores no chunk", "[state][unit]") {
  World w;
  w.make_tree();
  REQUIRE(w.save().ok());
  FaultyStore counting(*w.store);
  auto again = w.save(counting, w.box, w.home());
  REQUIRE(again.ok());
  CHECK(again->record.stats.changed_files == 0);
  CHECK(again->record.stats.added_chunks == 0);
  CHECK(counting.stats() == 0);  // not even asked the store
  // Only the metadata objects were written, in the commit order, and then the parent's
  // manifest as an (empty) delta of this one.
  std::vector<std::string> expected = {
      manifest_key(w.box, again->record.snapshot_id), record_key(w.box, again->record.snapshot_id),
      timeline_key(w.box), head_key(w.box), manifest_key(w.box, again->record.parent)};
  CHECK(counting.put_keys() == expected);
}

TEST_CASE("save: a second box of the same user uploads no chunk for files the first saved",
          "[state][unit]") {
  World w;
  w.make_tree();
  REQUIRE(w.save().ok());
  // The second box holds a copy of one of the first box's files.
  const auto other_home = w.dir.path() / "other-home";
  write_file(other_home / "copied.bin", noise(50000, 7));
  BoxLocation second{"u1", "box2"};
  FaultyStore counting(*w.store);
  auto saved = w.save(counting, second, other_home);
  REQUIRE(saved.ok());
  CHECK(saved->record.stats.changed_files == 1);
  CHECK(saved->record.stats.added_chunks == 0);
  CHECK(saved->record.stats.added_bytes == 0);
  for (const auto& key : counting.put_keys()) CHECK(key.find("/chunks/") == std::string::npos);
  // And it restores from the shared chunks.
  auto target = w.restore(*w.store, second, saved->record.snapshot_id, "restored2");
  REQUIRE(target.ok());
  CHECK(test_util::read_file(*target / "copied.bin") == noise(50000, 7));
}

TEST_CASE("save: another user's key gives other chunk ids for the same content", "[state][unit]") {
  World w;
  write_file(w.home() / "same.txt", "identical content");
  auto mine = w.save();
  REQUIRE(mine.ok());
  StateKeys theirs(key_from(99));
  crypto::SeededRandom random(3);
  BoxLocation their_box{"u2", "box9"};
  auto other = save_snapshot(*w.store, theirs, their_box, w.options(w.home()), w.clock, random);
  REQUIRE(other.ok());
  CHECK(other->record.stats.added_chunks == 1);  // nothing shared across users
  auto my_chunks = referenced_chunks(mine->manifest);
  auto their_chunks = referenced_chunks(other->manifest);
  REQUIRE(my_chunks.size() == 1);
  REQUIRE(their_chunks.size() == 1);
  CHECK(my_chunks[0] != their_chunks[0]);
  // Their key cannot open my snapshot's manifest or chunks.
  CHECK(load_manifest(*w.store, theirs, w.box, mine->record.snapshot_id).status().code() ==
        Code::kDataLoss);
  auto sealed = w.store->get(chunk_key("u1", my_chunks[0]));
  REQUIRE(sealed.ok());
  CHECK(open_chunk(theirs, my_chunks[0], *sealed).status().code() == Code::kDataLoss);
}

TEST_CASE("restore: a tampered or missing chunk is kDataLoss naming the file", "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  const Entry* big = saved->manifest.find("home/user/work/big.bin");
  REQUIRE(big != nullptr);
  REQUIRE(big->chunks.size() > 2);
  const ChunkId victim = big->chunks[1].id;
  const std::string key = chunk_key("u1", victim);

  SECTION("a flipped byte") {
    std::string sealed = *w.store->get(key);
    sealed[sealed.size() / 2] ^= 0x40;
    REQUIRE(w.store->put(key, sealed).ok());
  }
  SECTION("another chunk's object in its place") {
    REQUIRE(w.store->put(key, *w.store->get(chunk_key("u1", big->chunks[0].id))).ok());
  }
  SECTION("deleted") {
    std::vector<std::string> keys = {key};
    REQUIRE(w.store->delete_batch(keys).ok());
  }
  SECTION("other bytes sealed under its id (a box holding the key can do that)") {
    const std::string other(big->chunks[1].size, 'x');
    REQUIRE(w.store->put(key, seal_chunk(w.keys, victim, crypto::byte_view(other))).ok());
  }
  auto target = w.restore(*w.store, w.box, saved->record.snapshot_id, "restored");
  REQUIRE(!target.ok());
  CHECK(target.status().code() == Code::kDataLoss);
  const std::string message(target.status().message());
  CHECK(message.find("home/user/work/big.bin") != std::string::npos);
  CHECK(message.find(victim.hex()) != std::string::npos);
  // Nothing was left behind: no target, no temporary folder.
  CHECK(!std::filesystem::exists(w.dir.path() / "restored"));
  w.check_no_restore_leftovers();
}

// Chunks are fetched and opened ahead of the writer on several threads; the writer still
// reports the first bad chunk in manifest order, whatever the fetch threads reached first.
TEST_CASE("restore: with fetch threads the first bad chunk in path order is the error",
          "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  const Entry* notes = saved->manifest.find("home/user/notes.txt");
  const Entry* big = saved->manifest.find("home/user/work/big.bin");
  REQUIRE(notes != nullptr);
  REQUIRE(big != nullptr);
  REQUIRE(notes->chunks.size() == 1);
  std::vector<std::string> gone = {chunk_key("u1", big->chunks.back().id)};
  REQUIRE(w.store->delete_batch(gone).ok());
  w.tamper(chunk_key("u1", notes->chunks[0].id));

  for (int threads : {1, 2, 8}) {
    INFO("fetch threads " << threads);
    RestoreOptions o = w.restore_options("t" + std::to_string(threads), threads);
    auto done = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(!done.ok());
    CHECK(done.status().code() == Code::kDataLoss);
    const std::string message(done.status().message());
    CHECK(message.find("home/user/notes.txt") != std::string::npos);
    CHECK(message.find(notes->chunks[0].id.hex()) != std::string::npos);
    CHECK(!std::filesystem::exists(o.target));
  }
  w.check_no_restore_leftovers();
}

// A file of many chunks is written in ranges by several threads at once; an error in an
// early range is the one reported even when a later range (taken by another thread) fails
// too, and nothing of a failed restore is left behind.
TEST_CASE("restore: the first bad range of a large file is the error, whatever thread met it",
          "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  const Entry* big = saved->manifest.find("home/user/work/big.bin");
  REQUIRE(big != nullptr);
  REQUIRE(big->chunks.size() > 40);  // three ranges of 16 and more
  const ChunkId early = big->chunks[20].id;
  std::vector<std::string> gone = {chunk_key("u1", big->chunks[40].id),
                                   chunk_key("u1", big->chunks.back().id)};
  REQUIRE(w.store->delete_batch(gone).ok());
  w.tamper(chunk_key("u1", early));

  for (int threads : {1, 2, 8}) {
    INFO("fetch threads " << threads);
    RestoreOptions o = w.restore_options("t" + std::to_string(threads), threads);
    auto done = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(!done.ok());
    CHECK(done.status().code() == Code::kDataLoss);
    const std::string message(done.status().message());
    CHECK(message.find("home/user/work/big.bin") != std::string::npos);
    CHECK(message.find(early.hex()) != std::string::npos);
    CHECK(message.find("does not authenticate") != std::string::npos);
    CHECK(!std::filesystem::exists(o.target));
  }
  w.check_no_restore_leftovers();
}

// Progress comes from the write threads one call at a time; the counts only grow and end at
// the totals.
TEST_CASE("restore: progress counts grow to the totals with write threads", "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  for (int threads : {1, 4}) {
    INFO("fetch threads " << threads);
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    RestoreOptions o = w.restore_options("p" + std::to_string(threads), threads);
    o.progress = [&](uint64_t files, uint64_t bytes) { calls.emplace_back(files, bytes); };
    auto done = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(done.ok());
    REQUIRE(calls.size() == done->files);
    for (size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i].first == i + 1);
      if (i > 0) CHECK(calls[i].second >= calls[i - 1].second);
    }
    CHECK(calls.back().second == done->bytes);
    CHECK(picture(o.target) == picture(w.home()));
  }
}

TEST_CASE("restore: any number of fetch threads restores the same tree", "[state][unit]") {
  World w;
  w.make_tree();
  for (int i = 0; i < 20; ++i) {
    write_file(w.home() / ("many/f" + std::to_string(i)), noise(3000 + 700 * size_t(i), 40 + i),
               kOldMtimeNs + 200 + i);
  }
  test_util::set_mtime(w.home() / "many", kOldMtimeNs + 300);
  test_util::set_mtime(w.home(), kOldMtimeNs + 100);
  auto saved = w.save();
  REQUIRE(saved.ok());
  const auto expected = picture(w.home());
  for (int threads : {1, 3, 16}) {
    INFO("fetch threads " << threads);
    RestoreOptions o = w.restore_options("t" + std::to_string(threads), threads);
    auto done = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(done.ok());
    CHECK(done->files == 25);
    CHECK(picture(o.target) == expected);
  }
}

// Counts get_many() calls and their sizes; gets go to the inner store.
class BatchCountingStore final : public Store {
 public:
  explicit BatchCountingStore(Store& inner) : inner_(inner) {}
  Status put(std::string_view key, std::string_view data) override { return inner_.put(key, data); }
  Result<std::string> get(std::string_view key) override {
    ++singles_;
    return inner_.get(key);
  }
  std::vector<Result<std::string>> get_many(std::span<const std::string> keys) override {
    {
      std::lock_guard lock(mu_);
      batches_.push_back(keys.size());
    }
    return inner_.get_many(keys);
  }
  Result<uint64_t> stat(std::string_view key) override { return inner_.stat(key); }
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit) override {
    return inner_.list(prefix, start_after, limit);
  }
  Status delete_batch(std::span<const std::string> keys) override {
    return inner_.delete_batch(keys);
  }
  // Read after the restore returned.
  std::vector<size_t> batches() const { return batches_; }
  int singles() const { return singles_.load(); }

 private:
  Store& inner_;
  std::mutex mu_;
  std::vector<size_t> batches_;  // guarded by mu_
  std::atomic<int> singles_{0};
};

// 40 one-chunk files, small/f00..f39, then small/zbig of more than 16 chunks: in manifest
// order, the restore's tasks are f00-f15, f16-f31, f32-f39 with zbig's first 8 chunks, then
// the rest of zbig.
Result<SaveResult> save_small_files(World& w) {
  std::filesystem::create_directories(w.home());
  for (int i = 0; i < 40; ++i) {
    write_file(w.home() / fmt::format("small/f{:02}", i), noise(200 + size_t(i), 100 + i),
               kOldMtimeNs + i);
  }
  write_file(w.home() / "small/zbig", noise(60000, 9), kOldMtimeNs + 50);
  test_util::set_mtime(w.home() / "small", kOldMtimeNs + 300);
  test_util::set_mtime(w.home(), kOldMtimeNs + 300);
  return w.save();
}

// Small files share a task: their chunks are fetched with one get_many() of 16, so a store
// over a network (the agent's over the api's door) makes a round trip per 16 chunks, not per
// file. A bad chunk inside such a batch still names its own file.
TEST_CASE("restore: the chunks of small files are fetched 16 at a time across files",
          "[state][unit]") {
  World w;
  auto saved = save_small_files(w);
  REQUIRE(saved.ok());
  size_t chunks = 0;
  for (const Entry& e : saved->manifest.entries) chunks += e.chunks.size();
  const Entry* big = saved->manifest.find("home/user/small/zbig");
  REQUIRE(big != nullptr);
  REQUIRE(big->chunks.size() > 16);
  const auto expected = picture(w.home());

  for (int threads : {1, 4}) {
    INFO("fetch threads " << threads);
    BatchCountingStore counting(*w.store);
    RestoreOptions o = w.restore_options("t" + std::to_string(threads), threads);
    auto done = restore_snapshot(counting, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(done.ok());
    CHECK(picture(o.target) == expected);
    CHECK(done->chunks_fetched == chunks);
    CHECK(counting.singles() == 0);
    // In call order, which the threads mix: every task is full but the last one queued.
    std::vector<size_t> batches = counting.batches();
    std::sort(batches.rbegin(), batches.rend());
    CHECK(batches.size() == (chunks + 15) / 16);
    size_t total = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      total += batches[i];
      if (i + 1 < batches.size()) {
        CHECK(batches[i] == 16);  // the small files' chunks fill tasks, then the big file's
      } else {
        CHECK(batches[i] <= 16);
      }
    }
    CHECK(total == chunks);
  }

  // f05 is missing and f20 tampered; both sit in the first batches, after good files.
  const Entry* f05 = saved->manifest.find("home/user/small/f05");
  const Entry* f20 = saved->manifest.find("home/user/small/f20");
  REQUIRE(f05 != nullptr);
  REQUIRE(f20 != nullptr);
  w.tamper(chunk_key("u1", f20->chunks[0].id));
  std::vector<std::string> gone = {chunk_key("u1", f05->chunks[0].id)};
  REQUIRE(w.store->delete_batch(gone).ok());
  for (int threads : {1, 4}) {
    INFO("fetch threads " << threads);
    RestoreOptions o = w.restore_options("bad" + std::to_string(threads), threads);
    auto done = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(!done.ok());
    CHECK(done.status().code() == Code::kDataLoss);
    const std::string message(done.status().message());
    CHECK(message.find("home/user/small/f05: chunk " + f05->chunks[0].id.hex() + ": missing") !=
          std::string::npos);
    CHECK(!std::filesystem::exists(o.target));
  }

  w.check_no_restore_leftovers();
}

// A task checks the ids of all its chunks at once, across its files; the error is the one of
// the first failing range in manifest order. Within one range, a chunk that fails to open is
// the error even after a mismatch before it: every chunk of a range opens before its ids
// are checked.
TEST_CASE("restore: a task's chunk ids are checked together; the first failing range is the error",
          "[state][unit]") {
  World w;
  auto saved = save_small_files(w);
  REQUIRE(saved.ok());
  const Entry* f33 = saved->manifest.find("home/user/small/f33");
  const Entry* big = saved->manifest.find("home/user/small/zbig");
  REQUIRE(f33 != nullptr);
  REQUIRE(big != nullptr);
  REQUIRE(big->chunks.size() > 16);
  auto reseal = [&](const ChunkRef& c) {  // other bytes sealed under |c|'s id
    const std::string other(c.size, 'x');
    REQUIRE(w.store->put(chunk_key("u1", c.id), seal_chunk(w.keys, c.id, crypto::byte_view(other)))
                .ok());
  };
  auto remove = [&](const ChunkRef& c) {
    std::vector<std::string> gone = {chunk_key("u1", c.id)};
    REQUIRE(w.store->delete_batch(gone).ok());
  };
  std::string expected;
  SECTION("a mismatch in zbig's range of a task shared with f32-f39 names zbig") {
    reseal(big->chunks[3]);
    expected = "home/user/small/zbig: chunk " + big->chunks[3].id.hex() +
               ": content does not match its id";
  }
  SECTION("a mismatch in f33 beats a missing chunk of zbig in the same task") {
    reseal(f33->chunks[0]);
    remove(big->chunks[1]);
    expected =
        "home/user/small/f33: chunk " + f33->chunks[0].id.hex() + ": content does not match its id";
  }
  SECTION("in one range, a missing chunk is the error even after a mismatch before it") {
    reseal(big->chunks[2]);
    remove(big->chunks[5]);
    expected = "home/user/small/zbig: chunk " + big->chunks[5].id.hex() + ": missing";
  }
  for (int threads : {1, 4}) {
    INFO("fetch threads " << threads);
    RestoreOptions o = w.restore_options("t" + std::to_string(threads), threads);
    auto done = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
    REQUIRE(!done.ok());
    CHECK(done.status().code() == Code::kDataLoss);
    CHECK(std::string(done.status().message()).find(expected) != std::string::npos);
    CHECK(!std::filesystem::exists(o.target));
  }
  w.check_no_restore_leftovers();
}

// The creating thread's error at an entry leaves the chunks of earlier small files in its
// pending task; they are still fetched, so a missing chunk there is the error reported, with
// fetch threads as without.
TEST_CASE("restore: a chunk before an entry that cannot be created is still checked first",
          "[state][unit]") {
  World w;
  std::filesystem::create_directories(w.home());
  for (int i = 0; i < 6; ++i) {
    write_file(w.home() / fmt::format("small/f{:02}", i), noise(300, 200 + i), kOldMtimeNs + i);
  }
  test_util::set_mtime(w.home() / "small", kOldMtimeNs + 300);
  test_util::set_mtime(w.home(), kOldMtimeNs + 300);
  auto saved = w.save();
  REQUIRE(saved.ok());
  Manifest m = saved->manifest;
  // A name longer than the file system takes (ENAMETOOLONG) right after f05.
  Entry too_long;
  too_long.path = "home/user/small/f05" + std::string(300, 'z');
  too_long.mode = 0644;
  auto at = std::find_if(m.entries.begin(), m.entries.end(),
                         [](const Entry& e) { return e.path == "home/user/small/f05"; });
  REQUIRE(at != m.entries.end());
  m.entries.insert(at + 1, too_long);
  const Entry* f02 = m.find("home/user/small/f02");
  REQUIRE(f02 != nullptr);
  std::vector<std::string> gone = {chunk_key("u1", f02->chunks[0].id)};
  REQUIRE(w.store->delete_batch(gone).ok());
  for (int threads : {1, 4}) {
    INFO("fetch threads " << threads);
    RestoreOptions o = w.restore_options("t" + std::to_string(threads), threads);
    auto done = restore_snapshot(*w.store, w.keys, "u1", m, o, w.random);
    REQUIRE(!done.ok());
    CHECK(done.status().code() == Code::kDataLoss);
    CHECK(std::string(done.status().message()).find("home/user/small/f02: chunk") !=
          std::string::npos);
    CHECK(!std::filesystem::exists(o.target));
  }
  w.check_no_restore_leftovers();
}

TEST_CASE("restore: a scope of paths keeps the box path under the target", "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  RestoreOptions o;
  o.paths = {"home/user/work/big.bin", "home/user/work/deep"};
  o.target = (w.dir.path() / "Restored-2026").string();
  auto r = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
  REQUIRE(r.ok());
  CHECK(r->files == 1);
  auto got = picture(o.target);
  std::vector<std::string> paths;
  for (const auto& [p, n] : got) paths.push_back(p);
  CHECK(paths == std::vector<std::string>{"", "home", "home/user", "home/user/work",
                                          "home/user/work/big.bin", "home/user/work/deep",
                                          "home/user/work/deep/er",
                                          "home/user/work/deep/er/still"});
  CHECK(got["home/user/work/big.bin"].data == noise(50000, 7));
  // Ancestors that are entries keep their saved mode and mtime.
  CHECK(got["home/user/work"].mtime_ns == kOldMtimeNs + 100);
  CHECK(got["home/user/work/deep"].mode == 0700);
}

TEST_CASE("restore: bad scopes and targets are refused and nothing is written", "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  auto attempt = [&](RestoreOptions o) {
    return restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random).status().code();
  };
  RestoreOptions base;
  base.target = (w.dir.path() / "t").string();
  RestoreOptions o = base;
  o.paths = {"home/user/../../etc"};
  CHECK(attempt(o) == Code::kInvalidArgument);
  o.paths = {"/etc/passwd"};
  CHECK(attempt(o) == Code::kInvalidArgument);
  o.paths = {"etc/passwd"};
  CHECK(attempt(o) == Code::kNotFound);
  o = base;
  o.target = "relative/target";
  CHECK(attempt(o) == Code::kInvalidArgument);
  o.target = (w.dir.path() / "no-such-parent/t").string();
  CHECK(attempt(o) == Code::kInvalidArgument);
  o = base;
  o.strip = "home/user/notes.txt";
  CHECK(attempt(o) == Code::kInvalidArgument);
  std::filesystem::create_directory(base.target);
  CHECK(attempt(base) == Code::kAlreadyExists);
  CHECK(std::filesystem::is_empty(base.target));
}

TEST_CASE("restore: an entry below a symlink never reaches the file system", "[state][unit]") {
  World w;
  const auto outside = w.dir.path() / "outside";
  std::filesystem::create_directory(outside);
  Manifest m;
  Entry root;
  root.path = "home/user";
  root.kind = EntryKind::kDir;
  root.mode = 0755;
  Entry link = root;
  link.path = "home/user/escape";
  link.kind = EntryKind::kSymlink;
  link.target = outside.string();
  Entry file = root;
  file.path = "home/user/escape/planted";
  file.kind = EntryKind::kFile;
  file.mode = 0644;
  m.entries = {root, link, file};
  RestoreOptions o;
  o.target = (w.dir.path() / "t").string();
  auto r = restore_snapshot(*w.store, w.keys, "u1", m, o, w.random);
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(std::filesystem::is_empty(outside));
  CHECK(!std::filesystem::exists(o.target));
}

TEST_CASE("restore: replace swaps a whole root in and removes the old tree", "[state][unit]") {
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  auto expected = picture(w.home());
  write_file(w.home() / "notes.txt", "scribbled over");
  write_file(w.home() / "junk", "junk");
  RestoreOptions o;
  o.strip = "home/user";
  o.target = w.home().string();
  o.replace = true;
  auto r = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
  REQUIRE(r.ok());
  CHECK(picture(w.home()) == expected);
  w.check_no_restore_leftovers();
}

// Crash safety of the commit order (README.md §Commit): a second save fails at each of its
// puts in turn, either before the object is written or after (a crash between the write and
// the caller learning of it). Every time, every snapshot the timeline names restores to what
// it saved, the head names one of them, and a later save succeeds.
TEST_CASE("save: a failure at any put leaves every committed snapshot restorable",
          "[state][unit]") {
  World w;
  w.make_tree();
  auto first = w.save();
  REQUIRE(first.ok());
  const auto first_picture = picture(w.home());
  write_file(w.home() / "notes.txt", "second version of the notes\n", kOldMtimeNs + 60);
  write_file(w.home() / "work/new.bin", noise(9000, 11), kOldMtimeNs + 61);
  for (const char* d : {"work", ""}) test_util::set_mtime(w.home() / d, kOldMtimeNs + 100);
  const auto second_picture = picture(w.home());

  // Count the second save's puts on a scratch copy of the store.
  int total = 0;
  int head_put = 0;  // 1-based: the commit point; after it, the parent becomes a delta
  {
    test::TempDir scratch;
    std::filesystem::copy(w.dir.path() / "store", scratch.path() / "store",
                          std::filesystem::copy_options::recursive);
    auto copy = std::move(FsStore::open(scratch.path() / "store")).value();
    FaultyStore counting(*copy);
    REQUIRE(w.save(counting, w.box, w.home()).ok());
    CHECK(counting.syncs() == 1);  // the chunks' deferred puts, once, before the commit
    total = counting.puts();
    const auto& keys = counting.put_keys();
    head_put = int(std::find(keys.begin(), keys.end(), head_key(w.box)) - keys.begin()) + 1;
    REQUIRE(keys.back() == manifest_key(w.box, first->record.snapshot_id));
  }
  REQUIRE(total >= 7);  // at least 2 chunks, manifest, record, timeline, head, parent delta
  REQUIRE(head_put == total - 1);

  int restored = 0;
  for (auto mode : {FaultyStore::Mode::kBefore, FaultyStore::Mode::kAfter}) {
    for (int n = 1; n <= total; ++n) {
      INFO("put " << n << (mode == FaultyStore::Mode::kBefore ? " fails before" : " fails after"));
      test::TempDir scratch;
      std::filesystem::copy(w.dir.path() / "store", scratch.path() / "store",
                            std::filesystem::copy_options::recursive);
      auto copy = std::move(FsStore::open(scratch.path() / "store")).value();
      FaultyStore faulty(*copy);
      faulty.fail_put(n, mode);
      auto failed = w.save(faulty, w.box, w.home());
      // The parent's rewrite as a delta is best effort: the save stands without it.
      CHECK(failed.status().code() == (n > head_put ? Code::kOk : Code::kUnavailable));

      auto head = load_head(*copy, w.keys, w.box);
      REQUIRE(head.ok());
      REQUIRE(head->has_value());
      auto timeline = load_timeline(*copy, w.keys, w.box);
      REQUIRE(timeline.ok());
      REQUIRE(timeline->find((*head)->snapshot_id) != nullptr);
      for (const TimelineEntry& t : timeline->entries) {
        auto target = w.restore(*copy, w.box, t.snapshot_id, "r-" + std::to_string(restored++));
        REQUIRE(target.ok());
        auto got = picture(*target);
        got.erase("");  // the target directory's own mtime is the restore's
        auto want = t.snapshot_id == first->record.snapshot_id ? first_picture : second_picture;
        want.erase("");
        CHECK(got == want);
      }
      // The head moved only if the head's own put reached the store.
      const bool committed = n > head_put || (n == head_put && mode == FaultyStore::Mode::kAfter);
      CHECK(((*head)->snapshot_id != first->record.snapshot_id) == committed);
      // The next save works and commits.
      auto retry = w.save(*copy, w.box, w.home());
      REQUIRE(retry.ok());
      auto target =
          w.restore(*copy, w.box, retry->record.snapshot_id, "r-" + std::to_string(restored++));
      REQUIRE(target.ok());
      auto got = picture(*target);
      got.erase("");
      auto want = second_picture;
      want.erase("");
      CHECK(got == want);
    }
  }
}

// §25.8: every save turns its parent's manifest into a delta of the new one, in runs of at
// most kMaxDeltaChain, so kept snapshots stop storing the whole file list again. Every
// snapshot still loads and restores to what it saved; the head stays whole (the agent reads
// it as one object); materialize_manifest() makes an old one whole again for a restore.
TEST_CASE("save: older manifests become deltas of newer ones, in bounded runs", "[state][unit]") {
  World w;
  w.make_tree();
  for (int i = 0; i < 300; ++i) {
    write_file(w.home() / "many" / ("f" + std::to_string(i)), "file " + std::to_string(i),
               kOldMtimeNs + i);
  }
  constexpr int kSaves = 2 * int(kMaxDeltaChain) + 3;
  std::vector<std::string> ids;
  std::vector<Manifest> manifests;
  uint64_t whole_bytes = 0;
  for (int i = 0; i < kSaves; ++i) {
    write_file(w.home() / "many" / ("f" + std::to_string(i)), "edit " + std::to_string(i),
               kOldMtimeNs + 1000 + i);
    if (i % 5 == 4) std::filesystem::remove(w.home() / "many" / ("f" + std::to_string(200 + i)));
    test_util::set_mtime(w.home() / "many", kOldMtimeNs + 1000 + i);
    auto saved = w.save();
    REQUIRE(saved.ok());
    ids.push_back(saved->record.snapshot_id);
    manifests.push_back(saved->manifest);
    whole_bytes += saved->record.manifest_bytes;
  }

  ManifestReader reader(*w.store, w.keys, w.box);
  uint64_t stored_bytes = 0;
  size_t run = 0, longest = 0;
  for (int i = 0; i < kSaves; ++i) {
    INFO("save " << i);
    auto object = reader.load_object(ids[size_t(i)]);
    REQUIRE(object.ok());
    // A run of kMaxDeltaChain deltas, then one whole manifest; the head is whole.
    const bool want_whole = i == kSaves - 1 || i % int(kMaxDeltaChain + 1) == int(kMaxDeltaChain);
    CHECK(object->delta.has_value() == !want_whole);
    if (object->delta.has_value()) CHECK(object->delta->base == ids[size_t(i) + 1]);
    run = object->delta.has_value() ? run + 1 : 0;
    longest = std::max(longest, run);
    auto size = w.store->stat(manifest_key(w.box, ids[size_t(i)]));
    REQUIRE(size.ok());
    stored_bytes += *size;
  }
  CHECK(longest == kMaxDeltaChain);
  // The whole file list is stored about three times instead of 35.
  CHECK(stored_bytes * 4 < whole_bytes);

  // Newest first, each from the one before (as the GC mark reads them), and oldest first.
  for (int i = kSaves; i-- > 0;) {
    auto m = reader.load(ids[size_t(i)]);
    REQUIRE(m.ok());
    CHECK(*m == manifests[size_t(i)]);
  }
  for (int i = 0; i < kSaves; ++i) {
    auto m = load_manifest(*w.store, w.keys, w.box, ids[size_t(i)]);
    REQUIRE(m.ok());
    CHECK(*m == manifests[size_t(i)]);
  }
  auto restored = w.restore(*w.store, w.box, ids[0], "oldest");
  REQUIRE(restored.ok());
  CHECK(test_util::read_file(*restored / "many/f0") == "edit 0");
  CHECK(test_util::read_file(*restored / "many/f1") == "file 1");

  SECTION("materialize_manifest makes one whole again, and the chains through it still work") {
    auto m = materialize_manifest(*w.store, w.keys, w.box, ids[3], w.random);
    REQUIRE(m.ok());
    CHECK(*m == manifests[3]);
    auto object = ManifestReader(*w.store, w.keys, w.box).load_object(ids[3]);
    REQUIRE(object.ok());
    CHECK(!object->delta.has_value());
    for (int i : {0, 3, 4, kSaves - 1}) {
      CHECK(*load_manifest(*w.store, w.keys, w.box, ids[size_t(i)]) == manifests[size_t(i)]);
    }
  }
  SECTION("a missing base is kDataLoss naming the snapshots") {
    REQUIRE(w.store->delete_batch(std::vector<std::string>{manifest_key(w.box, ids[5])}).ok());
    auto m = load_manifest(*w.store, w.keys, w.box, ids[2]);
    CHECK(m.status().code() == Code::kDataLoss);
    CHECK(m.status().message().find(ids[2]) != std::string::npos);
    CHECK(m.status().message().find(ids[5]) != std::string::npos);
  }
}

TEST_CASE("restore: an owner gives every restored entry and created folder that account",
          "[state][unit]") {
  if (::geteuid() != 0) {
    WARN("not root: restore cannot give files away");
    return;
  }
  World w;
  w.make_tree();
  auto saved = w.save();
  REQUIRE(saved.ok());
  RestoreOptions o;
  o.paths = {"home/user/notes.txt", "home/user/work"};
  o.target = (w.dir.path() / "Restored-owner").string();
  o.restore_owners = false;
  o.owner = std::make_pair(4321u, 8765u);
  auto r = restore_snapshot(*w.store, w.keys, "u1", saved->manifest, o, w.random);
  REQUIRE(r.ok());
  auto got = picture(o.target);
  for (const auto& [p, n] : got) {
    INFO(p);
    CHECK(n.uid == 4321u);
    CHECK(n.gid == 8765u);
  }
  // The target, the implicit "home", entries, a symlink and nested folders.
  CHECK(got.size() > 10);
  CHECK(got.count("home") == 1);
  // A symlink (picture() names it by its target): lchown'd, not followed.
  struct stat link {};
  const auto link_path = std::filesystem::path(o.target) / "home/user/work/link";
  REQUIRE(::lstat(link_path.c_str(), &link) == 0);
  CHECK(S_ISLNK(link.st_mode));
  CHECK(link.st_uid == 4321u);
  CHECK(link.st_gid == 8765u);
  // Modes are still the saved ones (chown first, then chmod).
  CHECK(got["home/user/work/script.sh"].mode == 04755);
}

}  // namespace
}  // namespace cb::state
