#pragma once
// cocoonbox.agent.v1.State on the agent (README.md §State; seed §11, §25.4): Save scans the
// box's roots against the parent manifest and uploads the chunks the store lacks; Restore
// writes a scope of a snapshot into ~/Restored/<target>. Only the api calls it (the requests
// carry the user's state key); chunk bytes go between the agent and the store through signed
// URLs the api's door hands out for exactly the chunks a call needs, never through gRPC.
//
// Each call runs its blocking work (scan, hashing, sealing, HTTP to the door) on a thread of
// its own with a private io_context; the handler sends TransferProgress about every 250 ms
// and the result at the end. A call whose client goes away stops its job at the next chunk.
//
// The logic is in plain functions (restore_target_name(), StateJob's run_save/run_restore);
// the service only adapts (house style H14).
//
// Affinity: the agent's io_context.

#include "base/result.h"
#include "cocoonbox/agent/v1/state.cbgrpc.h"
#include "net/asio.h"

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace cb::agent {

struct StateConfig {
  std::string home = "/home/user";       // saved as "home/user"; Restored/ lives here
  std::string workspace = "/workspace";  // saved as "workspace"
  // The api's door socket in this box (roles/api/README.md §State): where relative chunk
  // URLs ("/cocoonbox.state/...") are sent.
  std::string door_socket = "/run/cocoonbox/model.sock";
  // Quiesced saves (README.md §State): the live agent.db, and the folder its consistent copy
  // is kept in, saved as the root "agent" (agent/agent.db) by every save once it exists. A
  // whole restore brings the copy back and, into an agent.db that holds no agent yet, its
  // content. Empty: no copy.
  std::string agent_db;
  std::string agent_copy_dir;
  // Waits until no agent turn runs, false at the deadline (AgentsService::wait_for_turns);
  // unset: nothing to wait for.
  std::function<asio::awaitable<bool>(net::Deadline)> wait_for_turns;
  std::chrono::milliseconds quiesce_timeout{std::chrono::seconds(30)};
};

// The defaults for a box: $HOME; $COCOONBOX_WORKSPACE (set by the local backend) else
// |workspace|; and $COCOONBOX_RUN_DIR/model.sock when that is set, else
// /run/cocoonbox/model.sock.
StateConfig default_state_config(std::string workspace);

// An absolute chunk or manifest URL (an S3 store's presigned URL): where to connect and the
// request target to send, which is the URL's path and query exactly as given (presigned
// query strings are percent-encoded by the signer and must not be touched).
struct ObjectUrl {
  bool tls = false;
  std::string host;    // without brackets
  uint16_t port = 0;   // the scheme's default when the URL has none
  std::string target;  // "/bucket/key?X-Amz-..." ("/" when the URL has no path)
};
// Errors: kInvalidArgument unless |url| is http:// or https:// with a host and a valid port.
Result<ObjectUrl> parse_object_url(std::string_view url);

// A consistent copy of the database |db| (SQLite's online backup API) as |dir|/agent.db,
// replaced atomically (a temporary file renamed), with the mtime of |db| or its WAL, whichever
// is newer: an unchanged database gives an unchanged file, so a save before hibernating finds
// nothing new. Creates |dir| (0700). Errors: db::backup_database()'s; kInternal (file system).
Status copy_agent_db(const std::string& db, const std::string& dir);

// Errors: kInvalidArgument naming "target" unless |target| is one folder name: 1..255 bytes,
//   no '/', no NUL, not "." or "..".
Status check_restore_target(std::string_view target);

class StateService final : public cocoonbox::agent::v1::State::Service {
 public:
  explicit StateService(StateConfig config) : config_(std::move(config)) {}

  // A quiesced request first waits for running turns (up to quiesce_timeout), then copies
  // agent.db (copy_agent_db()) before the scan; SaveDone.quiesced says it did.
  // Errors: kInvalidArgument (a bad key, location or exclude pattern); kFailedPrecondition (a
  //   quiesced save while turns still run after quiesce_timeout); the scan's errors; the
  //   door's answers (kPermissionDenied for a refused ticket, kUnavailable when unreachable);
  //   kCancelled when the caller went away.
  asio::awaitable<Status> Save(
      grpc::CallContext& ctx, cocoonbox::agent::v1::SaveRequest&& req,
      grpc::ServerWriter<cocoonbox::agent::v1::SaveResponse>& writer) override;

  // Errors: kInvalidArgument naming the field (paths, target); kNotFound if the scope selects
  //   nothing; kDataLoss "file <path>: chunk <id>: ..." for a missing or tampered chunk (and
  //   nothing is left in ~/Restored); the door's answers.
  asio::awaitable<Status> Restore(
      grpc::CallContext& ctx, cocoonbox::agent::v1::RestoreRequest&& req,
      grpc::ServerWriter<cocoonbox::agent::v1::RestoreResponse>& writer) override;

 private:
  StateConfig config_;
};

}  // namespace cb::agent
