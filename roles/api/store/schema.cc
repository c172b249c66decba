#include "roles/api/store/schema.h"

namespace cb::api {

namespace {

// Version 1: the first schema. Deviation from the first sketch, on purpose: users carry
// removed_at_ms and their name is unique among users not removed (a partial index), because
// a removed user's row must stay for the boxes and tokens that reference it, while its name
// may be given to a new user.
constexpr std::string_view kV1 = R"sql(
CREATE TABLE users (
  id            INTEGER PRIMARY KEY,
  name          TEXT    NOT NULL,
  max_boxes     INTEGER NOT NULL CHECK (max_boxes >= 0),
  max_running   INTEGER NOT NULL CHECK (max_running >= 0),
  created_at_ms INTEGER NOT NULL,
  removed_at_ms INTEGER
);
CREATE UNIQUE INDEX users_name_active ON users (name) WHERE removed_at_ms IS NULL;

CREATE TABLE tokens (
  id            TEXT    PRIMARY KEY,
  user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  sha256        BLOB    NOT NULL UNIQUE CHECK (length(sha256) = 32),
  label         TEXT,
  created_at_ms INTEGER NOT NULL,
  revoked_at_ms INTEGER
);
CREATE INDEX tokens_user ON tokens (user_id);

CREATE TABLE boxes (
  id                  TEXT    PRIMARY KEY,
  user_id             INTEGER NOT NULL REFERENCES users (id),
  name                TEXT    NOT NULL,
  state               INTEGER NOT NULL CHECK (state BETWEEN 0 AND 5),
  image               TEXT,
  backend             TEXT,
  detail              TEXT,
  wake_id             TEXT,
  machine_key         TEXT,
  created_at_ms       INTEGER NOT NULL,
  state_changed_at_ms INTEGER NOT NULL,
  deleted_at_ms       INTEGER
);
CREATE UNIQUE INDEX boxes_user_name_live ON boxes (user_id, name) WHERE deleted_at_ms IS NULL;

CREATE TABLE operations (
  id             TEXT    PRIMARY KEY,
  box_id         TEXT    NOT NULL,
  user_id        INTEGER NOT NULL,
  kind           TEXT    NOT NULL,
  phase          INTEGER NOT NULL CHECK (phase BETWEEN 0 AND 8),
  detail         TEXT,
  created_at_ms  INTEGER NOT NULL,
  finished_at_ms INTEGER
);
CREATE INDEX operations_unfinished ON operations (created_at_ms) WHERE finished_at_ms IS NULL;

CREATE TABLE operation_events (
  operation_id TEXT    NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
  seq          INTEGER NOT NULL CHECK (seq >= 1),
  phase        INTEGER NOT NULL CHECK (phase BETWEEN 0 AND 8),
  detail       TEXT,
  at_ms        INTEGER NOT NULL,
  PRIMARY KEY (operation_id, seq)
) WITHOUT ROWID;

CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value BLOB
);
INSERT INTO meta (key, value) VALUES ('change_generation', 0);
)sql";

// Version 2: operations remember their parameters (e.g. "preserve_data" for a recreate), so
// an operation cut short by an api crash can be resumed exactly as it was asked.
constexpr std::string_view kV2 = R"sql(
ALTER TABLE operations ADD COLUMN params TEXT NOT NULL DEFAULT '';
)sql";

// Version 3: the model door (issue 6, item 3). Each user's model gateway, with the key sealed
// under the master key (additional data names table, row, column and the URL: README.md
// §Model gateways), and token usage through the door, counted per user, box, UTC day, wire
// and model.
constexpr std::string_view kV3 = R"sql(
CREATE TABLE user_gateways (
  user_id       INTEGER PRIMARY KEY REFERENCES users (id),
  url           TEXT    NOT NULL,
  key_sealed    BLOB    NOT NULL,
  updated_at_ms INTEGER NOT NULL
);

CREATE TABLE model_usage (
  user_id            INTEGER NOT NULL,
  box_id             TEXT    NOT NULL,
  day                TEXT    NOT NULL,
  wire               TEXT    NOT NULL,
  model              TEXT    NOT NULL,
  requests           INTEGER NOT NULL DEFAULT 0,
  failed             INTEGER NOT NULL DEFAULT 0,
  input_tokens       INTEGER NOT NULL DEFAULT 0,
  output_tokens      INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0,
  last_at_ms         INTEGER NOT NULL,
  PRIMARY KEY (user_id, box_id, day, wire, model)
) WITHOUT ROWID;
CREATE INDEX model_usage_day ON model_usage (day);
)sql";

// Version 4: the state layer (issue 7). Each user's state key (32 random bytes; chunk ids and
// sealing of that user's snapshots, seed §22.5), sealed under the master key with additional
// data naming table, row and column (README.md §State keys).
constexpr std::string_view kV4 = R"sql(
CREATE TABLE user_state_keys (
  user_id       INTEGER PRIMARY KEY REFERENCES users (id),
  key_sealed    BLOB    NOT NULL,
  created_at_ms INTEGER NOT NULL
);
)sql";

constexpr db::Migration kMigrations[] = {
    {1, kV1},
    {2, kV2},
    {3, kV3},
    {4, kV4},
};

}  // namespace

std::span<const db::Migration> api_db_migrations() { return kMigrations; }

}  // namespace cb::api
