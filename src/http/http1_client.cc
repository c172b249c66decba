#include "http/http1_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

namespace cb::http {

namespace {

// 16 KiB per read: one TLS record.
constexpr size_t kReadSize = 16 * 1024;
// While request() reads a large body of a declared length: a box's restore reads 8 MiB chunk
// batches from the door's unix socket, 32 reads and parser steps each at 256 KiB.
constexpr size_t kLargeReadSize = 256 * 1024;
// request() grows its body to the declared length once, up to this much (a door's chunk batch
// answer, 8 MiB and its last chunk); beyond, it grows as the bytes come: the length is the
// server's word, not yet backed by bytes.
constexpr uint64_t kMaxBodyReserve = 16u << 20;

bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    return lower(x) == lower(y);
  });
}

bool has_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

void remove_fields(Headers& headers, std::string_view name) {
  std::erase_if(headers, [&](const Header& h) { return iequals(h.name, name); });
}

asio::awaitable<Result<bool>> status_as_result(asio::awaitable<Status> op) {
  Status st = co_await std::move(op);
  if (!st.ok()) co_return st;
  co_return true;
}

Http1Response response_from(const Http1ResponseHead& head) {
  Http1Response r;
  r.status = head.status;
  r.reason = head.reason;
  r.headers = head.headers;
  r.keep_alive = head.keep_alive;
  return r;
}

std::string authority_for(const std::string& host, uint16_t port, bool tls) {
  std::string h = host;
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";  // IPv6 literal
  if (port == 0 || port == (tls ? 443 : 80)) return h;
  return fmt::format("{}:{}", h, port);
}

Headers with_field(Headers headers, std::string_view name, std::string_view value) {
  headers.push_back(Header{std::string(name), std::string(value)});
  return headers;
}

}  // namespace

Http1Client::Http1Client(std::unique_ptr<net::Stream> stream, std::string authority)
    : stream_(std::move(stream)),
      authority_(std::move(authority)),
      parser_(*this,
              [] {
                Http1ParserOptions o;
                o.pause_after_message = true;  // never parse past the response being read
                return o;
              }()),
      read_size_(kReadSize) {}

Http1Client::~Http1Client() = default;

void Http1Client::on_response_head(Http1ResponseHead&& head) {
  if (head.status >= 100 && head.status < 200 && head.status != 101) {
    interim_ = true;  // 100 Continue, 103 Early Hints: the final response follows
    return;
  }
  head_ = std::move(head);
}

void Http1Client::on_body(std::span<const char> data) { body_.append(data.data(), data.size()); }

void Http1Client::on_message_complete(Headers&& trailers) {
  if (interim_) {
    interim_ = false;
    return;
  }
  message_complete_ = true;
  trailers_ = std::move(trailers);
}

bool Http1Client::reusable() const {
  return !broken_ && !closing_ && !request_open_ && !response_expected_ && stream_ != nullptr;
}

void Http1Client::close() {
  broken_ = true;
  if (stream_ != nullptr) stream_->close();
}

Status Http1Client::fail(Status status) {
  close();
  return status;
}

asio::awaitable<Status> Http1Client::write_out(std::string data, net::Deadline deadline) {
  // |data| lives in this frame until the write finished or was cancelled.
  auto r =
      co_await net::with_deadline(status_as_result(stream_->write(data)), deadline, "http1 write");
  if (!r.ok()) co_return fail(r.status());
  co_return ok_status();
}

asio::awaitable<Status> Http1Client::write_view(std::string_view data, net::Deadline deadline) {
  auto r = co_await net::with_deadline(
      status_as_result(stream_->write(std::span<const char>(data.data(), data.size()))), deadline,
      "http1 write");
  if (!r.ok()) co_return fail(r.status());
  co_return ok_status();
}

