#include "roles/api/boxes_service.h"

#include <fmt/format.h>

namespace cb::api {

namespace pb = ::cocoonbox::control::v1;

namespace {

pb::Box to_proto(const BoxView& v) {
  pb::Box b;
  b.set_id(v.box.id);
  b.set_name(v.box.name);
  b.set_state(static_cast<pb::State>(static_cast<int>(v.box.state)));
  b.set_image(v.box.image);
  b.set_backend(v.box.backend);
  std::string detail = v.box.detail;
  if (!v.isolated && detail.find(v.isolation_note) == std::string::npos)
    detail = detail.empty() ? v.isolation_note : detail + "; " + v.isolation_note;
  b.set_detail(detail);
  b.set_isolated(v.isolated);
  b.set_created_at_ms(v.box.created_at_ms);
  b.set_state_changed_at_ms(v.box.state_changed_at_ms);
  b.set_attached_clients(v.attached_clients);
  b.set_operation_id(v.operation_id);
  return b;
}

pb::Operation to_proto(const Operation& op) {
  pb::Operation o;
  o.set_id(op.id);
  o.set_box_id(op.box_id);
  o.set_kind(op.kind);
  o.set_phase(static_cast<pb::Phase>(static_cast<int>(op.phase)));
  o.set_detail(op.detail);
  return o;
}

}  // namespace

Result<std::string_view> bearer_token(const std::string* authorization) {
  if (authorization == nullptr) return unauthenticated("missing authorization: Bearer <token>");
  std::string_view v = *authorization;
  constexpr std::string_view kBearer = "Bearer ";
  if (v.size() <= kBearer.size() || v.substr(0, kBearer.size()) != kBearer)
    return unauthenticated("authorization must be \"Bearer <token>\"");
  return v.substr(kBearer.size());
}

Result<Principal> BoxesService::principal(const grpc::CallContext& ctx) const {
  ASSIGN_OR_RETURN(auto token, bearer_token(ctx.metadata("authorization")));
  return tokens_.authenticate(token);
}

asio::awaitable<Result<pb::Box>> BoxesService::Ensure(grpc::CallContext& ctx,
                                                      pb::EnsureRequest&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  std::string op_id;
  CO_ASSIGN_OR_RETURN(auto v,
                      co_await manager_.ensure(who.user_id, req.name(), req.wait(), &op_id));
  if (!op_id.empty()) ctx.add_initial_metadata("x-cocoonbox-operation", op_id);
  co_return to_proto(v);
}

asio::awaitable<Result<pb::Box>> BoxesService::Get(grpc::CallContext& ctx, pb::BoxRef&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  CO_ASSIGN_OR_RETURN(auto v, co_await manager_.get(who.user_id, req.box()));
  co_return to_proto(v);
}

asio::awaitable<Result<pb::ListBoxesResponse>> BoxesService::List(grpc::CallContext& ctx,
                                                                  pb::ListBoxesRequest&&) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  CO_ASSIGN_OR_RETURN(auto views, co_await manager_.list(who.user_id));
  pb::ListBoxesResponse resp;
  for (const auto& v : views) *resp.add_boxes() = to_proto(v);
  co_return resp;
}

asio::awaitable<Status> BoxesService::Watch(grpc::CallContext& ctx, pb::WatchBoxesRequest&&,
                                            grpc::ServerWriter<pb::ListBoxesResponse>& writer) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  std::string last;
  for (;;) {
    uint64_t seen = manager_.generation();
    CO_ASSIGN_OR_RETURN(auto views, co_await manager_.list(who.user_id));
    pb::ListBoxesResponse resp;
    for (const auto& v : views) *resp.add_boxes() = to_proto(v);
    std::string bytes = resp.SerializeAsString();
    if (bytes != last) {  // only changes of this user's list are sent
      CO_RETURN_IF_ERROR(co_await writer.write(resp));
      last = std::move(bytes);
    }
    while (manager_.generation() == seen) {
      CO_RETURN_IF_ERROR(co_await manager_.changed().wait());
    }
  }
}

asio::awaitable<Result<pb::Operation>> BoxesService::Hibernate(grpc::CallContext& ctx,
                                                               pb::BoxRef&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  CO_ASSIGN_OR_RETURN(auto op, co_await manager_.hibernate(who.user_id, req.box()));
  co_return to_proto(op);
}

asio::awaitable<Result<pb::Operation>> BoxesService::Recreate(grpc::CallContext& ctx,
                                                              pb::RecreateRequest&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  CO_ASSIGN_OR_RETURN(auto op,
                      co_await manager_.recreate(who.user_id, req.box(), req.preserve_data()));
  co_return to_proto(op);
}

asio::awaitable<Result<pb::Operation>> BoxesService::Delete(grpc::CallContext& ctx,
                                                            pb::BoxRef&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  CO_ASSIGN_OR_RETURN(auto op, co_await manager_.remove(who.user_id, req.box()));
  co_return to_proto(op);
}

asio::awaitable<Status> BoxesService::WatchOperation(
    grpc::CallContext& ctx, pb::WatchOperationRequest&& req,
    grpc::ServerWriter<pb::OperationEvent>& writer) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  if (req.operation_id().empty()) co_return invalid_argument("operation_id is required");
  CO_ASSIGN_OR_RETURN(int64_t after, parse_offset_key(req.offset_key()));
  CO_ASSIGN_OR_RETURN(auto op, co_await store_.get_operation(req.operation_id()));
  if (op.user_id != who.user_id)
    co_return not_found(fmt::format("operation {} not found", req.operation_id()));
  // The lambda is a named object: gcc 12 mishandles lambdas built inside a co_await operand.
  BoxManager::EventSink send = [&](const OperationEvent& e) -> asio::awaitable<Status> {
    pb::OperationEvent ev;
    ev.set_operation_id(op.id);
    ev.set_phase(static_cast<pb::Phase>(static_cast<int>(e.phase)));
    ev.set_detail(e.detail);
    ev.set_offset_key(offset_key(e.seq));
    ev.set_at_ms(e.at_ms);
    co_return co_await writer.write(ev);
  };
  auto last = co_await manager_.follow(op.id, after, send);
  co_return last.status();
}

