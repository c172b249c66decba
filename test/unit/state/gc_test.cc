// Prune and the per-user chunk sweep (§25.3) on a real FsStore: what they keep and delete,
// their crash safety under failure injection, and the sweep against a concurrent save.

#include "base/clock.h"
#include "crypto/random.h"
#include "state/fs_store.h"
#include "state/prune.h"
#include "state/restore.h"
#include "state/save.h"
#include "state/sweep.h"
#include "state/user_lock.h"
#include "support/set_clock.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cb::state {
namespace {

using cb::test::SetClock;

using test_util::kOldMtimeNs;
using test_util::picture;
using test_util::write_file;
using Picture = std::map<std::string, test_util::Node>;

constexpr ChunkerParams kSmallChunks{256, 1024, 4096};
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kDayMs = 24 * kHourMs;
// 2026-06-01T12:00:00Z.
constexpr int64_t kStartMs = 1'780'315'200'000;

std::string noise(size_t n, uint64_t seed) {
  crypto::SeededRandom random(seed);
  std::string s(n, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(s.data()), n));
  return s;
}

crypto::SymmetricKey key_from(uint64_t seed) {
  crypto::SeededRandom random(seed);
  return crypto::SymmetricKey::generate(random);
}

std::unique_ptr<FsStore> open_store(const std::filesystem::path& p) {
  return std::move(FsStore::open(p)).value();
}

// Every object in the store, with its size.
std::map<std::string, uint64_t> objects(Store& store) {
  std::map<std::string, uint64_t> out;
  auto all = list_all(store, "");
  REQUIRE(all.ok());
  for (const auto& o : *all) out[o.key] = o.size;
  return out;
}

// A Store that "crashes" after |budget| mutating steps: each put is one step, each key of a
// delete_batch one step (a batch runs key by key until the budget is gone). After the crash
// every call fails with kUnavailable, as a stopped process does nothing more.
class CrashingStore final : public Store {
 public:
  CrashingStore(Store& inner, int budget) : inner_(inner), budget_(budget) {}

  bool crashed() const { return crashed_; }
  int steps() const { return steps_; }

  Status put(std::string_view key, std::string_view data) override {
    if (!step()) return crash();
    return inner_.put(key, data);
  }
  Result<std::string> get(std::string_view key) override {
    if (crashed_) return crash();
    return inner_.get(key);
  }
  Result<uint64_t> stat(std::string_view key) override {
    if (crashed_) return crash();
    return inner_.stat(key);
  }
  Result<ListPage> list(std::string_view prefix, std::string_view start_after,
                        size_t limit) override {
    if (crashed_) return crash();
    return inner_.list(prefix, start_after, limit);
  }
  Status delete_batch(std::span<const std::string> keys) override {
    if (crashed_) return crash();
    for (const std::string& key : keys) {
      if (!step()) return crash();
      RETURN_IF_ERROR(inner_.delete_batch(std::span<const std::string>(&key, 1)));
    }
    return ok_status();
  }

 private:
  bool step() {
    if (crashed_ || (budget_ >= 0 && steps_ >= budget_)) {
      crashed_ = true;
      return false;
    }
    ++steps_;
    return true;
  }
  Status crash() { return unavailable("injected: crashed"); }

  Store& inner_;
  int budget_;  // < 0: never crashes (counts steps)
  int steps_ = 0;
  bool crashed_ = false;
};

// One user with two boxes and a history of saves spread over 300 days, some pinned, one
// failed save (an orphan manifest and record and unreferenced chunks), and files shared
// between the boxes, so a sweep must look at both boxes' marks.
struct History {
  test::TempDir dir;
  std::unique_ptr<FsStore> store = open_store(dir.path() / "store");
  StateKeys keys{key_from(1)};
  crypto::SeededRandom random{2};
  SetClock clock;
  BoxLocation box1{"u1", "box1"};
  BoxLocation box2{"u1", "box2"};
  std::map<std::string, Picture> pictures;  // snapshot id -> the tree it saved
  int64_t last_ms = 0;
  int restores = 0;

  std::filesystem::path home(const BoxLocation& b) const { return dir.path() / ("home-" + b.box); }

  SaveOptions options(const BoxLocation& b) const {
    SaveOptions o;
    o.scan.roots = {{home(b).string(), "home/user"}};
    o.scan.chunker = kSmallChunks;
    return o;
  }

