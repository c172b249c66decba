#include "roles/api/state_gc.h"

#include "base/log.h"
#include "crypto/bytes.h"
#include "crypto/random.h"
#include "net/blocking.h"
#include "roles/api/data_dir_lock.h"
#include "roles/api/keys.h"
#include "roles/api/state_manager.h"
#include "state/manifest.h"
#include "state/prune.h"
#include "state/snapshot.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <iostream>
#include <optional>
#include <ostream>
#include <set>
#include <unordered_set>

namespace cb::api {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::system_clock;

int64_t to_ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// "2026-11-30T15:00:00.123Z".
std::string utc_ms(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", std::string_view(buf, n), ((ms % 1000) + 1000) % 1000);
}

BoxGcReport box_report(const std::string& box, const state::PruneResult& pruned) {
  BoxGcReport r;
  r.box = box;
  r.head = pruned.head;
  r.decisions = pruned.plan.decisions;
  r.timeline_rewritten = pruned.timeline_rewritten;
  r.compacted = pruned.compacted;
  r.deleted_objects = pruned.deleted.size();
  r.deleted_bytes = pruned.deleted_bytes;
  return r;
}

std::string box_line(const std::string& user, const BoxGcReport& b, bool dry_run) {
  return fmt::format("prune {}/{}: kept {}, dropped {}, compacted {}; {} {} objects ({} bytes)",
                     user, b.box, b.kept(), b.dropped(), b.compacted,
                     dry_run ? "would delete" : "deleted", b.deleted_objects, b.deleted_bytes);
}

std::string mark_line(const state::SweepMark& mark) {
  return fmt::format(
      "sweep {}: marked {} chunks of {} snapshots; {} objects listed", mark.user,
      mark.chunks.size(),
      [&] {
        size_t n = 0;
        for (const auto& [box, ids] : mark.snapshots) n += ids.size();
        return n;
      }(),
      mark.listed.size());
}

state::SweepOptions sweep_options(const std::string& user, const GcOptions& options) {
  state::SweepOptions s;
  s.delete_batch = options.delete_batch;
  s.dry_run = options.dry_run;
  if (options.progress) {
    auto progress = options.progress;
    s.before_batch = [progress, user](uint64_t deleted, uint64_t total) {
      progress(fmt::format("sweep {}: deleted {} of {} chunks", user, deleted, total));
    };
  }
  return s;
}

state::PruneOptions prune_options(Clock::time_point now, const GcOptions& options) {
  state::PruneOptions p;
  p.rule = options.rule;
  p.now = now;
  p.dry_run = options.dry_run;
  return p;
}

// A dry run's sweep: prune_box() changed nothing, so sweep_mark() would still see the
// snapshots the plan drops. Mark only what the plans keep (and the heads), and count what
// the listing holds beyond that: what the real pass would delete.
Result<state::SweepResult> dry_sweep(state::Store& store, const state::StateKeys& keys,
                                     const std::string& user,
                                     const std::vector<BoxGcReport>& boxes) {
  state::SweepResult result;
  std::unordered_set<state::ChunkId, state::ChunkIdHash> marked;
  for (const BoxGcReport& b : boxes) {
    ++result.boxes;
    std::set<std::string> ids;
    if (!b.head.empty()) ids.insert(b.head);
    for (const auto& d : b.decisions)
      if (d.keep) ids.insert(d.snapshot_id);
    for (const std::string& id : ids) {
      ASSIGN_OR_RETURN(state::Manifest m,
                       state::load_manifest(store, keys, state::BoxLocation{user, b.box}, id));
      for (const auto& c : state::referenced_chunks(m)) marked.insert(c);
      ++result.snapshots;
    }
  }
  result.marked_chunks = marked.size();
  const std::string prefix = state::chunks_prefix(user);
  ASSIGN_OR_RETURN(std::vector<state::ObjectInfo> listed, state::list_all(store, prefix));
  for (const state::ObjectInfo& o : listed) {
    auto id = state::chunk_id_of(user, o.key);
    if (!id.ok()) {
      ++result.foreign_objects;
      continue;
    }
    ++result.listed_chunks;
    result.listed_bytes += o.size;
    if (marked.count(*id) != 0) continue;
    ++result.garbage_chunks;
    result.garbage_bytes += o.size;
  }
  return result;
}

json report_json(const UserGcReport& r) {
  json boxes = json::array();
  for (const BoxGcReport& b : r.boxes) {
    json kept = json::array();
    json dropped = json::array();
    for (const auto& d : b.decisions) {
      if (d.keep) {
        kept.push_back(
            json{{"id", d.snapshot_id}, {"saved_at_ms", d.saved_at_ms}, {"reason", d.reason}});
      } else {
        dropped.push_back(json{{"id", d.snapshot_id}, {"saved_at_ms", d.saved_at_ms}});
      }
    }
    boxes.push_back(json{{"box", b.box},
                         {"head", b.head},
                         {"kept", std::move(kept)},
                         {"dropped", std::move(dropped)},
                         {"timeline_rewritten", b.timeline_rewritten},
                         {"compacted", b.compacted},
                         {"deleted_objects", b.deleted_objects},
                         {"deleted_bytes", b.deleted_bytes}});
  }
  const state::SweepResult& s = r.sweep;
  return json{{"user", r.user},
              {"name", r.name},
              {"dry_run", r.dry_run},
              {"boxes", std::move(boxes)},
              {"chunks",
               {{"listed", s.listed_chunks},
                {"listed_bytes", s.listed_bytes},
                {"marked", s.marked_chunks},
                {"snapshots", s.snapshots},
                {"late_snapshots", s.late_snapshots},
                {"deleted", s.garbage_chunks},
                {"freed_bytes", s.garbage_bytes},
                {"foreign_objects", s.foreign_objects}}}};
}

// "+40d" / "-2h" relative to |real_now|. Returns nullopt when |text| has no sign.
Result<std::optional<Clock::time_point>> parse_offset(std::string_view text,
                                                      Clock::time_point real_now) {
  if (text.empty() || (text[0] != '+' && text[0] != '-')) return std::optional<Clock::time_point>();
  const bool minus = text[0] == '-';
  std::string_view rest = text.substr(1);
  size_t i = 0;
  int64_t n = 0;
  while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && i < 9)
    n = n * 10 + (rest[i++] - '0');
  if (i == 0 || i + 1 != rest.size())
    return invalid_argument(
        fmt::format("--now {:?}: want +<n><unit> with unit s, m, h, d or w", text));
  using namespace std::chrono;
  seconds unit{0};
  switch (rest[i]) {
    case 's':
      unit = seconds(1);
      break;
    case 'm':
      unit = minutes(1);
      break;
    case 'h':
      unit = hours(1);
      break;
    case 'd':
      unit = hours(24);
      break;
    case 'w':
      unit = hours(24 * 7);
      break;
    default:
      return invalid_argument(fmt::format("--now {:?}: unknown unit (s, m, h, d, w)", text));
  }
  const auto offset = duration_cast<Clock::duration>(unit * n);
  return std::optional<Clock::time_point>(minus ? real_now - offset : real_now + offset);
}

