#include "roles/api/store/store.h"

#include "crypto/hash.h"
#include "db/database.h"
#include "store_test_util.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace cb::api {
namespace {

using test::run_sync;
using testing::await_sync;
using testing::open_async;
using testing::open_sync;
using testing::read_file;
using testing::require_ok;
using testing::TempDir;
using testing::TestEnv;
using testing::value_or_fail;

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::vector<std::string> ids_of(const std::vector<Box>& boxes) {
  std::vector<std::string> ids;
  for (const Box& b : boxes) ids.push_back(b.id);
  return ids;
}

// ---- users ----

TEST_CASE("Store: user names follow [a-z][a-z0-9_-]{0,31}", "[api][store][unit]") {
  struct Case {
    std::string name;
    bool valid;
  };
  const std::vector<Case> cases = {
      {"a", true},
      {"alice", true},
      {"bob-2_x", true},
      {"z" + std::string(31, '9'), true},  // 32 characters
      {"", false},
      {"Alice", false},
      {"1alice", false},
      {"-alice", false},
      {"_alice", false},
      {"al ice", false},
      {"al.ice", false},
      {"alicé", false},
      {"a" + std::string(32, 'b'), false},  // 33 characters
      {std::string("a\0b", 3), false},
  };
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  for (const Case& c : cases) {
    INFO("name: " << c.name);
    Status checked = validate_user_name(c.name);
    CHECK(checked.ok() == c.valid);
    auto added = store.add_user(c.name);
    CHECK(added.ok() == c.valid);
    if (!c.valid) {
      CHECK(added.status().code() == Code::kInvalidArgument);
      CHECK(contains(added.status().message(), "name"));
    }
  }
  auto dup = store.add_user("alice");
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.status().code() == Code::kAlreadyExists);

  auto negative = store.add_user("carol", -1, 1);
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.status().code() == Code::kInvalidArgument);
  CHECK(contains(negative.status().message(), "max_boxes"));
  auto negative_running = store.add_user("carol", 1, -1);
  REQUIRE_FALSE(negative_running.ok());
  CHECK(contains(negative_running.status().message(), "max_running"));
}

TEST_CASE("Store: add_user, list_users and find_user", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User bob = value_or_fail(store.add_user("bob", 5, 2));
  User alice = value_or_fail(store.add_user("alice"));
  CHECK(alice.max_boxes == kDefaultMaxBoxes);
  CHECK(alice.max_running == kDefaultMaxRunning);
  CHECK(alice.created_at_ms == env.clock.ms());
  CHECK(bob.max_boxes == 5);
  CHECK(bob.max_running == 2);

  auto users = value_or_fail(store.list_users());
  REQUIRE(users.size() == 2);
  CHECK(users[0].name == "alice");  // by name
  CHECK(users[1].name == "bob");
  CHECK(users[1].id == bob.id);
  CHECK(value_or_fail(store.find_user("bob")).max_boxes == 5);
  CHECK(value_or_fail(store.get_user(alice.id)).name == "alice");
  auto missing = store.find_user("nobody");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kNotFound);
}

TEST_CASE("Store: every user and token write bumps change_generation", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  int64_t g0 = value_or_fail(store.change_generation());
  value_or_fail(store.add_user("alice"));
  int64_t g1 = value_or_fail(store.change_generation());
  CHECK(g1 == g0 + 1);
  IssuedToken t = value_or_fail(store.issue_token("alice", "laptop"));
  int64_t g2 = value_or_fail(store.change_generation());
  CHECK(g2 == g1 + 1);
  require_ok(store.revoke_token(t.info.id));
  int64_t g3 = value_or_fail(store.change_generation());
  CHECK(g3 == g2 + 1);
  require_ok(store.revoke_token(t.info.id));  // nothing changed: no bump
  CHECK(value_or_fail(store.change_generation()) == g3);
  // Box writes do not concern the token index.
  User alice = value_or_fail(store.find_user("alice"));
  value_or_fail(store.create_box(alice.id, "main", "img", "local"));
  CHECK(value_or_fail(store.change_generation()) == g3);
  value_or_fail(store.remove_user("alice"));
  CHECK(value_or_fail(store.change_generation()) == g3 + 1);
  // A failed write rolls back its bump with everything else.
  auto dup = store.add_user("bob");
  REQUIRE(dup.ok());
  auto again = store.add_user("bob");
  REQUIRE_FALSE(again.ok());
  CHECK(value_or_fail(store.change_generation()) == g3 + 2);
}

