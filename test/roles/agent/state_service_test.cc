// The agent's State service (state_service.h): absolute object URLs (an S3 store's presigned
// URLs), and quiesced saves (issue 7 item 2): State.Save with quiesced waits for the
// agent's running turns, then saves a consistent copy of agent.db (agent/agent.db) with the
// files; a whole restore into a fresh agent puts the transcript back. A real in-process agent,
// test/support/fake_gateway.py as its model, and a stand-in for the api's door: a real HTTP
// server on a unix socket over a real FsStore that hands out URLs for every chunk asked about.

// gcc 12 at -O2 warns that a coroutine frame (db::Worker::run() inlined into a test's
// coroutine) is deleted "with nonzero offset" (-Wfree-nonheap-object): a false positive of its
// coroutine lowering, reported inside <memory>, so it is turned off before any include.
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

#include "roles/agent/state_service.h"

#include "agent_harness.h"
#include "cocoonbox/agent/v1/agents.cbgrpc.h"
#include "cocoonbox/agent/v1/state.cbgrpc.h"
#include "crypto/keys.h"
#include "db/database.h"
#include "grpc/client.h"
#include "http/server.h"
#include "state/chunk.h"
#include "state/chunk_batch.h"
#include "state/chunker.h"
#include "state/fs_store.h"
#include "state/manifest.h"
#include "state/snapshot.h"
#include "support/fake_gateway.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace cb::agent {
namespace {

namespace v1 = cocoonbox::agent::v1;
using nlohmann::json;
using namespace std::chrono_literals;
using test::call_options_with;
using test::one;
using test::Setup;
using test::with_agent;

constexpr std::string_view kUser = "u1";
constexpr std::string_view kBoxSeg = "bx_quiesce";

// The api's door for these tests: POST /cocoonbox.state/v1/urls answers a URL for every id
// (put: those the store lacks), and /obj?k=<key> GETs and PUTs objects of the store. With
// |batch| its answers say so, and POST /cocoonbox.state/v1/chunks/{get,put} carry many chunks
// (state/chunk_batch.h) as the api's door does with the filesystem store. A batch door answers
// a put without URLs ("urls": false) with the ids the store lacks as "missing", as the api's
// does, unless |signs_puts| (as an older api, which signed a URL for each anyway).
class Door {
 public:
  Door(net::Executor executor, state::Store& store, bool batch = false, bool signs_puts = false)
      : store_(store), batch_(batch), signs_puts_(signs_puts) {
    router_.handle("POST", "/cocoonbox.state/v1/urls",
                   [this](http::ServerRequest& req) { return urls(req); });
    router_.handle("", "/obj", [this](http::ServerRequest& req) { return object(req); });
    if (batch) {
      router_.handle("POST", "/cocoonbox.state/v1/chunks/get",
                     [this](http::ServerRequest& req) { return batch_get(req); });
      router_.handle("POST", "/cocoonbox.state/v1/chunks/put",
                     [this](http::ServerRequest& req) { return batch_put(req); });
    }
    server_ = std::make_unique<http::Server>(executor, router_, http::ServerOptions{});
  }
  Status listen(const std::string& path) {
    RETURN_IF_ERROR(server_->listen_unix(path));
    server_->start();
    return ok_status();
  }
  asio::awaitable<void> stop() { co_await server_->shutdown(net::after(2s)); }
  // The |n|th chunk PUT from now on answers 500 (0: none does).
  void fail_put(int n) {
    puts_ = 0;
    fail_put_at_ = n;
  }
  static std::string url(const std::string& key) { return "/obj?k=" + key; }
  // Requests that carried chunks: one chunk each (to /obj), or a batch.
  int chunk_requests() const { return chunk_requests_; }
  int batch_requests() const { return batch_requests_; }
  // URLs answered for puts.
  int put_urls() const { return put_urls_; }
  void reset_counts() { chunk_requests_ = batch_requests_ = put_urls_ = 0; }

