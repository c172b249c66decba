#pragma once
// Embedded schema migrations. The binary carries its schema as an ordered list of SQL
// scripts; a database records how many it has applied in PRAGMA user_version.
//
//   constexpr Migration kMigrations[] = {
//       {1, "CREATE TABLE boxes (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"},
//       {2, "ALTER TABLE boxes ADD COLUMN created_unix INTEGER NOT NULL DEFAULT 0;"},
//   };
//   RETURN_IF_ERROR(migrate(db, kMigrations));
//
// Rules (see README.md §Migrations): versions are 1, 2, 3, ... with no gaps; a released
// migration is never edited, only followed by a new one; a script holds no BEGIN, COMMIT or
// PRAGMA foreign_keys (each runs inside its own transaction, where that pragma is a no-op).
//
// Affinity: as the Database (the db worker thread).

#include "base/status.h"
#include "db/database.h"

#include <span>
#include <string_view>

namespace cb::db {

struct Migration {
  int version;  // 1-based; equals the user_version the database has once this is applied
  // SQL script, possibly several statements. Not owned: normally a string literal.
  std::string_view sql;
};

// Applies every migration in |migrations| whose version is above the database's
// user_version, in order, each in its own IMMEDIATE transaction that also sets user_version,
// so a crash or error leaves the database at the last fully applied version.
// Errors: kInvalidArgument if |migrations| is not numbered 1, 2, 3, ...;
//         kFailedPrecondition if the database's user_version is above the last migration
//           (it was written by a newer binary);
//         kDataLoss if the file is not a SQLite database;
//         any error of Database::exec() or Transaction::commit() from a failing script,
//           prefixed with "migration <version>".
Status migrate(Database& db, std::span<const Migration> migrations);

// The database's PRAGMA user_version. Errors: kDataLoss, kUnavailable, kInternal.
Result<int> schema_version(Database& db);

}  // namespace cb::db
