#include "roles/agent/state_service.h"

#include "base/log.h"
#include "crypto/bytes.h"
#include "crypto/keys.h"
#include "crypto/random.h"
#include "http/http1_client.h"
#include "state/chunk.h"
#include "state/manifest.h"
#include "state/restore.h"
#include "state/scanner.h"
#include "state/snapshot.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdio.h>
#include <sys/stat.h>
#include <thread>
#include <unordered_set>

namespace cb::agent {

namespace v1 = ::cocoonbox::agent::v1;
using json = nlohmann::json;

namespace {

constexpr std::string_view kTicketHeader = "x-cocoonbox-state-ticket";
constexpr std::string_view kUrlsPath = "/cocoonbox.state/v1/urls";
// Chunks asked about per door request (seed §25.4: pages of 2048).
constexpr size_t kIdsPerRequest = 2048;
// A save keeps at most this many plaintext bytes of new chunks before it asks the door.
constexpr size_t kPendingBytes = 32u << 20;
constexpr size_t kManifestPart = 1u << 20;
constexpr auto kRequestTimeout = std::chrono::minutes(2);

// Counters a job's thread updates and the handler reports.
struct Progress {
  std::atomic<uint64_t> files{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> chunks{0};
  std::atomic<uint64_t> chunk_bytes{0};
  std::atomic<bool> cancel{false};
  std::atomic<bool> done{false};

  v1::TransferProgress snapshot() const {
    v1::TransferProgress p;
    p.set_files(files.load());
    p.set_bytes(bytes.load());
    p.set_chunks(chunks.load());
    p.set_chunk_bytes(chunk_bytes.load());
    return p;
  }
};

Status http_status(int status, std::string_view what, std::string_view body) {
  std::string msg = fmt::format("{}: HTTP {}: {}", what, status, body.substr(0, 300));
  switch (status) {
    case 400:
      return invalid_argument(msg);
    case 401:
    case 403:
      return permission_denied(msg);
    case 404:
      return not_found(msg);
    case 410:
      return failed_precondition(msg);
    default:
      return unavailable(msg);
  }
}

// HTTP/1.1 from a job's thread: a private io_context run for each request, one kept-alive
// connection to the door socket; absolute http:// URLs (an S3 backend's presigned URLs) get
// a connection each.
class JobHttp {
 public:
  JobHttp(std::string door_socket, std::string ticket)
      : door_socket_(std::move(door_socket)), ticket_(std::move(ticket)) {}

  // |url| is a door target ("/cocoonbox.state/...") or "http://host[:port]/path".
  Result<std::string> request(const std::string& method, const std::string& url, std::string body,
                              std::string_view what) {
    Result<std::string> out = internal_error("request did not run");
    auto task = [&]() -> asio::awaitable<void> {
      out = co_await exchange(method, url, body, what);
    };
    auto fut = asio::co_spawn(io_, task(), asio::use_future);
    io_.restart();
    io_.run();
    try {
      fut.get();
    } catch (const std::exception& e) {
      return internal_error(fmt::format("{}: {}", what, e.what()));
    }
    return out;
  }

