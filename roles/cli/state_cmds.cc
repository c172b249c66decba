#include "roles/cli/state_cmds.h"

#include "base/log.h"
#include "client/config.h"
#include "client/connect.h"
#include "cocoonbox/control/v1/boxes.cbgrpc.h"
#include "net/asio.h"
#include "roles/cli/failure.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <optional>
#include <unistd.h>

namespace cb::cli {

namespace pb = ::cocoonbox::control::v1;
using json = nlohmann::json;

namespace {

std::string utc(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < (1u << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(n) / 1024);
  if (n < (1u << 30)) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1 << 20));
  return fmt::format("{:.2f} GiB", static_cast<double>(n) / (1 << 30));
}

json snapshot_json(const pb::Snapshot& s) {
  return json{{"id", s.id()},
              {"saved_at_ms", s.saved_at_ms()},
              {"saved_at", utc(s.saved_at_ms())},
              {"quiesced", s.quiesced()},
              {"pinned", s.pinned()},
              {"files", s.files()},
              {"logical_bytes", s.logical_bytes()},
              {"changed_files", s.changed_files()},
              {"added_bytes", s.added_bytes()},
              {"added_chunks", s.added_chunks()}};
}

const char* kind_name(pb::EntryKind k) {
  switch (k) {
    case pb::ENTRY_KIND_FILE:
      return "file";
    case pb::ENTRY_KIND_DIR:
      return "dir";
    case pb::ENTRY_KIND_SYMLINK:
      return "symlink";
    default:
      return "unknown";
  }
}

// Progress on stderr: one rewritten line on a terminal, a line per update otherwise.
class ProgressLine {
 public:
  explicit ProgressLine(std::string label)
      : label_(std::move(label)), tty_(::isatty(STDERR_FILENO) == 1) {}
  ~ProgressLine() {
    if (open_) std::fprintf(stderr, "\n");
  }
  void update(const pb::TransferProgress& p, bool save) {
    std::string line =
        save ? fmt::format("{}: {} read, {} chunks uploaded ({})", label_, human_bytes(p.bytes()),
                           p.chunks(), human_bytes(p.chunk_bytes()))
             : fmt::format("{}: {} files, {} written, {} chunks fetched", label_, p.files(),
                           human_bytes(p.bytes()), p.chunks());
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      open_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  bool open_ = false;
};

class StateCli {
 public:
  StateCli(std::string_view command, const StateOptions& o) : command_(command), o_(o) {}

  asio::awaitable<int> run() {
    std::optional<Failure> f = co_await connect();
    if (!f) {
      if (command_ == "save")
        f = co_await save();
      else if (command_ == "snapshots")
        f = co_await snapshots();
      else if (command_ == "browse")
        f = co_await browse();
      else if (command_ == "restore")
        f = co_await restore();
      else
        f = Failure{fmt::format("unknown command {:?}", command_), kUsage};
    }
    if (conn_) conn_->channel->close();
    if (f) {
      std::cerr << "cocoonbox " << command_ << ": " << f->message << "\n";
      co_return f->code;
    }
    co_return kOk;
  }

 private:
  asio::awaitable<std::optional<Failure>> connect() {
    auto ex = co_await asio::this_coro::executor;
    auto c = co_await client::connect_signed_in(ex);
    if (!c.ok()) co_return Failure{std::string(c.status().message())};
    conn_ = std::move(*c);
    co_return std::nullopt;
  }

  static Failure from_status(const Status& st, std::string_view doing) {
    return Failure{fmt::format("{}: {} ({})", doing, st.message(), code_name(st.code()))};
  }

  asio::awaitable<std::optional<Failure>> save() {
    pb::Boxes::Stub stub(conn_->channel);
    pb::SaveStateRequest req;
    req.set_box(o_.box);
    req.set_quiesce(o_.quiesce);
    auto reader = co_await stub.SaveState(req, conn_->call_options());
    if (!reader.ok()) co_return from_status(reader.status(), "save");
    ProgressLine progress("saving");
    std::optional<pb::SaveResult> result;
    for (;;) {
      auto ev = co_await reader->read();
      if (!ev) break;
      if (ev->has_progress()) progress.update(ev->progress(), true);
      if (ev->has_result()) result = ev->result();
    }
    Status st = co_await reader->finish();
    if (!st.ok()) co_return from_status(st, "save");
    if (!result) co_return Failure{"save: the api sent no result"};
    const pb::Snapshot& s = result->snapshot();
    if (o_.json) {
      json j{{"box_id", result->box_id()},
             {"snapshot", snapshot_json(s)},
             {"uploaded_chunks", result->uploaded_chunks()},
             {"files_reused", result->files_reused()},
             {"notes", json::array()}};
      for (const auto& n : result->notes()) j["notes"].push_back(n);
      std::cout << j.dump() << "\n";
    } else {
      std::cout << fmt::format(
          "Saved snapshot {} of {}: {} files ({}), {} changed, {} added in {} new chunks.\n",
          s.id(), result->box_id(), s.files(), human_bytes(s.logical_bytes()), s.changed_files(),
          human_bytes(s.added_bytes()), result->uploaded_chunks());
      for (const auto& n : result->notes()) std::cout << "  note: " << n << "\n";
    }
    co_return std::nullopt;
  }

