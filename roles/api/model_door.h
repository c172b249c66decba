#pragma once
// The model door (seed §12.2, issue 6 item 3): how a box calls the paid model gateway without
// ever holding its key.
//
//   in the box (no key)                       the api                                gateway
//   POST unix:/run/cocoonbox/model.sock  ──>  ModelDoor: one listener per box, so  ──>  URL +
//        /v1/chat/completions | /v1/messages  the socket names the box; owner's        key
//        /v1/messages/count_tokens            gateway (else the api's default);
//   GET  /v1/models[/ID]                      key-like fields dropped, the key added;
//                                         <── response relayed as it arrives (SSE is
//                                             not buffered); token usage recorded
//
// Which box. The api serves one unix socket per box, at <box_dir>/run/model.sock, which is
// /run/cocoonbox/model.sock inside the box ($COCOONBOX_RUN_DIR/model.sock in a box that is
// not isolated). Only that box sees that directory, and the listener a connection arrives on
// is the box: nothing the box sends (headers, body) can name another box or user.
//
// The request. Only the routes above are forwarded (a gateway's key-management or billing
// endpoints are out of reach); anything else is 404. The body is read whole (at most
// ModelDoorOptions::max_request_bytes, else 413) and forwarded with its content-length. The
// key goes in the wire's own field: "x-api-key" on /v1/messages*, "authorization: Bearer" on
// /v1/chat/completions, and on /v1/models* whichever the request's wire is (Anthropic when it
// carries anthropic-version). door_request_headers() says what else is dropped.
//
// The response. Status, fields (door_response_headers()) and body are relayed piece by piece
// as they arrive, so a stream reaches the box event by event. If the box goes away the
// gateway connection is closed, which ends the call there. Errors the door itself answers
// (no gateway: 503; gateway unreachable or broken: 502; timeout: 504; bad route: 404; body too
// large: 413) use the wire's own error shape (door_error_body()), so the box's model client
// reports them like the gateway's own.
//
// Usage. For the two model routes, a model::UsageMeter reads the relayed bytes and one
// ModelCall (user, box, wire, the request's model, tokens, failed) is added to api.db
// (Store::record_model_call) when the call ends, also when it was cut short.
//
// Affinity: the api's executor. The store and master key must outlive the door.

#include "base/result.h"
#include "crypto/keys.h"
#include "http/headers.h"
#include "http/server.h"
#include "model/conversation.h"
#include "net/asio.h"
#include "net/tls.h"
#include "roles/api/store/store.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace cb::api {

class BoxManager;

// The door's socket file, in the box's run dir (<box_dir>/run).
inline constexpr std::string_view kModelDoorSocket = "model.sock";
// Where an isolated box sees it (the local backend binds <box_dir>/run at /run/cocoonbox).
inline constexpr std::string_view kModelDoorPathInBox = "/run/cocoonbox/model.sock";

// The routes the door forwards.
enum class DoorRoute {
  kNone,             // anything else: 404
  kChatCompletions,  // POST /v1/chat/completions (OpenAI)
  kMessages,         // POST /v1/messages (Anthropic)
  kCountTokens,      // POST /v1/messages/count_tokens (Anthropic)
  kModels,           // GET /v1/models, GET /v1/models/<id> (either wire)
};

// The route of |method| |path| (a query string is allowed and ignored here). A known path
// with another method is kNone too.
DoorRoute door_route(std::string_view method, std::string_view path);

// The wire a request speaks, which decides its key field and the shape of the door's own
// errors: Anthropic for kMessages and kCountTokens, and for any other route when the request
// has an anthropic-version field; OpenAI otherwise.
model::Wire door_wire(DoorRoute route, const http::Headers& from_box);

// The fields sent to the gateway for a request from the box:
//  - dropped: every field that could carry a credential or name a caller (authorization,
//    proxy-authorization, cookie, any name containing "key", "token", "secret", "auth",
//    "credential", "password" or "session", and x-cocoonbox-*), hop-by-hop fields
//    (connection, keep-alive, te, trailer, transfer-encoding, upgrade, proxy-*), host,
//    content-length (set from the body) and accept-encoding;
//  - added: the key in |wire|'s field, "accept-encoding: identity" (the door reads usage from
//    the bytes it relays, so they must not be compressed) and content-length when |body_size|
//    is set.
// Everything else (content-type, accept, anthropic-version, anthropic-beta, user-agent,
// openai-beta, ...) is kept in order.
http::Headers door_request_headers(const http::Headers& from_box, model::Wire wire,
                                   std::string_view key, std::optional<size_t> body_size);

// The gateway's response fields passed to the box: all but hop-by-hop fields
// (connection, keep-alive, transfer-encoding, trailer, upgrade, proxy-*) and set-cookie.
http::Headers door_response_headers(const http::Headers& from_gateway);