bool digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

}  // namespace

size_t BoxGcReport::kept() const {
  size_t n = 0;
  for (const auto& d : decisions) n += d.keep ? 1 : 0;
  return n;
}

size_t BoxGcReport::dropped() const { return decisions.size() - kept(); }

std::string gc_summary(const UserGcReport& r) {
  size_t kept = 0;
  size_t dropped = 0;
  uint64_t objects = 0;
  uint64_t object_bytes = 0;
  for (const auto& b : r.boxes) {
    kept += b.kept();
    dropped += b.dropped();
    objects += b.deleted_objects;
    object_bytes += b.deleted_bytes;
  }
  const state::SweepResult& s = r.sweep;
  return fmt::format(
      "{}{}: {} boxes, kept {}, dropped {} snapshots ({} objects, {} bytes); chunks: {} listed, "
      "{} marked, {} {}, {} bytes freed{}",
      r.user, r.name.empty() ? std::string() : fmt::format(" ({})", r.name), r.boxes.size(), kept,
      dropped, objects, object_bytes, s.listed_chunks, s.marked_chunks, s.garbage_chunks,
      r.dry_run ? "to delete" : "deleted", r.dry_run ? 0 : s.garbage_bytes,
      r.dry_run ? fmt::format(" (dry run: {} bytes would be)", s.garbage_bytes) : std::string());
}