  // Writes a file unique to this save and one shared with the other box, saves at |at_ms|.
  std::string save(Store& s, const BoxLocation& b, int64_t at_ms, int n) {
    write_file(home(b) / "unique.bin", noise(6000, 1000 + uint64_t(n)), kOldMtimeNs + n);
    write_file(home(b) / "shared.bin", noise(3000, 500 + uint64_t(n / 3)), kOldMtimeNs + n);
    write_file(home(b) / "notes.txt", "save " + std::to_string(n) + "\n", kOldMtimeNs + n);
    test_util::set_mtime(home(b), kOldMtimeNs);
    clock.set_ms(at_ms);
    last_ms = std::max(last_ms, at_ms);
    auto r = save_snapshot(s, keys, b, options(b), clock, random);
    if (!r.ok()) return "";
    pictures[r->record.snapshot_id] = picture(home(b));
    return r->record.snapshot_id;
  }

  void build() {
    // Days before the last save: two long gone, one pinned, several in one hour ten days
    // back (only the newest survives), a day's worth of hourly saves, and the recent ones.
    const std::vector<double> box1_days = {300, 250, 200, 45,  44.5, 10.02, 10.01, 10.0,
                                           3,   2,   1.5, 0.3, 0.2,  0.1,   0.05,  0};
    const std::vector<double> box2_days = {290, 100, 10.015, 0.5, 0.01};
    int n = 0;
    for (size_t i = 0; i < box1_days.size(); ++i) {
      const int64_t at = kStartMs + int64_t((300 - box1_days[i]) * double(kDayMs));
      REQUIRE(!save(*store, box1, at, n++).empty());
      if (i < box2_days.size()) {
        const int64_t at2 = kStartMs + int64_t((300 - box2_days[i]) * double(kDayMs));
        REQUIRE(!save(*store, box2, at2, n++).empty());
      }
    }
    // Pin box1's second save (250 days back, past every tier).
    auto t = load_timeline(*store, keys, box1);
    REQUIRE(t.ok());
    bool pinned = false;
    for (auto& e : t->entries) {
      if (e.saved_at_ms == kStartMs + int64_t(50 * double(kDayMs))) {
        e.pinned = true;
        pinned = true;
      }
    }
    REQUIRE(pinned);
    REQUIRE(store_timeline(*store, keys, box1, *t, random).ok());
    // A save of box2 that fails at its timeline put: manifest, record and chunks stay behind.
    test_util::FaultyStore faulty(*store);
    int puts_before_timeline = 0;
    {
      test::TempDir scratch;
      std::filesystem::copy(dir.path() / "store", scratch.path() / "store",
                            std::filesystem::copy_options::recursive);
      auto copy = open_store(scratch.path() / "store");
      test_util::FaultyStore counting(*copy);
      auto saved_pictures = pictures;
      REQUIRE(!save(counting, box2, last_ms - kHourMs, 999).empty());
      pictures = saved_pictures;
      const auto& keys = counting.put_keys();
      puts_before_timeline =
          int(std::find(keys.begin(), keys.end(), timeline_key(box2)) - keys.begin());
      REQUIRE(puts_before_timeline < counting.puts());
    }
    faulty.fail_put(puts_before_timeline + 1, test_util::FaultyStore::Mode::kBefore);
    REQUIRE(save(faulty, box2, last_ms - kHourMs, 999).empty());
  }

  PruneOptions prune_options() const {
    PruneOptions o;
    o.now = std::chrono::system_clock::time_point(std::chrono::milliseconds(last_ms + kHourMs));
    return o;
  }

  // Prunes both boxes, then sweeps the user, stopping at the first error.
  Status collect(Store& s, UserLock& lock) {
    for (const BoxLocation* b : {&box1, &box2}) {
      RETURN_IF_ERROR(prune_box(s, keys, *b, prune_options(), random).status());
    }
    SweepOptions so;
    so.delete_batch = 3;
    return sweep_user(s, keys, "u1", lock, so).status();
  }

