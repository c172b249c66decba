#pragma once
// The edge (architecture §4 "Edge routing"): a client calls cocoonbox.agent.v1.* on the api
// with `authorization: Bearer <user token>` and `x-cocoonbox-box: <box id or name>` (default
// "main"). The edge checks the token and ownership (another user's box is NOT_FOUND), wakes a
// HIBERNATED box transparently, dials the box through the machines backend, replaces the
// user's authorization with a fresh `x-cocoonbox-credential` for the box's current wake, and
// relays the HTTP/2 stream both ways without decoding messages (http/relay.h). While a stream
// is open the box counts the client as attached (presence) and does not idle out.
//
// Affinity: the api's executor.

#include "http/server.h"
#include "roles/api/boxes.h"
#include "roles/api/store/token_index.h"
#include "tools/contract.h"

#include <cstdint>
#include <string_view>

namespace cb::api {

struct EdgeCounters {
  uint64_t streams_total = 0;
  uint64_t streams_open = 0;
  uint64_t bytes_to_box = 0;
  uint64_t bytes_from_box = 0;
  uint64_t refused_total = 0;
};

class Edge {
 public:
  Edge(BoxManager& manager, TokenIndex& tokens) : manager_(manager), tokens_(tokens) {}
  // Routes every /cocoonbox.agent.v1.* path, and every /cocoonbox.mcp/<box> path but
  // /cocoonbox.mcp/control (the api's own), on |router| to the edge.
  void register_with(http::Router& router);
  asio::awaitable<void> handle(http::ServerRequest& req);
  // The box MCP (seed §13.2): /cocoonbox.mcp/<box id or name> with the user's token, any
  // method (Streamable HTTP's POST, GET and DELETE), relayed to the agent's
  // /cocoonbox.mcp/box. Refusals are plain HTTP with a JSON-RPC error body: 401 (token),
  // 404 (box), 503 (cannot start or reach it). A POST counts as an attached client while it
  // runs; a GET stream does not, so an MCP client left open does not keep the box awake.
  asio::awaitable<void> handle_mcp(http::ServerRequest& req);
  const EdgeCounters& counters() const { return counters_; }

 private:
  // Relays |req| to |box|'s agent with |head|, the user's authorization swapped for a fresh
  // box credential; counts the stream, and the box's presence while it runs when |attach|.
  asio::awaitable<void> relay_to_box(http::ServerRequest& req, const Box& box,
                                     http::H2Connection& conn, http::RequestHead head, bool attach);

  BoxManager& manager_;
  TokenIndex& tokens_;
  EdgeCounters counters_;
};

// Answers |req| with a gRPC trailers-only error carrying |status|.
asio::awaitable<void> respond_grpc_error(http::ServerRequest& req, const Status& status);

}  // namespace cb::api