  asio::awaitable<Result<pb::ListSnapshotsResponse>> list() {
    pb::Boxes::Stub stub(conn_->channel);
    pb::BoxRef req;
    req.set_box(o_.box);
    auto r = co_await stub.ListSnapshots(req, conn_->call_options(std::chrono::seconds(60)));
    co_return r;
  }

  asio::awaitable<std::optional<Failure>> snapshots() {
    auto r = co_await list();
    if (!r.ok()) co_return from_status(r.status(), "snapshots");
    if (o_.json) {
      json a = json::array();
      for (const auto& s : r->snapshots()) a.push_back(snapshot_json(s));
      std::cout << a.dump() << "\n";
      co_return std::nullopt;
    }
    if (r->snapshots().empty()) {
      std::cout << "No snapshots yet: `cocoonbox save` makes one.\n";
      co_return std::nullopt;
    }
    std::cout << fmt::format("{:<32} {:<21} {:>8} {:>8} {:>12}\n", "SNAPSHOT", "SAVED (UTC)",
                             "FILES", "CHANGED", "ADDED");
    for (const auto& s : r->snapshots()) {
      std::cout << fmt::format("{:<32} {:<21} {:>8} {:>8} {:>12}\n", s.id(), utc(s.saved_at_ms()),
                               s.files(), s.changed_files(), human_bytes(s.added_bytes()));
    }
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> browse() {
    pb::Boxes::Stub stub(conn_->channel);
    pb::BrowseSnapshotRequest req;
    req.set_box(o_.box);
    req.set_snapshot_id(o_.snapshot);
    req.set_dir(o_.dir);
    auto r = co_await stub.BrowseSnapshot(req, conn_->call_options(std::chrono::seconds(60)));
    if (!r.ok()) co_return from_status(r.status(), "browse");
    if (o_.json) {
      json a = json::array();
      for (const auto& e : r->entries()) {
        json j{{"path", e.path()},
               {"kind", kind_name(e.kind())},
               {"size", e.size()},
               {"mtime_ms", e.mtime_ms()},
               {"mode", e.mode()}};
        if (e.kind() == pb::ENTRY_KIND_SYMLINK) j["target"] = e.target();
        a.push_back(std::move(j));
      }
      std::cout << a.dump() << "\n";
    } else {
      for (const auto& e : r->entries()) {
        std::string name = e.path();
        if (e.kind() == pb::ENTRY_KIND_DIR) name += "/";
        if (e.kind() == pb::ENTRY_KIND_SYMLINK) name += " -> " + e.target();
        std::cout << fmt::format("{:04o} {:>12} {}  {}\n", e.mode(),
                                 e.kind() == pb::ENTRY_KIND_FILE ? human_bytes(e.size()) : "-",
                                 utc(e.mtime_ms()), name);
      }
      if (r->truncated()) std::cout << "(more entries not listed)\n";
    }
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> restore() {
    std::string snapshot = o_.snapshot;
    if (snapshot.empty()) {
      int64_t at = parse_at(o_.at);
      if (at < 0)
        co_return Failure{fmt::format("--at {:?}: want 2026-10-02T16:08:12Z, 2026-10-02 or "
                                      "@<unix seconds>",
                                      o_.at),
                          kUsage};
      auto r = co_await list();
      if (!r.ok()) co_return from_status(r.status(), "restore");
      for (const auto& s : r->snapshots()) {  // newest first
        if (s.saved_at_ms() <= at) {
          snapshot = s.id();
          break;
        }
      }
      if (snapshot.empty())
        co_return Failure{fmt::format("no snapshot saved at or before {}", utc(at))};
    }
    pb::Boxes::Stub stub(conn_->channel);
    pb::RestorePathsRequest req;
    req.set_box(o_.box);
    req.set_snapshot_id(snapshot);
    for (const auto& p : o_.paths) req.add_paths(p);
    req.set_target(o_.target);
    auto reader = co_await stub.RestorePaths(req, conn_->call_options());
    if (!reader.ok()) co_return from_status(reader.status(), "restore");
    ProgressLine progress("restoring");
    std::optional<pb::RestoreResult> result;
    for (;;) {
      auto ev = co_await reader->read();
      if (!ev) break;
      if (ev->has_progress()) progress.update(ev->progress(), false);
      if (ev->has_result()) result = ev->result();
    }
    Status st = co_await reader->finish();
    if (!st.ok()) co_return from_status(st, "restore");
    if (!result) co_return Failure{"restore: the api sent no result"};
    if (o_.json) {
      std::cout << json{{"box_id", result->box_id()}, {"snapshot", snapshot},
                        {"path", result->path()},     {"files", result->files()},
                        {"dirs", result->dirs()},     {"symlinks", result->symlinks()},
                        {"bytes", result->bytes()},   {"chunks", result->chunks()}}
                       .dump()
                << "\n";
    } else {
      std::cout << fmt::format("Restored {} files ({}) from {} into {}\n", result->files(),
                               human_bytes(result->bytes()), snapshot, result->path());
    }
    co_return std::nullopt;
  }

  std::string command_;
  const StateOptions& o_;
  std::optional<client::Connection> conn_;
};

}  // namespace

int64_t parse_at(std::string_view text) {
  if (text.empty()) return -1;
  if (text[0] == '@') {
    // @<unix seconds>[.<up to 3 digits>]
    int64_t n = 0;
    int64_t frac = 0;
    int frac_digits = -1;
    for (char c : text.substr(1)) {
      if (c == '.' && frac_digits < 0) {
        frac_digits = 0;
        continue;
      }
      if (c < '0' || c > '9' || n > (int64_t{1} << 40) || frac_digits >= 3) return -1;
      if (frac_digits >= 0) {
        frac = frac * 10 + (c - '0');
        ++frac_digits;
      } else {
        n = n * 10 + (c - '0');
      }
    }
    if (text.size() == 1 || frac_digits == 0) return -1;
    for (int d = std::max(frac_digits, 0); d < 3; ++d) frac *= 10;
    return n * 1000 + (frac_digits < 0 ? 999 : frac);
  }
  std::tm tm{};
  std::string s(text);
  const char* end = nullptr;
  for (const char* f : {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%MZ", "%Y-%m-%d"}) {
    tm = std::tm{};
    end = ::strptime(s.c_str(), f, &tm);
    if (end != nullptr && *end == '\0') break;
    end = nullptr;
  }
  if (end == nullptr) return -1;
  std::time_t t = ::timegm(&tm);
  if (t < 0) return -1;
  // A date or a minute means its end: the newest snapshot of that day or minute.
  int64_t ms = static_cast<int64_t>(t) * 1000;
  if (s.size() == 10)
    ms += 86400 * 1000 - 1;
  else if (s.size() == 17)
    ms += 60 * 1000 - 1;
  else
    ms += 999;
  return ms;
}

void add_state_commands(CLI::App& app, StateOptions& o) {
  auto* save = app.add_subcommand("save", "Save the box's files (/home/user, /workspace) now");
  save->add_option("--box", o.box, "box name or id (default: main)");
  save->add_flag("--json", o.json, "print the result as JSON");
  save->add_flag("--quiesce", o.quiesce,
                 "first let the agent's running turns end (up to 30 s) and save a consistent "
                 "copy of its database");
  save->footer(
      "Examples:\n  cocoonbox save\n  cocoonbox save --quiesce\n  cocoonbox save --box work "
      "--json");

  auto* snapshots = app.add_subcommand("snapshots", "List the box's saved snapshots, newest first");
  snapshots->add_option("--box", o.box, "box name or id (default: main)");
  snapshots->add_flag("--json", o.json, "print a JSON array");

  auto* browse = app.add_subcommand("browse", "List one directory of a snapshot");
  browse->add_option("SNAPSHOT", o.snapshot, "snapshot id (from `cocoonbox snapshots`)")
      ->required();
  browse->add_option("DIR", o.dir, "a box path, e.g. /workspace/app (default: the top)");
  browse->add_option("--box", o.box, "box name or id (default: main)");
  browse->add_flag("--json", o.json, "print a JSON array");
  browse->footer("Example:\n  cocoonbox browse 20261002T160812.123Z-1a2b3c4d /workspace");

  auto* restore = app.add_subcommand(
      "restore", "Restore files of a snapshot into ~/Restored/<save time>/ in the box");
  restore->add_option("PATH", o.paths, "box paths under /home/user or /workspace")->required();
  auto* snap = restore->add_option("--snapshot", o.snapshot, "snapshot id");
  auto* at =
      restore->add_option("--at", o.at,
                          "the newest snapshot saved at or before TIME (2026-10-02T16:08:12Z, "
                          "2026-10-02, @<unix seconds>[.ms]; UTC)");
  snap->excludes(at);
  restore->add_option("--target", o.target,
                      "folder name under ~/Restored (default: the snapshot's save time)");
  restore->add_option("--box", o.box, "box name or id (default: main)");
  restore->add_flag("--json", o.json, "print the result as JSON");
  restore->footer(
      "Nothing outside ~/Restored changes. Examples:\n"
      "  cocoonbox restore /workspace/app --at 2026-10-02T16:00:00Z\n"
      "  cocoonbox restore /home/user/Documents --snapshot 20261002T160812.123Z-1a2b3c4d");
}

bool is_state_command(std::string_view command) {
  return command == "save" || command == "snapshots" || command == "browse" || command == "restore";
}

int run_state_command(std::string_view command, const StateOptions& o) {
  if (command == "restore" && o.snapshot.empty() == o.at.empty()) {
    std::cerr << "cocoonbox restore: give --snapshot ID or --at TIME\n";
    return kUsage;
  }
  if (std::getenv("COCOONBOX_LOG_LEVEL") == nullptr) log::set_min_level(log::Level::kError);
  asio::io_context io;
  int rc = kError;
  StateCli cli(command, o);
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { rc = co_await cli.run(); }, asio::detached);
  io.run();
  return rc;
}

}  // namespace cb::cli