// ---- tokens ----

TEST_CASE("Store: tokens are stored only as SHA-256, the plaintext nowhere on disk",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  std::string plaintext;
  std::string token_id;
  {
    SyncStore store = open_sync(dir.data_dir(), env.options());
    value_or_fail(store.add_user("alice"));
    IssuedToken issued = value_or_fail(store.issue_token("alice", "laptop"));
    plaintext = issued.plaintext;
    token_id = issued.info.id;
    CHECK(plaintext.substr(0, 4) == "cbt_");
    CHECK(plaintext.size() == 4 + 43);  // 32 random bytes in unpadded base64url
    CHECK(token_id.size() == 3 + 12);
    CHECK(token_id.substr(0, 3) == "tk_");
    // Listing never carries a secret: TokenInfo has no field for one.
    auto listed = value_or_fail(store.list_tokens("alice"));
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].id == token_id);
    CHECK(listed[0].label == "laptop");
    CHECK_FALSE(listed[0].revoked_at_ms.has_value());
  }
  const std::string secret_part = plaintext.substr(4);
  const crypto::Sha256Digest digest = crypto::sha256(plaintext);

  // Every column of every row of the raw table, read as text and as bytes.
  auto db = value_or_fail(db::Database::open(api_db_path(dir.data_dir())));
  auto st = value_or_fail(db.prepare("SELECT * FROM tokens"));
  int rows = 0;
  while (value_or_fail(st.step())) {
    ++rows;
    for (int col = 0; col < st.column_count(); ++col) {
      std::span<const uint8_t> bytes = st.column_blob(col);
      std::string_view raw(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      CHECK_FALSE(contains(raw, secret_part));
    }
    CHECK(std::string(st.column_text(0)) == token_id);
  }
  CHECK(rows == 1);
  auto hashed = value_or_fail(db.prepare("SELECT sha256 FROM tokens WHERE id = ?1"));
  require_ok(hashed.bind_text(1, token_id));
  REQUIRE(value_or_fail(hashed.step()));
  std::span<const uint8_t> stored = hashed.column_blob(0);
  CHECK(std::equal(stored.begin(), stored.end(), digest.begin(), digest.end()));

  // And not in the files either: the database, its WAL, anything else in the data dir.
  for (const auto& entry : std::filesystem::directory_iterator(dir.data_dir())) {
    INFO(entry.path().string());
    CHECK_FALSE(contains(read_file(entry.path()), secret_part));
  }
}

TEST_CASE("Store: issue_token checks the user and the label, revoke_token the id",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  auto no_user = store.issue_token("ghost");
  REQUIRE_FALSE(no_user.ok());
  CHECK(no_user.status().code() == Code::kNotFound);
  value_or_fail(store.add_user("alice"));
  auto long_label = store.issue_token("alice", std::string(65, 'x'));
  REQUIRE_FALSE(long_label.ok());
  CHECK(long_label.status().code() == Code::kInvalidArgument);
  CHECK(contains(long_label.status().message(), "label"));
  auto control = store.issue_token("alice", "a\nb");
  REQUIRE_FALSE(control.ok());
  CHECK(control.status().code() == Code::kInvalidArgument);
  IssuedToken a = value_or_fail(store.issue_token("alice"));
  IssuedToken b = value_or_fail(store.issue_token("alice", "ci"));
  CHECK(a.plaintext != b.plaintext);
  CHECK(a.info.id != b.info.id);
  CHECK(a.info.label.empty());
  Status unknown = store.revoke_token("tk_000000000000");
  CHECK(unknown.code() == Code::kNotFound);
  env.clock.advance_ms(10);
  require_ok(store.revoke_token(b.info.id));
  auto listed = value_or_fail(store.list_tokens("alice"));
  REQUIRE(listed.size() == 2);
  CHECK_FALSE(listed[0].revoked_at_ms.has_value());
  REQUIRE(listed[1].revoked_at_ms.has_value());
  CHECK(*listed[1].revoked_at_ms == env.clock.ms());
}