 private:
  asio::awaitable<Result<std::string>> exchange(const std::string& method, const std::string& url,
                                                std::string& body, std::string_view what) {
    auto deadline = net::after(kRequestTimeout);
    http::Headers headers;
    headers.push_back(http::Header{std::string(kTicketHeader), ticket_});
    if (!url.empty() && url[0] == '/') {
      for (int attempt = 0; attempt < 2; ++attempt) {
        if (!door_ || !door_->reusable()) {
          http::Http1DialOptions o;
          o.unix_path = door_socket_;
          auto c = co_await http::dial_http1(io_.get_executor(), o, deadline);
          if (!c.ok())
            co_return c.status().with_prefix(fmt::format("{}: door {}", what, door_socket_));
          door_ = std::move(*c);
        }
        auto r = co_await door_->request(method, url, headers, body, deadline);
        if (!r.ok()) {
          door_.reset();
          if (attempt == 0 && r.status().code() == Code::kUnavailable)
            continue;  // stale keep-alive
          co_return r.status().with_prefix(std::string(what));
        }
        if (r->status / 100 != 2) co_return http_status(r->status, what, r->body);
        co_return std::move(r->body);
      }
      co_return unavailable(fmt::format("{}: door unreachable", what));
    }
    constexpr std::string_view kHttp = "http://";
    if (url.rfind(kHttp, 0) != 0)
      co_return invalid_argument(fmt::format("{}: unsupported URL scheme", what));
    std::string rest = url.substr(kHttp.size());
    size_t slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
    http::Http1DialOptions o;
    size_t colon = authority.rfind(':');
    o.host = authority.substr(0, colon);
    o.port = 80;
    if (colon != std::string::npos)
      o.port = static_cast<uint16_t>(std::atoi(authority.c_str() + colon + 1));
    auto c = co_await http::dial_http1(io_.get_executor(), o, deadline);
    if (!c.ok()) co_return c.status().with_prefix(std::string(what));
    http::Headers none;
    auto r = co_await (*c)->request(method, target, none, body, deadline);
    if (!r.ok()) co_return r.status().with_prefix(std::string(what));
    if (r->status / 100 != 2) co_return http_status(r->status, what, r->body);
    co_return std::move(r->body);
  }

  asio::io_context io_;
  std::string door_socket_;
  std::string ticket_;
  std::unique_ptr<http::Http1Client> door_;
};

// Asks the door for URLs of |ids| ("put": those the store lacks; "get": all of them).
// Returns hex id -> URL.
Result<std::map<std::string, std::string>> ask_urls(JobHttp& http, std::string_view op,
                                                    const std::vector<state::ChunkId>& ids) {
  std::map<std::string, std::string> urls;
  for (size_t i = 0; i < ids.size(); i += kIdsPerRequest) {
    json req{{"op", std::string(op)}, {"ids", json::array()}};
    for (size_t j = i; j < ids.size() && j < i + kIdsPerRequest; ++j)
      req["ids"].push_back(ids[j].hex());
    ASSIGN_OR_RETURN(std::string body,
                     http.request("POST", std::string(kUrlsPath), req.dump(), "chunk urls"));
    json resp = json::parse(body, nullptr, false);
    if (!resp.is_object() || !resp.contains("urls") || !resp["urls"].is_object())
      return unavailable("chunk urls: the door's answer is not {\"urls\":{...}}");
    for (auto& [hex, url] : resp["urls"].items()) {
      if (!url.is_string()) return unavailable("chunk urls: a URL is not a string");
      urls[hex] = url.get<std::string>();
    }
  }
  return urls;
}

Result<state::StateKeys> keys_of(const v1::StateAccess& access) {
  auto key = crypto::SymmetricKey::from_bytes(access.state_key());
  if (!key.ok()) return invalid_argument("access.state_key: must be 32 bytes");
  return state::StateKeys(*key);
}

Result<state::Manifest> fetch_manifest(JobHttp& http, const state::StateKeys& keys,
                                       const state::BoxLocation& location,
                                       const std::string& snapshot_id, const std::string& url) {
  ASSIGN_OR_RETURN(std::string sealed, http.request("GET", url, {}, "manifest"));
  return state::open_manifest(keys, sealed, state::manifest_additional_data(location, snapshot_id));
}

// The save's ChunkSink: new chunks wait in memory (up to kPendingBytes) until the door says
// which ones the store lacks; those are sealed and PUT to the URLs it gave.
class UploadSink final : public state::ChunkSink {
 public:
  UploadSink(JobHttp& http, const state::StateKeys& keys, Progress& progress)
      : http_(http), keys_(keys), progress_(progress) {}

  void add_known(const state::Manifest& m) {
    for (const auto& e : m.entries)
      for (const auto& c : e.chunks) known_.insert(c.id);
  }

  Status add(const state::ChunkId& id, std::span<const uint8_t> plaintext) override {
    if (progress_.cancel.load()) return cancelled("the caller went away");
    progress_.bytes += plaintext.size();
    if (known_.count(id) != 0) return ok_status();
    known_.insert(id);
    pending_.push_back(
        {id, std::string(reinterpret_cast<const char*>(plaintext.data()), plaintext.size())});
    pending_bytes_ += plaintext.size();
    if (pending_bytes_ >= kPendingBytes || pending_.size() >= kIdsPerRequest) return flush();
    return ok_status();
  }

