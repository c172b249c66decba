#include "roles/agent/agent_db.h"

namespace cb::agent {
namespace {

// Released migrations are never edited; a change is a new entry (db/README.md §Migrations).
constexpr db::Migration kMigrations[] = {
    {1,
     "CREATE TABLE meta (\n"
     "  key   TEXT PRIMARY KEY NOT NULL,\n"
     "  value TEXT NOT NULL\n"
     ") STRICT, WITHOUT ROWID;\n"
     "CREATE TABLE agent_starts (\n"
     "  id            INTEGER PRIMARY KEY,\n"
     "  started_unix  INTEGER NOT NULL,\n"
     "  wake_id       TEXT,\n"
     "  agent_version TEXT NOT NULL,\n"
     "  pid           INTEGER NOT NULL\n"
     ") STRICT;\n"},
    // Agents (README.md §Agents): agents, turns, transcript items, and the event log that
    // Session.Events replays (one row per durable change; items point at their event).
    {2,
     "CREATE TABLE agents (\n"
     "  id           TEXT PRIMARY KEY NOT NULL,\n"
     "  name         TEXT NOT NULL,\n"
     "  model        TEXT NOT NULL,\n"
     "  client_nonce TEXT UNIQUE,\n"
     "  created_ms   INTEGER NOT NULL\n"
     ") STRICT;\n"
     "CREATE TABLE turns (\n"
     "  id           TEXT PRIMARY KEY NOT NULL,\n"
     "  agent_id     TEXT NOT NULL REFERENCES agents(id),\n"
     "  state        TEXT NOT NULL CHECK (state IN ('running','done','failed','cancelled')),\n"
     "  error        TEXT NOT NULL DEFAULT '',\n"
     "  client_nonce TEXT,\n"
     "  started_ms   INTEGER NOT NULL,\n"
     "  ended_ms     INTEGER,\n"
     "  UNIQUE (agent_id, client_nonce)\n"
     ") STRICT;\n"
     "CREATE INDEX turns_by_agent ON turns(agent_id);\n"
     "CREATE TABLE events (\n"
     "  id       INTEGER PRIMARY KEY AUTOINCREMENT,\n"
     "  channel  TEXT NOT NULL CHECK (channel IN ('transcript','agents')),\n"
     "  agent_id TEXT NOT NULL,\n"
     "  payload  TEXT\n"
     ") STRICT;\n"
     "CREATE TABLE items (\n"
     "  agent_id TEXT NOT NULL REFERENCES agents(id),\n"
     "  seq      INTEGER NOT NULL,\n"
     "  turn_id  TEXT NOT NULL,\n"
     "  role     TEXT NOT NULL,\n"
     "  kind     TEXT NOT NULL CHECK (kind IN ('text','tool_call','tool_result','error')),\n"
     "  payload  TEXT NOT NULL,\n"
     "  at_ms    INTEGER NOT NULL,\n"
     "  event_id INTEGER NOT NULL UNIQUE REFERENCES events(id),\n"
     "  PRIMARY KEY (agent_id, seq)\n"
     ") STRICT;\n"
     "CREATE INDEX items_by_turn ON items(turn_id);\n"},
    // Approvals and compaction (README.md §Approvals): agents get an approval mode; turns may
    // wait for the user; the log gets an approvals channel; items get approval and summary
    // kinds. SQLite cannot change a CHECK in place, so turns, events and items are rebuilt
    // (items, the child of events, first, so no foreign key is ever left dangling).
    {3,
     "ALTER TABLE agents ADD COLUMN approval_mode TEXT NOT NULL DEFAULT 'auto' CHECK "
     "(approval_mode IN ('auto','ask'));\n"
     "CREATE TABLE turns_v3 (\n"
     "  id           TEXT PRIMARY KEY NOT NULL,\n"
     "  agent_id     TEXT NOT NULL REFERENCES agents(id),\n"
     "  state        TEXT NOT NULL CHECK (state IN "
     "('running','done','failed','cancelled','waiting_for_user')),\n"
     "  error        TEXT NOT NULL DEFAULT '',\n"
     "  client_nonce TEXT,\n"
     "  started_ms   INTEGER NOT NULL,\n"
     "  ended_ms     INTEGER,\n"
     "  UNIQUE (agent_id, client_nonce)\n"
     ") STRICT;\n"
     "INSERT INTO turns_v3(rowid, id, agent_id, state, error, client_nonce, started_ms, ended_ms) "
     "SELECT rowid, id, agent_id, state, error, client_nonce, started_ms, ended_ms FROM turns;\n"
     "DROP TABLE turns;\n"
     "ALTER TABLE turns_v3 RENAME TO turns;\n"
     "CREATE INDEX turns_by_agent ON turns(agent_id);\n"
     "CREATE TABLE events_v3 (\n"
     "  id       INTEGER PRIMARY KEY AUTOINCREMENT,\n"
     "  channel  TEXT NOT NULL CHECK (channel IN ('transcript','agents','approvals')),\n"
     "  agent_id TEXT NOT NULL,\n"
     "  payload  TEXT\n"
     ") STRICT;\n"
     "INSERT INTO events_v3(id, channel, agent_id, payload) SELECT id, channel, agent_id, payload "
     "FROM events;\n"
     "CREATE TABLE items_v3 (\n"
     "  agent_id TEXT NOT NULL REFERENCES agents(id),\n"
     "  seq      INTEGER NOT NULL,\n"
     "  turn_id  TEXT NOT NULL,\n"
     "  role     TEXT NOT NULL,\n"
     "  kind     TEXT NOT NULL CHECK (kind IN "
     "('text','tool_call','tool_result','error','approval','summary')),\n"
     "  payload  TEXT NOT NULL,\n"
     "  at_ms    INTEGER NOT NULL,\n"
     "  event_id INTEGER NOT NULL UNIQUE REFERENCES events_v3(id),\n"
     "  PRIMARY KEY (agent_id, seq)\n"
     ") STRICT;\n"
     "INSERT INTO items_v3 SELECT agent_id, seq, turn_id, role, kind, payload, at_ms, event_id "
     "FROM items;\n"
     "DROP TABLE items;\n"
     "DROP TABLE events;\n"
     "ALTER TABLE events_v3 RENAME TO events;\n"
     "ALTER TABLE items_v3 RENAME TO items;\n"
     "CREATE INDEX items_by_turn ON items(turn_id);\n"
     "CREATE TABLE approvals (\n"
     "  id         TEXT PRIMARY KEY NOT NULL,\n"
     "  agent_id   TEXT NOT NULL REFERENCES agents(id),\n"
     "  turn_id    TEXT NOT NULL,\n"
     "  call_id    TEXT NOT NULL,\n"
     "  tool       TEXT NOT NULL,\n"
     "  arguments  TEXT NOT NULL,\n"
     "  state      TEXT NOT NULL CHECK (state IN "
     "('pending','approved','always','denied','expired','cancelled')),\n"
     "  reason     TEXT NOT NULL DEFAULT '',\n"
     "  created_ms INTEGER NOT NULL,\n"
     "  decided_ms INTEGER\n"
     ") STRICT;\n"
     "CREATE INDEX approvals_by_turn ON approvals(turn_id);\n"
     "CREATE TABLE approval_rules (\n"
     "  agent_id   TEXT NOT NULL REFERENCES agents(id),\n"
     "  tool       TEXT NOT NULL,\n"
     "  created_ms INTEGER NOT NULL,\n"
     "  PRIMARY KEY (agent_id, tool)\n"
     ") STRICT, WITHOUT ROWID;\n"},
    // Fewer b-tree pages per transcript item (issue 6, loop overhead): events loses
    // AUTOINCREMENT (no sqlite_sequence row to update; rows are never deleted, so max(id) + 1
    // stays strictly increasing and no offset is reused), items is keyed by its event_id (one
    // b-tree instead of a rowid tree plus an index on event_id), and items_by_turn goes (its
    // one query, Send's nonce dedupe, looks in the agent's items by the (agent_id, seq) key).
    // Rebuilt as migration 3 did: items first, then events; ids and seqs are kept.
    {4,
     "CREATE TABLE events_v4 (\n"
     "  id       INTEGER PRIMARY KEY,\n"
     "  channel  TEXT NOT NULL CHECK (channel IN ('transcript','agents','approvals')),\n"
     "  agent_id TEXT NOT NULL,\n"
     "  payload  TEXT\n"
     ") STRICT;\n"
     "INSERT INTO events_v4(id, channel, agent_id, payload) SELECT id, channel, agent_id, payload "
     "FROM events;\n"
     "CREATE TABLE items_v4 (\n"
     "  agent_id TEXT NOT NULL REFERENCES agents(id),\n"
     "  seq      INTEGER NOT NULL,\n"
     "  turn_id  TEXT NOT NULL,\n"
     "  role     TEXT NOT NULL,\n"
     "  kind     TEXT NOT NULL CHECK (kind IN "
     "('text','tool_call','tool_result','error','approval','summary')),\n"
     "  payload  TEXT NOT NULL,\n"
     "  at_ms    INTEGER NOT NULL,\n"
     "  event_id INTEGER PRIMARY KEY REFERENCES events_v4(id),\n"
     "  UNIQUE (agent_id, seq)\n"
     ") STRICT;\n"
     "INSERT INTO items_v4(agent_id, seq, turn_id, role, kind, payload, at_ms, event_id) "
     "SELECT agent_id, seq, turn_id, role, kind, payload, at_ms, event_id FROM items;\n"
     "DROP TABLE items;\n"
     "DROP TABLE events;\n"
     "ALTER TABLE events_v4 RENAME TO events;\n"
     "ALTER TABLE items_v4 RENAME TO items;\n"},
};

}  // namespace

std::span<const db::Migration> agent_migrations() { return kMigrations; }

Result<std::unique_ptr<db::Worker>> open_agent_db(const std::filesystem::path& data_dir) {
  return db::Worker::start(data_dir / kAgentDbFile, agent_migrations());
}

asio::awaitable<Status> record_start(db::Worker& worker, StartRecord record) {
  // The worker runs this while the coroutine is suspended, so |record| outlives it.
  Status st = co_await worker.run([&record](db::Database& d) -> Status {
    ASSIGN_OR_RETURN(db::Transaction txn, d.begin());
    ASSIGN_OR_RETURN(
        db::Statement meta,
        d.prepare("INSERT OR IGNORE INTO meta(key, value) VALUES ('created_unix', ?1)"));
    RETURN_IF_ERROR(meta.bind_text(1, std::to_string(record.started_unix)));
    RETURN_IF_ERROR(meta.execute());
    ASSIGN_OR_RETURN(
        db::Statement start,
        d.prepare("INSERT INTO agent_starts(started_unix, wake_id, agent_version, pid) "
                  "VALUES (?1, ?2, ?3, ?4)"));
    RETURN_IF_ERROR(start.bind_int64(1, record.started_unix));
    if (record.wake_id) {
      RETURN_IF_ERROR(start.bind_text(2, *record.wake_id));
    } else {
      RETURN_IF_ERROR(start.bind_null(2));
    }
    RETURN_IF_ERROR(start.bind_text(3, record.agent_version));
    RETURN_IF_ERROR(start.bind_int64(4, record.pid));
    RETURN_IF_ERROR(start.execute());
    return txn.commit();
  });
  co_return st;
}

}  // namespace cb::agent
