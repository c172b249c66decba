#include "state/s3_store.h"

#include "base/base64.h"
#include "crypto/hash.h"
#include "http/http1_client.h"
#include "net/asio.h"
#include "net/tls.h"
#include "state/s3_xml.h"
#include "state/sigv4.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

namespace cb::state {

namespace s3_internal {

// The HTTP/1.1 client of one connection and the io_context it runs on. |client| is declared
// after |io| so it is destroyed first: its socket belongs to |io|.
struct Connection {
  asio::io_context io{1};
  std::unique_ptr<http::Http1Client> client;  // null until dialed
};

struct Exchange {
  // Request.
  std::string method;
  std::string path;      // decoded: "/<bucket>/<object>"
  sigv4::Pairs query;    // decoded
  sigv4::Pairs headers;  // extra signed headers (content-md5)
  std::string body;
  // Response.
  int status = 0;
  http::Headers response_headers;
  std::string response_body;
};

}  // namespace s3_internal

namespace {

using s3_internal::Connection;
using s3_internal::Exchange;

constexpr auto kMaxBackoff = std::chrono::milliseconds(5000);

bool valid_bucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return b.front() != '.' && b.front() != '-' && b.back() != '.' && b.back() != '-';
}

std::string md5_base64(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), digest, &n, EVP_md5(), nullptr);
  return base64_encode(std::string_view(reinterpret_cast<const char*>(digest), n));
}

std::string target_of(const std::string& path, const sigv4::Pairs& query) {
  std::string out = sigv4::uri_encode(path, false);
  char sep = '?';
  for (const auto& [name, value] : query) {
    out += sep;
    out += sigv4::uri_encode(name, true) + "=" + sigv4::uri_encode(value, true);
    sep = '&';
  }
  return out;
}

// Runs one HTTP exchange on |connection| (dialing first unless it has a reusable client) and
// stores the outcome in |out|. The coroutine root on Connection::io; arguments by value.
asio::awaitable<void> run_exchange(Connection* connection, http::Http1DialOptions dial,
                                   std::string method, std::string target, http::Headers headers,
                                   std::string body, net::Deadline deadline,
                                   std::optional<Result<http::Http1Response>>* out) {
  co_await asio::this_coro::throw_if_cancelled(false);
  if (connection->client && !connection->client->reusable()) connection->client.reset();
  if (!connection->client) {
    auto dialed =
        co_await http::dial_http1(connection->io.get_executor(), std::move(dial), deadline);
    if (!dialed.ok()) {
      *out = dialed.status();
      co_return;
    }
    connection->client = std::move(dialed).value();
  }
  auto response = co_await connection->client->request(
      std::move(method), std::move(target), std::move(headers), std::move(body), deadline);
  *out = std::move(response);
}

bool retryable_status(int status, std::string_view code) {
  return status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout";
}

// The Status for a non-2xx response.
Status error_status(const Exchange& x, std::string_view what) {
  std::string code;
  std::string message;
  if (!x.response_body.empty()) {
    auto parsed = s3xml::parse_error(x.response_body);
    if (parsed.ok()) {
      code = parsed->code;
      message = parsed->message;
    }
  }
  std::string text = std::string(what) + ": " + std::to_string(x.status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  if (code.empty() && x.method == "HEAD") text += " (a HEAD response carries no error code)";
  if (x.status == 403 || x.status == 401) return permission_denied(text);
  if (x.status == 404) {
    if (code == "NoSuchBucket") return failed_precondition(text);
    return not_found(text);
  }
  if (x.status == 507 || code == "EntityTooLarge" || code == "QuotaExceeded") {
    return resource_exhausted(text);
  }
  if (retryable_status(x.status, code)) return unavailable(text);
  return internal_error(text);
}

Result<uint64_t> parse_length(const http::Headers& headers) {
  const std::string* v = http::find_header(headers, "content-length");
  if (v == nullptr || v->empty() || v->size() > 19) {
    return internal_error("no usable content-length in the response");
  }
  uint64_t n = 0;
  for (char c : *v) {
    if (c < '0' || c > '9') return internal_error("bad content-length in the response");
    n = n * 10 + uint64_t(c - '0');
  }
  return n;
}

}  // namespace

