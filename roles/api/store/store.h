#pragma once
// The api's persistent state: users, their tokens, their boxes and the operations on boxes,
// in <data-dir>/api.db (schema: schema.h, README.md §Schema).
//
// Two front doors over one implementation:
//
//  - Store is for the api server. It owns a db::Worker (the db thread); every method is a
//    coroutine that hands the work to that thread and resumes on the caller's executor with
//    the result, so the api's loop never blocks on SQLite.
//
//      ASSIGN_OR_RETURN(auto store, api::Store::open(data_dir));   // at startup, blocks
//      Result<api::Box> box = co_await store->create_box(user_id, "main", image, "local");
//
//  - SyncStore runs the same operations on the calling thread. The one-shot admin process
//    (`cocoonbox api user add ...`, admin.h) uses it: it has no loop to keep free, so a worker
//    thread and an io_context would only add moving parts. Store's worker functions use it
//    too, over the worker's connection, so both doors share every line of SQL.
//
// Several processes may open the same api.db at once (the api server and an admin command):
// WAL lets readers run beside the writer, every write is one IMMEDIATE transaction, and a
// writer waits up to the busy timeout for another (then kUnavailable). Every write that
// changes users or tokens bumps meta.change_generation in the same transaction, which is how
// the api's TokenIndex notices another process's writes (token_index.h).
//
// Errors common to every method, not repeated below: kUnavailable (the database is locked
// by another writer past the busy timeout), kDataLoss (the file is corrupt), kInternal.
//
// Times are Unix milliseconds from StoreOptions::clock. Ids are a prefix and 12 lower-case
// hex characters from StoreOptions::random: "tk_", "bx_", "op_".

#include "base/clock.h"
#include "base/result.h"
#include "base/status.h"
#include "crypto/hash.h"
#include "crypto/random.h"
#include "db/database.h"
#include "db/worker.h"

#include <asio/awaitable.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::api {

// Quotas of a new user when the caller gives none (seed §19.5: a third box is refused, a
// second running box is refused until the first hibernates).
inline constexpr int kDefaultMaxBoxes = 3;
inline constexpr int kDefaultMaxRunning = 1;

// The lifecycle states of a box. The numbers are those of cocoonbox.control.v1.State
// (proto/cocoonbox/control/v1/boxes.proto) and are stored as is; the store does not depend
// on protobuf, so the api converts with a static_cast.
enum class BoxState : int {
  kAbsent = 0,       // no machine: never created, or deleted
  kStarting = 1,     // being created or woken
  kRunning = 2,      // the agent answers
  kHibernating = 3,  // being frozen
  kHibernated = 4,   // frozen
  kFailed = 5,       // the last operation failed; see Box::detail
};

// The phases of an operation; the numbers are those of cocoonbox.control.v1.Phase.
enum class Phase : int {
  kPending = 0,
  kBackingUp = 1,
  kCreating = 2,
  kStarting = 3,
  kFreezing = 4,
  kThawing = 5,
  kCleaningUp = 6,
  kDone = 7,
  kFailed = 8,
};

// True for the states that count against a user's max_running: kStarting, kRunning and
// kHibernating (a box being frozen still holds its memory until it is kHibernated).
bool counts_as_running(BoxState state);
// "absent", "starting", "running", "hibernating", "hibernated", "failed".
std::string_view box_state_name(BoxState state);
// "pending", "backing up", "creating", "starting", "freezing", "thawing", "cleaning up",
// "done", "failed".
std::string_view phase_name(Phase phase);

struct User {
  int64_t id = 0;
  std::string name;
  int max_boxes = kDefaultMaxBoxes;
  int max_running = kDefaultMaxRunning;
  int64_t created_at_ms = 0;
};

// A token as listed: never its secret (the store does not have it).
struct TokenInfo {
  std::string id;  // "tk_..."
  int64_t user_id = 0;
  std::string label;  // "" when none was given
  int64_t created_at_ms = 0;
  std::optional<int64_t> revoked_at_ms;
};

// What issue_token() returns: the token's record and its plaintext, which exists only here.
// The caller hands |plaintext| to the user once and then drops it; it is not recoverable.
struct IssuedToken {
  TokenInfo info;
  std::string plaintext;  // "cbt_" + 43 base64url characters
};

// One active (not revoked, user not removed) token, for TokenIndex.
struct ActiveToken {
  crypto::Sha256Digest sha256{};
  std::string token_id;
  int64_t user_id = 0;
  std::string user_name;
};

