#include "db/database.h"

#include "base/log.h"
#include "db/errors_internal.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <string>
#include <unordered_map>
#include <utility>

namespace cb::db {

namespace internal {

// The connection and its statement cache. Lives behind a unique_ptr owned by the Database
// so its address is stable; Statements and Transactions point at it.
struct Connection {
  struct Cached {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;  // a Statement handle holds |stmt|
  };

  ~Connection() {
    for (auto& [sql, cached] : cache) sqlite3_finalize(cached.stmt);
    // close_v2: if a caller broke the contract and still holds an uncached Statement, the
    // connection lingers until that statement is finalized instead of leaking silently.
    sqlite3_close_v2(db);
  }

  sqlite3* db = nullptr;
  // Keyed by SQL text. unordered_map never moves its nodes, so &Cached::in_use stays valid
  // for Statement handles while other entries are inserted.
  std::unordered_map<std::string, Cached> cache;
  bool fail_next_commit = false;
};

}  // namespace internal

namespace {

// Short form of |sql| for error messages.
std::string_view sql_excerpt(std::string_view sql) {
  constexpr std::size_t kMax = 80;
  return sql.size() <= kMax ? sql : sql.substr(0, kMax);
}

bool only_space_or_semicolons(const char* p) {
  for (; *p != '\0'; ++p) {
    if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r' && *p != ';') return false;
  }
  return true;
}

Status exec_raw(sqlite3* db, std::string_view sql) {
  std::string text(sql);
  int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    return internal::sqlite_status(rc, db, fmt::format("exec \"{}\"", sql_excerpt(sql)));
  }
  return ok_status();
}

void rollback_quietly(sqlite3* db) {
  if (sqlite3_get_autocommit(db)) return;  // SQLite already rolled back (e.g. on SQLITE_FULL)
  Status s = exec_raw(db, "ROLLBACK");
  if (!s.ok()) log::warn("db rollback failed", {{"status", s.to_string()}});
}

// Applies the connection settings documented in database.h.
Status configure(Database& db, const std::filesystem::path& path) {
  {
    // journal_mode is the first statement that reads the file header, so a file that is not
    // a database fails here with SQLITE_NOTADB (kDataLoss).
    ASSIGN_OR_RETURN(Statement mode, db.prepare("PRAGMA journal_mode=WAL"));
    ASSIGN_OR_RETURN(bool row, mode.step());
    if (row && mode.column_text(0) != "wal" && path != ":memory:") {
      // WAL needs shared memory (mmap of a -shm file); some network filesystems lack it.
      log::warn("db journal_mode is not wal",
                {{"path", path.string()}, {"mode", std::string(mode.column_text(0))}});
    }
  }
  return db.exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
}

}  // namespace

// ---- Database ----

Database::Database(std::unique_ptr<internal::Connection> conn) : conn_(std::move(conn)) {}
Database::Database(Database&& other) noexcept = default;
Database& Database::operator=(Database&& other) noexcept = default;
Database::~Database() = default;

Result<Database> Database::open(const std::filesystem::path& path, const OpenOptions& options) {
  auto conn = std::make_unique<internal::Connection>();
  // NOMUTEX: the connection is confined to one thread (see the header), so SQLite's
  // per-connection mutex would be pure overhead.
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &conn->db, flags, nullptr);
  if (rc != SQLITE_OK) {
    return internal::sqlite_status(rc, conn->db, fmt::format("open {}", path.string()));
  }
  sqlite3_extended_result_codes(conn->db, 1);
  sqlite3_busy_timeout(conn->db, static_cast<int>(options.busy_timeout.count()));
  Database db(std::move(conn));

  Status s = configure(db, path);
  if (!s.ok()) return s.with_prefix(path.string());
  return db;
}

Status Database::exec(std::string_view sql) { return exec_raw(conn_->db, sql); }

