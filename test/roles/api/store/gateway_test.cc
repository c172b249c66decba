// The model door's part of api.db (issue 6, item 3): each user's gateway with its key sealed
// under the master key, the usage counts, and the admin commands `user set-gateway` and
// `usage`.

#include "crypto/bytes.h"
#include "crypto/keys.h"
#include "db/statement.h"
#include "roles/api/store/admin.h"
#include "roles/api/store/store.h"
#include "store_test_util.h"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cb::api {
namespace {

using testing::open_sync;
using testing::read_file;
using testing::require_ok;
using testing::TempDir;
using testing::TestEnv;
using testing::value_or_fail;

constexpr std::string_view kKey = "sk-gw-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4";
constexpr std::string_view kUrl = "https://gateway.example/api";

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

crypto::SymmetricKey make_key(uint64_t seed) {
  crypto::SeededRandom random(seed);
  return crypto::SymmetricKey::generate(random);
}

// Runs |sql| on api.db through a second connection, as someone editing the file would.
void exec_sql(const std::filesystem::path& data_dir, std::string_view sql) {
  auto db = value_or_fail(db::Database::open(api_db_path(data_dir)));
  require_ok(db.exec(sql));
}

TEST_CASE("api store: a gateway key is sealed, bound to its user row and URL",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  auto master = make_key(7);
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));
  User bob = value_or_fail(store.add_user("bob"));

  CHECK_FALSE(value_or_fail(store.user_gateway(alice.id, master.bytes())).has_value());
  require_ok(store.set_user_gateway("alice", kUrl, kKey, master.bytes()));
  auto gw = value_or_fail(store.user_gateway(alice.id, master.bytes()));
  REQUIRE(gw.has_value());
  CHECK(gw->url == kUrl);
  CHECK(gw->key == kKey);
  CHECK(gw->user_id == alice.id);
  CHECK(gw->updated_at_ms == env.clock.ms());
  CHECK_FALSE(value_or_fail(store.user_gateway(bob.id, master.bytes())).has_value());

  SECTION("the plaintext is in no file of the data dir") {
    for (const auto& entry : std::filesystem::directory_iterator(dir.data_dir())) {
      INFO(entry.path());
      CHECK_FALSE(contains(read_file(entry.path()), kKey));
      CHECK_FALSE(contains(read_file(entry.path()), kKey.substr(6, 16)));
    }
  }
  SECTION("another master key does not open it") {
    auto other = make_key(8);
    auto r = store.user_gateway(alice.id, other.bytes());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kDataLoss);
    CHECK_FALSE(contains(r.status().message(), kKey));
  }
  SECTION("the sealed key copied to another user's row does not open") {
    exec_sql(
        dir.data_dir(),
        "INSERT INTO user_gateways (user_id, url, key_sealed, updated_at_ms) SELECT " +
            std::to_string(bob.id) +
            ", url, key_sealed, 0 FROM user_gateways WHERE user_id = " + std::to_string(alice.id));
    auto r = store.user_gateway(bob.id, master.bytes());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kDataLoss);
  }
  SECTION("a URL changed behind the api's back does not open: the key would go elsewhere") {
    exec_sql(dir.data_dir(), "UPDATE user_gateways SET url = 'https://attacker.example'");
    auto r = store.user_gateway(alice.id, master.bytes());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kDataLoss);
  }
  SECTION("setting again replaces it, clearing removes it") {
    require_ok(store.set_user_gateway("alice", "http://127.0.0.1:9", "k2", master.bytes()));
    auto again = value_or_fail(store.user_gateway(alice.id, master.bytes()));
    REQUIRE(again.has_value());
    CHECK(again->url == "http://127.0.0.1:9");
    CHECK(again->key == "k2");
    require_ok(store.clear_user_gateway("alice"));
    CHECK_FALSE(value_or_fail(store.user_gateway(alice.id, master.bytes())).has_value());
    require_ok(store.clear_user_gateway("alice"));
  }
}

TEST_CASE("api store: a gateway key or URL that would break a header is refused",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  auto master = make_key(7);
  SyncStore store = open_sync(dir.data_dir(), env.options());
  value_or_fail(store.add_user("alice"));
  for (std::string key : {std::string("sk\r\nx-evil: 1"), std::string("two words"), std::string(),
                          std::string(5000, 'k')}) {
    Status s = store.set_user_gateway("alice", kUrl, key, master.bytes());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(contains(s.message(), "key"));
    if (!key.empty()) CHECK_FALSE(contains(s.message(), key));
  }
  for (std::string url : {std::string(), std::string("http://a\r\n"), std::string(3000, 'u')}) {
    Status s = store.set_user_gateway("alice", url, kKey, master.bytes());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(contains(s.message(), "url"));
  }
  CHECK(store.set_user_gateway("nobody", kUrl, kKey, master.bytes()).code() == Code::kNotFound);
  CHECK(store.clear_user_gateway("nobody").code() == Code::kNotFound);
}

