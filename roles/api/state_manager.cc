#include "roles/api/state_manager.h"

#include "base/check.h"
#include "base/log.h"
#include "cocoonbox/agent/v1/state.pb.h"
#include "crypto/bytes.h"
#include "crypto/hash.h"
#include "crypto/random.h"
#include "grpc/client.h"
#include "net/blocking.h"
#include "state/chunk_batch.h"
#include "state/manifest.h"
#include "state/s3_store.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace cb::api {

namespace av1 = ::cocoonbox::agent::v1;
using json = nlohmann::json;

namespace {

// A chunk object is at most the largest chunk plus its seal; anything bigger is refused.
constexpr size_t kMaxObjectBody = (size_t{64} << 20) + 4096;
constexpr size_t kMaxUrlsBody = 1u << 20;
constexpr size_t kMaxIdsPerRequest = 2048;
// A save or restore may take long (a first save of a big box); the agent reports progress.
constexpr auto kTransferTimeout = std::chrono::hours(12);
// A save before hibernating gives up after this long (the box hibernates anyway), so an agent
// that does not answer cannot keep its box awake.
constexpr auto kHibernateSaveTimeout = std::chrono::minutes(10);

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The whole request body, at most |limit| bytes. Errors: kResourceExhausted above it.
asio::awaitable<Result<std::string>> read_body(http::ServerRequest& req, size_t limit) {
  std::string body;
  // Room for a declared length up front: a 1 MiB batch of chunks grown piece by piece was
  // copied again at each doubling, on the api's one I/O thread.
  if (const std::string* length = http::find_header(req.head().headers, "content-length")) {
    const unsigned long long n = std::strtoull(length->c_str(), nullptr, 10);
    body.reserve(size_t(std::min<unsigned long long>(n, limit)));
  }
  for (;;) {
    auto piece = co_await req.read();
    if (!piece.ok()) co_return piece.status();
    if (piece->empty()) break;
    if (body.size() + piece->size() > limit)
      co_return resource_exhausted(fmt::format("body over {} bytes", limit));
    body += *piece;
  }
  co_return body;
}

asio::awaitable<void> answer(http::ServerRequest& req, int status, std::string body) {
  (void)co_await http::respond(req, status, "text/plain; charset=utf-8", body + "\n");
}

int http_code(const Status& st) {
  switch (st.code()) {
    case Code::kInvalidArgument:
      return 400;
    case Code::kPermissionDenied:
      return 403;
    case Code::kNotFound:
      return 404;
    case Code::kResourceExhausted:
      return 413;
    default:
      return 503;
  }
}

// A gRPC call to the box's agent on |conn|, with a fresh credential for |box|.
Result<std::unique_ptr<grpc::ClientCall>> open_agent_call(
    const std::shared_ptr<http::H2Connection>& conn, const std::string& credential,
    const std::string& path, const grpc::ChannelOptions& copts,
    net::Deadline deadline = net::after(kTransferTimeout)) {
  http::RequestHead head;
  head.method = "POST";
  head.path = path;
  head.authority = "agent";
  head.headers.push_back(
      http::Header{std::string("content-type"), std::string("application/grpc")});
  head.headers.push_back(http::Header{std::string("te"), std::string("trailers")});
  head.headers.push_back(http::Header{std::string("x-cocoonbox-credential"), credential});
  ASSIGN_OR_RETURN(auto stream, conn->open_stream(head, false));
  return std::make_unique<grpc::ClientCall>(stream, copts, deadline);
}

// Everything of a call's StateAccess but the state key: whose state, the door ticket, and how
// the agent trusts the store's https object URLs.
void fill_access(av1::StateAccess& access, const std::string& user, const std::string& box_id,
                 const std::string& ticket, const std::string& ca_pem, bool skip_verify) {
  access.set_user(user);
  access.set_box(box_id);
  access.set_ticket(ticket);
  access.set_store_ca_pem(ca_pem);
  access.set_store_skip_verify(skip_verify);
}

TransferCounters counters_of(const av1::TransferProgress& p) {
  TransferCounters c;
  c.files = p.files();
  c.bytes = p.bytes();
  c.chunks = p.chunks();
  c.chunk_bytes = p.chunk_bytes();
  return c;
}

// The first path whose content differs between two trees, or "" when they hold the same
// files, directories and links with the same content, modes, owners and file mtimes. ctime and
// inode (change detection only) and directory mtimes are not compared: a file re-read only
// because of the racy window, or a folder whose temporary entry came and went, is no change.
std::string first_difference(const state::Manifest& a, const state::Manifest& b) {
  size_t n = std::min(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < n; ++i) {
    const state::Entry& x = a.entries[i];
    const state::Entry& y = b.entries[i];
    bool same = x.path == y.path && x.kind == y.kind && x.mode == y.mode && x.uid == y.uid &&
                x.gid == y.gid && x.size == y.size && x.chunks == y.chunks &&
                x.target == y.target &&
                (x.kind == state::EntryKind::kDir || x.mtime_ns == y.mtime_ns);
    if (!same) return "/" + y.path;
  }
  if (a.entries.size() > n) return "/" + a.entries[n].path;
  if (b.entries.size() > n) return "/" + b.entries[n].path;
  return "";
}

}  // namespace

std::string state_user(int64_t user_id) { return fmt::format("u{}", user_id); }