std::string gc_report_json(const UserGcReport& report) { return report_json(report).dump(); }

Result<bool> user_has_state(state::Store& store, std::string_view user) {
  ASSIGN_OR_RETURN(state::ListPage page, store.list(state::user_prefix(user), "", 1));
  return !page.objects.empty();
}

Result<Clock::time_point> parse_gc_time(std::string_view text, Clock::time_point real_now) {
  ASSIGN_OR_RETURN(auto offset, parse_offset(text, real_now));
  if (offset) return *offset;
  if (!text.empty() && text[0] == '@') {
    // "@<unix seconds>[.<ms>]"
    std::string_view rest = text.substr(1);
    size_t dot = rest.find('.');
    std::string_view secs = rest.substr(0, dot);
    std::string_view frac =
        dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
    int64_t s = 0;
    if (secs.empty() || secs.size() > 12)
      return invalid_argument(fmt::format("--now {:?}: bad @seconds", text));
    for (char c : secs) {
      if (c < '0' || c > '9')
        return invalid_argument(fmt::format("--now {:?}: bad @seconds", text));
      s = s * 10 + (c - '0');
    }
    int64_t ms = 0;
    if (dot != std::string_view::npos) {
      if (frac.empty() || frac.size() > 3)
        return invalid_argument(fmt::format("--now {:?}: at most 3 digits after the point", text));
      for (size_t i = 0; i < 3; ++i) {
        char c = i < frac.size() ? frac[i] : '0';
        if (c < '0' || c > '9')
          return invalid_argument(fmt::format("--now {:?}: bad @seconds", text));
        ms = ms * 10 + (c - '0');
      }
    }
    return Clock::time_point(std::chrono::milliseconds(s * 1000 + ms));
  }
  // RFC 3339: YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)
  const auto bad = [&] {
    return invalid_argument(fmt::format(
        "--now {:?}: want RFC 3339 (2026-11-30T12:00:00Z), an offset (+40d) or @<unix seconds>",
        text));
  };
  int year = 0, mon = 0, day = 0, hour = 0, min = 0, sec = 0;
  if (!digits(text, 0, 4, &year) || text.size() < 20 || text[4] != '-' ||
      !digits(text, 5, 2, &mon) || text[7] != '-' || !digits(text, 8, 2, &day) ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !digits(text, 11, 2, &hour) ||
      text[13] != ':' || !digits(text, 14, 2, &min) || text[16] != ':' ||
      !digits(text, 17, 2, &sec))
    return bad();
  size_t pos = 19;
  int64_t ms = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (pos - start < 3) ms = ms * 10 + (text[pos] - '0');
      ++pos;
    }
    if (pos == start) return bad();
    for (size_t k = pos - start; k < 3; ++k) ms *= 10;
  }
  int64_t zone_s = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z') && pos + 1 == text.size()) {
    zone_s = 0;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-') &&
             pos + 6 == text.size() && text[pos + 3] == ':') {
    int zh = 0, zm = 0;
    if (!digits(text, pos + 1, 2, &zh) || !digits(text, pos + 4, 2, &zm) || zh > 23 || zm > 59)
      return bad();
    zone_s = (zh * 3600 + zm * 60) * (text[pos] == '+' ? 1 : -1);
  } else {
    return bad();
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) return bad();
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  const int64_t t = static_cast<int64_t>(timegm(&tm)) - zone_s;
  return Clock::time_point(std::chrono::milliseconds(t * 1000 + ms));
}

