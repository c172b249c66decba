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

#include <string>
#include <string_view>

namespace cb::agent {

struct StateConfig {
  std::string home = "/home/user";       // saved as "home/user"; Restored/ lives here
  std::string workspace = "/workspace";  // saved as "workspace"
  // The api's door socket in this box (roles/api/README.md §State): where relative chunk
  // URLs ("/cocoonbox.state/...") are sent.
  std::string door_socket = "/run/cocoonbox/model.sock";
};

// The defaults for a box: $HOME; $COCOONBOX_WORKSPACE (set by the local backend) else
// |workspace|; and $COCOONBOX_RUN_DIR/model.sock when that is set, else
// /run/cocoonbox/model.sock.
StateConfig default_state_config(std::string workspace);

// Errors: kInvalidArgument naming "target" unless |target| is one folder name: 1..255 bytes,
//   no '/', no NUL, not "." or "..".
Status check_restore_target(std::string_view target);

class StateService final : public cocoonbox::agent::v1::State::Service {
 public:
  explicit StateService(StateConfig config) : config_(std::move(config)) {}

  // Errors: kInvalidArgument (a bad key, location or exclude pattern); the scan's errors; the
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
