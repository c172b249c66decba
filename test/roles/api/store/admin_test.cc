#include "roles/api/store/admin.h"

#include "roles/api/store/store.h"
#include "store_test_util.h"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace cb::api {
namespace {

using testing::open_sync;
using testing::TempDir;
using testing::TestEnv;
using testing::value_or_fail;

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

// Parses |args| as `cocoonbox api <args>` would, with the api's --data-dir on the same app,
// and runs the admin command. A parse error gives CLI11's exit code, as the api's catch does.
Run run_admin(const std::filesystem::path& data_dir, TestEnv& env, std::vector<std::string> args) {
  CLI::App app("cocoonbox api");
  std::string dir_flag;
  app.add_option("--data-dir", dir_flag);
  AdminOptions opts;
  opts.store = env.options();
  add_admin_commands(app, opts);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 wants them reversed
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
  opts.data_dir = dir_flag.empty() ? data_dir : std::filesystem::path(dir_flag);
  if (opts.command == AdminCommand::kNone) return run;
  std::ostringstream out;
  std::ostringstream err;
  run.code = run_admin_command(opts, out, err);
  run.out = out.str();
  run.err = err.str();
  return run;
}

TEST_CASE("admin: user add, list and rm, for humans and as JSON", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  Run add = run_admin(dir.data_dir(), env, {"user", "add", "alice", "--max-boxes", "5"});
  INFO(add.err);
  REQUIRE(add.code == 0);
  CHECK(add.out.find("alice") != std::string::npos);
  Run add_json = run_admin(dir.data_dir(), env, {"user", "add", "bob", "--json"});
  REQUIRE(add_json.code == 0);
  auto bob = nlohmann::json::parse(add_json.out);
  CHECK(bob["name"] == "bob");
  CHECK(bob["max_boxes"] == kDefaultMaxBoxes);
  CHECK(bob["max_running"] == kDefaultMaxRunning);

  Run list = run_admin(dir.data_dir(), env, {"user", "list", "--json"});
  REQUIRE(list.code == 0);
  auto users = nlohmann::json::parse(list.out);
  REQUIRE(users.size() == 2);
  CHECK(users[0]["name"] == "alice");
  CHECK(users[0]["max_boxes"] == 5);
  Run table = run_admin(dir.data_dir(), env, {"user", "list"});
  REQUIRE(table.code == 0);
  CHECK(table.out.find("NAME") == 0);
  CHECK(table.out.find("bob") != std::string::npos);

  // --data-dir after the subcommand reaches the api's option.
  std::filesystem::path other = dir.path() / "other";
  Run elsewhere =
      run_admin(dir.data_dir(), env, {"user", "add", "carol", "--data-dir", other.string()});
  REQUIRE(elsewhere.code == 0);
  CHECK(std::filesystem::exists(api_db_path(other)));

  Run rm = run_admin(dir.data_dir(), env, {"user", "rm", "alice", "--json"});
  REQUIRE(rm.code == 0);
  CHECK(nlohmann::json::parse(rm.out)["released_boxes"].empty());
  Run rm_again = run_admin(dir.data_dir(), env, {"user", "rm", "alice"});
  CHECK(rm_again.code == 1);
  CHECK(rm_again.err.find("alice") != std::string::npos);
  CHECK(rm_again.out.empty());
}

TEST_CASE("admin: token issue prints only the token on stdout", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  REQUIRE(run_admin(dir.data_dir(), env, {"user", "add", "alice"}).code == 0);
  Run issue = run_admin(dir.data_dir(), env, {"token", "issue", "alice", "--label", "laptop"});
  INFO(issue.err);
  REQUIRE(issue.code == 0);
  REQUIRE(issue.out.size() == 4 + 43 + 1);
  CHECK(issue.out.substr(0, 4) == "cbt_");
  CHECK(issue.out.back() == '\n');
  const std::string token = issue.out.substr(0, issue.out.size() - 1);
  CHECK(issue.err.find(token) == std::string::npos);
  CHECK(issue.err.find("tk_") != std::string::npos);

  Run list = run_admin(dir.data_dir(), env, {"token", "list", "alice", "--json"});
  REQUIRE(list.code == 0);
  CHECK(list.out.find(token.substr(4)) == std::string::npos);
  auto tokens = nlohmann::json::parse(list.out);
  REQUIRE(tokens.size() == 1);
  CHECK(tokens[0]["label"] == "laptop");
  CHECK(tokens[0]["revoked_at_ms"].is_null());
  const std::string id = tokens[0]["id"];

  Run revoke = run_admin(dir.data_dir(), env, {"token", "revoke", id});
  REQUIRE(revoke.code == 0);
  CHECK(revoke.out.find(id) != std::string::npos);
  Run table = run_admin(dir.data_dir(), env, {"token", "list", "alice"});
  REQUIRE(table.code == 0);
  CHECK(table.out.find(id) != std::string::npos);
  CHECK(table.out.find("laptop") != std::string::npos);

  SyncStore store = open_sync(dir.data_dir(), env.options());
  auto listed = value_or_fail(store.list_tokens("alice"));
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].revoked_at_ms.has_value());
}

TEST_CASE("admin: exit codes are 1 for errors and 2 for usage", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  Run bad_name = run_admin(dir.data_dir(), env, {"user", "add", "Alice"});
  CHECK(bad_name.code == 2);
  CHECK(bad_name.err.find("name") != std::string::npos);
  CHECK(run_admin(dir.data_dir(), env, {"user", "add"}).code == 2);  // missing NAME
  CHECK(run_admin(dir.data_dir(), env, {"user"}).code == 2);         // no verb
  CHECK(run_admin(dir.data_dir(), env, {"user", "add", "a", "--max-boxes", "-1"}).code == 2);
  CHECK(run_admin(dir.data_dir(), env, {"token", "frobnicate"}).code == 2);
  Run unknown_user = run_admin(dir.data_dir(), env, {"token", "issue", "ghost"});
  CHECK(unknown_user.code == 1);
  CHECK(unknown_user.out.empty());
  CHECK(unknown_user.err.find("ghost") != std::string::npos);
  CHECK(run_admin(dir.data_dir(), env, {"token", "revoke", "tk_000000000000"}).code == 1);
  REQUIRE(run_admin(dir.data_dir(), env, {"user", "add", "alice"}).code == 0);
  CHECK(run_admin(dir.data_dir(), env, {"user", "add", "alice"}).code == 1);  // exists

  // No subcommand: the api runs its server; nothing is parsed into the options.
  Run none = run_admin(dir.data_dir(), env, {});
  CHECK(none.code == -1);
}

}  // namespace
}  // namespace cb::api
