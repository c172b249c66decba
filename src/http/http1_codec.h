#pragma once
// A sans-I/O HTTP/1.1 codec (RFC 9112) for our HTTP server and client: two incremental
// parsers, one for requests (server side) and one for responses (client side), and
// serializers for message heads and chunked bodies. Bytes go in, events come out through a
// visitor; nothing here reads or writes a socket. Parsing is done by http-parser 2.9, checked
// byte for byte by a strict framing scanner of our own (Debian builds http-parser without
// HTTP_PARSER_STRICT, which would otherwise accept bare LF, obs-fold and any two bytes as the
// CRLF after chunk data). See README-http1.md for the event order, limits and error statuses.
//
// Affinity: a parser is a plain state machine with no locking; use each from one thread at
// a time. Parsers are movable, not copyable; a moved-from parser may only be destroyed or
// assigned to. Serializers are pure functions.

#include "base/result.h"
#include "base/status.h"
#include "http/headers.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::http {

// Header, Headers and find_header come from http/headers.h (shared with HTTP/2). Parsers
// deliver names lower-cased and values without leading or trailing SP/HTAB; serializers write
// both as given.

// The start line and header section of a request as HTTP/1.1 carries it. (Prefixed Http1:
// a server maps it to its protocol-neutral request type, which HTTP/2 fills too.)
struct Http1RequestHead {
  std::string method;     // "GET", "POST", ...: one of http-parser's known methods
  std::string target;     // request-target as sent: "/a?b", "*", "host:443", "http://h/p"
  int version_minor = 1;  // HTTP/1.<version_minor>; only major version 1 is accepted
  Headers headers;
  // False when the connection must close after this request (Connection: close, or
  // HTTP/1.0 without Connection: keep-alive); answer with Connection: close.
  bool keep_alive = true;
  // True for CONNECT and for an HTTP/1.1 request with both an Upgrade field and the
  // "upgrade" Connection option. The parser stops after this message (see upgraded()).
  bool upgrade = false;
  std::optional<std::uint64_t> content_length;  // the Content-Length field, if present
  bool chunked = false;                         // Transfer-Encoding: chunked
};

// The status line and header section of a response.
struct Http1ResponseHead {
  int status = 0;      // 100..999
  std::string reason;  // reason-phrase as sent, possibly empty
  int version_minor = 1;
  Headers headers;
  // False when the connection closes after this response (Connection: close, HTTP/1.0
  // without keep-alive, or a body delimited by the close).
  bool keep_alive = true;
  // True for 101 Switching Protocols and for a 2xx answer to CONNECT: the bytes after this
  // head belong to another protocol (see Http1ResponseParser::upgraded()).
  bool upgrade = false;
  std::optional<std::uint64_t> content_length;  // the Content-Length field, if present
  bool chunked = false;                         // Transfer-Encoding: chunked
};

// Limits and behaviour shared by both parsers. A limit that is exceeded is an error whose
// error_http_status() is given in brackets.
struct Http1ParserOptions {
  // Bytes of one header section, start line and final CRLF included; applies to a trailer
  // section too [431]. 64 KiB is above nginx's 4 x 8 KiB and Node's 16 KiB defaults, so real
  // clients fit, and still bounds the memory a connection can pin.
  std::size_t max_header_bytes = 64 * 1024;
  // 100 fields per header (or trailer) section [431]; Apache's LimitRequestFields default.
  std::size_t max_headers = 100;
  // 8 KiB request-target [414]; RFC 9112 §3 recommends supporting at least 8000 octets.
  std::size_t max_uri_bytes = 8 * 1024;
  // Largest accepted body (content bytes, after de-chunking); unset means no limit [413].
  std::optional<std::uint64_t> max_body_bytes = std::nullopt;
  // When true, feed() returns right after each complete message, so pipelined messages
  // can be handled one at a time; the caller feeds the rest afterwards.
  bool pause_after_message = false;
};

// Receives a parser's events. For each message, in order: one head, zero or more body
// pieces, one on_message_complete. Body spans point into the buffer passed to feed() and
// are valid only during the call.
// REQUIRES: visitor methods do not call back into the parser that calls them.
class Http1RequestVisitor {
 public:
  virtual ~Http1RequestVisitor() = default;
  virtual void on_request_head(Http1RequestHead&& head) = 0;
  virtual void on_body(std::span<const char> data) = 0;
  // |trailers| is empty unless a chunked body ended with a trailer section.
  virtual void on_message_complete(Headers&& trailers) = 0;
};

class Http1ResponseVisitor {
 public:
  virtual ~Http1ResponseVisitor() = default;
  // Called for interim (1xx) responses too; each is followed by on_message_complete.
  virtual void on_response_head(Http1ResponseHead&& head) = 0;
  virtual void on_body(std::span<const char> data) = 0;
  virtual void on_message_complete(Headers&& trailers) = 0;
};

namespace internal {
class Http1Engine;
}  // namespace internal

