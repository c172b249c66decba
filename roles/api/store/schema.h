#pragma once
// The schema of api.db, the api's SQLite database, as the ordered list of migrations that
// db::migrate() applies (src/db/README.md §Migrations). The tables are described in
// README.md §Schema; this file is their only definition.
//
// Rules: append a migration, never edit or reorder a released one (a fix is a new entry).
//
// Thread-safety: constant data.

#include "db/migrate.h"

#include <span>
#include <string_view>

namespace cb::api {

// The database file inside the api's --data-dir.
inline constexpr std::string_view kApiDbFileName = "api.db";

// The meta row whose integer value is bumped by every write that changes users or tokens
// (README.md §Change generation).
inline constexpr std::string_view kChangeGenerationKey = "change_generation";

// Every migration of api.db, versions 1..N. The storage is static; the span never dangles.
std::span<const db::Migration> api_db_migrations();

}  // namespace cb::api
