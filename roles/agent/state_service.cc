#include "roles/agent/state_service.h"

#include "base/check.h"
#include "base/log.h"
#include "crypto/bytes.h"
#include "crypto/keys.h"
#include "crypto/random.h"
#include "db/database.h"
#include "http/http1_client.h"
#include "net/tls.h"
#include "state/chunk.h"
#include "state/chunk_batch.h"
#include "state/manifest.h"
#include "state/restore.h"
#include "state/save.h"
#include "state/scanner.h"
#include "state/snapshot.h"

#include <asio/ssl/context.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdio.h>
#include <sys/stat.h>
#include <thread>
#include <unordered_set>
#include <vector>

namespace cb::agent {

namespace v1 = ::cocoonbox::agent::v1;
using json = nlohmann::json;

namespace {

constexpr std::string_view kTicketHeader = "x-cocoonbox-state-ticket";
constexpr std::string_view kUrlsPath = "/cocoonbox.state/v1/urls";
// The door's chunk batch routes (state/chunk_batch.h), when its answers say "batch": true.
constexpr std::string_view kBatchGetPath = "/cocoonbox.state/v1/chunks/get";
constexpr std::string_view kBatchPutPath = "/cocoonbox.state/v1/chunks/put";
// Sealed chunks sent in one batch request by a save's uploading thread: about 1 MiB.
constexpr size_t kChunksPerPut = 16;
// Chunks asked about per door request (seed §25.4: pages of 2048).
constexpr size_t kIdsPerRequest = 2048;
// A save keeps at most this many plaintext bytes of new chunks before it asks the door.
constexpr size_t kPendingBytes = 16u << 20;
// A save's scan waits while this many plaintext bytes of new chunks are asked about or being
// uploaded.
constexpr uint64_t kMaxHandedOff = 32u << 20;
// Chunks sealed and uploaded at once by a save, each thread on its own connection.
constexpr size_t kUploaders = 3;
constexpr size_t kManifestPart = 1u << 20;
constexpr auto kRequestTimeout = std::chrono::minutes(2);
// The manifest root of agent.db's copy (quiesced saves): "agent/agent.db".
constexpr std::string_view kAgentRoot = "agent";
constexpr std::string_view kAgentCopy = "agent.db";

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

}  // namespace

Result<ObjectUrl> parse_object_url(std::string_view url) {
  ObjectUrl out;
  std::string_view rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    out.tls = true;
    rest = url.substr(8);
  } else {
    return invalid_argument("unsupported URL scheme (want http:// or https://)");
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (authority.empty() || authority.find('@') != std::string_view::npos)
    return invalid_argument("URL: bad host");
  out.port = out.tls ? 443 : 80;
  std::string_view host = authority;
  size_t colon = authority.rfind(':');
  size_t bracket = authority.rfind(']');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    host = authority.substr(0, colon);
    std::string_view digits = authority.substr(colon + 1);
    if (digits.empty() || digits.size() > 5 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      return invalid_argument("URL: bad port");
    unsigned long port = std::strtoul(std::string(digits).c_str(), nullptr, 10);
    if (port == 0 || port > 65535) return invalid_argument("URL: bad port");
    out.port = static_cast<uint16_t>(port);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) return invalid_argument("URL: bad host");
  out.host = std::string(host);
  return out;
}

namespace {

// HTTP/1.1 from a job's thread: a private io_context run for each request, one kept-alive
// connection to the door socket, and one to the host of absolute http:// or https:// URLs
// (an S3 store's presigned URLs), kept alive while the server allows it.
class JobHttp {
 public:
  // |ca_pem|: roots trusted for https URLs besides the system's (StateAccess.store_ca_pem);
  // |verify_peer| false only when the api's store URL says verify=0 (store_skip_verify).
  JobHttp(std::string door_socket, std::string ticket, std::string ca_pem = {},
          bool verify_peer = true)
      : door_socket_(std::move(door_socket)),
        ticket_(std::move(ticket)),
        ca_pem_(std::move(ca_pem)),
        verify_peer_(verify_peer) {}
  // The client of a call with |access|.
  JobHttp(std::string door_socket, const v1::StateAccess& access)
      : JobHttp(std::move(door_socket), access.ticket(), access.store_ca_pem(),
                !access.store_skip_verify()) {}

  // Another client for the same door, ticket and trust, with its own connections: a JobHttp
  // serves one thread, so each uploading thread has its own.
  std::unique_ptr<JobHttp> another() const {
    return std::make_unique<JobHttp>(door_socket_, ticket_, ca_pem_, verify_peer_);
  }