StateManager::StateManager(net::Executor executor, Store& db, BoxManager& boxes,
                           const crypto::SymmetricKey& master, std::unique_ptr<state::Store> store,
                           StateManagerOptions options)
    : executor_(std::move(executor)),
      db_(db),
      boxes_(boxes),
      master_(master),
      store_(std::move(store)),
      s3_(dynamic_cast<const state::S3Store*>(store_.get())),
      options_(std::move(options)),
      signer_(master),
      locks_(executor_),
      alive_(std::make_shared<bool>(true)) {
  // A private S3 endpoint's roots go to the agent with each call, so it can follow the https
  // URLs it is given (the api already trusts them: the store opened with them). So does
  // verify=0: the agent checks the endpoint exactly as far as the api does.
  store_skip_verify_ = s3_ != nullptr && !s3_->verify_peer();
  if (s3_ != nullptr && !s3_->ca_file().empty()) {
    std::ifstream in(s3_->ca_file(), std::ios::binary);
    std::ostringstream pem;
    pem << in.rdbuf();
    store_ca_pem_ = pem.str();
    if (!in || store_ca_pem_.empty())
      log::warn("state store: cannot read ca_file for the agents", {{"file", s3_->ca_file()}});
  }
}

StateManager::~StateManager() {
  *alive_ = false;
  door_pool_.join();  // the jobs already queued use store_
}

void StateManager::stop() { stopping_ = true; }

StateManager::TicketGuard StateManager::issue_ticket(const std::string& box_id,
                                                     const std::string& user, bool restore,
                                                     ChunkIds allowed) {
  Ticket t;
  t.box_id = box_id;
  t.user = user;
  t.restore = restore;
  t.allowed = std::move(allowed);
  t.expires_unix =
      now_unix() + std::chrono::duration_cast<std::chrono::seconds>(kTransferTimeout).count();
  std::array<uint8_t, 16> raw{};
  crypto::system_random().fill(raw);
  std::string id = crypto::hex_encode(std::span<const uint8_t>(raw.data(), raw.size()));
  tickets_[id] = std::move(t);
  return TicketGuard(this, std::move(id));
}

StateManager::TicketGuard::~TicketGuard() {
  if (*alive_) self_->tickets_.erase(id_);
}

Result<std::string> StateManager::object_url(std::string_view method,
                                             const std::string& key) const {
  if (s3_ == nullptr)
    return signer_.sign(std::string(method), key, now_unix() + options_.url_ttl.count());
  if (method == "PUT") return s3_->presign_put(key, options_.url_ttl);
  return s3_->presign_get(key, options_.url_ttl);
}

void StateManager::note_relayed(const std::string& box_id, uint64_t bytes) {
  for (auto& [id, t] : tickets_)
    if (t.box_id == box_id) t.relayed_bytes += bytes;
}

asio::awaitable<Result<std::string>> StateManager::state_key(int64_t user_id) {
  auto key = co_await db_.user_state_key(user_id, master_.bytes());
  co_return key;
}

// ---- save ----

asio::awaitable<Result<SaveOutcome>> StateManager::save(int64_t user_id, std::string box_ref,
                                                        ProgressSink progress, bool only_if_changed,
                                                        bool quiesced) {
  auto alive = alive_;
  CO_ASSIGN_OR_RETURN(BoxView view, co_await boxes_.get(user_id, box_ref));
  const std::string box_id = view.box.id;
  CO_ASSIGN_OR_RETURN(StateLocks::Guard box_guard, co_await locks_.box(box_id));
  CO_ASSIGN_OR_RETURN(StateLocks::Guard user_guard,
                      co_await locks_.user_shared(state_user(user_id)));
  auto target = co_await boxes_.connect(user_id, box_id);
  if (!target.ok()) co_return target.status();
  // A save counts as an attached client, so the box does not idle out under it.
  boxes_.attach(box_id);
  struct Detach {
    BoxManager* boxes;
    std::shared_ptr<bool> alive;
    std::string id;
    ~Detach() {
      if (*alive) boxes->detach(id);
    }
  } detach{&boxes_, alive, box_id};
  auto out = co_await save_over(target->first, target->second, std::move(progress), only_if_changed,
                                quiesced, net::after(kTransferTimeout));
  co_return out;
}

asio::awaitable<void> StateManager::save_before_hibernate(
    Box box, std::shared_ptr<http::H2Connection> conn) {
  auto alive = alive_;
  // A save or restore of the box in progress holds its lock; it covers this one (waiting for
  // it could deadlock: it may be waiting for this hibernate to end).
  if (locks_.box_held(box.id)) co_return;
  auto box_guard = co_await locks_.box(box.id);
  if (!box_guard.ok() || !*alive) co_return;
  auto user_guard = co_await locks_.user_shared(state_user(box.user_id));
  if (!user_guard.ok() || !*alive) co_return;
  ProgressSink none;
  // Quiesced: the agent's turns end and agent.db is copied consistently, so the transcript
  // survives a machine lost while hibernated. Turns still running after 30 s make the agent
  // refuse (FAILED_PRECONDITION); the files are then saved without the copy.
  const net::Deadline deadline = net::after(kHibernateSaveTimeout);
  auto quiet = co_await save_over(box, conn, none, true, true, deadline);
  if (!*alive) co_return;
  Result<SaveOutcome> saved = std::move(quiet);
  if (!saved.ok() && saved.status().code() == Code::kFailedPrecondition) {
    log::warn("quiesced save before hibernate refused; saving without the agent.db copy",
              {{"box", box.id}, {"error", saved.status().to_string()}});
    auto plain = co_await save_over(box, conn, none, true, false, deadline);
    if (!*alive) co_return;
    saved = std::move(plain);
  }
  if (!saved.ok()) {
    log::warn("save before hibernate failed",
              {{"box", box.id}, {"error", saved.status().to_string()}});
  } else if (saved->unchanged) {
    log::info("nothing changed since the last save", {{"box", box.id}});
  }
}

