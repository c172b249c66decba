#include "roles/api/model_door.h"

#include "base/log.h"
#include "crypto/bytes.h"
#include "http/http1_client.h"
#include "model/client.h"
#include "model/usage.h"
#include "roles/api/boxes.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace cb::api {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kChatPath = "/v1/chat/completions";
constexpr std::string_view kMessagesPath = "/v1/messages";
constexpr std::string_view kCountTokensPath = "/v1/messages/count_tokens";
constexpr std::string_view kModelsPath = "/v1/models";

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool has_any(std::string_view name, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts)
    if (name.find(p) != std::string_view::npos) return true;
  return false;
}

bool is_hop_by_hop(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "te" || name == "trailer" ||
         name == "transfer-encoding" || name == "upgrade" || name.starts_with("proxy-");
}

// A field the box must not pass to the gateway: anything that could carry a credential (the
// box's own, or one it found) or claim an identity.
bool is_credential_like(std::string_view name) {
  return name == "authorization" || name == "cookie" || name.starts_with("x-cocoonbox-") ||
         has_any(name, {"key", "token", "secret", "auth", "credential", "password", "session"});
}

http::Header field(std::string name, std::string value) {
  return http::Header{std::move(name), std::move(value)};
}

// The (type, code) of the door's own errors per HTTP status, in each wire's vocabulary.
struct ErrorKind {
  std::string_view openai_type;
  std::string_view openai_code;
  std::string_view anthropic_type;
};

ErrorKind error_kind(int status) {
  switch (status) {
    case 400:
      return {"invalid_request_error", "bad_request", "invalid_request_error"};
    case 403:
      return {"permission_error", "forbidden", "permission_error"};
    case 404:
      return {"invalid_request_error", "not_found", "not_found_error"};
    case 413:
      return {"invalid_request_error", "request_too_large", "request_too_large"};
    case 502:
      return {"server_error", "model_gateway_failed", "api_error"};
    case 503:
      return {"server_error", "model_gateway_unavailable", "api_error"};
    case 504:
      return {"server_error", "model_gateway_timeout", "api_error"};
    default:
      return {"server_error", "internal_error", "api_error"};
  }
}

// Skips JSON whitespace from |i|.
size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// |i| at a '"': the index after the closing quote, or npos. |out| (optional) gets the raw
// contents (escapes kept, which is fine for the comparisons made here).
size_t scan_string(std::string_view s, size_t i, std::string* out) {
  ++i;
  size_t start = i;
  while (i < s.size()) {
    if (s[i] == '\\') {
      i += 2;
      continue;
    }
    if (s[i] == '"') {
      if (out != nullptr) *out = std::string(s.substr(start, i - start));
      return i + 1;
    }
    ++i;
  }
  return std::string_view::npos;
}

}  // namespace

// ---- sans-I/O parts ----

DoorRoute door_route(std::string_view method, std::string_view path) {
  path = path.substr(0, path.find('?'));
  if (method == "POST") {
    if (path == kChatPath) return DoorRoute::kChatCompletions;
    if (path == kMessagesPath) return DoorRoute::kMessages;
    if (path == kCountTokensPath) return DoorRoute::kCountTokens;
    return DoorRoute::kNone;
  }
  if (method == "GET") {
    if (path == kModelsPath) return DoorRoute::kModels;
    if (path.starts_with(kModelsPath) && path.size() > kModelsPath.size() + 1 &&
        path[kModelsPath.size()] == '/' &&
        path.substr(kModelsPath.size() + 1).find('/') == std::string_view::npos)
      return DoorRoute::kModels;
  }
  return DoorRoute::kNone;
}

model::Wire door_wire(DoorRoute route, const http::Headers& from_box) {
  if (route == DoorRoute::kMessages || route == DoorRoute::kCountTokens)
    return model::Wire::kAnthropic;
  if (route == DoorRoute::kChatCompletions) return model::Wire::kOpenAi;
  return http::find_header(from_box, "anthropic-version") != nullptr ? model::Wire::kAnthropic
                                                                     : model::Wire::kOpenAi;
}

