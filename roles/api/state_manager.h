#pragma once
// StateManager: the api's side of the state layer (README.md §State; seed §11, §22.5, §25).
//
//   save        the box's lock, the user's state lock shared; wakes the box; reads the head;
//               calls the agent's State.Save with the user's state key, a door URL for the
//               head's manifest and a ticket; answers the agent's chunk questions on the box's
//               door (which chunks the store lacks, signed PUT URLs for exactly those); takes
//               the manifest the agent streams back, checks that every chunk it asked to
//               upload is stored, and commits (manifest, record, timeline, head last).
//   snapshots   the box's timeline, newest first (no wake).
//   browse      one directory of a snapshot, read by the api itself (no wake).
//   restore     checks the paths and target (§25.4), that the snapshot is in the timeline and
//               that each path selects something; computes the chunks of the scope; calls
//               the agent's State.Restore; the door hands out signed GET URLs for exactly
//               those chunks.
//   door        serve_door() answers /cocoonbox.state/ on each box's door socket (the
//               model door's socket, model_door.h): the chunk URL questions of the call in
//               progress (x-cocoonbox-state-ticket) and the signed object URLs themselves.
//   autosave    every |autosave| (0 = never) each RUNNING box is saved if it changed; so is a
//               box about to hibernate (save_before_hibernate()).
//
// The store is the filesystem store at <data-dir>/state by default, or any store of
// open_store_url() (--state-store). With an S3 store the agent gets S3 presigned URLs
// (object_url()) and chunk bytes go between the agent and S3 directly; with the filesystem
// store they pass through the api only as the door's object routes. Never through gRPC.
// Blocking store work runs on threads of its own (net::run_blocking).
//
// Affinity: the api's executor. The store, box manager and master key must outlive it.

#include "base/clock.h"
#include "base/result.h"
#include "crypto/keys.h"
#include "http/server.h"
#include "net/asio.h"
#include "net/blocking.h"
#include "roles/api/boxes.h"
#include "roles/api/state_locks.h"
#include "roles/api/state_rules.h"
#include "roles/api/store/store.h"
#include "state/snapshot.h"
#include "state/store.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace cb::state {
class S3Store;
}

namespace cb::api {

struct StateManagerOptions {
  // How long a signed chunk URL is valid.
  std::chrono::seconds url_ttl{std::chrono::minutes(15)};
  // Each RUNNING box is saved this often (0 = never).
  std::chrono::milliseconds autosave{std::chrono::hours(6)};
  // Manifest paths left out of every save.
  std::vector<std::string> exclude = {"home/user/.cache"};
};

// Counters of a save or restore in progress (the agent's TransferProgress).
struct TransferCounters {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t chunks = 0;
  uint64_t chunk_bytes = 0;
};
using ProgressSink = std::function<asio::awaitable<void>(TransferCounters)>;

struct SaveOutcome {
  std::string box_id;
  state::Record record;
  uint64_t uploaded_chunks = 0;  // chunks this save uploaded (0 for data already stored)
  uint64_t files_reused = 0;
  std::vector<std::string> notes;
  bool unchanged = false;  // only_if_changed and nothing changed: |record| is the head's
};

struct BrowseEntry {
  std::string path;  // a box path: "/workspace/t/a.txt"
  int kind = 0;      // state::EntryKind
  uint64_t size = 0;
  int64_t mtime_ms = 0;
  uint32_t mode = 0;
  std::string target;  // symlinks
};

struct BrowseOutcome {
  std::vector<BrowseEntry> entries;
  bool truncated = false;  // more than kMaxBrowseEntries
};
inline constexpr size_t kMaxBrowseEntries = 5000;

struct RestoreOutcome {
  std::string box_id;
  std::string path;  // in the box: /home/user/Restored/<target>
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t symlinks = 0;
  uint64_t bytes = 0;
  uint64_t chunks = 0;
};

// The store segment of user |user_id|: "u<id>".
std::string state_user(int64_t user_id);

class StateManager {
 public:
  StateManager(net::Executor executor, Store& db, BoxManager& boxes,
               const crypto::SymmetricKey& master, std::unique_ptr<state::Store> store,
               StateManagerOptions options);
  ~StateManager();
  StateManager(const StateManager&) = delete;
  StateManager& operator=(const StateManager&) = delete;