  // Restores every snapshot the timelines or heads name and compares it with what was saved;
  // checks every chunk they reference is stored.
  void check_restorable(Store& s) {
    for (const BoxLocation* b : {&box1, &box2}) {
      auto timeline = load_timeline(s, keys, *b);
      REQUIRE(timeline.ok());
      auto head = load_head(s, keys, *b);
      REQUIRE(head.ok());
      REQUIRE(head->has_value());
      std::set<std::string> ids{(*head)->snapshot_id};
      for (const auto& e : timeline->entries) ids.insert(e.snapshot_id);
      for (const std::string& id : ids) {
        INFO("snapshot " << id);
        auto m = load_manifest(s, keys, *b, id);
        REQUIRE(m.ok());
        RestoreOptions o;
        o.strip = "home/user";
        o.target = (dir.path() / ("r" + std::to_string(restores++))).string();
        auto r = restore_snapshot(s, keys, b->user, *m, o, random);
        REQUIRE(r.ok());
        auto got = picture(o.target);
        got.erase("");
        REQUIRE(pictures.count(id) == 1);
        auto want = pictures[id];
        want.erase("");
        CHECK(got == want);
        std::filesystem::remove_all(o.target);
      }
    }
    auto marked = mark_user_chunks(s, keys, "u1");
    REQUIRE(marked.ok());
    for (const ChunkId& c : *marked) CHECK(s.stat(chunk_key("u1", c)).ok());
  }
};

TEST_CASE("prune: keeps exactly the rule's set and deletes the rest in order", "[state][unit]") {
  History h;
  h.build();
  const auto before = objects(*h.store);

  // The expected sets, from the timelines before the prune.
  std::map<std::string, std::vector<std::string>> want_kept;
  for (const BoxLocation* b : {&h.box1, &h.box2}) {
    auto t = load_timeline(*h.store, h.keys, *b);
    auto head = load_head(*h.store, h.keys, *b);
    REQUIRE(t.ok());
    REQUIRE(head.ok());
    want_kept[b->box] = apply_retention(*t, (*head)->snapshot_id, RetentionRule::time_machine(),
                                        h.prune_options().now)
                            .kept();
  }

  SECTION("a dry run decides and changes nothing") {
    auto o = h.prune_options();
    o.dry_run = true;
    auto r = prune_box(*h.store, h.keys, h.box1, o, h.random);
    REQUIRE(r.ok());
    CHECK(r->timeline_rewritten);
    CHECK(!r->deleted.empty());
    CHECK(objects(*h.store) == before);
  }

  SECTION("the timeline, the records and the manifests") {
    for (const BoxLocation* b : {&h.box1, &h.box2}) {
      INFO(b->box);
      auto r = prune_box(*h.store, h.keys, *b, h.prune_options(), h.random);
      REQUIRE(r.ok());
      CHECK(r->plan.kept() == want_kept[b->box]);
      CHECK(!r->plan.dropped().empty());
      auto t = load_timeline(*h.store, h.keys, *b);
      REQUIRE(t.ok());
      std::vector<std::string> ids;
      for (const auto& e : t->entries) ids.push_back(e.snapshot_id);
      CHECK(ids == want_kept[b->box]);
      // §25.8: no kept manifest is a delta of a dropped one; chains stay bounded; every hint
      // that says "whole" is true.
      ManifestReader reader(*h.store, h.keys, *b);
      std::set<std::string> kept_ids(ids.begin(), ids.end());
      size_t run = 0;
      for (size_t i = t->entries.size(); i-- > 0;) {
        auto object = reader.load_object(t->entries[i].snapshot_id);
        REQUIRE(object.ok());
        if (object->delta.has_value()) {
          CHECK(kept_ids.count(object->delta->base) == 1);
          CHECK(t->entries[i].manifest_base == object->delta->base);
        } else {
          CHECK(t->entries[i].manifest_base.empty());
        }
        run = object->delta.has_value() ? run + 1 : 0;
        CHECK(run <= kMaxDeltaChain);
      }
      if (b == &h.box1) CHECK(r->compacted > 0);
      // Records all come before manifests in the delete order.
      bool seen_manifest = false;
      for (const auto& k : r->deleted) {
        const bool manifest = k.size() > 9 && k.substr(k.size() - 9) == ".manifest";
        CHECK((!seen_manifest || manifest));
        seen_manifest = seen_manifest || manifest;
      }
      // What is left under snapshots/ is exactly the kept snapshots' records and manifests.
      auto left = list_all(*h.store, snapshots_prefix(*b));
      REQUIRE(left.ok());
      std::set<std::string> got, want;
      for (const auto& o : *left) got.insert(o.key);
      for (const auto& id : ids) {
        want.insert(record_key(*b, id));
        want.insert(manifest_key(*b, id));
      }
      CHECK(got == want);
    }
    // box2's failed save left an orphan record and manifest: deleted, though never in a
    // timeline.
    h.check_restorable(*h.store);
    // A second prune finds nothing to do.
    auto again = prune_box(*h.store, h.keys, h.box1, h.prune_options(), h.random);
    REQUIRE(again.ok());
    CHECK(!again->timeline_rewritten);
    CHECK(again->deleted.empty());
    // The pinned snapshot, 250 days old, is still there.
    auto t = load_timeline(*h.store, h.keys, h.box1);
    REQUIRE(t.ok());
    bool pinned = false;
    for (const auto& e : t->entries) pinned = pinned || e.pinned;
    CHECK(pinned);
  }
}

