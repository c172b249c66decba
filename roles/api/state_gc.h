#pragma once
// The state layer's GC pass (seed §25.3; src/state/README.md "Retention, prune and sweep"):
// per user, prune every box of the user, then sweep the user's chunks.
//
//   gc_user()          one user, inside the api: each box pruned under StateLocks::box_for_prune
//                      (a save, restore or hibernate-save of that box waits for it); the mark
//                      on a blocking thread without a lock; then StateLocks::user_exclusive
//                      (waits for every save of the user to commit or fail, keeps new ones
//                      out); the re-mark and the deletes on a blocking thread; release.
//   gc_user_offline()  the same, synchronously, for `cocoonbox api state prune`, which holds
//                      the data dir's lock (data_dir_lock.h), so no api runs meanwhile.
//   StateGc            the api's loop: a pass over every user with state once shortly after
//                      start and then every |interval| (0 = never); one log line per user,
//                      and one per step at debug level ("state gc progress").
//   state prune        `cocoonbox api state prune [--now T] [--dry-run] [--json] [-v]
//                      [--user NAME]`: add_state_commands() / run_state_command().
//
// Blocking store work runs on threads of its own (net::run_blocking); the executor never
// blocks. Boxes are found in the store (state::list_boxes), so a box deleted from api.db but
// with saves left is pruned too.
//
// Affinity: gc_user() and StateGc on the api's executor; the store and the locks must outlive
// them. gc_user_offline() and run_state_command() on any thread.

#include "base/result.h"
#include "crypto/keys.h"
#include "net/asio.h"
#include "roles/api/state_locks.h"
#include "roles/api/store/store.h"
#include "state/keys.h"
#include "state/retention.h"
#include "state/store.h"
#include "state/sweep.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace cb::api {

struct GcOptions {
  state::RetentionRule rule = state::RetentionRule::time_machine();
  size_t delete_batch = state::kMaxDeleteBatch;  // keys per DeleteObjects call, 1..1000
  bool dry_run = false;                          // decide and count, change nothing
  // A line for a human per step (a box pruned, the mark done, each delete batch); called on
  // the thread doing the step. Unset: quiet.
  std::function<void(const std::string& line)> progress;
  // For tests, on the executor: while the box's prune lock is held, before the prune; and
  // between the mark and taking the user's lock.
  std::function<asio::awaitable<void>(std::string box)> during_prune_for_test;
  std::function<asio::awaitable<void>()> after_mark_for_test;
};

struct BoxGcReport {
  std::string box;
  std::string head;
  std::vector<state::RetentionDecision> decisions;  // timeline order
  bool timeline_rewritten = false;
  size_t compacted = 0;          // kept manifests rebased or made whole before the deletes (§25.8)
  uint64_t deleted_objects = 0;  // records and manifests (in a dry run: that would go)
  uint64_t deleted_bytes = 0;

  size_t kept() const;
  size_t dropped() const;
};

struct UserGcReport {
  std::string user;  // store segment, "u<id>"
  std::string name;  // the api user's name, when known
  std::vector<BoxGcReport> boxes;
  state::SweepResult sweep;
  bool dry_run = false;
};

// The GC pass of |user| at |now|. Errors: those of prune_box() and the sweep (a failing box
// stops the pass before the sweep: the sweep's mark would fail on it too); kCancelled when a
// lock wait is cancelled.
asio::awaitable<Result<UserGcReport>> gc_user(StateLocks& locks, state::Store& store,
                                              const state::StateKeys& keys, std::string user,
                                              std::chrono::system_clock::time_point now,
                                              const GcOptions& options);

// The same without locks. REQUIRES: nothing else writes |user|'s state meanwhile.
Result<UserGcReport> gc_user_offline(state::Store& store, const state::StateKeys& keys,
                                     const std::string& user,
                                     std::chrono::system_clock::time_point now,
                                     const GcOptions& options);