TEST_CASE("api store: model calls add up per user, box, UTC day, wire and model",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));
  User bob = value_or_fail(store.add_user("bob"));
  Box box = value_or_fail(store.create_box(alice.id, "main", "local", "local"));

  ModelCall call;
  call.user_id = alice.id;
  call.box_id = box.id;
  call.wire = "anthropic";
  call.model = "claude-x";
  call.input_tokens = 100;
  call.output_tokens = 20;
  call.cache_read_tokens = 60;
  call.cache_write_tokens = 10;
  require_ok(store.record_model_call(call));
  require_ok(store.record_model_call(call));
  ModelCall failed = call;
  failed.failed = true;
  failed.input_tokens = 5;
  failed.output_tokens = 0;
  failed.cache_read_tokens = 0;
  failed.cache_write_tokens = 0;
  require_ok(store.record_model_call(failed));
  ModelCall other = call;
  other.wire = "openai";
  other.model = "gpt-y";
  other.user_id = bob.id;
  other.box_id = "bx_0123456789ab";  // no such box row: the name reads ""
  require_ok(store.record_model_call(other));
  const int64_t first_day_ms = env.clock.ms();
  env.clock.advance_ms(24 * 3600 * 1000);
  require_ok(store.record_model_call(call));

  auto all = value_or_fail(store.model_usage());
  REQUIRE(all.size() == 3);
  // 1'790'000'000'000 ms is 2026-09-21 (UTC).
  CHECK(all[0].day == "2026-09-21");
  CHECK(all[0].user_name == "alice");
  CHECK(all[0].box_name == "main");
  CHECK(all[0].wire == "anthropic");
  CHECK(all[0].requests == 3);
  CHECK(all[0].failed == 1);
  CHECK(all[0].input_tokens == 205);
  CHECK(all[0].output_tokens == 40);
  CHECK(all[0].cache_read_tokens == 120);
  CHECK(all[0].cache_write_tokens == 20);
  CHECK(all[0].last_at_ms == first_day_ms);
  CHECK(all[1].user_name == "bob");
  CHECK(all[1].box_name.empty());
  CHECK(all[1].model == "gpt-y");
  CHECK(all[2].day == "2026-09-22");
  CHECK(all[2].requests == 1);

  CHECK(value_or_fail(store.model_usage("bob")).size() == 1);
  CHECK(value_or_fail(store.model_usage("", "2026-09-22")).size() == 1);
  CHECK(value_or_fail(store.model_usage("alice", "2026-09-21")).size() == 2);
  CHECK(store.model_usage("", "yesterday").status().code() == Code::kInvalidArgument);
  CHECK(store.model_usage("nobody").status().code() == Code::kNotFound);
  ModelCall empty;
  CHECK(store.record_model_call(empty).code() == Code::kInvalidArgument);
}

TEST_CASE("api store: the async Store opens gateways and records calls on its worker",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  auto master = make_key(3);
  {
    SyncStore sync = open_sync(dir.data_dir(), env.options());
    value_or_fail(sync.add_user("alice"));
    require_ok(sync.set_user_gateway("alice", kUrl, kKey, master.bytes()));
  }
  auto store = testing::open_async(dir.data_dir(), env.options());
  User alice = value_or_fail(testing::await_sync(store->find_user("alice")));
  auto gw = value_or_fail(testing::await_sync(store->user_gateway(alice.id, master.bytes())));
  REQUIRE(gw.has_value());
  CHECK(gw->key == kKey);
  ModelCall call;
  call.user_id = alice.id;
  call.box_id = "bx_000000000001";
  call.wire = "openai";
  require_ok(testing::await_sync(store->record_model_call(call)));
  auto rows = value_or_fail(testing::await_sync(store->model_usage("alice", "")));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].requests == 1);
  CHECK(rows[0].model.empty());
}

// ---- admin ----

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

// `cocoonbox api <args>` with a master key kept in <data-dir>/test-master.key and |stdin|.
Run run_admin(const std::filesystem::path& data_dir, TestEnv& env, std::vector<std::string> args,
              const std::string& stdin_text = {}) {
  CLI::App app("cocoonbox api");
  AdminOptions opts;
  opts.store = env.options();
  add_admin_commands(app, opts);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  Run run;
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out;
    std::ostringstream err;
    run.code = app.exit(e, out, err) == 0 ? 0 : 2;
    run.err = err.str();
    return run;
  }
  opts.data_dir = data_dir;
  std::istringstream in(stdin_text);
  opts.key_in = &in;
  opts.load_master_key = [](const std::filesystem::path& d) -> Result<crypto::SymmetricKey> {
    auto path = d / "test-master.key";
    if (!std::filesystem::exists(path)) {
      auto key = make_key(11);
      std::ofstream(path, std::ios::binary) << crypto::char_view(key.bytes());
    }
    return crypto::SymmetricKey::from_bytes(read_file(path));
  };
  std::ostringstream out;
  std::ostringstream err;
  run.code = run_admin_command(opts, out, err);
  run.out = out.str();
  run.err = err.str();
  return run;
}

