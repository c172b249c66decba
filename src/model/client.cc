#include "model/client.h"

#include "http/http1_client.h"
#include "http/sse.h"
#include "model/usage.h"
#include "model/wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace cb::model {

namespace {

using std::chrono::milliseconds;

// An error body is read up to this size for its message; the rest is not needed.
constexpr size_t kMaxErrorBody = 64 * 1024;
// After a stream's terminal event: how long and how much is read to reach the body's end.
constexpr milliseconds kDrainWait{250};
constexpr size_t kMaxDrain = 64 * 1024;
// A non-streamed answer larger than this is refused (a model's answer is kilobytes).
constexpr size_t kMaxJsonBody = 32u << 20;

bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    return lower(x) == lower(y);
  });
}

void set_header(http::Headers& headers, std::string_view name, std::string value) {
  for (http::Header& h : headers) {
    if (iequals(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  }
  headers.push_back(http::Header{std::string(name), std::move(value)});
}

bool cancelled_code(const Status& st) { return st.code() == Code::kCancelled; }

asio::awaitable<bool> is_cancelled() {
  asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() != asio::cancellation_type::none;
}

}  // namespace

struct Client::Attempt {
  bool delivered = false;  // a delta reached the caller: nothing may be retried any more
  bool retryable = false;
  std::optional<milliseconds> retry_after;
};

Result<Endpoint> parse_endpoint(std::string_view url) {
  Endpoint ep;
  ep.url = std::string(url);
  if (url.starts_with("unix:")) {
    std::string_view path = url.substr(5);
    while (path.starts_with("//")) path.remove_prefix(1);  // unix:///run/x.sock
    if (!path.starts_with("/"))
      return invalid_argument(
          fmt::format("model endpoint {:?}: unix: needs an absolute path", url));
    ep.unix_path = std::string(path);
    return ep;
  }
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
    ep.port = 80;
  } else if (url.starts_with("https://")) {
    rest = url.substr(8);
    ep.tls = true;
    ep.port = 443;
  } else {
    return invalid_argument(
        fmt::format("model endpoint {:?}: use http://, https:// or unix:", url));
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (prefix.find_first_of("?#") != std::string_view::npos)
    return invalid_argument(fmt::format("model endpoint {:?}: no query or fragment", url));
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  ep.path_prefix = std::string(prefix);
  if (authority.find('@') != std::string_view::npos)
    return invalid_argument(
        "model endpoint: credentials in the URL are refused; give the key apart");
  std::string_view host = authority;
  std::string_view port;
  if (authority.starts_with("[")) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return invalid_argument(fmt::format("model endpoint {:?}: unclosed [", url));
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (after.starts_with(":"))
      port = after.substr(1);
    else if (!after.empty())
      return invalid_argument(fmt::format("model endpoint {:?}: bad authority", url));
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument(fmt::format("model endpoint {:?}: no host", url));
  ep.host = std::string(host);
  if (!port.empty()) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535)
      return invalid_argument(fmt::format("model endpoint {:?}: bad port", url));
    ep.port = static_cast<uint16_t>(value);
  }
  return ep;
}

http::Headers request_headers(const Endpoint& endpoint, const ModelInfo& model, bool stream) {
  http::Headers h;
  h.push_back(http::Header{std::string("content-type"), std::string("application/json")});
  h.push_back(http::Header{std::string("accept"),
                           std::string(stream ? "text/event-stream" : "application/json")});
  h.push_back(http::Header{std::string("user-agent"), std::string("cocoonbox")});
  if (model.wire == Wire::kAnthropic) {
    h.push_back(http::Header{std::string("anthropic-version"), std::string(kAnthropicVersion)});
    if (!endpoint.api_key.empty())
      h.push_back(http::Header{std::string("x-api-key"), endpoint.api_key});
  } else if (!endpoint.api_key.empty()) {
    h.push_back(http::Header{std::string("authorization"), "Bearer " + endpoint.api_key});
  }
  for (const http::Header& e : endpoint.extra_headers) set_header(h, e.name, e.value);
  return h;
}

