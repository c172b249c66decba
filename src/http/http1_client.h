#pragma once
// Http1Client is one HTTP/1.1 client connection (RFC 9112) over a net::Stream: TCP, a unix
// socket, or TLS that negotiated ALPN "http/1.1" (or none). It carries one exchange at a time;
// when the server keeps the connection alive, the next request reuses it.
//
// Three ways to use it:
//   request()   a whole exchange: body in, Http1Response (status, fields, body, trailers) out.
//   streaming   send_head(), write_body()*, finish_body() for the request; read_head(),
//               read_body()* for the response, which may be read while the request body is
//               still being written (from a second coroutine).
//   upgrade()   a request that switches protocols; the raw stream comes back after the 101.
//
// Framing. A streamed request body is framed by the fields given to send_head():
// "content-length: n", or "transfer-encoding: chunked"; neither means no body. A Host field
// is added from |authority| when missing. Responses may be chunked (trailers are kept),
// content-length, or delimited by the close; interim 1xx responses are skipped. The response
// to HEAD has no body whatever its fields say.
//
// Failure. Every call takes a deadline. A deadline that passes, an I/O error or a malformed
// response closes the connection: a half-done exchange cannot be resumed. Afterwards every
// call fails with kFailedPrecondition; see reusable().
//
// Affinity: the stream's executor. At most one coroutine writes (send_head, write_body,
// finish_body) and one reads (read_head, read_body) at a time. Not copyable or movable: the
// parser points back into the client.

#include "base/result.h"
#include "http/headers.h"
#include "http/http1_codec.h"
#include "http/unparsed.h"
#include "net/asio.h"
#include "net/stream.h"
#include "net/tls.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace cb::http {

struct Http1Response {
  int status = 0;
  std::string reason;
  Headers headers;
  std::string body;  // filled by request(); empty from read_head()
  Headers trailers;  // filled by request(); see Http1Client::trailers() when streaming
  // False when the server closes the connection after this response.
  bool keep_alive = true;
};

// The result of Http1Client::upgrade(). The caller owns |stream| and speaks the new protocol
// on it, starting with |leftover|: bytes the server sent right after its 101 that were
// already read.
struct Http1Upgraded {
  Http1Response response;  // the 101 head
  std::unique_ptr<net::Stream> stream;
  std::string leftover;
};

class Http1Client final : private Http1ResponseVisitor {
 public:
  // |authority| ("example.com", "127.0.0.1:8080") is sent as Host when a request has none.
  Http1Client(std::unique_ptr<net::Stream> stream, std::string authority);
  ~Http1Client() override;
  Http1Client(const Http1Client&) = delete;
  Http1Client& operator=(const Http1Client&) = delete;

  // Sends |method| |target| with |headers| and |body| and reads the whole response into
  // memory. Framing fields the caller passed are replaced: content-length is set from |body|
  // when it is not empty or the method is POST, PUT or PATCH.
  // Errors: kInvalidArgument (bad method, target or field; malformed response),
  // kFailedPrecondition (an exchange is in progress, or the connection is closed),
  // kUnavailable (I/O failed, or the server closed the connection before answering),
  // kDeadlineExceeded.
  asio::awaitable<Result<Http1Response>> request(std::string method, std::string target,
                                                 Headers headers, std::string body,
                                                 net::Deadline deadline);
  // As request(), the body the concatenation of |pieces|, sent as write_body_pieces() sends
  // them: the large ones without a copy. The pieces must stay valid until it returns.
  asio::awaitable<Result<Http1Response>> request_pieces(std::string method, std::string target,
                                                        Headers headers,
                                                        std::span<const std::string_view> pieces,
                                                        net::Deadline deadline);

  // Streaming request: sends the request line and fields. Errors as request().
  // REQUIRES: the previous exchange's response was read to its end.
  asio::awaitable<Status> send_head(std::string method, std::string target, Headers headers,
                                    net::Deadline deadline);
  // Sends one piece of the body (a chunk when chunked). Errors: kFailedPrecondition (no body
  // open, or more bytes than content-length), kUnavailable, kDeadlineExceeded.
  asio::awaitable<Status> write_body(std::string data, net::Deadline deadline);
  // Sends the body pieces |pieces| one after the other, as write_body() of their
  // concatenation would, without copying the large ones: a body over 64 KiB with
  // content-length framing is written piece by piece, runs of pieces under 16 KiB gathered
  // into one write. The pieces must stay valid until it returns. Errors as write_body().
  asio::awaitable<Status> write_body_pieces(std::span<const std::string_view> pieces,
                                            net::Deadline deadline);
  // Ends the body; |trailers| go in the last chunk. Errors: kFailedPrecondition (no body open,
  // content-length not reached, or trailers on a body that is not chunked), kInvalidArgument
  // (bad trailer field), kUnavailable, kDeadlineExceeded.
  asio::awaitable<Status> finish_body(Headers trailers, net::Deadline deadline);

