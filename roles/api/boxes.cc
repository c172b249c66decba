#include "roles/api/boxes.h"

#include "base/failpoint.h"
#include "base/log.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "crypto/credential.h"
#include "crypto/random.h"
#include "grpc/client.h"

#include <fmt/format.h>

#include <filesystem>

namespace cb::api {

namespace av1 = ::cocoonbox::agent::v1;

struct BoxManager::Runtime {
  explicit Runtime(const net::Executor& ex) : idle(ex) {}
  bool busy = false;
  std::string current_operation;
  std::shared_ptr<http::H2Connection> conn;
  int attached = 0;
  std::chrono::steady_clock::time_point last_activity = std::chrono::steady_clock::now();
  net::Signal idle;  // notified when busy turns false
};

namespace {
constexpr auto kCredentialLifetime = std::chrono::minutes(10);

std::string new_wake_id() { return "wk_" + crypto::random_token(crypto::system_random(), 12); }

constexpr std::string_view kPreserveData = "preserve_data";

// The failpoints of the box lifecycle (base/failpoint.h), for crash tests:
//   boxes.ensure.started   the machine is started or thawed, the agent not yet confirmed
//   boxes.hibernate.frozen the machine is frozen, the box not yet recorded HIBERNATED
// Action "pause": the operation stops there (the process is meant to be killed).
asio::awaitable<void> failpoint(std::string_view name) {
  if (failpoint_action(name) != "pause") co_return;
  log::warn("failpoint reached: operation paused", {{"failpoint", std::string(name)}});
  net::Timer t(co_await asio::this_coro::executor);
  for (;;) {
    t.expires_after(std::chrono::hours(1));
    auto [ec] = co_await t.async_wait();
    if (ec) co_return;
  }
}
}  // namespace

BoxManager::BoxManager(net::Executor executor, Store& store, machines::Backend& backend,
                       const EdgeKey& key, BoxManagerOptions options)
    : executor_(std::move(executor)),
      store_(store),
      backend_(backend),
      key_(key),
      options_(std::move(options)),
      changed_(executor_),
      alive_(std::make_shared<bool>(true)) {}

BoxManager::~BoxManager() { *alive_ = false; }

void BoxManager::stop() {
  stopping_ = true;
  for (auto& [id, rt] : runtimes_) {
    if (rt->conn) rt->conn->close();
    rt->conn.reset();
  }
  changed_.notify();
}

BoxManager::Runtime& BoxManager::runtime(const std::string& box_id) {
  auto& rt = runtimes_[box_id];
  if (!rt) rt = std::make_unique<Runtime>(executor_);
  return *rt;
}

void BoxManager::notify_changed() {
  ++generation_;
  changed_.notify();
}

machines::MachineSpec BoxManager::spec_for(const Box& box) const {
  machines::MachineSpec spec;
  spec.box_id = box.id;
  spec.image = box.image;
  spec.box_dir = options_.data_dir / "boxes" / box.id;
  spec.agent_argv = options_.agent_argv;
  return spec;
}

std::string BoxManager::credential(const Box& box) const {
  auto exp = std::chrono::duration_cast<std::chrono::seconds>(
                 (std::chrono::system_clock::now() + kCredentialLifetime).time_since_epoch())
                 .count();
  return crypto::issue_credential(key_.key, key_.key_id, box.id, box.wake_id, exp);
}

asio::awaitable<Result<BoxView>> BoxManager::view(Box box) {
  BoxView v;
  v.attached_clients = attached(box.id);
  if (auto it = runtimes_.find(box.id); it != runtimes_.end() && it->second->busy)
    v.operation_id = it->second->current_operation;
  v.isolated = backend_.isolated();
  v.isolation_note = backend_.isolation_note();
  v.box = std::move(box);
  co_return v;
}

void BoxManager::attach(const std::string& box_id) {
  auto& rt = runtime(box_id);
  ++rt.attached;
  rt.last_activity = std::chrono::steady_clock::now();
}

void BoxManager::detach(const std::string& box_id) {
  auto& rt = runtime(box_id);
  if (rt.attached > 0) --rt.attached;
  rt.last_activity = std::chrono::steady_clock::now();
}

int BoxManager::attached(const std::string& box_id) const {
  auto it = runtimes_.find(box_id);
  return it == runtimes_.end() ? 0 : it->second->attached;
}

asio::awaitable<Status> BoxManager::acquire(const std::string& box_id) {
  auto& rt = runtime(box_id);
  while (rt.busy) {
    Status w = co_await rt.idle.wait();
    if (!w.ok()) co_return w;
  }
  rt.busy = true;
  co_return ok_status();
}

void BoxManager::release(const std::string& box_id) {
  auto& rt = runtime(box_id);
  rt.busy = false;
  rt.current_operation.clear();
  rt.idle.notify();
}

asio::awaitable<Result<OperationEvent>> BoxManager::follow(std::string operation_id,
                                                           int64_t after_seq, EventSink on_event) {
  for (;;) {
    const uint64_t seen = generation_;
    CO_ASSIGN_OR_RETURN(auto events, co_await store_.events_after(operation_id, after_seq));
    for (const auto& e : events) {
      Status st = co_await on_event(e);
      if (!st.ok()) co_return st;
      after_seq = e.seq;
      if (e.phase == Phase::kDone || e.phase == Phase::kFailed) co_return e;
    }
    while (generation_ == seen) CO_RETURN_IF_ERROR(co_await changed_.wait());
  }
}

asio::awaitable<void> BoxManager::wait_operation(const std::string& box_id) {
  auto& rt = runtime(box_id);
  while (rt.busy) {
    Status w = co_await rt.idle.wait();
    if (!w.ok()) co_return;
  }
}

void BoxManager::drop_connection(const std::string& box_id) {
  auto& rt = runtime(box_id);
  if (rt.conn) rt.conn->close();
  rt.conn.reset();
}

asio::awaitable<Status> BoxManager::set_state(Box& box, BoxState state, std::string detail,
                                              std::string wake_id) {
  std::optional<std::string> wake;
  if (!wake_id.empty()) wake = wake_id;
  auto updated = co_await store_.set_box_state(box.id, state, detail, wake);
  if (!updated.ok()) {
    // The store refuses a move to STARTING over the running quota: the caller fails its
    // operation. Other errors (I/O) leave the row as it was; the in-memory box moves on.
    log::error("box state not saved", {{"box", box.id}, {"error", updated.status().to_string()}});
    if (updated.status().code() == Code::kResourceExhausted) co_return updated.status();
    box.state = state;
    box.detail = detail;
    if (!wake_id.empty()) box.wake_id = wake_id;
    notify_changed();
    co_return ok_status();
  }
  box = std::move(*updated);
  notify_changed();
  co_return ok_status();
}

asio::awaitable<void> BoxManager::event(const Operation& op, Phase phase, std::string detail) {
  auto r = co_await store_.append_event(op.id, phase, detail);
  if (!r.ok()) log::warn("operation event not saved", {{"op", op.id}});
  log::info("box operation", {{"op", op.id},
                              {"box", op.box_id},
                              {"kind", op.kind},
                              {"phase", static_cast<int>(phase)},
                              {"detail", detail}});
  notify_changed();
}

asio::awaitable<void> BoxManager::finish(const Operation& op, Phase phase, std::string detail) {
  auto r = co_await store_.finish_operation(op.id, phase, detail);
  if (!r.ok()) log::warn("operation end not saved", {{"op", op.id}});
  ++counters_.operations[op.kind + (phase == Phase::kDone ? "_done" : "_failed")];
  log::info("box operation finished", {{"op", op.id},
                                       {"box", op.box_id},
                                       {"kind", op.kind},
                                       {"result", phase == Phase::kDone ? "done" : "failed"},
                                       {"detail", detail}});
  notify_changed();
}

asio::awaitable<Result<Operation>> BoxManager::start_operation(const Box& box, std::string kind,
                                                               std::string params) {
  auto op = co_await store_.begin_operation(box.id, kind, params);
  if (!op.ok()) co_return op.status();
  runtime(box.id).current_operation = op->id;
  co_return op;
}

// ---- readiness ----

asio::awaitable<Status> BoxManager::wait_ready(const Box& box, const std::string& wake_id) {
  auto deadline = net::after(options_.ready_timeout);
  Status last = unavailable("agent did not answer");
  Box probe = box;
  probe.wake_id = wake_id;
  while (std::chrono::steady_clock::now() < deadline && !stopping_) {
    auto endpoint = backend_.address(box.id);
    if (endpoint.ok()) {
      auto stream = co_await endpoint->dial(net::after(std::chrono::seconds(1)));
      if (stream.ok()) {
        auto conn = http::H2Connection::make(std::move(*stream), http::H2Connection::Side::kClient,
                                             http::H2Options{});
        conn->start();
        grpc::ChannelOptions copts;
        copts.authority = "agent";
        // The channel reuses this connection: dial through a channel bound to the endpoint.
        http::RequestHead head;
        head.method = "POST";
        head.path = "/cocoonbox.agent.v1.Session/Hello";
        head.authority = "agent";
        head.headers.push_back(
            http::Header{std::string("content-type"), std::string("application/grpc")});
        head.headers.push_back(http::Header{std::string("te"), std::string("trailers")});
        head.headers.push_back(
            http::Header{std::string("x-cocoonbox-credential"), credential(probe)});
        auto s = conn->open_stream(head, false);
        if (s.ok()) {
          grpc::ClientCall call(*s, copts, net::after(std::chrono::seconds(2)));
          av1::HelloRequest req;
          req.set_client("cocoonbox-api");
          Status w = co_await call.write(req.SerializeAsString());
          if (w.ok()) w = co_await call.writes_done();
          auto reply = co_await call.read();
          Status st = co_await call.finish();
          if (st.ok() && reply) {
            av1::HelloResponse resp;
            if (resp.ParseFromString(*reply) && resp.wake_id() == wake_id) {
              runtime(box.id).conn = conn;  // keep it for the edge
              co_return ok_status();
            }
            last = unavailable("agent answered for another wake");
          } else {
            last = st.ok() ? unavailable("agent sent no Hello reply") : st;
          }
        }
        if (runtime(box.id).conn != conn) conn->close();
      } else {
        last = stream.status();
      }
    } else {
      last = endpoint.status();
    }
    net::Timer t(executor_, net::after(std::chrono::milliseconds(25)));
    co_await t.async_wait();
  }
  co_return unavailable(fmt::format("agent not ready after {} ms: {}",
                                    options_.ready_timeout.count(), last.message()));
}

// Delivers a fresh identity and starts (|fresh|) or thaws the machine, then waits for Hello.
asio::awaitable<Status> BoxManager::boot(Box& box, const Operation& op, bool fresh) {
  auto spec = spec_for(box);
  std::error_code ec;
  for (const char* sub : {"workspace", "home", "run"})
    std::filesystem::create_directories(spec.box_dir / sub, ec);
  if (options_.before_boot) options_.before_boot(box, spec.box_dir);
  std::string wake_id = new_wake_id();
  crypto::BoxIdentity identity{box.id, wake_id, key_.key_id, key_.key.public_key()};
  auto json = crypto::serialize_box_identity(identity);
  if (!json.ok()) co_return json.status();
  drop_connection(box.id);
  // The box sees the host's / read-only but its own /tmp, so the api's binary may not be
  // visible there (a build tree under /tmp): each boot copies it into the box's run dir.
  // A copy, not a link: the run dir is writable by the box, the api's binary must not be.
  if (fresh && !spec.agent_argv.empty()) {
    std::filesystem::copy_file(spec.agent_argv[0], spec.box_dir / "run" / "cocoonbox",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec)
      co_return unavailable(fmt::format("copy the agent binary into the box: {}", ec.message()));
    std::filesystem::permissions(spec.box_dir / "run" / "cocoonbox", std::filesystem::perms(0755),
                                 ec);
    spec.agent_argv[0] = "/run/cocoonbox/cocoonbox";
  }
  CO_RETURN_IF_ERROR(backend_.deliver_identity(spec, *json));
  if (fresh) {
    co_await event(op, Phase::kCreating, "starting the machine");
    CO_RETURN_IF_ERROR(co_await backend_.start(spec));
  } else {
    co_await event(op, Phase::kThawing, "waking the machine");
    CO_RETURN_IF_ERROR(co_await backend_.wake(box.id));
  }
  co_await failpoint("boxes.ensure.started");
  co_await event(op, Phase::kStarting, "waiting for the agent");
  CO_RETURN_IF_ERROR(co_await wait_ready(box, wake_id));
  // gcc 12 destroys a conditional-expression temporary argument of a coroutine twice: name it.
  std::string note = backend_.isolated() ? std::string() : backend_.isolation_note();
  (void)co_await set_state(box, BoxState::kRunning, std::move(note), wake_id);
  co_return ok_status();
}

// ---- operations ----

asio::awaitable<void> BoxManager::run_ensure(Box box, Operation op) {
  auto alive = alive_;
  // A machine that is there, frozen or running, is woken (wake() is idempotent on a running
  // one): its processes are kept. That includes a box left STARTING or HIBERNATING by an api
  // crash. An ABSENT or FAILED box starts afresh.
  bool fresh = true;
  if (box.state != BoxState::kAbsent && box.state != BoxState::kFailed) {
    auto st = backend_.status(box.id);
    fresh = !(st.ok() &&
              (*st == machines::MachineState::kFrozen || *st == machines::MachineState::kRunning));
  }
  if (fresh) {
    // A machine that is half there (FAILED, crashed) is cleared before a fresh start.
    (void)co_await backend_.release(box.id, machines::DataPolicy::kKeep);
  }
  std::string what = fresh ? "starting" : "waking";
  // A box that ran before and whose files are gone with its machine gets its last save back.
  const bool data_lost = fresh && lost_data(box);
  Status st = co_await set_state(box, BoxState::kStarting, std::move(what));
  if (st.ok()) st = co_await boot(box, op, fresh);
  if (!*alive) co_return;
  if (st.ok() && data_lost) co_await restore_lost_data(box, op);
  if (!*alive) co_return;
  if (st.ok()) {
    co_await finish(op, Phase::kDone, "running");
  } else {
    // Refused by the quota: the box stays as it was. Anything else leaves it FAILED.
    if (st.code() != Code::kResourceExhausted)
      (void)co_await set_state(box, BoxState::kFailed, std::string(st.message()));
    co_await finish(op, Phase::kFailed, std::string(st.message()));
  }
  release(box.id);
}

bool BoxManager::lost_data(const Box& box) const {
  if (box.wake_id.empty()) return false;  // never ran: nothing to lose
  auto dir = options_.data_dir / "boxes" / box.id;
  std::error_code ec;
  return !std::filesystem::exists(dir / "home", ec) &&
         !std::filesystem::exists(dir / "workspace", ec);
}

asio::awaitable<void> BoxManager::restore_lost_data(const Box& box, const Operation& op) {
  if (!options_.restore_lost_data) co_return;
  auto alive = alive_;
  co_await event(op, Phase::kStarting, "the box's files were lost; restoring its last save");
  if (!*alive) co_return;
  auto conn = runtime(box.id).conn;
  std::string detail = co_await options_.restore_lost_data(box, conn);
  if (!*alive || detail.empty()) co_return;
  co_await event(op, Phase::kStarting, std::move(detail));
}

asio::awaitable<void> BoxManager::run_hibernate(Box box, Operation op) {
  auto alive = alive_;
  if (options_.before_hibernate && box.state == BoxState::kRunning) {
    auto conn = runtime(box.id).conn;
    if (conn && conn->accepting_streams()) {
      co_await event(op, Phase::kBackingUp, "saving the box's files");
      co_await options_.before_hibernate(box, conn);
      if (!*alive) co_return;
    }
  }
  (void)co_await set_state(box, BoxState::kHibernating, "freezing");
  co_await event(op, Phase::kFreezing, "freezing the machine");
  drop_connection(box.id);
  Status st = co_await backend_.hibernate(box.id);
  if (st.ok()) co_await failpoint("boxes.hibernate.frozen");
  if (!*alive) co_return;
  if (st.ok()) {
    (void)co_await set_state(box, BoxState::kHibernated, "");
    co_await finish(op, Phase::kDone, "hibernated");
  } else {
    (void)co_await set_state(box, BoxState::kFailed, std::string(st.message()));
    co_await finish(op, Phase::kFailed, std::string(st.message()));
  }
  release(box.id);
}

asio::awaitable<void> BoxManager::run_recreate(Box box, Operation op, bool preserve_data) {
  auto alive = alive_;
  Status st = co_await set_state(box, BoxState::kStarting, "recreating");
  if (!st.ok()) {  // over the running quota: nothing was touched
    co_await finish(op, Phase::kFailed, std::string(st.message()));
    release(box.id);
    co_return;
  }
  const bool data_lost = preserve_data && lost_data(box);
  co_await event(op, Phase::kCleaningUp, "releasing the old machine");
  drop_connection(box.id);
  st = co_await backend_.release(box.id, machines::DataPolicy::kKeep);
  if (st.code() == Code::kNotFound) st = ok_status();  // no machine: nothing to release
  if (st.ok() && !preserve_data) {
    // A new box in all but name: its files, its agent (agent.db, box key) start empty.
    auto dir = options_.data_dir / "boxes" / box.id;
    std::error_code ec;
    for (const char* sub : {"workspace", "home", "agent"})
      std::filesystem::remove_all(dir / sub, ec);
  }
  if (st.ok()) st = co_await boot(box, op, true);
  if (!*alive) co_return;
  if (st.ok() && data_lost) co_await restore_lost_data(box, op);
  if (!*alive) co_return;
  if (st.ok()) {
    std::string what = preserve_data ? "recreated, data kept" : "recreated";
    co_await finish(op, Phase::kDone, std::move(what));
  } else {
    (void)co_await set_state(box, BoxState::kFailed, std::string(st.message()));
    co_await finish(op, Phase::kFailed, std::string(st.message()));
  }
  release(box.id);
}

asio::awaitable<void> BoxManager::run_remove(Box box, Operation op) {
  auto alive = alive_;
  co_await event(op, Phase::kCleaningUp, "releasing the machine");
  drop_connection(box.id);
  Status st = co_await backend_.release(box.id, machines::DataPolicy::kDelete);
  if (!*alive) co_return;
  if (st.code() == Code::kNotFound) st = ok_status();  // never started: nothing to release
  if (st.ok()) {
    Status m = co_await store_.mark_deleted(box.id);
    std::error_code ec;
    std::filesystem::remove_all(options_.data_dir / "boxes" / box.id, ec);
    notify_changed();
    if (m.ok()) {
      co_await finish(op, Phase::kDone, "deleted");
    } else {
      co_await finish(op, Phase::kFailed, std::string(m.message()));
    }
  } else {
    (void)co_await set_state(box, BoxState::kFailed, std::string(st.message()));
    co_await finish(op, Phase::kFailed, std::string(st.message()));
  }
  release(box.id);
  runtimes_.erase(box.id);
}

// ---- public verbs ----

asio::awaitable<Result<BoxView>> BoxManager::ensure(int64_t user_id, std::string name, bool wait,
                                                    std::string* operation_id) {
  if (name.empty()) name = "main";
  CO_RETURN_IF_ERROR(validate_box_name(name));
  auto found = co_await store_.get_box(user_id, name);
  Box box;
  if (found.ok()) {
    box = std::move(*found);
  } else if (found.status().code() == Code::kNotFound) {
    // A new box starts at once: refuse over the running quota before creating it.
    Status quota = co_await check_running_quota(user_id);
    if (!quota.ok()) co_return quota;
    auto created =
        co_await store_.create_box(user_id, name, options_.image, std::string(backend_.name()));
    if (!created.ok()) co_return created.status();
    box = std::move(*created);
    notify_changed();
  } else {
    co_return found.status();
  }
  CO_RETURN_IF_ERROR(co_await acquire(box.id));
  // Re-read under the box's lock: another operation may have just changed it.
  auto fresh = co_await store_.get_box_by_id(box.id);
  if (fresh.ok()) box = std::move(*fresh);
  if (box.state == BoxState::kRunning) {
    release(box.id);
    if (operation_id != nullptr) operation_id->clear();
    co_return co_await view(box);
  }
  // Quota: starting or waking makes the box count against max_running.
  Status quota = co_await check_running_quota(user_id);
  if (!quota.ok()) {
    release(box.id);
    co_return quota;
  }
  auto op = co_await start_operation(box, "ensure");
  if (!op.ok()) {
    release(box.id);
    co_return op.status();
  }
  if (operation_id != nullptr) *operation_id = op->id;
  asio::co_spawn(executor_, run_ensure(box, *op), asio::detached);
  if (wait) {
    co_await wait_operation(box.id);
  } else {
    // Let the operation mark STARTING before answering.
    net::Timer t(executor_, net::after(std::chrono::milliseconds(0)));
    co_await t.async_wait();
  }
  auto now = co_await store_.get_box_by_id(box.id);
  if (!now.ok()) co_return now.status();
  co_return co_await view(*now);
}

asio::awaitable<Status> BoxManager::check_running_quota(int64_t user_id) {
  auto user = co_await store_.get_user(user_id);
  auto running = co_await store_.count_running(user_id);
  if (user.ok() && running.ok() && *running >= user->max_running) {
    co_return resource_exhausted(
        fmt::format("max_running quota reached ({} of {} boxes running); hibernate one first",
                    *running, user->max_running));
  }
  co_return ok_status();
}

asio::awaitable<Result<BoxView>> BoxManager::get(int64_t user_id, std::string ref) {
  if (ref.empty()) ref = "main";
  auto box = co_await store_.get_box(user_id, ref);
  if (!box.ok()) co_return box.status();
  co_return co_await view(*box);
}

asio::awaitable<Result<std::vector<BoxView>>> BoxManager::list(int64_t user_id) {
  auto boxes = co_await store_.list_boxes(user_id);
  if (!boxes.ok()) co_return boxes.status();
  std::vector<BoxView> out;
  for (auto& b : *boxes) {
    auto v = co_await view(std::move(b));
    out.push_back(std::move(*v));
  }
  co_return out;
}

asio::awaitable<Result<Box>> BoxManager::lock_box(int64_t user_id, std::string ref) {
  if (ref.empty()) ref = "main";
  auto found = co_await store_.get_box(user_id, ref);
  if (!found.ok()) co_return found.status();
  Box box = std::move(*found);
  CO_RETURN_IF_ERROR(co_await acquire(box.id));
  // Re-read under the box's lock: another operation may have just changed it.
  auto fresh = co_await store_.get_box_by_id(box.id);
  if (fresh.ok()) box = std::move(*fresh);
  co_return box;
}

asio::awaitable<Result<Operation>> BoxManager::hibernate(int64_t user_id, std::string ref) {
  auto locked = co_await lock_box(user_id, std::move(ref));
  if (!locked.ok()) co_return locked.status();
  Box box = std::move(*locked);
  if (box.state != BoxState::kRunning) {
    release(box.id);
    co_return failed_precondition(
        fmt::format("box {} is not running (it is {})", box.name, box_state_name(box.state)));
  }
  auto op = co_await start_operation(box, "hibernate");
  if (!op.ok()) {
    release(box.id);
    co_return op.status();
  }
  asio::co_spawn(executor_, run_hibernate(box, *op), asio::detached);
  co_return *op;
}

asio::awaitable<Result<Operation>> BoxManager::recreate(int64_t user_id, std::string ref,
                                                        bool preserve_data) {
  auto locked = co_await lock_box(user_id, std::move(ref));
  if (!locked.ok()) co_return locked.status();
  Box box = std::move(*locked);
  if (box.state != BoxState::kRunning && box.state != BoxState::kStarting) {
    // A recreated box runs: one that did not count against max_running now would.
    Status quota = co_await check_running_quota(user_id);
    if (!quota.ok()) {
      release(box.id);
      co_return quota;
    }
  }
  std::string params = preserve_data ? std::string(kPreserveData) : std::string();
  auto op = co_await start_operation(box, "recreate", std::move(params));
  if (!op.ok()) {
    release(box.id);
    co_return op.status();
  }
  asio::co_spawn(executor_, run_recreate(box, *op, preserve_data), asio::detached);
  co_return *op;
}

asio::awaitable<Result<Operation>> BoxManager::remove(int64_t user_id, std::string ref) {
  auto locked = co_await lock_box(user_id, std::move(ref));
  if (!locked.ok()) co_return locked.status();
  Box box = std::move(*locked);
  auto op = co_await start_operation(box, "delete");
  if (!op.ok()) {
    release(box.id);
    co_return op.status();
  }
  asio::co_spawn(executor_, run_remove(box, *op), asio::detached);
  co_return *op;
}

asio::awaitable<void> BoxManager::release_deleted() {
  auto boxes = co_await store_.list_all_boxes();
  if (!boxes.ok()) {
    log::error("cannot list boxes", {{"error", boxes.status().to_string()}});
    co_return;
  }
  for (auto& box : *boxes) {
    if (!box.deleted_at_ms || box.state == BoxState::kAbsent) continue;
    Status locked = co_await acquire(box.id);
    if (!locked.ok()) continue;
    (void)backend_.adopt(spec_for(box));  // tracked already, or found again after a restart
    drop_connection(box.id);
    Status st = co_await backend_.release(box.id, machines::DataPolicy::kDelete);
    if (st.ok() || st.code() == Code::kNotFound) {
      std::error_code ec;
      std::filesystem::remove_all(options_.data_dir / "boxes" / box.id, ec);
      log::info("box of a removed user released", {{"box", box.id}});
      (void)co_await set_state(box, BoxState::kAbsent, "deleted with its user");
    } else {
      log::warn("cannot release a removed user's box; retrying at the next change",
                {{"box", box.id}, {"error", st.to_string()}});
    }
    release(box.id);
    runtimes_.erase(box.id);
  }
}

asio::awaitable<void> BoxManager::release_boxes(std::vector<std::string> box_ids) {
  for (const auto& id : box_ids) {
    drop_connection(id);
    Status st = co_await backend_.release(id, machines::DataPolicy::kDelete);
    if (!st.ok()) log::warn("release failed", {{"box", id}, {"error", st.to_string()}});
    std::error_code ec;
    std::filesystem::remove_all(options_.data_dir / "boxes" / id, ec);
    runtimes_.erase(id);
  }
  notify_changed();
}

asio::awaitable<Result<std::pair<Box, std::shared_ptr<http::H2Connection>>>> BoxManager::connect(
    int64_t user_id, std::string ref) {
  if (ref.empty()) ref = "main";
  auto found = co_await store_.get_box(user_id, ref);
  if (!found.ok()) co_return found.status();
  Box box = std::move(*found);
  auto& rt = runtime(box.id);
  if (box.state == BoxState::kRunning && rt.conn && rt.conn->accepting_streams() && !rt.busy)
    co_return std::make_pair(box, rt.conn);
  if (box.state == BoxState::kRunning && !rt.busy) {
    // No live connection: make sure the machine is still there. One that died under a
    // RUNNING box (killed, crashed) is started again, with its data, as Ensure would.
    auto machine = backend_.status(box.id);
    if (machine.ok() && *machine != machines::MachineState::kRunning) {
      log::warn("box machine gone while running; starting it again", {{"box", box.id}});
      drop_connection(box.id);
      (void)co_await set_state(box, BoxState::kFailed, "the machine exited unexpectedly");
    }
  }
  // Not running (or the connection went away): wake or start it as Ensure would.
  if (box.state != BoxState::kRunning || rt.busy) {
    auto ensured = co_await ensure(user_id, box.name, true);
    if (!ensured.ok()) co_return ensured.status();
    box = ensured->box;
    if (box.state != BoxState::kRunning)
      co_return unavailable(fmt::format("box {} did not start: {}", box.name, box.detail));
  }
  if (rt.conn && rt.conn->accepting_streams()) co_return std::make_pair(box, rt.conn);
  auto endpoint = backend_.address(box.id);
  if (!endpoint.ok()) co_return endpoint.status();
  auto stream = co_await endpoint->dial(net::after(std::chrono::seconds(5)));
  if (!stream.ok())
    co_return unavailable(fmt::format("dial box {}: {}", box.name, stream.status().message()));
  rt.conn = http::H2Connection::make(std::move(*stream), http::H2Connection::Side::kClient,
                                     http::H2Options{});
  rt.conn->start();
  co_return std::make_pair(box, rt.conn);
}

// ---- recovery and idling ----

asio::awaitable<void> BoxManager::recover() {
  // Operations cut short: the newest ensure, hibernate or recreate of each box is resumed where
  // it stood (its steps are idempotent); a delete is finished; anything else ends FAILED.
  auto unfinished = co_await store_.list_unfinished_operations();
  std::map<std::string, Operation> resumed;  // box id -> its operation
  std::vector<Operation> others;
  if (unfinished.ok()) {
    for (const auto& op : *unfinished) {  // oldest first
      if (op.kind != "ensure" && op.kind != "hibernate" && op.kind != "recreate") {
        others.push_back(op);
        continue;
      }
      auto it = resumed.find(op.box_id);
      if (it != resumed.end()) others.push_back(std::move(it->second));
      resumed[op.box_id] = op;
    }
  } else {
    log::error("recovery: cannot list operations", {{"error", unfinished.status().to_string()}});
  }

  co_await release_deleted();
  auto boxes = co_await store_.list_all_boxes();
  if (!boxes.ok()) {
    log::error("recovery: cannot list boxes", {{"error", boxes.status().to_string()}});
    co_return;
  }
  for (auto& box : *boxes) {
    if (box.deleted_at_ms) continue;
    Status adopted = backend_.adopt(spec_for(box));
    if (resumed.count(box.id)) continue;  // the resumed operation decides its state
    auto state = backend_.status(box.id);
    BoxState target = BoxState::kAbsent;
    std::string detail;
    if (adopted.ok() && state.ok() && *state == machines::MachineState::kFrozen) {
      target = BoxState::kHibernated;
    } else if (adopted.ok() && state.ok() && *state == machines::MachineState::kRunning) {
      Status ready = co_await wait_ready(box, box.wake_id);
      target = ready.ok() ? BoxState::kRunning : BoxState::kFailed;
      if (!ready.ok())
        detail = "re-adopted machine did not answer: " + std::string(ready.message());
    } else if (box.state != BoxState::kAbsent) {
      detail = "machine was gone after an api restart; Ensure starts it again with its data";
    }
    if (target != box.state || !detail.empty()) {
      log::info("recovery: box reconciled", {{"box", box.id},
                                             {"from", static_cast<int>(box.state)},
                                             {"to", static_cast<int>(target)}});
      (void)co_await set_state(box, target, detail);
    }
  }

  for (const auto& op : others) {
    auto box = co_await store_.get_box_by_id(op.box_id);
    std::string now = box.ok() ? fmt::format("state {}", static_cast<int>(box->state)) : "gone";
    if (op.kind == "delete" && box.ok() && !box->deleted_at_ms) {
      // A delete that was cut short is finished: the user asked for it.
      (void)co_await backend_.release(op.box_id, machines::DataPolicy::kDelete);
      (void)co_await store_.mark_deleted(op.box_id);
      std::error_code ec;
      std::filesystem::remove_all(options_.data_dir / "boxes" / op.box_id, ec);
      co_await finish(op, Phase::kDone, "deleted (resumed after an api restart)");
      continue;
    }
    co_await finish(op, Phase::kFailed,
                    fmt::format("api restarted during {}; box reconciled to {}", op.kind, now));
  }

  for (auto& [box_id, op] : resumed) {
    auto box = co_await store_.get_box_by_id(box_id);
    if (!box.ok() || box->deleted_at_ms) {
      co_await finish(op, Phase::kFailed, "api restarted and the box is gone");
      continue;
    }
    log::info("recovery: resuming operation", {{"op", op.id}, {"box", box_id}, {"kind", op.kind}});
    co_await event(op, op.phase, "api restarted; resuming " + op.kind);
    Status locked = co_await acquire(box_id);
    if (!locked.ok()) co_return;
    runtime(box_id).current_operation = op.id;
    if (op.kind == "ensure") {
      asio::co_spawn(executor_, run_ensure(*box, op), asio::detached);
    } else if (op.kind == "hibernate") {
      asio::co_spawn(executor_, run_hibernate(*box, op), asio::detached);
    } else {
      asio::co_spawn(executor_, run_recreate(*box, op, op.params == kPreserveData), asio::detached);
    }
  }
}

void BoxManager::start_idle_loop() {
  if (options_.idle_hibernate.count() <= 0) return;
  asio::co_spawn(executor_, idle_loop(), asio::detached);
}

asio::awaitable<void> BoxManager::idle_loop() {
  auto alive = alive_;
  auto period =
      std::min<std::chrono::milliseconds>(options_.idle_hibernate / 4, std::chrono::seconds(5));
  period = std::max<std::chrono::milliseconds>(period, std::chrono::milliseconds(50));
  net::Timer t(executor_);
  while (*alive && !stopping_) {
    t.expires_after(period);
    co_await t.async_wait();
    if (!*alive || stopping_) co_return;
    auto boxes = co_await store_.list_all_boxes();
    if (!boxes.ok()) continue;
    auto now = std::chrono::steady_clock::now();
    for (auto& box : *boxes) {
      if (box.deleted_at_ms || box.state != BoxState::kRunning) continue;
      auto& rt = runtime(box.id);
      if (rt.attached > 0 || rt.busy || now - rt.last_activity < options_.idle_hibernate) continue;
      log::info("box idle, hibernating", {{"box", box.id}});
      auto op = co_await hibernate(box.user_id, box.id);
      if (!op.ok()) log::warn("idle hibernate failed", {{"box", box.id}});
    }
  }
}

}  // namespace cb::api
