#include "http/http1_codec.h"

#include <fmt/format.h>
#include <http_parser.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iterator>
#include <limits>
#include <utility>

namespace cb::http {
namespace {

// A chunk-size line is a hex number plus extensions we ignore; 4 KiB is far more than any
// legitimate sender needs, and http-parser itself does not bound this line.
constexpr std::size_t kMaxChunkLineBytes = 4096;
// 2^60 bytes: beyond any real chunk, and keeps size * 16 + digit from overflowing.
constexpr std::uint64_t kMaxChunkSize = std::uint64_t{1} << 60;

// tchar, RFC 9110 §5.6.2.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string to_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), ascii_lower);
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Untrusted bytes made safe for an error message: at most 64 bytes, controls and non-ASCII
// as \xNN.
std::string printable(std::string_view s) {
  constexpr std::size_t kMax = 64;
  std::string out;
  for (char c : s.substr(0, kMax)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

std::string describe_control(char c) {
  switch (c) {
    case '\r':
      return "CR";
    case '\n':
      return "LF";
    case '\0':
      return "NUL";
    default:
      return fmt::format("control byte 0x{:02x}", static_cast<unsigned char>(c));
  }
}

std::size_t count_fields(const Headers& headers, std::string_view name) {
  return static_cast<std::size_t>(std::count_if(headers.begin(), headers.end(),
                                                [&](const Header& h) { return h.name == name; }));
}

// Checks that every field can be written without changing the message's framing: names are
// tokens, values hold no CR, LF, NUL or other control byte except HTAB.
Status check_fields(const Headers& fields, std::string_view what) {
  for (const Header& h : fields) {
    if (!is_token(h.name)) {
      return invalid_argument(fmt::format(
          "{} name \"{}\" is not a token (holds CR, LF, NUL, whitespace or a separator)", what,
          printable(h.name)));
    }
    for (char c : h.value) {
      if (is_control(c) && c != '\t') {
        return invalid_argument(
            fmt::format("{} \"{}\": value holds {}", what, h.name, describe_control(c)));
      }
    }
  }
  return ok_status();
}

void append_fields(std::string& out, const Headers& fields) {
  for (const Header& h : fields) {
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
}

}  // namespace

namespace internal {

enum class Role { kRequest, kResponse };

// The machinery shared by both parsers. Every byte first passes a strict framing scanner
// (scan()), which finds the exact end of each header section and message; only bytes it
// accepted are handed to http-parser, one section or message at a time, and http-parser's
// callbacks must agree with the scanner on where heads and messages end.
class Http1Engine {
 public:
  Http1Engine(Role role, Http1RequestVisitor* request_visitor,
              Http1ResponseVisitor* response_visitor, const Http1ParserOptions& options);
  Http1Engine(const Http1Engine&) = delete;
  Http1Engine& operator=(const Http1Engine&) = delete;

  Result<std::size_t> feed(std::span<const char> data);
  Status finish();
  void reset();
  void expect_response(std::string_view method) { expected_.emplace_back(method); }
  void continue_after_upgrade() {
    CB_CHECK(upgraded_);
    upgraded_ = false;
  }
  int error_http_status() const { return error_.ok() ? 0 : error_http_status_; }
  bool upgraded() const { return upgraded_; }
  bool done() const { return upgraded_ || closed_; }

  // http-parser callbacks, reached through the trampolines below. A nonzero return stops
  // http-parser; the reason is then in error_.
  int on_url(const char* at, std::size_t n);
  int on_status(const char* at, std::size_t n);
  int on_header_field(const char* at, std::size_t n);
  int on_header_value(const char* at, std::size_t n);
  int on_headers_complete();
  int on_body(const char* at, std::size_t n);
  int on_message_complete();

 private:
  // Scanner states. Start line, header section and trailer section share the line states.
  enum class Lex : std::uint8_t {
    kMessageStart,    // before a message; empty lines (CRLF) are skipped
    kLeadingCR,       // CR of such an empty line
    kLine,            // inside the start line or a field line
    kLineCR,          // CR ending a line
    kLineStart,       // start of a field line, or of the empty line ending the section
    kBlankCR,         // CR of that empty line
    kAwaitHead,       // head scanned; http-parser must call on_headers_complete
    kBodyLength,      // |remaining_| Content-Length bytes to go
    kBodyUntilClose,  // response body delimited by the connection close
    kChunkSize,       // hex digits of a chunk-size line
    kChunkSizeWs,     // whitespace after the chunk size
    kChunkExt,        // chunk extensions, ignored up to CR
    kChunkSizeCR,     // CR ending the chunk-size line
    kChunkData,       // |remaining_| bytes of chunk data to go
    kChunkDataCR,     // CR after chunk data
    kChunkDataLF,     // LF after chunk data
    kAwaitComplete,   // message scanned; http-parser must call on_message_complete
  };
  enum class Boundary { kNone, kHeadEnd, kMessageEnd };

  std::size_t scan(const char* data, std::size_t n, Boundary& boundary);
  bool count_section_byte();
  void execute(const char* data, std::size_t n);
  void init_http_parser();
  void start_message();
  int fail(int http_status, std::string_view message);
  int fail_mismatch(std::string_view what);
  void fail_from_http_parser(http_errno err);
  bool finish_field();
  bool read_transfer_encoding(bool& chunked);
  bool connection_persists() const;
  int request_head_complete(std::optional<std::uint64_t> content_length, bool chunked);
  int response_head_complete(std::optional<std::uint64_t> content_length, bool chunked);
  int set_framing(std::optional<std::uint64_t> length, bool chunked, bool until_close);
  bool body_too_large(std::uint64_t more) const;

  const Role role_;
  Http1RequestVisitor* const request_visitor_;    // set for kRequest
  Http1ResponseVisitor* const response_visitor_;  // set for kResponse
  const Http1ParserOptions options_;
  http_parser parser_{};
  bool parser_reset_pending_ = false;

  // Connection state.
  Status error_;
  int error_http_status_ = 400;
  bool upgraded_ = false;
  bool closed_ = false;
  bool finished_ = false;
  bool message_completed_ = false;    // set by on_message_complete during one execute()
  std::deque<std::string> expected_;  // methods of requests awaiting a response

  // Scanner state for the current message.
  Lex lex_ = Lex::kMessageStart;
  bool in_trailers_ = false;
  std::size_t section_bytes_ = 0;
  std::size_t field_count_ = 0;
  std::string start_line_prefix_;  // first bytes of the start line, to name an HTTP/2 preface
  std::uint64_t remaining_ = 0;
  std::uint64_t chunk_size_ = 0;
  std::size_t chunk_digits_ = 0;
  std::size_t chunk_line_bytes_ = 0;
  std::uint64_t body_bytes_ = 0;

  // Parsed pieces of the current message.
  std::string target_;
  std::string reason_;
  Headers headers_;
  Headers trailers_;
  std::string field_name_;
  std::string field_value_;
  bool have_field_ = false;
  bool in_value_ = false;
  bool message_upgrade_ = false;
  bool message_closes_ = false;
  bool interim_ = false;
};

namespace {

Http1Engine* engine_of(http_parser* p) { return static_cast<Http1Engine*>(p->data); }

int url_cb(http_parser* p, const char* at, std::size_t n) { return engine_of(p)->on_url(at, n); }
int status_cb(http_parser* p, const char* at, std::size_t n) {
  return engine_of(p)->on_status(at, n);
}
int header_field_cb(http_parser* p, const char* at, std::size_t n) {
  return engine_of(p)->on_header_field(at, n);
}
int header_value_cb(http_parser* p, const char* at, std::size_t n) {
  return engine_of(p)->on_header_value(at, n);
}
int headers_complete_cb(http_parser* p) { return engine_of(p)->on_headers_complete(); }
int body_cb(http_parser* p, const char* at, std::size_t n) { return engine_of(p)->on_body(at, n); }
int message_complete_cb(http_parser* p) { return engine_of(p)->on_message_complete(); }

const http_parser_settings& parser_settings() {
  static const http_parser_settings settings = [] {
    // Our scanner enforces max_header_bytes per parser. Lift http-parser's process-wide
    // limit (80 KiB at compile time) so that it never fires first with a vaguer error.
    http_parser_set_max_header_size(std::numeric_limits<std::uint32_t>::max());
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_url = url_cb;
    s.on_status = status_cb;
    s.on_header_field = header_field_cb;
    s.on_header_value = header_value_cb;
    s.on_headers_complete = headers_complete_cb;
    s.on_body = body_cb;
    s.on_message_complete = message_complete_cb;
    return s;
  }();
  return settings;
}

}  // namespace

Http1Engine::Http1Engine(Role role, Http1RequestVisitor* request_visitor,
                         Http1ResponseVisitor* response_visitor, const Http1ParserOptions& options)
    : role_(role),
      request_visitor_(request_visitor),
      response_visitor_(response_visitor),
      options_(options) {
  init_http_parser();
}

void Http1Engine::init_http_parser() {
  http_parser_init(&parser_, role_ == Role::kRequest ? HTTP_REQUEST : HTTP_RESPONSE);
  parser_.data = this;
  // Both default to 0 after init; spelled out because they are the security-relevant knobs:
  // no relaxed header characters, no Content-Length next to Transfer-Encoding: chunked.
  parser_.lenient_http_headers = 0;
  parser_.allow_chunked_length = 0;
  parser_reset_pending_ = false;
}

void Http1Engine::reset() {
  error_ = ok_status();
  error_http_status_ = 400;
  upgraded_ = closed_ = finished_ = message_completed_ = false;
  expected_.clear();
  start_message();
  init_http_parser();
}

void Http1Engine::start_message() {
  lex_ = Lex::kMessageStart;
  in_trailers_ = false;
  section_bytes_ = field_count_ = 0;
  start_line_prefix_.clear();
  remaining_ = chunk_size_ = body_bytes_ = 0;
  chunk_digits_ = chunk_line_bytes_ = 0;
  target_.clear();
  reason_.clear();
  headers_.clear();
  trailers_.clear();
  field_name_.clear();
  field_value_.clear();
  have_field_ = in_value_ = false;
  message_upgrade_ = message_closes_ = interim_ = false;
  parser_reset_pending_ = true;
}

int Http1Engine::fail(int http_status, std::string_view message) {
  if (error_.ok()) {
    error_ = invalid_argument(message);
    error_http_status_ = http_status;
  }
  return -1;
}

int Http1Engine::fail_mismatch(std::string_view what) {
  // The scanner and http-parser disagree about the framing. Both accept only well-formed
  // input, so this means malformed input one of them let through; refuse it.
  return fail(400, fmt::format("malformed message framing ({})", what));
}

Result<std::size_t> Http1Engine::feed(std::span<const char> data) {
  if (!error_.ok()) return error_;
  std::size_t off = 0;
  while (off < data.size() && !done() && !finished_) {
    Boundary boundary = Boundary::kNone;
    const std::size_t n = scan(data.data() + off, data.size() - off, boundary);
    if (!error_.ok()) return error_;
    message_completed_ = false;
    if (n > 0) {
      execute(data.data() + off, n);
      if (!error_.ok()) return error_;
    }
    off += n;
    if (lex_ == Lex::kAwaitHead) fail_mismatch("header section did not end where expected");
    if (lex_ == Lex::kAwaitComplete) fail_mismatch("message did not end where expected");
    if (!error_.ok()) return error_;
    if (message_completed_ && options_.pause_after_message) break;
    if (n == 0) break;
  }
  return off;
}

bool Http1Engine::count_section_byte() {
  if (++section_bytes_ <= options_.max_header_bytes) return true;
  fail(431, fmt::format("{} section exceeds {} bytes", in_trailers_ ? "trailer" : "header",
                        options_.max_header_bytes));
  return false;
}

bool Http1Engine::body_too_large(std::uint64_t more) const {
  return options_.max_body_bytes && more > *options_.max_body_bytes - body_bytes_;
}

std::size_t Http1Engine::scan(const char* data, std::size_t n, Boundary& boundary) {
  boundary = Boundary::kNone;
  std::size_t i = 0;
  while (i < n) {
    const char c = data[i];
    switch (lex_) {
      case Lex::kMessageStart:
        if (role_ == Role::kResponse && expected_.empty()) {
          fail(400, "response bytes arrived with no request outstanding");
          return i;
        }
        if (!count_section_byte()) return i;
        if (c == '\r') {
          lex_ = Lex::kLeadingCR;
        } else if (c == '\n') {
          fail(400, "bare LF (line ending without CR) before the start line");
          return i;
        } else {
          start_line_prefix_ += c;
          lex_ = Lex::kLine;
        }
        break;

      case Lex::kLeadingCR:
        if (!count_section_byte()) return i;
        if (c != '\n') {
          fail(400, "CR not followed by LF before the start line");
          return i;
        }
        lex_ = Lex::kMessageStart;
        break;

      case Lex::kLine:
        if (!count_section_byte()) return i;
        if (c == '\r') {
          lex_ = Lex::kLineCR;
        } else if (c == '\n') {
          fail(400, fmt::format("bare LF (line ending without CR) in the {} section",
                                in_trailers_ ? "trailer" : "header"));
          return i;
        } else if (c == '\0') {
          fail(400, "NUL byte in the header section");
          return i;
        } else if (!in_trailers_ && field_count_ == 0 && start_line_prefix_.size() < 8) {
          start_line_prefix_ += c;
        }
        break;

      case Lex::kLineCR:
        if (!count_section_byte()) return i;
        if (c != '\n') {
          fail(400, "CR not followed by LF in the header section");
          return i;
        }
        lex_ = Lex::kLineStart;
        break;

      case Lex::kLineStart:
        if (!count_section_byte()) return i;
        if (c == '\r') {
          lex_ = Lex::kBlankCR;
        } else if (c == '\n') {
          fail(400, "bare LF (line ending without CR) in the header section");
          return i;
        } else if (c == ' ' || c == '\t') {
          fail(400, "line folding (obs-fold): a field line starts with whitespace");
          return i;
        } else if (++field_count_ > options_.max_headers) {
          fail(431, fmt::format("more than {} {} fields", options_.max_headers,
                                in_trailers_ ? "trailer" : "header"));
          return i;
        } else if (c == '\0') {
          fail(400, "NUL byte in the header section");
          return i;
        } else {
          lex_ = Lex::kLine;
        }
        break;

      case Lex::kBlankCR:
        if (!count_section_byte()) return i;
        if (c != '\n') {
          fail(400, "CR not followed by LF at the end of the header section");
          return i;
        }
        lex_ = in_trailers_ ? Lex::kAwaitComplete : Lex::kAwaitHead;
        boundary = in_trailers_ ? Boundary::kMessageEnd : Boundary::kHeadEnd;
        return i + 1;

      case Lex::kBodyLength:
      case Lex::kChunkData: {
        const auto take = static_cast<std::size_t>(
            std::min<std::uint64_t>(remaining_, static_cast<std::uint64_t>(n - i)));
        i += take;
        remaining_ -= take;
        if (remaining_ > 0) return i;
        if (lex_ == Lex::kChunkData) {
          lex_ = Lex::kChunkDataCR;
          continue;
        }
        lex_ = Lex::kAwaitComplete;
        boundary = Boundary::kMessageEnd;
        return i;
      }

      case Lex::kBodyUntilClose:
        return n;

      case Lex::kChunkSize:
      case Lex::kChunkSizeWs:
      case Lex::kChunkExt:
        if (++chunk_line_bytes_ > kMaxChunkLineBytes) {
          fail(400, fmt::format("chunk-size line longer than {} bytes", kMaxChunkLineBytes));
          return i;
        }
        if (c == '\r') {
          if (chunk_digits_ == 0) {
            fail(400, "chunk-size line without a size");
            return i;
          }
          lex_ = Lex::kChunkSizeCR;
        } else if (lex_ == Lex::kChunkSize && hex_value(c) >= 0) {
          if (chunk_size_ >= (kMaxChunkSize >> 4)) {
            fail(400, "chunk size too large");
            return i;
          }
          chunk_size_ = chunk_size_ * 16 + static_cast<std::uint64_t>(hex_value(c));
          ++chunk_digits_;
        } else if (chunk_digits_ == 0) {
          fail(400, "invalid chunk size");
          return i;
        } else if (lex_ == Lex::kChunkExt) {
          if (is_control(c) && c != '\t') {
            fail(400, fmt::format("{} in a chunk extension", describe_control(c)));
            return i;
          }
        } else if (c == ';') {
          lex_ = Lex::kChunkExt;
        } else if (c == ' ' || (c == '\t' && lex_ == Lex::kChunkSizeWs)) {
          // http-parser accepts SP (not HTAB) right after the digits; BWS may follow.
          lex_ = Lex::kChunkSizeWs;
        } else {
          fail(400, "invalid chunk size");
          return i;
        }
        break;

      case Lex::kChunkSizeCR:
        if (c != '\n') {
          fail(400, "CR not followed by LF in a chunk-size line");
          return i;
        }
        if (chunk_size_ == 0) {
          in_trailers_ = true;
          section_bytes_ = field_count_ = 0;
          lex_ = Lex::kLineStart;
        } else {
          if (body_too_large(chunk_size_)) {
            fail(413, fmt::format("body exceeds {} bytes", *options_.max_body_bytes));
            return i;
          }
          if (options_.max_body_bytes) body_bytes_ += chunk_size_;
          remaining_ = chunk_size_;
          lex_ = Lex::kChunkData;
        }
        break;

      case Lex::kChunkDataCR:
      case Lex::kChunkDataLF:
        if (c != (lex_ == Lex::kChunkDataCR ? '\r' : '\n')) {
          fail(400, "chunk data not followed by CRLF");
          return i;
        }
        if (lex_ == Lex::kChunkDataCR) {
          lex_ = Lex::kChunkDataLF;
        } else {
          lex_ = Lex::kChunkSize;
          chunk_size_ = 0;
          chunk_digits_ = chunk_line_bytes_ = 0;
        }
        break;

      case Lex::kAwaitHead:
      case Lex::kAwaitComplete:
        fail_mismatch("bytes scanned while waiting for http-parser");
        return i;
    }
    ++i;
  }
  return i;
}

void Http1Engine::execute(const char* data, std::size_t n) {
  if (parser_reset_pending_) init_http_parser();
  const std::size_t parsed = http_parser_execute(&parser_, &parser_settings(), data, n);
  if (!error_.ok()) return;  // a callback refused the message
  const auto err = HTTP_PARSER_ERRNO(&parser_);
  if (err != HPE_OK) {
    fail_from_http_parser(err);
  } else if (parsed != n) {
    fail_mismatch("http-parser stopped early");
  }
}

void Http1Engine::fail_from_http_parser(http_errno err) {
  switch (err) {
    case HPE_HEADER_OVERFLOW:
      fail(431, "header section too large");
      return;
    case HPE_INVALID_METHOD:
      if (start_line_prefix_.starts_with("PRI")) {
        fail(505, "HTTP/2 connection preface received; this endpoint speaks HTTP/1.x only");
      } else {
        fail(400, "invalid or unknown request method");
      }
      return;
    case HPE_INVALID_VERSION:
      fail(400, "malformed HTTP version");
      return;
    case HPE_INVALID_STATUS:
      fail(400, "invalid status code");
      return;
    case HPE_INVALID_URL:
    case HPE_INVALID_HOST:
    case HPE_INVALID_PORT:
    case HPE_INVALID_PATH:
    case HPE_INVALID_QUERY_STRING:
    case HPE_INVALID_FRAGMENT:
      fail(400, "invalid request target");
      return;
    case HPE_INVALID_HEADER_TOKEN:
      fail(400, "invalid character in a header field");
      return;
    case HPE_INVALID_CONTENT_LENGTH:
      fail(400, "invalid Content-Length");
      return;
    case HPE_UNEXPECTED_CONTENT_LENGTH: {
      const bool te = count_fields(headers_, "transfer-encoding") > 0 ||
                      iequals(field_name_, "transfer-encoding");
      fail(400, te ? "both Transfer-Encoding and Content-Length (request smuggling)"
                   : "more than one Content-Length");
      return;
    }
    case HPE_INVALID_TRANSFER_ENCODING:
      fail(400, "Transfer-Encoding does not end in chunked");
      return;
    case HPE_INVALID_CHUNK_SIZE:
      fail(400, "invalid chunk size");
      return;
    default:
      fail(400, fmt::format("malformed message ({})", http_errno_description(err)));
      return;
  }
}

int Http1Engine::on_url(const char* at, std::size_t n) {
  if (target_.size() + n > options_.max_uri_bytes) {
    return fail(414, fmt::format("request target longer than {} bytes", options_.max_uri_bytes));
  }
  target_.append(at, n);
  return 0;
}

int Http1Engine::on_status(const char* at, std::size_t n) {
  reason_.append(at, n);
  return 0;
}

int Http1Engine::on_header_field(const char* at, std::size_t n) {
  if (in_value_ && !finish_field()) return -1;
  field_name_.append(at, n);
  have_field_ = true;
  return 0;
}

int Http1Engine::on_header_value(const char* at, std::size_t n) {
  in_value_ = true;
  field_value_.append(at, n);
  return 0;
}

bool Http1Engine::finish_field() {
  if (!have_field_) return true;
  if (!is_token(field_name_)) {
    fail(400, fmt::format("invalid {} name \"{}\"", in_trailers_ ? "trailer" : "header",
                          printable(field_name_)));
    return false;
  }
  // http-parser does not check the first byte of a value; RFC 9110 §5.5 allows no control
  // byte but HTAB anywhere in one.
  for (char c : field_value_) {
    if (is_control(c) && c != '\t') {
      fail(400, fmt::format("{} in the value of {} \"{}\"", describe_control(c),
                            in_trailers_ ? "trailer" : "header", printable(field_name_)));
      return false;
    }
  }
  Header field{to_lower(field_name_), std::string(trim_ows(field_value_))};
  (in_trailers_ ? trailers_ : headers_).push_back(std::move(field));
  field_name_.clear();
  field_value_.clear();
  have_field_ = in_value_ = false;
  return true;
}

bool Http1Engine::read_transfer_encoding(bool& chunked) {
  chunked = false;
  bool present = false;
  std::vector<std::string> codings;
  for (const Header& h : headers_) {
    if (h.name != "transfer-encoding") continue;
    present = true;
    std::string_view rest = h.value;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string_view item = trim_ows(rest.substr(0, comma));
      if (!item.empty()) codings.push_back(to_lower(item));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  if (!present) return true;
  if (parser_.http_minor == 0) {
    fail(400, "Transfer-Encoding in an HTTP/1.0 message");
    return false;
  }
  if (count_fields(headers_, "content-length") > 0) {
    fail(400, "both Transfer-Encoding and Content-Length (request smuggling)");
    return false;
  }
  if (codings.empty() || codings.back() != "chunked") {
    fail(400, "Transfer-Encoding does not end in chunked");
    return false;
  }
  if (std::count(codings.begin(), codings.end(), "chunked") > 1) {
    fail(400, "Transfer-Encoding applies chunked more than once");
    return false;
  }
  if (codings.size() > 1) {
    fail(501, fmt::format("unsupported transfer coding \"{}\"", printable(codings.front())));
    return false;
  }
  if ((parser_.flags & F_CHUNKED) == 0) {
    fail(400, "malformed Transfer-Encoding");
    return false;
  }
  chunked = true;
  return true;
}

bool Http1Engine::connection_persists() const {
  if (parser_.flags & F_CONNECTION_CLOSE) return false;
  return parser_.http_minor >= 1 || (parser_.flags & F_CONNECTION_KEEP_ALIVE) != 0;
}

int Http1Engine::on_headers_complete() {
  if (lex_ != Lex::kAwaitHead) return fail_mismatch("header section ended early");
  if (!finish_field()) return -1;
  if (parser_.http_major != 1) {
    return fail(
        505, fmt::format("unsupported HTTP version {}.{}", parser_.http_major, parser_.http_minor));
  }
  const bool has_length = (parser_.flags & F_CONTENTLENGTH) != 0;
  if (count_fields(headers_, "content-length") != (has_length ? 1u : 0u)) {
    return fail_mismatch("Content-Length");
  }
  std::optional<std::uint64_t> content_length;
  if (has_length) content_length = parser_.content_length;
  bool chunked = false;
  if (!read_transfer_encoding(chunked)) return -1;
  return role_ == Role::kRequest ? request_head_complete(content_length, chunked)
                                 : response_head_complete(content_length, chunked);
}

int Http1Engine::set_framing(std::optional<std::uint64_t> length, bool chunked, bool until_close) {
  if (chunked) {
    lex_ = Lex::kChunkSize;
    return 0;
  }
  if (until_close) {
    lex_ = Lex::kBodyUntilClose;
    return 0;
  }
  if (length && *length > 0) {
    lex_ = Lex::kBodyLength;
    remaining_ = *length;
    return 0;
  }
  lex_ = Lex::kAwaitComplete;
  return 1;  // tells http-parser the message has no body
}

int Http1Engine::request_head_complete(std::optional<std::uint64_t> content_length, bool chunked) {
  const bool connect = parser_.method == HTTP_CONNECT;
  const std::size_t hosts = count_fields(headers_, "host");
  if (hosts > 1) return fail(400, "more than one Host header");
  if (hosts == 0 && parser_.http_minor >= 1) return fail(400, "HTTP/1.1 request without Host");
  if (!std::all_of(target_.begin(), target_.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return fail(400, fmt::format("invalid request target \"{}\"", printable(target_)));
  }
  if (!connect && content_length && body_too_large(*content_length)) {
    return fail(413, fmt::format("body exceeds {} bytes", *options_.max_body_bytes));
  }

  Http1RequestHead head;
  head.method = http_method_str(static_cast<http_method>(parser_.method));
  head.target = std::move(target_);
  head.version_minor = parser_.http_minor;
  head.headers = std::move(headers_);
  head.keep_alive = connection_persists();
  // RFC 9110 §7.8: a server must ignore Upgrade in an HTTP/1.0 request.
  head.upgrade = connect || (parser_.upgrade && parser_.http_minor >= 1);
  head.content_length = content_length;
  head.chunked = chunked;
  message_upgrade_ = head.upgrade;
  message_closes_ = !head.keep_alive;
  headers_.clear();
  target_.clear();

  // A CONNECT request has no content (RFC 9110 §9.3.6): the tunnel starts after the head,
  // which is also where http-parser stops.
  const int skip = connect ? set_framing(std::nullopt, false, false)
                           : set_framing(content_length, chunked, false);
  request_visitor_->on_request_head(std::move(head));
  return skip;
}

int Http1Engine::response_head_complete(std::optional<std::uint64_t> content_length, bool chunked) {
  const int status = static_cast<int>(parser_.status_code);
  if (status < 100 || status > 999) return fail(400, fmt::format("invalid status {}", status));
  if (expected_.empty()) return fail_mismatch("response without a request");
  const std::string& method = expected_.front();
  interim_ = status < 200 && status != 101;
  const bool upgrade = status == 101 || (method == "CONNECT" && status / 100 == 2);
  // RFC 9112 §6.3: these responses never have content, whatever their fields say.
  const bool no_body = interim_ || upgrade || method == "HEAD" || status == 204 || status == 304;
  const bool until_close = !no_body && !chunked && !content_length;
  if (!no_body && content_length && body_too_large(*content_length)) {
    return fail(413, fmt::format("body exceeds {} bytes", *options_.max_body_bytes));
  }

  Http1ResponseHead head;
  head.status = status;
  head.reason = std::move(reason_);
  head.version_minor = parser_.http_minor;
  head.headers = std::move(headers_);
  head.keep_alive = connection_persists() && !until_close;
  head.upgrade = upgrade;
  head.content_length = content_length;
  head.chunked = chunked;
  message_upgrade_ = upgrade;
  message_closes_ = !interim_ && !head.keep_alive;
  headers_.clear();
  reason_.clear();

  const int skip = no_body ? set_framing(std::nullopt, false, false)
                           : set_framing(content_length, chunked, until_close);
  response_visitor_->on_response_head(std::move(head));
  return skip;
}

int Http1Engine::on_body(const char* at, std::size_t n) {
  if (n == 0) return 0;
  if (role_ == Role::kRequest) {
    request_visitor_->on_body(std::span<const char>(at, n));
  } else {
    response_visitor_->on_body(std::span<const char>(at, n));
  }
  return 0;
}

int Http1Engine::on_message_complete() {
  if (lex_ != Lex::kAwaitComplete) return fail_mismatch("message ended early");
  if (!finish_field()) return -1;
  Headers trailers = std::move(trailers_);
  const bool upgrade = message_upgrade_;
  const bool closes = message_closes_;
  if (role_ == Role::kResponse && !interim_) expected_.pop_front();
  start_message();
  if (upgrade) upgraded_ = true;
  if (closes) closed_ = true;
  message_completed_ = true;
  if (role_ == Role::kRequest) {
    request_visitor_->on_message_complete(std::move(trailers));
  } else {
    response_visitor_->on_message_complete(std::move(trailers));
  }
  return 0;
}

Status Http1Engine::finish() {
  if (!error_.ok()) return error_;
  if (finished_) return ok_status();
  finished_ = true;
  if (done()) return ok_status();
  switch (lex_) {
    case Lex::kMessageStart:
      if (role_ == Role::kResponse && !expected_.empty()) {
        fail(400, fmt::format("connection closed before the response to {}", expected_.front()));
      }
      break;
    case Lex::kBodyUntilClose:
      lex_ = Lex::kAwaitComplete;
      execute(nullptr, 0);  // http-parser's way of saying EOF
      if (error_.ok() && lex_ != Lex::kMessageStart) fail_mismatch("body end at close");
      break;
    case Lex::kBodyLength:
      fail(400, fmt::format("connection closed with {} body bytes missing", remaining_));
      break;
    case Lex::kChunkSize:
    case Lex::kChunkSizeWs:
    case Lex::kChunkExt:
    case Lex::kChunkSizeCR:
    case Lex::kChunkData:
    case Lex::kChunkDataCR:
    case Lex::kChunkDataLF:
      fail(400, "connection closed inside a chunked body");
      break;
    default:
      fail(400, fmt::format("connection closed inside a {} section",
                            in_trailers_ ? "trailer" : "header"));
      break;
  }
  return error_;
}

}  // namespace internal

// Http1RequestParser

Http1RequestParser::Http1RequestParser(Http1RequestVisitor& visitor, Http1ParserOptions options)
    : engine_(std::make_unique<internal::Http1Engine>(internal::Role::kRequest, &visitor, nullptr,
                                                      options)) {}
Http1RequestParser::~Http1RequestParser() = default;
Http1RequestParser::Http1RequestParser(Http1RequestParser&&) noexcept = default;
Http1RequestParser& Http1RequestParser::operator=(Http1RequestParser&&) noexcept = default;

Result<std::size_t> Http1RequestParser::feed(std::span<const char> data) {
  return engine_->feed(data);
}
Status Http1RequestParser::finish() { return engine_->finish(); }
int Http1RequestParser::error_http_status() const { return engine_->error_http_status(); }
bool Http1RequestParser::upgraded() const { return engine_->upgraded(); }
bool Http1RequestParser::done() const { return engine_->done(); }
void Http1RequestParser::continue_after_upgrade() { engine_->continue_after_upgrade(); }
void Http1RequestParser::reset() { engine_->reset(); }

// Http1ResponseParser

Http1ResponseParser::Http1ResponseParser(Http1ResponseVisitor& visitor, Http1ParserOptions options)
    : engine_(std::make_unique<internal::Http1Engine>(internal::Role::kResponse, nullptr, &visitor,
                                                      options)) {}
Http1ResponseParser::~Http1ResponseParser() = default;
Http1ResponseParser::Http1ResponseParser(Http1ResponseParser&&) noexcept = default;
Http1ResponseParser& Http1ResponseParser::operator=(Http1ResponseParser&&) noexcept = default;

void Http1ResponseParser::expect_response(std::string_view method) {
  engine_->expect_response(method);
}
Result<std::size_t> Http1ResponseParser::feed(std::span<const char> data) {
  return engine_->feed(data);
}
Status Http1ResponseParser::finish() { return engine_->finish(); }
bool Http1ResponseParser::upgraded() const { return engine_->upgraded(); }
bool Http1ResponseParser::done() const { return engine_->done(); }
void Http1ResponseParser::reset() { engine_->reset(); }

// Serializers

namespace {

// RFC 9110 §15 unless noted.
struct Reason {
  int status;
  std::string_view phrase;
};
constexpr Reason kReasons[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {103, "Early Hints"},  // RFC 8297
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {203, "Non-Authoritative Information"},
    {204, "No Content"},
    {205, "Reset Content"},
    {206, "Partial Content"},
    {300, "Multiple Choices"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {303, "See Other"},
    {304, "Not Modified"},
    {305, "Use Proxy"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {402, "Payment Required"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {407, "Proxy Authentication Required"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {421, "Misdirected Request"},
    {422, "Unprocessable Content"},
    {426, "Upgrade Required"},
    {428, "Precondition Required"},            // RFC 6585
    {429, "Too Many Requests"},                // RFC 6585
    {431, "Request Header Fields Too Large"},  // RFC 6585
    {451, "Unavailable For Legal Reasons"},    // RFC 7725
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

}  // namespace

std::string_view reason_phrase(int status) {
  for (const Reason& r : kReasons) {
    if (r.status == status) return r.phrase;
  }
  return "";
}

Result<std::string> serialize_request_head(std::string_view method, std::string_view target,
                                           const Headers& headers) {
  if (!is_token(method)) {
    return invalid_argument(fmt::format("method \"{}\" is not a token", printable(method)));
  }
  if (target.empty() ||
      !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return invalid_argument(fmt::format(
        "request target \"{}\" is empty or holds a byte outside visible ASCII", printable(target)));
  }
  RETURN_IF_ERROR(check_fields(headers, "header"));
  std::string out;
  out.reserve(method.size() + target.size() + 16 + headers.size() * 32);
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  append_fields(out, headers);
  out += "\r\n";
  return out;
}

Result<std::string> serialize_response_head(int status, const Headers& headers) {
  if (status < 100 || status > 999) {
    return invalid_argument(fmt::format("status {} is not three digits", status));
  }
  RETURN_IF_ERROR(check_fields(headers, "header"));
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, reason_phrase(status));
  append_fields(out, headers);
  out += "\r\n";
  return out;
}

void append_chunk(std::string& out, std::span<const char> data) {
  if (data.empty()) return;
  fmt::format_to(std::back_inserter(out), "{:x}\r\n", data.size());
  out.append(data.data(), data.size());
  out += "\r\n";
}

Status append_last_chunk(std::string& out, const Headers& trailers) {
  RETURN_IF_ERROR(check_fields(trailers, "trailer"));
  out += "0\r\n";
  append_fields(out, trailers);
  out += "\r\n";
  return ok_status();
}

}  // namespace cb::http