  Status flush() {
    if (pending_.empty()) return ok_status();
    std::vector<state::ChunkId> ids;
    ids.reserve(pending_.size());
    for (const auto& p : pending_) ids.push_back(p.id);
    ASSIGN_OR_RETURN(auto urls, ask_urls(http_, "put", ids));
    for (const auto& p : pending_) {
      if (progress_.cancel.load()) return cancelled("the caller went away");
      auto it = urls.find(p.id.hex());
      if (it == urls.end()) continue;  // the store has it (another box of the user saved it)
      const auto* data = reinterpret_cast<const uint8_t*>(p.plaintext.data());
      std::string sealed =
          state::seal_chunk(keys_, p.id, {data, p.plaintext.size()}, crypto::system_random());
      RETURN_IF_ERROR(http_.request("PUT", it->second, sealed, "chunk upload").status());
      ++uploaded_chunks_;
      uploaded_bytes_ += p.plaintext.size();
      uploaded_stored_bytes_ += sealed.size();
      ++progress_.chunks;
      progress_.chunk_bytes += sealed.size();
    }
    pending_.clear();
    pending_bytes_ = 0;
    return ok_status();
  }

  uint64_t uploaded_chunks_ = 0;
  uint64_t uploaded_bytes_ = 0;
  uint64_t uploaded_stored_bytes_ = 0;

 private:
  struct Pending {
    state::ChunkId id;
    std::string plaintext;
  };
  JobHttp& http_;
  const state::StateKeys& keys_;
  Progress& progress_;
  std::unordered_set<state::ChunkId, state::ChunkIdHash> known_;
  std::vector<Pending> pending_;
  size_t pending_bytes_ = 0;
};

// A read-only Store over signed GET URLs: exactly the chunks the door handed out.
class UrlStore final : public state::Store {
 public:
  UrlStore(JobHttp& http, std::map<std::string, std::string> urls, Progress& progress)
      : http_(http), urls_(std::move(urls)), progress_(progress) {}

  Status put(std::string_view, std::string_view) override {
    return permission_denied("restore: the store is read-only");
  }
  Result<std::string> get(std::string_view key) override {
    if (progress_.cancel.load()) return cancelled("the caller went away");
    auto it = urls_.find(std::string(key));
    if (it == urls_.end()) return not_found(fmt::format("{}: no URL was given for it", key));
    auto r = http_.request("GET", it->second, {}, "chunk");
    if (r.ok()) {
      ++progress_.chunks;
      progress_.chunk_bytes += r->size();
    }
    return r;
  }
  Result<uint64_t> stat(std::string_view key) override {
    return unimplemented(fmt::format("{}: stat on a restore's store", key));
  }
  Result<state::ListPage> list(std::string_view, std::string_view, size_t) override {
    return unimplemented("list on a restore's store");
  }
  Status delete_batch(std::span<const std::string>) override {
    return permission_denied("restore: the store is read-only");
  }

 private:
  JobHttp& http_;
  std::map<std::string, std::string> urls_;  // object key -> URL
  Progress& progress_;
};

struct SaveJob {
  Progress progress;
  v1::SaveRequest req;
  StateConfig config;
  // Written by the thread before done is set.
  Status status;
  std::string manifest;  // encoded
  v1::SaveDone summary;

  void run() {
    status = save();
    progress.done.store(true);
  }