 private:
  static asio::awaitable<std::string> body(http::ServerRequest& req) {
    std::string out;
    for (;;) {
      auto piece = co_await req.read();
      if (!piece.ok() || piece->empty()) break;
      out += *piece;
    }
    co_return out;
  }
  asio::awaitable<void> urls(http::ServerRequest& req) {
    std::string text = co_await body(req);
    json doc = json::parse(text, nullptr, false);
    json out = json::object();
    const bool put = doc.value("op", "") == "put";
    // As the api's door: a "get" without URLs ("urls": false) gets none from a batch door, a
    // "put" the missing ids.
    const bool no_urls = batch_ && doc.contains("urls") && doc["urls"] == false;
    const bool answer_missing = no_urls && put && !signs_puts_;
    json missing = json::array();
    for (const auto& v : doc["ids"]) {
      if (no_urls && !put) break;
      auto id = state::ChunkId::from_hex(v.get<std::string>());
      if (!id.ok()) continue;
      const std::string key = state::chunk_key(std::string(kUser), *id);
      if (put && store_.stat(key).ok()) continue;
      if (answer_missing) {
        missing.push_back(v);
        continue;
      }
      out[v.get<std::string>()] = url(key);
      if (put) ++put_urls_;
    }
    json resp{{"urls", out}};
    if (batch_) resp["batch"] = true;
    if (answer_missing) resp["missing"] = missing;
    (void)co_await http::respond(req, 200, "application/json", resp.dump());
  }
  asio::awaitable<void> batch_get(http::ServerRequest& req) {
    ++batch_requests_;
    auto ids = state::decode_batch_ids(co_await body(req));
    if (!ids.ok()) {
      (void)co_await http::respond(req, 400, "text/plain", ids.status().to_string());
      co_return;
    }
    // Like the api's door at its answer's size limit, it answers only the first ids (5 here),
    // and the agent asks again for the rest.
    std::vector<std::string> keys;
    for (const auto& id : *ids) {
      if (keys.size() == kItemsPerAnswer) break;
      keys.push_back(state::chunk_key(std::string(kUser), id));
    }
    std::string out;
    for (const auto& item : store_.get_many(keys)) state::append_batch_item(out, item);
    (void)co_await http::respond(req, 200, "application/octet-stream", out);
  }
  asio::awaitable<void> batch_put(http::ServerRequest& req) {
    ++batch_requests_;
    const std::string data = co_await body(req);
    auto items = state::decode_put_items(data);
    if (!items.ok()) {
      (void)co_await http::respond(req, 400, "text/plain", items.status().to_string());
      co_return;
    }
    for (const auto& item : *items) {
      if (++puts_ == fail_put_at_) {
        (void)co_await http::respond(req, 500, "text/plain", "injected failure");
        co_return;
      }
      Status st = store_.put(state::chunk_key(std::string(kUser), item.id), item.data);
      if (!st.ok()) {
        (void)co_await http::respond(req, 500, "text/plain", st.to_string());
        co_return;
      }
    }
    (void)co_await http::respond(req, 200, "text/plain", "stored");
  }
  asio::awaitable<void> object(http::ServerRequest& req) {
    const std::string& target = req.head().path;
    const std::string key = target.substr(target.find("?k=") + 3);
    if (key.find("/chunks/") != std::string::npos) ++chunk_requests_;
    if (req.head().method == "PUT") {
      std::string data = co_await body(req);
      if (++puts_ == fail_put_at_) {
        (void)co_await http::respond(req, 500, "text/plain", "injected failure");
        co_return;
      }
      Status st = store_.put(key, data);
      (void)co_await http::respond(req, st.ok() ? 200 : 500, "text/plain", st.to_string());
      co_return;
    }
    auto data = store_.get(key);
    if (!data.ok()) {
      (void)co_await http::respond(req, 404, "text/plain", data.status().to_string());
      co_return;
    }
    (void)co_await http::respond(req, 200, "application/octet-stream", *data);
  }