// Every active token as of one change generation (see tokens_if_changed()).
struct TokenSnapshot {
  int64_t generation = 0;
  std::vector<ActiveToken> tokens;
};

struct Box {
  std::string id;  // "bx_..."
  int64_t user_id = 0;
  std::string name;
  BoxState state = BoxState::kAbsent;
  std::string image;
  std::string backend;
  std::string detail;
  std::string wake_id;      // "" until the first wake
  std::string machine_key;  // the backend's key for the machine; "" until it has one
  int64_t created_at_ms = 0;
  int64_t state_changed_at_ms = 0;
  std::optional<int64_t> deleted_at_ms;
};

struct Operation {
  std::string id;  // "op_..."
  std::string box_id;
  int64_t user_id = 0;
  std::string kind;  // "ensure", "hibernate", "recreate", "delete", ...
  Phase phase = Phase::kPending;
  std::string detail;
  int64_t created_at_ms = 0;
  std::optional<int64_t> finished_at_ms;
  std::string params;  // how it was asked, e.g. "preserve_data" for a recreate; "" for none
};

struct OperationEvent {
  std::string operation_id;
  int64_t seq = 0;  // 1, 2, 3, ... per operation
  Phase phase = Phase::kPending;
  std::string detail;
  int64_t at_ms = 0;
};

// A user's model gateway (README.md §Model gateways): where the model door forwards the
// user's boxes' model calls, and the key it adds. |key| is the plaintext, which exists only
// in this value: the caller wipes it (crypto::wipe) when done.
struct UserGateway {
  int64_t user_id = 0;
  std::string url;
  std::string key;
  int64_t updated_at_ms = 0;
};

// The master key that seals secret columns (roles/api/keys.h). The view is not kept.
using MasterKeyView = std::span<const uint8_t, 32>;

// The additional data a user's sealed gateway key is bound to: table, row, column, and the
// URL, so a key copied to another user's row, or a URL changed behind the api's back (which
// would send the key elsewhere), no longer opens.
std::string gateway_key_additional_data(int64_t user_id, std::string_view url);

// The additional data a user's sealed state key is bound to: table, row and column.
std::string state_key_additional_data(int64_t user_id);

// One call through the model door, as the door saw it.
struct ModelCall {
  int64_t user_id = 0;
  std::string box_id;
  std::string wire;     // "openai", "anthropic"
  std::string model;    // as the request named it; "" when it named none
  bool failed = false;  // not a 2xx, or the response did not complete
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cache_read_tokens = 0;
  int64_t cache_write_tokens = 0;
};

// Usage through the model door summed per user, box, UTC day, wire and model.
struct ModelUsage {
  int64_t user_id = 0;
  std::string user_name;  // "" when the user row is gone
  std::string box_id;
  std::string box_name;  // "" when the box row is gone
  std::string day;       // "YYYY-MM-DD", UTC
  std::string wire;
  std::string model;
  int64_t requests = 0;
  int64_t failed = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cache_read_tokens = 0;
  int64_t cache_write_tokens = 0;
  int64_t last_at_ms = 0;
};

// The offset_key of the event numbered |seq| (cocoonbox.control.v1.OperationEvent): its
// decimal digits. A watcher resumes after the event it names.
std::string offset_key(int64_t seq);

// The seq named by |key|: "" is 0 (before the first event), otherwise decimal digits.
// Errors: kInvalidArgument naming offset_key when |key| is anything else.
Result<int64_t> parse_offset_key(std::string_view key);

// Name rules, exposed so the api can check a request before it queues any work.
// A user name matches [a-z][a-z0-9_-]{0,31}; a box name matches [a-z0-9][a-z0-9-]{0,30}.
// Errors: kInvalidArgument naming the field ("name") and the rule.
Status validate_user_name(std::string_view name);
Status validate_box_name(std::string_view name);

struct StoreOptions {
  // Not owned; must outlive the store. Null means system_clock().
  Clock* clock = nullptr;
  // Not owned; must outlive the store. Null means crypto::system_random(). Store calls it only
  // on its worker thread, one call at a time, so a SeededRandom is fine in tests.
  crypto::Random* random = nullptr;
  db::OpenOptions db;
};

// The path of api.db in |data_dir|.
std::filesystem::path api_db_path(const std::filesystem::path& data_dir);