// ---- state ----

namespace {

pb::TransferProgress progress_proto(const TransferCounters& c) {
  pb::TransferProgress p;
  p.set_files(c.files);
  p.set_bytes(c.bytes);
  p.set_chunks(c.chunks);
  p.set_chunk_bytes(c.chunk_bytes);
  return p;
}

pb::Snapshot snapshot_proto(const std::string& id, int64_t saved_at_ms, bool quiesced, bool pinned,
                            const state::SnapshotStats& s) {
  pb::Snapshot o;
  o.set_id(id);
  o.set_saved_at_ms(saved_at_ms);
  o.set_quiesced(quiesced);
  o.set_pinned(pinned);
  o.set_files(s.files);
  o.set_logical_bytes(s.logical_bytes);
  o.set_changed_files(s.changed_files);
  o.set_added_bytes(s.added_bytes);
  o.set_added_chunks(s.added_chunks);
  return o;
}

Status no_state() { return unavailable("the state layer is not configured on this api"); }

}  // namespace

asio::awaitable<Status> BoxesService::SaveState(grpc::CallContext& ctx, pb::SaveStateRequest&& req,
                                                grpc::ServerWriter<pb::SaveStateEvent>& writer) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  if (state_ == nullptr) co_return no_state();
  ProgressSink progress = [&writer](TransferCounters c) -> asio::awaitable<void> {
    pb::SaveStateEvent ev;
    *ev.mutable_progress() = progress_proto(c);
    (void)co_await writer.write(ev);
  };
  auto saved = co_await state_->save(who.user_id, req.box(), progress, false, req.quiesce());
  if (!saved.ok()) co_return saved.status();
  pb::SaveStateEvent ev;
  pb::SaveResult* r = ev.mutable_result();
  r->set_box_id(saved->box_id);
  const state::Record& rec = saved->record;
  *r->mutable_snapshot() =
      snapshot_proto(rec.snapshot_id, rec.saved_at_ms, rec.quiesced, false, rec.stats);
  r->set_uploaded_chunks(saved->uploaded_chunks);
  r->set_files_reused(saved->files_reused);
  for (const auto& n : saved->notes) r->add_notes(n);
  co_return co_await writer.write(ev);
}

asio::awaitable<Result<pb::ListSnapshotsResponse>> BoxesService::ListSnapshots(
    grpc::CallContext& ctx, pb::BoxRef&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  if (state_ == nullptr) co_return no_state();
  std::string box_id;
  CO_ASSIGN_OR_RETURN(auto entries, co_await state_->snapshots(who.user_id, req.box(), &box_id));
  pb::ListSnapshotsResponse resp;
  resp.set_box_id(box_id);
  for (const auto& e : entries)
    *resp.add_snapshots() =
        snapshot_proto(e.snapshot_id, e.saved_at_ms, e.quiesced, e.pinned, e.stats);
  co_return resp;
}

asio::awaitable<Result<pb::BrowseSnapshotResponse>> BoxesService::BrowseSnapshot(
    grpc::CallContext& ctx, pb::BrowseSnapshotRequest&& req) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  if (state_ == nullptr) co_return no_state();
  CO_ASSIGN_OR_RETURN(
      auto listed, co_await state_->browse(who.user_id, req.box(), req.snapshot_id(), req.dir()));
  pb::BrowseSnapshotResponse resp;
  for (const auto& e : listed.entries) {
    pb::SnapshotEntry* o = resp.add_entries();
    o->set_path(e.path);
    o->set_kind(static_cast<pb::EntryKind>(e.kind));
    o->set_size(e.size);
    o->set_mtime_ms(e.mtime_ms);
    o->set_mode(e.mode);
    o->set_target(e.target);
  }
  resp.set_truncated(listed.truncated);
  co_return resp;
}

asio::awaitable<Status> BoxesService::RestorePaths(
    grpc::CallContext& ctx, pb::RestorePathsRequest&& req,
    grpc::ServerWriter<pb::RestorePathsEvent>& writer) {
  CO_ASSIGN_OR_RETURN(auto who, principal(ctx));
  if (state_ == nullptr) co_return no_state();
  ProgressSink progress = [&writer](TransferCounters c) -> asio::awaitable<void> {
    pb::RestorePathsEvent ev;
    *ev.mutable_progress() = progress_proto(c);
    (void)co_await writer.write(ev);
  };
  std::vector<std::string> paths(req.paths().begin(), req.paths().end());
  auto done = co_await state_->restore(who.user_id, req.box(), req.snapshot_id(), std::move(paths),
                                       req.target(), progress);
  if (!done.ok()) co_return done.status();
  pb::RestorePathsEvent ev;
  pb::RestoreResult* r = ev.mutable_result();
  r->set_box_id(done->box_id);
  r->set_path(done->path);
  r->set_files(done->files);
  r->set_dirs(done->dirs);
  r->set_symlinks(done->symlinks);
  r->set_bytes(done->bytes);
  r->set_chunks(done->chunks);
  co_return co_await writer.write(ev);
}

}  // namespace cb::api
