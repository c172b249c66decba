#pragma once
// agent.db: the agent's SQLite database in its data directory (schema in README.md §agent.db).
// Opened once at start on a db::Worker thread with the embedded migrations below; SQLite's WAL
// journal makes a database left behind by a crashed (SIGKILLed) agent reopen cleanly, and the
// migrations run each in their own transaction.
//
// Affinity: record_start() is awaited on the agent's loop; the SQL runs on the worker thread.

#include "base/result.h"
#include "db/migrate.h"
#include "db/worker.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace cb::agent {

inline constexpr std::string_view kAgentDbFile = "agent.db";

// The agent's schema, version 1 first (db/README.md §Migrations: append only).
std::span<const db::Migration> agent_migrations();

// Starts the db worker on <data_dir>/agent.db, creating and migrating it.
// Errors: those of db::Worker::start() (kDataLoss for a file that is not SQLite,
//   kFailedPrecondition for a database written by a newer agent).
Result<std::unique_ptr<db::Worker>> open_agent_db(const std::filesystem::path& data_dir);

// What one start of the agent records.
struct StartRecord {
  int64_t started_unix = 0;
  std::optional<std::string> wake_id;  // nullopt when no identity was delivered yet
  std::string agent_version;
  int64_t pid = 0;
};

// Appends |record| to agent_starts, and sets meta.created_unix on the first start.
// Errors: those of the statements (kInternal, kUnavailable).
asio::awaitable<Status> record_start(db::Worker& worker, StartRecord record);

}  // namespace cb::agent