asio::awaitable<Status> Http1Client::pump(net::Deadline deadline) {
  if (broken_ || stream_ == nullptr) co_return failed_precondition("connection is closed");
  if (!raw_.empty()) {
    auto used = parser_.feed(std::span<const char>(raw_.data(), raw_.size()));
    if (!used.ok()) co_return fail(used.status());
    raw_.consume(*used);
    if (*used > 0) co_return ok_status();
  }
  if (eof_) co_return fail(unavailable("connection closed by the server"));
  // The read goes straight into raw_, after the unparsed bytes.
  auto n = co_await net::with_deadline(stream_->read_some(raw_.prepare(read_size_)), deadline,
                                       "http1 read");
  if (n.ok()) raw_.commit(*n);
  if (!n.ok()) {
    if (n.status().code() != Code::kUnavailable) co_return fail(n.status());
    // The server closed: this completes a body delimited by the close, or is an error.
    eof_ = true;
    closing_ = true;
    Status finished = parser_.finish();
    if (!finished.ok()) co_return fail(unavailable(finished.message()));
    co_return ok_status();
  }
  co_return ok_status();
}

void Http1Client::end_response() {
  response_expected_ = false;
  head_returned_ = false;
  if (head_ && (!head_->keep_alive || head_->upgrade)) closing_ = true;
  if (parser_.done()) closing_ = true;
  // A connection the server ends, or whose request body is still open (the server answered
  // early), cannot carry another exchange.
  if (closing_ && stream_ != nullptr && !request_open_) stream_->close();
}

asio::awaitable<Status> Http1Client::send_head(std::string method, std::string target,
                                               Headers headers, net::Deadline deadline) {
  if (broken_ || closing_ || stream_ == nullptr)
    co_return failed_precondition("connection is not reusable");
  if (request_open_ || response_expected_)
    co_return failed_precondition("the previous exchange is not finished");

  BodyFraming framing = BodyFraming::kNone;
  uint64_t length = 0;
  if (const std::string* cl = find_header(headers, "content-length")) {
    auto [p, ec] = std::from_chars(cl->data(), cl->data() + cl->size(), length);
    if (ec != std::errc() || p != cl->data() + cl->size() || cl->empty())
      co_return invalid_argument(fmt::format("bad content-length {:?}", *cl));
    framing = BodyFraming::kLength;
  }
  if (const std::string* te = find_header(headers, "transfer-encoding")) {
    if (framing != BodyFraming::kNone)
      co_return invalid_argument("both content-length and transfer-encoding");
    if (!has_token(*te, "chunked"))
      co_return invalid_argument(fmt::format("unsupported transfer-encoding {:?}", *te));
    framing = BodyFraming::kChunked;
  }
  if (find_header(headers, "host") == nullptr) {
    headers.insert(headers.begin(), Header{std::string("host"), authority_});
  }
  auto head = serialize_request_head(method, target, headers);
  if (!head.ok()) co_return head.status();

  parser_.expect_response(method);
  response_expected_ = true;
  head_.reset();
  head_returned_ = false;
  body_ = std::string();  // not clear(): a failed request may have left a large reservation
  // A large response grew the read buffer; an idle kept connection gives that back. No read
  // is under way here: the previous exchange is finished.
  if (raw_.empty() && raw_.capacity() > kReadSize) raw_.release();
  message_complete_ = false;
  trailers_.clear();
  interim_ = false;
  request_framing_ = framing;
  request_remaining_ = length;
  request_open_ = framing == BodyFraming::kChunked || (framing == BodyFraming::kLength && length);
  read_size_ = kReadSize;
  co_return co_await write_out(std::move(*head), deadline);
}

asio::awaitable<Status> Http1Client::write_body(std::string data, net::Deadline deadline) {
  if (broken_) co_return failed_precondition("connection is closed");
  if (!request_open_) co_return failed_precondition("no request body is open");
  if (data.empty()) co_return ok_status();
  std::string out;
  if (request_framing_ == BodyFraming::kLength) {
    if (data.size() > request_remaining_)
      co_return failed_precondition(fmt::format(
          "{} body bytes exceed the {} left of content-length", data.size(), request_remaining_));
    request_remaining_ -= data.size();
    if (request_remaining_ == 0) request_open_ = false;  // the body is complete
    out = std::move(data);
  } else {
    append_chunk(out, data);
  }
  co_return co_await write_out(std::move(out), deadline);
}

