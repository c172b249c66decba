#pragma once
// The one place where SQLite's integer result codes become Status values (house style H7).
// Included only by src/db/*.cc; no other folder sees a SQLite result code.
//
// Mapping (primary code = |rc| & 0xff):
//   SQLITE_BUSY, SQLITE_LOCKED                       -> kUnavailable (another writer; retry)
//   SQLITE_CONSTRAINT_PRIMARYKEY / _UNIQUE / _ROWID  -> kAlreadyExists
//   any other SQLITE_CONSTRAINT_*                    -> kFailedPrecondition
//   SQLITE_CORRUPT, SQLITE_NOTADB                    -> kDataLoss
//   everything else                                  -> kInternal
// The message is "<what>: <sqlite3_errmsg> (<extended code name>)".

#include "base/status.h"

#include <sqlite3.h>

#include <string_view>

namespace cb::db::internal {

// |rc| is a failing (possibly extended) SQLite result code. |db| is the connection that
// produced it, for sqlite3_errmsg(); null falls back to sqlite3_errstr(|rc|). |what| names the
// operation in the message.
Status sqlite_status(int rc, sqlite3* db, std::string_view what);

}  // namespace cb::db::internal