TEST_CASE("admin: user set-gateway reads the key from a file or stdin and prints it nowhere",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  REQUIRE(run_admin(dir.data_dir(), env, {"user", "add", "alice"}).code == 0);
  auto key_file = dir.path() / "gw.key";
  std::ofstream(key_file) << kKey << "\n";  // as `echo KEY > file` leaves it

  Run set = run_admin(dir.data_dir(), env,
                      {"user", "set-gateway", "alice", "--url", std::string(kUrl), "--key-file",
                       key_file.string()});
  INFO(set.err);
  REQUIRE(set.code == 0);
  CHECK(contains(set.out, kUrl));
  CHECK_FALSE(contains(set.out + set.err, kKey));
  auto master = value_or_fail(
      crypto::SymmetricKey::from_bytes(read_file(dir.data_dir() / "test-master.key")));
  {
    SyncStore store = open_sync(dir.data_dir(), env.options());
    User alice = value_or_fail(store.find_user("alice"));
    auto gw = value_or_fail(store.user_gateway(alice.id, master.bytes()));
    REQUIRE(gw.has_value());
    CHECK(gw->key == kKey);  // the line end was dropped
  }

  Run from_stdin = run_admin(dir.data_dir(), env,
                             {"user", "set-gateway", "alice", "--url", "http://127.0.0.1:8080",
                              "--key-file", "-", "--json"},
                             "sk-from-stdin\r\n");
  INFO(from_stdin.err);
  REQUIRE(from_stdin.code == 0);
  auto j = nlohmann::json::parse(from_stdin.out);
  CHECK(j["gateway_url"] == "http://127.0.0.1:8080");
  {
    SyncStore store = open_sync(dir.data_dir(), env.options());
    User alice = value_or_fail(store.find_user("alice"));
    auto gw = value_or_fail(store.user_gateway(alice.id, master.bytes()));
    REQUIRE(gw.has_value());
    CHECK(gw->key == "sk-from-stdin");
  }

  Run clear = run_admin(dir.data_dir(), env, {"user", "set-gateway", "alice", "--clear"});
  REQUIRE(clear.code == 0);
  CHECK(contains(clear.out, "cleared"));

  // Usage errors (2) and errors (1).
  CHECK(
      run_admin(dir.data_dir(), env, {"user", "set-gateway", "alice", "--url", "http://x"}).code ==
      2);
  CHECK(run_admin(dir.data_dir(), env,
                  {"user", "set-gateway", "alice", "--clear", "--url", "http://x"})
            .code == 2);
  Run bad_url =
      run_admin(dir.data_dir(), env,
                {"user", "set-gateway", "alice", "--url", "ftp://x", "--key-file", "-"}, "k");
  CHECK(bad_url.code == 2);
  Run no_file = run_admin(dir.data_dir(), env,
                          {"user", "set-gateway", "alice", "--url", "http://x", "--key-file",
                           (dir.path() / "missing").string()});
  CHECK(no_file.code == 2);
  CHECK(contains(no_file.err, "missing"));
  Run empty =
      run_admin(dir.data_dir(), env,
                {"user", "set-gateway", "alice", "--url", "http://x", "--key-file", "-"}, "\n");
  CHECK(empty.code == 2);
  Run nobody =
      run_admin(dir.data_dir(), env,
                {"user", "set-gateway", "nobody", "--url", "http://x", "--key-file", "-"}, "k");
  CHECK(nobody.code == 1);
}

TEST_CASE("admin: usage prints the door's counts as a table and as JSON", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  {
    SyncStore store = open_sync(dir.data_dir(), env.options());
    User alice = value_or_fail(store.add_user("alice"));
    ModelCall call;
    call.user_id = alice.id;
    call.box_id = "bx_00000000000a";
    call.wire = "openai";
    call.model = "gpt-test";
    call.input_tokens = 12;
    call.output_tokens = 3;
    require_ok(store.record_model_call(call));
  }
  Run table = run_admin(dir.data_dir(), env, {"usage"});
  INFO(table.err);
  REQUIRE(table.code == 0);
  CHECK(table.out.find("DAY") == 0);
  CHECK(contains(table.out, "gpt-test"));
  CHECK(contains(table.out, "total"));
  Run j = run_admin(dir.data_dir(), env, {"usage", "--json", "--user", "alice"});
  REQUIRE(j.code == 0);
  auto rows = nlohmann::json::parse(j.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["input_tokens"] == 12);
  CHECK(rows[0]["output_tokens"] == 3);
  CHECK(rows[0]["user"] == "alice");
  CHECK(run_admin(dir.data_dir(), env, {"usage", "--since", "soon"}).code == 2);
}

}  // namespace
}  // namespace cb::api