  // Streaming response: waits for the final response head (body and trailers empty).
  // Errors: kFailedPrecondition (no request sent, or head already read), kInvalidArgument
  // (malformed response), kUnavailable, kDeadlineExceeded.
  asio::awaitable<Result<Http1Response>> read_head(net::Deadline deadline);
  // The next piece of the response body, "" at its end (trailers() is then complete).
  // Errors as read_head.
  asio::awaitable<Result<std::string>> read_body(net::Deadline deadline);
  // Trailer fields of the response read last.
  const Headers& trailers() const { return trailers_; }

  // Sends "GET |target|" with |headers|, which must hold an upgrade field; "connection:
  // upgrade" is added when no connection field is given. On 101 the client gives up the
  // stream (reusable() turns false) and returns it. Errors as request(), and
  // kFailedPrecondition naming the status when the server answers anything but 101 (the
  // client then stays usable if that response kept the connection alive).
  asio::awaitable<Result<Http1Upgraded>> upgrade(std::string target, Headers headers,
                                                 net::Deadline deadline);

  // True when a new request may be sent: no exchange in progress, the server did not ask to
  // close, and nothing failed.
  bool reusable() const;
  // Closes the connection; pending calls fail. Idempotent.
  void close();
  // REQUIRES: the stream was not handed out by upgrade().
  const net::Stream& stream() const { return *stream_; }

 private:
  enum class BodyFraming { kNone, kLength, kChunked };

  // Http1ResponseVisitor
  void on_response_head(Http1ResponseHead&& head) override;
  void on_body(std::span<const char> data) override;
  void on_message_complete(Headers&& trailers) override;

  Status fail(Status status);
  asio::awaitable<Status> write_out(std::string data, net::Deadline deadline);
  // As write_out() for bytes the caller keeps alive until it returns.
  asio::awaitable<Status> write_view(std::string_view data, net::Deadline deadline);
  // Parses buffered bytes or reads more. Errors as read_head.
  asio::awaitable<Status> pump(net::Deadline deadline);
  void end_response();

  std::unique_ptr<net::Stream> stream_;
  std::string authority_;
  Http1ResponseParser parser_;
  Unparsed raw_;      // read, not yet parsed
  size_t read_size_;  // room a read gets at least: kReadSize, more within request()
  bool eof_ = false;
  bool broken_ = false;   // failed or closed: nothing more on this connection
  bool closing_ = false;  // the server closes after the current response

  // Request side.
  bool request_open_ = false;  // head sent, body not finished
  BodyFraming request_framing_ = BodyFraming::kNone;
  uint64_t request_remaining_ = 0;

  // Response side.
  bool response_expected_ = false;  // a request was sent and its response not fully read
  bool interim_ = false;            // the head being parsed is a 1xx
  std::optional<Http1ResponseHead> head_;
  bool head_returned_ = false;
  std::string body_;
  bool message_complete_ = false;
  Headers trailers_;
};

// Where and how to connect: a TCP |host|:|port| or the unix socket |unix_path|; TLS when
// |tls| is set. The TLS context should offer ALPN "http/1.1" (TlsClientOptions::alpn); a
// server that picks another protocol is refused.
struct Http1DialOptions {
  std::string host;
  uint16_t port = 0;
  std::string unix_path;
  std::shared_ptr<net::TlsContext> tls;
  std::string server_name;  // SNI and verification name; default |host|
};

// Connects and returns a client whose Host defaults to |host| (with the port unless it is the
// scheme's default; "localhost" for unix sockets). Errors: kUnavailable, kDeadlineExceeded,
// kInvalidArgument (unresolvable name), kFailedPrecondition (TLS peer negotiated a protocol
// other than http/1.1).
asio::awaitable<Result<std::unique_ptr<Http1Client>>> dial_http1(net::Executor ex,
                                                                 Http1DialOptions options,
                                                                 net::Deadline deadline);

}  // namespace cb::http
