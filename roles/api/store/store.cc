#include "roles/api/store/store.h"

#include "crypto/bytes.h"
#include "crypto/hash.h"
#include "crypto/sealed.h"
#include "db/migrate.h"
#include "db/statement.h"
#include "roles/api/store/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace cb::api {

namespace {

namespace fs = std::filesystem;

// Column lists shared by the SELECTs below and the read_* functions, which read by position.
// Macros so each SQL text is one literal (the Database caches statements by their text).
#define CB_USER_COLUMNS "id, name, max_boxes, max_running, created_at_ms"
#define CB_TOKEN_COLUMNS "id, user_id, label, created_at_ms, revoked_at_ms"
#define CB_BOX_COLUMNS                                                                      \
  "id, user_id, name, state, image, backend, detail, wake_id, machine_key, created_at_ms, " \
  "state_changed_at_ms, deleted_at_ms"
#define CB_OPERATION_COLUMNS \
  "id, box_id, user_id, kind, phase, detail, created_at_ms, finished_at_ms, params"

// 6 random bytes, 12 hex characters: 2^48 ids, so a collision is unlikely but possible over
// a long life (the birthday bound is near 2^24 operations); fresh_id() checks and redraws.
constexpr size_t kIdRandomBytes = 6;
// Redraws before giving up; each draw collides with probability rows / 2^48.
constexpr int kIdAttempts = 4;
// 32 bytes (256 bits) of CSPRNG output: far beyond guessing, and the SHA-256 of it is then a
// safe database key (no salt or slow hash needed, unlike for human passwords).
constexpr size_t kTokenRandomBytes = 32;
constexpr std::string_view kTokenPrefix = "cbt_";
// Labels are for humans reading `token list`; 64 bytes fit a terminal column.
constexpr size_t kMaxLabelBytes = 64;
constexpr size_t kMaxKindBytes = 32;

int64_t now_ms(Clock& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.now().time_since_epoch())
      .count();
}

Status bind_optional_text(db::Statement& st, int index, std::string_view value) {
  return value.empty() ? st.bind_null(index) : st.bind_text(index, value);
}

std::optional<int64_t> column_optional_int64(const db::Statement& st, int col) {
  if (st.column_is_null(col)) return std::nullopt;
  return st.column_int64(col);
}

User read_user(const db::Statement& st) {
  User u;
  u.id = st.column_int64(0);
  u.name = std::string(st.column_text(1));
  u.max_boxes = static_cast<int>(st.column_int64(2));
  u.max_running = static_cast<int>(st.column_int64(3));
  u.created_at_ms = st.column_int64(4);
  return u;
}

TokenInfo read_token(const db::Statement& st) {
  TokenInfo t;
  t.id = std::string(st.column_text(0));
  t.user_id = st.column_int64(1);
  t.label = std::string(st.column_text(2));
  t.created_at_ms = st.column_int64(3);
  t.revoked_at_ms = column_optional_int64(st, 4);
  return t;
}

Box read_box(const db::Statement& st) {
  Box b;
  b.id = std::string(st.column_text(0));
  b.user_id = st.column_int64(1);
  b.name = std::string(st.column_text(2));
  b.state = static_cast<BoxState>(st.column_int64(3));  // CHECK keeps it in 0..5
  b.image = std::string(st.column_text(4));
  b.backend = std::string(st.column_text(5));
  b.detail = std::string(st.column_text(6));
  b.wake_id = std::string(st.column_text(7));
  b.machine_key = std::string(st.column_text(8));
  b.created_at_ms = st.column_int64(9);
  b.state_changed_at_ms = st.column_int64(10);
  b.deleted_at_ms = column_optional_int64(st, 11);
  return b;
}

Operation read_operation(const db::Statement& st) {
  Operation op;
  op.id = std::string(st.column_text(0));
  op.box_id = std::string(st.column_text(1));
  op.user_id = st.column_int64(2);
  op.kind = std::string(st.column_text(3));
  op.phase = static_cast<Phase>(st.column_int64(4));  // CHECK keeps it in 0..8
  op.detail = std::string(st.column_text(5));
  op.created_at_ms = st.column_int64(6);
  op.finished_at_ms = column_optional_int64(st, 7);
  op.params = std::string(st.column_text(8));
  return op;
}

// Steps |st| to the end and reads every row with |read|.
template <typename T, typename Read>
Result<std::vector<T>> collect(db::Statement& st, Read read) {
  std::vector<T> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return out;
    out.push_back(read(st));
  }
}

// Steps |st| once and reads the row, or kNotFound with |what| when there is none.
template <typename Read>
auto first_row(db::Statement& st, Read read, std::string_view what) -> Result<decltype(read(st))> {
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return not_found(what);
  return read(st);
}

// Draws "<prefix><12 hex>" until |exists_sql| (one parameter, the id) finds no row.
Result<std::string> fresh_id(db::Database& db, crypto::Random& random, std::string_view prefix,
                             std::string_view exists_sql) {
  for (int attempt = 0; attempt < kIdAttempts; ++attempt) {
    std::array<uint8_t, kIdRandomBytes> raw{};
    random.fill(raw);
    std::string id = std::string(prefix) + crypto::hex_encode(std::span<const uint8_t>(raw));
    ASSIGN_OR_RETURN(db::Statement st, db.prepare(exists_sql));
    RETURN_IF_ERROR(st.bind_text(1, id));
    ASSIGN_OR_RETURN(bool taken, st.step());
    if (!taken) return id;
  }
  return internal_error(fmt::format("cannot draw an unused {} id", prefix));
}

Status bump_change_generation(db::Database& db) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db.prepare("UPDATE meta SET value = value + 1 WHERE key = 'change_generation'"));
  RETURN_IF_ERROR(st.execute());
  if (db.changes() != 1) return data_loss("api.db: meta.change_generation is missing");
  return ok_status();
}

// The user row |id|, removed or not (a deleted box may belong to a removed user).
Result<User> load_user_any(db::Database& db, int64_t id) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db.prepare("SELECT " CB_USER_COLUMNS " FROM users WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_int64(1, id));
  return first_row(st, read_user, fmt::format("user {}", id));
}

Result<int64_t> count_running_boxes(db::Database& db, int64_t user_id) {
  ASSIGN_OR_RETURN(db::Statement st, db.prepare("SELECT count(*) FROM boxes WHERE user_id = ?1 AND "
                                                "deleted_at_ms IS NULL AND state IN (1, 2, 3)"));
  RETURN_IF_ERROR(st.bind_int64(1, user_id));
  return first_row(
      st, [](const db::Statement& s) { return s.column_int64(0); }, "count");
}