std::optional<milliseconds> retry_after(const http::Headers& headers) {
  auto number = [](const std::string& s) -> std::optional<double> {
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !(v >= 0) || v > 1e9) return std::nullopt;
    return v;
  };
  if (const std::string* ms = http::find_header(headers, "retry-after-ms")) {
    if (auto v = number(*ms)) return milliseconds(static_cast<int64_t>(std::ceil(*v)));
  }
  if (const std::string* s = http::find_header(headers, "retry-after")) {
    if (auto v = number(*s)) return milliseconds(static_cast<int64_t>(std::ceil(*v * 1000)));
  }
  return std::nullopt;
}

bool retryable_http_status(int status) {
  return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

Client::Client(net::Executor executor, Endpoint endpoint)
    : executor_(std::move(executor)),
      endpoint_(std::move(endpoint)),
      jitter_state_(
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) | 1) {}

Client::~Client() {
  for (Idle& i : idle_) i.conn->close();
}

std::unique_ptr<http::Http1Client> Client::take_idle() {
  const auto now = std::chrono::steady_clock::now();
  while (!idle_.empty()) {
    Idle i = std::move(idle_.back());
    idle_.pop_back();
    if (now - i.since < kMaxIdleAge && i.conn->reusable()) return std::move(i.conn);
    i.conn->close();
  }
  return nullptr;
}

void Client::keep(std::unique_ptr<http::Http1Client> conn) {
  if (conn == nullptr) return;
  if (!conn->reusable()) {
    conn->close();
    return;
  }
  if (idle_.size() >= kMaxIdle) {
    idle_.front().conn->close();
    idle_.erase(idle_.begin());
  }
  idle_.push_back(Idle{std::move(conn), std::chrono::steady_clock::now()});
}

asio::awaitable<Status> Client::ensure_tls() {
  if (!endpoint_.tls || endpoint_.tls_context != nullptr) co_return ok_status();
  net::TlsClientOptions o;
  o.alpn = {std::string("http/1.1")};
  auto ctx = net::TlsContext::client(o);
  if (!ctx.ok()) co_return ctx.status();
  endpoint_.tls_context = std::move(*ctx);
  co_return ok_status();
}

asio::awaitable<Result<Response>> Client::call(const ModelInfo& model, const Request& request,
                                               CallOptions options) {
  // The body as pieces: the encoder's own text (no copy of the conversation), or one string.
  RequestEncoder::Pieces body;
  std::string whole;
  if (options.encoder != nullptr) {
    auto pieces =
        options.encoder->pieces(request, model, options.stream, options.encoder_unchanged);
    if (!pieces.ok()) co_return pieces.status();
    body = std::move(*pieces);
  } else {
    auto text = request_body(request, model, options.stream);
    if (!text.ok()) co_return text.status();
    whole = std::move(*text);
    body.size = whole.size();
    if (!whole.empty()) body.pieces.push_back(whole);
  }
  Status tls = co_await ensure_tls();
  if (!tls.ok()) co_return tls;
  const int max_attempts = std::max(1, options.retry.max_attempts);
  for (int n = 1;; ++n) {
    Attempt state;
    const std::span<const std::string_view> pieces(body.pieces);
    Result<Response> r = co_await attempt(model, pieces, body.size, options, state);
    if (r.ok()) {
      r->attempts = n;
      co_return r;
    }
    Status error = r.status();
    bool cancelled_now = co_await is_cancelled();
    if (cancelled_now || cancelled_code(error)) co_return cancelled("model call cancelled");
    if (!state.retryable || state.delivered || n >= max_attempts) {
      if (n > 1) co_return error.with_prefix(fmt::format("after {} attempts", n));
      co_return error;
    }
    milliseconds wait;
    if (state.retry_after) {
      if (*state.retry_after > options.retry.max_retry_after)
        co_return error.with_prefix(fmt::format("gateway asks to retry after {} s, too long",
                                                state.retry_after->count() / 1000));
      wait = *state.retry_after;
    } else {
      // Exponential backoff with "equal jitter": half fixed, half random.
      int64_t base = options.retry.initial_backoff.count() << std::min(n - 1, 20);
      base = std::min<int64_t>(base, options.retry.max_backoff.count());
      jitter_state_ ^= jitter_state_ << 13;
      jitter_state_ ^= jitter_state_ >> 7;
      jitter_state_ ^= jitter_state_ << 17;
      int64_t half = base / 2;
      wait = milliseconds(half + (half > 0 ? static_cast<int64_t>(jitter_state_ % (half + 1)) : 0));
    }
    if (options.deadline != net::kNoDeadline && net::after(wait) >= options.deadline)
      co_return error.with_prefix("no time left to retry");
    if (options.on_retry) options.on_retry(n, error, wait);
    net::Timer timer(executor_, wait);
    auto [ec] = co_await timer.async_wait();
    if (ec) co_return cancelled("model call cancelled while waiting to retry");
  }
}