// ---- one user ----

asio::awaitable<Result<UserGcReport>> gc_user(StateLocks& locks, state::Store& store,
                                              const state::StateKeys& keys, std::string user,
                                              Clock::time_point now, const GcOptions& options) {
  UserGcReport report;
  report.user = user;
  report.dry_run = options.dry_run;
  auto boxes = co_await net::run_blocking([&]() { return state::list_boxes(store, user); });
  if (!boxes.ok()) co_return boxes.status();
  const state::PruneOptions popts = prune_options(now, options);
  for (const std::string& box : *boxes) {
    // The box's lock, as a save or restore of the box takes it: a save writes its manifest
    // and record before the timeline names them, and the prune's step 3 would delete them.
    // box_for_prune() so that a hibernating box's save waits for this instead of skipping.
    auto guard = co_await locks.box_for_prune(box);
    if (!guard.ok()) co_return guard.status();
    if (options.during_prune_for_test) co_await options.during_prune_for_test(box);
    auto pruned = co_await net::run_blocking([&]() {
      const state::BoxLocation location{user, box};
      return state::prune_box(store, keys, location, popts, crypto::system_random());
    });
    guard->reset();
    if (!pruned.ok()) co_return pruned.status().with_prefix(fmt::format("prune box {}", box));
    report.boxes.push_back(box_report(box, *pruned));
    if (options.progress) options.progress(box_line(user, report.boxes.back(), options.dry_run));
  }

  if (options.dry_run) {
    auto counted =
        co_await net::run_blocking([&]() { return dry_sweep(store, keys, user, report.boxes); });
    if (!counted.ok()) co_return counted.status().with_prefix(std::string("sweep (dry run)"));
    report.sweep = *counted;
    co_return report;
  }
  // The sweep. 1: the mark, without a lock (the saves of the user go on meanwhile).
  auto mark = co_await net::run_blocking([&]() { return state::sweep_mark(store, keys, user); });
  if (!mark.ok()) co_return mark.status().with_prefix(std::string("sweep mark"));
  if (options.progress) options.progress(mark_line(*mark));
  if (options.after_mark_for_test) co_await options.after_mark_for_test();
  // 2-4 under the user's lock, exclusively: every save of the user holds it shared from its
  // start to its commit, so this waits until no save is between "this chunk is stored, skip
  // it" and its commit, and keeps new saves out until the deletes are done (a save may
  // upload a garbage chunk again only once they are).
  auto user_guard = co_await locks.user_exclusive(user);
  if (!user_guard.ok()) co_return user_guard.status();
  const state::SweepOptions sopts = sweep_options(user, options);
  auto swept = co_await net::run_blocking(
      [&]() { return state::sweep_finish(store, keys, std::move(*mark), sopts); });
  user_guard->reset();
  if (!swept.ok()) co_return swept.status().with_prefix(std::string("sweep"));
  report.sweep = *swept;
  co_return report;
}

Result<UserGcReport> gc_user_offline(state::Store& store, const state::StateKeys& keys,
                                     const std::string& user, Clock::time_point now,
                                     const GcOptions& options) {
  UserGcReport report;
  report.user = user;
  report.dry_run = options.dry_run;
  ASSIGN_OR_RETURN(std::vector<std::string> boxes, state::list_boxes(store, user));
  const state::PruneOptions popts = prune_options(now, options);
  for (const std::string& box : boxes) {
    const state::BoxLocation location{user, box};
    auto pruned = state::prune_box(store, keys, location, popts, crypto::system_random());
    if (!pruned.ok()) return pruned.status().with_prefix(fmt::format("prune box {}", box));
    report.boxes.push_back(box_report(box, *pruned));
    if (options.progress) options.progress(box_line(user, report.boxes.back(), options.dry_run));
  }
  if (options.dry_run) {
    auto counted = dry_sweep(store, keys, user, report.boxes);
    if (!counted.ok()) return counted.status().with_prefix(std::string("sweep (dry run)"));
    report.sweep = *counted;
    return report;
  }
  auto mark = state::sweep_mark(store, keys, user);
  if (!mark.ok()) return mark.status().with_prefix(std::string("sweep mark"));
  if (options.progress) options.progress(mark_line(*mark));
  auto swept = state::sweep_finish(store, keys, std::move(*mark), sweep_options(user, options));
  if (!swept.ok()) return swept.status().with_prefix(std::string("sweep"));
  report.sweep = *swept;
  return report;
}