bool valid_box_state(BoxState state) {
  int v = static_cast<int>(state);
  return v >= static_cast<int>(BoxState::kAbsent) && v <= static_cast<int>(BoxState::kFailed);
}

bool valid_phase(Phase phase) {
  int v = static_cast<int>(phase);
  return v >= static_cast<int>(Phase::kPending) && v <= static_cast<int>(Phase::kFailed);
}

bool is_terminal(Phase phase) { return phase == Phase::kDone || phase == Phase::kFailed; }

Status validate_label(std::string_view label) {
  if (label.size() > kMaxLabelBytes) {
    return invalid_argument(
        fmt::format("label: at most {} bytes, got {}", kMaxLabelBytes, label.size()));
  }
  for (char c : label) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return invalid_argument("label: control characters not allowed");
  }
  return ok_status();
}

Status validate_kind(std::string_view kind) {
  bool ok = !kind.empty() && kind.size() <= kMaxKindBytes &&
            std::all_of(kind.begin(), kind.end(),
                        [](char c) { return c == '_' || (c >= 'a' && c <= 'z'); });
  if (!ok) return invalid_argument(fmt::format("kind: must match [a-z_]{{1,32}}, got {:?}", kind));
  return ok_status();
}

Status errno_status(int err, std::string_view what) {
  std::string msg = fmt::format("{}: {}", what, std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) return permission_denied(msg);
  return internal_error(msg);
}

// Creates |data_dir| (0700) and an empty api.db (0600) when missing, so the database and the
// -wal and -shm files SQLite derives from it (same mode as the database) are private to the
// user: they hold token hashes. Returns the database path.
Result<fs::path> prepare_data_dir(const fs::path& data_dir) {
  if (data_dir.empty()) return invalid_argument("data_dir: empty");
  std::error_code ec;
  if (!fs::exists(data_dir, ec)) {
    fs::create_directories(data_dir, ec);
    if (ec) return errno_status(ec.value(), fmt::format("create {}", data_dir.string()));
    fs::permissions(data_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) return errno_status(ec.value(), fmt::format("chmod {}", data_dir.string()));
  }
  fs::path path = api_db_path(data_dir);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status(errno, fmt::format("open {}", path.string()));
  ::close(fd);
  return path;
}

// Gateway URLs and keys end up in an HTTP request line and header field: no control
// characters (CR/LF would inject fields), and sizes a header can carry.
constexpr size_t kMaxGatewayUrlBytes = 2048;
constexpr size_t kMaxGatewayKeyBytes = 4096;

Status validate_gateway_url(std::string_view url) {
  if (url.empty()) return invalid_argument("url: empty");
  if (url.size() > kMaxGatewayUrlBytes)
    return invalid_argument(fmt::format("url: at most {} bytes", kMaxGatewayUrlBytes));
  for (char c : url) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return invalid_argument("url: spaces or control characters");
  }
  return ok_status();
}

Status validate_gateway_key(std::string_view key) {
  if (key.empty()) return invalid_argument("key: empty");
  if (key.size() > kMaxGatewayKeyBytes)
    return invalid_argument(fmt::format("key: at most {} bytes", kMaxGatewayKeyBytes));
  for (char c : key) {
    auto u = static_cast<unsigned char>(c);
    // Never echo the key: the message names the rule only.
    if (u <= 0x20 || u == 0x7f) return invalid_argument("key: spaces or control characters");
  }
  return ok_status();
}

// "YYYY-MM-DD" (UTC) of a Unix time in milliseconds.
std::string utc_day(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[16];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return std::string(buf, n);
}

bool is_day(std::string_view day) {
  if (day.size() != 10 || day[4] != '-' || day[7] != '-') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (day[i] < '0' || day[i] > '9') return false;
  return true;
}

StoreOptions resolve(StoreOptions options) {
  if (options.clock == nullptr) options.clock = &system_clock();
  if (options.random == nullptr) options.random = &crypto::system_random();
  return options;
}

}  // namespace

// ---- free functions ----

bool counts_as_running(BoxState state) {
  return state == BoxState::kStarting || state == BoxState::kRunning ||
         state == BoxState::kHibernating;
}

std::string offset_key(int64_t seq) { return std::to_string(seq); }

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kPending:
      return "pending";
    case Phase::kBackingUp:
      return "backing up";
    case Phase::kCreating:
      return "creating";
    case Phase::kStarting:
      return "starting";
    case Phase::kFreezing:
      return "freezing";
    case Phase::kThawing:
      return "thawing";
    case Phase::kCleaningUp:
      return "cleaning up";
    case Phase::kDone:
      return "done";
    case Phase::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view box_state_name(BoxState state) {
  switch (state) {
    case BoxState::kAbsent:
      return "absent";
    case BoxState::kStarting:
      return "starting";
    case BoxState::kRunning:
      return "running";
    case BoxState::kHibernating:
      return "hibernating";
    case BoxState::kHibernated:
      return "hibernated";
    case BoxState::kFailed:
      return "failed";
  }
  return "unknown";
}

Result<int64_t> parse_offset_key(std::string_view key) {
  if (key.empty()) return int64_t{0};
  // 18 digits always fit in int64_t.
  bool ok = key.size() <= 18 &&
            std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!ok) return invalid_argument(fmt::format("offset_key: not an event offset: {:?}", key));
  int64_t seq = 0;
  for (char c : key) seq = seq * 10 + (c - '0');
  return seq;
}

Status validate_user_name(std::string_view name) {
  auto tail_ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  };
  bool ok = !name.empty() && name.size() <= 32 && name[0] >= 'a' && name[0] <= 'z' &&
            std::all_of(name.begin() + 1, name.end(), tail_ok);
  if (!ok) {
    return invalid_argument(
        fmt::format("name: a user name must match [a-z][a-z0-9_-]{{0,31}}, got {:?}", name));
  }
  return ok_status();
}

Status validate_box_name(std::string_view name) {
  auto char_ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  };
  bool ok = !name.empty() && name.size() <= 31 && name[0] != '-' &&
            std::all_of(name.begin(), name.end(), char_ok);
  if (!ok) {
    return invalid_argument(
        fmt::format("name: a box name must match [a-z0-9][a-z0-9-]{{0,30}}, got {:?}", name));
  }
  return ok_status();
}