http::Headers door_request_headers(const http::Headers& from_box, model::Wire wire,
                                   std::string_view key, std::optional<size_t> body_size) {
  http::Headers out;
  for (const http::Header& h : from_box) {
    std::string name = lower(h.name);
    if (is_hop_by_hop(name) || is_credential_like(name) || name == "host" ||
        name == "content-length" || name == "accept-encoding")
      continue;
    out.push_back(field(std::move(name), h.value));
  }
  if (wire == model::Wire::kAnthropic)
    out.push_back(field("x-api-key", std::string(key)));
  else
    out.push_back(field("authorization", "Bearer " + std::string(key)));
  out.push_back(field("accept-encoding", "identity"));
  if (body_size) out.push_back(field("content-length", std::to_string(*body_size)));
  return out;
}

http::Headers door_response_headers(const http::Headers& from_gateway) {
  http::Headers out;
  for (const http::Header& h : from_gateway) {
    std::string name = lower(h.name);
    if (is_hop_by_hop(name) || name == "set-cookie") continue;
    out.push_back(field(std::move(name), h.value));
  }
  return out;
}

std::string door_error_body(model::Wire wire, int http_status, std::string_view message) {
  ErrorKind k = error_kind(http_status);
  nlohmann::json body;
  if (wire == model::Wire::kAnthropic) {
    body = {{"type", "error"},
            {"error", {{"type", k.anthropic_type}, {"message", std::string(message)}}}};
  } else {
    body = {{"error",
             {{"message", std::string(message)},
              {"type", k.openai_type},
              {"param", nullptr},
              {"code", k.openai_code}}}};
  }
  return body.dump();
}

std::string request_model_name(std::string_view body) {
  size_t i = skip_ws(body, 0);
  if (i >= body.size() || body[i] != '{') return {};
  ++i;
  // Walks the top-level members; values are skipped by bracket depth, strings by scanning.
  for (;;) {
    i = skip_ws(body, i);
    if (i >= body.size() || body[i] != '"') return {};
    std::string name;
    i = scan_string(body, i, &name);
    if (i == std::string_view::npos) return {};
    i = skip_ws(body, i);
    if (i >= body.size() || body[i] != ':') return {};
    i = skip_ws(body, i + 1);
    if (i >= body.size()) return {};
    if (name == "model") {
      std::string value;
      if (body[i] != '"' || scan_string(body, i, &value) == std::string_view::npos) return {};
      if (value.size() > 256) value.resize(256);
      return value;
    }
    int depth = 0;
    while (i < body.size()) {
      char c = body[i];
      if (c == '"') {
        i = scan_string(body, i, nullptr);
        if (i == std::string_view::npos) return {};
        if (depth == 0) break;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (depth == 0) return {};  // the end of the top-level object
        if (--depth == 0) {
          ++i;
          break;
        }
      }
      if (depth == 0 && c == ',') break;
      ++i;
    }
    i = skip_ws(body, i);
    if (i >= body.size() || body[i] != ',') return {};
    ++i;
  }
}

Result<DefaultGateway> load_default_gateway(std::string_view url, const fs::path& key_file) {
  if (url.empty() || key_file.empty())
    return invalid_argument("--gateway-url and --gateway-key-file go together");
  auto ep = model::parse_endpoint(url);
  if (!ep.ok()) return ep.status().with_prefix("--gateway-url");
  struct stat st {};
  if (::stat(key_file.c_str(), &st) != 0)
    return invalid_argument(
        fmt::format("--gateway-key-file {}: {}", key_file.string(), std::strerror(errno)));
  if ((st.st_mode & 077) != 0)
    return failed_precondition(fmt::format(
        "--gateway-key-file {} is readable by group or others (mode {:o}); chmod 600 it",
        key_file.string(), st.st_mode & 0777));
  int fd = ::open(key_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return unavailable(
        fmt::format("--gateway-key-file {}: {}", key_file.string(), std::strerror(errno)));
  DefaultGateway gw;
  gw.url = std::string(url);
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    gw.key.append(buf, static_cast<size_t>(n));
    if (gw.key.size() > 8192) break;
  }
  crypto::wipe(std::span<uint8_t>(reinterpret_cast<uint8_t*>(buf), sizeof buf));
  ::close(fd);
  if (!gw.key.empty() && gw.key.back() == '\n') gw.key.pop_back();
  if (!gw.key.empty() && gw.key.back() == '\r') gw.key.pop_back();
  bool valid = !gw.key.empty() && gw.key.size() <= 4096 &&
               std::none_of(gw.key.begin(), gw.key.end(), [](char c) {
                 auto u = static_cast<unsigned char>(c);
                 return u <= 0x20 || u == 0x7f;
               });
  if (!valid) {
    crypto::wipe(gw.key);
    return invalid_argument(fmt::format(
        "--gateway-key-file {}: want one key of 1..4096 bytes, no spaces or control characters",
        key_file.string()));
  }
  return gw;
}

