#include "roles/api/edge.h"

#include "base/log.h"
#include "grpc/wire.h"
#include "http/relay.h"
#include "roles/api/boxes_service.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace cb::api {

asio::awaitable<void> respond_grpc_error(http::ServerRequest& req, const Status& status) {
  http::Headers h;
  h.push_back(http::Header{std::string("content-type"), std::string("application/grpc")});
  h.push_back(
      http::Header{std::string("grpc-status"), std::to_string(static_cast<int>(status.code()))});
  h.push_back(http::Header{std::string("grpc-message"), grpc::percent_encode(status.message())});
  (void)co_await req.send_headers(200, h, true);
}

// An MCP refusal: an HTTP status and a JSON-RPC error body naming the reason.
asio::awaitable<void> respond_mcp_error(http::ServerRequest& req, const Status& status) {
  int http_status = 503;
  switch (status.code()) {
    case Code::kUnauthenticated:
      http_status = 401;
      break;
    case Code::kPermissionDenied:
      http_status = 403;
      break;
    case Code::kNotFound:
      http_status = 404;
      break;
    case Code::kInvalidArgument:
      http_status = 400;
      break;
    case Code::kResourceExhausted:
      http_status = 429;
      break;
    default:
      break;
  }
  nlohmann::json body = {{"jsonrpc", "2.0"},
                         {"id", nullptr},
                         {"error", {{"code", -32000}, {"message", std::string(status.message())}}}};
  http::Headers extra;
  if (http_status == 401)
    extra.push_back(http::Header{std::string("www-authenticate"), std::string("Bearer")});
  (void)co_await http::respond(req, http_status, "application/json", body.dump(), extra);
}

void Edge::register_with(http::Router& router) {
  router.handle_prefix("POST", "/cocoonbox.agent.v1.",
                       [this](http::ServerRequest& req) { return handle(req); });
  router.handle_prefix("", std::string(tools::kBoxMcpPrefix),
                       [this](http::ServerRequest& req) { return handle_mcp(req); });
}

asio::awaitable<void> Edge::handle_mcp(http::ServerRequest& req) {
  const auto& in = req.head();
  std::string_view ref = in.path_only().substr(tools::kBoxMcpPrefix.size());
  if (ref.empty() || ref.find('/') != std::string_view::npos) {
    Status no_box = not_found(fmt::format("no MCP endpoint {}: use {}<box name or id>",
                                          in.path_only(), tools::kBoxMcpPrefix));
    co_await respond_mcp_error(req, no_box);
    co_return;
  }
  auto token = bearer_token(http::find_header(in.headers, "authorization"));
  Result<Principal> who =
      token.ok() ? tokens_.authenticate(*token) : Result<Principal>(token.status());
  if (!who.ok()) {
    ++counters_.refused_total;
    co_await respond_mcp_error(req, who.status());
    co_return;
  }
  auto target = co_await manager_.connect(who->user_id, std::string(ref));
  if (!target.ok()) {
    ++counters_.refused_total;
    co_await respond_mcp_error(req, target.status());
    co_return;
  }
  auto& [box, conn] = *target;
  http::RequestHead head = in;
  head.path = std::string(tools::kAgentMcpPath);
  if (auto q = in.path.find('?'); q != std::string::npos) head.path += in.path.substr(q);
  // A POST is an attached client while it runs; a GET stream stays open as long as the MCP
  // client does, and must not keep the box from idling out.
  co_await relay_to_box(req, box, *conn, std::move(head), in.method == "POST");
}

asio::awaitable<void> Edge::relay_to_box(http::ServerRequest& req, const Box& box,
                                         http::H2Connection& conn, http::RequestHead head,
                                         bool attach) {
  // The user's token never reaches the box; a client cannot supply its own credential.
  std::erase_if(head.headers, [](const http::Header& h) {
    return h.name == "authorization" || h.name == "x-cocoonbox-credential" ||
           h.name == "x-cocoonbox-box";
  });
  head.headers.push_back(
      http::Header{std::string("x-cocoonbox-credential"), manager_.credential(box)});
  ++counters_.streams_total;
  ++counters_.streams_open;
  if (attach) manager_.attach(box.id);
  http::RelayStats stats;
  Status st = co_await http::relay(req, conn, head, &stats);
  if (attach) manager_.detach(box.id);
  --counters_.streams_open;
  counters_.bytes_to_box += stats.request_bytes;
  counters_.bytes_from_box += stats.response_bytes;
  if (!st.ok()) {
    log::debug(
        "edge relay ended",
        {{"box", box.id}, {"method", head.method}, {"path", head.path}, {"error", st.to_string()}});
  }
}

asio::awaitable<void> Edge::handle(http::ServerRequest& req) {
  const auto& in = req.head();
  auto token = bearer_token(http::find_header(in.headers, "authorization"));
  Result<Principal> who =
      token.ok() ? tokens_.authenticate(*token) : Result<Principal>(token.status());
  if (!who.ok()) {
    ++counters_.refused_total;
    co_await respond_grpc_error(req, who.status());
    co_return;
  }
  const std::string* ref = http::find_header(in.headers, "x-cocoonbox-box");
  std::string box_ref = ref != nullptr ? *ref : std::string();
  auto target = co_await manager_.connect(who->user_id, std::move(box_ref));
  if (!target.ok()) {
    ++counters_.refused_total;
    co_await respond_grpc_error(req, target.status());
    co_return;
  }
  auto& [box, conn] = *target;
  co_await relay_to_box(req, box, *conn, in, /*attach=*/true);
}

}  // namespace cb::api