fs::path api_db_path(const fs::path& data_dir) { return data_dir / kApiDbFileName; }

std::string gateway_key_additional_data(int64_t user_id, std::string_view url) {
  return fmt::format("user_gateways|{}|key_sealed|{}", user_id, url);
}

// ---- SyncStore ----

struct SyncStore::Owned {
  explicit Owned(db::Database d) : db(std::move(d)) {}
  db::Database db;
};

Result<SyncStore> SyncStore::open(const fs::path& data_dir, const StoreOptions& options) {
  ASSIGN_OR_RETURN(fs::path path, prepare_data_dir(data_dir));
  ASSIGN_OR_RETURN(db::Database db, db::Database::open(path, options.db));
  RETURN_IF_ERROR(db::migrate(db, api_db_migrations()));
  auto owned = std::make_unique<Owned>(std::move(db));
  SyncStore store(owned->db, options);
  store.owned_ = std::move(owned);
  return store;
}

SyncStore::SyncStore(db::Database& db, const StoreOptions& options) : db_(&db) {
  StoreOptions resolved = resolve(options);
  clock_ = resolved.clock;
  random_ = resolved.random;
}

SyncStore::SyncStore(SyncStore&&) noexcept = default;
SyncStore& SyncStore::operator=(SyncStore&&) noexcept = default;
SyncStore::~SyncStore() = default;

// -- users --

Result<User> SyncStore::add_user(std::string_view name, int max_boxes, int max_running) {
  RETURN_IF_ERROR(validate_user_name(name));
  if (max_boxes < 0) {
    return invalid_argument(fmt::format("max_boxes: must be 0 or more, got {}", max_boxes));
  }
  if (max_running < 0) {
    return invalid_argument(fmt::format("max_running: must be 0 or more, got {}", max_running));
  }
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  {
    ASSIGN_OR_RETURN(db::Statement st, db_->prepare("SELECT 1 FROM users WHERE name = ?1 AND "
                                                    "removed_at_ms IS NULL"));
    RETURN_IF_ERROR(st.bind_text(1, name));
    ASSIGN_OR_RETURN(bool exists, st.step());
    if (exists) return already_exists(fmt::format("user {:?} already exists", name));
  }
  User user;
  user.name = std::string(name);
  user.max_boxes = max_boxes;
  user.max_running = max_running;
  user.created_at_ms = now_ms(*clock_);
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("INSERT INTO users (name, max_boxes, max_running, "
                                  "created_at_ms) VALUES (?1, ?2, ?3, ?4)"));
    RETURN_IF_ERROR(st.bind_text(1, name));
    RETURN_IF_ERROR(st.bind_int64(2, max_boxes));
    RETURN_IF_ERROR(st.bind_int64(3, max_running));
    RETURN_IF_ERROR(st.bind_int64(4, user.created_at_ms));
    RETURN_IF_ERROR(st.execute());
    user.id = db_->last_insert_rowid();
  }
  RETURN_IF_ERROR(bump_change_generation(*db_));
  RETURN_IF_ERROR(txn.commit());
  return user;
}

Result<std::vector<User>> SyncStore::list_users() {
  ASSIGN_OR_RETURN(db::Statement st, db_->prepare("SELECT " CB_USER_COLUMNS " FROM users WHERE "
                                                  "removed_at_ms IS NULL ORDER BY name"));
  return collect<User>(st, read_user);
}

Result<User> SyncStore::find_user(std::string_view name) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_USER_COLUMNS
                                " FROM users WHERE name = ?1 AND removed_at_ms IS NULL"));
  RETURN_IF_ERROR(st.bind_text(1, name));
  return first_row(st, read_user, fmt::format("user {:?} not found", name));
}

Result<User> SyncStore::get_user(int64_t id) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_USER_COLUMNS
                                " FROM users WHERE id = ?1 AND removed_at_ms IS NULL"));
  RETURN_IF_ERROR(st.bind_int64(1, id));
  return first_row(st, read_user, fmt::format("user {} not found", id));
}

Result<std::vector<std::string>> SyncStore::remove_user(std::string_view name) {
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(User user, find_user(name));
  const int64_t now = now_ms(*clock_);
  std::vector<std::string> released;
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("SELECT id FROM boxes WHERE user_id = ?1 AND deleted_at_ms IS "
                                  "NULL ORDER BY created_at_ms, id"));
    RETURN_IF_ERROR(st.bind_int64(1, user.id));
    ASSIGN_OR_RETURN(released, collect<std::string>(st, [](const db::Statement& s) {
                       return std::string(s.column_text(0));
                     }));
  }
  // Three updates, one transaction: a reader (the api's TokenIndex, another process) sees the
  // user either whole or gone, never with live tokens and deleted boxes.
  constexpr std::string_view kUpdates[] = {
      "UPDATE boxes SET deleted_at_ms = ?2 WHERE user_id = ?1 AND deleted_at_ms IS NULL",
      "UPDATE tokens SET revoked_at_ms = ?2 WHERE user_id = ?1 AND revoked_at_ms IS NULL",
      "UPDATE users SET removed_at_ms = ?2 WHERE id = ?1",
  };
  for (std::string_view sql : kUpdates) {
    ASSIGN_OR_RETURN(db::Statement st, db_->prepare(sql));
    RETURN_IF_ERROR(st.bind_int64(1, user.id));
    RETURN_IF_ERROR(st.bind_int64(2, now));
    RETURN_IF_ERROR(st.execute());
  }
  RETURN_IF_ERROR(bump_change_generation(*db_));
  RETURN_IF_ERROR(txn.commit());
  return released;
}

// -- tokens --