TEST_CASE("sweep: deletes exactly the chunks only dropped snapshots referenced", "[state][unit]") {
  History h;
  h.build();
  InProcessUserLock lock;
  auto all_before = mark_user_chunks(*h.store, h.keys, "u1");  // before the prune
  REQUIRE(all_before.ok());
  for (const BoxLocation* b : {&h.box1, &h.box2}) {
    REQUIRE(prune_box(*h.store, h.keys, *b, h.prune_options(), h.random).ok());
  }
  // The offline mark: every chunk of every kept manifest, computed here from the manifests.
  std::set<std::string> want;
  for (const BoxLocation* b : {&h.box1, &h.box2}) {
    auto t = load_timeline(*h.store, h.keys, *b);
    REQUIRE(t.ok());
    for (const auto& e : t->entries) {
      auto m = load_manifest(*h.store, h.keys, *b, e.snapshot_id);
      REQUIRE(m.ok());
      for (const auto& entry : m->entries) {
        for (const auto& c : entry.chunks) want.insert(chunk_key("u1", c.id));
      }
    }
  }
  auto listed = list_all(*h.store, chunks_prefix("u1"));
  REQUIRE(listed.ok());
  REQUIRE(listed->size() > want.size());  // there is garbage: dropped snapshots and the orphan

  SECTION("a dry run counts and deletes nothing") {
    SweepOptions o;
    o.dry_run = true;
    auto r = sweep_user(*h.store, h.keys, "u1", lock, o);
    REQUIRE(r.ok());
    CHECK(r->garbage_chunks == listed->size() - want.size());
    CHECK(list_all(*h.store, chunks_prefix("u1"))->size() == listed->size());
  }
  SECTION("the sweep") {
    // Something under chunks/ that is not a chunk key stays.
    REQUIRE(h.store->put("u1/chunks/zz/not-a-chunk", "x").ok());
    std::vector<ChunkId> indexed_out;
    SweepOptions o;
    o.delete_batch = 7;
    o.before_delete = [&](std::span<const ChunkId> garbage) {
      indexed_out.assign(garbage.begin(), garbage.end());
      // The index goes first: nothing is deleted yet.
      CHECK(list_all(*h.store, chunks_prefix("u1"))->size() == listed->size() + 1);
      return ok_status();
    };
    auto r = sweep_user(*h.store, h.keys, "u1", lock, o);
    REQUIRE(r.ok());
    CHECK(r->boxes == 2);
    CHECK(r->foreign_objects == 1);
    CHECK(r->late_snapshots == 0);
    CHECK(r->listed_chunks == listed->size());
    CHECK(r->garbage_chunks == listed->size() - want.size());
    CHECK(indexed_out.size() == r->garbage_chunks);
    auto after = list_all(*h.store, chunks_prefix("u1"));
    REQUIRE(after.ok());
    std::set<std::string> got;
    for (const auto& obj : *after) got.insert(obj.key);
    got.erase("u1/chunks/zz/not-a-chunk");
    CHECK(got == want);
    h.check_restorable(*h.store);
    // A second sweep finds no garbage.
    auto again = sweep_user(*h.store, h.keys, "u1", lock, SweepOptions());
    REQUIRE(again.ok());
    CHECK(again->garbage_chunks == 0);
  }
  SECTION("an index that fails to update stops the sweep before any delete") {
    SweepOptions o;
    o.before_delete = [](std::span<const ChunkId>) { return unavailable("index"); };
    auto r = sweep_user(*h.store, h.keys, "u1", lock, o);
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK(list_all(*h.store, chunks_prefix("u1"))->size() == listed->size());
  }
}

