#pragma once
// One gRPC channel (one HTTP/2 connection) from a client to the api's endpoint: TLS with the
// system's roots and ALPN h2 for https://, h2c for a loopback http://. Every call on it carries
// the user's token as "authorization: Bearer".

#include "base/result.h"
#include "client/endpoint.h"
#include "grpc/client.h"

#include <memory>
#include <string>

namespace cb::client {

struct Connection {
  Endpoint endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::string token;

  // Call options with the bearer token, |extra| metadata and a deadline |timeout| from now
  // (zero: none).
  grpc::CallOptions call_options(std::chrono::milliseconds timeout = {},
                                 grpc::Metadata extra = {}) const;
};

// Errors: kInvalidArgument (TLS set-up).
Result<Connection> open_connection(net::Executor executor, Endpoint endpoint, std::string token);

// The connection of the user signed in on this machine, as every command that talks to the api
// opens it: config_dir(), load_config(), the endpoint, the token (through the credential
// helper when one is set), open_connection().
// Errors: kFailedPrecondition "not logged in: run `cocoonbox login` first" with no config;
//   those of the steps (their messages name the file or field).
asio::awaitable<Result<Connection>> connect_signed_in(net::Executor executor);

}  // namespace cb::client