Result<IssuedToken> SyncStore::issue_token(std::string_view user_name, std::string_view label) {
  RETURN_IF_ERROR(validate_label(label));
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(User user, find_user(user_name));
  IssuedToken issued;
  ASSIGN_OR_RETURN(issued.info.id,
                   fresh_id(*db_, *random_, "tk_", "SELECT 1 FROM tokens WHERE id = ?1"));
  issued.info.user_id = user.id;
  issued.info.label = std::string(label);
  issued.info.created_at_ms = now_ms(*clock_);
  issued.plaintext = std::string(kTokenPrefix) + crypto::random_token(*random_, kTokenRandomBytes);
  const crypto::Sha256Digest digest = crypto::sha256(issued.plaintext);
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("INSERT INTO tokens (id, user_id, sha256, label, created_at_ms) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5)"));
    RETURN_IF_ERROR(st.bind_text(1, issued.info.id));
    RETURN_IF_ERROR(st.bind_int64(2, user.id));
    RETURN_IF_ERROR(st.bind_blob(3, digest));
    RETURN_IF_ERROR(bind_optional_text(st, 4, label));
    RETURN_IF_ERROR(st.bind_int64(5, issued.info.created_at_ms));
    RETURN_IF_ERROR(st.execute());
  }
  RETURN_IF_ERROR(bump_change_generation(*db_));
  RETURN_IF_ERROR(txn.commit());
  return issued;
}

Status SyncStore::revoke_token(std::string_view id) {
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  bool already_revoked = false;
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("SELECT revoked_at_ms IS NOT NULL FROM tokens WHERE id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, id));
    ASSIGN_OR_RETURN(already_revoked,
                     first_row(
                         st, [](const db::Statement& s) { return s.column_int64(0) != 0; },
                         fmt::format("token {:?} not found", id)));
  }
  if (already_revoked) return ok_status();  // |txn| rolls back an empty transaction
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("UPDATE tokens SET revoked_at_ms = ?2 WHERE id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, id));
    RETURN_IF_ERROR(st.bind_int64(2, now_ms(*clock_)));
    RETURN_IF_ERROR(st.execute());
  }
  RETURN_IF_ERROR(bump_change_generation(*db_));
  return txn.commit();
}

Result<std::vector<TokenInfo>> SyncStore::list_tokens(std::string_view user_name) {
  ASSIGN_OR_RETURN(User user, find_user(user_name));
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_TOKEN_COLUMNS
                                " FROM tokens WHERE user_id = ?1 ORDER BY created_at_ms, id"));
  RETURN_IF_ERROR(st.bind_int64(1, user.id));
  return collect<TokenInfo>(st, read_token);
}

Result<int64_t> SyncStore::change_generation() {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT value FROM meta WHERE key = 'change_generation'"));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return data_loss("api.db: meta.change_generation is missing");
  return st.column_int64(0);
}

Result<std::optional<TokenSnapshot>> SyncStore::tokens_if_changed(
    std::optional<int64_t> known_generation) {
  ASSIGN_OR_RETURN(int64_t generation, change_generation());
  if (known_generation && *known_generation == generation) return std::optional<TokenSnapshot>();
  // Without a read transaction the SELECT below may already see a write committed after the
  // generation was read; the snapshot is then newer than its label, and the next call loads
  // once more. Reading in the other order could label old tokens with a new generation and
  // miss a revocation, which is the failure that matters.
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT t.sha256, t.id, t.user_id, u.name FROM tokens t "
                                "JOIN users u ON u.id = t.user_id "
                                "WHERE t.revoked_at_ms IS NULL AND u.removed_at_ms IS NULL"));
  TokenSnapshot snapshot;
  snapshot.generation = generation;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) break;
    std::span<const uint8_t> blob = st.column_blob(0);
    if (blob.size() != crypto::kSha256Size) {
      return data_loss(
          fmt::format("api.db: token {} has a {}-byte sha256", st.column_text(1), blob.size()));
    }
    ActiveToken t;
    std::copy(blob.begin(), blob.end(), t.sha256.begin());
    t.token_id = std::string(st.column_text(1));
    t.user_id = st.column_int64(2);
    t.user_name = std::string(st.column_text(3));
    snapshot.tokens.push_back(std::move(t));
  }
  return std::optional<TokenSnapshot>(std::move(snapshot));
}

// -- boxes --

Result<Box> SyncStore::create_box(int64_t user_id, std::string_view name, std::string_view image,
                                  std::string_view backend) {
  RETURN_IF_ERROR(validate_box_name(name));
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(User user, get_user(user_id));
  {
    ASSIGN_OR_RETURN(db::Statement st, db_->prepare("SELECT 1 FROM boxes WHERE user_id = ?1 AND "
                                                    "name = ?2 AND deleted_at_ms IS NULL"));
    RETURN_IF_ERROR(st.bind_int64(1, user_id));
    RETURN_IF_ERROR(st.bind_text(2, name));
    ASSIGN_OR_RETURN(bool exists, st.step());
    if (exists) {
      return already_exists(fmt::format("box {:?} already exists for user {:?}", name, user.name));
    }
  }
  {
    ASSIGN_OR_RETURN(db::Statement st, db_->prepare("SELECT count(*) FROM boxes WHERE user_id = "
                                                    "?1 AND deleted_at_ms IS NULL"));
    RETURN_IF_ERROR(st.bind_int64(1, user_id));
    ASSIGN_OR_RETURN(bool row, st.step());
    const int64_t live = row ? st.column_int64(0) : 0;
    if (live >= user.max_boxes) {
      return resource_exhausted(fmt::format("max_boxes: user {:?} already has {} of {} boxes",
                                            user.name, live, user.max_boxes));
    }
  }
  Box box;
  ASSIGN_OR_RETURN(box.id, fresh_id(*db_, *random_, "bx_", "SELECT 1 FROM boxes WHERE id = ?1"));
  box.user_id = user_id;
  box.name = std::string(name);
  box.state = BoxState::kAbsent;
  box.image = std::string(image);
  box.backend = std::string(backend);
  box.created_at_ms = now_ms(*clock_);
  box.state_changed_at_ms = box.created_at_ms;
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("INSERT INTO boxes (id, user_id, name, state, image, backend, "
                                  "created_at_ms, state_changed_at_ms) "
                                  "VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?6)"));
    RETURN_IF_ERROR(st.bind_text(1, box.id));
    RETURN_IF_ERROR(st.bind_int64(2, user_id));
    RETURN_IF_ERROR(st.bind_text(3, name));
    RETURN_IF_ERROR(bind_optional_text(st, 4, image));
    RETURN_IF_ERROR(bind_optional_text(st, 5, backend));
    RETURN_IF_ERROR(st.bind_int64(6, box.created_at_ms));
    RETURN_IF_ERROR(st.execute());
  }
  RETURN_IF_ERROR(txn.commit());
  return box;
}

