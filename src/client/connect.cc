#include "client/connect.h"

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

}  // namespace cb::client