// The store's operations, run on the calling thread. See the file comment.
//
// Affinity: the thread that opened (or owns) the Database. Movable, not copyable.
class SyncStore {
 public:
  // Creates |data_dir| (mode 0700) and api.db in it (mode 0600, WAL) when missing, opens it
  // and applies pending migrations.
  // Errors: kFailedPrecondition (schema newer than this binary), kPermissionDenied or
  //         kInternal (cannot create the directory or the file), those of Database::open().
  static Result<SyncStore> open(const std::filesystem::path& data_dir,
                                const StoreOptions& options = {});

  // A store over |db|, which is owned elsewhere (for example by a db::Worker) and has the
  // api.db schema. REQUIRES: |db| outlives this object.
  SyncStore(db::Database& db, const StoreOptions& options);

  SyncStore(SyncStore&&) noexcept;
  SyncStore& operator=(SyncStore&&) noexcept;
  SyncStore(const SyncStore&) = delete;
  SyncStore& operator=(const SyncStore&) = delete;
  ~SyncStore();

  // ---- Users ----

  // Adds a user. Errors: kInvalidArgument naming "name", "max_boxes" or "max_running" (a
  // quota is negative); kAlreadyExists if an active user has |name|.
  Result<User> add_user(std::string_view name, int max_boxes = kDefaultMaxBoxes,
                        int max_running = kDefaultMaxRunning);
  // Active users, by name.
  Result<std::vector<User>> list_users();
  // Errors: kNotFound if no active user has |name|.
  Result<User> find_user(std::string_view name);
  // Errors: kNotFound if |id| is unknown or removed.
  Result<User> get_user(int64_t id);
  // Removes the user |name| in one transaction: revokes every token, marks every box deleted
  // and retires the user row (its name becomes free). Returns the ids of the boxes that were
  // live, so the caller can stop their machines; a process that cannot (the admin CLI) leaves
  // that to the api, which finds them through list_all_boxes().
  // Errors: kNotFound if no active user has |name|.
  Result<std::vector<std::string>> remove_user(std::string_view name);

  // ---- Tokens ----

  // Issues a new token for the active user |user_name|: "cbt_" + random_token(32 bytes).
  // Only its SHA-256 is stored. |label| is free text for humans ("" for none).
  // Errors: kNotFound (user); kInvalidArgument naming "label" (over 64 bytes or a control
  //         character).
  Result<IssuedToken> issue_token(std::string_view user_name, std::string_view label = {});
  // Revokes token |id|. Revoking a revoked token succeeds and changes nothing.
  // Errors: kNotFound if there is no token |id|.
  Status revoke_token(std::string_view id);
  // Every token of the active user |user_name|, revoked ones included, oldest first.
  // Errors: kNotFound (user).
  Result<std::vector<TokenInfo>> list_tokens(std::string_view user_name);

  // The current meta.change_generation.
  Result<int64_t> change_generation();
  // Every active token with the generation it belongs to, or nullopt when the generation is
  // still |known_generation| (one cheap read). The generation is read before the tokens, so
  // a write between the two shows up again on the next call rather than being missed.
  Result<std::optional<TokenSnapshot>> tokens_if_changed(std::optional<int64_t> known_generation);

  // ---- Boxes ----

  // Creates box |name| (state kAbsent) for the active user |user_id|.
  // Errors: kInvalidArgument naming "name"; kNotFound (user); kAlreadyExists if the user
  //         has a live box |name|; kResourceExhausted naming max_boxes when the user's live
  //         boxes already fill the quota.
  Result<Box> create_box(int64_t user_id, std::string_view name, std::string_view image,
                         std::string_view backend);
  // The live box of user |user_id| whose id ("bx_...") or name is |id_or_name|.
  // Errors: kNotFound, also when the box belongs to another user or is deleted.
  Result<Box> get_box(int64_t user_id, std::string_view id_or_name);
  // The box with id |box_id|, deleted or not, whoever owns it (for the api's own bookkeeping;
  // never answer a user with it unchecked). Errors: kNotFound.
  Result<Box> get_box_by_id(std::string_view box_id);
  // The user's live boxes, oldest first.
  Result<std::vector<Box>> list_boxes(int64_t user_id);
  // Every box whose machine may exist, for reconciliation at start: all live boxes, and the
  // deleted ones whose state is not yet kAbsent (their machine still has to be released).
  Result<std::vector<Box>> list_all_boxes();
  // Sets the state and detail of box |box_id| (deleted or not); the wake id too when given.
  // state_changed_at_ms moves only when the state changes. Moving a live box that does not
  // count as running into kStarting checks the owner's max_running in the same transaction.
  // Errors: kNotFound; kInvalidArgument naming "state" for a value outside BoxState;
  //         kResourceExhausted naming max_running.
  Result<Box> set_box_state(std::string_view box_id, BoxState state, std::string_view detail,
                            std::optional<std::string_view> wake_id = std::nullopt);
  // Records the backend's key for the box's machine ("" clears it). Errors: kNotFound.
  Status set_machine_key(std::string_view box_id, std::string_view machine_key);
  // Marks box |box_id| deleted, which frees its name. Deleting a deleted box succeeds and
  // changes nothing. Errors: kNotFound.
  Status mark_deleted(std::string_view box_id);
  // How many live boxes of |user_id| count as running (counts_as_running()).
  Result<int64_t> count_running(int64_t user_id);

