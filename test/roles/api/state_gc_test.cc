// The api's GC pass (roles/api/state_gc.h) on a real FsStore with the api's StateLocks: the
// locks ordered as seed §25.3 says (a save of another box of the user in progress makes the
// sweep wait for its commit; a save of the box being pruned waits for the prune), --now
// parsing, and the data dir lock that keeps `state prune` away from a running api.

#include "roles/api/state_gc.h"

#include "base/clock.h"
#include "crypto/random.h"
#include "net/blocking.h"
#include "roles/api/data_dir_lock.h"
#include "roles/api/state_locks.h"
#include "state/fs_store.h"
#include "state/restore.h"
#include "state/save.h"
#include "state/snapshot.h"
#include "support/run_sync.h"
#include "support/set_clock.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fcntl.h>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace cb::api {
namespace {

using cb::test::SetClock;

using state::test_util::kOldMtimeNs;
using state::test_util::read_file;
using state::test_util::write_file;
using Clock = std::chrono::system_clock;

constexpr state::ChunkerParams kSmallChunks{256, 1024, 4096};
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kDayMs = 24 * kHourMs;
constexpr int64_t kStartMs = 1'780'315'200'000;  // 2026-06-01T12:00:00Z, a Monday

asio::awaitable<void> store_into(asio::awaitable<Result<UserGcReport>> task,
                                 std::optional<Result<UserGcReport>>* out) {
  auto r = co_await std::move(task);
  out->emplace(std::move(r));
}

// Runs |task| on |io| until nothing is left to do (Result has no default, so no use_future).
Result<UserGcReport> run_gc(asio::io_context& io, asio::awaitable<Result<UserGcReport>> task) {
  std::optional<Result<UserGcReport>> out;
  test::run_sync(io, store_into(std::move(task), &out));
  REQUIRE(out.has_value());
  return std::move(*out);
}

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

// One user "u1" with boxes "bx_a" and "bx_b" in a filesystem store; saves are blocking calls
// (the tests run them on threads with net::run_blocking where a coroutine waits for them).
struct Fixture {
  test::TempDir dir;
  std::unique_ptr<state::FsStore> store =
      std::move(state::FsStore::open(dir.path() / "store")).value();
  state::StateKeys keys{key_from(1)};
  crypto::SeededRandom random{2};
  std::mutex random_mu;  // saves may run on a thread of their own
  state::BoxLocation a{"u1", "bx_a"};
  state::BoxLocation b{"u1", "bx_b"};

  std::filesystem::path home(const state::BoxLocation& box) const {
    return dir.path() / ("home-" + box.box);
  }

  // Writes |content| as the box's only file and saves at |at_ms|.
  Result<state::SaveResult> save(const state::BoxLocation& box, const std::string& content,
                                 int64_t at_ms, int n) {
    write_file(home(box) / "file.bin", content, kOldMtimeNs + n);
    state::test_util::set_mtime(home(box), kOldMtimeNs);
    SetClock clock;
    clock.set_ms(at_ms);
    state::SaveOptions o;
    o.scan.roots = {{home(box).string(), "home/user"}};
    o.scan.chunker = kSmallChunks;
    std::lock_guard<std::mutex> l(random_mu);
    return state::save_snapshot(*store, keys, box, o, clock, random);
  }

  // The content of file.bin in |snapshot|, restored into a fresh folder.
  std::string restored(const state::BoxLocation& box, const std::string& snapshot) {
    auto manifest = state::load_manifest(*store, keys, box, snapshot);
    REQUIRE(manifest.ok());
    static int n = 0;
    const auto target = dir.path() / ("restored-" + std::to_string(++n));
    state::RestoreOptions o;
    o.target = target.string();
    std::lock_guard<std::mutex> l(random_mu);
    auto r = state::restore_snapshot(*store, keys, box.user, *manifest, o, random);
    if (!r.ok()) return "restore failed: " + r.status().to_string();
    return read_file(target / "home/user/file.bin");
  }

