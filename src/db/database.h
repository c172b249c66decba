#pragma once
// A Database is one open SQLite connection, the statements prepared on it (cached by their
// SQL text) and at most one open Transaction.
//
// Every connection is opened with journal_mode=WAL, synchronous=NORMAL, foreign_keys=ON and
// a busy timeout, so readers in other processes never block the writer and a writer waits
// for another instead of failing at once. Schema changes go through db/migrate.h.
//
// Affinity: a Database belongs to the thread that opened it; in a server that is the db
// worker thread (db/worker.h), and it is used only from functions passed to Worker::run().
// Movable, not copyable. Statements and Transactions taken from it must be destroyed first.

#include "base/result.h"
#include "base/status.h"
#include "db/statement.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

namespace cb::db {

namespace internal {
struct Connection;
}  // namespace internal

class Transaction;

struct OpenOptions {
  // How long a statement waits for another connection's lock before failing with
  // kUnavailable. 5 s: long enough for any single write transaction we issue, short enough
  // that a stuck peer surfaces as an error rather than a hang.
  std::chrono::milliseconds busy_timeout{5000};
};

class Database {
 public:
  // Opens the database file at |path|, creating it if it does not exist, and applies the
  // connection settings above. ":memory:" opens a private in-memory database (journal mode
  // "memory" instead of WAL).
  // Errors: kDataLoss if |path| exists but is not a SQLite database (or is corrupt);
  //         kUnavailable if another connection holds a lock past the busy timeout;
  //         kInternal otherwise (for example the directory does not exist).
  static Result<Database> open(const std::filesystem::path& path, const OpenOptions& options = {});

  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  // Runs |sql|, which may hold several statements separated by ';', without caching them.
  // Meant for DDL and scripts; use prepare() for anything with parameters.
  // Errors: as Statement::step().
  Status exec(std::string_view sql);

  // Returns a handle on the prepared statement for |sql| (exactly one statement), preparing
  // and caching it on first use. If the cached statement is already held by a live handle,
  // a fresh uncached one is prepared, so nested use of the same SQL is safe.
  // Errors: kInternal (syntax error, unknown table or column), kDataLoss.
  Result<Statement> prepare(std::string_view sql);

  // Starts a write transaction with BEGIN IMMEDIATE, so the write lock is taken now and a
  // commit cannot fail because another connection wrote first.
  // REQUIRES: no transaction is open on this connection (else kFailedPrecondition).
  // Errors: kFailedPrecondition, kUnavailable (another writer past the busy timeout),
  //         kInternal.
  Result<Transaction> begin();

  // The rowid of the most recent successful INSERT on this connection.
  int64_t last_insert_rowid() const;
  // Rows changed by the most recent INSERT, UPDATE or DELETE on this connection.
  int64_t changes() const;

  // Test hook (house style H17): the next Transaction::commit() on this connection rolls
  // back instead and returns kInternal, as a failed fsync would.
  void fail_next_commit_for_test();

 private:
  friend class Transaction;
  explicit Database(std::unique_ptr<internal::Connection> conn);

  // Behind a pointer so Statements and Transactions may keep referring to it when the
  // Database object itself is moved.
  std::unique_ptr<internal::Connection> conn_;
};

// A Transaction is an open write transaction on one Database. Unless commit() succeeds it
// is rolled back when the object is destroyed, so an early return undoes a half-done write:
//
//   ASSIGN_OR_RETURN(Transaction txn, db.begin());
//   RETURN_IF_ERROR(insert_box(db, box));   // returning here rolls back
//   RETURN_IF_ERROR(txn.commit());
//
// Affinity: as its Database. Movable, not copyable; a moved-from Transaction is inactive.
// REQUIRES: destroyed before its Database.
class Transaction {
 public:
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&& other) noexcept;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Commits. On error the transaction has been rolled back and is no longer active.
  // REQUIRES: active() (else kFailedPrecondition).
  // Errors: kFailedPrecondition, kUnavailable, kInternal (including the failure injected by
  //         Database::fail_next_commit_for_test()).
  Status commit();

  // Rolls back now instead of at destruction. REQUIRES: active() (else kFailedPrecondition).
  Status rollback();

  // True until commit() or rollback() is called.
  bool active() const { return conn_ != nullptr; }

 private:
  friend class Database;
  explicit Transaction(internal::Connection* conn) : conn_(conn) {}

  internal::Connection* conn_;  // not owned; null once finished or moved from
};

// Copies the database at |from| into |to| with SQLite's online backup API: a consistent
// copy of one moment, taken in one read transaction, even while other connections (of this
// process or another) write |from|. |to| is created if missing and its content replaced; it
// may be open elsewhere (a live database being restored: its connections see the new content
// at their next statement). Locks held by others are waited for (busy timeout 5 s each).
// Errors: kNotFound when |from| does not exist; kUnavailable (locked past the timeout);
//   kDataLoss (|from| is not a database); kInternal.
Status backup_database(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace cb::db