  // ---- Operations ----

  // Starts an operation of |kind| (non-empty, [a-z_]) on box |box_id| in phase kPending; the
  // operation belongs to the box's owner. |params| is kept as given (how the operation was
  // asked, so a resumed one does the same). Errors: kNotFound (box); kInvalidArgument ("kind").
  Result<Operation> begin_operation(std::string_view box_id, std::string_view kind,
                                    std::string_view params = {});
  // Records that operation |operation_id| reached |phase| (not kDone or kFailed: see
  // finish_operation()) and returns the event's seq, 1 for the first event.
  // Errors: kNotFound; kFailedPrecondition if the operation has finished; kInvalidArgument
  //         naming "phase".
  Result<int64_t> append_event(std::string_view operation_id, Phase phase, std::string_view detail);
  // Finishes the operation in |phase| (kDone or kFailed): records it as the last event and
  // stamps finished_at_ms, in one transaction. Returns the last event's seq.
  // Errors: kNotFound; kFailedPrecondition if already finished; kInvalidArgument ("phase").
  Result<int64_t> finish_operation(std::string_view operation_id, Phase phase,
                                   std::string_view detail);
  // Errors: kNotFound.
  Result<Operation> get_operation(std::string_view operation_id);
  // The events of |operation_id| with seq > |after_seq|, in order (after_seq 0: all).
  // Errors: kNotFound if there is no such operation.
  Result<std::vector<OperationEvent>> events_after(std::string_view operation_id,
                                                   int64_t after_seq);
  // Operations not finished, oldest first: after a crash the api resumes or fails each.
  Result<std::vector<Operation>> list_unfinished_operations();

  // ---- Model gateways and usage (README.md §Model gateways) ----

  // Sets the model gateway of the active user |user_name|: |url| as given, |key| sealed under
  // |master| (gateway_key_additional_data()). Replaces an earlier one.
  // Errors: kNotFound (user); kInvalidArgument naming "url" (empty, over 2048 bytes, or a
  //         control character) or "key" (empty, over 4096 bytes, or a control character or
  //         space: it travels in a header field).
  Status set_user_gateway(std::string_view user_name, std::string_view url, std::string_view key,
                          MasterKeyView master);
  // Removes the gateway of the active user |user_name|; removing none succeeds.
  // Errors: kNotFound (user).
  Status clear_user_gateway(std::string_view user_name);
  // The gateway of user |user_id| with its key opened, or nullopt when the user has none.
  // Errors: kDataLoss when the sealed key does not open (another master key, a row or URL
  //         changed outside the api).
  Result<std::optional<UserGateway>> user_gateway(int64_t user_id, MasterKeyView master);

  // ---- State keys (README.md §State keys) ----

  // The state key (32 bytes) of user |user_id|, created at random and stored sealed under
  // |master| (state_key_additional_data()) on first use. The caller wipes it when done.
  // Errors: kNotFound for an unknown user; kDataLoss when the sealed key does not open.
  Result<std::string> user_state_key(int64_t user_id, MasterKeyView master);
  // Adds |call| to the counts of its user, box, UTC day (from the clock), wire and model.
  // Errors: kInvalidArgument naming "box_id" or "wire" when empty.
  Status record_model_call(const ModelCall& call);
  // Usage rows, oldest day first, then user, box, wire and model. |user_name| "" means every
  // user (else only that active user's rows); |since_day| "" means every day, else rows of
  // that day ("YYYY-MM-DD") and later.
  // Errors: kNotFound (user); kInvalidArgument naming "since" (not YYYY-MM-DD).
  Result<std::vector<ModelUsage>> model_usage(std::string_view user_name = {},
                                              std::string_view since_day = {});