  std::vector<std::string> chunk_keys() {
    auto all = state::list_all(*store, "u1/chunks/");
    REQUIRE(all.ok());
    std::vector<std::string> keys_out;
    for (const auto& o : *all) keys_out.push_back(o.key);
    return keys_out;
  }
};

TEST_CASE(
    "GC pass: a save of another box of the user in progress makes the sweep wait for its "
    "commit, and its chunks stay",
    "[api][state][gc]") {
  Fixture f;
  const std::string x0 = noise(20000, 10);
  const std::string x1 = noise(20000, 11);
  const std::string x2 = noise(20000, 12);
  // Box A saved x0, x1 and then x2 on one day; 40 days later only the head (x2) is kept, so
  // the chunks of x0 and x1 are garbage when the mark runs.
  REQUIRE(f.save(f.a, x0, kStartMs, 1).ok());
  const auto x0_chunks = f.chunk_keys();
  REQUIRE(f.save(f.a, x1, kStartMs + kHourMs, 2).ok());
  auto a2 = f.save(f.a, x2, kStartMs + 2 * kHourMs, 3);
  REQUIRE(a2.ok());
  std::vector<std::string> kept_chunks;
  for (const auto& k : f.chunk_keys())
    if (std::find(x0_chunks.begin(), x0_chunks.end(), k) == x0_chunks.end())
      kept_chunks.push_back(k);

  asio::io_context io;
  StateLocks locks(io.get_executor());
  std::vector<std::string> events;  // on the executor, or under events_mu from the sweep
  std::mutex events_mu;
  auto event = [&](std::string e) {
    std::lock_guard<std::mutex> l(events_mu);
    events.push_back(std::move(e));
  };
  std::optional<Result<state::SaveResult>> b1;
  std::optional<StateLocks::Guard> save_box_lock;
  std::optional<StateLocks::Guard> save_user_lock;
  bool gc_done = false;
  GcOptions options;
  options.delete_batch = 1;
  options.progress = [&](const std::string& line) {
    if (line.find(": deleted ") != std::string::npos) event("sweep deletes");
  };
  // Between the mark and the user's lock, a save of box B starts: it takes the box's lock and
  // the user's lock shared (as StateManager::save does), finds x1's chunks stored (so it
  // uploads nothing) and commits a snapshot naming them: the sweep must wait for that commit
  // and then keep x1's chunks.
  options.after_mark_for_test = [&]() -> asio::awaitable<void> {
    auto box_guard = co_await locks.box(f.b.box);
    REQUIRE(box_guard.ok());
    save_box_lock.emplace(std::move(*box_guard));
    auto user_guard = co_await locks.user_shared(f.a.user);
    REQUIRE(user_guard.ok());
    save_user_lock.emplace(std::move(*user_guard));
    event("save holds the user's lock");
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          // Let the sweep queue on the user's lock first, so the order below is the one under
          // test (a poll, not a timing assumption: it waits as long as it takes).
          while (locks.user_exclusive_waiting(f.a.user) == 0) {
            net::Timer t(co_await asio::this_coro::executor);
            t.expires_after(std::chrono::milliseconds(1));
            co_await t.async_wait();
          }
          auto saved = co_await net::run_blocking(
              [&]() { return f.save(f.b, x1, kStartMs + 3 * kHourMs, 4); });
          b1 = std::move(saved);
          event(gc_done ? "save committed after the gc" : "save committed");
          save_user_lock.reset();
          save_box_lock.reset();
        },
        asio::detached);
  };
  const auto now = Clock::time_point(std::chrono::milliseconds(kStartMs + 40 * kDayMs));
  auto report = run_gc(io, [&]() -> asio::awaitable<Result<UserGcReport>> {
    auto r = co_await gc_user(locks, *f.store, f.keys, std::string("u1"), now, options);
    gc_done = true;
    co_return r;
  }());
  REQUIRE(report.ok());
  REQUIRE(b1.has_value());
  REQUIRE(b1->ok());
  CHECK((*b1)->record.stats.added_chunks == 0);  // it found x1's chunks stored

  // The order: the save took the lock, committed, and only then did the sweep delete.
  REQUIRE(events.size() >= 3);
  CHECK(events[0] == "save holds the user's lock");
  CHECK(events[1] == "save committed");
  CHECK(events[2] == "sweep deletes");

  // Box A kept only its head; B's snapshot was marked under the lock; only x0's chunks went.
  REQUIRE(report->boxes.size() == 1);  // B had nothing in the store when the pass began
  CHECK(report->boxes[0].box == "bx_a");
  CHECK(report->boxes[0].kept() == 1);
  CHECK(report->boxes[0].dropped() == 2);
  CHECK(report->sweep.late_snapshots == 1);
  CHECK(report->sweep.garbage_chunks == x0_chunks.size());
  CHECK(f.chunk_keys() == kept_chunks);
  CHECK(f.restored(f.b, (*b1)->record.snapshot_id) == x1);
  CHECK(f.restored(f.a, a2->record.snapshot_id) == x2);
  CHECK(locks.user_readers("u1") == 0);
}