// ---- the api's loop ----

StateGc::StateGc(net::Executor executor, Store& db, const crypto::SymmetricKey& master,
                 StateLocks& locks, state::Store& store, GcOptions options,
                 std::chrono::milliseconds interval)
    : executor_(std::move(executor)),
      db_(db),
      master_(master),
      locks_(locks),
      store_(store),
      options_(std::move(options)),
      interval_(interval),
      alive_(std::make_shared<bool>(true)) {
  // Each step (a box pruned, the mark, each delete batch) at debug level; the line per user
  // at info. Called on blocking threads too (log::write takes a lock).
  if (!options_.progress) {
    options_.progress = [](const std::string& line) {
      log::debug("state gc progress", {{"step", line}});
    };
  }
}

StateGc::~StateGc() { *alive_ = false; }

void StateGc::start() {
  if (interval_.count() == 0) return;
  asio::co_spawn(executor_, loop(), asio::detached);
}

void StateGc::stop() { stopping_ = true; }

asio::awaitable<void> StateGc::loop() {
  auto alive = alive_;
  net::Timer timer(executor_);
  while (!stopping_) {
    Status st = co_await run_once(Clock::now());
    if (!*alive || stopping_) co_return;
    if (!st.ok()) log::warn("state gc pass failed", {{"error", st.to_string()}});
    timer.expires_after(interval_);
    auto [ec] = co_await timer.async_wait();
    if (ec || !*alive || stopping_) co_return;
  }
}

asio::awaitable<Status> StateGc::run_once(Clock::time_point now) {
  auto alive = alive_;
  auto users = co_await db_.list_users();
  if (!*alive) co_return cancelled("api stopping");
  if (!users.ok()) co_return users.status();
  state::Store& store = store_;
  for (const User& u : *users) {
    if (stopping_) break;
    const std::string user = state_user(u.id);
    auto has = co_await net::run_blocking([&]() { return user_has_state(store, user); });
    if (!*alive) co_return cancelled("api stopping");
    if (!has.ok()) {
      log::warn("state gc", {{"user", user}, {"error", has.status().to_string()}});
      continue;
    }
    if (!*has) continue;
    auto raw = co_await db_.user_state_key(u.id, master_.bytes());
    if (!*alive) co_return cancelled("api stopping");
    if (!raw.ok()) {
      log::warn("state gc", {{"user", user}, {"error", raw.status().to_string()}});
      continue;
    }
    auto key = crypto::SymmetricKey::from_bytes(*raw);
    crypto::wipe(*raw);
    if (!key.ok()) {
      log::warn("state gc", {{"user", user}, {"error", key.status().to_string()}});
      continue;
    }
    const state::StateKeys keys(*key);
    auto report = co_await gc_user(locks_, store, keys, user, now, options_);
    if (!*alive) co_return cancelled("api stopping");
    if (!report.ok()) {
      log::warn("state gc", {{"user", user}, {"error", report.status().to_string()}});
      continue;
    }
    report->name = u.name;
    size_t kept = 0;
    size_t dropped = 0;
    uint64_t objects = 0;
    for (const auto& b : report->boxes) {
      kept += b.kept();
      dropped += b.dropped();
      objects += b.deleted_objects;
    }
    log::info("state gc", {{"user", user},
                           {"name", u.name},
                           {"boxes", report->boxes.size()},
                           {"kept", kept},
                           {"dropped", dropped},
                           {"deleted_objects", objects},
                           {"chunks_listed", report->sweep.listed_chunks},
                           {"chunks_deleted", report->sweep.garbage_chunks},
                           {"bytes_freed", report->sweep.garbage_bytes},
                           {"summary", gc_summary(*report)}});
  }
  ++passes_;
  co_return ok_status();
}