Result<std::string> read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    std::string text = "secret file " + path + ": " + std::strerror(err);
    if (err == ENOENT) return not_found(text);
    if (err == EACCES) return permission_denied(text);
    return internal_error(text);
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string secret = buffer.str();
  while (!secret.empty() &&
         (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' ')) {
    secret.pop_back();
  }
  if (secret.empty()) return invalid_argument("secret file " + path + " is empty");
  return secret;
}

Result<std::unique_ptr<S3Store>> S3Store::open(Options options) {
  Endpoint ep;
  std::string_view rest = options.endpoint;
  if (rest.starts_with("https://")) {
    ep.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return invalid_argument("s3 endpoint: want http://host[:port] or https://host[:port]");
  }
  if (rest.ends_with("/")) rest.remove_suffix(1);
  if (rest.empty() || rest.find_first_of("/?#@ ") != std::string_view::npos) {
    return invalid_argument("s3 endpoint: want http://host[:port] or https://host[:port]");
  }
  std::string_view port_text;
  if (rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return invalid_argument("s3 endpoint: unclosed '['");
    ep.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid_argument("s3 endpoint: junk after ']'");
      port_text = after.substr(1);
    }
  } else {
    size_t colon = rest.rfind(':');
    ep.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port_text = rest.substr(colon + 1);
  }
  if (ep.host.empty()) return invalid_argument("s3 endpoint: no host");
  ep.port = ep.tls ? 443 : 80;
  if (!port_text.empty()) {
    unsigned long p = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || p > 65535) return invalid_argument("s3 endpoint: bad port");
      p = p * 10 + unsigned(c - '0');
    }
    if (p == 0 || p > 65535) return invalid_argument("s3 endpoint: bad port");
    ep.port = uint16_t(p);
  }
  const bool bracket = ep.host.find(':') != std::string::npos;
  ep.authority = bracket ? "[" + ep.host + "]" : ep.host;
  if (ep.port != (ep.tls ? 443 : 80)) ep.authority += ":" + std::to_string(ep.port);

  if (!valid_bucket(options.bucket)) {
    return invalid_argument("s3 bucket: want 3..63 of [a-z0-9.-], not starting or ending in . -");
  }
  if (!options.prefix.empty()) {
    Status prefix_ok = validate_key(options.prefix);
    if (!prefix_ok.ok()) return prefix_ok.with_prefix("s3 prefix");
  }
  if (options.region.empty()) return invalid_argument("s3 region: empty");
  if (options.access_key_id.empty()) return invalid_argument("s3 access key id: empty");
  if (options.secret_access_key.empty()) return invalid_argument("s3 secret: empty");
  if (options.max_attempts < 1) return invalid_argument("s3 max_attempts: want at least 1");

  std::shared_ptr<net::TlsContext> tls;
  if (ep.tls) {
    net::TlsClientOptions tls_options;
    tls_options.ca_file = options.ca_file;
    tls_options.verify_peer = options.verify_peer;
    tls_options.alpn = {"http/1.1"};
    ASSIGN_OR_RETURN(tls, net::TlsContext::client(tls_options));
  }
  return std::unique_ptr<S3Store>(new S3Store(std::move(options), std::move(ep), std::move(tls)));
}

S3Store::S3Store(Options options, Endpoint endpoint, std::shared_ptr<net::TlsContext> tls)
    : options_(std::move(options)), endpoint_(std::move(endpoint)), tls_(std::move(tls)) {}

S3Store::~S3Store() = default;

std::string S3Store::describe() const {
  std::string out = "s3://" + options_.bucket;
  if (!options_.prefix.empty()) out += "/" + options_.prefix;
  return out + " at " + options_.endpoint;
}

std::string S3Store::object_name(std::string_view key) const {
  if (options_.prefix.empty()) return std::string(key);
  return options_.prefix + "/" + std::string(key);
}

std::unique_ptr<Connection> S3Store::take_connection() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<Connection>();
}

void S3Store::return_connection(std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(connection));
}