Result<Box> SyncStore::get_box(int64_t user_id, std::string_view id_or_name) {
  // Box names cannot contain '_', so "bx_" never starts a name.
  const bool by_id = id_or_name.substr(0, 3) == "bx_";
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare(by_id ? "SELECT " CB_BOX_COLUMNS " FROM boxes WHERE id = ?1 AND "
                                        "user_id = ?2 AND deleted_at_ms IS NULL"
                                      : "SELECT " CB_BOX_COLUMNS " FROM boxes WHERE name = ?1 AND "
                                        "user_id = ?2 AND deleted_at_ms IS NULL"));
  RETURN_IF_ERROR(st.bind_text(1, id_or_name));
  RETURN_IF_ERROR(st.bind_int64(2, user_id));
  // The same answer whether the box is absent or another user's, so ids do not leak.
  return first_row(st, read_box, fmt::format("box {:?} not found", id_or_name));
}

Result<Box> SyncStore::get_box_by_id(std::string_view box_id) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_BOX_COLUMNS " FROM boxes WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, box_id));
  return first_row(st, read_box, fmt::format("box {:?} not found", box_id));
}

Result<std::vector<Box>> SyncStore::list_boxes(int64_t user_id) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_BOX_COLUMNS " FROM boxes WHERE user_id = ?1 AND "
                                "deleted_at_ms IS NULL ORDER BY created_at_ms, id"));
  RETURN_IF_ERROR(st.bind_int64(1, user_id));
  return collect<Box>(st, read_box);
}

Result<std::vector<Box>> SyncStore::list_all_boxes() {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_BOX_COLUMNS " FROM boxes WHERE deleted_at_ms IS "
                                "NULL OR state <> 0 ORDER BY created_at_ms, id"));
  return collect<Box>(st, read_box);
}

Result<Box> SyncStore::set_box_state(std::string_view box_id, BoxState state,
                                     std::string_view detail,
                                     std::optional<std::string_view> wake_id) {
  if (!valid_box_state(state)) {
    return invalid_argument(
        fmt::format("state: {} is not a box state (0..5)", static_cast<int>(state)));
  }
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(Box box, get_box_by_id(box_id));
  // The max_running check and the state change share one write transaction, so two wakes
  // racing (in this process or another) cannot both pass the check.
  if (state == BoxState::kStarting && !counts_as_running(box.state) && !box.deleted_at_ms) {
    ASSIGN_OR_RETURN(User owner, load_user_any(*db_, box.user_id));
    ASSIGN_OR_RETURN(int64_t running, count_running_boxes(*db_, box.user_id));
    if (running >= owner.max_running) {
      return resource_exhausted(
          fmt::format("max_running: user {:?} already has {} of {} boxes running", owner.name,
                      running, owner.max_running));
    }
  }
  const int64_t now = now_ms(*clock_);
  {
    ASSIGN_OR_RETURN(
        db::Statement st,
        db_->prepare("UPDATE boxes SET state_changed_at_ms = CASE WHEN state = ?2 THEN "
                     "state_changed_at_ms ELSE ?4 END, state = ?2, detail = ?3, "
                     "wake_id = CASE WHEN ?6 THEN ?5 ELSE wake_id END WHERE id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, box_id));
    RETURN_IF_ERROR(st.bind_int64(2, static_cast<int>(state)));
    RETURN_IF_ERROR(bind_optional_text(st, 3, detail));
    RETURN_IF_ERROR(st.bind_int64(4, now));
    RETURN_IF_ERROR(bind_optional_text(st, 5, wake_id.value_or(std::string_view())));
    RETURN_IF_ERROR(st.bind_int64(6, wake_id.has_value() ? 1 : 0));
    RETURN_IF_ERROR(st.execute());
  }
  if (box.state != state) box.state_changed_at_ms = now;
  box.state = state;
  box.detail = std::string(detail);
  if (wake_id) box.wake_id = std::string(*wake_id);
  RETURN_IF_ERROR(txn.commit());
  return box;
}

Status SyncStore::set_machine_key(std::string_view box_id, std::string_view machine_key) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("UPDATE boxes SET machine_key = ?2 WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, box_id));
  RETURN_IF_ERROR(bind_optional_text(st, 2, machine_key));
  RETURN_IF_ERROR(st.execute());
  if (db_->changes() == 0) return not_found(fmt::format("box {:?} not found", box_id));
  return ok_status();
}

Status SyncStore::mark_deleted(std::string_view box_id) {
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(Box box, get_box_by_id(box_id));
  if (box.deleted_at_ms) return ok_status();
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("UPDATE boxes SET deleted_at_ms = ?2 WHERE id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, box_id));
    RETURN_IF_ERROR(st.bind_int64(2, now_ms(*clock_)));
    RETURN_IF_ERROR(st.execute());
  }
  return txn.commit();
}

Result<int64_t> SyncStore::count_running(int64_t user_id) {
  return count_running_boxes(*db_, user_id);
}

// -- operations --

namespace {

// Appends an event to the unfinished operation |id| and moves the operation to |phase|;
// with |finish| also stamps finished_at_ms. Runs inside the caller's transaction.
Result<int64_t> record_event(db::Database& db, std::string_view id, Phase phase,
                             std::string_view detail, int64_t now, bool finish) {
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db.prepare("SELECT finished_at_ms IS NOT NULL FROM operations WHERE id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, id));
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return not_found(fmt::format("operation {:?} not found", id));
    if (st.column_int64(0) != 0) {
      return failed_precondition(fmt::format("operation {:?} has already finished", id));
    }
  }
  int64_t seq = 0;
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db.prepare("SELECT coalesce(max(seq), 0) + 1 FROM operation_events WHERE "
                                "operation_id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, id));
    ASSIGN_OR_RETURN(bool row, st.step());
    if (!row) return internal_error("max(seq) returned no row");
    seq = st.column_int64(0);
  }
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db.prepare("INSERT INTO operation_events (operation_id, seq, phase, detail, "
                                "at_ms) VALUES (?1, ?2, ?3, ?4, ?5)"));
    RETURN_IF_ERROR(st.bind_text(1, id));
    RETURN_IF_ERROR(st.bind_int64(2, seq));
    RETURN_IF_ERROR(st.bind_int64(3, static_cast<int>(phase)));
    RETURN_IF_ERROR(bind_optional_text(st, 4, detail));
    RETURN_IF_ERROR(st.bind_int64(5, now));
    RETURN_IF_ERROR(st.execute());
  }
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db.prepare("UPDATE operations SET phase = ?2, detail = ?3, finished_at_ms = "
                                "CASE WHEN ?5 THEN ?4 ELSE NULL END WHERE id = ?1"));
    RETURN_IF_ERROR(st.bind_text(1, id));
    RETURN_IF_ERROR(st.bind_int64(2, static_cast<int>(phase)));
    RETURN_IF_ERROR(bind_optional_text(st, 3, detail));
    RETURN_IF_ERROR(st.bind_int64(4, now));
    RETURN_IF_ERROR(st.bind_int64(5, finish ? 1 : 0));
    RETURN_IF_ERROR(st.execute());
  }
  return seq;
}

}  // namespace