  // Errors: kNotFound (box); kUnavailable (cannot wake or reach the agent); the agent's
  //   errors; kDataLoss when the head's objects do not open or an announced chunk is missing;
  //   store errors.
  // With |only_if_changed| (autosave), nothing is committed when the tree equals the head's
  // (SaveOutcome::unchanged). With |quiesced| the agent first waits (up to 30 s) for running
  // turns and saves a consistent copy of agent.db (roles/agent/README.md §State); the
  // snapshot is recorded as quiesced.
  asio::awaitable<Result<SaveOutcome>> save(int64_t user_id, std::string box_ref,
                                            ProgressSink progress, bool only_if_changed = false,
                                            bool quiesced = false);
  // Saves |box| over the agent connection |conn| before its hibernation, if anything changed
  // since the head; skipped while a save or restore of the box runs, and given up after 10
  // minutes (the box then hibernates anyway). Errors are logged.
  asio::awaitable<void> save_before_hibernate(Box box, std::shared_ptr<http::H2Connection> conn);
  // Puts the head snapshot back into a box whose files were lost with its machine (seed
  // §14.9 step 9), over the new machine's agent connection |conn|. Returns the detail to
  // report: the snapshot and the loss window, or why nothing was restored.
  asio::awaitable<std::string> restore_lost(Box box, std::shared_ptr<http::H2Connection> conn);
  // The box's kept snapshots, newest first. |box_id| receives the box's id.
  asio::awaitable<Result<std::vector<state::TimelineEntry>>> snapshots(int64_t user_id,
                                                                       std::string box_ref,
                                                                       std::string* box_id);
  // Errors: kInvalidArgument naming "dir" or "snapshot_id"; kNotFound (snapshot not in the
  //   timeline, dir not in it); kFailedPrecondition (dir is not a directory).
  asio::awaitable<Result<BrowseOutcome>> browse(int64_t user_id, std::string box_ref,
                                                std::string snapshot_id, std::string dir);
  // Errors: kInvalidArgument naming "paths[i]", "target" or "snapshot_id"; kNotFound (snapshot
  //   not in the timeline, or a path selecting nothing); kDataLoss naming the file for a
  //   missing or tampered chunk; the agent's errors.
  asio::awaitable<Result<RestoreOutcome>> restore(int64_t user_id, std::string box_ref,
                                                  std::string snapshot_id,
                                                  std::vector<std::string> paths,
                                                  std::string target, ProgressSink progress);

  // Answers a request under /cocoonbox.state/ on |box_id|'s door socket.
  asio::awaitable<void> serve_door(http::ServerRequest& req, std::string box_id);

  // Starts the autosave loop (no-op when options.autosave is 0).
  void start_autosave_loop();
  void stop();

  StateLocks& locks() { return locks_; }
  state::Store& store() { return *store_; }

  struct Counters {
    uint64_t saves_done = 0;
    uint64_t saves_failed = 0;
    uint64_t restores_done = 0;
    uint64_t restores_failed = 0;
    uint64_t chunks_uploaded = 0;
    uint64_t chunks_served = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  using ChunkIds = std::unordered_set<state::ChunkId, state::ChunkIdHash>;
  // One save or restore in progress: what its door requests may do.
  struct Ticket {
    std::string box_id;
    std::string user;  // store segment
    bool restore = false;
    // Hashed binary ids: the door looks up every chunk of every batch, and a sorted set of
    // hex strings made that 8 % of the api's CPU in a box's restore.
    ChunkIds allowed;  // restore: the ids it may fetch
    ChunkIds put;      // save: the ids it was told to upload
    int64_t expires_unix = 0;
    uint64_t relayed_bytes = 0;  // object bytes the door's routes carried (filesystem store)
  };
  // Erases its ticket when it goes, unless the manager went first. Not copyable or movable:
  // it lives in the call's frame for the whole transfer.
  class TicketGuard {
   public:
    TicketGuard(StateManager* self, std::string id)
        : self_(self), alive_(self->alive_), id_(std::move(id)) {}
    TicketGuard(const TicketGuard&) = delete;
    TicketGuard& operator=(const TicketGuard&) = delete;
    ~TicketGuard();
    const std::string& id() const { return id_; }