// Parses the requests a client sends on one connection.
class Http1RequestParser {
 public:
  // |visitor| is not owned and must outlive the parser.
  explicit Http1RequestParser(Http1RequestVisitor& visitor, Http1ParserOptions options = {});
  ~Http1RequestParser();
  Http1RequestParser(Http1RequestParser&&) noexcept;
  Http1RequestParser& operator=(Http1RequestParser&&) noexcept;
  Http1RequestParser(const Http1RequestParser&) = delete;
  Http1RequestParser& operator=(const Http1RequestParser&) = delete;

  // Parses a prefix of |data| and returns its length; the caller keeps the rest and passes it
  // again, with more bytes appended, in a later call. Consumption stops early:
  //  - after a request with upgrade set (its body, if any, included): the rest of |data| is
  //    the new protocol's, untouched; upgraded() turns true;
  //  - after a request with keep_alive false: done() turns true, later bytes are ignored;
  //  - after every message when options.pause_after_message is set.
  // Returns 0 while done(). Errors: kInvalidArgument, with a message naming what is wrong
  // and error_http_status() giving the status to answer. Once an error is returned, every
  // later call returns the same error until reset().
  Result<std::size_t> feed(std::span<const char> data);

  // Tells the parser that the peer closed its side. Errors: kInvalidArgument if the close
  // cut a request short.
  Status finish();

  // The status a server should answer the current error with: 431 header section too large
  // or too many fields, 414 target too long, 413 body too large, 505 HTTP version not 1.x,
  // 501 transfer coding other than chunked, else 400. 0 while there is no error.
  int error_http_status() const;

  // True after a request with upgrade set completed; feed() then consumes nothing.
  bool upgraded() const;
  // True when no further request will be parsed: upgraded(), or the last request had
  // keep_alive false.
  bool done() const;

  // The server declined the upgrade and answers over HTTP/1.1: parsing resumes with the next
  // request (done() stays true if that request also had keep_alive false).
  // REQUIRES: upgraded().
  void continue_after_upgrade();

  // Forgets all state, including an error, as if newly constructed.
  void reset();

 private:
  std::unique_ptr<internal::Http1Engine> engine_;
};

// Parses the responses a server sends on one connection.
class Http1ResponseParser {
 public:
  // |visitor| is not owned and must outlive the parser.
  explicit Http1ResponseParser(Http1ResponseVisitor& visitor, Http1ParserOptions options = {});
  ~Http1ResponseParser();
  Http1ResponseParser(Http1ResponseParser&&) noexcept;
  Http1ResponseParser& operator=(Http1ResponseParser&&) noexcept;
  Http1ResponseParser(const Http1ResponseParser&) = delete;
  Http1ResponseParser& operator=(const Http1ResponseParser&) = delete;

  // Records that a request with |method| was sent; responses are matched to requests in
  // order. The method decides the framing: a response to HEAD has no body, a 2xx to CONNECT
  // opens a tunnel. Call once per request sent, before its response is fed.
  void expect_response(std::string_view method);

  // As Http1RequestParser::feed(). Stops after a 101 or a 2xx to CONNECT (upgraded()), after
  // a response with keep_alive false (done()), and after every message when
  // pause_after_message is set. Errors: kInvalidArgument (malformed or oversized response,
  // or bytes arriving with no request outstanding); sticky until reset().
  Result<std::size_t> feed(std::span<const char> data);

  // Tells the parser that the server closed the connection. Completes a body delimited by
  // the close (on_message_complete is called). Errors: kInvalidArgument if a head, a
  // chunked body or a Content-Length body was cut short, or if a request sent with
  // expect_response() got no response.
  Status finish();

  bool upgraded() const;
  bool done() const;

  // Forgets all state, including expected responses and an error.
  void reset();

 private:
  std::unique_ptr<internal::Http1Engine> engine_;
};

// "OK" for 200, "Not Found" for 404, ...: the RFC 9110 §15 reason phrases; "" if unknown.
std::string_view reason_phrase(int status);

// "<method> <target> HTTP/1.1\r\n" + one "name: value\r\n" per header + "\r\n". Headers are
// written as given; the caller adds Host, Content-Length or Transfer-Encoding.
// Errors: kInvalidArgument if |method| is not a token, |target| is empty or holds a byte
// outside visible ASCII, a header name is not a token, or a value holds CR, LF, NUL or another
// control byte (the message names the header).
Result<std::string> serialize_request_head(std::string_view method, std::string_view target,
                                           const Headers& headers);

// "HTTP/1.1 <status> <reason_phrase(status)>\r\n" + headers + "\r\n".
// Errors: kInvalidArgument if |status| is outside 100..999, or for a header as above.
Result<std::string> serialize_response_head(int status, const Headers& headers);

// Appends one chunk holding |data| ("<hex size>\r\n<data>\r\n") to |out|. Appends nothing
// when |data| is empty, since a zero-size chunk would end the body.
void append_chunk(std::string& out, std::span<const char> data);

// Appends the last chunk and the trailer section ("0\r\n" + trailers + "\r\n") to |out|.
// Errors: kInvalidArgument for a trailer as for headers above; |out| is then unchanged.
Status append_last_chunk(std::string& out, const Headers& trailers);

}  // namespace cb::http