  // |url| is a door target ("/cocoonbox.state/...") or "http(s)://host[:port]/path".
  Result<std::string> request(const std::string& method, const std::string& url,
                              std::string_view body, std::string_view what) {
    return request_pieces(method, url, std::span<const std::string_view>(&body, 1), what);
  }
  // As request(), the body the concatenation of |pieces| (kept valid by the caller), sent
  // without gathering it into one buffer first (Http1Client::request_pieces()).
  Result<std::string> request_pieces(const std::string& method, const std::string& url,
                                     std::span<const std::string_view> pieces,
                                     std::string_view what) {
    Result<std::string> out = internal_error("request did not run");
    auto task = [&]() -> asio::awaitable<void> {
      out = co_await exchange(method, url, pieces, what);
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
  // |pieces| stay valid for a second attempt on a fresh connection.
  asio::awaitable<Result<std::string>> exchange(const std::string& method, const std::string& url,
                                                std::span<const std::string_view> pieces,
                                                std::string_view what) {
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
        auto r = co_await door_->request_pieces(method, url, headers, pieces, deadline);
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
    auto parsed = parse_object_url(url);
    if (!parsed.ok()) co_return parsed.status().with_prefix(std::string(what));
    const std::string key =
        fmt::format("{}{}:{}", parsed->tls ? "https://" : "http://", parsed->host, parsed->port);
    if (parsed->tls && !tls_) {
      net::TlsClientOptions to;  // the system's roots
      to.alpn = {"http/1.1"};
      to.verify_peer = verify_peer_;
      auto ctx = net::TlsContext::client(to);
      if (!ctx.ok()) co_return ctx.status().with_prefix(std::string(what));
      if (!ca_pem_.empty()) {
        std::error_code ec;
        (*ctx)->native().add_certificate_authority(asio::buffer(ca_pem_), ec);
        if (ec)
          co_return invalid_argument(
              fmt::format("{}: access.store_ca_pem: {}", what, ec.message()));
      }
      tls_ = std::move(*ctx);
    }
    // The URL is the credential: no ticket, no other header (a presigned URL signs only host).
    http::Headers none;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool fresh = !remote_ || !remote_->reusable() || remote_key_ != key;
      if (fresh) {
        remote_.reset();
        http::Http1DialOptions o;
        o.host = parsed->host;
        o.port = parsed->port;
        if (parsed->tls) o.tls = tls_;
        auto c = co_await http::dial_http1(io_.get_executor(), o, deadline);
        if (!c.ok()) co_return c.status().with_prefix(std::string(what));
        remote_ = std::move(*c);
        remote_key_ = key;
      }
      auto r = co_await remote_->request_pieces(method, parsed->target, none, pieces, deadline);
      if (!r.ok()) {
        remote_.reset();
        if (!fresh && attempt == 0 && r.status().code() == Code::kUnavailable)
          continue;  // a kept-alive connection the server had closed
        co_return r.status().with_prefix(std::string(what));
      }
      if (r->status / 100 != 2) co_return http_status(r->status, what, r->body);
      co_return std::move(r->body);
    }
    co_return unavailable(fmt::format("{}: {} unreachable", what, key));
  }

  asio::io_context io_;
  std::string door_socket_;
  std::string ticket_;
  std::string ca_pem_;
  bool verify_peer_ = true;
  std::unique_ptr<http::Http1Client> door_;
  std::shared_ptr<net::TlsContext> tls_;
  std::unique_ptr<http::Http1Client> remote_;  // to remote_key_
  std::string remote_key_;
};

struct DoorUrls {
  // hex id -> URL; "" for a put's missing id from a batch door, which kBatchPutPath takes.
  std::map<std::string, std::string> urls;
  // The door takes chunk batches (an api with the filesystem store): the chunks of the URLs
  // may go many to a request instead (kBatchGetPath, kBatchPutPath).
  bool batch = false;
};

// Asks the door for URLs of |ids| ("put": those the store lacks; "get": all of them).
// A "get" asks without URLs first ("urls": false): a door that takes batches then answers
// none, only checks the first page's scope and says "batch", and the restore fetches through
// kBatchGetPath, which checks every id; an older api ignores the field and answers URLs.
// A "put" asks without URLs too: a door that takes batches answers the ids the store lacks
// as "missing" (their URLs here are empty) and takes them through kBatchPutPath.
Result<DoorUrls> ask_urls(JobHttp& http, std::string_view op,
                          const std::vector<state::ChunkId>& ids) {
  DoorUrls out;
  out.batch = true;
  std::map<std::string, std::string>& urls = out.urls;
  if (ids.empty()) out.batch = false;
  bool missing_listed = false;  // some ids came without a URL
  for (size_t i = 0; i < ids.size(); i += kIdsPerRequest) {
    json req{{"op", std::string(op)}, {"ids", json::array()}};
    // Without URLs: a get's first request, and every put's (the door answers the missing ids).
    if (op == "put" || (op == "get" && i == 0)) req["urls"] = false;
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
    // An older api does not say it; every answer of the call must.
    const auto batch = resp.find("batch");
    if (batch == resp.end() || !batch->is_boolean() || !batch->get<bool>()) out.batch = false;
    // A put's missing ids without URLs (an older api, or one with an S3 store, signs URLs).
    if (const auto missing = resp.find("missing"); missing != resp.end()) {
      if (!missing->is_array()) return unavailable("chunk urls: \"missing\" is not an array");
      for (const auto& hex : *missing) {
        if (!hex.is_string()) return unavailable("chunk urls: a missing id is not a string");
        urls[hex.get<std::string>()];  // no URL: the batch route takes it
        missing_listed = true;
      }
    }
    if (op == "get" && i == 0 && out.batch) {
      urls.clear();  // none were asked for; the batch route checks every id itself
      return out;
    }
  }
  // Every answer must say "batch" for ids without a URL to have a way to the store.
  if (missing_listed && !out.batch)
    return unavailable("chunk urls: the door listed missing ids without the batch route");
  return out;
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

// The save's ChunkSink, a pipeline with no barrier between batches. New chunks wait in
// memory until kPendingBytes of them (or kIdsPerRequest) are pending, sealed by the scanning
// thread while the store lacks most of them, else as plaintext; then an asking thread asks
// the door which of them the store lacks, and kUploaders threads seal those still unsealed
// and upload them, kChunksPerPut per request with a door that takes batches, else one PUT
// per chunk to its URL. Each thread has its own connection. add() may run on several scanning
// threads at once (ScanOptions::read_threads), and waits while kMaxHandedOff bytes of chunks are
// asked about or being uploaded, so a save holds at most about kMaxHandedOff + 2 * kPendingBytes of
// them.
//
// Before (until 2026-12-01) the scan handed a batch to an uploader thread and waited for the
// one before it, and the scan was one thread: both cores were idle 17 % of a first save of
// the state bench's tree through a box, at each batch's tail and while the scan hashed.
class UploadSink final : public state::ChunkSink {
 public:
  UploadSink(JobHttp& http, const state::StateKeys& keys, Progress& progress)
      : http_(http), keys_(keys), progress_(progress) {}
  ~UploadSink() override { stop(/*abort=*/true); }

  // REQUIRES: before the scan.
  void add_known(const state::Manifest& m) {
    for (const auto& e : m.entries)
      for (const auto& c : e.chunks) known_.insert(c.id);
  }

  Status add(const state::ChunkId& id, std::span<const uint8_t> plaintext) override {
    if (progress_.cancel.load()) return cancelled("the caller went away");
    progress_.bytes += plaintext.size();
    {
      std::lock_guard lock(mu_);
      if (!first_.ok()) return first_;
      if (!known_.insert(id).second) return ok_status();
    }
    // Outside the lock, which the other scanning threads and the uploaders share. Sealed here
    // (seal_early_), by a reading thread (the one that read the chunk, or one with no file of
    // its own that helps it), straight from the reading buffer while it is in the caches: an
    // uploading thread sealed a copy cold, and the engine's save spent 8 % more CPU that way
    // (docs/benchmarks.md, "state: a save seals where it reads, and publishes off the reading
    // threads").
    Pending chunk{id, {}, plaintext.size(), seal_early_.load(std::memory_order_relaxed)};
    if (chunk.sealed) {
      chunk.data = state::seal_chunk(keys_, id, plaintext);
    } else {
      chunk.data.assign(reinterpret_cast<const char*>(plaintext.data()), plaintext.size());
    }
    std::unique_lock lock(mu_);
    room_cv_.wait(lock, [&] { return handed_off_ < kMaxHandedOff || !first_.ok(); });
    if (!first_.ok()) return first_;
    pending_.push_back(std::move(chunk));
    pending_bytes_ += plaintext.size();
    if (pending_bytes_ >= kPendingBytes || pending_.size() >= kIdsPerRequest) hand_off(lock);
    return ok_status();
  }

  // Uploads what is pending and waits for every upload. Errors: the first failed one's.
  Status flush() {
    {
      std::unique_lock lock(mu_);
      if (!pending_.empty()) hand_off(lock);
    }
    stop(/*abort=*/false);
    std::lock_guard lock(mu_);
    return first_;
  }

  // Read after flush().
  uint64_t uploaded_chunks_ = 0;
  uint64_t uploaded_bytes_ = 0;
  uint64_t uploaded_stored_bytes_ = 0;

 private:
  struct Pending {
    state::ChunkId id;
    std::string data;  // the sealed chunk if |sealed|, else its plaintext
    size_t size = 0;   // of the plaintext
    bool sealed = false;
  };
  using Batch = std::vector<Pending>;
  // Chunks of one batch that go in one request: kChunksPerPut of them to the batch route, or
  // one to its URL.
  struct Group {
    std::shared_ptr<const Batch> batch;                          // keeps the chunks
    std::vector<std::pair<const Pending*, std::string>> chunks;  // and their URLs
    bool batch_route = false;
    uint64_t bytes = 0;  // plaintext
  };

  // REQUIRES: |lock| holds mu_. Queues the pending chunks for the asking thread, starting
  // the threads on the first call.
  void hand_off(std::unique_lock<std::mutex>& lock) {
    handed_off_ += pending_bytes_;
    asks_.push_back(std::make_shared<const Batch>(std::move(pending_)));
    pending_.clear();
    pending_bytes_ = 0;
    if (threads_.empty()) {
      threads_.emplace_back([this, client = http_.another()] { ask(*client); });
      for (size_t t = 0; t < kUploaders; ++t)
        threads_.emplace_back([this, client = http_.another()] { upload(*client); });
    }
    lock.unlock();
    work_cv_.notify_all();
    lock.lock();
  }

  // Lets the threads end once their queues are empty (|abort|: at once) and joins them.
  void stop(bool abort) {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      if (abort && first_.ok()) first_ = cancelled("the save stopped");
    }
    work_cv_.notify_all();
    room_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // REQUIRES: mu_ held.
  void fail(Status st) {
    if (first_.ok()) first_ = std::move(st);
    work_cv_.notify_all();
    room_cv_.notify_all();
  }

  // The asking thread: which chunks of each batch the store lacks, as groups to upload.
  void ask(JobHttp& http) {
    for (;;) {
      std::shared_ptr<const Batch> batch;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return !asks_.empty() || closing_ || !first_.ok(); });
        if (!first_.ok() || asks_.empty()) {
          asked_all_ = true;
          work_cv_.notify_all();
          return;
        }
        batch = std::move(asks_.front());
        asks_.pop_front();
      }
      std::vector<state::ChunkId> ids;
      ids.reserve(batch->size());
      for (const Pending& p : *batch) ids.push_back(p.id);
      auto door = ask_urls(http, "put", ids);
      std::lock_guard lock(mu_);
      if (!door.ok()) {
        fail(door.status());
        continue;  // ends above
      }
      const size_t per_group = door->batch ? kChunksPerPut : 1;
      Group group;
      uint64_t skipped = 0, asked = 0;
      for (const Pending& p : *batch) {
        asked += p.size;
        auto it = door->urls.find(p.id.hex());
        if (it == door->urls.end()) {  // the store has it (another box saved it)
          skipped += p.size;
          continue;
        }
        group.chunks.emplace_back(&p, std::move(it->second));
        group.bytes += p.size;
        if (group.chunks.size() == per_group) {
          group.batch = batch;
          group.batch_route = door->batch;
          groups_.push_back(std::move(group));
          group = Group();
        }
      }
      if (!group.chunks.empty()) {
        group.batch = batch;
        group.batch_route = door->batch;
        groups_.push_back(std::move(group));
      }
      handed_off_ -= skipped;
      seal_early_.store(skipped * 2 <= asked, std::memory_order_relaxed);
      work_cv_.notify_all();
      room_cv_.notify_all();
    }
  }

