#include "db/database.h"

#include "db/statement.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>

#include <array>
#include <fstream>
#include <string>

namespace cb::db {
namespace {

using test::TempDir;

Database open_or_fail(const std::filesystem::path& path, const OpenOptions& options = {}) {
  auto db = Database::open(path, options);
  INFO(db.status().to_string());
  REQUIRE(db.ok());
  return std::move(db).value();
}

std::string query_text(Database& db, std::string_view sql) {
  auto st = db.prepare(sql);
  REQUIRE(st.ok());
  auto row = st->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  return std::string(st->column_text(0));
}

int64_t count_rows(Database& db, std::string_view table) {
  auto st = db.prepare("SELECT count(*) FROM " + std::string(table));
  REQUIRE(st.ok());
  auto row = st->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  return st->column_int64(0);
}

TEST_CASE("Database: open creates the file with WAL, synchronous=NORMAL and foreign keys on",
          "[db][unit]") {
  TempDir dir;
  Database db = open_or_fail(dir.file("a.db"));
  CHECK(std::filesystem::exists(dir.file("a.db")));
  CHECK(query_text(db, "PRAGMA journal_mode") == "wal");
  CHECK(query_text(db, "PRAGMA synchronous") == "1");  // 1 = NORMAL
  CHECK(query_text(db, "PRAGMA foreign_keys") == "1");
}

TEST_CASE("Database: a file that is not SQLite is kDataLoss", "[db][unit]") {
  TempDir dir;
  {
    std::ofstream out(dir.file("notes.txt"));
    out << "these are plain notes, not a database; long enough to cover a header page.\n";
  }
  auto db = Database::open(dir.file("notes.txt"));
  REQUIRE_FALSE(db.ok());
  CHECK(db.status().code() == Code::kDataLoss);
  CHECK(db.status().message().find("not a database") != std::string_view::npos);
  CHECK(db.status().message().find("notes.txt") != std::string_view::npos);
}

TEST_CASE("Database: open in a missing directory is kInternal naming the path", "[db][unit]") {
  TempDir dir;
  auto db = Database::open(dir.file("missing") / "a.db");
  REQUIRE_FALSE(db.ok());
  CHECK(db.status().code() == Code::kInternal);
  CHECK(db.status().message().find("missing") != std::string_view::npos);
}

TEST_CASE("Statement: binds and reads int64, double, text, blob and null", "[db][unit]") {
  TempDir dir;
  Database db = open_or_fail(dir.file("a.db"));
  REQUIRE(db.exec("CREATE TABLE v (i INTEGER, d REAL, t TEXT, b BLOB, n TEXT)").ok());

  const std::array<uint8_t, 4> blob = {0x00, 0xff, 0x10, 0x00};
  {
    auto ins = db.prepare("INSERT INTO v VALUES (?1, ?2, ?3, ?4, ?5)");
    REQUIRE(ins.ok());
    REQUIRE(ins->bind_int64(1, int64_t{1} << 40).ok());
    REQUIRE(ins->bind_double(2, 2.5).ok());
    REQUIRE(ins->bind_text(3, std::string_view("h\0i", 3)).ok());
    REQUIRE(ins->bind_blob(4, blob).ok());
    REQUIRE(ins->bind_null(5).ok());
    REQUIRE(ins->execute().ok());
    CHECK(db.changes() == 1);
    CHECK(db.last_insert_rowid() == 1);
    CHECK(ins->bind_int64(6, 0).code() == Code::kInternal);  // no parameter 6
  }
  auto sel = db.prepare("SELECT i, d, t, b, n FROM v");
  REQUIRE(sel.ok());
  auto row = sel->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  CHECK(sel->column_count() == 5);
  CHECK(sel->column_int64(0) == int64_t{1} << 40);
  CHECK(sel->column_double(1) == 2.5);
  CHECK(sel->column_text(2) == std::string_view("h\0i", 3));
  auto b = sel->column_blob(3);
  CHECK(std::vector<uint8_t>(b.begin(), b.end()) == std::vector<uint8_t>(blob.begin(), blob.end()));
  CHECK(sel->column_is_null(4));
  CHECK_FALSE(sel->column_is_null(0));
  row = sel->step();
  REQUIRE(row.ok());
  CHECK_FALSE(*row);
}

TEST_CASE("Statement: an empty blob is stored as a blob, not null", "[db][unit]") {
  Database db = open_or_fail(":memory:");
  auto st = db.prepare("SELECT typeof(?1), length(?1)");
  REQUIRE(st.ok());
  REQUIRE(st->bind_blob(1, std::span<const uint8_t>()).ok());
  auto row = st->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  CHECK(st->column_text(0) == "blob");
  CHECK(st->column_int64(1) == 0);
}

TEST_CASE("Statement: an empty text, even a default string_view, is text, not null", "[db][unit]") {
  Database db = open_or_fail(":memory:");
  auto st = db.prepare("SELECT typeof(?1), typeof(?2)");
  REQUIRE(st.ok());
  REQUIRE(st->bind_text(1, std::string_view()).ok());  // null data pointer
  REQUIRE(st->bind_text(2, "").ok());
  auto row = st->step();
  REQUIRE(row.ok());
  REQUIRE(*row);
  CHECK(st->column_text(0) == "text");
  CHECK(st->column_text(1) == "text");
}

TEST_CASE("Database: prepared statements are cached by SQL text and reset on release",
          "[db][unit]") {
  Database db = open_or_fail(":memory:");
  constexpr std::string_view kSql = "SELECT ?1 + 1";
  for (int i = 0; i < 3; ++i) {
    auto st = db.prepare(kSql);
    REQUIRE(st.ok());
    // Bindings were cleared when the previous handle was released: an unbound parameter is
    // NULL, and NULL + 1 is NULL.
    auto row = st->step();
    REQUIRE(row.ok());
    CHECK(st->column_is_null(0));
    st->reset();
    REQUIRE(st->bind_int64(1, i).ok());
    row = st->step();
    REQUIRE(row.ok());
    CHECK(st->column_int64(0) == i + 1);
  }
  SECTION("the same SQL may be held twice at once") {
    auto outer = db.prepare(kSql);
    auto inner = db.prepare(kSql);
    REQUIRE(outer.ok());
    REQUIRE(inner.ok());
    REQUIRE(outer->bind_int64(1, 10).ok());
    REQUIRE(inner->bind_int64(1, 20).ok());
    REQUIRE(*outer->step());
    REQUIRE(*inner->step());
    CHECK(outer->column_int64(0) == 11);
    CHECK(inner->column_int64(0) == 21);
  }
}

TEST_CASE("Database: prepare rejects bad SQL and more than one statement", "[db][unit]") {
  Database db = open_or_fail(":memory:");
  auto bad = db.prepare("SELEC 1");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kInternal);
  CHECK(bad.status().message().find("syntax error") != std::string_view::npos);