// ---- boxes ----

TEST_CASE("Store: box names follow [a-z0-9][a-z0-9-]{0,30}", "[api][store][unit]") {
  struct Case {
    std::string name;
    bool valid;
  };
  const std::vector<Case> cases = {
      {"main", true},  {"0", true},      {"test-2", true}, {std::string(31, 'a'), true},
      {"", false},     {"-main", false}, {"Main", false},  {"ma_in", false},
      {"bx_1", false}, {"ma in", false}, {"m.a", false},   {std::string(32, 'a'), false},
  };
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice", 100, 1));
  for (const Case& c : cases) {
    INFO("name: " << c.name);
    CHECK(validate_box_name(c.name).ok() == c.valid);
    auto box = store.create_box(alice.id, c.name, "img", "local");
    CHECK(box.ok() == c.valid);
    if (!c.valid) {
      CHECK(box.status().code() == Code::kInvalidArgument);
      CHECK(contains(box.status().message(), "name"));
    }
  }
}

TEST_CASE("Store: box names are unique per user among live boxes", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));
  User bob = value_or_fail(store.add_user("bob"));

  Box main = value_or_fail(store.create_box(alice.id, "main", "debian-12", "local"));
  CHECK(main.id.substr(0, 3) == "bx_");
  CHECK(main.id.size() == 15);
  CHECK(main.state == BoxState::kAbsent);
  CHECK(main.image == "debian-12");
  CHECK(main.backend == "local");
  CHECK(main.created_at_ms == env.clock.ms());
  CHECK(main.state_changed_at_ms == env.clock.ms());

  auto dup = store.create_box(alice.id, "main", "x", "local");
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.status().code() == Code::kAlreadyExists);

  SECTION("another user may use the same name, and cannot see alice's box") {
    Box bobs = value_or_fail(store.create_box(bob.id, "main", "x", "local"));
    CHECK(bobs.id != main.id);
    CHECK(value_or_fail(store.get_box(bob.id, "main")).id == bobs.id);
    auto by_id = store.get_box(bob.id, main.id);
    REQUIRE_FALSE(by_id.ok());
    CHECK(by_id.status().code() == Code::kNotFound);
    CHECK(value_or_fail(store.get_box(alice.id, main.id)).name == "main");
    CHECK(value_or_fail(store.get_box(alice.id, "main")).id == main.id);
    CHECK(ids_of(value_or_fail(store.list_boxes(bob.id))) == std::vector<std::string>{bobs.id});
  }

  SECTION("a deleted box's name may be reused, and the deleted box is gone for its user") {
    require_ok(store.mark_deleted(main.id));
    require_ok(store.mark_deleted(main.id));  // idempotent
    CHECK(store.mark_deleted("bx_000000000000").code() == Code::kNotFound);
    auto gone = store.get_box(alice.id, "main");
    REQUIRE_FALSE(gone.ok());
    CHECK(gone.status().code() == Code::kNotFound);
    Box again = value_or_fail(store.create_box(alice.id, "main", "x", "local"));
    CHECK(again.id != main.id);
    CHECK(value_or_fail(store.get_box(alice.id, "main")).id == again.id);
    // The deleted row is still there for bookkeeping.
    Box old = value_or_fail(store.get_box_by_id(main.id));
    CHECK(old.deleted_at_ms.has_value());
  }
}

TEST_CASE("Store: max_boxes refuses a box past the quota until one is deleted",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));  // default: 3 boxes
  Box first = value_or_fail(store.create_box(alice.id, "main", "img", "local"));
  value_or_fail(store.create_box(alice.id, "test", "img", "local"));
  value_or_fail(store.create_box(alice.id, "third", "img", "local"));
  auto fourth = store.create_box(alice.id, "fourth", "img", "local");
  REQUIRE_FALSE(fourth.ok());
  CHECK(fourth.status().code() == Code::kResourceExhausted);
  CHECK(contains(fourth.status().message(), "max_boxes"));
  require_ok(store.mark_deleted(first.id));
  value_or_fail(store.create_box(alice.id, "fourth", "img", "local"));

  User none = value_or_fail(store.add_user("none", 0, 0));
  auto refused = store.create_box(none.id, "main", "img", "local");
  CHECK(refused.status().code() == Code::kResourceExhausted);
  auto no_user = store.create_box(9999, "main", "img", "local");
  CHECK(no_user.status().code() == Code::kNotFound);
}

