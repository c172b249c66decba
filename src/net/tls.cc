#include "net/tls.h"

#include "net/errors.h"

#include <asio/ssl.hpp>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace cb::net {

namespace {

using SslStream = asio::ssl::stream<TcpSocket>;

std::string ssl_error_text() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

std::string alpn_wire(const std::vector<std::string>& protos) {
  std::string wire;
  for (const auto& p : protos) {
    wire.push_back(static_cast<char>(p.size()));
    wire += p;
  }
  return wire;
}

int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
  const auto* server = static_cast<const std::string*>(arg);
  unsigned char* selected = nullptr;
  // Server preference order: the first of ours that the client offers.
  if (SSL_select_next_proto(
          &selected, outlen, reinterpret_cast<const unsigned char*>(server->data()),
          static_cast<unsigned>(server->size()), in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

class TlsStream final : public Stream {
 public:
  TlsStream(std::shared_ptr<TlsContext> ctx, TcpSocket&& socket)
      : ctx_(std::move(ctx)), stream_(std::move(socket), ctx_->native()) {
    std::error_code ec;
    auto ep = stream_.next_layer().remote_endpoint(ec);
    peer_ = ec ? "tls:?" : fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }

  SslStream& ssl() { return stream_; }

  asio::awaitable<Result<size_t>> read_some(std::span<char> buffer) override {
    auto [ec, n] = co_await stream_.async_read_some(asio::buffer(buffer.data(), buffer.size()));
    if (ec) co_return to_status(ec, "tls read");
    co_return n;
  }
  asio::awaitable<Status> write(std::span<const char> data) override {
    auto [ec, n] = co_await asio::async_write(stream_, asio::buffer(data.data(), data.size()));
    co_return to_status(ec, "tls write");
  }
  asio::awaitable<Status> shutdown_write() override {
    auto [ec] = co_await stream_.async_shutdown();
    co_return to_status(ec, "tls shutdown");
  }
  void close() override {
    std::error_code ec;
    stream_.next_layer().close(ec);
  }
  Executor executor() override { return stream_.get_executor(); }
  std::string alpn() const override {
    const unsigned char* data = nullptr;
    unsigned int len = 0;
    SSL_get0_alpn_selected(const_cast<SslStream&>(stream_).native_handle(), &data, &len);
    return std::string(reinterpret_cast<const char*>(data), len);
  }
  bool is_tls() const override { return true; }
  std::string peer() const override { return peer_; }

 private:
  std::shared_ptr<TlsContext> ctx_;  // keeps the SSL_CTX alive for the stream's lifetime
  SslStream stream_;
  std::string peer_;
};

}  // namespace

TlsContext::TlsContext() = default;
TlsContext::~TlsContext() = default;

Result<std::shared_ptr<TlsContext>> TlsContext::server(const TlsServerOptions& options) {
  std::shared_ptr<TlsContext> c(new TlsContext());
  c->ctx_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* ctx = c->ctx_->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1)
    return invalid_argument(
        fmt::format("tls cert file {}: {}", options.cert_file, ssl_error_text()));
  if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return invalid_argument(fmt::format("tls key file {}: {}", options.key_file, ssl_error_text()));
  if (SSL_CTX_check_private_key(ctx) != 1)
    return invalid_argument(fmt::format("tls key file {} does not match cert file {}",
                                        options.key_file, options.cert_file));
  c->alpn_wire_ = alpn_wire(options.alpn);
  SSL_CTX_set_alpn_select_cb(ctx, select_alpn, &c->alpn_wire_);
  return c;
}

Result<std::shared_ptr<TlsContext>> TlsContext::client(const TlsClientOptions& options) {
  std::shared_ptr<TlsContext> c(new TlsContext());
  c->ctx_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX* ctx = c->ctx_->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (options.verify_peer) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    int ok = options.ca_file.empty()
                 ? SSL_CTX_set_default_verify_paths(ctx)
                 : SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr);
    if (ok != 1)
      return invalid_argument(fmt::format("tls ca file {}: {}", options.ca_file, ssl_error_text()));
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  std::string wire = alpn_wire(options.alpn);
  if (!wire.empty() &&
      SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const unsigned char*>(wire.data()),
                              static_cast<unsigned>(wire.size())) != 0)
    return internal_error("tls: setting ALPN failed");
  return c;
}

asio::awaitable<Result<std::unique_ptr<Stream>>> tls_accept(std::shared_ptr<TlsContext> ctx,
                                                            TcpSocket&& socket, Deadline deadline) {
  std::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  auto stream = std::make_unique<TlsStream>(std::move(ctx), std::move(socket));
  auto handshake = [](TlsStream& s) -> asio::awaitable<Result<bool>> {
    auto [ec] = co_await s.ssl().async_handshake(asio::ssl::stream_base::server);
    if (ec) co_return unavailable(fmt::format("tls handshake: {}", ec.message()));
    co_return true;
  };
  auto r = co_await with_deadline(handshake(*stream), deadline, "tls handshake");
  if (!r.ok()) co_return r.status();
  co_return std::unique_ptr<Stream>(std::move(stream));
}

asio::awaitable<Result<std::unique_ptr<Stream>>> tls_connect(std::shared_ptr<TlsContext> ctx,
                                                             TcpSocket&& socket,
                                                             std::string server_name,
                                                             Deadline deadline) {
  auto stream = std::make_unique<TlsStream>(std::move(ctx), std::move(socket));
  SSL* ssl = stream->ssl().native_handle();
  std::error_code ec;
  asio::ip::make_address(server_name, ec);
  bool is_ip = !ec;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, server_name.c_str());
  } else if (!server_name.empty()) {
    SSL_set_tlsext_host_name(ssl, server_name.c_str());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, server_name.c_str(), server_name.size());
  }
  auto handshake = [](TlsStream& s) -> asio::awaitable<Result<bool>> {
    auto [ec] = co_await s.ssl().async_handshake(asio::ssl::stream_base::client);
    if (ec) co_return unavailable(fmt::format("tls handshake: {}", ec.message()));
    co_return true;
  };
  auto r = co_await with_deadline(handshake(*stream), deadline, "tls handshake");
  if (!r.ok()) co_return r.status();
  co_return std::unique_ptr<Stream>(std::move(stream));
}

}  // namespace cb::net