  auto two = db.prepare("SELECT 1; SELECT 2");
  REQUIRE_FALSE(two.ok());
  CHECK(two.status().code() == Code::kInvalidArgument);

  CHECK(db.prepare("SELECT 1;  \n").ok());  // a trailing semicolon is fine
}

TEST_CASE("Transaction: commit keeps the writes and destruction rolls them back", "[db][unit]") {
  TempDir dir;
  Database db = open_or_fail(dir.file("a.db"));
  REQUIRE(db.exec("CREATE TABLE t (x INTEGER)").ok());
  {
    auto txn = db.begin();
    REQUIRE(txn.ok());
    REQUIRE(db.exec("INSERT INTO t VALUES (1)").ok());
    REQUIRE(txn->commit().ok());
    CHECK_FALSE(txn->active());
    CHECK(txn->commit().code() == Code::kFailedPrecondition);
  }
  {
    auto txn = db.begin();
    REQUIRE(txn.ok());
    REQUIRE(db.exec("INSERT INTO t VALUES (2)").ok());
    CHECK(count_rows(db, "t") == 2);  // visible inside the transaction
  }
  CHECK(count_rows(db, "t") == 1);
  {
    auto txn = db.begin();
    REQUIRE(txn.ok());
    REQUIRE(db.exec("INSERT INTO t VALUES (3)").ok());
    REQUIRE(txn->rollback().ok());
  }
  CHECK(count_rows(db, "t") == 1);

  // The committed row survives closing the connection.
  Database reopened = open_or_fail(dir.file("a.db"));
  CHECK(count_rows(reopened, "t") == 1);
}

TEST_CASE("Transaction: begin while one is open is kFailedPrecondition", "[db][unit]") {
  Database db = open_or_fail(":memory:");
  auto first = db.begin();
  REQUIRE(first.ok());
  auto second = db.begin();
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == Code::kFailedPrecondition);
  Transaction moved = std::move(first).value();
  CHECK(moved.active());
  REQUIRE(moved.commit().ok());
  CHECK(db.begin().ok());
}