TEST_CASE("Store: max_running refuses starting a second box until the first hibernates",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));  // default: 1 running
  Box main = value_or_fail(store.create_box(alice.id, "main", "img", "local"));
  Box test = value_or_fail(store.create_box(alice.id, "test", "img", "local"));
  CHECK(value_or_fail(store.count_running(alice.id)) == 0);

  env.clock.advance_ms(5);
  Box started = value_or_fail(store.set_box_state(main.id, BoxState::kStarting, "", "wk_1"));
  CHECK(started.state == BoxState::kStarting);
  CHECK(started.wake_id == "wk_1");
  CHECK(started.state_changed_at_ms == env.clock.ms());
  Box running = value_or_fail(store.set_box_state(main.id, BoxState::kRunning, "isolated: no"));
  CHECK(running.wake_id == "wk_1");  // kept when not given
  CHECK(value_or_fail(store.count_running(alice.id)) == 1);

  auto second = store.set_box_state(test.id, BoxState::kStarting, "");
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == Code::kResourceExhausted);
  CHECK(contains(second.status().message(), "max_running"));
  CHECK(value_or_fail(store.get_box_by_id(test.id)).state == BoxState::kAbsent);

  // Hibernating still holds the slot; hibernated frees it.
  value_or_fail(store.set_box_state(main.id, BoxState::kHibernating, ""));
  CHECK(store.set_box_state(test.id, BoxState::kStarting, "").status().code() ==
        Code::kResourceExhausted);
  value_or_fail(store.set_box_state(main.id, BoxState::kHibernated, ""));
  CHECK(value_or_fail(store.count_running(alice.id)) == 0);
  value_or_fail(store.set_box_state(test.id, BoxState::kStarting, ""));
  CHECK(value_or_fail(store.count_running(alice.id)) == 1);

  // The same state again keeps state_changed_at_ms; a new detail is stored.
  env.clock.advance_ms(100);
  Box same = value_or_fail(store.set_box_state(test.id, BoxState::kStarting, "pulling image"));
  CHECK(same.state_changed_at_ms == env.clock.ms() - 100);
  Box read = value_or_fail(store.get_box_by_id(test.id));
  CHECK(read.detail == "pulling image");
  CHECK(read.state_changed_at_ms == same.state_changed_at_ms);

  CHECK(store.set_box_state(test.id, static_cast<BoxState>(9), "").status().code() ==
        Code::kInvalidArgument);
  CHECK(store.set_box_state("bx_000000000000", BoxState::kRunning, "").status().code() ==
        Code::kNotFound);
  require_ok(store.set_machine_key(test.id, "local:4242"));
  CHECK(value_or_fail(store.get_box_by_id(test.id)).machine_key == "local:4242");
  CHECK(store.set_machine_key("bx_000000000000", "k").code() == Code::kNotFound);
}

TEST_CASE("Store: list_all_boxes holds live boxes and deleted ones still to release",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));
  User bob = value_or_fail(store.add_user("bob"));
  Box a = value_or_fail(store.create_box(alice.id, "main", "img", "local"));
  env.clock.advance_ms(1);
  Box b = value_or_fail(store.create_box(bob.id, "main", "img", "local"));
  env.clock.advance_ms(1);
  Box released = value_or_fail(store.create_box(bob.id, "old", "img", "local"));
  env.clock.advance_ms(1);
  Box running_deleted = value_or_fail(store.create_box(alice.id, "tmp", "img", "local"));
  value_or_fail(store.set_box_state(running_deleted.id, BoxState::kRunning, ""));
  require_ok(store.mark_deleted(released.id));         // kAbsent: nothing to release
  require_ok(store.mark_deleted(running_deleted.id));  // still running: the api must stop it
  auto all = value_or_fail(store.list_all_boxes());
  CHECK(ids_of(all) == std::vector<std::string>{a.id, b.id, running_deleted.id});
}

