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

}  // namespace cb::client