asio::awaitable<Status> Http1Client::write_body_pieces(std::span<const std::string_view> pieces,
                                                       net::Deadline deadline) {
  // Below these sizes a copy costs less than another system call.
  constexpr size_t kWhole = 64 * 1024;
  constexpr size_t kDirect = 16 * 1024;
  size_t total = 0;
  for (std::string_view p : pieces) total += p.size();
  if (total <= kWhole || request_framing_ != BodyFraming::kLength) {
    std::string all;
    all.reserve(total);
    for (std::string_view p : pieces) all += p;
    co_return co_await write_body(std::move(all), deadline);
  }
  if (broken_) co_return failed_precondition("connection is closed");
  if (!request_open_) co_return failed_precondition("no request body is open");
  if (total > request_remaining_)
    co_return failed_precondition(fmt::format("{} body bytes exceed the {} left of content-length",
                                              total, request_remaining_));
  request_remaining_ -= total;
  if (request_remaining_ == 0) request_open_ = false;  // the body is complete
  std::string gathered;
  for (std::string_view p : pieces) {
    if (p.size() < kDirect) {
      gathered += p;
      continue;
    }
    if (!gathered.empty()) {
      Status st = co_await write_out(std::move(gathered), deadline);
      if (!st.ok()) co_return st;
      gathered.clear();
    }
    Status st = co_await write_view(p, deadline);
    if (!st.ok()) co_return st;
  }
  if (!gathered.empty()) co_return co_await write_out(std::move(gathered), deadline);
  co_return ok_status();
}

asio::awaitable<Status> Http1Client::finish_body(Headers trailers, net::Deadline deadline) {
  if (broken_) co_return failed_precondition("connection is closed");
  if (!request_open_) {
    if (trailers.empty() && request_framing_ != BodyFraming::kChunked) co_return ok_status();
    co_return failed_precondition("no request body is open");
  }
  std::string out;
  if (request_framing_ == BodyFraming::kLength) {
    if (!trailers.empty()) co_return failed_precondition("trailers need a chunked request body");
    if (request_remaining_ > 0)
      co_return failed_precondition(
          fmt::format("request body ended {} bytes short of content-length", request_remaining_));
    request_open_ = false;
    co_return ok_status();
  }
  CO_RETURN_IF_ERROR(append_last_chunk(out, trailers));
  request_open_ = false;
  Status st = co_await write_out(std::move(out), deadline);
  if (st.ok() && !response_expected_ && closing_ && stream_ != nullptr) stream_->close();
  co_return st;
}

asio::awaitable<Result<Http1Response>> Http1Client::read_head(net::Deadline deadline) {
  if (!response_expected_) co_return failed_precondition("no request awaits a response");
  if (head_returned_) co_return failed_precondition("response head already read");
  while (!head_) {
    Status st = co_await pump(deadline);
    if (!st.ok()) co_return st;
  }
  head_returned_ = true;
  co_return response_from(*head_);
}

asio::awaitable<Result<std::string>> Http1Client::read_body(net::Deadline deadline) {
  if (!response_expected_ || !head_returned_)
    co_return failed_precondition("read_body before read_head");
  for (;;) {
    if (!body_.empty()) {
      std::string out;
      out.swap(body_);
      co_return out;
    }
    if (message_complete_) {
      end_response();
      co_return std::string();
    }
    Status st = co_await pump(deadline);
    if (!st.ok()) co_return st;
  }
}

asio::awaitable<Result<Http1Response>> Http1Client::request(std::string method, std::string target,
                                                            Headers headers, std::string body,
                                                            net::Deadline deadline) {
  const std::string_view piece = body;  // |body| lives in this frame until the end
  co_return co_await request_pieces(std::move(method), std::move(target), std::move(headers),
                                    std::span<const std::string_view>(&piece, 1), deadline);
}