// ---- `cocoonbox api state prune` ----

void add_state_commands(CLI::App& api_app, StateCommandOptions& opts) {
  CLI::App* state = api_app.add_subcommand("state", "The state layer's stores, offline");
  state->require_subcommand(1);
  state->fallthrough();
  CLI::App* prune = state->add_subcommand(
      "prune",
      "Run the GC pass now (retention, then the chunk sweep) with the api stopped: every "
      "user, or --user");
  prune->fallthrough();
  prune->callback([&opts] { opts.requested = true; });
  prune
      ->add_option("--now", opts.now,
                   "evaluate the rule at this time: RFC 3339 (2026-11-30T12:00:00Z), an offset "
                   "from now (+40d, -2h; s m h d w) or @<unix seconds>")
      ->type_name("TIME");
  prune->add_flag("--dry-run", opts.dry_run, "decide and count, change nothing");
  prune->add_flag("--json", opts.json, "print one JSON document");
  prune->add_flag("-v,--verbose", opts.verbose, "progress on stderr (each box, each delete batch)");
  prune->add_option("--user", opts.user, "only this user")->type_name("NAME");
  CLI::App* ls = state->add_subcommand(
      "ls", "List the store's objects (key and size) in key order; runs beside a running api");
  ls->fallthrough();
  ls->callback([&opts] {
    opts.requested = true;
    opts.ls = true;
  });
  ls->add_option("prefix", opts.prefix, "only keys that start with it (a user's: u<id>/)")
      ->type_name("PREFIX");
  ls->add_flag("--json", opts.json, "print one JSON document");
}

namespace {

int run_state_ls(const StateCommandOptions& opts, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const Status& st) {
    err << "cocoonbox api state ls: " << st.message() << "\n";
    return st.code() == Code::kInvalidArgument ? 2 : 1;
  };
  if (!opts.open_store) return fail(internal_error("no store"));
  auto store = opts.open_store();
  if (!store.ok()) return fail(store.status());
  json objects = json::array();
  uint64_t count = 0;
  uint64_t bytes = 0;
  std::string after;
  while (true) {
    auto page = (*store)->list(opts.prefix, after);
    if (!page.ok()) return fail(page.status());
    for (const state::ObjectInfo& o : page->objects) {
      ++count;
      bytes += o.size;
      if (opts.json) {
        objects.push_back(json{{"key", o.key}, {"size", o.size}});
      } else {
        out << o.key << ' ' << o.size << '\n';
      }
    }
    if (!page->truncated || page->objects.empty()) break;
    after = page->objects.back().key;
  }
  if (opts.json) {
    out << json{{"prefix", opts.prefix}, {"objects", objects}, {"count", count}, {"bytes", bytes}}
               .dump()
        << "\n";
  }
  out.flush();
  return 0;
}

}  // namespace

