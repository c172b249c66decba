#include "roles/agent/session_service.h"

#include "base/log.h"
#include "crypto/bytes.h"
#include "roles/agent/version.h"

namespace cb::agent {

namespace v1 = ::cocoonbox::agent::v1;

v1::HelloResponse make_hello(const crypto::X25519PublicKey& box_public_key,
                             const crypto::BoxIdentity& identity) {
  v1::HelloResponse resp;
  resp.set_box_public_key(std::string(crypto::char_view(box_public_key)));
  resp.set_agent_version(std::string(agent_version()));
  for (std::string_view c : kCapabilities) resp.add_capabilities(std::string(c));
  resp.set_box_id(identity.box_id);
  resp.set_wake_id(identity.wake_id);
  return resp;
}

asio::awaitable<Result<v1::HelloResponse>> SessionService::Hello(grpc::CallContext& ctx,
                                                                 v1::HelloRequest&& req) {
  // The identity that authorized this call, unless the api rewrote it in between; either way
  // the current one is what the box is now.
  auto verifier = identity_.current();
  if (!verifier.ok()) co_return verifier.status();
  log::debug("hello", {{"client", req.client()}, {"peer", ctx.peer()}});
  co_return make_hello(box_public_key_, (*verifier)->identity());
}

}  // namespace cb::agent