Result<Operation> SyncStore::begin_operation(std::string_view box_id, std::string_view kind,
                                             std::string_view params) {
  RETURN_IF_ERROR(validate_kind(kind));
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(Box box, get_box_by_id(box_id));
  Operation op;
  ASSIGN_OR_RETURN(op.id,
                   fresh_id(*db_, *random_, "op_", "SELECT 1 FROM operations WHERE id = ?1"));
  op.box_id = box.id;
  op.user_id = box.user_id;
  op.kind = std::string(kind);
  op.phase = Phase::kPending;
  op.created_at_ms = now_ms(*clock_);
  op.params = std::string(params);
  {
    ASSIGN_OR_RETURN(db::Statement st,
                     db_->prepare("INSERT INTO operations (id, box_id, user_id, kind, phase, "
                                  "created_at_ms, params) VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6)"));
    RETURN_IF_ERROR(st.bind_text(1, op.id));
    RETURN_IF_ERROR(st.bind_text(2, op.box_id));
    RETURN_IF_ERROR(st.bind_int64(3, op.user_id));
    RETURN_IF_ERROR(st.bind_text(4, kind));
    RETURN_IF_ERROR(st.bind_int64(5, op.created_at_ms));
    RETURN_IF_ERROR(st.bind_text(6, params));
    RETURN_IF_ERROR(st.execute());
  }
  RETURN_IF_ERROR(txn.commit());
  return op;
}

Result<int64_t> SyncStore::append_event(std::string_view operation_id, Phase phase,
                                        std::string_view detail) {
  if (!valid_phase(phase) || is_terminal(phase)) {
    return invalid_argument(
        fmt::format("phase: {} is not a non-final phase (0..6); finish with finish_operation",
                    static_cast<int>(phase)));
  }
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(int64_t seq,
                   record_event(*db_, operation_id, phase, detail, now_ms(*clock_), false));
  RETURN_IF_ERROR(txn.commit());
  return seq;
}

Result<int64_t> SyncStore::finish_operation(std::string_view operation_id, Phase phase,
                                            std::string_view detail) {
  if (!is_terminal(phase)) {
    return invalid_argument(
        fmt::format("phase: an operation finishes in DONE (7) or FAILED (8), "
                    "not {}",
                    static_cast<int>(phase)));
  }
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(int64_t seq,
                   record_event(*db_, operation_id, phase, detail, now_ms(*clock_), true));
  RETURN_IF_ERROR(txn.commit());
  return seq;
}

Result<Operation> SyncStore::get_operation(std::string_view operation_id) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_OPERATION_COLUMNS " FROM operations WHERE id = ?1"));
  RETURN_IF_ERROR(st.bind_text(1, operation_id));
  return first_row(st, read_operation, fmt::format("operation {:?} not found", operation_id));
}

Result<std::vector<OperationEvent>> SyncStore::events_after(std::string_view operation_id,
                                                            int64_t after_seq) {
  ASSIGN_OR_RETURN(Operation op, get_operation(operation_id));
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT seq, phase, detail, at_ms FROM operation_events WHERE "
                                "operation_id = ?1 AND seq > ?2 ORDER BY seq"));
  RETURN_IF_ERROR(st.bind_text(1, operation_id));
  RETURN_IF_ERROR(st.bind_int64(2, after_seq));
  return collect<OperationEvent>(st, [&op](const db::Statement& s) {
    OperationEvent e;
    e.operation_id = op.id;
    e.seq = s.column_int64(0);
    e.phase = static_cast<Phase>(s.column_int64(1));
    e.detail = std::string(s.column_text(2));
    e.at_ms = s.column_int64(3);
    return e;
  });
}

Result<std::vector<Operation>> SyncStore::list_unfinished_operations() {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT " CB_OPERATION_COLUMNS " FROM operations WHERE "
                                "finished_at_ms IS NULL ORDER BY created_at_ms, id"));
  return collect<Operation>(st, read_operation);
}

#undef CB_USER_COLUMNS
#undef CB_TOKEN_COLUMNS
// -- model gateways and usage --

Status SyncStore::set_user_gateway(std::string_view user_name, std::string_view url,
                                   std::string_view key, MasterKeyView master) {
  RETURN_IF_ERROR(validate_gateway_url(url));
  RETURN_IF_ERROR(validate_gateway_key(key));
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(User user, find_user(user_name));
  std::string sealed =
      crypto::seal(master, key, gateway_key_additional_data(user.id, url), *random_);
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("INSERT INTO user_gateways (user_id, url, key_sealed, "
                                "updated_at_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (user_id) "
                                "DO UPDATE SET url = excluded.url, key_sealed = "
                                "excluded.key_sealed, updated_at_ms = excluded.updated_at_ms"));
  RETURN_IF_ERROR(st.bind_int64(1, user.id));
  RETURN_IF_ERROR(st.bind_text(2, url));
  RETURN_IF_ERROR(st.bind_blob(3, crypto::byte_view(sealed)));
  RETURN_IF_ERROR(st.bind_int64(4, now_ms(*clock_)));
  RETURN_IF_ERROR(st.execute());
  return txn.commit();
}

Status SyncStore::clear_user_gateway(std::string_view user_name) {
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(User user, find_user(user_name));
  ASSIGN_OR_RETURN(db::Statement st, db_->prepare("DELETE FROM user_gateways WHERE user_id = ?1"));
  RETURN_IF_ERROR(st.bind_int64(1, user.id));
  RETURN_IF_ERROR(st.execute());
  return txn.commit();
}

