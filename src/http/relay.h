#pragma once
// relay() forwards one HTTP exchange from a server-side request to an HTTP/2 upstream stream
// and back, without decoding the body: request headers (as given), request body, response
// headers, response body and trailers, in both directions at once, each direction with the
// flow control of its own connection (a slow reader on either side stalls only this stream).
//
// It is the edge's proxy for gRPC and MCP calls into a box: the caller rewrites the request
// head (drops the user's authorization, adds the box credential) and picks the upstream.
// Cancellation crosses over: a client reset resets the upstream stream and an upstream reset
// resets the client's.
//
// Affinity: |client| and |upstream| live on the same executor.

#include "base/result.h"
#include "http/h2_connection.h"
#include "http/server.h"
#include "net/asio.h"

#include <cstdint>

namespace cb::http {

struct RelayStats {
  uint64_t request_bytes = 0;   // body bytes client -> upstream
  uint64_t response_bytes = 0;  // body bytes upstream -> client
};

// Relays |client|'s exchange to a new stream on |upstream| opened with |head|, less the
// connection-specific fields HTTP/2 forbids (an HTTP/1.1 client's connection, keep-alive,
// transfer-encoding, upgrade, te other than "trailers", and fields named by connection).
// Returns ok when both directions completed. Errors: kUnavailable (upstream connection or
// stream failed: the client gets 502 if nothing was sent yet, else a reset), kCancelled (the
// client went away; the upstream stream was reset). |stats| (optional) counts body bytes.
asio::awaitable<Status> relay(ServerRequest& client, H2Connection& upstream,
                              const RequestHead& head, RelayStats* stats = nullptr);

}  // namespace cb::http