   private:
    StateManager* self_;
    std::shared_ptr<bool> alive_;
    std::string id_;
  };
  // A ticket for one save (restore false) or restore of |box_id| (which may fetch exactly
  // |allowed|), valid for the longest transfer (kTransferTimeout).
  TicketGuard issue_ticket(const std::string& box_id, const std::string& user, bool restore,
                           ChunkIds allowed);
  // A URL for |method| ("GET" or "PUT") of the object |key|, valid options_.url_ttl: an S3
  // presigned URL with an S3 store, else a door URL signed by signer_.
  // Errors: kInvalidArgument for a bad key.
  Result<std::string> object_url(std::string_view method, const std::string& key) const;
  // Counts |bytes| of an object the door carried for |box_id| on its calls in progress.
  void note_relayed(const std::string& box_id, uint64_t bytes);
  // The save itself, with the box's and user's locks held and the agent's connection; the
  // agent's call ends with DEADLINE_EXCEEDED at |deadline|.
  asio::awaitable<Result<SaveOutcome>> save_over(Box box, std::shared_ptr<http::H2Connection> conn,
                                                 ProgressSink progress, bool only_if_changed,
                                                 bool quiesced, net::Deadline deadline);
  asio::awaitable<Result<std::string>> state_key(int64_t user_id);
  asio::awaitable<void> door_urls(http::ServerRequest& req, std::string box_id);
  asio::awaitable<void> door_object(http::ServerRequest& req, std::string box_id);
  // The body of a chunk batch request (at most |limit| bytes) whose ticket is a live
  // restore's (|restore|) or save's of |box_id|: checked before the body is read and again
  // after. nullopt once it answered the error, or the manager went away.
  asio::awaitable<std::optional<std::string>> door_batch_body(http::ServerRequest& req,
                                                              const std::string& box_id,
                                                              bool restore, size_t limit);
  asio::awaitable<void> door_batch_get(http::ServerRequest& req, std::string box_id);
  asio::awaitable<void> door_batch_put(http::ServerRequest& req, std::string box_id);
  // The ticket |req| carries if it is one of |box_id|'s and not expired, else nullptr.
  // Valid until the next co_await.
  Ticket* door_ticket(const http::ServerRequest& req, const std::string& box_id);
  asio::awaitable<void> autosave_loop();

  // As many as a box's agent has requests in flight: 4 fetch threads on a restore, 3 upload
  // threads and one overlapped batch on a save.
  static constexpr size_t kDoorThreads = 4;

  net::Executor executor_;
  Store& db_;
  BoxManager& boxes_;
  const crypto::SymmetricKey& master_;
  std::unique_ptr<state::Store> store_;
  const state::S3Store* s3_ = nullptr;  // store_ when it is an S3 store
  std::string store_ca_pem_;            // its ca_file's PEM, for the agent (StateAccess)
  bool store_skip_verify_ = false;      // its URL says verify=0 (StateAccess)
  StateManagerOptions options_;
  ChunkUrlSigner signer_;
  StateLocks locks_;
  std::map<std::string, Ticket> tickets_;
  Counters counters_;
  bool stopping_ = false;
  // The door's chunk reads and writes (one per request) and its batch stats; joined by the
  // destructor, before the store goes.
  asio::thread_pool door_pool_{kDoorThreads};
  std::shared_ptr<bool> alive_;
};

}  // namespace cb::api