TEST_CASE(
    "GC pass: without a save in the way the sweep deletes exactly the dropped snapshots' "
    "chunks",
    "[api][state][gc]") {
  Fixture f;
  const std::string x1 = noise(20000, 21);
  const std::string x2 = noise(20000, 22);
  auto a1 = f.save(f.a, x1, kStartMs, 1);
  REQUIRE(a1.ok());
  const auto only_x1 = f.chunk_keys();
  auto a2 = f.save(f.a, x2, kStartMs + kHourMs, 2);
  REQUIRE(a2.ok());
  asio::io_context io;
  StateLocks locks(io.get_executor());
  GcOptions options;
  const auto now = Clock::time_point(std::chrono::milliseconds(kStartMs + 40 * kDayMs));

  SECTION("dry run: decides, changes nothing") {
    options.dry_run = true;
    const auto before = f.chunk_keys();
    auto report = run_gc(io, gc_user(locks, *f.store, f.keys, "u1", now, options));
    REQUIRE(report.ok());
    CHECK(report->boxes[0].dropped() == 1);
    CHECK(report->sweep.garbage_chunks == only_x1.size());
    CHECK(f.chunk_keys() == before);
    CHECK(f.restored(f.a, a1->record.snapshot_id) == x1);
  }
  SECTION("for real") {
    auto report = run_gc(io, gc_user(locks, *f.store, f.keys, "u1", now, options));
    REQUIRE(report.ok());
    CHECK(report->sweep.garbage_chunks == only_x1.size());
    for (const auto& k : f.chunk_keys())
      CHECK(std::find(only_x1.begin(), only_x1.end(), k) == only_x1.end());
    CHECK(f.restored(f.a, a2->record.snapshot_id) == x2);
    CHECK(gc_summary(*report).find("dropped 1 snapshots") != std::string::npos);
    // A second pass finds nothing more.
    auto again = run_gc(io, gc_user(locks, *f.store, f.keys, "u1", now, options));
    REQUIRE(again.ok());
    CHECK(again->sweep.garbage_chunks == 0);
    CHECK(again->boxes[0].dropped() == 0);
  }
}