Result<std::optional<UserGateway>> SyncStore::user_gateway(int64_t user_id, MasterKeyView master) {
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT url, key_sealed, updated_at_ms FROM user_gateways "
                                "WHERE user_id = ?1"));
  RETURN_IF_ERROR(st.bind_int64(1, user_id));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (!row) return std::optional<UserGateway>();
  UserGateway gw;
  gw.user_id = user_id;
  gw.url = std::string(st.column_text(0));
  gw.updated_at_ms = st.column_int64(2);
  auto key = crypto::open(master, crypto::char_view(st.column_blob(1)),
                          gateway_key_additional_data(user_id, gw.url));
  if (!key.ok()) {
    return data_loss(fmt::format(
        "the gateway key of user {} does not open under master.key (sealed under another "
        "key, or its row or URL was changed outside the api): set it again",
        user_id));
  }
  gw.key = std::move(*key);
  return std::optional<UserGateway>(std::move(gw));
}

// -- state keys --

std::string state_key_additional_data(int64_t user_id) {
  return fmt::format("user_state_keys/{}/key_sealed", user_id);
}

Result<std::string> SyncStore::user_state_key(int64_t user_id, MasterKeyView master) {
  ASSIGN_OR_RETURN(db::Transaction txn, db_->begin());
  ASSIGN_OR_RETURN(db::Statement st,
                   db_->prepare("SELECT key_sealed FROM user_state_keys WHERE user_id = ?1"));
  RETURN_IF_ERROR(st.bind_int64(1, user_id));
  ASSIGN_OR_RETURN(bool row, st.step());
  if (row) {
    auto key = crypto::open(master, crypto::char_view(st.column_blob(0)),
                            state_key_additional_data(user_id));
    if (!key.ok() || key->size() != 32) {
      return data_loss(fmt::format(
          "the state key of user {} does not open under master.key (sealed under another key, "
          "or its row was changed outside the api)",
          user_id));
    }
    return std::move(*key);
  }
  ASSIGN_OR_RETURN(User user, get_user(user_id));
  (void)user;
  std::string key(32, '\0');
  random_->fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(key.data()), key.size()));
  std::string sealed = crypto::seal(master, key, state_key_additional_data(user_id), *random_);
  ASSIGN_OR_RETURN(db::Statement ins,
                   db_->prepare("INSERT INTO user_state_keys (user_id, key_sealed, created_at_ms) "
                                "VALUES (?1, ?2, ?3)"));
  RETURN_IF_ERROR(ins.bind_int64(1, user_id));
  RETURN_IF_ERROR(ins.bind_blob(2, crypto::byte_view(sealed)));
  RETURN_IF_ERROR(ins.bind_int64(3, now_ms(*clock_)));
  RETURN_IF_ERROR(ins.execute());
  RETURN_IF_ERROR(txn.commit());
  return key;
}

Status SyncStore::record_model_call(const ModelCall& call) {
  if (call.box_id.empty()) return invalid_argument("box_id: empty");
  if (call.wire.empty()) return invalid_argument("wire: empty");
  const int64_t now = now_ms(*clock_);
  ASSIGN_OR_RETURN(
      db::Statement st,
      db_->prepare("INSERT INTO model_usage (user_id, box_id, day, wire, model, requests, failed, "
                   "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
                   "last_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10, ?11) "
                   "ON CONFLICT (user_id, box_id, day, wire, model) DO UPDATE SET "
                   "requests = requests + 1, failed = failed + excluded.failed, "
                   "input_tokens = input_tokens + excluded.input_tokens, "
                   "output_tokens = output_tokens + excluded.output_tokens, "
                   "cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens, "
                   "cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens, "
                   "last_at_ms = excluded.last_at_ms"));
  RETURN_IF_ERROR(st.bind_int64(1, call.user_id));
  RETURN_IF_ERROR(st.bind_text(2, call.box_id));
  RETURN_IF_ERROR(st.bind_text(3, utc_day(now)));
  RETURN_IF_ERROR(st.bind_text(4, call.wire));
  RETURN_IF_ERROR(st.bind_text(5, call.model));
  RETURN_IF_ERROR(st.bind_int64(6, call.failed ? 1 : 0));
  RETURN_IF_ERROR(st.bind_int64(7, call.input_tokens));
  RETURN_IF_ERROR(st.bind_int64(8, call.output_tokens));
  RETURN_IF_ERROR(st.bind_int64(9, call.cache_read_tokens));
  RETURN_IF_ERROR(st.bind_int64(10, call.cache_write_tokens));
  RETURN_IF_ERROR(st.bind_int64(11, now));
  return st.execute();
}

Result<std::vector<ModelUsage>> SyncStore::model_usage(std::string_view user_name,
                                                       std::string_view since_day) {
  if (!since_day.empty() && !is_day(since_day))
    return invalid_argument(fmt::format("since: want YYYY-MM-DD, got {:?}", since_day));
  std::optional<int64_t> user_id;
  if (!user_name.empty()) {
    ASSIGN_OR_RETURN(User user, find_user(user_name));
    user_id = user.id;
  }
  ASSIGN_OR_RETURN(
      db::Statement st,
      db_->prepare("SELECT u.user_id, COALESCE(users.name, ''), u.box_id, COALESCE(boxes.name, "
                   "''), u.day, u.wire, u.model, u.requests, u.failed, u.input_tokens, "
                   "u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.last_at_ms "
                   "FROM model_usage u LEFT JOIN users ON users.id = u.user_id "
                   "LEFT JOIN boxes ON boxes.id = u.box_id "
                   "WHERE (?1 IS NULL OR u.user_id = ?1) AND u.day >= ?2 "
                   "ORDER BY u.day, u.user_id, u.box_id, u.wire, u.model"));
  RETURN_IF_ERROR(user_id ? st.bind_int64(1, *user_id) : st.bind_null(1));
  RETURN_IF_ERROR(st.bind_text(2, since_day));
  return collect<ModelUsage>(st, [](const db::Statement& r) {
    ModelUsage u;
    u.user_id = r.column_int64(0);
    u.user_name = std::string(r.column_text(1));
    u.box_id = std::string(r.column_text(2));
    u.box_name = std::string(r.column_text(3));
    u.day = std::string(r.column_text(4));
    u.wire = std::string(r.column_text(5));
    u.model = std::string(r.column_text(6));
    u.requests = r.column_int64(7);
    u.failed = r.column_int64(8);
    u.input_tokens = r.column_int64(9);
    u.output_tokens = r.column_int64(10);
    u.cache_read_tokens = r.column_int64(11);
    u.cache_write_tokens = r.column_int64(12);
    u.last_at_ms = r.column_int64(13);
    return u;
  });
}

