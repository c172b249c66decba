#include "roles/api/store/schema.h"

#include "db/database.h"
#include "db/migrate.h"
#include "roles/api/store/store.h"
#include "store_test_util.h"

#include <catch2/catch.hpp>

#include <string>
#include <sys/stat.h>

namespace cb::api {
namespace {

using testing::open_sync;
using testing::require_ok;
using testing::TempDir;
using testing::TestEnv;
using testing::value_or_fail;

std::string query_text(db::Database& db, std::string_view sql) {
  auto st = db.prepare(sql);
  REQUIRE(st.ok());
  auto row = st->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  return std::string(st->column_text(0));
}

mode_t mode_of(const std::filesystem::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

TEST_CASE("api schema: migrations apply to a new data dir and a reopen keeps the data",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  const int latest = static_cast<int>(api_db_migrations().size());
  REQUIRE(latest >= 1);
  {
    SyncStore store = open_sync(dir.data_dir(), env.options());
    value_or_fail(store.add_user("alice"));
  }
  // open() made the directory private and the database file private: it holds token hashes.
  CHECK(mode_of(dir.data_dir()) == 0700);
  CHECK(mode_of(api_db_path(dir.data_dir())) == 0600);

  auto db = value_or_fail(db::Database::open(api_db_path(dir.data_dir())));
  CHECK(value_or_fail(db::schema_version(db)) == latest);
  CHECK(query_text(db, "PRAGMA journal_mode") == "wal");
  for (const char* table : {"users", "tokens", "boxes", "operations", "operation_events", "meta"}) {
    INFO(table);
    auto st =
        value_or_fail(db.prepare("SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
                                 "AND name = ?1"));
    require_ok(st.bind_text(1, table));
    REQUIRE(value_or_fail(st.step()));
    CHECK(st.column_int64(0) == 1);
  }
  CHECK(query_text(db, "SELECT value FROM meta WHERE key = 'change_generation'") == "1");

  // Reopening applies nothing new and finds the user; so does the async Store.
  SyncStore again = open_sync(dir.data_dir(), env.options());
  CHECK(value_or_fail(again.find_user("alice")).name == "alice");
  auto async = testing::open_async(dir.data_dir(), env.options());
  CHECK(value_or_fail(db::schema_version(db)) == latest);
}

TEST_CASE("api schema: a database from a newer binary is refused", "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  { open_sync(dir.data_dir(), env.options()); }
  {
    auto db = value_or_fail(db::Database::open(api_db_path(dir.data_dir())));
    require_ok(db.exec("PRAGMA user_version = 999"));
  }
  auto store = SyncStore::open(dir.data_dir(), env.options());
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == Code::kFailedPrecondition);
}

TEST_CASE("api schema: a data dir that cannot be created is an error, not a crash",
          "[api][store][unit]") {
  TempDir dir;
  TestEnv env;
  {
    std::ofstream blocker(dir.path() / "file");
    blocker << "x";
  }
  auto store = SyncStore::open(dir.path() / "file" / "data", env.options());
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() != Code::kOk);
  auto empty = SyncStore::open("", env.options());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace cb::api
