#pragma once
// The one TLS wrapper (house style; architecture §4). It uses only the part of the OpenSSL
// API that BoringSSL also provides (SSL_CTX_use_*_file, ALPN select/protos,
// X509_VERIFY_PARAM_set1_host/ip_asc, SSL_set_tlsext_host_name), so linking BoringSSL instead
// of OpenSSL 3 is a build switch (-DCB_BORINGSSL=ON), not a code change.
//
// A TlsContext is immutable after creation and may be shared by many connections on one
// executor. TLS 1.2 is the minimum.

#include "base/result.h"
#include "net/asio.h"
#include "net/stream.h"

#include <memory>
#include <string>
#include <vector>

namespace asio::ssl {
class context;
}

namespace cb::net {

struct TlsServerOptions {
  std::string cert_file;  // PEM chain
  std::string key_file;   // PEM private key
  // Offered in preference order; a client that offers none of them gets no ALPN.
  std::vector<std::string> alpn = {"h2", "http/1.1"};
};

struct TlsClientOptions {
  std::string ca_file;  // PEM roots; empty means the system's default paths
  bool verify_peer = true;
  std::vector<std::string> alpn = {"h2"};
};

class TlsContext {
 public:
  // Errors: kInvalidArgument naming the file that could not be loaded, or a key that does not
  // match the certificate.
  static Result<std::shared_ptr<TlsContext>> server(const TlsServerOptions& options);
  static Result<std::shared_ptr<TlsContext>> client(const TlsClientOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  asio::ssl::context& native() { return *ctx_; }

 private:
  TlsContext();
  std::unique_ptr<asio::ssl::context> ctx_;
  std::string alpn_wire_;  // server: the ALPN list in wire format, for the select callback
};

// Server handshake on an accepted socket. Errors: kUnavailable (handshake failed, with
// OpenSSL's reason), kDeadlineExceeded.
asio::awaitable<Result<std::unique_ptr<Stream>>> tls_accept(std::shared_ptr<TlsContext> ctx,
                                                            TcpSocket&& socket, Deadline deadline);

// Client handshake; |server_name| is sent as SNI (unless an IP literal) and verified against
// the certificate when the context verifies peers. Errors as tls_accept.
asio::awaitable<Result<std::unique_ptr<Stream>>> tls_connect(std::shared_ptr<TlsContext> ctx,
                                                             TcpSocket&& socket,
                                                             std::string server_name,
                                                             Deadline deadline);

}  // namespace cb::net
