#include "db/errors_internal.h"

#include <fmt/format.h>

namespace cb::db::internal {

Status sqlite_status(int rc, sqlite3* db, std::string_view what) {
  // sqlite3_errmsg() describes the most recent failed call on |db|, which is the one that
  // returned |rc| as long as the caller converts immediately; every caller here does.
  const char* text = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string message = fmt::format("{}: {} (sqlite {})", what, text, rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return unavailable(message);
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE ||
          rc == SQLITE_CONSTRAINT_ROWID) {
        return already_exists(message);
      }
      return failed_precondition(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return data_loss(message);
    default:
      return internal_error(message);
  }
}

}  // namespace cb::db::internal