  // An uploading thread: seals each group's chunks and sends them in one request.
  void upload(JobHttp& http) {
    for (;;) {
      Group group;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return !groups_.empty() || asked_all_ || !first_.ok(); });
        if (!first_.ok() || groups_.empty()) return;
        group = std::move(groups_.front());
        groups_.pop_front();
      }
      if (progress_.cancel.load()) {
        std::lock_guard lock(mu_);
        fail(cancelled("the caller went away"));
        return;
      }
      // The chunks sealed here (the others were sealed by add()), and for the batch route
      // each chunk's item head: the request goes out as pieces, each chunk from where it is
      // (a 1 MiB body gathered first, then copied into the request, cost the save two more
      // passes over every byte it uploads).
      // Neither the vectors nor |heads| grow past their reservations: the pieces point into
      // them.
      std::vector<std::string> sealed_here;
      sealed_here.reserve(group.chunks.size());
      std::string heads;
      heads.reserve(group.chunks.size() * state::kPutItemHeadSize);
      std::vector<std::string_view> pieces;
      pieces.reserve(2 * group.chunks.size());
      uint64_t sealed_size = 0;
      for (const auto& [p, url] : group.chunks) {
        if (!p->sealed) {
          const auto* data = reinterpret_cast<const uint8_t*>(p->data.data());
          sealed_here.push_back(state::seal_chunk(keys_, p->id, {data, p->size}));
        }
        const std::string_view sealed = p->sealed ? std::string_view(p->data) : sealed_here.back();
        sealed_size += sealed.size();
        if (group.batch_route) {
          state::append_put_item_head(heads, p->id, sealed.size());
          pieces.push_back(std::string_view(heads).substr(heads.size() - state::kPutItemHeadSize));
        }
        pieces.push_back(sealed);
      }
      CB_CHECK(group.batch_route || group.chunks.size() == 1);  // ask(): one chunk per URL
      const Status sent =
          group.batch_route
              ? http.request_pieces("POST", std::string(kBatchPutPath), pieces, "chunk upload")
                    .status()
              : http.request_pieces("PUT", group.chunks.front().second, pieces, "chunk upload")
                    .status();
      std::lock_guard lock(mu_);
      if (!sent.ok()) {
        fail(sent);
        return;
      }
      uploaded_chunks_ += group.chunks.size();
      uploaded_bytes_ += group.bytes;
      uploaded_stored_bytes_ += sealed_size;
      progress_.chunks += group.chunks.size();
      progress_.chunk_bytes += sealed_size;
      handed_off_ -= group.bytes;
      room_cv_.notify_all();
    }
  }

  JobHttp& http_;  // only to make the threads' clients
  const state::StateKeys& keys_;
  Progress& progress_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // a batch to ask about, a group to upload, or the end
  std::condition_variable room_cv_;  // handed_off_ went down, or an error
  // Everything below is guarded by mu_.
  std::unordered_set<state::ChunkId, state::ChunkIdHash> known_;
  std::vector<Pending> pending_;
  size_t pending_bytes_ = 0;
  uint64_t handed_off_ = 0;  // plaintext bytes asked about or being uploaded
  std::deque<std::shared_ptr<const Batch>> asks_;
  std::deque<Group> groups_;
  bool closing_ = false;    // no more batches come
  bool asked_all_ = false;  // the asking thread ended: no more groups come
  Status first_ = ok_status();
  std::vector<std::thread> threads_;  // the asking thread, then the uploading ones
  // Whether add() seals: the store lacked at least half the bytes of the last batch asked
  // about (none asked yet: a save's chunks are new files' until the store says otherwise).
  std::atomic<bool> seal_early_{true};
};