Result<Statement> Database::prepare(std::string_view sql) {
  auto it = conn_->cache.find(std::string(sql));
  if (it != conn_->cache.end() && !it->second.in_use) {
    it->second.in_use = true;
    return Statement(conn_->db, it->second.stmt, &it->second.in_use);
  }
  bool cache = it == conn_->cache.end();
  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v3(conn_->db, sql.data(), static_cast<int>(sql.size()),
                              cache ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, &tail);
  std::string what = fmt::format("prepare \"{}\"", sql_excerpt(sql));
  if (rc != SQLITE_OK) return internal::sqlite_status(rc, conn_->db, what);
  if (stmt == nullptr) return invalid_argument(what + ": no statement");
  // |tail| points into |sql|, which need not be NUL-terminated.
  std::string rest(tail, sql.data() + sql.size() - tail);
  if (!only_space_or_semicolons(rest.c_str())) {
    sqlite3_finalize(stmt);
    return invalid_argument(what + ": more than one statement (use exec)");
  }
  if (!cache) return Statement(conn_->db, stmt, nullptr);
  auto [slot, inserted] = conn_->cache.emplace(std::string(sql), internal::Connection::Cached{});
  slot->second.stmt = stmt;
  slot->second.in_use = true;
  return Statement(conn_->db, stmt, &slot->second.in_use);
}

Result<Transaction> Database::begin() {
  if (!sqlite3_get_autocommit(conn_->db)) {
    return failed_precondition("begin: a transaction is already open on this connection");
  }
  RETURN_IF_ERROR(exec_raw(conn_->db, "BEGIN IMMEDIATE"));
  return Transaction(conn_.get());
}

int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(conn_->db); }

int64_t Database::changes() const { return sqlite3_changes64(conn_->db); }

void Database::fail_next_commit_for_test() { conn_->fail_next_commit = true; }

// ---- Transaction ----

Transaction::Transaction(Transaction&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)) {}

Transaction& Transaction::operator=(Transaction&& other) noexcept {
  if (this != &other) {
    if (conn_ != nullptr) rollback_quietly(conn_->db);
    conn_ = std::exchange(other.conn_, nullptr);
  }
  return *this;
}

Transaction::~Transaction() {
  if (conn_ != nullptr) rollback_quietly(conn_->db);
}

Status Transaction::commit() {
  if (conn_ == nullptr) return failed_precondition("commit: transaction is not active");
  internal::Connection* conn = std::exchange(conn_, nullptr);
  if (conn->fail_next_commit) {
    conn->fail_next_commit = false;
    rollback_quietly(conn->db);
    return internal_error("commit: injected failure (fail_next_commit_for_test); rolled back");
  }
  Status s = exec_raw(conn->db, "COMMIT");
  if (!s.ok()) rollback_quietly(conn->db);
  return s;
}

Status Transaction::rollback() {
  if (conn_ == nullptr) return failed_precondition("rollback: transaction is not active");
  internal::Connection* conn = std::exchange(conn_, nullptr);
  if (sqlite3_get_autocommit(conn->db)) return ok_status();
  return exec_raw(conn->db, "ROLLBACK");
}

Status backup_database(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  if (!std::filesystem::exists(from, ec))
    return not_found(fmt::format("backup: {} does not exist", from.string()));
  sqlite3* src = nullptr;
  sqlite3* dst = nullptr;
  struct Close {
    sqlite3*& a;
    sqlite3*& b;
    ~Close() {
      sqlite3_close_v2(a);
      sqlite3_close_v2(b);
    }
  } close{src, dst};
  int rc = sqlite3_open_v2(from.c_str(), &src, SQLITE_OPEN_READWRITE, nullptr);
  if (rc != SQLITE_OK) return internal::sqlite_status(rc, src, "backup: open " + from.string());
  rc = sqlite3_open_v2(to.c_str(), &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) return internal::sqlite_status(rc, dst, "backup: open " + to.string());
  sqlite3_busy_timeout(src, 5000);
  sqlite3_busy_timeout(dst, 5000);
  sqlite3_backup* backup = sqlite3_backup_init(dst, "main", src, "main");
  if (backup == nullptr)
    return internal::sqlite_status(sqlite3_errcode(dst), dst, "backup: " + to.string());
  // All pages in one step: one read transaction on |from|, so the copy is of one moment.
  // A step that finds a lock held retries (the busy handlers already waited).
  for (int attempt = 0; attempt < 5; ++attempt) {
    rc = sqlite3_backup_step(backup, -1);
    if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
    sqlite3_sleep(100);
  }
  int finished = sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE)
    return internal::sqlite_status(rc, dst,
                                   fmt::format("backup {} into {}", from.string(), to.string()));
  if (finished != SQLITE_OK)
    return internal::sqlite_status(finished, dst, "backup: finish " + to.string());
  return ok_status();
}

}  // namespace cb::db