TEST_CASE("Store: remove_user revokes tokens, releases boxes and frees the name",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));
  User bob = value_or_fail(store.add_user("bob"));
  IssuedToken t1 = value_or_fail(store.issue_token("alice"));
  IssuedToken t2 = value_or_fail(store.issue_token("alice"));
  IssuedToken bobs_token = value_or_fail(store.issue_token("bob"));
  Box main = value_or_fail(store.create_box(alice.id, "main", "img", "local"));
  env.clock.advance_ms(1);
  Box test = value_or_fail(store.create_box(alice.id, "test", "img", "local"));
  Box gone = value_or_fail(store.create_box(alice.id, "gone", "img", "local"));
  require_ok(store.mark_deleted(gone.id));
  Box bobs_box = value_or_fail(store.create_box(bob.id, "main", "img", "local"));
  value_or_fail(store.set_box_state(main.id, BoxState::kRunning, ""));

  auto released = value_or_fail(store.remove_user("alice"));
  CHECK(released == std::vector<std::string>{main.id, test.id});  // live ones, oldest first

  CHECK(store.find_user("alice").status().code() == Code::kNotFound);
  CHECK(store.get_user(alice.id).status().code() == Code::kNotFound);
  CHECK(store.remove_user("alice").status().code() == Code::kNotFound);
  auto users = value_or_fail(store.list_users());
  REQUIRE(users.size() == 1);
  CHECK(users[0].name == "bob");

  // Tokens: none of alice's is active any more; bob's is untouched.
  auto snapshot = value_or_fail(store.tokens_if_changed(std::nullopt));
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->tokens.size() == 1);
  CHECK(snapshot->tokens[0].token_id == bobs_token.info.id);
  auto db = value_or_fail(db::Database::open(api_db_path(dir.data_dir())));
  auto revoked =
      value_or_fail(db.prepare("SELECT count(*) FROM tokens WHERE user_id = ?1 AND "
                               "revoked_at_ms IS NOT NULL"));
  require_ok(revoked.bind_int64(1, alice.id));
  REQUIRE(value_or_fail(revoked.step()));
  CHECK(revoked.column_int64(0) == 2);
  (void)t1;
  (void)t2;

  // Boxes: deleted; the running one is still listed for the api to stop.
  CHECK(value_or_fail(store.get_box_by_id(test.id)).deleted_at_ms.has_value());
  CHECK(ids_of(value_or_fail(store.list_all_boxes())) ==
        std::vector<std::string>{main.id, bobs_box.id});

  // The name is free again, for a new user with a new id and nothing of the old one.
  User again = value_or_fail(store.add_user("alice"));
  CHECK(again.id != alice.id);
  CHECK(value_or_fail(store.list_boxes(again.id)).empty());
  CHECK(value_or_fail(store.list_tokens("alice")).empty());
  value_or_fail(store.create_box(again.id, "main", "img", "local"));
}

// ---- operations ----