// A read-only Store over signed GET URLs: exactly the chunks the door handed out, of
// |user|. When the door takes batches, get_many() asks for many of them in one request.
// restore_snapshot() fetches on several threads. Each thread gets a client of its own
// (JobHttp::another()) and keeps it, so no client is used from two threads, not even in
// turn: one client shared under a lock crashed on a freed Http1Client resumed on a fetch
// thread (9c41778; a JobHttp runs its io_context on whichever thread calls it).
class UrlStore final : public state::Store {
 public:
  UrlStore(JobHttp& http, std::string_view user, DoorUrls door, Progress& progress)
      : http_(http), user_(user), batch_(door.batch), progress_(progress) {
    for (auto& [hex, url] : door.urls) {
      auto id = state::ChunkId::from_hex(hex);
      if (id.ok()) urls_.emplace(state::chunk_key(user, *id), std::move(url));
    }
  }

  Status put(std::string_view, std::string_view) override {
    return permission_denied("restore: the store is read-only");
  }
  Result<std::string> get(std::string_view key) override {
    if (progress_.cancel.load()) return cancelled("the caller went away");
    if (batch_) {
      const std::string one[] = {std::string(key)};
      return std::move(get_batch(one).front());
    }
    auto it = urls_.find(key);
    if (it == urls_.end()) return not_found(fmt::format("{}: no URL was given for it", key));
    auto r = client().request("GET", it->second, {}, "chunk");
    if (r.ok()) {
      ++progress_.chunks;
      progress_.chunk_bytes += r->size();
    }
    return r;
  }
  // One request per kMaxBatchChunks keys with a door that takes batches; else get() each.
  std::vector<Result<std::string>> get_many(std::span<const std::string> keys) override {
    if (!batch_) return state::Store::get_many(keys);
    std::vector<Result<std::string>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); i += state::kMaxBatchChunks) {
      auto part = get_batch(keys.subspan(i, std::min(state::kMaxBatchChunks, keys.size() - i)));
      for (auto& r : part) out.push_back(std::move(r));
    }
    return out;
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
  JobHttp& client() {
    std::lock_guard lock(mu_);
    std::unique_ptr<JobHttp>& c = clients_[std::this_thread::get_id()];
    if (!c) c = http_.another();
    return *c;
  }

  // |keys|' objects in one request; a key that is not a chunk of the user is kNotFound
  // without asking, and a failed request or a malformed answer is the error of each key
  // asked for. The door checks that each chunk is the restore's.
  std::vector<Result<std::string>> get_batch(std::span<const std::string> keys) {
    std::vector<Result<std::string>> out(keys.size(), Result<std::string>(internal_error("unset")));
    std::vector<state::ChunkId> ids;
    std::vector<size_t> asked;  // index in |keys| of each id
    for (size_t i = 0; i < keys.size(); ++i) {
      auto id = state::chunk_id_of(user_, keys[i]);
      if (!id.ok()) {
        out[i] = not_found(fmt::format("{}: not a chunk of this restore", keys[i]));
        continue;
      }
      ids.push_back(*id);
      asked.push_back(i);
    }
    // A door answers the first ids of a request (up to its answer's size limit): ask again
    // for the rest until every id has its item.
    for (size_t done = 0; done < ids.size();) {
      Result<std::vector<Result<std::string>>> items = cancelled("the caller went away");
      if (!progress_.cancel.load()) {
        const auto rest = std::span<const state::ChunkId>(ids).subspan(done);
        auto body = client().request("POST", std::string(kBatchGetPath),
                                     state::encode_batch_ids(rest), "chunk batch");
        items = body.ok() ? state::decode_batch_items(*body, rest.size())
                          : Result<std::vector<Result<std::string>>>(body.status());
      }
      if (!items.ok()) {
        for (size_t j = done; j < ids.size(); ++j) out[asked[j]] = items.status();
        break;
      }
      for (Result<std::string>& item : *items) {
        if (item.ok()) {
          ++progress_.chunks;
          progress_.chunk_bytes += item->size();
        }
        out[asked[done++]] = std::move(item);
      }
    }
    return out;
  }

  JobHttp& http_;  // only to make the threads' clients
  const std::string user_;
  const bool batch_;
  std::map<std::string, std::string, std::less<>> urls_;  // object key -> URL (unless batch_)
  Progress& progress_;
  std::mutex mu_;
  std::map<std::thread::id, std::unique_ptr<JobHttp>> clients_;  // guarded by mu_
};