TEST_CASE(
    "GC pass: a save of the box being pruned waits for the prune, and a hibernate's save "
    "is not skipped as covered",
    "[api][state][gc]") {
  Fixture f;
  const std::string x1 = noise(20000, 31);
  const std::string x2 = noise(20000, 32);
  const std::string x3 = noise(20000, 33);
  REQUIRE(f.save(f.a, x1, kStartMs, 1).ok());
  auto a2 = f.save(f.a, x2, kStartMs + kHourMs, 2);
  REQUIRE(a2.ok());

  asio::io_context io;
  StateLocks locks(io.get_executor());
  GcOptions options;
  bool held_during_prune = true;
  bool pruning_during_prune = false;
  size_t timeline_seen_by_save = 0;
  std::optional<Result<state::SaveResult>> a3;
  options.during_prune_for_test = [&](std::string box) -> asio::awaitable<void> {
    if (box != f.a.box) co_return;
    // What save_before_hibernate() looks at: a prune is no save that covers it.
    held_during_prune = locks.box_held(box);
    pruning_during_prune = locks.box_pruning(box);
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          auto guard = co_await locks.box(f.a.box);  // as StateManager::save does
          REQUIRE(guard.ok());
          auto user_guard = co_await locks.user_shared(f.a.user);
          REQUIRE(user_guard.ok());
          auto timeline = state::load_timeline(*f.store, f.keys, f.a);
          REQUIRE(timeline.ok());
          timeline_seen_by_save = timeline->entries.size();
          auto saved = co_await net::run_blocking(
              [&]() { return f.save(f.a, x3, kStartMs + 2 * kHourMs, 3); });
          a3 = std::move(saved);
        },
        asio::detached);
  };
  const auto now = Clock::time_point(std::chrono::milliseconds(kStartMs + 40 * kDayMs));
  auto report = run_gc(io, gc_user(locks, *f.store, f.keys, "u1", now, options));
  REQUIRE(report.ok());
  CHECK_FALSE(held_during_prune);
  CHECK(pruning_during_prune);
  REQUIRE(a3.has_value());
  REQUIRE(a3->ok());
  // The save ran after the prune had rewritten the timeline (one entry left, the head).
  CHECK(timeline_seen_by_save == 1);
  auto timeline = state::load_timeline(*f.store, f.keys, f.a);
  REQUIRE(timeline.ok());
  REQUIRE(timeline->entries.size() == 2);
  CHECK(timeline->entries[0].snapshot_id == a2->record.snapshot_id);
  CHECK(f.restored(f.a, (*a3)->record.snapshot_id) == x3);
  CHECK(f.restored(f.a, a2->record.snapshot_id) == x2);
}

TEST_CASE("parse_gc_time: RFC 3339, offsets and @seconds; bad values name --now",
          "[api][state][gc][unit]") {
  const auto real = Clock::time_point(std::chrono::milliseconds(kStartMs));
  auto ms = [](Result<Clock::time_point> t) {
    REQUIRE(t.ok());
    return std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count();
  };
  CHECK(ms(parse_gc_time("2026-06-01T12:00:00Z", real)) == kStartMs);
  CHECK(ms(parse_gc_time("2026-06-01T12:00:00.25Z", real)) == kStartMs + 250);
  CHECK(ms(parse_gc_time("2026-06-01T14:00:00+02:00", real)) == kStartMs);
  CHECK(ms(parse_gc_time("2026-06-01T11:30:00.5-00:30", real)) == kStartMs + 500);
  CHECK(ms(parse_gc_time("+40d", real)) == kStartMs + 40 * kDayMs);
  CHECK(ms(parse_gc_time("-2h", real)) == kStartMs - 2 * kHourMs);
  CHECK(ms(parse_gc_time("+3w", real)) == kStartMs + 21 * kDayMs);
  CHECK(ms(parse_gc_time("@1780315200", real)) == kStartMs);
  CHECK(ms(parse_gc_time("@1780315200.007", real)) == kStartMs + 7);
  for (const char* bad :
       {"", "tomorrow", "+40", "+d", "+40y", "2026-06-01", "2026-06-01T12:00:00",
        "2026-13-01T12:00:00Z", "2026-06-01T12:00:00+2:00", "@", "@12x", "@1.2345"}) {
    auto t = parse_gc_time(bad, real);
    CHECK(t.status().code() == Code::kInvalidArgument);
    CHECK(std::string(t.status().message()).find("--now") != std::string::npos);
  }
}