TEST_CASE("Store: operation events are numbered from 1 and read back after an offset",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  SyncStore store = open_sync(dir.data_dir(), env.options());
  User alice = value_or_fail(store.add_user("alice"));
  Box box = value_or_fail(store.create_box(alice.id, "main", "img", "local"));

  Operation op = value_or_fail(store.begin_operation(box.id, "ensure"));
  CHECK(op.id.substr(0, 3) == "op_");
  CHECK(op.box_id == box.id);
  CHECK(op.user_id == alice.id);
  CHECK(op.phase == Phase::kPending);
  CHECK_FALSE(op.finished_at_ms.has_value());
  CHECK(value_or_fail(store.events_after(op.id, 0)).empty());

  CHECK(value_or_fail(store.append_event(op.id, Phase::kCreating, "cloning")) == 1);
  env.clock.advance_ms(7);
  CHECK(value_or_fail(store.append_event(op.id, Phase::kStarting, "")) == 2);
  CHECK(value_or_fail(store.append_event(op.id, Phase::kStarting, "agent up")) == 3);
  Operation mid = value_or_fail(store.get_operation(op.id));
  CHECK(mid.phase == Phase::kStarting);
  CHECK(mid.detail == "agent up");

  auto all = value_or_fail(store.events_after(op.id, 0));
  REQUIRE(all.size() == 3);
  CHECK(all[0].seq == 1);
  CHECK(all[0].phase == Phase::kCreating);
  CHECK(all[0].detail == "cloning");
  CHECK(all[1].at_ms == env.clock.ms());
  CHECK(all[2].operation_id == op.id);

  // Resume by offset_key: after event 1, the rest.
  int64_t after = value_or_fail(parse_offset_key(offset_key(all[0].seq)));
  auto rest = value_or_fail(store.events_after(op.id, after));
  REQUIRE(rest.size() == 2);
  CHECK(rest[0].seq == 2);
  CHECK(rest[1].seq == 3);
  CHECK(value_or_fail(store.events_after(op.id, 3)).empty());

  // Terminal phases go through finish_operation, which records them as the last event.
  CHECK(store.append_event(op.id, Phase::kDone, "").status().code() == Code::kInvalidArgument);
  CHECK(store.append_event(op.id, static_cast<Phase>(42), "").status().code() ==
        Code::kInvalidArgument);
  CHECK(store.finish_operation(op.id, Phase::kStarting, "").status().code() ==
        Code::kInvalidArgument);
  CHECK(value_or_fail(store.finish_operation(op.id, Phase::kDone, "running")) == 4);
  auto last = value_or_fail(store.events_after(op.id, 3));
  REQUIRE(last.size() == 1);
  CHECK(last[0].phase == Phase::kDone);
  Operation done = value_or_fail(store.get_operation(op.id));
  CHECK(done.phase == Phase::kDone);
  REQUIRE(done.finished_at_ms.has_value());
  CHECK(*done.finished_at_ms == env.clock.ms());

  CHECK(store.append_event(op.id, Phase::kStarting, "").status().code() ==
        Code::kFailedPrecondition);
  CHECK(store.finish_operation(op.id, Phase::kFailed, "").status().code() ==
        Code::kFailedPrecondition);
  CHECK(store.append_event("op_000000000000", Phase::kStarting, "").status().code() ==
        Code::kNotFound);
  CHECK(store.events_after("op_000000000000", 0).status().code() == Code::kNotFound);
  CHECK(store.begin_operation("bx_000000000000", "ensure").status().code() == Code::kNotFound);
  CHECK(store.begin_operation(box.id, "").status().code() == Code::kInvalidArgument);
  CHECK(store.begin_operation(box.id, "Ensure!").status().code() == Code::kInvalidArgument);
}