// ---- the door ----

// One box's door. The router outlives the server (the server dispatches into it); the handler
// does not capture the Door, so destroying both while a call is suspended leaves nothing
// dangling (see serve()).
struct ModelDoor::Door {
  http::Router router;
  std::unique_ptr<http::Server> server;
  fs::path path;
  dev_t dev = 0;
  ino_t ino = 0;
};

// Who a call is for and where it goes. The key is wiped when the value dies.
struct ModelDoor::Resolved {
  int64_t user_id = 0;
  model::Endpoint endpoint;
  std::string key;

  Resolved() = default;
  Resolved(Resolved&&) = default;
  Resolved& operator=(Resolved&&) = default;
  ~Resolved() { crypto::wipe(key); }
};

ModelDoor::ModelDoor(net::Executor executor, Store& store, const crypto::SymmetricKey& master,
                     ModelDoorOptions options)
    : executor_(std::move(executor)),
      store_(store),
      master_(master),
      options_(std::move(options)),
      alive_(std::make_shared<bool>(true)) {}

ModelDoor::~ModelDoor() {
  *alive_ = false;
  doors_.clear();
  if (options_.default_gateway) crypto::wipe(options_.default_gateway->key);
}

Status ModelDoor::open(const std::string& box_id, const fs::path& socket_path) {
  close(box_id);
  // Bound through /proc/self/fd/<dir>: a sockaddr_un holds 108 bytes, a data dir path may not.
  fs::path dir = socket_path.parent_path();
  int dirfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dirfd < 0)
    return unavailable(
        fmt::format("model door of {}: open {}: {}", box_id, dir.string(), std::strerror(errno)));
  std::string via = fmt::format("/proc/self/fd/{}/{}", dirfd, socket_path.filename().string());
  auto door = std::make_unique<Door>();
  door->path = socket_path;
  door->router.set_fallback(
      [this, box_id](http::ServerRequest& req) { return serve(req, box_id); });
  http::ServerOptions server_options;
  door->server = std::make_unique<http::Server>(executor_, door->router, server_options);
  Status st = door->server->listen_unix(via);
  if (st.ok() && ::chmod(via.c_str(), options_.socket_mode) != 0)
    st = internal_error(fmt::format("chmod {}: {}", socket_path.string(), std::strerror(errno)));
  struct stat sb {};
  if (st.ok() && ::lstat(via.c_str(), &sb) != 0)
    st = internal_error(fmt::format("stat {}: {}", socket_path.string(), std::strerror(errno)));
  ::close(dirfd);
  if (!st.ok()) return st.with_prefix(fmt::format("model door of {}", box_id));
  door->dev = sb.st_dev;
  door->ino = sb.st_ino;
  door->server->start();
  doors_[box_id] = std::move(door);
  log::info("model door open", {{"box", box_id}, {"socket", socket_path.string()}});
  return ok_status();
}

Status ModelDoor::ensure_open(const std::string& box_id, const fs::path& socket_path) {
  auto it = doors_.find(box_id);
  if (it != doors_.end() && it->second->path == socket_path) {
    struct stat sb {};
    if (::lstat(socket_path.c_str(), &sb) == 0 && S_ISSOCK(sb.st_mode) &&
        sb.st_uid == ::geteuid() && sb.st_dev == it->second->dev && sb.st_ino == it->second->ino)
      return ok_status();  // open, and the socket file is still ours
  }
  return open(box_id, socket_path);
}

void ModelDoor::close(const std::string& box_id) {
  auto it = doors_.find(box_id);
  if (it == doors_.end()) return;
  const Door& door = *it->second;
  struct stat sb {};
  if (::lstat(door.path.c_str(), &sb) == 0 && sb.st_dev == door.dev && sb.st_ino == door.ino)
    ::unlink(door.path.c_str());
  doors_.erase(it);
  log::info("model door closed", {{"box", box_id}});
}

bool ModelDoor::is_open(const std::string& box_id) const { return doors_.count(box_id) != 0; }