asio::awaitable<Result<Response>> Client::attempt(const ModelInfo& model,
                                                  std::span<const std::string_view> body,
                                                  size_t body_size, const CallOptions& options,
                                                  Attempt& state) {
  const net::Deadline deadline = options.deadline;
  auto read_deadline = [&] { return std::min(deadline, net::after(options.idle_timeout)); };
  const std::string where = endpoint_.unix_path.empty() ? endpoint_.url : endpoint_.unix_path;

  std::unique_ptr<http::Http1Client> owned = take_idle();
  bool reused = owned != nullptr;
  for (;;) {
    if (owned == nullptr) {
      http::Http1DialOptions dial;
      dial.host = endpoint_.host;
      dial.port = endpoint_.port;
      dial.unix_path = endpoint_.unix_path;
      dial.tls = endpoint_.tls ? endpoint_.tls_context : nullptr;
      auto conn = co_await http::dial_http1(executor_, dial, deadline);
      if (!conn.ok()) {
        state.retryable = conn.status().code() == Code::kUnavailable;
        co_return conn.status().with_prefix(fmt::format("model gateway {}: connect", where));
      }
      owned = std::move(*conn);
    }
    http::Headers headers = request_headers(endpoint_, model, options.stream);
    headers.push_back(http::Header{std::string("content-length"), std::to_string(body_size)});
    std::string target = endpoint_.path_prefix + std::string(wire_path(model.wire));
    Status sent = co_await owned->send_head(std::string("POST"), std::move(target),
                                            std::move(headers), deadline);
    if (sent.ok()) sent = co_await owned->write_body_pieces(body, deadline);
    if (sent.ok()) break;
    owned->close();
    owned.reset();
    if (reused && sent.code() == Code::kUnavailable) {
      // A kept connection the other side closed while idle: the request did not reach it
      // whole (a body shorter than its content-length is never handled). Dial once more.
      reused = false;
      continue;
    }
    state.retryable = sent.code() == Code::kUnavailable;
    co_return sent.with_prefix(fmt::format("model gateway {}: sending the request", where));
  }
  http::Http1Client& client = *owned;

  auto head = co_await client.read_head(read_deadline());
  if (!head.ok()) {
    state.retryable = head.status().code() == Code::kUnavailable;
    co_return head.status().with_prefix(fmt::format("model gateway {}: no answer", where));
  }

  if (head->status != 200) {
    std::string error_body;
    while (error_body.size() < kMaxErrorBody) {
      auto piece = co_await client.read_body(read_deadline());
      if (!piece.ok() || piece->empty()) break;
      error_body += *piece;
    }
    client.close();
    state.retryable = retryable_http_status(head->status);
    state.retry_after = retry_after(head->headers);
    co_return error_status(head->status, head->reason, error_body);
  }

  const std::string* content_type = http::find_header(head->headers, "content-type");
  const bool sse = content_type != nullptr && is_event_stream(*content_type);
  if (!sse) {
    // Not streamed (asked so, or a gateway that answered the stream with one JSON body).
    std::string all;
    for (;;) {
      auto piece = co_await client.read_body(read_deadline());
      if (!piece.ok()) {
        state.retryable = piece.status().code() == Code::kUnavailable;
        co_return piece.status().with_prefix(
            fmt::format("model gateway {}: reading the answer", where));
      }
      if (piece->empty()) break;
      all += *piece;
      if (all.size() > kMaxJsonBody)
        co_return resource_exhausted(
            fmt::format("model answer larger than {} bytes", kMaxJsonBody));
    }
    keep(std::move(owned));  // read to its end: reusable unless the gateway asked to close
    auto parsed = parse_response(model.wire, all);
    if (!parsed.ok()) {
      state.retryable = parsed.status().code() == Code::kUnavailable ||
                        parsed.status().code() == Code::kResourceExhausted;
      co_return parsed.status();
    }
    // The whole answer arrives at once: report it as deltas too, so callers see one shape.
    if (options.on_delta) {
      size_t tools = 0;
      for (const Part& p : parsed->message.parts) {
        Delta d;
        if (p.kind == PartKind::kText) {
          d.kind = Delta::Kind::kText;
          d.text = p.text;
        } else {
          d.kind = Delta::Kind::kToolCallStart;
          d.index = tools++;
          d.id = p.id;
          d.name = p.name;
        }
        options.on_delta(d);
      }
    }
    co_return parsed;
  }

  http::SseParser parser;
  std::unique_ptr<StreamAssembler> assembler = make_stream_assembler(model.wire);
  std::vector<Delta> deltas;
  bool clean_end = false;
  std::string cut_reason;
  while (!assembler->done()) {
    // A cancellation that came while the last piece was being handled (say, from on_delta)
    // found no read to cancel; it must not be lost until the next byte arrives.
    bool cancelled_now = co_await is_cancelled();
    if (cancelled_now) {
      client.close();
      co_return cancelled("model call cancelled");
    }
    auto piece = co_await client.read_body(read_deadline());
    if (!piece.ok()) {
      client.close();
      if (cancelled_code(piece.status())) co_return piece.status();
      if (piece.status().code() == Code::kDeadlineExceeded)
        co_return deadline_exceeded(fmt::format("model stream from {} stalled after {} events: {}",
                                                where, assembler->events(),
                                                piece.status().message()));
      cut_reason = std::string(piece.status().message());
      break;
    }
    if (piece->empty()) {
      clean_end = true;
      break;
    }
    auto events = parser.feed(*piece);
    if (!events.ok()) {
      client.close();
      co_return events.status().with_prefix("model stream");
    }
    for (const http::SseEvent& e : *events) {
      Status st = assembler->on_event(e, deltas);
      for (const Delta& d : deltas) {
        state.delivered = true;
        if (options.on_delta) options.on_delta(d);
      }
      deltas.clear();
      if (!st.ok()) {
        client.close();
        state.retryable = st.code() == Code::kUnavailable || st.code() == Code::kResourceExhausted;
        co_return st;
      }
      if (assembler->done()) break;
    }
  }
  if (clean_end) {
    keep(std::move(owned));
  } else if (assembler->done()) {
    // The terminal event came; the body's end (the last chunk, OpenAI's [DONE]) follows at
    // once from a well-behaved gateway. Read it briefly so the connection can be kept; one
    // that lingers is closed instead.
    const net::Deadline drain = std::min(read_deadline(), net::after(kDrainWait));
    size_t drained = 0;
    for (;;) {
      auto piece = co_await client.read_body(drain);
      if (!piece.ok() || piece->empty()) break;
      drained += piece->size();
      if (drained > kMaxDrain) {
        client.close();
        break;
      }
    }
    keep(std::move(owned));
  } else {
    client.close();
  }
  auto response = assembler->finish(clean_end);
  if (!response.ok()) {
    state.retryable = response.status().code() == Code::kUnavailable;
    if (!cut_reason.empty())
      co_return Status(response.status().code(),
                       fmt::format("{}: {}", response.status().message(), cut_reason));
    co_return response.status();
  }
  co_return response;
}

}  // namespace cb::model
