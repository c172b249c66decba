// The agent in-process: a real Agent on a unix socket in a temporary directory, with an
// identity file written here, called through our gRPC Channel the way the api's edge calls it.

#include "agent_harness.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "crypto/bytes.h"
#include "db/database.h"
#include "db/migrate.h"
#include "grpc/client.h"
#include "roles/agent/agent_server.h"
#include "support/run_sync.h"
#include "test_util.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>
#include <vector>

#ifndef CB_EXPECTED_AGENT_VERSION
#error "CB_EXPECTED_AGENT_VERSION comes from test/roles/agent/CMakeLists.txt"
#endif

namespace cb::agent {
namespace {

namespace v1 = ::cocoonbox::agent::v1;
using namespace std::chrono_literals;
using cb::test::run_sync;
using test::call_options_with;
using test::fresh_credential;
using test::identity_json;
using test::kBox;
using test::kKeyId;
using test::kWake;
using test::none;
using test::now_unix;
using test::one;
using test::Setup;
using test::TempDir;
using test::with_agent;
using test::write_file;

// Calls |path| with a HelloRequest over the unix socket at |socket|, with |credentials| as
// x-cocoonbox-credential headers (none, one, or several).
asio::awaitable<Result<v1::HelloResponse>> call(std::string socket,
                                                std::vector<std::string> credentials,
                                                std::string path) {
  grpc::ChannelOptions options;
  options.dial.unix_path = socket;
  auto channel = grpc::Channel::create(co_await asio::this_coro::executor, std::move(options));
  grpc::CallOptions call_options = call_options_with(credentials);
  v1::HelloRequest req;
  req.set_client(std::string("agent_test"));
  Result<v1::HelloResponse> resp = co_await grpc::unary_call<v1::HelloResponse>(
      *channel, std::move(path), req, std::move(call_options));
  channel->close();
  co_return resp;
}

asio::awaitable<Result<v1::HelloResponse>> hello(const Agent& agent,
                                                 std::vector<std::string> credentials) {
  auto r = co_await call(agent.socket_path(), std::move(credentials),
                         std::string("/cocoonbox.agent.v1.Session/Hello"));
  co_return r;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

TEST_CASE("Agent: Hello with the edge's credential answers the box's key and identity",
          "[agent][integration]") {
  Setup s;
  s.deliver();
  Result<v1::HelloResponse> resp = unavailable("not called");
  crypto::X25519PublicKey box_key{};
  with_agent(s.config(), [&](Agent& agent) -> asio::awaitable<void> {
    box_key = agent.box_public_key();
    resp = co_await hello(agent, one(s.credential()));
  });
  REQUIRE(resp.status() == ok_status());
  CHECK(resp->box_public_key() == std::string(crypto::char_view(box_key)));
  CHECK(resp->box_public_key().size() == crypto::kX25519KeySize);
  CHECK(resp->agent_version() == CB_EXPECTED_AGENT_VERSION);
  REQUIRE(resp->capabilities_size() == 4);
  CHECK(resp->capabilities(0) == "session.hello");
  CHECK(resp->capabilities(1) == "session.exec");
  CHECK(resp->capabilities(2) == "session.events");
  CHECK(resp->capabilities(3) == "agents");
  CHECK(resp->box_id() == kBox);
  CHECK(resp->wake_id() == kWake);
}

TEST_CASE("Agent: every forged, stale or foreign credential is UNAUTHENTICATED",
          "[agent][integration]") {
  Setup s;
  s.deliver();
  crypto::SeededRandom other_random(99);
  const auto other_key = crypto::SigningKey::generate(other_random);
  const int64_t now = now_unix();

  const std::string good = s.credential();
  // Flip one character in the middle of the signature part, keeping it canonical base64url.
  std::string tampered = good;
  const size_t sig_at = tampered.rfind('.') + 10;
  tampered[sig_at] = tampered[sig_at] == 'A' ? 'B' : 'A';

  struct Attack {
    std::string name;
    std::vector<std::string> headers;
    std::string why;  // a part of the message
  };
  std::vector<Attack> attacks = {
      {"missing header", {}, "missing x-cocoonbox-credential"},
      {"other box_id", {fresh_credential(s.edge_key, kKeyId, "box-other", kWake)}, "box_id"},
      {"expired beyond skew",
       {crypto::issue_credential(s.edge_key, kKeyId, kBox, kWake,
                                 now - crypto::kCredentialSkewSeconds - 60)},
       "expired"},
      {"exp too far ahead",
       {crypto::issue_credential(s.edge_key, kKeyId, kBox, kWake, now + 3600)},
       "credential"},
      {"tampered signature", {tampered}, "signature"},
      {"unknown key_id", {fresh_credential(s.edge_key, "edge-unknown", kBox, kWake)}, "key_id"},
      {"right key_id, other key", {fresh_credential(other_key, kKeyId, kBox, kWake)}, "signature"},
      {"garbage", {"garbage"}, "credential"},
      {"empty", {""}, "credential"},
      {"two headers", {good, good}, "several"},
  };

  std::vector<Status> results;
  Result<v1::HelloResponse> old_wake = unavailable("not called");
  Result<v1::HelloResponse> new_wake = unavailable("not called");
  Result<v1::HelloResponse> unknown_method = unavailable("not called");
  Result<v1::HelloResponse> unknown_method_anonymous = unavailable("not called");
  with_agent(s.config(), [&](Agent& agent) -> asio::awaitable<void> {
    for (const Attack& a : attacks) {
      auto r = co_await hello(agent, a.headers);
      results.push_back(r.status());
    }
    // The api woke the box: a new wake_id, and the previous wake's credentials are dead.
    const std::string before_wake = s.credential();
    s.deliver("wake-0002");
    old_wake = co_await hello(agent, one(before_wake));
    new_wake = co_await hello(agent, one(s.credential("wake-0002")));
    unknown_method = co_await call(agent.socket_path(), one(s.credential("wake-0002")),
                                   std::string("/cocoonbox.agent.v1.Session/NoSuchMethod"));
    unknown_method_anonymous =
        co_await call(agent.socket_path(), none(), std::string("/cocoonbox.agent.v1.Nope/Hello"));
  });

  REQUIRE(results.size() == attacks.size());
  for (size_t i = 0; i < attacks.size(); ++i) {
    INFO(attacks[i].name << ": " << results[i].to_string());
    CHECK(results[i].code() == Code::kUnauthenticated);
    CHECK_THAT(std::string(results[i].message()), Catch::Contains(attacks[i].why));
  }
  INFO("old wake: " << old_wake.status().to_string());
  CHECK(old_wake.status().code() == Code::kUnauthenticated);
  CHECK_THAT(std::string(old_wake.status().message()), Catch::Contains("wake_id"));
  REQUIRE(new_wake.status() == ok_status());
  CHECK(new_wake->wake_id() == "wake-0002");
  CHECK(unknown_method.status().code() == Code::kUnimplemented);
  CHECK(unknown_method_anonymous.status().code() == Code::kUnauthenticated);
}

TEST_CASE("Agent: without an identity file calls are UNAVAILABLE until it is delivered",
          "[agent][integration]") {
  Setup s;
  Result<v1::HelloResponse> before = unavailable("not called");
  Result<v1::HelloResponse> after = unavailable("not called");
  with_agent(s.config(), [&](Agent& agent) -> asio::awaitable<void> {
    before = co_await hello(agent, one(s.credential()));
    s.deliver();
    after = co_await hello(agent, one(s.credential()));
  });
  CHECK(before.status().code() == Code::kUnavailable);
  CHECK_THAT(std::string(before.status().message()), Catch::Contains("identity not delivered yet"));
  CHECK(after.status() == ok_status());
}

TEST_CASE("Agent: after a key rotation only the key the identity names is accepted",
          "[agent][integration]") {
  Setup s;
  s.deliver();
  crypto::SeededRandom next_random(1234);
  const auto next_key = crypto::SigningKey::generate(next_random);
  Result<v1::HelloResponse> old_key = unavailable("not called");
  Result<v1::HelloResponse> new_key = unavailable("not called");
  with_agent(s.config(), [&](Agent& agent) -> asio::awaitable<void> {
    // The api signs with the new key and rewrites the identity at the next wake.
    write_file(s.dir / "identity", identity_json(next_key, "edge-2026-11", kBox, "wake-0002"));
    old_key = co_await hello(agent, one(s.credential("wake-0002")));
    new_key =
        co_await hello(agent, one(fresh_credential(next_key, std::string("edge-2026-11"),
                                                   std::string(kBox), std::string("wake-0002"))));
  });
  CHECK(old_key.status().code() == Code::kUnauthenticated);
  CHECK_THAT(std::string(old_key.status().message()), Catch::Contains("key_id"));
  CHECK(new_key.status() == ok_status());
}

TEST_CASE("Agent: box.key is created 0600 once and reused across restarts",
          "[agent][integration]") {
  Setup s;
  s.deliver();
  const std::string socket = s.dir / "agent.sock";
  std::string first, second;
  with_agent(s.config(), [&](Agent& agent) -> asio::awaitable<void> {
    auto r = co_await hello(agent, one(s.credential()));
    if (r.ok()) first = r->box_public_key();
    CHECK(mode_of(socket) == 0660);
  });
  CHECK_FALSE(std::filesystem::exists(socket));  // removed at shutdown
  CHECK(mode_of((s.dir.path() / "data").string()) == 0700);
  CHECK(mode_of((s.dir.path() / "data" / "box.key").string()) == 0600);
  CHECK(std::filesystem::file_size(s.dir.path() / "data" / "box.key") == crypto::kX25519KeySize);

  // A second start draws different randomness; the stored key must win anyway.
  crypto::SeededRandom different(555);
  AgentConfig again = s.config();
  again.random = &different;
  with_agent(again, [&](Agent& agent) -> asio::awaitable<void> {
    auto r = co_await hello(agent, one(s.credential()));
    if (r.ok()) second = r->box_public_key();
  });
  REQUIRE(first.size() == crypto::kX25519KeySize);
  CHECK(first == second);
}

// Copies agent.db and its WAL while the agent holds them open: what SIGKILL leaves behind.
void copy_live_db(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::create_directories(to);
  for (const char* name : {"agent.db", "agent.db-wal"}) {
    if (std::filesystem::exists(from / name)) std::filesystem::copy_file(from / name, to / name);
  }
}

TEST_CASE("Agent: an agent.db left by a crash reopens, and every start is recorded",
          "[agent][integration]") {
  Setup s;
  s.deliver();
  const std::filesystem::path crashed = s.dir.path() / "crashed";
  bool wal_present = false;
  with_agent(s.config(), [&](Agent&) -> asio::awaitable<void> {
    wal_present = std::filesystem::exists(s.dir.path() / "data" / "agent.db-wal");
    copy_live_db(s.dir.path() / "data", crashed);
    co_return;
  });
  CHECK(wal_present);

  AgentConfig after_crash = s.config();
  after_crash.data_dir = crashed;
  after_crash.socket_path = s.dir / "after.sock";
  Result<v1::HelloResponse> resp = unavailable("not called");
  with_agent(after_crash, [&](Agent& agent) -> asio::awaitable<void> {
    resp = co_await hello(agent, one(s.credential()));
  });
  CHECK(resp.status() == ok_status());

  auto db = db::Database::open(crashed / "agent.db");
  REQUIRE(db.status() == ok_status());
  auto version = db::schema_version(*db);
  REQUIRE(version.ok());
  CHECK(*version == 4);  // migration 4: events without AUTOINCREMENT, items keyed by event_id
  auto st = db->prepare("SELECT count(*), count(wake_id), min(wake_id) FROM agent_starts");
  REQUIRE(st.status() == ok_status());
  auto row = st->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  CHECK(st->column_int64(0) == 2);
  CHECK(st->column_int64(1) == 2);
  CHECK(st->column_text(2) == kWake);
  auto meta = db->prepare("SELECT value FROM meta WHERE key = 'created_unix'");
  REQUIRE(meta.status() == ok_status());
  auto meta_row = meta->step();
  REQUIRE(meta_row.ok());
  CHECK(*meta_row);
}

// Binds a unix socket at |path| and closes it without unlinking: a crashed agent's socket.
void make_stale_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.data(), path.size());
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
}

TEST_CASE("Agent: a stale socket is replaced; a live one or a non-socket path is refused",
          "[agent][integration]") {
  Setup s;
  s.deliver();
  const std::string socket = s.dir / "agent.sock";

  SECTION("stale socket from a crash") {
    make_stale_socket(socket);
    Result<v1::HelloResponse> resp = unavailable("not called");
    with_agent(s.config(), [&](Agent& agent) -> asio::awaitable<void> {
      resp = co_await hello(agent, one(s.credential()));
    });
    CHECK(resp.status() == ok_status());
  }
  SECTION("another agent serving it") {
    Status second = ok_status();
    with_agent(s.config(), [&](Agent&) -> asio::awaitable<void> {
      asio::io_context other;
      AgentConfig c = s.config();
      c.data_dir = s.dir.path() / "data2";
      second = Agent::create(other.get_executor(), c).status();
      co_return;
    });
    CHECK(second.code() == Code::kFailedPrecondition);
    CHECK_THAT(std::string(second.message()), Catch::Contains("another process is serving"));
  }
  SECTION("a regular file") {
    write_file(socket, "not a socket");
    asio::io_context io;
    Status st = Agent::create(io.get_executor(), s.config()).status();
    CHECK(st.code() == Code::kFailedPrecondition);
    CHECK_THAT(std::string(st.message()), Catch::Contains("not a socket"));
    CHECK(std::filesystem::is_regular_file(socket));
  }
  SECTION("a path too long for a unix socket") {
    AgentConfig c = s.config();
    c.socket_path = std::string(200, 'x');
    asio::io_context io;
    CHECK(Agent::create(io.get_executor(), c).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("Agent: --listen serves the same checks on loopback TCP", "[agent][integration]") {
  Setup s;
  s.deliver();
  AgentConfig c = s.config();
  c.listen = *parse_host_port("127.0.0.1:0");
  Result<v1::HelloResponse> good = unavailable("not called");
  Result<v1::HelloResponse> anonymous = unavailable("not called");
  uint16_t port = 0;
  with_agent(c, [&](Agent& agent) -> asio::awaitable<void> {
    REQUIRE(agent.tcp_address());
    port = agent.tcp_address()->port;
    grpc::ChannelOptions options;
    options.dial.host = std::string("127.0.0.1");
    options.dial.port = port;
    auto channel = grpc::Channel::create(co_await asio::this_coro::executor, std::move(options));
    v1::Session::Stub stub(channel);
    v1::HelloRequest req;
    good = co_await stub.Hello(req, call_options_with(one(s.credential())));
    anonymous = co_await stub.Hello(req, call_options_with(none()));
    channel->close();
  });
  CHECK(port != 0);
  CHECK(good.status() == ok_status());
  CHECK(anonymous.status().code() == Code::kUnauthenticated);
}

}  // namespace
}  // namespace cb::agent