asio::awaitable<void> ModelDoor::sync(fs::path boxes_dir) {
  auto alive = alive_;
  auto boxes = co_await store_.list_all_boxes();
  if (!*alive) co_return;
  if (!boxes.ok()) {
    log::warn("model door sync", {{"error", boxes.status().to_string()}});
    co_return;
  }
  std::set<std::string> live;
  for (const Box& box : *boxes) {
    if (box.deleted_at_ms) continue;
    live.insert(box.id);
    fs::path run = boxes_dir / box.id / "run";
    std::error_code ec;
    if (!fs::is_directory(run, ec)) continue;  // never booted: boot() opens it
    Status st = ensure_open(box.id, run / kModelDoorSocket);
    if (!st.ok()) log::error("model door", {{"box", box.id}, {"error", st.to_string()}});
  }
  std::vector<std::string> gone;
  for (const auto& [id, door] : doors_)
    if (!live.count(id)) gone.push_back(id);
  for (const auto& id : gone) close(id);
}

asio::awaitable<void> ModelDoor::follow(BoxManager& manager, fs::path boxes_dir) {
  co_await asio::this_coro::throw_if_cancelled(false);
  auto alive = alive_;
  for (;;) {
    uint64_t seen = manager.generation();
    co_await sync(boxes_dir);
    if (!*alive) co_return;
    if (manager.generation() != seen) continue;
    Status waited = co_await manager.changed().wait();
    if (!waited.ok() || !*alive) co_return;
  }
}

std::string ModelDoor::metrics_text() const {
  return fmt::format(
      "# HELP cocoonbox_model_door_open Model doors served (one per box).\n"
      "# TYPE cocoonbox_model_door_open gauge\ncocoonbox_model_door_open {}\n"
      "# HELP cocoonbox_model_calls_open Model door requests being served.\n"
      "# TYPE cocoonbox_model_calls_open gauge\ncocoonbox_model_calls_open {}\n"
      "# HELP cocoonbox_model_requests_total Requests to the model door.\n"
      "# TYPE cocoonbox_model_requests_total counter\n"
      "cocoonbox_model_requests_total {}\n"
      "# HELP cocoonbox_model_refused_total Model door requests answered by the door itself.\n"
      "# TYPE cocoonbox_model_refused_total counter\ncocoonbox_model_refused_total {}\n"
      "# HELP cocoonbox_model_upstream_failures_total Gateway unreachable, broken or too slow.\n"
      "# TYPE cocoonbox_model_upstream_failures_total counter\n"
      "cocoonbox_model_upstream_failures_total {}\n"
      "# HELP cocoonbox_model_tokens_total Tokens through the model door.\n"
      "# TYPE cocoonbox_model_tokens_total counter\n"
      "cocoonbox_model_tokens_total{{kind=\"input\"}} {}\n"
      "cocoonbox_model_tokens_total{{kind=\"output\"}} {}\n",
      doors_.size(), counters_.calls_open, counters_.requests_total, counters_.refused_total,
      counters_.upstream_failures_total, counters_.input_tokens_total,
      counters_.output_tokens_total);
}

asio::awaitable<void> ModelDoor::refuse(http::ServerRequest& req, model::Wire wire, int status,
                                        std::string message) {
  ++counters_.refused_total;
  (void)co_await http::respond(req, status, "application/json",
                               door_error_body(wire, status, message));
}

Status ModelDoor::ensure_tls() {
  if (options_.tls != nullptr) return ok_status();
  net::TlsClientOptions o;
  o.alpn = {std::string("http/1.1")};
  auto ctx = net::TlsContext::client(o);
  if (!ctx.ok()) return ctx.status();
  options_.tls = std::move(*ctx);
  return ok_status();
}

