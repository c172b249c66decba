#include "roles/api/store/token_index.h"

#include "roles/api/store/store.h"
#include "store_test_util.h"

#include <catch2/catch.hpp>

#include <string>

namespace cb::api {
namespace {

using testing::await_sync;
using testing::open_async;
using testing::open_sync;
using testing::require_ok;
using testing::TempDir;
using testing::TestEnv;
using testing::value_or_fail;

bool refresh(TokenIndex& index) { return value_or_fail(await_sync(index.refresh_if_changed())); }

TEST_CASE("TokenIndex: authenticates an issued token and names its user", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  auto store = open_async(dir.data_dir(), env.options());
  User alice = value_or_fail(await_sync(store->add_user("alice")));
  IssuedToken token = value_or_fail(await_sync(store->issue_token("alice", "laptop")));

  TokenIndex index(*store);
  CHECK_FALSE(index.generation().has_value());
  CHECK(index.authenticate(token.plaintext).status().code() == Code::kUnauthenticated);
  CHECK(refresh(index));
  CHECK(index.size() == 1);

  Principal who = value_or_fail(index.authenticate(token.plaintext));
  CHECK(who.token_id == token.info.id);
  CHECK(who.user_id == alice.id);
  CHECK(who.user_name == "alice");

  // Nothing changed: the next refresh reads one row and keeps the map.
  CHECK_FALSE(refresh(index));

  for (std::string bad : {std::string(), token.plaintext + "x", token.plaintext.substr(1),
                          std::string("cbt_") + std::string(43, 'A'), std::string(10000, 'a')}) {
    auto r = index.authenticate(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnauthenticated);
    CHECK(r.status().message() == "unknown or revoked token");
  }
}

TEST_CASE("TokenIndex: a revoked token fails after refresh_if_changed", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  auto store = open_async(dir.data_dir(), env.options());
  value_or_fail(await_sync(store->add_user("alice")));
  IssuedToken keep = value_or_fail(await_sync(store->issue_token("alice")));
  IssuedToken drop = value_or_fail(await_sync(store->issue_token("alice")));
  TokenIndex index(*store);
  refresh(index);
  REQUIRE(index.authenticate(drop.plaintext).ok());

  Status revoked = await_sync(store->revoke_token(drop.info.id));
  REQUIRE(revoked.ok());
  CHECK(refresh(index));
  auto r = index.authenticate(drop.plaintext);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(index.authenticate(keep.plaintext).ok());
  CHECK(index.size() == 1);
}

TEST_CASE("TokenIndex: another process's user and token writes show after a refresh",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv api_env(1);
  TestEnv cli_env(2);
  auto store = open_async(dir.data_dir(), api_env.options());
  TokenIndex index(*store);
  refresh(index);
  CHECK(index.size() == 0);
  const int64_t start = *index.generation();

  // The admin CLI is another process with its own connection: a SyncStore on the same file.
  SyncStore cli = open_sync(dir.data_dir(), cli_env.options());
  User bob = value_or_fail(cli.add_user("bob"));
  IssuedToken token = value_or_fail(cli.issue_token("bob", "ci"));

  CHECK(index.authenticate(token.plaintext).status().code() == Code::kUnauthenticated);
  CHECK(refresh(index));
  CHECK(*index.generation() == start + 2);
  Principal who = value_or_fail(index.authenticate(token.plaintext));
  CHECK(who.user_id == bob.id);
  CHECK(who.user_name == "bob");

  SECTION("token revoke in the other process") {
    require_ok(cli.revoke_token(token.info.id));
    CHECK(refresh(index));
    CHECK(index.authenticate(token.plaintext).status().code() == Code::kUnauthenticated);
  }
  SECTION("user rm in the other process") {
    value_or_fail(cli.remove_user("bob"));
    CHECK(refresh(index));
    CHECK(index.authenticate(token.plaintext).status().code() == Code::kUnauthenticated);
    CHECK(index.size() == 0);
  }
}

}  // namespace
}  // namespace cb::api