// Runs |fn| in a forked child and returns its exit status and what it wrote to |out|.
std::pair<int, std::string> in_child(const std::function<int(std::ostream&)>& fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::ostringstream out;
    int code = fn(out);
    std::string s = out.str();
    (void)!::write(fds[1], s.data(), s.size());
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST_CASE("DataDirLock: one process per data dir; state prune names the holder's pid",
          "[api][state][gc][unit]") {
  test::TempDir dir;
  auto held = DataDirLock::acquire(dir.path());
  REQUIRE(held.ok());
  // Another process is refused, naming this one.
  auto [code, text] = in_child([&](std::ostream& out) {
    auto second = DataDirLock::acquire(dir.path());
    out << (second.ok() ? std::string("acquired") : second.status().to_string());
    return second.ok() ? 0 : 1;
  });
  CHECK(code == 1);
  CHECK(text.find("FAILED_PRECONDITION") != std::string::npos);
  CHECK(text.find(fmt::format("pid {}", ::getpid())) != std::string::npos);
  auto [prune_code, prune_text] = in_child([&](std::ostream& out) {
    StateCommandOptions o;
    o.data_dir = dir.path();
    o.open_store = []() -> Result<std::unique_ptr<state::Store>> {
      return internal_error("must not be reached");
    };
    std::ostringstream sink;
    return run_state_command(o, sink, out);
  });
  CHECK(prune_code == 1);
  CHECK(prune_text.find(fmt::format("pid {}", ::getpid())) != std::string::npos);
  CHECK(prune_text.find("cocoonbox api is running") != std::string::npos);
  // Released with the holder (moved from, then destroyed): the next one gets it.
  { DataDirLock gone = std::move(*held); }
  auto [code2, text2] = in_child([&](std::ostream& out) {
    auto again = DataDirLock::acquire(dir.path());
    out << (again.ok() ? std::string("acquired") : again.status().to_string());
    return again.ok() ? 0 : 1;
  });
  CHECK(code2 == 0);
  CHECK(text2 == "acquired");
}

// `state ls` reads the store beside a running api (the data dir's lock held), in key order,
// with packed objects and files alike, as lines or one JSON document.
TEST_CASE("state ls: lists a store's objects under a prefix beside a running api",
          "[api][state][gc][unit]") {
  test::TempDir dir;
  auto held = DataDirLock::acquire(dir.path());
  REQUIRE(held.ok());
  {
    auto store = state::FsStore::open(dir.path() / "state");
    REQUIRE(store.ok());
    REQUIRE((*store)->put("u1/boxes/b/head", "head").ok());
    for (int i = 0; i < 1200; ++i) {
      REQUIRE((*store)->put_deferred(fmt::format("u1/chunks/{:04d}", i), "c").ok());
    }
    REQUIRE((*store)->put_deferred("u2/chunks/x", "other user").ok());
    REQUIRE((*store)->sync().ok());
  }
  StateCommandOptions o;
  o.requested = o.ls = true;
  o.data_dir = dir.path();
  o.open_store = [&]() -> Result<std::unique_ptr<state::Store>> {
    ASSIGN_OR_RETURN(auto store, state::FsStore::open(dir.path() / "state"));
    return std::unique_ptr<state::Store>(std::move(store));
  };
  o.prefix = "u1/";
  std::ostringstream out, err;
  REQUIRE(run_state_command(o, out, err) == 0);
  std::istringstream lines(out.str());
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  REQUIRE(got.size() == 1201);  // more than one page of list()
  CHECK(got.front() == "u1/boxes/b/head 4");
  CHECK(got[1] == "u1/chunks/0000 1");
  CHECK(got.back() == "u1/chunks/1199 1");
  CHECK(err.str().empty());

  o.prefix = "u2/";
  o.json = true;
  std::ostringstream doc;
  REQUIRE(run_state_command(o, doc, err) == 0);
  const auto v = nlohmann::json::parse(doc.str());
  CHECK(v["count"] == 1);
  CHECK(v["bytes"] == 10);
  CHECK(v["objects"][0]["key"] == "u2/chunks/x");
}

}  // namespace
}  // namespace cb::api