Status S3Store::attempt(Exchange& x) {
  sigv4::Request request;
  request.method = x.method;
  request.path = x.path;
  request.query = x.query;
  request.headers.emplace_back("host", endpoint_.authority);
  for (const auto& h : x.headers) request.headers.push_back(h);
  request.payload_sha256 = x.body.empty() ? std::string(sigv4::kEmptyPayloadSha256)
                                          : crypto::hex_encode(crypto::sha256(x.body));
  sigv4::Credentials credentials{options_.access_key_id, options_.secret_access_key, ""};
  sigv4::Signing signing{options_.region, "s3", sigv4::amz_date(std::chrono::system_clock::now())};
  ASSIGN_OR_RETURN(std::string authorization, sigv4::sign(request, credentials, signing));

  http::Headers headers;
  for (auto& [name, value] : request.headers) headers.push_back({name, value});
  headers.push_back({"authorization", std::move(authorization)});

  http::Http1DialOptions dial;
  dial.host = endpoint_.host;
  dial.port = endpoint_.port;
  dial.tls = tls_;

  auto connection = take_connection();
  std::optional<Result<http::Http1Response>> out;
  connection->io.restart();
  asio::co_spawn(
      connection->io,
      run_exchange(connection.get(), std::move(dial), x.method, target_of(x.path, x.query),
                   std::move(headers), x.body, net::after(options_.request_timeout), &out),
      [&out](std::exception_ptr e) {
        if (e && !out) out = internal_error("s3: the HTTP exchange threw");
      });
  connection->io.run();
  if (!out) return internal_error("s3: the HTTP exchange did not finish");
  if (!out->ok()) return out->status();
  http::Http1Response& response = out->value();
  x.status = response.status;
  x.response_headers = std::move(response.headers);
  x.response_body = std::move(response.body);
  if (connection->client && connection->client->reusable()) {
    return_connection(std::move(connection));
  }
  return ok_status();
}

Status S3Store::send(Exchange& x, std::string_view what_view) {
  const std::string what = "s3 " + x.method + " " + std::string(what_view);
  auto backoff = options_.backoff_base;
  Status last;
  for (int n = 1;; ++n) {
    Status sent = attempt(x);
    bool retry;
    if (!sent.ok()) {
      last = sent.with_prefix(what);
      retry = sent.code() == Code::kUnavailable || sent.code() == Code::kDeadlineExceeded;
    } else if (x.status >= 200 && x.status < 300) {
      return ok_status();
    } else {
      last = error_status(x, what);
      retry = last.code() == Code::kUnavailable;
    }
    if (!retry || n >= options_.max_attempts) return last;
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, kMaxBackoff);
  }
}

Status S3Store::put(std::string_view key, std::string_view data) {
  RETURN_IF_ERROR(validate_key(key));
  Exchange x;
  x.method = "PUT";
  x.path = "/" + options_.bucket + "/" + object_name(key);
  x.body = std::string(data);
  return send(x, object_name(key));
}

Result<std::string> S3Store::get(std::string_view key) {
  RETURN_IF_ERROR(validate_key(key));
  Exchange x;
  x.method = "GET";
  x.path = "/" + options_.bucket + "/" + object_name(key);
  RETURN_IF_ERROR(send(x, object_name(key)));
  return std::move(x.response_body);
}

Result<uint64_t> S3Store::stat(std::string_view key) {
  RETURN_IF_ERROR(validate_key(key));
  Exchange x;
  x.method = "HEAD";
  x.path = "/" + options_.bucket + "/" + object_name(key);
  RETURN_IF_ERROR(send(x, object_name(key)));
  auto size = parse_length(x.response_headers);
  if (!size.ok()) return size.status().with_prefix("s3 HEAD " + object_name(key));
  return size;
}