// The box's owner and the gateway to use: the owner's own, else the default.
// Errors: kNotFound (the box is deleted or unknown), kFailedPrecondition (no gateway),
// kDataLoss (the owner's sealed key does not open), kInvalidArgument (a bad URL).
asio::awaitable<Result<ModelDoor::Resolved>> ModelDoor::resolve(const std::string& box_id) {
  auto alive = alive_;
  auto box = co_await store_.get_box_by_id(box_id);
  if (!*alive) co_return cancelled("model door closed");
  if (!box.ok()) co_return box.status();
  if (box->deleted_at_ms) co_return not_found(fmt::format("box {} is deleted", box_id));
  auto gw = co_await store_.user_gateway(box->user_id, master_.bytes());
  if (!*alive) co_return cancelled("model door closed");
  if (!gw.ok()) co_return gw.status();
  Resolved r;
  r.user_id = box->user_id;
  std::string url;
  if (gw->has_value()) {
    url = (*gw)->url;
    r.key = std::move((*gw)->key);
    crypto::wipe((*gw)->key);
  } else if (options_.default_gateway) {
    url = options_.default_gateway->url;
    r.key = options_.default_gateway->key;
  } else {
    co_return failed_precondition(
        "no model gateway is configured for this box's user: the admin sets one with "
        "`cocoonbox api user set-gateway` or starts the api with --gateway-url");
  }
  auto ep = model::parse_endpoint(url);
  if (!ep.ok()) co_return ep.status();
  r.endpoint = std::move(*ep);
  co_return r;
}