  Status save() {
    ASSIGN_OR_RETURN(state::StateKeys keys, keys_of(req.access()));
    state::BoxLocation location{req.access().user(), req.access().box()};
    RETURN_IF_ERROR(state::validate_location(location));
    JobHttp http(config.door_socket, req.access().ticket());
    std::optional<state::Manifest> parent;
    if (!req.parent_snapshot_id().empty()) {
      auto m =
          fetch_manifest(http, keys, location, req.parent_snapshot_id(), req.parent_manifest_url());
      if (!m.ok()) return m.status().with_prefix(std::string("parent manifest"));
      parent = std::move(*m);
    }
    state::ScanOptions scan;
    scan.roots = {{config.home, "home/user"}, {config.workspace, "workspace"}};
    for (const auto& e : req.exclude()) scan.exclude.push_back(e);
    UploadSink sink(http, keys, progress);
    if (parent) sink.add_known(*parent);
    ASSIGN_OR_RETURN(state::ScanResult result,
                     state::scan_tree(scan, parent ? &*parent : nullptr, keys, sink));
    RETURN_IF_ERROR(sink.flush());
    manifest = state::encode_manifest(result.manifest);
    summary.set_files_read(result.stats.files_read);
    summary.set_bytes_read(result.stats.bytes_read);
    summary.set_files_reused(result.stats.files_reused);
    summary.set_skipped(result.stats.skipped);
    summary.set_uploaded_chunks(sink.uploaded_chunks_);
    summary.set_uploaded_bytes(sink.uploaded_bytes_);
    summary.set_uploaded_stored_bytes(sink.uploaded_stored_bytes_);
    summary.set_manifest_size(manifest.size());
    for (const auto& n : result.notes) summary.add_notes(n);
    progress.files.store(result.stats.files_read);
    return ok_status();
  }
};

struct RestoreJob {
  Progress progress;
  v1::RestoreRequest req;
  StateConfig config;
  Status status;
  v1::RestoreDone summary;

  void run() {
    status = restore();
    progress.done.store(true);
  }

  Status restore_whole(const state::StateKeys& keys, const state::BoxLocation& location);