Result<ListPage> S3Store::list(std::string_view prefix, std::string_view start_after,
                               size_t limit) {
  if (limit == 0 || limit > kDefaultListLimit) {
    return invalid_argument("list: limit must be 1.." + std::to_string(kDefaultListLimit));
  }
  const std::string base = options_.prefix.empty() ? "" : options_.prefix + "/";
  const std::string s3_prefix = base + std::string(prefix);
  Exchange x;
  x.method = "GET";
  x.path = "/" + options_.bucket;
  x.query = {{"list-type", "2"}, {"max-keys", std::to_string(limit)}, {"prefix", s3_prefix}};
  if (!start_after.empty()) x.query.emplace_back("start-after", base + std::string(start_after));
  RETURN_IF_ERROR(send(x, "list " + s3_prefix));
  auto parsed = s3xml::parse_list_result(x.response_body);
  if (!parsed.ok())
    return internal_error("s3 list " + s3_prefix + ": " + std::string(parsed.status().message()));
  ListPage page;
  page.truncated = parsed->truncated;
  for (auto& o : parsed->objects) {
    if (!o.key.starts_with(s3_prefix) || o.key.size() <= base.size()) {
      return internal_error("s3 list " + s3_prefix + ": the server returned key " + o.key);
    }
    o.key.erase(0, base.size());
    if (!page.objects.empty() && !(page.objects.back().key < o.key)) {
      return internal_error("s3 list " + s3_prefix + ": keys out of order");
    }
    page.objects.push_back(std::move(o));
  }
  if (page.objects.size() > limit) {
    return internal_error("s3 list " + s3_prefix + ": more keys than max-keys");
  }
  return page;
}

Status S3Store::delete_batch(std::span<const std::string> keys) {
  if (keys.size() > kMaxDeleteBatch) {
    return invalid_argument("delete_batch: at most " + std::to_string(kMaxDeleteBatch) + " keys");
  }
  for (const auto& k : keys) RETURN_IF_ERROR(validate_key(k));
  if (keys.empty()) return ok_status();
  std::vector<std::string> objects;
  objects.reserve(keys.size());
  for (const auto& k : keys) objects.push_back(object_name(k));
  Exchange x;
  x.method = "POST";
  x.path = "/" + options_.bucket;
  x.query = {{"delete", ""}};
  x.body = s3xml::delete_request_body(objects);
  x.headers.emplace_back("content-md5", md5_base64(x.body));
  x.headers.emplace_back("content-type", "application/xml");
  const std::string what = "delete " + std::to_string(keys.size()) + " keys";
  RETURN_IF_ERROR(send(x, what));
  auto failures = s3xml::parse_delete_result(x.response_body);
  if (!failures.ok())
    return internal_error("s3 " + what + ": " + std::string(failures.status().message()));
  for (const auto& f : *failures) {
    if (f.code == "NoSuchKey") continue;
    std::string text = "s3 delete " + f.key + ": " + f.code;
    if (!f.message.empty()) text += ": " + f.message;
    if (f.code == "AccessDenied") return permission_denied(text);
    return internal_error(text);
  }
  return ok_status();
}

Status S3Store::check_bucket() {
  Exchange x;
  x.method = "HEAD";
  x.path = "/" + options_.bucket;
  Status s = send(x, "bucket " + options_.bucket);
  if (s.code() == Code::kNotFound) return failed_precondition(s.message());
  return s;
}

Result<std::string> S3Store::presign(std::string_view method, std::string_view key,
                                     std::chrono::seconds expires,
                                     std::chrono::system_clock::time_point at) const {
  RETURN_IF_ERROR(validate_key(key));
  sigv4::Request request;
  request.method = std::string(method);
  request.path = "/" + options_.bucket + "/" + object_name(key);
  request.headers.emplace_back("host", endpoint_.authority);
  sigv4::Credentials credentials{options_.access_key_id, options_.secret_access_key, ""};
  sigv4::Signing signing{options_.region, "s3", sigv4::amz_date(at)};
  return sigv4::presign(request, endpoint_.tls ? "https" : "http", credentials, signing,
                        expires.count());
}

Result<std::string> S3Store::presign_get(std::string_view key, std::chrono::seconds expires,
                                         std::chrono::system_clock::time_point at) const {
  return presign("GET", key, expires, at);
}

Result<std::string> S3Store::presign_put(std::string_view key, std::chrono::seconds expires,
                                         std::chrono::system_clock::time_point at) const {
  return presign("PUT", key, expires, at);
}

}  // namespace cb::state