// Options for a restore through a UrlStore: the engine's fetch threads, each on its own
// connection. With one (when every fetch shared one client) a full restore of the state
// bench's tree through a box took 5.0 s, restic 4.3 s.
state::RestoreOptions url_restore_options() { return state::RestoreOptions(); }

struct SaveJob {
  Progress progress;
  v1::SaveRequest req;
  StateConfig config;
  bool quiesce = false;  // turns have ended: copy agent.db first
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
    JobHttp http(config.door_socket, req.access());
    std::optional<state::Manifest> parent;
    if (!req.parent_snapshot_id().empty()) {
      auto m =
          fetch_manifest(http, keys, location, req.parent_snapshot_id(), req.parent_manifest_url());
      if (!m.ok()) return m.status().with_prefix(std::string("parent manifest"));
      parent = std::move(*m);
    }
    bool copied = false;
    if (quiesce && !config.agent_db.empty() && !config.agent_copy_dir.empty()) {
      Status st = copy_agent_db(config.agent_db, config.agent_copy_dir);
      if (!st.ok()) return st.with_prefix(std::string("quiesced save: agent.db"));
      copied = true;
    }
    state::ScanOptions scan;
    scan.roots = {{config.home, "home/user"}, {config.workspace, "workspace"}};
    // As save_snapshot(): files read, chunked and hashed on a thread per core.
    scan.read_threads =
        std::clamp(int(std::thread::hardware_concurrency()), 1, state::kMaxDefaultReadThreads);
    // The last consistent copy of agent.db goes with every save once one was taken.
    struct stat copy_dir {};
    if (!config.agent_copy_dir.empty() && ::stat(config.agent_copy_dir.c_str(), &copy_dir) == 0 &&
        S_ISDIR(copy_dir.st_mode))
      scan.roots.push_back({config.agent_copy_dir, std::string(kAgentRoot)});
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
    summary.set_quiesced(copied);
    for (const auto& n : result.notes) summary.add_notes(n);
    progress.files.store(result.stats.files_read);
    return ok_status();
  }
};