TEST_CASE("sweep: a mark that cannot be completed deletes nothing", "[state][unit]") {
  History h;
  h.build();
  InProcessUserLock lock;
  for (const BoxLocation* b : {&h.box1, &h.box2}) {
    REQUIRE(prune_box(*h.store, h.keys, *b, h.prune_options(), h.random).ok());
  }
  const auto before = objects(*h.store);
  SECTION("a kept manifest is missing") {
    auto t = load_timeline(*h.store, h.keys, h.box2);
    REQUIRE(t.ok());
    const std::string key = manifest_key(h.box2, t->entries.front().snapshot_id);
    const std::string saved = *h.store->get(key);
    std::vector<std::string> k{key};
    REQUIRE(h.store->delete_batch(k).ok());
    auto r = sweep_user(*h.store, h.keys, "u1", lock, SweepOptions());
    CHECK(r.status().code() == Code::kDataLoss);
    REQUIRE(h.store->put(key, saved).ok());
    CHECK(objects(*h.store) == before);
  }
  SECTION("a timeline does not open") {
    const std::string key = timeline_key(h.box1);
    const std::string saved = *h.store->get(key);
    std::string tampered = saved;
    tampered.back() = char(tampered.back() ^ 1);
    REQUIRE(h.store->put(key, tampered).ok());
    auto r = sweep_user(*h.store, h.keys, "u1", lock, SweepOptions());
    CHECK(r.status().code() == Code::kDataLoss);
    // Prune refuses too, and writes nothing.
    auto p = prune_box(*h.store, h.keys, h.box1, h.prune_options(), h.random);
    CHECK(p.status().code() == Code::kDataLoss);
    REQUIRE(h.store->put(key, saved).ok());
    CHECK(objects(*h.store) == before);
  }
}

// §25.6 step 6 and the "a crash at any point of a prune or a sweep": the GC pass
// crashes after each of its mutating steps in turn. Each time the store, reopened, restores
// every snapshot its timelines name byte for byte and holds every chunk they reference; a
// pass after the crash ends in the same store as a pass that never crashed.
TEST_CASE("prune and sweep: a crash at any step leaves every kept snapshot restorable",
          "[state][unit]") {
  History h;
  h.build();
  InProcessUserLock lock;

  auto copy_store = [&](test::TempDir& scratch) {
    std::filesystem::copy(h.dir.path() / "store", scratch.path() / "store",
                          std::filesystem::copy_options::recursive);
    return open_store(scratch.path() / "store");
  };
  // The reference: a pass without a crash, counting its steps.
  test::TempDir ref_dir;
  auto ref = copy_store(ref_dir);
  int total = 0;
  {
    CrashingStore counting(*ref, -1);
    REQUIRE(h.collect(counting, lock).ok());
    total = counting.steps();
  }
  const auto want = objects(*ref);
  REQUIRE(total >= 20);  // two timelines, a dozen records and manifests, many chunks

  for (int n = 0; n < total; ++n) {
    INFO("crash after step " << n << " of " << total);
    test::TempDir scratch;
    {
      auto s = copy_store(scratch);
      CrashingStore crashing(*s, n);
      Status st = h.collect(crashing, lock);
      REQUIRE(crashing.crashed());
      CHECK(st.code() == Code::kUnavailable);
    }
    auto reopened = open_store(scratch.path() / "store");
    h.check_restorable(*reopened);
    REQUIRE(h.collect(*reopened, lock).ok());
    CHECK(objects(*reopened) == want);
  }
}