TEST_CASE("Transaction: fail_next_commit_for_test fails one commit and rolls it back",
          "[db][unit]") {
  Database db = open_or_fail(":memory:");
  REQUIRE(db.exec("CREATE TABLE t (x INTEGER)").ok());
  db.fail_next_commit_for_test();
  {
    auto txn = db.begin();
    REQUIRE(txn.ok());
    REQUIRE(db.exec("INSERT INTO t VALUES (1)").ok());
    Status s = txn->commit();
    CHECK(s.code() == Code::kInternal);
    CHECK_FALSE(txn->active());
  }
  CHECK(count_rows(db, "t") == 0);
  // Only the next commit fails.
  auto txn = db.begin();
  REQUIRE(txn.ok());
  REQUIRE(db.exec("INSERT INTO t VALUES (1)").ok());
  REQUIRE(txn->commit().ok());
  CHECK(count_rows(db, "t") == 1);
}

TEST_CASE("Database: constraint violations map to kAlreadyExists and kFailedPrecondition",
          "[db][unit]") {
  Database db = open_or_fail(":memory:");
  REQUIRE(db.exec("CREATE TABLE box (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
                  "                  cpus INTEGER CHECK (cpus > 0));"
                  "CREATE TABLE disk (box_id INTEGER NOT NULL REFERENCES box(id));"
                  "INSERT INTO box VALUES (1, 'main', 2);")
              .ok());
  auto insert = [&](std::string_view sql) { return db.exec(sql); };
  CHECK(insert("INSERT INTO box VALUES (2, 'main', 1)").code() == Code::kAlreadyExists);
  CHECK(insert("INSERT INTO box VALUES (1, 'other', 1)").code() == Code::kAlreadyExists);
  CHECK(insert("INSERT INTO box VALUES (3, NULL, 1)").code() == Code::kFailedPrecondition);
  CHECK(insert("INSERT INTO box VALUES (3, 'x', 0)").code() == Code::kFailedPrecondition);
  Status fk = insert("INSERT INTO disk VALUES (42)");
  CHECK(fk.code() == Code::kFailedPrecondition);
  CHECK(fk.message().find("FOREIGN KEY") != std::string_view::npos);

  // Through a prepared statement too.
  auto st = db.prepare("INSERT INTO box (name, cpus) VALUES (?1, 1)");
  REQUIRE(st.ok());
  REQUIRE(st->bind_text(1, "main").ok());
  auto row = st->step();
  REQUIRE_FALSE(row.ok());
  CHECK(row.status().code() == Code::kAlreadyExists);
  CHECK(row.status().message().find("UNIQUE") != std::string_view::npos);
}

TEST_CASE("Database: a write lock held past the busy timeout is kUnavailable", "[db][unit]") {
  TempDir dir;
  OpenOptions quick;
  quick.busy_timeout = std::chrono::milliseconds(20);
  Database a = open_or_fail(dir.file("a.db"), quick);
  Database b = open_or_fail(dir.file("a.db"), quick);
  REQUIRE(a.exec("CREATE TABLE t (x INTEGER)").ok());
  auto held = a.begin();
  REQUIRE(held.ok());
  auto blocked = b.begin();
  REQUIRE_FALSE(blocked.ok());
  CHECK(blocked.status().code() == Code::kUnavailable);
  // WAL: a reader is not blocked by the writer.
  CHECK(count_rows(b, "t") == 0);
}

}  // namespace
}  // namespace cb::db