#undef CB_BOX_COLUMNS
#undef CB_OPERATION_COLUMNS

// ---- Store ----
//
// Each method hands one SyncStore call to the worker. The function captures the coroutine's
// parameters (which live in its frame) and |this| by reference: the coroutine stays suspended
// until the result is back, and the Store outlives every call (a REQUIRES of the class), so
// nothing dangles. Capturing by reference also keeps the function trivially destructible,
// which matters on gcc 12: it may destroy a temporary in a co_await operand twice, and a
// lambda owning a std::string then frees it twice (seen here as a crash in the worker).

Result<std::unique_ptr<Store>> Store::open(const fs::path& data_dir, const StoreOptions& options) {
  ASSIGN_OR_RETURN(fs::path path, prepare_data_dir(data_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<db::Worker> worker,
                   db::Worker::start(path, api_db_migrations(), options.db));
  return std::unique_ptr<Store>(new Store(std::move(worker), options));
}

Store::Store(std::unique_ptr<db::Worker> worker, const StoreOptions& options)
    : worker_(std::move(worker)), options_(resolve(options)) {}

Store::~Store() = default;

asio::awaitable<Result<User>> Store::add_user(std::string name, int max_boxes, int max_running) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).add_user(name, max_boxes, max_running);
  });
  co_return r;
}

asio::awaitable<Result<std::vector<User>>> Store::list_users() {
  auto r =
      co_await worker_->run([&](db::Database& db) { return SyncStore(db, options_).list_users(); });
  co_return r;
}

asio::awaitable<Result<User>> Store::find_user(std::string name) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).find_user(name); });
  co_return r;
}

asio::awaitable<Result<User>> Store::get_user(int64_t id) {
  auto r =
      co_await worker_->run([&](db::Database& db) { return SyncStore(db, options_).get_user(id); });
  co_return r;
}

asio::awaitable<Result<std::vector<std::string>>> Store::remove_user(std::string name) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).remove_user(name); });
  co_return r;
}

asio::awaitable<Result<IssuedToken>> Store::issue_token(std::string user_name, std::string label) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).issue_token(user_name, label); });
  co_return r;
}

asio::awaitable<Status> Store::revoke_token(std::string id) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).revoke_token(id); });
  co_return r;
}

asio::awaitable<Result<std::vector<TokenInfo>>> Store::list_tokens(std::string user_name) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).list_tokens(user_name); });
  co_return r;
}

asio::awaitable<Result<int64_t>> Store::change_generation() {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).change_generation(); });
  co_return r;
}

asio::awaitable<Result<std::optional<TokenSnapshot>>> Store::tokens_if_changed(
    std::optional<int64_t> known_generation) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).tokens_if_changed(known_generation);
  });
  co_return r;
}

asio::awaitable<Result<Box>> Store::create_box(int64_t user_id, std::string name, std::string image,
                                               std::string backend) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).create_box(user_id, name, image, backend);
  });
  co_return r;
}

asio::awaitable<Result<Box>> Store::get_box(int64_t user_id, std::string id_or_name) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).get_box(user_id, id_or_name); });
  co_return r;
}

asio::awaitable<Result<Box>> Store::get_box_by_id(std::string box_id) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).get_box_by_id(box_id); });
  co_return r;
}

asio::awaitable<Result<std::vector<Box>>> Store::list_boxes(int64_t user_id) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).list_boxes(user_id); });
  co_return r;
}

asio::awaitable<Result<std::vector<Box>>> Store::list_all_boxes() {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).list_all_boxes(); });
  co_return r;
}

asio::awaitable<Result<Box>> Store::set_box_state(std::string box_id, BoxState state,
                                                  std::string detail,
                                                  std::optional<std::string> wake_id) {
  auto r = co_await worker_->run([&](db::Database& db) {
    std::optional<std::string_view> wake;
    if (wake_id) wake = *wake_id;
    return SyncStore(db, options_).set_box_state(box_id, state, detail, wake);
  });
  co_return r;
}

asio::awaitable<Status> Store::set_machine_key(std::string box_id, std::string machine_key) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).set_machine_key(box_id, machine_key);
  });
  co_return r;
}

asio::awaitable<Status> Store::mark_deleted(std::string box_id) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).mark_deleted(box_id); });
  co_return r;
}

asio::awaitable<Result<int64_t>> Store::count_running(int64_t user_id) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).count_running(user_id); });
  co_return r;
}

asio::awaitable<Result<Operation>> Store::begin_operation(std::string box_id, std::string kind,
                                                          std::string params) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).begin_operation(box_id, kind, params);
  });
  co_return r;
}

asio::awaitable<Result<int64_t>> Store::append_event(std::string operation_id, Phase phase,
                                                     std::string detail) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).append_event(operation_id, phase, detail);
  });
  co_return r;
}

asio::awaitable<Result<int64_t>> Store::finish_operation(std::string operation_id, Phase phase,
                                                         std::string detail) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).finish_operation(operation_id, phase, detail);
  });
  co_return r;
}

asio::awaitable<Result<Operation>> Store::get_operation(std::string operation_id) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).get_operation(operation_id); });
  co_return r;
}

asio::awaitable<Result<std::vector<OperationEvent>>> Store::events_after(std::string operation_id,
                                                                         int64_t after_seq) {
  auto r = co_await worker_->run([&](db::Database& db) {
    return SyncStore(db, options_).events_after(operation_id, after_seq);
  });
  co_return r;
}

asio::awaitable<Result<std::vector<Operation>>> Store::list_unfinished_operations() {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).list_unfinished_operations(); });
  co_return r;
}

asio::awaitable<Result<std::optional<UserGateway>>> Store::user_gateway(int64_t user_id,
                                                                        MasterKeyView master) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).user_gateway(user_id, master); });
  co_return r;
}

asio::awaitable<Result<std::string>> Store::user_state_key(int64_t user_id, MasterKeyView master) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).user_state_key(user_id, master); });
  co_return r;
}

asio::awaitable<Status> Store::record_model_call(ModelCall call) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).record_model_call(call); });
  co_return r;
}

asio::awaitable<Result<std::vector<ModelUsage>>> Store::model_usage(std::string user_name,
                                                                    std::string since_day) {
  auto r = co_await worker_->run(
      [&](db::Database& db) { return SyncStore(db, options_).model_usage(user_name, since_day); });
  co_return r;
}

}  // namespace cb::api