  static constexpr size_t kItemsPerAnswer = 5;
  state::Store& store_;
  const bool batch_;
  const bool signs_puts_;
  http::Router router_;
  std::unique_ptr<http::Server> server_;
  // The door runs on the test's one executor thread.
  int puts_ = 0;
  int fail_put_at_ = 0;
  int chunk_requests_ = 0;
  int batch_requests_ = 0;
  int put_urls_ = 0;
};

struct World {
  Setup s;
  test::TempDir store_dir;
  std::unique_ptr<state::FsStore> store;
  std::string state_key = std::string(32, '\x5a');

  World() {
    auto opened = state::FsStore::open(store_dir.path());
    REQUIRE(opened.status() == ok_status());
    store = std::move(*opened);
    std::filesystem::create_directories(s.dir.path() / "home");
    std::filesystem::create_directories(s.dir.path() / "ws");
    s.deliver();
  }
  AgentConfig config(const cb::test::FakeGateway& gw, std::chrono::milliseconds quiesce) {
    AgentConfig c = s.config();
    c.agents.model_endpoint = gw.url();
    c.agents.main.name = "test-model";
    c.agents.main.wire = model::Wire::kAnthropic;
    c.agents.retry.max_attempts = 1;
    c.exec.workspace = (s.dir.path() / "ws").string();
    StateConfig st;
    st.home = (s.dir.path() / "home").string();
    st.workspace = (s.dir.path() / "ws").string();
    st.door_socket = (s.dir.path() / "door.sock").string();
    st.quiesce_timeout = quiesce;
    c.state = st;
    return c;
  }
  v1::StateAccess access() const {
    v1::StateAccess a;
    a.set_state_key(state_key);
    a.set_user(std::string(kUser));
    a.set_box(std::string(kBoxSeg));
    a.set_ticket("ticket");
    return a;
  }
};

// The api's commit of |manifest| as snapshot |snapshot_id|, done here with the library: the
// manifest, record, timeline and head.
void commit_with_library(World& w, const state::Manifest& manifest, const std::string& snapshot_id,
                         bool quiesced) {
  state::StateKeys keys(*crypto::SymmetricKey::from_bytes(w.state_key));
  state::Record record;
  record.snapshot_id = snapshot_id;
  record.box = std::string(kBoxSeg);
  record.saved_at_ms = 1'800'000'000'000;
  record.quiesced = quiesced;
  const state::BoxLocation location{std::string(kUser), std::string(kBoxSeg)};
  REQUIRE(
      state::commit_snapshot(*w.store, keys, location, manifest, record, crypto::system_random())
          .status() == ok_status());
}

// A fresh machine for the same box: new, empty home and workspace (and data dir if
// |with_data|).
void fresh_machine(World& w, bool with_data) {
  const auto dir = w.s.dir.path();
  if (with_data) std::filesystem::remove_all(dir / "data");
  for (const char* d : {"home", "ws"}) {
    std::filesystem::remove_all(dir / d);
    std::filesystem::create_directories(dir / d);
  }
}

std::shared_ptr<grpc::Channel> channel_to(const Agent& agent, const net::Executor& executor) {
  grpc::ChannelOptions options;
  options.dial.unix_path = agent.socket_path();
  return grpc::Channel::create(executor, std::move(options));
}

struct SaveCall {
  Status status = internal_error("not run");
  std::string manifest;
  std::optional<v1::SaveDone> done;
};

asio::awaitable<SaveCall> call_save(std::shared_ptr<grpc::Channel> channel,
                                    const std::string& credential, v1::SaveRequest req) {
  SaveCall out;
  v1::State::Stub stub(std::move(channel));
  auto reader = co_await stub.Save(req, call_options_with(one(credential), 60s));
  if (!reader.ok()) {
    out.status = reader.status();
    co_return out;
  }
  for (;;) {
    auto msg = co_await reader->read();
    if (!msg) break;
    if (msg->has_manifest_part()) out.manifest += msg->manifest_part();
    if (msg->has_done()) out.done = msg->done();
  }
  out.status = co_await reader->finish();
  co_return out;
}

// State.Restore of the whole snapshot |snapshot_id| (committed with commit_with_library()).
asio::awaitable<Status> call_restore_whole(std::shared_ptr<grpc::Channel> channel,
                                           const std::string& credential, v1::StateAccess access,
                                           std::string snapshot_id) {
  const state::BoxLocation location{std::string(kUser), std::string(kBoxSeg)};
  v1::State::Stub state_stub(std::move(channel));
  v1::RestoreRequest req;
  *req.mutable_access() = std::move(access);
  req.set_snapshot_id(snapshot_id);
  req.set_manifest_url(Door::url(state::manifest_key(location, snapshot_id)));
  req.set_whole(true);
  auto reader = co_await state_stub.Restore(req, call_options_with(one(credential), 60s));
  if (!reader.ok()) co_return reader.status();
  while (auto msg = co_await reader->read()) {
  }
  co_return co_await reader->finish();
}

// Polls List until the agent's last turn is in |state| (or 600 polls pass).
asio::awaitable<bool> wait_turn(v1::Agents::Stub& stub, const std::string& credential,
                                v1::TurnState state) {
  auto exec = co_await asio::this_coro::executor;
  for (int i = 0; i < 600; ++i) {
    v1::ListAgentsRequest lr;
    auto list = co_await stub.List(lr, call_options_with(one(credential)));
    if (list.ok() && list->agents_size() == 1 && list->agents(0).last_turn().state() == state)
      co_return true;
    net::Timer t(exec, 50ms);
    co_await t.async_wait();
  }
  co_return false;
}

TEST_CASE("parse_object_url: http and https presigned URLs, sent as given", "[agent][state]") {
  auto plain =
      parse_object_url("http://127.0.0.1:7480/bucket/u1/chunks/ab/abcd?X-Amz-Signature=ff%2F");
  REQUIRE(plain.status() == ok_status());
  CHECK_FALSE(plain->tls);
  CHECK(plain->host == "127.0.0.1");
  CHECK(plain->port == 7480);
  CHECK(plain->target == "/bucket/u1/chunks/ab/abcd?X-Amz-Signature=ff%2F");
  auto tls = parse_object_url("https://s3.example.com/b/k");
  REQUIRE(tls.status() == ok_status());
  CHECK(tls->tls);
  CHECK(tls->host == "s3.example.com");
  CHECK(tls->port == 443);
  CHECK(tls->target == "/b/k");
  auto v6 = parse_object_url("http://[::1]:9000");
  REQUIRE(v6.status() == ok_status());
  CHECK(v6->host == "::1");
  CHECK(v6->port == 9000);
  CHECK(v6->target == "/");
  for (const char* bad : {"ftp://h/x", "/cocoonbox.state/v1/o/x", "http://", "http://h:0/x",
                          "http://h:99999/x", "http://h:x/y", "http://user@h/x", "http://:80/x"}) {
    INFO(bad);
    CHECK(parse_object_url(bad).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("State.Save quiesced waits for the running turn, then saves agent.db's copy with it",
          "[agent][state][integration]") {
  World w;
  cb::test::FakeGateway gw(w.s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  // The model answers 2 s after the request: the turn is running when the save starts.
  REQUIRE(
      gw.set_script(
            json::array({{{"wire", "anthropic"}, {"text", "the quiesced answer"}, {"delay", 2}}}))
          .ok());
  const std::string credential = w.s.credential();
  bool was_running = false;
  SaveCall saved;
  std::string agent_id;
  with_agent(w.config(gw, 60s), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store);
    if (!door.listen((w.s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    v1::Agents::Stub agents(channel);
    v1::CreateAgentRequest create;
    auto a = co_await agents.Create(create, call_options_with(one(credential)));
    if (a.ok()) {
      agent_id = a->id();
      v1::SendRequest send;
      send.set_agent_id(a->id());
      send.set_prompt("remember the quiesce test");
      auto sent = co_await agents.Send(send, call_options_with(one(credential)));
      if (sent.ok()) was_running = co_await wait_turn(agents, credential, v1::TURN_RUNNING);
      v1::SaveRequest req;
      *req.mutable_access() = w.access();
      req.set_quiesced(true);
      saved = co_await call_save(channel, credential, std::move(req));
    }
    channel->close();
    co_await door.stop();
  });
  REQUIRE(was_running);
  REQUIRE(saved.status == ok_status());
  REQUIRE(saved.done.has_value());
  CHECK(saved.done->quiesced());
  CHECK(saved.done->uploaded_chunks() >= 1);

  // The manifest holds the copy, and so does the agent's copy folder.
  auto manifest = state::decode_manifest(saved.manifest);
  REQUIRE(manifest.status() == ok_status());
  bool in_manifest = false;
  for (const auto& e : manifest->entries) in_manifest = in_manifest || e.path == "agent/agent.db";
  CHECK(in_manifest);
  const auto copy = w.s.dir.path() / "data" / "state" / "agent.db";
  auto db = db::Database::open(copy);
  REQUIRE(db.status() == ok_status());
  // The copy was taken after the turn ended: the model's answer is in it, the turn is done.
  auto turns = db->prepare("SELECT state FROM turns WHERE agent_id = ?1");
  REQUIRE(turns.status() == ok_status());
  REQUIRE(turns->bind_text(1, agent_id) == ok_status());
  auto row = turns->step();
  REQUIRE(row.status() == ok_status());
  REQUIRE(*row);
  CHECK(std::string(turns->column_text(0)) == "done");
  auto items = db->prepare("SELECT group_concat(payload, ' ') FROM items WHERE agent_id = ?1");
  REQUIRE(items.status() == ok_status());
  REQUIRE(items->bind_text(1, agent_id) == ok_status());
  auto item_row = items->step();
  REQUIRE(item_row.status() == ok_status());
  REQUIRE(*item_row);
  const std::string transcript(items->column_text(0));
  CHECK(transcript.find("remember the quiesce test") != std::string::npos);
  CHECK(transcript.find("the quiesced answer") != std::string::npos);
}

TEST_CASE("State.Save uploads many chunks on its uploading threads; a failed PUT fails the save",
          "[agent][state][integration]") {
  // One chunk per request, or many with a door that takes batches: the api's, which answers a
  // put's missing ids without URLs, or an older one, which signs a URL for each.
  const auto [batch, signs_puts] =
      GENERATE(std::pair{false, false}, std::pair{true, false}, std::pair{true, true});
  INFO("batch " << batch << ", signs puts " << signs_puts);
  World w;
  cb::test::FakeGateway gw(w.s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  // 60 small files and a 2 MiB one: about 90 chunks, so every uploading thread has work.
  for (int i = 0; i < 60; ++i) {
    std::ofstream(w.s.dir.path() / "home" / ("f" + std::to_string(i)))
        << std::string(3000 + i, char('a' + i % 26)) << i;
  }
  {
    std::string big(2u << 20, '\0');
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (char& c : big) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c = char(x);
    }
    std::ofstream(w.s.dir.path() / "ws" / "big.bin", std::ios::binary) << big;
  }
  const std::string credential = w.s.credential();
  SaveCall failed, saved;
  std::pair<int, int> save_requests, restore_requests;  // chunk requests, batch requests
  int put_urls = 0;
  with_agent(w.config(gw, 60s), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store, batch, signs_puts);
    if (!door.listen((w.s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    door.fail_put(20);
    v1::SaveRequest first;
    *first.mutable_access() = w.access();
    failed = co_await call_save(channel, credential, std::move(first));
    door.fail_put(0);
    door.reset_counts();
    v1::SaveRequest second;
    *second.mutable_access() = w.access();
    saved = co_await call_save(channel, credential, std::move(second));
    save_requests = {door.chunk_requests(), door.batch_requests()};
    put_urls = door.put_urls();
    channel->close();
    co_await door.stop();
  });
  CHECK(failed.status.code() != Code::kOk);
  CHECK(std::string(failed.status.message()).find("injected failure") != std::string::npos);
  REQUIRE(saved.status == ok_status());
  REQUIRE(saved.done.has_value());
  auto manifest = state::decode_manifest(saved.manifest);
  REQUIRE(manifest.status() == ok_status());
  // Every chunk the manifest names is in the store, whole: it opens under its id.
  state::StateKeys keys(*crypto::SymmetricKey::from_bytes(w.state_key));
  const std::vector<state::ChunkId> ids = state::referenced_chunks(*manifest);
  CHECK(ids.size() > 80);
  for (const auto& id : ids) {
    auto sealed = w.store->get(state::chunk_key(std::string(kUser), id));
    REQUIRE(sealed.status() == ok_status());
    CHECK(state::open_chunk(keys, id, *sealed).ok());
  }
  // The failed save had stored some: the second uploaded only the rest.
  CHECK(saved.done->uploaded_chunks() > 0);
  CHECK(saved.done->uploaded_chunks() + 19 <= ids.size());

  // Committed (the api's part, done here with the library), then restored whole onto a fresh
  // machine: the restore fetches those chunks on its fetch threads, each with its own client.
  const std::string snapshot_id = "20261201T120000.000Z-0000beef";
  commit_with_library(w, *manifest, snapshot_id, false);
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::map<std::string, std::string> before;
  for (const auto& e : std::filesystem::recursive_directory_iterator(w.s.dir.path() / "home")) {
    if (e.is_regular_file()) before[e.path().filename().string()] = read(e.path());
  }
  before["big.bin"] = read(w.s.dir.path() / "ws" / "big.bin");
  fresh_machine(w, false);
  Status restored = internal_error("not run");
  with_agent(w.config(gw, 60s), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store, batch);
    if (!door.listen((w.s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    v1::StateAccess access = w.access();  // named: gcc 12 and temporaries passed to coroutines
    restored = co_await call_restore_whole(channel, credential, access, snapshot_id);
    restore_requests = {door.chunk_requests(), door.batch_requests()};
    channel->close();
    co_await door.stop();
  });
  REQUIRE(restored == ok_status());
  // Without batches a request per chunk; with them none, and a batch per 16 chunks or so on
  // a save; on a restore (tasks of 16 spanning the small files) the door answers 5 ids at a
  // time, so the agent asks about 3 times per task.
  // The agent asks a batch door for no put URL; an older one signs them anyway.
  CHECK((put_urls > 0) == (!batch || signs_puts));
  if (batch) {
    CHECK(save_requests.first == 0);
    CHECK(save_requests.second > 0);
    CHECK(size_t(save_requests.second) <= saved.done->uploaded_chunks() / 8 + 2);
    CHECK(restore_requests.first == 0);
    CHECK(restore_requests.second > 0);
    CHECK(size_t(restore_requests.second) >= (ids.size() + 4) / 5);
    CHECK(size_t(restore_requests.second) <= ids.size() / 4 + 8);
  } else {
    CHECK(size_t(save_requests.first) == saved.done->uploaded_chunks());
    CHECK(save_requests.second == 0);
    CHECK(size_t(restore_requests.first) >= ids.size());
    CHECK(restore_requests.second == 0);
  }
  std::map<std::string, std::string> after;
  for (const auto& e : std::filesystem::recursive_directory_iterator(w.s.dir.path() / "home")) {
    if (e.is_regular_file()) after[e.path().filename().string()] = read(e.path());
  }
  after["big.bin"] = read(w.s.dir.path() / "ws" / "big.bin");
  CHECK(after.size() == 61);
  CHECK(after == before);
}

// Files another box of the user saved: the first batch asked about is mostly in the store,
// so the scanning threads stop sealing and later chunks wait as plaintext, sealed on an
// uploading thread once the store says it lacks them; then the new files' batches are sealed
// early again. Either way exactly the missing chunks are uploaded, each whole.
TEST_CASE("State.Save of files the store mostly has uploads exactly the chunks it lacks",
          "[agent][state][integration]") {
  World w;
  cb::test::FakeGateway gw(w.s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  state::StateKeys keys(*crypto::SymmetricKey::from_bytes(w.state_key));
  // 12 files of 4 MiB (3 batches of 16 MiB); the first 6 stored as another box would have.
  constexpr int kFiles = 12, kStored = 6;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  size_t stored_chunks = 0, new_chunks = 0;
  for (int i = 0; i < kFiles; ++i) {
    std::string data(4u << 20, '\0');
    for (char& c : data) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c = char(x);
    }
    std::ofstream(w.s.dir.path() / "home" / fmt::format("f{:02}", i), std::ios::binary) << data;
    std::span<const uint8_t> rest(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    for (size_t len : state::split_chunks(rest, state::kDefaultChunkerParams)) {
      const auto chunk = rest.first(len);
      rest = rest.subspan(len);
      if (i >= kStored) {
        ++new_chunks;
        continue;
      }
      const state::ChunkId id = keys.chunk_id(chunk);
      REQUIRE(
          w.store->put(state::chunk_key(std::string(kUser), id), state::seal_chunk(keys, id, chunk))
              .ok());
      ++stored_chunks;
    }
  }
  const std::string credential = w.s.credential();
  SaveCall saved;
  with_agent(w.config(gw, 60s), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store, /*batch=*/true);
    if (!door.listen((w.s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    v1::SaveRequest request;
    *request.mutable_access() = w.access();
    saved = co_await call_save(channel, credential, std::move(request));
    channel->close();
    co_await door.stop();
  });
  REQUIRE(saved.status == ok_status());
  REQUIRE(saved.done.has_value());
  CHECK(saved.done->uploaded_chunks() == new_chunks);
  auto manifest = state::decode_manifest(saved.manifest);
  REQUIRE(manifest.status() == ok_status());
  const std::vector<state::ChunkId> ids = state::referenced_chunks(*manifest);
  CHECK(ids.size() == stored_chunks + new_chunks);
  for (const auto& id : ids) {
    auto sealed = w.store->get(state::chunk_key(std::string(kUser), id));
    REQUIRE(sealed.status() == ok_status());
    CHECK(state::open_chunk(keys, id, *sealed).ok());
  }
}

TEST_CASE("State.Save quiesced refuses while a turn still runs after the quiesce timeout",
          "[agent][state][integration]") {
  World w;
  cb::test::FakeGateway gw(w.s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  // The model streams a little, then holds the turn open until the client goes away.
  REQUIRE(gw.set_script(json::array({{{"wire", "anthropic"},
                                      {"chunks", {"one ", "two ", "three"}},
                                      {"hold_after", 4}}}))
              .ok());
  const std::string credential = w.s.credential();
  bool was_running = false;
  SaveCall quiesced;
  SaveCall plain;
  with_agent(w.config(gw, 300ms), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store);
    if (!door.listen((w.s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    v1::Agents::Stub agents(channel);
    v1::CreateAgentRequest create;
    auto a = co_await agents.Create(create, call_options_with(one(credential)));
    if (a.ok()) {
      v1::SendRequest send;
      send.set_agent_id(a->id());
      send.set_prompt("count");
      auto sent = co_await agents.Send(send, call_options_with(one(credential)));
      if (sent.ok()) was_running = co_await wait_turn(agents, credential, v1::TURN_RUNNING);
      v1::SaveRequest req;
      *req.mutable_access() = w.access();
      req.set_quiesced(true);
      quiesced = co_await call_save(channel, credential, req);
      req.set_quiesced(false);
      plain = co_await call_save(channel, credential, req);
      v1::AgentRef ref;
      ref.set_agent_id(a->id());
      (void)co_await agents.Cancel(ref, call_options_with(one(credential), 30s));
    }
    channel->close();
    co_await door.stop();
  });
  REQUIRE(was_running);
  CHECK(quiesced.status.code() == Code::kFailedPrecondition);
  CHECK(quiesced.status.message().find("turns still running") != std::string::npos);
  // A save that is not quiesced does not wait, and takes no copy.
  REQUIRE(plain.status == ok_status());
  REQUIRE(plain.done.has_value());
  CHECK_FALSE(plain.done->quiesced());
  CHECK_FALSE(std::filesystem::exists(w.s.dir.path() / "data" / "state" / "agent.db"));
}

TEST_CASE("A whole restore puts a quiesced save's agent.db into a fresh agent",
          "[agent][state][integration]") {
  World w;
  cb::test::FakeGateway gw(w.s.dir / "model.sock");
  REQUIRE(gw.error().empty());
  REQUIRE(
      gw.set_script(json::array({{{"wire", "anthropic"}, {"text", "kept across machines"}}})).ok());
  const std::string credential = w.s.credential();
  SaveCall saved;
  std::string agent_id;
  with_agent(w.config(gw, 60s), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store);
    if (!door.listen((w.s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    v1::Agents::Stub agents(channel);
    v1::CreateAgentRequest create;
    auto a = co_await agents.Create(create, call_options_with(one(credential)));
    if (a.ok()) {
      agent_id = a->id();
      v1::SendRequest send;
      send.set_agent_id(a->id());
      send.set_prompt("a prompt worth keeping");
      auto sent = co_await agents.Send(send, call_options_with(one(credential)));
      if (sent.ok()) (void)co_await wait_turn(agents, credential, v1::TURN_DONE);
      v1::SaveRequest req;
      *req.mutable_access() = w.access();
      req.set_quiesced(true);
      saved = co_await call_save(channel, credential, std::move(req));
    }
    channel->close();
    co_await door.stop();
  });
  REQUIRE(saved.status == ok_status());
  REQUIRE(saved.done.has_value());
  REQUIRE(saved.done->quiesced());

  auto manifest = state::decode_manifest(saved.manifest);
  REQUIRE(manifest.status() == ok_status());
  const std::string snapshot_id = "20261130T120000.000Z-0000abcd";
  commit_with_library(w, *manifest, snapshot_id, true);

  // A fresh machine: new home, workspace and data dir; the same box identity.
  Setup& s = w.s;
  fresh_machine(w, true);
  Status restored = internal_error("not run");
  Result<v1::ListAgentsResponse> list = internal_error("not run");
  Result<v1::TranscriptPage> transcript = internal_error("not run");
  with_agent(w.config(gw, 60s), [&](Agent& agent) -> asio::awaitable<void> {
    auto exec = co_await asio::this_coro::executor;
    Door door(exec, *w.store);
    if (!door.listen((s.dir.path() / "door.sock").string()).ok()) co_return;
    auto channel = channel_to(agent, exec);
    v1::StateAccess access = w.access();  // named: gcc 12 and temporaries passed to coroutines
    restored = co_await call_restore_whole(channel, credential, access, snapshot_id);
    v1::Agents::Stub agents(channel);
    v1::ListAgentsRequest lr;
    list = co_await agents.List(lr, call_options_with(one(credential)));
    v1::TranscriptRequest tr;
    tr.set_agent_id(agent_id);
    transcript = co_await agents.Transcript(tr, call_options_with(one(credential)));
    channel->close();
    co_await door.stop();
  });
  REQUIRE(restored == ok_status());
  REQUIRE(list.status() == ok_status());
  REQUIRE(list->agents_size() == 1);
  CHECK(list->agents(0).id() == agent_id);
  REQUIRE(transcript.status() == ok_status());
  std::string text;
  for (const auto& item : transcript->items()) text += item.payload_json() + "\n";
  CHECK(text.find("a prompt worth keeping") != std::string::npos);
  CHECK(text.find("kept across machines") != std::string::npos);
  CHECK(std::filesystem::exists(s.dir.path() / "data" / "state" / "agent.db"));
}

}  // namespace
}  // namespace cb::agent