// §25.6 step 5: a sweep that starts while a save of another box of the same user is between
// uploading its chunks and its commit waits for the commit (the save holds the user's lock
// shared), marks the new snapshot, and so deletes none of its chunks.
TEST_CASE("sweep: waits for a save in progress and keeps what it uploaded", "[state][unit]") {
  History h;
  h.build();
  for (const BoxLocation* b : {&h.box1, &h.box2}) {
    REQUIRE(prune_box(*h.store, h.keys, *b, h.prune_options(), h.random).ok());
  }

  // A store that holds the save at its manifest put (after every chunk is stored) until
  // released.
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool paused = false;
    bool go = false;
    bool swept = false;
  } gate;
  class GatedStore final : public Store {
   public:
    GatedStore(Store& inner, Gate& gate) : inner_(inner), gate_(gate) {}
    Status put(std::string_view key, std::string_view data) override {
      if (key.find(".manifest") != std::string_view::npos) {
        std::unique_lock l(gate_.mu);
        gate_.paused = true;
        gate_.cv.notify_all();
        gate_.cv.wait(l, [&] { return gate_.go; });
      }
      return inner_.put(key, data);
    }
    Result<std::string> get(std::string_view key) override { return inner_.get(key); }
    Result<uint64_t> stat(std::string_view key) override { return inner_.stat(key); }
    Result<ListPage> list(std::string_view p, std::string_view a, size_t l) override {
      return inner_.list(p, a, l);
    }
    Status delete_batch(std::span<const std::string> keys) override {
      return inner_.delete_batch(keys);
    }

   private:
    Store& inner_;
    Gate& gate_;
  };
  // A lock that does not lock: the same interleaving must then lose the save's chunks, which
  // is what shows the test can see the race.
  class NoLock final : public UserLock {
   public:
    Status lock_shared(std::string_view) override { return ok_status(); }
    Status lock(std::string_view) override { return ok_status(); }
    void unlock_shared(std::string_view) override {}
    void unlock(std::string_view) override {}
  };

  write_file(h.home(h.box2) / "big-new.bin", noise(40000, 4242), kOldMtimeNs + 5000);
  GatedStore gated(*h.store, gate);
  // Runs on its own thread: no Catch2 assertions there; the result is checked after join.
  std::string saved_id;
  Status save_status;
  auto run_save = [&](UserLock& lock) {
    auto guard = UserLockGuard::acquire(lock, "u1", UserLockGuard::Mode::kShared);
    if (!guard.ok()) {
      save_status = guard.status();
      return;
    }
    h.clock.set_ms(h.last_ms + 2 * kHourMs);
    auto r = save_snapshot(gated, h.keys, h.box2, h.options(h.box2), h.clock, h.random);
    if (!r.ok()) {
      save_status = r.status();
      return;
    }
    saved_id = r->record.snapshot_id;
  };
  auto wait_paused = [&] {
    std::unique_lock l(gate.mu);
    gate.cv.wait(l, [&] { return gate.paused; });
  };
  auto release_save = [&] {
    std::lock_guard l(gate.mu);
    gate.go = true;
    gate.cv.notify_all();
  };

  SECTION("with the user's lock") {
    InProcessUserLock lock;
    std::thread saver([&] { run_save(lock); });
    wait_paused();  // every new chunk is stored; the commit has not started
    Result<SweepResult> swept = internal_error("not run");
    std::thread sweeper([&] { swept = sweep_user(*h.store, h.keys, "u1", lock, SweepOptions()); });
    lock.wait_for_exclusive_waiters("u1", 1);  // marked and listed; waiting for the save
    release_save();
    saver.join();
    sweeper.join();
    REQUIRE(save_status.ok());
    REQUIRE(swept.ok());
    CHECK(swept->late_snapshots == 1);
    h.pictures[saved_id] = picture(h.home(h.box2));
    h.check_restorable(*h.store);
  }
  SECTION("without it the save's chunks are lost") {
    NoLock lock;
    std::thread saver([&] { run_save(lock); });
    wait_paused();
    auto swept = sweep_user(*h.store, h.keys, "u1", lock, SweepOptions());
    REQUIRE(swept.ok());
    release_save();
    saver.join();
    REQUIRE(save_status.ok());
    auto m = load_manifest(*h.store, h.keys, h.box2, saved_id);
    REQUIRE(m.ok());
    RestoreOptions o;
    o.strip = "home/user";
    o.target = (h.dir.path() / "lost").string();
    auto r = restore_snapshot(*h.store, h.keys, "u1", *m, o, h.random);
    CHECK(r.status().code() == Code::kDataLoss);
  }
}

TEST_CASE("list_boxes: lists each box once, whatever it holds, sorted by name", "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir.path() / "store");
  for (const char* key : {"u/boxes/b/head", "u/boxes/b/snapshots/x.record", "u/boxes/b.x/head",
                          "u/boxes/b-/timeline", "u/boxes/b0/head", "u/boxes/a/snapshots/y",
                          "u/chunks/00/aa", "v/boxes/c/head", "u/boxes/stray"}) {
    REQUIRE(store->put(key, "x").ok());
  }
  auto boxes = list_boxes(*store, "u");
  REQUIRE(boxes.ok());
  CHECK(*boxes == std::vector<std::string>{"a", "b", "b-", "b.x", "b0"});
  CHECK(list_boxes(*store, "nobody")->empty());
  CHECK(list_boxes(*store, "../u").status().code() == Code::kInvalidArgument);
}

TEST_CASE("prune: a box never saved is left as it is", "[state][unit]") {
  test::TempDir dir;
  auto store = open_store(dir.path() / "store");
  StateKeys keys{key_from(1)};
  crypto::SeededRandom random(3);
  PruneOptions o;
  auto r = prune_box(*store, keys, BoxLocation{"u", "b"}, o, random);
  REQUIRE(r.ok());
  CHECK(r->head.empty());
  CHECK(r->plan.decisions.empty());
  CHECK(!r->timeline_rewritten);
  CHECK(objects(*store).empty());
}

}  // namespace
}  // namespace cb::state
