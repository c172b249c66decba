#pragma once
// BoxManager runs every box's lifecycle (seed §14.3) on a machines backend and journals it in
// the store: Ensure creates or wakes, Hibernate freezes, Recreate replaces the machine (keeping
// /workspace and /home/user when asked), Delete releases it. Each change of a box's state
// bumps generation() and notifies changed(), which Boxes.Watch follows.
//
// Identity (seed §12.1 A): every start and every wake delivers a new identity file with a fresh
// random wake_id before the box counts as RUNNING, and RUNNING means the agent answered Hello
// for that wake_id with a credential signed by the edge key.
//
// One operation runs per box at a time; a second request for a busy box waits for it.
// Operations are journaled (phases with offset keys); recover() at start resumes unfinished
// ones (or ends them FAILED with a reason) and reconciles box states with what really runs.
//
// Affinity: the api's executor. The store, backend and key must outlive the manager.

#include "base/result.h"
#include "http/h2_connection.h"
#include "net/asio.h"
#include "net/signal.h"
#include "roles/api/keys.h"
#include "roles/api/machines/machines.h"
#include "roles/api/store/store.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace cb::api {

struct BoxManagerOptions {
  std::filesystem::path data_dir;       // boxes live in <data_dir>/boxes/<id>
  std::vector<std::string> agent_argv;  // how the box's agent is started
  std::string image = "local";
  std::chrono::milliseconds ready_timeout{20000};
  // A RUNNING box with no attached client for this long hibernates (0 = never).
  std::chrono::milliseconds idle_hibernate{std::chrono::minutes(30)};
  // Called at every boot (start or wake) before the identity is delivered, with the box and
  // its box_dir, whose run dir exists by then: the api makes sure the box's model door is
  // served there (model_door.h), so it is up before the agent runs.
  std::function<void(const Box&, const std::filesystem::path& box_dir)> before_boot;
  // Called by a hibernate of a RUNNING box before the machine is frozen, with the agent's live
  // connection: the api saves the box's files here if they changed (state_manager.h).
  std::function<asio::awaitable<void>(const Box&, std::shared_ptr<http::H2Connection>)>
      before_hibernate;
  // Called by an Ensure (or a Recreate keeping data) that found the box's files gone with its
  // machine (seed §14.9 step 9), once the new machine runs: the api restores the last save and
  // returns what to report (the loss window), "" when there was nothing to restore.
  std::function<asio::awaitable<std::string>(const Box&, std::shared_ptr<http::H2Connection>)>
      restore_lost_data;
};

struct BoxView {
  Box box;
  int attached_clients = 0;
  std::string operation_id;  // the operation running on the box now, "" when none
  bool isolated = true;
  std::string isolation_note;
};

class BoxManager {
 public:
  BoxManager(net::Executor executor, Store& store, machines::Backend& backend, const EdgeKey& key,
             BoxManagerOptions options);
  ~BoxManager();
  BoxManager(const BoxManager&) = delete;
  BoxManager& operator=(const BoxManager&) = delete;

  // Creates |name| (default "main") when absent, wakes it when hibernated, restarts it when
  // its machine is gone. With |wait| returns once RUNNING or FAILED, else at once (STARTING).
  // |operation_id| (optional) receives the operation's id ("" when nothing had to be done).
  // Errors: kInvalidArgument (name), kResourceExhausted (quota), kNotFound (user).
  asio::awaitable<Result<BoxView>> ensure(int64_t user_id, std::string name, bool wait,
                                          std::string* operation_id = nullptr);
  // |ref| is a box id or name ("" = "main"). Another user's box is kNotFound.
  asio::awaitable<Result<BoxView>> get(int64_t user_id, std::string ref);
  asio::awaitable<Result<std::vector<BoxView>>> list(int64_t user_id);
  asio::awaitable<Result<Operation>> hibernate(int64_t user_id, std::string ref);
  asio::awaitable<Result<Operation>> recreate(int64_t user_id, std::string ref, bool preserve_data);
  asio::awaitable<Result<Operation>> remove(int64_t user_id, std::string ref);
  // Releases every machine of a removed user (its rows are already marked deleted).
  asio::awaitable<void> release_boxes(std::vector<std::string> box_ids);
  // Releases the machines of boxes marked deleted by another process (`cocoonbox api user rm`)
  // and records them ABSENT. The api calls it at start and after every admin change.
  asio::awaitable<void> release_deleted();

