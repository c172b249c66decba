#include "db/statement.h"

#include "db/errors_internal.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <utility>

namespace cb::db {

namespace {

Status bind_result(int rc, sqlite3* db, int index) {
  if (rc == SQLITE_OK) return ok_status();
  return internal::sqlite_status(rc, db, fmt::format("bind parameter {}", index));
}

}  // namespace

Statement::Statement(sqlite3* db, sqlite3_stmt* stmt, bool* in_use)
    : db_(db), stmt_(stmt), in_use_(in_use) {}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      in_use_(std::exchange(other.in_use_, nullptr)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    release();
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    in_use_ = std::exchange(other.in_use_, nullptr);
  }
  return *this;
}

Statement::~Statement() { release(); }

void Statement::release() {
  if (stmt_ == nullptr) return;
  if (in_use_ != nullptr) {
    // Back to the cache: reset so the statement holds no read snapshot, and drop bindings
    // so a blob bound by this user is not kept alive (or leaked to the next user).
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    *in_use_ = false;
  } else {
    sqlite3_finalize(stmt_);
  }
  stmt_ = nullptr;
  in_use_ = nullptr;
}

Status Statement::bind_int64(int index, int64_t value) {
  return bind_result(sqlite3_bind_int64(stmt_, index, value), db_, index);
}

Status Statement::bind_double(int index, double value) {
  return bind_result(sqlite3_bind_double(stmt_, index, value), db_, index);
}

Status Statement::bind_text(int index, std::string_view value) {
  // A default string_view has a null pointer, which SQLite would bind as NULL: bind "".
  if (value.data() == nullptr) value = std::string_view("", 0);
  return bind_result(
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
      db_, index);
}

Status Statement::bind_blob(int index, std::span<const uint8_t> value) {
  // A zero-length blob with a null pointer would bind NULL; bind an empty blob instead.
  if (value.empty()) return bind_result(sqlite3_bind_zeroblob(stmt_, index, 0), db_, index);
  return bind_result(
      sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT), db_, index);
}

Status Statement::bind_null(int index) {
  return bind_result(sqlite3_bind_null(stmt_, index), db_, index);
}

Result<bool> Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string_view sql = sqlite3_sql(stmt_);
  return internal::sqlite_status(rc, db_, fmt::format("step \"{}\"", sql.substr(0, 80)));
}

Status Statement::execute() {
  while (true) {
    ASSIGN_OR_RETURN(bool row, step());
    if (!row) return ok_status();
  }
}

void Statement::reset() { sqlite3_reset(stmt_); }

int Statement::column_count() const { return sqlite3_data_count(stmt_); }

bool Statement::column_is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

int64_t Statement::column_int64(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::column_double(int col) const { return sqlite3_column_double(stmt_, col); }

std::string_view Statement::column_text(int col) const {
  // Order matters: column_text() may convert the value, and column_bytes() must follow it.
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  return p == nullptr ? std::string_view() : std::string_view(p, static_cast<std::size_t>(n));
}

std::span<const uint8_t> Statement::column_blob(int col) const {
  const auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  if (p == nullptr) return {};
  return {p, static_cast<std::size_t>(n)};
}

}  // namespace cb::db
