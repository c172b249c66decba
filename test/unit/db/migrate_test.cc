#include "db/migrate.h"

#include "db/database.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>

#include <fstream>

namespace cb::db {
namespace {

using test::TempDir;

constexpr Migration kV1[] = {
    {1, "CREATE TABLE box (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"},
};
constexpr Migration kV3[] = {
    {1, "CREATE TABLE box (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"},
    {2, "ALTER TABLE box ADD COLUMN cpus INTEGER NOT NULL DEFAULT 1;"},
    {3,
     "CREATE TABLE disk (box_id INTEGER NOT NULL REFERENCES box(id));"
     "CREATE INDEX disk_box ON disk(box_id);"},
};

Database open_or_fail(const std::filesystem::path& path) {
  auto db = Database::open(path);
  INFO(db.status().to_string());
  REQUIRE(db.ok());
  return std::move(db).value();
}

int version_of(Database& db) {
  auto v = schema_version(db);
  REQUIRE(v.ok());
  return *v;
}

TEST_CASE("migrate: applies pending migrations, records user_version and survives reopen",
          "[db][unit]") {
  TempDir dir;
  {
    Database db = open_or_fail(dir.file("a.db"));
    CHECK(version_of(db) == 0);
    REQUIRE(migrate(db, kV1).ok());
    CHECK(version_of(db) == 1);
    REQUIRE(db.exec("INSERT INTO box (name) VALUES ('main')").ok());
  }
  {
    // A newer binary: only versions 2 and 3 run, and the old row is kept.
    Database db = open_or_fail(dir.file("a.db"));
    Status s = migrate(db, kV3);
    INFO(s.to_string());
    REQUIRE(s.ok());
    CHECK(version_of(db) == 3);
    auto st = db.prepare("SELECT name, cpus FROM box");
    REQUIRE(st.ok());
    REQUIRE(*st->step());
    CHECK(st->column_text(0) == "main");
    CHECK(st->column_int64(1) == 1);
  }
  {
    // Same binary again: nothing to do.
    Database db = open_or_fail(dir.file("a.db"));
    REQUIRE(migrate(db, kV3).ok());
    CHECK(version_of(db) == 3);
  }
}

TEST_CASE("migrate: a database newer than the binary is kFailedPrecondition", "[db][unit]") {
  TempDir dir;
  {
    Database db = open_or_fail(dir.file("a.db"));
    REQUIRE(migrate(db, kV3).ok());
  }
  Database db = open_or_fail(dir.file("a.db"));
  Status s = migrate(db, kV1);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK(s.message().find("newer") != std::string_view::npos);
  CHECK(version_of(db) == 3);
}

TEST_CASE("migrate: a failing script leaves the database at the last applied version",
          "[db][unit]") {
  TempDir dir;
  constexpr Migration kBroken[] = {
      kV3[0],
      {2, "CREATE TABLE half (x INTEGER); INSERT INTO no_such_table VALUES (1);"},
  };
  Database db = open_or_fail(dir.file("a.db"));
  Status s = migrate(db, kBroken);
  CHECK(s.code() == Code::kInternal);
  CHECK(s.message().find("migration 2") != std::string_view::npos);
  CHECK(s.message().find("no_such_table") != std::string_view::npos);
  CHECK(version_of(db) == 1);
  // The first statement of the broken script was rolled back with it.
  CHECK(db.prepare("SELECT * FROM half").status().code() == Code::kInternal);
}

TEST_CASE("migrate: a failed commit leaves user_version unchanged", "[db][unit]") {
  TempDir dir;
  Database db = open_or_fail(dir.file("a.db"));
  db.fail_next_commit_for_test();
  Status s = migrate(db, kV1);
  CHECK(s.code() == Code::kInternal);
  CHECK(version_of(db) == 0);
  REQUIRE(migrate(db, kV1).ok());
  CHECK(version_of(db) == 1);
}

TEST_CASE("migrate: a list not numbered 1, 2, 3 is kInvalidArgument", "[db][unit]") {
  Database db = open_or_fail(":memory:");
  constexpr Migration kGap[] = {{1, "SELECT 1;"}, {3, "SELECT 1;"}};
  CHECK(migrate(db, kGap).code() == Code::kInvalidArgument);
  constexpr Migration kZero[] = {{0, "SELECT 1;"}};
  CHECK(migrate(db, kZero).code() == Code::kInvalidArgument);
  CHECK(version_of(db) == 0);
}

}  // namespace
}  // namespace cb::db