asio::awaitable<Result<SaveOutcome>> StateManager::save_over(
    Box box, std::shared_ptr<http::H2Connection> conn, ProgressSink progress, bool only_if_changed,
    bool quiesced, net::Deadline deadline) {
  auto alive = alive_;
  const int64_t user_id = box.user_id;
  const std::string box_id = box.id;
  const std::string user = state_user(user_id);
  CO_ASSIGN_OR_RETURN(std::string raw_key, co_await state_key(user_id));
  auto key = crypto::SymmetricKey::from_bytes(raw_key);
  if (!key.ok()) co_return key.status();
  state::StateKeys keys(*key);
  const state::BoxLocation location{user, box_id};

  state::Store& store = *store_;
  auto head = co_await net::run_blocking([&]() { return state::load_head(store, keys, location); });
  if (!head.ok()) co_return head.status().with_prefix(std::string("head"));
  std::optional<state::Manifest> parent;
  std::string parent_id;
  if (head->has_value()) {
    parent_id = (*head)->snapshot_id;
    auto m = co_await net::run_blocking(
        [&]() { return state::load_manifest(store, keys, location, parent_id); });
    if (!m.ok()) co_return m.status();
    parent = std::move(*m);
  }

  const TicketGuard guard = issue_ticket(box_id, user, false, ChunkIds());
  const std::string& ticket = guard.id();

  av1::SaveRequest req;
  req.mutable_access()->set_state_key(raw_key);
  crypto::wipe(raw_key);
  fill_access(*req.mutable_access(), user, box_id, ticket, store_ca_pem_, store_skip_verify_);
  req.set_parent_snapshot_id(parent_id);
  if (!parent_id.empty()) {
    auto url = object_url("GET", state::manifest_key(location, parent_id));
    if (!url.ok()) co_return url.status();
    req.set_parent_manifest_url(*url);
  }
  for (const auto& e : options_.exclude) req.add_exclude(e);
  req.set_quiesced(quiesced);

  grpc::ChannelOptions copts;
  copts.authority = "agent";
  const std::string credential = boxes_.credential(box);
  const std::string path("/cocoonbox.agent.v1.State/Save");
  auto call = open_agent_call(conn, credential, path, copts, deadline);
  if (!call.ok()) co_return call.status().with_prefix(std::string("box agent"));
  std::string bytes = req.SerializeAsString();
  crypto::wipe(*req.mutable_access()->mutable_state_key());
  Status w = co_await (*call)->write(bytes);
  crypto::wipe(bytes);
  if (w.ok()) w = co_await (*call)->writes_done();
  std::string manifest_bytes;
  std::optional<av1::SaveDone> done;
  for (;;) {
    auto msg = co_await (*call)->read();
    if (!msg) break;
    av1::SaveResponse resp;
    if (!resp.ParseFromString(*msg)) co_return internal_error("box agent: bad SaveResponse");
    if (resp.has_progress()) {
      if (progress) co_await progress(counters_of(resp.progress()));
    } else if (resp.has_manifest_part()) {
      manifest_bytes += resp.manifest_part();
    } else if (resp.has_done()) {
      done = resp.done();
    }
  }
  Status st = co_await (*call)->finish();
  if (!*alive) co_return cancelled("api stopping");
  if (!st.ok()) {
    ++counters_.saves_failed;
    co_return st.with_prefix(std::string("box agent"));
  }
  if (!done) {
    ++counters_.saves_failed;
    co_return internal_error("box agent: the save ended without a result");
  }
  const ChunkIds uploaded = tickets_[ticket].put;
  const uint64_t relayed = tickets_[ticket].relayed_bytes;

  // Commit: decode and check, verify the chunks the agent was told to upload, then the
  // manifest, record, timeline and head (src/state README.md §Commit).
  const av1::SaveDone summary = *done;
  crypto::Random& random = crypto::system_random();
  bool unchanged = false;
  auto committed = co_await net::run_blocking([&]() -> Result<state::Record> {
    // The chunks came in with put_deferred(): durable and visible before the check below
    // and before any snapshot names them.
    if (!uploaded.empty()) RETURN_IF_ERROR(store.sync().with_prefix("store the chunks"));
    ASSIGN_OR_RETURN(state::Manifest manifest, state::decode_manifest(manifest_bytes));
    if (only_if_changed && parent) {
      std::string differs = first_difference(*parent, manifest);
      if (differs.empty()) {
        unchanged = true;
        return state::load_record(store, keys, location, parent_id);
      }
      log::info("box changed since its last save", {{"box", box_id}, {"first", differs}});
    }
    for (const state::ChunkId& id : uploaded) {
      auto size = store.stat(state::chunk_key(user, id));
      if (!size.ok())
        return data_loss(fmt::format("chunk {}: announced for upload but not stored: {}", id.hex(),
                                     size.status().message()));
    }
    state::Record record;
    const auto now = std::chrono::system_clock::now();
    record.snapshot_id = state::new_snapshot_id(now, random);
    record.box = box_id;
    record.quiesced = quiesced && summary.quiesced();
    record.saved_at_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    record.parent = parent_id;
    state::SnapshotStats& s = record.stats;
    for (const auto& e : manifest.entries) {
      switch (e.kind) {
        case state::EntryKind::kFile:
          ++s.files;
          s.logical_bytes += e.size;
          break;
        case state::EntryKind::kDir:
          ++s.dirs;
          break;
        case state::EntryKind::kSymlink:
          ++s.symlinks;
          break;
      }
    }
    s.changed_files = summary.files_read();
    s.added_chunks = summary.uploaded_chunks();
    s.added_bytes = summary.uploaded_bytes();
    s.added_stored_bytes = summary.uploaded_stored_bytes();
    s.skipped = summary.skipped();
    // The parent's manifest then becomes a delta of this one (src/state README.md §Delta
    // manifests): the head stays whole for the agent's next save.
    return state::commit_snapshot(store, keys, location, manifest, std::move(record), random,
                                  parent ? &*parent : nullptr);
  });
  if (!committed.ok()) {
    ++counters_.saves_failed;
    co_return committed.status().with_prefix(std::string("commit"));
  }
  if (unchanged) {
    SaveOutcome same;
    same.box_id = box_id;
    same.record = std::move(*committed);
    same.unchanged = true;
    co_return same;
  }
  ++counters_.saves_done;
  counters_.chunks_uploaded += summary.uploaded_chunks();
  log::info("state saved", {{"box", box_id},
                            {"snapshot", committed->snapshot_id},
                            {"changed_files", static_cast<int64_t>(summary.files_read())},
                            {"uploaded_chunks", static_cast<int64_t>(summary.uploaded_chunks())},
                            {"quiesced", committed->quiesced},
                            {"relayed_bytes", static_cast<int64_t>(relayed)}});
  SaveOutcome out;
  out.box_id = box_id;
  out.record = std::move(*committed);
  out.uploaded_chunks = summary.uploaded_chunks();
  out.files_reused = summary.files_reused();
  for (const auto& n : summary.notes()) out.notes.push_back(n);
  co_return out;
}

