#include "client/connect.h"

#include "client/config.h"
#include "net/tls.h"

namespace cb::client {

grpc::CallOptions Connection::call_options(std::chrono::milliseconds timeout,
                                           grpc::Metadata extra) const {
  grpc::CallOptions o;
  if (timeout.count() > 0) o.deadline = net::after(timeout);
  o.metadata.push_back(http::Header{std::string("authorization"), "Bearer " + token});
  for (auto& h : extra) o.metadata.push_back(std::move(h));
  return o;
}

Result<Connection> open_connection(net::Executor executor, Endpoint endpoint, std::string token) {
  grpc::ChannelOptions opts;
  opts.dial.host = endpoint.host;
  opts.dial.port = endpoint.port;
  if (endpoint.tls) {
    net::TlsClientOptions tls;  // system roots, ALPN h2
    ASSIGN_OR_RETURN(opts.dial.tls, net::TlsContext::client(tls));
    opts.dial.server_name = endpoint.host;
  }
  opts.connect_timeout = std::chrono::seconds(10);
  opts.user_agent = "cocoonbox-cli/" COCOONBOX_VERSION;
  Connection c;
  c.channel = grpc::Channel::create(std::move(executor), std::move(opts));
  c.endpoint = std::move(endpoint);
  c.token = std::move(token);
  return c;
}

asio::awaitable<Result<Connection>> connect_signed_in(net::Executor executor) {
  auto dir = config_dir();
  if (!dir.ok()) co_return dir.status();
  auto cfg = load_config(*dir);
  if (!cfg.ok()) co_return cfg.status();
  if (!*cfg) co_return failed_precondition("not logged in: run `cocoonbox login` first");
  auto endpoint = parse_endpoint((*cfg)->endpoint);
  if (!endpoint.ok()) co_return endpoint.status();
  auto token = co_await load_token(*dir, **cfg);
  if (!token.ok()) co_return token.status();
  co_return open_connection(std::move(executor), std::move(*endpoint), std::move(*token));
}

}  // namespace cb::client