int run_state_command(const StateCommandOptions& opts, std::ostream& out, std::ostream& err) {
  if (opts.ls) return run_state_ls(opts, out, err);
  const auto fail = [&](const Status& st) {
    err << "cocoonbox api state prune: " << st.message() << "\n";
    return st.code() == Code::kInvalidArgument ? 2 : 1;
  };
  const Clock::time_point real_now = Clock::now();
  Clock::time_point now = real_now;
  if (!opts.now.empty()) {
    auto t = parse_gc_time(opts.now, real_now);
    if (!t.ok()) return fail(t.status());
    now = *t;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(opts.data_dir, ec))
    return fail(not_found(fmt::format("--data-dir {}: no such directory", opts.data_dir.string())));
  // No api may run meanwhile: it holds this lock for its life (data_dir_lock.h).
  auto lock = DataDirLock::acquire(opts.data_dir);
  if (!lock.ok()) return fail(lock.status());
  auto db = SyncStore::open(opts.data_dir);
  if (!db.ok()) return fail(db.status());
  auto master = load_or_create_master_key(opts.data_dir);
  if (!master.ok()) return fail(master.status());
  if (!opts.open_store) return fail(internal_error("no store"));
  auto store = opts.open_store();
  if (!store.ok()) return fail(store.status());
  auto users = db->list_users();
  if (!users.ok()) return fail(users.status());
  if (!opts.user.empty()) {
    bool found = false;
    for (const User& u : *users) found = found || u.name == opts.user;
    if (!found) return fail(not_found(fmt::format("--user {}: no such user", opts.user)));
  }

  GcOptions gc = opts.gc;
  gc.dry_run = opts.dry_run;
  if (opts.verbose) gc.progress = [&err](const std::string& line) { err << line << std::endl; };
  json reports = json::array();
  json errors = json::array();
  if (!opts.json) {
    out << fmt::format("state prune at {} (rule {}){}\n", utc_ms(to_ms(now)),
                       state::format_retention_rule(gc.rule), opts.dry_run ? ", dry run" : "");
  }
  for (const User& u : *users) {
    if (!opts.user.empty() && u.name != opts.user) continue;
    const std::string user = state_user(u.id);
    auto has = user_has_state(**store, user);
    if (!has.ok()) {
      errors.push_back(json{{"user", user}, {"error", has.status().to_string()}});
      err << fmt::format("cocoonbox api state prune: {}: {}\n", user, has.status().message());
      continue;
    }
    if (!*has) continue;
    auto raw = db->user_state_key(u.id, master->bytes());
    if (!raw.ok()) {
      errors.push_back(json{{"user", user}, {"error", raw.status().to_string()}});
      err << fmt::format("cocoonbox api state prune: {}: {}\n", user, raw.status().message());
      continue;
    }
    auto key = crypto::SymmetricKey::from_bytes(*raw);
    crypto::wipe(*raw);
    if (!key.ok()) return fail(key.status());
    const state::StateKeys keys(*key);
    auto report = gc_user_offline(**store, keys, user, now, gc);
    if (!report.ok()) {
      errors.push_back(json{{"user", user}, {"error", report.status().to_string()}});
      err << fmt::format("cocoonbox api state prune: {}: {}\n", user, report.status().message());
      continue;
    }
    report->name = u.name;
    if (opts.json) {
      reports.push_back(report_json(*report));
      continue;
    }
    for (const BoxGcReport& b : report->boxes) {
      out << fmt::format(
          "{} ({}) box {}: kept {}, dropped {}, compacted {}; {} {} objects ({} bytes)\n", user,
          u.name, b.box, b.kept(), b.dropped(), b.compacted,
          opts.dry_run ? "would delete" : "deleted", b.deleted_objects, b.deleted_bytes);
      for (const auto& d : b.decisions) {
        out << fmt::format("  {} {}  {}  {}\n", d.keep ? "keep" : "drop", d.snapshot_id,
                           utc_ms(d.saved_at_ms), d.keep ? d.reason : std::string());
      }
    }
    out << gc_summary(*report) << "\n";
  }
  if (opts.json) {
    out << json{{"now_ms", to_ms(now)},
                {"now", utc_ms(to_ms(now))},
                {"rule", state::format_retention_rule(gc.rule)},
                {"dry_run", opts.dry_run},
                {"users", std::move(reports)},
                {"errors", errors}}
               .dump()
        << "\n";
  }
  return errors.empty() ? 0 : 1;
}

}  // namespace cb::api