// ---- timeline and browse ----

asio::awaitable<Result<std::vector<state::TimelineEntry>>> StateManager::snapshots(
    int64_t user_id, std::string box_ref, std::string* box_id) {
  CO_ASSIGN_OR_RETURN(BoxView view, co_await boxes_.get(user_id, box_ref));
  if (box_id != nullptr) *box_id = view.box.id;
  const std::string user = state_user(user_id);
  CO_ASSIGN_OR_RETURN(StateLocks::Guard user_guard, co_await locks_.user_shared(user));
  CO_ASSIGN_OR_RETURN(std::string raw_key, co_await state_key(user_id));
  auto key = crypto::SymmetricKey::from_bytes(raw_key);
  crypto::wipe(raw_key);
  if (!key.ok()) co_return key.status();
  state::StateKeys keys(*key);
  const state::BoxLocation location{user, view.box.id};
  state::Store& store = *store_;
  auto timeline =
      co_await net::run_blocking([&]() { return state::load_timeline(store, keys, location); });
  if (!timeline.ok()) co_return timeline.status();
  std::vector<state::TimelineEntry> out(timeline->entries.rbegin(), timeline->entries.rend());
  co_return out;
}

asio::awaitable<Result<BrowseOutcome>> StateManager::browse(int64_t user_id, std::string box_ref,
                                                            std::string snapshot_id,
                                                            std::string dir) {
  CO_ASSIGN_OR_RETURN(std::string mdir, browse_dir(dir));
  Status id_ok = state::validate_snapshot_id(snapshot_id);
  if (!id_ok.ok()) co_return id_ok.with_prefix(std::string("snapshot_id"));
  CO_ASSIGN_OR_RETURN(BoxView view, co_await boxes_.get(user_id, box_ref));
  const std::string user = state_user(user_id);
  CO_ASSIGN_OR_RETURN(StateLocks::Guard user_guard, co_await locks_.user_shared(user));
  CO_ASSIGN_OR_RETURN(std::string raw_key, co_await state_key(user_id));
  auto key = crypto::SymmetricKey::from_bytes(raw_key);
  crypto::wipe(raw_key);
  if (!key.ok()) co_return key.status();
  state::StateKeys keys(*key);
  const state::BoxLocation location{user, view.box.id};
  state::Store& store = *store_;
  auto out = co_await net::run_blocking([&]() -> Result<BrowseOutcome> {
    ASSIGN_OR_RETURN(state::Timeline timeline, state::load_timeline(store, keys, location));
    if (timeline.find(snapshot_id) == nullptr)
      return not_found(fmt::format("snapshot_id: {} is not in the box's timeline", snapshot_id));
    ASSIGN_OR_RETURN(state::Manifest manifest,
                     state::load_manifest(store, keys, location, snapshot_id));
    auto listed = state::list_directory(manifest, mdir);
    if (!listed.ok()) return listed.status().with_prefix(fmt::format("dir {}", dir));
    BrowseOutcome b;
    for (const state::Entry* e : *listed) {
      if (b.entries.size() >= kMaxBrowseEntries) {
        b.truncated = true;
        break;
      }
      BrowseEntry be;
      be.path = "/" + e->path;
      be.kind = static_cast<int>(e->kind);
      be.size = e->size;
      be.mtime_ms = e->mtime_ns / 1000000;
      be.mode = e->mode;
      be.target = e->target;
      b.entries.push_back(std::move(be));
    }
    return b;
  });
  co_return out;
}

// ---- restore ----