// One log/terminal line: "u1 (admin): 2 boxes, kept 3, dropped 4 snapshots (8 objects,
// 1234 bytes); chunks: 40 listed, 30 marked, 10 deleted, 655360 bytes freed".
std::string gc_summary(const UserGcReport& report);
// The report as JSON (what `state prune --json` prints per user).
std::string gc_report_json(const UserGcReport& report);

// Whether |user| has any object in |store| (a user who never saved has nothing to collect,
// and needs no state key). Errors: store errors.
Result<bool> user_has_state(state::Store& store, std::string_view user);

// A time for --now: RFC 3339 ("2026-11-30T12:00:00Z", "2026-11-30T12:00:00.250+01:00"), an
// offset from |real_now| ("+40d", "-2h"; units s, m, h, d, w), or "@<unix seconds>[.ms]".
// Errors: kInvalidArgument naming --now.
Result<std::chrono::system_clock::time_point> parse_gc_time(
    std::string_view text, std::chrono::system_clock::time_point real_now);

// The api's loop. Affinity: |executor|; |db|, |master|, |locks| and |store| outlive it.
class StateGc {
 public:
  StateGc(net::Executor executor, Store& db, const crypto::SymmetricKey& master, StateLocks& locks,
          state::Store& store, GcOptions options, std::chrono::milliseconds interval);
  ~StateGc();
  StateGc(const StateGc&) = delete;
  StateGc& operator=(const StateGc&) = delete;

  // Starts the loop (no-op when |interval| is 0): a pass now, then every |interval|.
  void start();
  void stop();

  // One pass over every active user with state; logs a line per user. Errors: listing the
  // users; a user's failure is logged and the pass goes on.
  asio::awaitable<Status> run_once(std::chrono::system_clock::time_point now);

  uint64_t passes() const { return passes_; }

 private:
  asio::awaitable<void> loop();

  net::Executor executor_;
  Store& db_;
  const crypto::SymmetricKey& master_;
  StateLocks& locks_;
  state::Store& store_;
  GcOptions options_;
  std::chrono::milliseconds interval_;
  bool stopping_ = false;
  uint64_t passes_ = 0;
  std::shared_ptr<bool> alive_;  // co-owned by the loop: false once this is destroyed
};

// ---- `cocoonbox api state prune` ----

struct StateCommandOptions {
  bool requested = false;  // set by the parser when `state prune` or `state ls` was given
  bool ls = false;         // `state ls`, not `state prune`
  std::string prefix;      // ls: only keys that start with it
  std::string now;         // --now ("" = the real time)
  bool dry_run = false;
  bool json = false;
  bool verbose = false;  // progress lines on stderr
  std::string user;      // --user NAME ("" = every user)
  // Set by the api after parsing: the data dir, the rule, the batch size, and how to open
  // the store the server uses (its --state-dir).
  std::filesystem::path data_dir;
  GcOptions gc;
  std::function<Result<std::unique_ptr<state::Store>>()> open_store;
};

// Registers `state prune` and `state ls` on |api_app|; parent options (--data-dir, --state-keep,
// ...) may follow it. |opts| must outlive the parse.
void add_state_commands(CLI::App& api_app, StateCommandOptions& opts);

// Runs `state ls`: lists the store's objects under the prefix, in key order, "<key> <size>"
// per line (or one JSON document with --json); read-only, so it runs beside a running api.
// Runs `state prune`: takes the data dir's lock (fails naming the running api's pid), opens
// api.db and the master key, and runs gc_user_offline() for each user with state. Prints per
// box the kept and dropped snapshots and per user the chunks deleted and bytes freed (or one
// JSON document with --json) on |out|; progress (-v) and errors on |err|.
// Exit status: 0 ok, 1 error (some user failed, or the lock is held), 2 usage.
int run_state_command(const StateCommandOptions& opts, std::ostream& out, std::ostream& err);

}  // namespace cb::api
