#include "db/migrate.h"

#include "base/log.h"

#include <fmt/format.h>

namespace cb::db {

Result<int> schema_version(Database& db) {
  ASSIGN_OR_RETURN(Statement st, db.prepare("PRAGMA user_version"));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return internal_error("PRAGMA user_version returned no row");
  return static_cast<int>(st.column_int64(0));
}

Status migrate(Database& db, std::span<const Migration> migrations) {
  for (std::size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int>(i) + 1) {
      return invalid_argument(fmt::format("migrations: entry {} has version {}, want {}", i,
                                          migrations[i].version, i + 1));
    }
  }
  const int latest = static_cast<int>(migrations.size());
  ASSIGN_OR_RETURN(int current, schema_version(db));
  if (current > latest) {
    return failed_precondition(
        fmt::format("database schema version {} is newer than this binary's {}", current, latest));
  }
  for (const Migration& m : migrations) {
    if (m.version <= current) continue;
    ASSIGN_OR_RETURN(Transaction txn, db.begin());
    // Re-read inside the write lock: another process may have migrated since the check above.
    ASSIGN_OR_RETURN(current, schema_version(db));
    if (current > latest) {
      return failed_precondition(fmt::format(
          "database schema version {} is newer than this binary's {}", current, latest));
    }
    if (m.version <= current) continue;  // |txn| rolls back an empty transaction
    std::string prefix = fmt::format("migration {}", m.version);
    Status s = db.exec(m.sql);
    if (!s.ok()) return s.with_prefix(prefix);
    // user_version is part of the database header, so it commits or rolls back with the
    // script. A PRAGMA takes no bound parameters; |m.version| is an int, not input.
    s = db.exec(fmt::format("PRAGMA user_version = {}", m.version));
    if (!s.ok()) return s.with_prefix(prefix);
    s = txn.commit();
    if (!s.ok()) return s.with_prefix(prefix);
    current = m.version;
    log::info("db migration applied", {{"version", m.version}});
  }
  return ok_status();
}

}  // namespace cb::db