// Handles one request on |box_id|'s door. Reached through a handler that captures nothing
// the door owns: |this| is the ModelDoor, which outlives its doors; after each suspension
// |alive| says whether it still exists.
asio::awaitable<void> ModelDoor::serve(http::ServerRequest& req, std::string box_id) {
  auto alive = alive_;
  const http::RequestHead& head = req.head();
  if (options_.state_routes && head.path.rfind("/cocoonbox.state/", 0) == 0) {
    co_await options_.state_routes(req, box_id);
    co_return;
  }
  const DoorRoute route = door_route(head.method, head.path);
  const model::Wire wire = door_wire(route, head.headers);
  if (route == DoorRoute::kNone) {
    std::string message = fmt::format(
        "the model door serves POST {}, POST {}, POST {} and GET {}; not {} {}", kChatPath,
        kMessagesPath, kCountTokensPath, kModelsPath, head.method, head.path_only());
    co_await refuse(req, wire, 404, std::move(message));
    co_return;
  }
  ++counters_.requests_total;
  ++counters_.calls_open;
  // Counts the call down however serve() ends; not after the door is gone.
  struct OpenCall {
    std::shared_ptr<bool> alive;
    uint64_t* open;
    ~OpenCall() {
      if (*alive) --*open;
    }
  } open_call{alive, &counters_.calls_open};
  const net::Deadline call_deadline = net::after(options_.call_timeout);
  auto read_deadline = [&] { return std::min(call_deadline, net::after(options_.idle_timeout)); };

  std::string body;
  for (;;) {
    auto piece = co_await req.read();
    if (!*alive) co_return;
    if (!piece.ok()) co_return;  // the box went away
    if (piece->empty()) break;
    if (body.size() + piece->size() > options_.max_request_bytes) {
      std::string message = fmt::format("request body over {} bytes", options_.max_request_bytes);
      co_await refuse(req, wire, 413, std::move(message));
      co_return;
    }
    body += *piece;
  }

  auto resolved = co_await resolve(box_id);
  if (!*alive) co_return;
  if (!resolved.ok()) {
    const Status& s = resolved.status();
    int status = 503;
    std::string message(s.message());
    if (s.code() == Code::kNotFound) {
      status = 403;
    } else if (s.code() == Code::kDataLoss) {
      message =
          "the model gateway key of this box's user cannot be opened; the admin must set it "
          "again with `cocoonbox api user set-gateway`";
    } else if (s.code() == Code::kInvalidArgument) {
      message = "the model gateway URL configured for this box's user is not valid: " + message;
    }
    log::warn("model door refused", {{"box", box_id}, {"error", s.to_string()}});
    co_await refuse(req, wire, status, std::move(message));
    co_return;
  }
  Resolved& target = *resolved;

  // The usage meter and the model name only for the model calls themselves.
  const bool metered = route == DoorRoute::kChatCompletions || route == DoorRoute::kMessages;
  ModelCall call;
  call.user_id = target.user_id;
  call.box_id = box_id;
  call.wire = std::string(model::wire_name(wire));
  if (metered) call.model = request_model_name(body);

  http::Http1DialOptions dial;
  dial.host = target.endpoint.host;
  dial.port = target.endpoint.port;
  dial.unix_path = target.endpoint.unix_path;
  if (target.endpoint.tls) {
    Status tls = ensure_tls();
    if (!tls.ok()) {
      ++counters_.upstream_failures_total;
      std::string message = "TLS setup for the model gateway failed: " + std::string(tls.message());
      co_await refuse(req, wire, 502, std::move(message));
      co_return;
    }
    dial.tls = options_.tls;
  }
  auto conn = co_await http::dial_http1(
      executor_, dial, std::min(call_deadline, net::after(options_.connect_timeout)));
  if (!*alive) co_return;
  if (!conn.ok()) {
    ++counters_.upstream_failures_total;
    log::warn(
        "model gateway unreachable",
        {{"box", box_id}, {"gateway", target.endpoint.url}, {"error", conn.status().to_string()}});
    int status = conn.status().code() == Code::kDeadlineExceeded ? 504 : 502;
    std::string message =
        "the model gateway is unreachable: " + std::string(conn.status().message());
    co_await refuse(req, wire, status, std::move(message));
    co_return;
  }
  http::Http1Client& upstream = **conn;

  std::optional<size_t> body_size;
  if (head.method == "POST" || !body.empty()) body_size = body.size();
  http::Headers headers = door_request_headers(head.headers, wire, target.key, body_size);
  std::string target_path = target.endpoint.path_prefix + head.path;
  Status sent = co_await upstream.send_head(head.method, std::move(target_path), std::move(headers),
                                            read_deadline());
  if (sent.ok() && !body.empty())
    sent = co_await upstream.write_body(std::move(body), read_deadline());
  if (sent.ok() && body_size && *body_size > 0)
    sent = co_await upstream.finish_body(http::Headers(), read_deadline());
  if (!*alive) co_return;
  Result<http::Http1Response> response = internal_error("request not sent");
  if (sent.ok())
    response = co_await upstream.read_head(read_deadline());
  else
    response = sent;
  if (!*alive) co_return;
  if (!response.ok()) {
    ++counters_.upstream_failures_total;
    const Status& s = response.status();
    log::warn("model gateway failed", {{"box", box_id}, {"error", s.to_string()}});
    if (s.code() == Code::kCancelled) co_return;  // the box went away
    int status = s.code() == Code::kDeadlineExceeded ? 504 : 502;
    std::string message = "the model gateway did not answer: " + std::string(s.message());
    co_await refuse(req, wire, status, std::move(message));
    if (metered && *alive) {
      call.failed = true;
      (void)co_await store_.record_model_call(call);
    }
    co_return;
  }

  std::optional<model::UsageMeter> meter;
  const bool success = response->status >= 200 && response->status < 300;
  if (metered && success) {
    const std::string* ct = http::find_header(response->headers, "content-type");
    meter.emplace(wire, ct != nullptr && model::is_event_stream(*ct));
  }
  Status relayed =
      co_await req.send_headers(response->status, door_response_headers(response->headers), false);
  bool complete = false;
  while (relayed.ok()) {
    auto piece = co_await upstream.read_body(read_deadline());
    if (!*alive) co_return;
    if (!piece.ok()) {
      if (piece.status().code() != Code::kCancelled) {
        ++counters_.upstream_failures_total;
        log::warn("model gateway response cut",
                  {{"box", box_id}, {"error", piece.status().to_string()}});
        req.reset();  // the box sees a cut stream, as from the gateway itself
      }
      break;
    }
    if (piece->empty()) {
      complete = true;
      break;
    }
    if (meter) meter->feed(*piece);
    relayed = co_await req.write(*piece, false);
    if (!*alive) co_return;
  }
  if (complete) {
    if (meter) meter->finish();
    (void)co_await req.write(std::string_view(), true);
    if (!*alive) co_return;
  }
  upstream.close();

  if (!metered) co_return;
  model::Usage usage = meter ? meter->usage() : model::Usage{};
  call.failed = !success || !complete || !meter || !meter->complete();
  call.input_tokens = usage.input_tokens;
  call.output_tokens = usage.output_tokens;
  call.cache_read_tokens = usage.cache_read_tokens;
  call.cache_write_tokens = usage.cache_write_tokens;
  counters_.input_tokens_total += static_cast<uint64_t>(usage.input_tokens);
  counters_.output_tokens_total += static_cast<uint64_t>(usage.output_tokens);
  Status recorded = co_await store_.record_model_call(call);
  if (!recorded.ok())
    log::error("model usage not recorded", {{"box", box_id}, {"error", recorded.to_string()}});
}

}  // namespace cb::api