asio::awaitable<Result<RestoreOutcome>> StateManager::restore(int64_t user_id, std::string box_ref,
                                                              std::string snapshot_id,
                                                              std::vector<std::string> paths,
                                                              std::string target,
                                                              ProgressSink progress) {
  auto alive = alive_;
  CO_ASSIGN_OR_RETURN(std::vector<std::string> scope, restore_scope(paths));
  if (!target.empty()) {
    Status t = check_restore_target(target);
    if (!t.ok()) co_return t;
  }
  Status id_ok = state::validate_snapshot_id(snapshot_id);
  if (!id_ok.ok()) co_return id_ok.with_prefix(std::string("snapshot_id"));
  CO_ASSIGN_OR_RETURN(BoxView view, co_await boxes_.get(user_id, box_ref));
  const std::string box_id = view.box.id;
  CO_ASSIGN_OR_RETURN(StateLocks::Guard box_guard, co_await locks_.box(box_id));
  const std::string user = state_user(user_id);
  CO_ASSIGN_OR_RETURN(StateLocks::Guard user_guard, co_await locks_.user_shared(user));
  CO_ASSIGN_OR_RETURN(std::string raw_key, co_await state_key(user_id));
  auto key = crypto::SymmetricKey::from_bytes(raw_key);
  if (!key.ok()) co_return key.status();
  state::StateKeys keys(*key);
  const state::BoxLocation location{user, box_id};
  state::Store& store = *store_;

  // The snapshot must be kept (§25.4 step 2) and every path must select something; the scope's
  // chunks are exactly what the door will sign (step 3).
  struct Plan {
    int64_t saved_at_ms = 0;
    ChunkIds chunks;
  };
  auto plan = co_await net::run_blocking([&]() -> Result<Plan> {
    ASSIGN_OR_RETURN(state::Timeline timeline, state::load_timeline(store, keys, location));
    const state::TimelineEntry* entry = timeline.find(snapshot_id);
    if (entry == nullptr)
      return not_found(fmt::format("snapshot_id: {} is not in the box's timeline", snapshot_id));
    // The agent reads the manifest as one object: a delta is made whole first (§25.8).
    ASSIGN_OR_RETURN(
        state::Manifest manifest,
        state::materialize_manifest(store, keys, location, snapshot_id, crypto::system_random()));
    Plan p;
    p.saved_at_ms = entry->saved_at_ms;
    for (size_t i = 0; i < scope.size(); ++i) {
      std::vector<std::string> one = {scope[i]};
      ASSIGN_OR_RETURN(auto selected, state::select_entries(manifest, one));
      if (selected.empty())
        return not_found(
            fmt::format("paths[{}]: {} is not in snapshot {}", i, paths[i], snapshot_id));
      for (const state::Entry* e : selected)
        for (const auto& c : e->chunks) p.chunks.insert(c.id);
    }
    return p;
  });
  if (!plan.ok()) co_return plan.status();
  if (target.empty()) target = default_restore_target(plan->saved_at_ms);

  auto conn = co_await boxes_.connect(user_id, box_id);
  if (!conn.ok()) co_return conn.status();
  Box box = conn->first;
  boxes_.attach(box_id);  // not idled out under the restore
  struct Detach {
    BoxManager* boxes;
    std::shared_ptr<bool> alive;
    std::string id;
    ~Detach() {
      if (*alive) boxes->detach(id);
    }
  } detach{&boxes_, alive, box_id};

  const TicketGuard guard = issue_ticket(box_id, user, true, std::move(plan->chunks));
  const std::string& ticket = guard.id();

  av1::RestoreRequest req;
  req.mutable_access()->set_state_key(raw_key);
  crypto::wipe(raw_key);
  fill_access(*req.mutable_access(), user, box_id, ticket, store_ca_pem_, store_skip_verify_);
  req.set_snapshot_id(snapshot_id);
  auto manifest_url = object_url("GET", state::manifest_key(location, snapshot_id));
  if (!manifest_url.ok()) co_return manifest_url.status();
  req.set_manifest_url(*manifest_url);
  for (const auto& p : scope) req.add_paths(p);
  req.set_target(target);

  grpc::ChannelOptions copts;
  copts.authority = "agent";
  const std::string credential = boxes_.credential(box);
  const std::string path("/cocoonbox.agent.v1.State/Restore");
  auto call = open_agent_call(conn->second, credential, path, copts);
  if (!call.ok()) co_return call.status().with_prefix(std::string("box agent"));
  std::string bytes = req.SerializeAsString();
  crypto::wipe(*req.mutable_access()->mutable_state_key());
  Status w = co_await (*call)->write(bytes);
  crypto::wipe(bytes);
  if (w.ok()) w = co_await (*call)->writes_done();
  std::optional<av1::RestoreDone> done;
  for (;;) {
    auto msg = co_await (*call)->read();
    if (!msg) break;
    av1::RestoreResponse resp;
    if (!resp.ParseFromString(*msg)) co_return internal_error("box agent: bad RestoreResponse");
    if (resp.has_progress()) {
      if (progress) co_await progress(counters_of(resp.progress()));
    } else if (resp.has_done()) {
      done = resp.done();
    }
  }
  Status st = co_await (*call)->finish();
  if (!*alive) co_return cancelled("api stopping");
  if (!st.ok()) {
    ++counters_.restores_failed;
    co_return st;
  }
  if (!done) {
    ++counters_.restores_failed;
    co_return internal_error("box agent: the restore ended without a result");
  }
  ++counters_.restores_done;
  const uint64_t relayed = tickets_[ticket].relayed_bytes;
  RestoreOutcome out;
  out.box_id = box_id;
  out.path = done->path();
  out.files = done->files();
  out.dirs = done->dirs();
  out.symlinks = done->symlinks();
  out.bytes = done->bytes();
  out.chunks = done->chunks();
  log::info("state restored", {{"box", box_id},
                               {"snapshot", snapshot_id},
                               {"path", out.path},
                               {"relayed_bytes", static_cast<int64_t>(relayed)}});
  co_return out;
}

// ---- restore on missing (seed §14.9 step 9) ----