// Who restored user files belong to (seed §3's privilege split): an agent that is root is
// not the user, so it gives them to the owner of the root they land in (the desktop user);
// unset (the caller's) when the agent is not root or that root is root's.
std::optional<std::pair<uint32_t, uint32_t>> user_files_owner(const std::string& root) {
  struct stat st {};
  if (::geteuid() != 0 || ::stat(root.c_str(), &st) != 0 || st.st_uid == 0) return std::nullopt;
  return std::make_pair(static_cast<uint32_t>(st.st_uid), static_cast<uint32_t>(st.st_gid));
}

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
    JobHttp http(config.door_socket, req.access());
    ASSIGN_OR_RETURN(state::Manifest manifest,
                     fetch_manifest(http, keys, location, req.snapshot_id(), req.manifest_url()));
    ASSIGN_OR_RETURN(auto selected, state::select_entries(manifest, paths));
    if (selected.empty()) return not_found("paths: nothing in the snapshot lies within them");
    std::set<state::ChunkId> needed;
    for (const auto* e : selected)
      for (const auto& c : e->chunks) needed.insert(c.id);
    std::vector<state::ChunkId> ids(needed.begin(), needed.end());
    ASSIGN_OR_RETURN(DoorUrls door, ask_urls(http, "get", ids));
    UrlStore store(http, location.user, std::move(door), progress);

    // ~/Restored/<target>, or <target>-2, -3, ... when taken.
    std::string dir = config.home + "/Restored";
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return internal_error(fmt::format("create {}: {}", dir, std::strerror(errno)));
    const auto owner = user_files_owner(config.home);
    if (owner && ::lchown(dir.c_str(), owner->first, owner->second) != 0)
      return internal_error(fmt::format("chown {}: {}", dir, std::strerror(errno)));
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
    state::RestoreOptions options = url_restore_options();
    options.paths = paths;
    options.target = target;
    options.restore_owners = false;  // the user's own files, in the user's home
    options.owner = owner;
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
  state::RestoreOptions options = url_restore_options();
  options.paths = scope;
  options.strip = name;
  options.target = staging;
  options.restore_owners = false;
  options.owner = user_files_owner(dir);
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