  // The edge: the box RUNNING (woken transparently when HIBERNATED) and a live HTTP/2
  // connection to its agent. Errors: kNotFound, kUnavailable (cannot start or dial),
  // kFailedPrecondition (box FAILED).
  asio::awaitable<Result<std::pair<Box, std::shared_ptr<http::H2Connection>>>> connect(
      int64_t user_id, std::string ref);
  // A fresh credential for the box's current wake (exp 10 min).
  std::string credential(const Box& box) const;

  // Presence: edge streams open to a box. A box with an attached client never idles out.
  void attach(const std::string& box_id);
  void detach(const std::string& box_id);
  int attached(const std::string& box_id) const;

  // Follows the journal of |operation_id| after event |after_seq|: |on_event| gets each event
  // as it is recorded, until DONE or FAILED, which is returned. Errors: the store's, or the
  // first error |on_event| returns (kCancelled when the caller goes away).
  using EventSink = std::function<asio::awaitable<Status>(const OperationEvent&)>;
  asio::awaitable<Result<OperationEvent>> follow(std::string operation_id, int64_t after_seq,
                                                 EventSink on_event);

  // The image new and recreated boxes get (Box.latest_image for clients).
  const std::string& image() const { return options_.image; }

  uint64_t generation() const { return generation_; }
  net::Signal& changed() { return changed_; }

  // At start: each box's state is reconciled with the backend (re-adopting machines that kept
  // running). Unfinished operations: the newest ensure, hibernate or recreate of a box is
  // resumed on the same operation (a "resuming" event, then its remaining steps; watchers
  // continue by offset_key); a delete is completed; any other ends FAILED with a reason.
  asio::awaitable<void> recover();
  // Starts the idle-hibernation loop (no-op when idle_hibernate is 0).
  void start_idle_loop();
  void stop();

  // Counters for /metrics.
  struct Counters {
    std::map<std::string, uint64_t> operations;  // "<kind>_<done|failed>"
  };
  const Counters& counters() const { return counters_; }
  machines::Backend& backend() { return backend_; }

 private:
  struct Runtime;  // per box: busy flag, cached agent connection, presence
  Runtime& runtime(const std::string& box_id);
  machines::MachineSpec spec_for(const Box& box) const;
  asio::awaitable<Result<BoxView>> view(Box box);
  void notify_changed();

  // The caller's box |ref| ("" = "main"), locked (acquire()) and re-read under the lock.
  // Errors: kNotFound; the lock's when the wait is cancelled.
  asio::awaitable<Result<Box>> lock_box(int64_t user_id, std::string ref);
  // Serializes operations per box.
  asio::awaitable<Status> acquire(const std::string& box_id);
  void release(const std::string& box_id);

  // kResourceExhausted when the user already runs max_running boxes.
  asio::awaitable<Status> check_running_quota(int64_t user_id);
  asio::awaitable<Result<Operation>> start_operation(const Box& box, std::string kind,
                                                     std::string params = {});
  asio::awaitable<void> run_ensure(Box box, Operation op);
  asio::awaitable<void> run_hibernate(Box box, Operation op);
  // True when |box| ran before and its home and workspace are both gone (seed §14.9 step 9).
  bool lost_data(const Box& box) const;
  // Asks options_.restore_lost_data to put the last save back, reporting it on |op|.
  asio::awaitable<void> restore_lost_data(const Box& box, const Operation& op);
  asio::awaitable<void> run_recreate(Box box, Operation op, bool preserve_data);
  asio::awaitable<void> run_remove(Box box, Operation op);
  asio::awaitable<Status> boot(Box& box, const Operation& op, bool fresh);
  asio::awaitable<Status> wait_ready(const Box& box, const std::string& wake_id);
  // Records |state|; kResourceExhausted when the store refuses STARTING over the quota.
  asio::awaitable<Status> set_state(Box& box, BoxState state, std::string detail,
                                    std::string wake_id = {});
  asio::awaitable<void> event(const Operation& op, Phase phase, std::string detail);
  asio::awaitable<void> finish(const Operation& op, Phase phase, std::string detail);
  asio::awaitable<void> wait_operation(const std::string& box_id);
  asio::awaitable<void> idle_loop();
  void drop_connection(const std::string& box_id);

  net::Executor executor_;
  Store& store_;
  machines::Backend& backend_;
  const EdgeKey& key_;
  BoxManagerOptions options_;
  std::map<std::string, std::unique_ptr<Runtime>> runtimes_;
  uint64_t generation_ = 1;
  net::Signal changed_;
  Counters counters_;
  bool stopping_ = false;
  std::shared_ptr<bool> alive_;
};

}  // namespace cb::api
