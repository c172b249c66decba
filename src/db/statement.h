#pragma once
// A Statement is a handle on one prepared SQLite statement, obtained from
// Database::prepare(). While the handle lives it has the statement to itself; when it is
// destroyed the statement is reset, its bindings are cleared and it goes back to the
// Database's cache.
//
//   ASSIGN_OR_RETURN(Statement st, db.prepare("SELECT name FROM boxes WHERE id = ?1"));
//   RETURN_IF_ERROR(st.bind_int64(1, id));
//   ASSIGN_OR_RETURN(bool row, st.step());
//   if (!row) return not_found("box");
//   std::string name(st.column_text(0));
//
// Parameter indexes start at 1 and column indexes at 0, as in SQLite's C API.
//
// Affinity: the db worker thread that owns the Database (see db/worker.h).
// Movable, not copyable. REQUIRES: a Statement is destroyed before its Database.

#include "base/result.h"
#include "base/status.h"

#include <cstdint>
#include <span>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace cb::db {

class Database;

class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Bind |value| to parameter |index| (1-based). Text and blobs are copied.
  // Errors: kInternal (index out of range, or the statement is mid-step).
  Status bind_int64(int index, int64_t value);
  Status bind_double(int index, double value);
  Status bind_text(int index, std::string_view value);
  Status bind_blob(int index, std::span<const uint8_t> value);
  Status bind_null(int index);

  // Advances the statement. Returns true when a row is ready to read with column_*(), false
  // when the statement has finished.
  // Errors: kAlreadyExists (UNIQUE or PRIMARY KEY violated), kFailedPrecondition (another
  //         constraint: FOREIGN KEY, NOT NULL, CHECK), kUnavailable (busy), kDataLoss
  //         (corrupt file), kInternal.
  Result<bool> step();

  // Steps until the statement finishes, discarding any rows. For INSERT, UPDATE, DELETE and
  // DDL. Errors: as step().
  Status execute();

  // Rewinds the statement so it can be stepped again; bindings are kept.
  void reset();

  // Column accessors. REQUIRES: the last step() returned true, and 0 <= |col| <
  // column_count(). Views returned by column_text() and column_blob() point into SQLite's
  // row buffer and are valid until the next step(), reset() or the Statement's destruction.
  int column_count() const;
  bool column_is_null(int col) const;
  int64_t column_int64(int col) const;
  double column_double(int col) const;
  std::string_view column_text(int col) const;
  std::span<const uint8_t> column_blob(int col) const;

 private:
  friend class Database;
  // |in_use| is the cache slot's flag (cleared on destruction), or null when this handle
  // owns |stmt| and finalizes it.
  Statement(sqlite3* db, sqlite3_stmt* stmt, bool* in_use);
  void release();

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  bool* in_use_ = nullptr;
};

}  // namespace cb::db