// True when the database at |path| holds no agent: a fresh machine's agent.db.
Result<bool> holds_no_agent(const std::string& path) {
  ASSIGN_OR_RETURN(db::Database d, db::Database::open(path));
  ASSIGN_OR_RETURN(db::Statement count, d.prepare("SELECT count(*) FROM agents"));
  ASSIGN_OR_RETURN(bool row, count.step());
  return row && count.column_int64(0) == 0;
}

// A whole restore's agent.db: the snapshot's copy (agent/agent.db) back into the copy folder
// and, when the live agent.db holds no agent yet (the fresh machine of a box whose files were
// lost), its content into the live database with the online backup API. A live database
// that already has agents is left alone: it is newer than any save.
Status restore_agent_db(state::Store& store, const state::StateKeys& keys, const std::string& user,
                        const state::Manifest& manifest, const StateConfig& config) {
  if (config.agent_db.empty() || config.agent_copy_dir.empty()) return ok_status();
  const std::string path = fmt::format("{}/{}", kAgentRoot, kAgentCopy);
  std::vector<std::string> scope = {path};
  ASSIGN_OR_RETURN(auto selected, state::select_entries(manifest, scope));
  if (selected.empty()) return ok_status();  // no quiesced save had taken a copy
  if (::mkdir(config.agent_copy_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return internal_error(
        fmt::format("create {}: {}", config.agent_copy_dir, std::strerror(errno)));
  const std::string staging = config.agent_copy_dir + "/" + state::kRestoreTempPrefix + "agent";
  std::error_code ec;
  std::filesystem::remove_all(staging, ec);
  state::RestoreOptions options = url_restore_options();
  options.paths = scope;
  options.strip = std::string(kAgentRoot);
  options.target = staging;
  options.restore_owners = false;
  ASSIGN_OR_RETURN(
      state::RestoreResult done,
      state::restore_snapshot(store, keys, user, manifest, options, crypto::system_random()));
  (void)done;
  const std::string copy = fmt::format("{}/{}", staging, kAgentCopy);
  auto fresh = holds_no_agent(config.agent_db);
  if (!fresh.ok()) {
    std::filesystem::remove_all(staging, ec);
    return fresh.status().with_prefix(fmt::format("whole restore: {}", config.agent_db));
  }
  if (*fresh) {
    Status st = db::backup_database(copy, config.agent_db);
    if (!st.ok()) {
      std::filesystem::remove_all(staging, ec);
      return st.with_prefix(std::string("whole restore: agent.db"));
    }
    log::info("whole restore: agent.db restored from the save", {{"db", config.agent_db}});
  } else {
    log::info("whole restore: agent.db already holds agents; the saved copy is kept aside",
              {{"copy", fmt::format("{}/{}", config.agent_copy_dir, kAgentCopy)}});
  }
  const std::string kept = fmt::format("{}/{}", config.agent_copy_dir, kAgentCopy);
  if (::rename(copy.c_str(), kept.c_str()) != 0) {
    Status st = internal_error(fmt::format("rename {}: {}", copy, std::strerror(errno)));
    std::filesystem::remove_all(staging, ec);
    return st;
  }
  std::filesystem::remove_all(staging, ec);
  return ok_status();
}

Status RestoreJob::restore_whole(const state::StateKeys& keys, const state::BoxLocation& location) {
  if (!req.paths().empty() || !req.target().empty())
    return invalid_argument("whole: paths and target must be empty");
  JobHttp http(config.door_socket, req.access());
  ASSIGN_OR_RETURN(state::Manifest manifest,
                   fetch_manifest(http, keys, location, req.snapshot_id(), req.manifest_url()));
  std::vector<state::ChunkId> ids = state::referenced_chunks(manifest);
  ASSIGN_OR_RETURN(DoorUrls door, ask_urls(http, "get", ids));
  UrlStore store(http, location.user, std::move(door), progress);
  auto on_progress = [this](uint64_t files, uint64_t bytes) {
    progress.files.store(files);
    progress.bytes.store(bytes);
  };
  RETURN_IF_ERROR(restore_whole_root(http, store, keys, location.user, manifest, "home/user",
                                     config.home, on_progress, summary));
  RETURN_IF_ERROR(restore_whole_root(http, store, keys, location.user, manifest, "workspace",
                                     config.workspace, on_progress, summary));
  return restore_agent_db(store, keys, location.user, manifest, config);
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
  // Progress goes out every 250 ms, but the end is looked for every 20 ms: the answer waits
  // 10 ms on average for it, not half a progress tick (a box's restore of the state bench's
  // tree took 3.3-4.2 s on 2026-12-01).
  constexpr auto kEndTick = std::chrono::milliseconds(20);
  constexpr auto kProgressTick = std::chrono::milliseconds(250);
  auto next_progress = std::chrono::steady_clock::now() + kProgressTick;
  while (!job->progress.done.load()) {
    net::Timer timer(exec, kEndTick);
    co_await timer.async_wait();
    if (!writing || std::chrono::steady_clock::now() < next_progress) continue;
    next_progress = std::chrono::steady_clock::now() + kProgressTick;
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

Status copy_agent_db(const std::string& db, const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return internal_error(fmt::format("create {}: {}", dir, std::strerror(errno)));
  const std::string tmp = dir + "/.agent.db.tmp";
  const std::string final_path = fmt::format("{}/{}", dir, kAgentCopy);
  ::unlink(tmp.c_str());
  RETURN_IF_ERROR(db::backup_database(db, tmp));
  // The newest of the database's and its WAL's mtimes: writes in WAL mode touch only the WAL
  // until a checkpoint.
  struct timespec mtime {};
  for (const std::string& f : {db, db + "-wal"}) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;
    if (st.st_mtim.tv_sec > mtime.tv_sec ||
        (st.st_mtim.tv_sec == mtime.tv_sec && st.st_mtim.tv_nsec > mtime.tv_nsec))
      mtime = st.st_mtim;
  }
  struct timespec times[2] = {mtime, mtime};
  if (::utimensat(AT_FDCWD, tmp.c_str(), times, 0) != 0 ||
      ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    Status st = internal_error(fmt::format("{}: {}", final_path, std::strerror(errno)));
    ::unlink(tmp.c_str());
    return st;
  }
  return ok_status();
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
  log::info("state save", {{"box", job->req.access().box()},
                           {"parent", job->req.parent_snapshot_id()},
                           {"quiesced", job->req.quiesced()}});
  if (job->req.quiesced()) {
    // Running turns end first (they write the transcript); new ones are not held back.
    if (config_.wait_for_turns) {
      const net::Deadline until = net::after(config_.quiesce_timeout);
      const bool idle = co_await config_.wait_for_turns(until);
      if (!idle) {
        co_return failed_precondition(
            fmt::format("quiesced save: agent turns still running after {} ms",
                        config_.quiesce_timeout.count()));
      }
    }
    job->quiesce = true;
  }
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