asio::awaitable<std::string> StateManager::restore_lost(Box box,
                                                        std::shared_ptr<http::H2Connection> conn) {
  auto alive = alive_;
  const std::string box_id = box.id;
  auto box_guard = co_await locks_.box(box_id);
  if (!box_guard.ok() || !*alive) co_return std::string();
  const std::string user = state_user(box.user_id);
  auto user_guard = co_await locks_.user_shared(user);
  if (!user_guard.ok() || !*alive) co_return std::string();
  auto raw_key = co_await state_key(box.user_id);
  if (!raw_key.ok())
    co_return fmt::format("cannot restore the last save: {}", raw_key.status().message());
  auto key = crypto::SymmetricKey::from_bytes(*raw_key);
  if (!key.ok()) co_return std::string("cannot restore the last save: bad state key");
  state::StateKeys keys(*key);
  const state::BoxLocation location{user, box_id};
  state::Store& store = *store_;
  struct Plan {
    std::optional<state::Head> head;
    ChunkIds chunks;
  };
  auto plan = co_await net::run_blocking([&]() -> Result<Plan> {
    Plan p;
    ASSIGN_OR_RETURN(p.head, state::load_head(store, keys, location));
    if (!p.head) return p;
    ASSIGN_OR_RETURN(state::Manifest manifest,
                     state::materialize_manifest(store, keys, location, p.head->snapshot_id,
                                                 crypto::system_random()));
    for (const auto& id : state::referenced_chunks(manifest)) p.chunks.insert(id);
    return p;
  });
  if (!*alive) co_return std::string();
  if (!plan.ok())
    co_return fmt::format("cannot restore the last save: {}", plan.status().message());
  if (!plan->head) co_return std::string("the box was never saved: it starts empty");
  const state::Head head = *plan->head;

  const TicketGuard guard = issue_ticket(box_id, user, true, std::move(plan->chunks));
  const std::string& ticket = guard.id();

  av1::RestoreRequest req;
  req.mutable_access()->set_state_key(*raw_key);
  crypto::wipe(*raw_key);
  fill_access(*req.mutable_access(), user, box_id, ticket, store_ca_pem_, store_skip_verify_);
  req.set_snapshot_id(head.snapshot_id);
  auto manifest_url = object_url("GET", state::manifest_key(location, head.snapshot_id));
  if (!manifest_url.ok())
    co_return fmt::format("cannot restore the last save: {}", manifest_url.status().message());
  req.set_manifest_url(*manifest_url);
  req.set_whole(true);
  grpc::ChannelOptions copts;
  copts.authority = "agent";
  const std::string credential = boxes_.credential(box);
  const std::string path("/cocoonbox.agent.v1.State/Restore");
  auto call = open_agent_call(conn, credential, path, copts);
  if (!call.ok())
    co_return fmt::format("cannot restore the last save: {}", call.status().message());
  std::string bytes = req.SerializeAsString();
  crypto::wipe(*req.mutable_access()->mutable_state_key());
  Status w = co_await (*call)->write(bytes);
  crypto::wipe(bytes);
  if (w.ok()) w = co_await (*call)->writes_done();
  std::optional<av1::RestoreDone> done;
  for (;;) {
    auto msg = co_await (*call)->read();
    if (!msg) break;
    av1::RestoreResponse resp;
    if (resp.ParseFromString(*msg) && resp.has_done()) done = resp.done();
  }
  Status st = co_await (*call)->finish();
  if (!*alive) co_return std::string();
  if (!st.ok() || !done) {
    ++counters_.restores_failed;
    log::error("restore of lost files failed", {{"box", box_id}, {"error", st.to_string()}});
    co_return fmt::format("restoring the last save failed: {}", st.message());
  }
  ++counters_.restores_done;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::string detail = fmt::format(
      "restored {} files from the last save, {} ({}); changes made after it are lost (loss "
      "window up to {} s)",
      done->files(), head.snapshot_id, default_restore_target(head.saved_at_ms),
      (now_ms - head.saved_at_ms) / 1000);
  log::warn("box files lost; last save restored",
            {{"box", box_id}, {"snapshot", head.snapshot_id}, {"detail", detail}});
  co_return detail;
}

// ---- the door's state routes ----

asio::awaitable<void> StateManager::serve_door(http::ServerRequest& req, std::string box_id) {
  const std::string path(req.head().path_only());
  if (path == kStateUrlsPath) {
    co_await door_urls(req, box_id);
  } else if (path == kStateBatchGetPath && s3_ == nullptr) {
    co_await door_batch_get(req, box_id);
  } else if (path == kStateBatchPutPath && s3_ == nullptr) {
    co_await door_batch_put(req, box_id);
  } else if (path.rfind(kStateObjectPrefix, 0) == 0) {
    co_await door_object(req, box_id);
  } else {
    co_await answer(req, 404, "no such state route");
  }
}

