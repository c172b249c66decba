#pragma once
// cocoonbox.control.v1.Boxes over BoxManager: the gRPC surface of the control plane. Every
// call authenticates its bearer token through the TokenIndex and acts on that user's boxes
// only; another user's box is NOT_FOUND, exactly like a box that does not exist.
//
// Affinity: the api's executor.

#include "cocoonbox/control/v1/boxes.cbgrpc.h"
#include "roles/api/boxes.h"
#include "roles/api/state_manager.h"
#include "roles/api/store/token_index.h"

namespace cb::api {

class BoxesService final : public ::cocoonbox::control::v1::Boxes::Service {
 public:
  // |state| may be null (no state layer): the state methods are then UNAVAILABLE.
  BoxesService(BoxManager& manager, TokenIndex& tokens, Store& store, StateManager* state = nullptr)
      : manager_(manager), tokens_(tokens), store_(store), state_(state) {}

  using Pb = ::cocoonbox::control::v1::Box;
  asio::awaitable<Result<Pb>> Ensure(grpc::CallContext& ctx,
                                     ::cocoonbox::control::v1::EnsureRequest&& req) override;
  asio::awaitable<Result<Pb>> Get(grpc::CallContext& ctx,
                                  ::cocoonbox::control::v1::BoxRef&& req) override;
  asio::awaitable<Result<::cocoonbox::control::v1::ListBoxesResponse>> List(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::ListBoxesRequest&& req) override;
  asio::awaitable<Status> Watch(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::WatchBoxesRequest&& req,
      grpc::ServerWriter<::cocoonbox::control::v1::ListBoxesResponse>& writer) override;
  asio::awaitable<Result<::cocoonbox::control::v1::Operation>> Hibernate(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::BoxRef&& req) override;
  asio::awaitable<Result<::cocoonbox::control::v1::Operation>> Recreate(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::RecreateRequest&& req) override;
  asio::awaitable<Result<::cocoonbox::control::v1::Operation>> Delete(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::BoxRef&& req) override;
  asio::awaitable<Status> WatchOperation(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::WatchOperationRequest&& req,
      grpc::ServerWriter<::cocoonbox::control::v1::OperationEvent>& writer) override;

  // State (StateManager): saves, the timeline, browse and restore.
  asio::awaitable<Status> SaveState(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::SaveStateRequest&& req,
      grpc::ServerWriter<::cocoonbox::control::v1::SaveStateEvent>& writer) override;
  asio::awaitable<Result<::cocoonbox::control::v1::ListSnapshotsResponse>> ListSnapshots(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::BoxRef&& req) override;
  asio::awaitable<Result<::cocoonbox::control::v1::BrowseSnapshotResponse>> BrowseSnapshot(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::BrowseSnapshotRequest&& req) override;
  asio::awaitable<Status> RestorePaths(
      grpc::CallContext& ctx, ::cocoonbox::control::v1::RestorePathsRequest&& req,
      grpc::ServerWriter<::cocoonbox::control::v1::RestorePathsEvent>& writer) override;

 private:
  Result<Principal> principal(const grpc::CallContext& ctx) const;

  BoxManager& manager_;
  TokenIndex& tokens_;
  Store& store_;
  StateManager* state_;
};

// The bearer token from an "authorization" value ("Bearer <token>"), or kUnauthenticated.
Result<std::string_view> bearer_token(const std::string* authorization);

}  // namespace cb::api