TEST_CASE("Store: offset keys are decimal seqs, anything else is kInvalidArgument",
          "[api][store][unit]") {
  CHECK(offset_key(17) == "17");
  CHECK(value_or_fail(parse_offset_key("")) == 0);
  CHECK(value_or_fail(parse_offset_key("0")) == 0);
  CHECK(value_or_fail(parse_offset_key("123")) == 123);
  for (std::string_view bad : {"-1", "1a", " 1", "0x10", "1234567890123456789"}) {
    INFO(bad);
    auto r = parse_offset_key(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(contains(r.status().message(), "offset_key"));
  }
}

TEST_CASE("Store: list_unfinished_operations finds what a crash left behind",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  std::string hibernate_id;
  std::string delete_id;
  {
    SyncStore store = open_sync(dir.data_dir(), env.options());
    User alice = value_or_fail(store.add_user("alice"));
    Box box = value_or_fail(store.create_box(alice.id, "main", "img", "local"));
    Operation ensure = value_or_fail(store.begin_operation(box.id, "ensure"));
    env.clock.advance_ms(1);
    Operation hibernate = value_or_fail(store.begin_operation(box.id, "hibernate"));
    env.clock.advance_ms(1);
    Operation del = value_or_fail(store.begin_operation(box.id, "delete", "keep_nothing"));
    CHECK(del.params == "keep_nothing");
    value_or_fail(store.append_event(hibernate.id, Phase::kFreezing, ""));
    value_or_fail(store.finish_operation(ensure.id, Phase::kFailed, "no backend"));
    hibernate_id = hibernate.id;
    delete_id = del.id;
  }
  // A new process (the api after a crash) finds the two unfinished ones, oldest first.
  SyncStore store = open_sync(dir.data_dir(), env.options());
  auto unfinished = value_or_fail(store.list_unfinished_operations());
  REQUIRE(unfinished.size() == 2);
  CHECK(unfinished[0].id == hibernate_id);
  CHECK(unfinished[0].phase == Phase::kFreezing);
  CHECK(unfinished[0].kind == "hibernate");
  CHECK(unfinished[1].id == delete_id);
  CHECK(unfinished[0].params.empty());
  CHECK(unfinished[1].params == "keep_nothing");  // how it was asked survives the restart
  value_or_fail(store.finish_operation(hibernate_id, Phase::kFailed, "api restarted"));
  value_or_fail(store.finish_operation(delete_id, Phase::kDone, ""));
  CHECK(value_or_fail(store.list_unfinished_operations()).empty());
}

// ---- the async front door ----

TEST_CASE("Store: async calls run on the worker and resume with the same results",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  auto store = open_async(dir.data_dir(), env.options());
  User alice = value_or_fail(await_sync(store->add_user("alice", 2, 1)));
  CHECK(value_or_fail(await_sync(store->find_user("alice"))).id == alice.id);
  CHECK(value_or_fail(await_sync(store->get_user(alice.id))).name == "alice");
  CHECK(value_or_fail(await_sync(store->list_users())).size() == 1);

  // Several calls from one coroutine, arguments built from temporaries.
  Result<Box> box = internal_error("not run");
  Result<int64_t> seq = internal_error("not run");
  Result<std::vector<OperationEvent>> events = internal_error("not run");
  run_sync([&]() -> asio::awaitable<void> {
    box = co_await store->create_box(alice.id, std::string("ma") + "in", "img", "local");
    if (!box.ok()) co_return;
    auto started = co_await store->set_box_state(box->id, BoxState::kStarting, "", "wk_9");
    if (!started.ok()) co_return;
    Status keyed = co_await store->set_machine_key(box->id, "m1");
    if (!keyed.ok()) co_return;
    auto op = co_await store->begin_operation(box->id, "ensure");
    if (!op.ok()) co_return;
    seq = co_await store->append_event(op->id, Phase::kStarting, "booting");
    auto finished = co_await store->finish_operation(op->id, Phase::kDone, "");
    if (!finished.ok()) co_return;
    events = co_await store->events_after(op->id, 0);
  }());
  Box created = value_or_fail(box);
  CHECK(value_or_fail(seq) == 1);
  CHECK(value_or_fail(events).size() == 2);
  Box read = value_or_fail(await_sync(store->get_box(alice.id, "main")));
  CHECK(read.id == created.id);
  CHECK(read.state == BoxState::kStarting);
  CHECK(read.wake_id == "wk_9");
  CHECK(read.machine_key == "m1");
  CHECK(value_or_fail(await_sync(store->count_running(alice.id))) == 1);
  CHECK(value_or_fail(await_sync(store->list_boxes(alice.id))).size() == 1);
  CHECK(value_or_fail(await_sync(store->list_all_boxes())).size() == 1);
  CHECK(value_or_fail(await_sync(store->list_unfinished_operations())).empty());
  CHECK(value_or_fail(await_sync(store->get_box_by_id(created.id))).name == "main");

  IssuedToken t = value_or_fail(await_sync(store->issue_token("alice", "x")));
  CHECK(value_or_fail(await_sync(store->list_tokens("alice"))).size() == 1);
  Status revoked = await_sync(store->revoke_token(t.info.id));
  require_ok(revoked);
  Status deleted = await_sync(store->mark_deleted(created.id));
  require_ok(deleted);
  auto released = value_or_fail(await_sync(store->remove_user("alice")));
  CHECK(released.empty());
  CHECK(value_or_fail(await_sync(store->change_generation())) >= 4);
  auto missing = await_sync(store->find_user("alice"));
  CHECK(missing.status().code() == Code::kNotFound);
}

}  // namespace
}  // namespace cb::api