asio::awaitable<void> StateManager::door_urls(http::ServerRequest& req, std::string box_id) {
  auto alive = alive_;
  if (req.head().method != "POST") {
    co_await answer(req, 405, "POST only");
    co_return;
  }
  auto body = co_await read_body(req, kMaxUrlsBody);
  if (!*alive) co_return;
  if (!body.ok()) {
    co_await answer(req, http_code(body.status()), body.status().to_string());
    co_return;
  }
  Ticket* ticket = door_ticket(req, box_id);
  if (ticket == nullptr) {
    co_await answer(req, 403, "no state operation of this box holds that ticket");
    co_return;
  }
  json doc = json::parse(*body, nullptr, false);
  if (!doc.is_object() || !doc.contains("ids") || !doc["ids"].is_array() || !doc.contains("op") ||
      !doc["op"].is_string()) {
    co_await answer(req, 400, "body: want {\"op\":\"put\"|\"get\",\"ids\":[hex,...]}");
    co_return;
  }
  const std::string op = doc["op"].get<std::string>();
  if (doc["ids"].size() > kMaxIdsPerRequest) {
    co_await answer(req, 400, fmt::format("ids: at most {} per request", kMaxIdsPerRequest));
    co_return;
  }
  std::vector<state::ChunkId> ids;
  for (const auto& v : doc["ids"]) {
    if (!v.is_string()) {
      co_await answer(req, 400, "ids: not a string");
      co_return;
    }
    auto id = state::ChunkId::from_hex(v.get<std::string>());
    if (!id.ok()) {
      co_await answer(req, 400, std::string(id.status().message()));
      co_return;
    }
    ids.push_back(*id);
  }
  const bool restore = ticket->restore;
  const std::string user = ticket->user;
  // "urls": false: the agent moves chunks through the batch routes. A get only checks its ids'
  // scope (the batch route checks every id again); a put answers the ids the store lacks as
  // "missing", without URLs: signing them (2048 an ask, never used) was about 4 % of the api's
  // CPU in a box's save. An api with an S3 store answers URLs anyway.
  const bool batch_only = s3_ == nullptr && doc.contains("urls") && doc["urls"].is_boolean() &&
                          !doc["urls"].get<bool>();
  json urls = json::object();
  json missing_hex = json::array();
  if (op == "get") {
    if (!restore) {
      co_await answer(req, 403, "a save's ticket does not fetch chunks");
      co_return;
    }
    for (const auto& id : ids) {
      if (ticket->allowed.count(id) == 0) {
        co_await answer(req, 403, fmt::format("chunk {} is not in the restore's scope", id.hex()));
        co_return;
      }
      if (batch_only) continue;
      std::string hex = id.hex();
      auto url = object_url("GET", state::chunk_key(user, id));
      if (!url.ok()) {
        co_await answer(req, 400, url.status().to_string());
        co_return;
      }
      urls[hex] = std::move(*url);
    }
  } else if (op == "put") {
    if (restore) {
      co_await answer(req, 403, "a restore's ticket does not upload chunks");
      co_return;
    }
    state::Store& store = *store_;
    auto missing =
        co_await net::run_blocking(door_pool_, [&]() -> Result<std::vector<state::ChunkId>> {
          std::vector<state::ChunkId> out;
          for (const auto& id : ids) {
            auto size = store.stat(state::chunk_key(user, id));
            if (size.ok()) continue;
            if (size.status().code() != Code::kNotFound) return size.status();
            out.push_back(id);
          }
          return out;
        });
    if (!*alive) co_return;
    if (!missing.ok()) {
      co_await answer(req, 503, missing.status().to_string());
      co_return;
    }
    Ticket* again = door_ticket(req, box_id);  // the stats were a suspension
    if (again == nullptr) {
      co_await answer(req, 403, "the save ended");
      co_return;
    }
    for (const auto& id : *missing) {
      again->put.insert(id);
      if (batch_only) {
        missing_hex.push_back(id.hex());
        continue;
      }
      auto url = object_url("PUT", state::chunk_key(user, id));
      if (!url.ok()) {
        co_await answer(req, 400, url.status().to_string());
        co_return;
      }
      urls[id.hex()] = std::move(*url);
    }
  } else {
    co_await answer(req, 400, "op: \"put\" or \"get\"");
    co_return;
  }
  json resp{{"urls", std::move(urls)}};
  if (op == "put" && batch_only) resp["missing"] = std::move(missing_hex);
  // The chunk batch routes exist for the filesystem store, whose chunks pass the door anyway.
  if (s3_ == nullptr) resp["batch"] = true;
  (void)co_await http::respond(req, 200, "application/json", resp.dump());
}

StateManager::Ticket* StateManager::door_ticket(const http::ServerRequest& req,
                                                const std::string& box_id) {
  const std::string* id = http::find_header(req.head().headers, kStateTicketHeader);
  if (id == nullptr) return nullptr;
  auto it = tickets_.find(*id);
  if (it == tickets_.end() || it->second.box_id != box_id || it->second.expires_unix < now_unix())
    return nullptr;
  return &it->second;
}

asio::awaitable<std::optional<std::string>> StateManager::door_batch_body(http::ServerRequest& req,
                                                                          const std::string& box_id,
                                                                          bool restore,
                                                                          size_t limit) {
  auto alive = alive_;
  if (req.head().method != "POST") {
    co_await answer(req, 405, "POST only");
    co_return std::nullopt;
  }
  const char* wrong_kind = restore ? "a save's ticket does not fetch chunks"
                                   : "a restore's ticket does not upload chunks";
  // The ticket before the body, so a request without one costs the api nothing.
  const Ticket* before = door_ticket(req, box_id);
  if (before == nullptr || before->restore != restore) {
    co_await answer(
        req, 403,
        before == nullptr ? "no state operation of this box holds that ticket" : wrong_kind);
    co_return std::nullopt;
  }
  auto body = co_await read_body(req, limit);
  if (!*alive) co_return std::nullopt;
  if (!body.ok()) {
    co_await answer(req, http_code(body.status()), body.status().to_string());
    co_return std::nullopt;
  }
  if (door_ticket(req, box_id) == nullptr) {  // again: the call may have ended meanwhile
    co_await answer(req, 403, "no state operation of this box holds that ticket");
    co_return std::nullopt;
  }
  co_return std::move(*body);
}

asio::awaitable<void> StateManager::door_batch_get(http::ServerRequest& req, std::string box_id) {
  auto alive = alive_;
  auto body =
      co_await door_batch_body(req, box_id, true, state::kMaxBatchChunks * state::kChunkIdSize);
  if (!body) co_return;
  // door_batch_body() checked it, and nothing ran since: its co_return resumed us.
  const Ticket* ticket = door_ticket(req, box_id);
  CB_CHECK(ticket != nullptr);
  auto ids = state::decode_batch_ids(*body);
  if (!ids.ok()) {
    co_await answer(req, 400, std::string(ids.status().message()));
    co_return;
  }
  std::vector<std::string> keys;
  keys.reserve(ids->size());
  for (const state::ChunkId& id : *ids) {
    if (ticket->allowed.count(id) == 0) {
      co_await answer(req, 403, fmt::format("chunk {} is not in the restore's scope", id.hex()));
      co_return;
    }
    keys.push_back(state::chunk_key(ticket->user, id));
  }
  // The answer is built on the pool, and ends after kMaxBatchAnswer bytes (the agent asks
  // again for the rest): a request costs the api a bounded amount of memory.
  struct Answer {
    std::string bytes;
    uint64_t chunks = 0;
    uint64_t chunk_bytes = 0;
  };
  state::Store& store = *store_;
  auto built = co_await net::run_blocking(door_pool_, [&]() -> Result<Answer> {
    Answer a;
    // Room for the item that crosses the cap too, so that at the default chunker parameters
    // (chunks of at most 256 KiB) the answer never moves; pages are touched only as items
    // fill them.
    a.bytes.reserve(state::kMaxBatchAnswer + (1u << 20));
    for (size_t i = 0; i < keys.size() && (i == 0 || a.bytes.size() < state::kMaxBatchAnswer);
         ++i) {
      auto item = state::append_stored_item(a.bytes, store, keys[i]);
      if (item.ok()) {
        ++a.chunks;
        a.chunk_bytes += *item;
      }
    }
    return a;
  });
  if (!*alive) co_return;
  if (!built.ok()) {
    co_await answer(req, http_code(built.status()), built.status().to_string());
    co_return;
  }
  counters_.chunks_served += built->chunks;
  note_relayed(box_id, built->chunk_bytes);
  (void)co_await http::respond(req, 200, "application/octet-stream", built->bytes);
}