// A JSON error body in |wire|'s shape:
//   OpenAI:    {"error":{"message":M,"type":T,"param":null,"code":C}}
//   Anthropic: {"type":"error","error":{"type":T,"message":M}}
// T and C follow |http_status| (e.g. 503 -> "api_error" / "model_gateway_unavailable").
std::string door_error_body(model::Wire wire, int http_status, std::string_view message);

// The top-level "model" string of a JSON request body, found by a linear scan that does not
// build a document (bodies may hold megabytes of images). "" when there is none. At most 256
// bytes are returned.
std::string request_model_name(std::string_view body);

// A gateway the api was started with, for users without their own.
struct DefaultGateway {
  std::string url;
  std::string key;
};

// The default gateway from the api's flags: |url| checked with model::parse_endpoint(), the
// key read from |key_file| (one trailing line end dropped). The file must not be readable by
// group or others, like the api's own key files. Errors: kInvalidArgument naming
// --gateway-url or --gateway-key-file; kFailedPrecondition (mode); kUnavailable (read).
Result<DefaultGateway> load_default_gateway(std::string_view url,
                                            const std::filesystem::path& key_file);

struct ModelDoorOptions {
  std::optional<DefaultGateway> default_gateway;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  // Longest silence from the gateway (before its answer starts, and between reads after).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  // A whole call, from the box's request to the last byte relayed.
  std::chrono::milliseconds call_timeout{std::chrono::minutes(60)};
  size_t max_request_bytes = size_t{64} << 20;
  // Mode of each socket file. 0666: every process in the box may use the door (the box's
  // tools too; the gateway's per-key caps bound that, seed §3).
  mode_t socket_mode = 0666;
  // TLS for https gateways; when null, one with the system roots is made on first use.
  std::shared_ptr<net::TlsContext> tls;
  // Requests whose path starts with /cocoonbox.state/ go here with the box's id (the state
  // layer's chunk URLs, roles/api/README.md §State); unset: 404 like any other route.
  std::function<asio::awaitable<void>(http::ServerRequest&, std::string box_id)> state_routes;
};

class ModelDoor {
 public:
  // |store| and |master| must outlive the door.
  ModelDoor(net::Executor executor, Store& store, const crypto::SymmetricKey& master,
            ModelDoorOptions options);
  ~ModelDoor();
  ModelDoor(const ModelDoor&) = delete;
  ModelDoor& operator=(const ModelDoor&) = delete;

  // Serves box |box_id|'s door on the unix socket |socket_path| (any file there is replaced;
  // an earlier door of the box is closed, cutting its calls). The socket is bound through
  // the directory's file descriptor, so a long path works. Errors: kUnavailable (the
  // directory or the bind), kInternal (chmod).
  Status open(const std::string& box_id, const std::filesystem::path& socket_path);
  // open() unless |box_id|'s door is already served at |socket_path| by the socket file it
  // made; then nothing changes and calls in progress go on (a box woken from hibernation
  // finishes the streams it was in). Errors: those of open().
  Status ensure_open(const std::string& box_id, const std::filesystem::path& socket_path);
  // Stops serving |box_id| (calls in progress are cut) and removes its socket file if it is
  // still the one the door made. No-op for a box without a door.
  void close(const std::string& box_id);
  bool is_open(const std::string& box_id) const;
  size_t open_count() const { return doors_.size(); }

  // Makes the doors match api.db: every live box whose run dir exists under |boxes_dir|
  // (<data-dir>/boxes) gets ensure_open(); doors of boxes deleted or unknown are closed. For the
  // api's start (boxes that kept running) and after box changes.
  asio::awaitable<void> sync(std::filesystem::path boxes_dir);
  // Runs sync() now and again after every change |manager| announces, until cancelled.
  asio::awaitable<void> follow(BoxManager& manager, std::filesystem::path boxes_dir);

  struct Counters {
    uint64_t calls_open = 0;               // requests being served now
    uint64_t requests_total = 0;           // requests that reached a route
    uint64_t refused_total = 0;            // answered by the door itself (404, 413, 503, ...)
    uint64_t upstream_failures_total = 0;  // gateway unreachable, broken or too slow
    uint64_t input_tokens_total = 0;
    uint64_t output_tokens_total = 0;
  };
  const Counters& counters() const { return counters_; }
  // Prometheus text lines for /metrics.
  std::string metrics_text() const;

 private:
  struct Door;
  struct Resolved;
  asio::awaitable<void> serve(http::ServerRequest& req, std::string box_id);
  asio::awaitable<Result<Resolved>> resolve(const std::string& box_id);
  asio::awaitable<void> refuse(http::ServerRequest& req, model::Wire wire, int status,
                               std::string message);
  Status ensure_tls();

  net::Executor executor_;
  Store& store_;
  const crypto::SymmetricKey& master_;
  ModelDoorOptions options_;
  std::map<std::string, std::unique_ptr<Door>> doors_;
  Counters counters_;
  std::shared_ptr<bool> alive_;
};

}  // namespace cb::api