  Status restore() {
    ASSIGN_OR_RETURN(state::StateKeys keys, keys_of(req.access()));
    state::BoxLocation location{req.access().user(), req.access().box()};
    RETURN_IF_ERROR(state::validate_location(location));
    if (req.whole()) return restore_whole(keys, location);
    RETURN_IF_ERROR(check_restore_target(req.target()));
    if (req.paths().empty()) return invalid_argument("paths: at least one is required");
    std::vector<std::string> paths(req.paths().begin(), req.paths().end());
    for (size_t i = 0; i < paths.size(); ++i) {
      Status st = state::validate_path(paths[i]);
      if (!st.ok()) return st.with_prefix(fmt::format("paths[{}]", i));
    }
    JobHttp http(config.door_socket, req.access().ticket());
    ASSIGN_OR_RETURN(state::Manifest manifest,
                     fetch_manifest(http, keys, location, req.snapshot_id(), req.manifest_url()));
    ASSIGN_OR_RETURN(auto selected, state::select_entries(manifest, paths));
    if (selected.empty()) return not_found("paths: nothing in the snapshot lies within them");
    std::set<state::ChunkId> needed;
    for (const auto* e : selected)
      for (const auto& c : e->chunks) needed.insert(c.id);
    std::vector<state::ChunkId> ids(needed.begin(), needed.end());
    ASSIGN_OR_RETURN(auto by_hex, ask_urls(http, "get", ids));
    std::map<std::string, std::string> by_key;
    for (const auto& id : ids) {
      auto it = by_hex.find(id.hex());
      if (it != by_hex.end()) by_key[state::chunk_key(location.user, id)] = it->second;
    }
    UrlStore store(http, std::move(by_key), progress);

    // ~/Restored/<target>, or <target>-2, -3, ... when taken.
    std::string dir = config.home + "/Restored";
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return internal_error(fmt::format("create {}: {}", dir, std::strerror(errno)));
    std::string target;
    for (int n = 1; n <= 1000; ++n) {
      std::string name = n == 1 ? req.target() : fmt::format("{}-{}", req.target(), n);
      struct stat st {};
      if (::lstat((dir + "/" + name).c_str(), &st) != 0 && errno == ENOENT) {
        target = dir + "/" + name;
        break;
      }
    }
    if (target.empty()) return already_exists(fmt::format("target: {} is taken", req.target()));
    state::RestoreOptions options;
    options.paths = paths;
    options.target = target;
    options.restore_owners = false;  // the user's own files, in the user's home
    options.progress = [this](uint64_t files, uint64_t bytes) {
      progress.files.store(files);
      progress.bytes.store(bytes);
    };
    ASSIGN_OR_RETURN(state::RestoreResult done,
                     state::restore_snapshot(store, keys, location.user, manifest, options,
                                             crypto::system_random()));
    summary.set_path(target);
    summary.set_files(done.files);
    summary.set_dirs(done.dirs);
    summary.set_symlinks(done.symlinks);
    summary.set_bytes(done.bytes);
    summary.set_chunks(done.chunks_fetched);
    return ok_status();
  }
};

// The whole snapshot back into the roots (a box whose files were lost): each root's entries
// are restored into <root>/.cb-restore-whole (through restore_snapshot()'s own temporary
// folder), then moved up into the root one by one with RENAME_NOREPLACE (the roots are mount
// points in an isolated box, so they cannot be swapped whole). A name already in the root is
// left where it is and reported.
Status restore_whole_root(JobHttp&, state::Store& store, const state::StateKeys& keys,
                          const std::string& user, const state::Manifest& manifest,
                          const std::string& name, const std::string& dir,
                          std::function<void(uint64_t, uint64_t)> progress,
                          v1::RestoreDone& summary) {
  std::vector<std::string> scope = {name};
  ASSIGN_OR_RETURN(auto selected, state::select_entries(manifest, scope));
  bool any_below = false;
  for (const auto* e : selected) any_below = any_below || e->path != name;
  if (!any_below) return ok_status();
  const std::string staging = dir + "/.cb-restore-whole";
  state::RestoreOptions options;
  options.paths = scope;
  options.strip = name;
  options.target = staging;
  options.restore_owners = false;
  options.progress = std::move(progress);
  ASSIGN_OR_RETURN(
      state::RestoreResult done,
      state::restore_snapshot(store, keys, user, manifest, options, crypto::system_random()));
  summary.set_files(summary.files() + done.files);
  summary.set_dirs(summary.dirs() + done.dirs);
  summary.set_symlinks(summary.symlinks() + done.symlinks);
  summary.set_bytes(summary.bytes() + done.bytes);
  summary.set_chunks(summary.chunks() + done.chunks_fetched);
  std::error_code ec;
  std::vector<std::string> kept;
  for (const auto& child : std::filesystem::directory_iterator(staging, ec)) {
    std::string leaf = child.path().filename().string();
    std::string to = dir + "/" + leaf;
    if (::renameat2(AT_FDCWD, child.path().c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0)
      kept.push_back(leaf);
  }
  if (ec) return internal_error(fmt::format("list {}: {}", staging, ec.message()));
  if (!kept.empty()) {
    log::warn("whole restore: names already present were left in place",
              {{"dir", staging}, {"count", static_cast<int64_t>(kept.size())}});
    return ok_status();
  }
  std::filesystem::remove(staging, ec);
  return ok_status();
}

Status RestoreJob::restore_whole(const state::StateKeys& keys, const state::BoxLocation& location) {
  if (!req.paths().empty() || !req.target().empty())
    return invalid_argument("whole: paths and target must be empty");
  JobHttp http(config.door_socket, req.access().ticket());
  ASSIGN_OR_RETURN(state::Manifest manifest,
                   fetch_manifest(http, keys, location, req.snapshot_id(), req.manifest_url()));
  std::vector<state::ChunkId> ids = state::referenced_chunks(manifest);
  ASSIGN_OR_RETURN(auto by_hex, ask_urls(http, "get", ids));
  std::map<std::string, std::string> by_key;
  for (const auto& id : ids) {
    auto it = by_hex.find(id.hex());
    if (it != by_hex.end()) by_key[state::chunk_key(location.user, id)] = it->second;
  }
  UrlStore store(http, std::move(by_key), progress);
  auto on_progress = [this](uint64_t files, uint64_t bytes) {
    progress.files.store(files);
    progress.bytes.store(bytes);
  };
  RETURN_IF_ERROR(restore_whole_root(http, store, keys, location.user, manifest, "home/user",
                                     config.home, on_progress, summary));
  RETURN_IF_ERROR(restore_whole_root(http, store, keys, location.user, manifest, "workspace",
                                     config.workspace, on_progress, summary));
  return ok_status();
}

// Runs |job| on a thread of its own and sends its progress until it is done. The job is
// shared with the thread, so a handler that returns early (the caller went away) leaves the
// thread nothing dangling. Returns false if a progress write failed (the job is told to stop).
template <typename Job, typename Resp>
asio::awaitable<bool> run_job(const std::shared_ptr<Job>& job, grpc::ServerWriter<Resp>& writer) {
  std::thread([job] { job->run(); }).detach();
  auto exec = co_await asio::this_coro::executor;
  uint64_t last_sent = ~uint64_t{0};
  bool writing = true;
  while (!job->progress.done.load()) {
    net::Timer timer(exec, std::chrono::milliseconds(250));
    co_await timer.async_wait();
    if (!writing) continue;
    v1::TransferProgress p = job->progress.snapshot();
    uint64_t key = p.bytes() + p.chunks() + p.files();
    if (key == last_sent) continue;
    last_sent = key;
    Resp resp;
    *resp.mutable_progress() = std::move(p);
    Status st = co_await writer.write(resp);
    if (!st.ok()) {
      job->progress.cancel.store(true);
      writing = false;
    }
  }
  // The final counts, so a short job reports its progress at least once.
  if (writing) {
    v1::TransferProgress p = job->progress.snapshot();
    if (p.bytes() + p.chunks() + p.files() != last_sent) {
      Resp resp;
      *resp.mutable_progress() = std::move(p);
      Status st = co_await writer.write(resp);
      writing = st.ok();
    }
  }
  co_return writing;
}

}  // namespace

StateConfig default_state_config(std::string workspace) {
  StateConfig c;
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') c.home = home;
  c.workspace = std::move(workspace);
  if (const char* ws = std::getenv("COCOONBOX_WORKSPACE"); ws != nullptr && ws[0] == '/')
    c.workspace = ws;
  if (const char* run = std::getenv("COCOONBOX_RUN_DIR"); run != nullptr && run[0] == '/')
    c.door_socket = std::string(run) + "/model.sock";
  return c;
}

Status check_restore_target(std::string_view target) {
  if (target.empty() || target.size() > 255)
    return invalid_argument("target: must be one folder name of 1..255 bytes");
  if (target.find('/') != std::string_view::npos)
    return invalid_argument(
        fmt::format("target: {:?} contains '/': it must be one folder name", std::string(target)));
  if (target.find('\0') != std::string_view::npos)
    return invalid_argument("target: contains a NUL byte");
  if (target == "." || target == "..")
    return invalid_argument(fmt::format("target: {:?} is not a folder name", std::string(target)));
  return ok_status();
}

asio::awaitable<Status> StateService::Save(grpc::CallContext&, v1::SaveRequest&& req,
                                           grpc::ServerWriter<v1::SaveResponse>& writer) {
  auto job = std::make_shared<SaveJob>();
  job->req = std::move(req);
  job->config = config_;
  log::info("state save",
            {{"box", job->req.access().box()}, {"parent", job->req.parent_snapshot_id()}});
  bool alive = co_await run_job(job, writer);
  if (!alive) co_return cancelled("the caller went away");
  if (!job->status.ok()) {
    log::warn("state save failed", {{"error", job->status.to_string()}});
    co_return job->status;
  }
  for (size_t off = 0; off < job->manifest.size(); off += kManifestPart) {
    v1::SaveResponse part;
    part.set_manifest_part(job->manifest.substr(off, kManifestPart));
    Status st = co_await writer.write(part);
    if (!st.ok()) co_return st;
  }
  v1::SaveResponse done;
  *done.mutable_done() = job->summary;
  Status st = co_await writer.write(done);
  co_return st;
}

asio::awaitable<Status> StateService::Restore(grpc::CallContext&, v1::RestoreRequest&& req,
                                              grpc::ServerWriter<v1::RestoreResponse>& writer) {
  auto job = std::make_shared<RestoreJob>();
  job->req = std::move(req);
  job->config = config_;
  log::info("state restore",
            {{"box", job->req.access().box()}, {"snapshot", job->req.snapshot_id()}});
  bool alive = co_await run_job(job, writer);
  if (!alive) co_return cancelled("the caller went away");
  if (!job->status.ok()) {
    log::warn("state restore failed", {{"error", job->status.to_string()}});
    co_return job->status;
  }
  v1::RestoreResponse done;
  *done.mutable_done() = job->summary;
  Status st = co_await writer.write(done);
  co_return st;
}

}  // namespace cb::agent