asio::awaitable<void> StateManager::door_batch_put(http::ServerRequest& req, std::string box_id) {
  auto alive = alive_;
  auto body = co_await door_batch_body(req, box_id, false, kMaxObjectBody);
  if (!body) co_return;
  // door_batch_body() checked it, and nothing ran since: its co_return resumed us.
  const Ticket* ticket = door_ticket(req, box_id);
  CB_CHECK(ticket != nullptr);
  auto items = state::decode_put_items(*body);
  if (!items.ok()) {
    co_await answer(req, 400, std::string(items.status().message()));
    co_return;
  }
  std::vector<std::string> keys;
  keys.reserve(items->size());
  uint64_t bytes = 0;
  for (const state::PutItem& item : *items) {
    if (ticket->put.count(item.id) == 0) {
      co_await answer(req, 403,
                      fmt::format("chunk {} was not asked for by this save", item.id.hex()));
      co_return;
    }
    keys.push_back(state::chunk_key(ticket->user, item.id));
    bytes += item.data.size();
  }
  note_relayed(box_id, bytes);
  // Deferred, as door_object's PUT: durable at the commit's sync().
  state::Store& store = *store_;
  Status st = co_await net::run_blocking(door_pool_, [&]() -> Status {
    for (size_t i = 0; i < keys.size(); ++i)
      RETURN_IF_ERROR(store.put_deferred(keys[i], (*items)[i].data));
    return ok_status();
  });
  if (!*alive) co_return;
  if (!st.ok()) {
    co_await answer(req, http_code(st), st.to_string());
    co_return;
  }
  co_await answer(req, 200, "stored");
}

asio::awaitable<void> StateManager::door_object(http::ServerRequest& req, std::string box_id) {
  auto alive = alive_;
  const std::string method = req.head().method;
  if (method != "GET" && method != "PUT") {
    co_await answer(req, 405, "GET or PUT only");
    co_return;
  }
  auto key = signer_.verify(method, req.head().path, now_unix());
  if (!key.ok()) {
    co_await answer(req, http_code(key.status()), key.status().to_string());
    co_return;
  }
  // Only while a save or restore of this box runs, and only under its user's prefix.
  // Signed by this api, and only while a save (GET and PUT) or a restore (GET) of this box
  // runs, under its user's prefix.
  bool allowed = false;
  for (const auto& [id, t] : tickets_) {
    if (t.box_id == box_id && key->rfind(state::user_prefix(t.user), 0) == 0 &&
        (method == "GET" || !t.restore))
      allowed = true;
  }
  if (!allowed) {
    co_await answer(req, 403, "no state operation of this box is in progress");
    co_return;
  }
  state::Store& store = *store_;
  const std::string object_key = *key;
  if (method == "PUT") {
    auto body = co_await read_body(req, kMaxObjectBody);
    if (!*alive) co_return;
    if (!body.ok()) {
      co_await answer(req, http_code(body.status()), body.status().to_string());
      co_return;
    }
    std::string data = std::move(*body);
    note_relayed(box_id, data.size());
    // Only chunks are signed for PUT. Deferred: durable at the commit's sync(), not each
    // with two fsyncs (FsStore: 0.41 vs 0.07 ms per 64 KiB chunk, 2026-12-01); a save that
    // never commits leaves chunks no snapshot names, which the sweep removes.
    Status st = co_await net::run_blocking(door_pool_,
                                           [&]() { return store.put_deferred(object_key, data); });
    if (!*alive) co_return;
    if (!st.ok()) {
      co_await answer(req, http_code(st), st.to_string());
      co_return;
    }
    co_await answer(req, 200, "stored");
    co_return;
  }
  auto data = co_await net::run_blocking(door_pool_, [&]() { return store.get(object_key); });
  if (!*alive) co_return;
  if (!data.ok()) {
    co_await answer(req, http_code(data.status()), data.status().to_string());
    co_return;
  }
  ++counters_.chunks_served;
  note_relayed(box_id, data->size());
  (void)co_await http::respond(req, 200, "application/octet-stream", *data);
}

// ---- autosave ----

void StateManager::start_autosave_loop() {
  if (options_.autosave.count() == 0) return;
  asio::co_spawn(executor_, autosave_loop(), asio::detached);
}

asio::awaitable<void> StateManager::autosave_loop() {
  auto alive = alive_;
  net::Timer timer(executor_);
  while (!stopping_) {
    timer.expires_after(options_.autosave);
    auto [ec] = co_await timer.async_wait();
    if (ec || !*alive || stopping_) co_return;
    auto all = co_await db_.list_all_boxes();
    if (!*alive) co_return;
    if (!all.ok()) continue;
    for (const auto& b : *all) {
      if (b.deleted_at_ms || b.state != BoxState::kRunning) continue;
      ProgressSink none;
      auto r = co_await save(b.user_id, b.id, none, true);
      if (!*alive) co_return;
      if (!r.ok()) log::warn("autosave failed", {{"box", b.id}, {"error", r.status().to_string()}});
    }
  }
}

}  // namespace cb::api