 private:
  struct Owned;

  std::unique_ptr<Owned> owned_;  // the Database when open() made it; null when borrowed
  db::Database* db_;              // never null
  Clock* clock_;
  crypto::Random* random_;
};

// The api server's store: SyncStore's operations on a db::Worker, awaited from the loop.
// Each method's contract is that of the SyncStore method with the same name. Arguments are
// taken by value, so the coroutine owns them across its suspension.
//
// Affinity: methods may be called from any executor; each resumes on its caller's executor.
// Calls run one at a time in call order. Neither copyable nor movable.
// REQUIRES: the Store outlives every call in flight (the worker's functions use it).
class Store {
 public:
  // Opens (creating when missing) |data_dir|/api.db on a new worker thread, as
  // SyncStore::open() does. Blocks while it opens and migrates: call it at startup.
  // Errors: those of SyncStore::open().
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& data_dir,
                                             const StoreOptions& options = {});

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  // Runs the calls already queued, then stops the worker (db::Worker::~Worker).
  ~Store();

  asio::awaitable<Result<User>> add_user(std::string name, int max_boxes = kDefaultMaxBoxes,
                                         int max_running = kDefaultMaxRunning);
  asio::awaitable<Result<std::vector<User>>> list_users();
  asio::awaitable<Result<User>> find_user(std::string name);
  asio::awaitable<Result<User>> get_user(int64_t id);
  asio::awaitable<Result<std::vector<std::string>>> remove_user(std::string name);

  asio::awaitable<Result<IssuedToken>> issue_token(std::string user_name, std::string label = {});
  asio::awaitable<Status> revoke_token(std::string id);
  asio::awaitable<Result<std::vector<TokenInfo>>> list_tokens(std::string user_name);
  asio::awaitable<Result<int64_t>> change_generation();
  asio::awaitable<Result<std::optional<TokenSnapshot>>> tokens_if_changed(
      std::optional<int64_t> known_generation);

  asio::awaitable<Result<Box>> create_box(int64_t user_id, std::string name, std::string image,
                                          std::string backend);
  asio::awaitable<Result<Box>> get_box(int64_t user_id, std::string id_or_name);
  asio::awaitable<Result<Box>> get_box_by_id(std::string box_id);
  asio::awaitable<Result<std::vector<Box>>> list_boxes(int64_t user_id);
  asio::awaitable<Result<std::vector<Box>>> list_all_boxes();
  asio::awaitable<Result<Box>> set_box_state(std::string box_id, BoxState state, std::string detail,
                                             std::optional<std::string> wake_id = std::nullopt);
  asio::awaitable<Status> set_machine_key(std::string box_id, std::string machine_key);
  asio::awaitable<Status> mark_deleted(std::string box_id);
  asio::awaitable<Result<int64_t>> count_running(int64_t user_id);

  asio::awaitable<Result<Operation>> begin_operation(std::string box_id, std::string kind,
                                                     std::string params = {});
  asio::awaitable<Result<int64_t>> append_event(std::string operation_id, Phase phase,
                                                std::string detail);
  asio::awaitable<Result<int64_t>> finish_operation(std::string operation_id, Phase phase,
                                                    std::string detail);
  asio::awaitable<Result<Operation>> get_operation(std::string operation_id);
  asio::awaitable<Result<std::vector<OperationEvent>>> events_after(std::string operation_id,
                                                                    int64_t after_seq);
  asio::awaitable<Result<std::vector<Operation>>> list_unfinished_operations();

  // REQUIRES: |master| outlives the call.
  asio::awaitable<Result<std::optional<UserGateway>>> user_gateway(int64_t user_id,
                                                                   MasterKeyView master);
  // REQUIRES: |master| outlives the call.
  asio::awaitable<Result<std::string>> user_state_key(int64_t user_id, MasterKeyView master);
  asio::awaitable<Status> record_model_call(ModelCall call);
  asio::awaitable<Result<std::vector<ModelUsage>>> model_usage(std::string user_name = {},
                                                               std::string since_day = {});

 private:
  Store(std::unique_ptr<db::Worker> worker, const StoreOptions& options);

  std::unique_ptr<db::Worker> worker_;
  StoreOptions options_;  // clock and random resolved (never null)
};

}  // namespace cb::api