asio::awaitable<Result<Http1Response>> Http1Client::request_pieces(
    std::string method, std::string target, Headers headers,
    std::span<const std::string_view> pieces, net::Deadline deadline) {
  remove_fields(headers, "content-length");
  remove_fields(headers, "transfer-encoding");
  size_t total = 0;
  for (std::string_view p : pieces) total += p.size();
  if (total > 0 || method == "POST" || method == "PUT" || method == "PATCH")
    headers = with_field(std::move(headers), "content-length", std::to_string(total));
  Status sent =
      co_await send_head(std::move(method), std::move(target), std::move(headers), deadline);
  if (!sent.ok()) co_return sent;
  if (total > 0) {
    Status wrote = co_await write_body_pieces(pieces, deadline);
    if (!wrote.ok()) co_return wrote;
  }
  auto head = co_await read_head(deadline);
  if (!head.ok()) co_return head.status();
  Http1Response response = std::move(*head);
  // The whole body gathers in body_ (on_body appends), grown once to a declared length, and
  // is moved out at the end: no copy per piece. Only for a body still to come: a response to
  // HEAD, a 204 or a 304 may declare a length it does not carry.
  if (!message_complete_ && head_ && head_->content_length) {
    const uint64_t length = *head_->content_length;
    body_.reserve(size_t(std::min(length, kMaxBodyReserve)));
    if (length >= kLargeReadSize) read_size_ = kLargeReadSize;
  }
  while (!message_complete_) {
    Status st = co_await pump(deadline);
    if (!st.ok()) co_return st;
  }
  end_response();
  response.body = std::move(body_);
  body_.clear();
  response.trailers = trailers_;
  if (response.status == 101) close();  // switched protocols: no more HTTP/1.1 here
  co_return response;
}

asio::awaitable<Result<Http1Upgraded>> Http1Client::upgrade(std::string target, Headers headers,
                                                            net::Deadline deadline) {
  if (find_header(headers, "upgrade") == nullptr)
    co_return invalid_argument("upgrade request without an upgrade field");
  if (find_header(headers, "connection") == nullptr)
    headers = with_field(std::move(headers), "connection", "upgrade");
  Status sent =
      co_await send_head(std::string("GET"), std::move(target), std::move(headers), deadline);
  if (!sent.ok()) co_return sent;
  auto head = co_await read_head(deadline);
  if (!head.ok()) co_return head.status();
  if (head->status != 101) {
    // Read the refusal to its end so the connection stays usable when the server keeps it.
    for (;;) {
      auto piece = co_await read_body(deadline);
      if (!piece.ok()) co_return piece.status();
      if (piece->empty()) break;
    }
    co_return failed_precondition(
        fmt::format("server answered {} {} to the upgrade", head->status, head->reason));
  }
  Http1Upgraded up;
  up.response = std::move(*head);
  up.leftover = raw_.take();
  up.stream = std::move(stream_);
  response_expected_ = false;
  broken_ = true;
  co_return up;
}

asio::awaitable<Result<std::unique_ptr<Http1Client>>> dial_http1(net::Executor ex,
                                                                 Http1DialOptions options,
                                                                 net::Deadline deadline) {
  std::unique_ptr<net::Stream> stream;
  std::string authority;
  if (!options.unix_path.empty()) {
    CO_ASSIGN_OR_RETURN(auto s, co_await net::dial_unix(ex, options.unix_path, deadline));
    stream = net::make_stream(std::move(s));
    authority = "localhost";
  } else {
    CO_ASSIGN_OR_RETURN(auto s, co_await net::dial_tcp(ex, options.host, options.port, deadline));
    if (options.tls) {
      std::string name = options.server_name.empty() ? options.host : options.server_name;
      CO_ASSIGN_OR_RETURN(stream,
                          co_await net::tls_connect(options.tls, std::move(s), name, deadline));
      std::string alpn = stream->alpn();
      if (!alpn.empty() && alpn != "http/1.1")
        co_return failed_precondition(fmt::format("{}:{} negotiated {:?} instead of http/1.1",
                                                  options.host, options.port, alpn));
    } else {
      stream = net::make_stream(std::move(s));
    }
    authority = authority_for(options.host, options.port, options.tls != nullptr);
  }
  co_return std::make_unique<Http1Client>(std::move(stream), std::move(authority));
}

}  // namespace cb::http
