#pragma once
// cocoonbox.agent.v1.Session on the agent (seed §4.2(a)): Hello, which tells a client the box's
// X25519 public key, the agent's version and capabilities, and the box and wake it serves; and
// Exec, which runs a process in the box (seed §13.7; ExecService in exec_service.h). Calls
// reach the handlers only after the server's authorizer accepted their credential
// (roles/agent/agent_server.h).
//
// The logic is the plain function make_hello(); the service only adapts (house style H14).
//
// Affinity: the agent's io_context.

#include "base/result.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "crypto/credential.h"
#include "crypto/keys.h"
#include "roles/agent/agents_service.h"
#include "roles/agent/exec_service.h"
#include "roles/agent/identity.h"

#include <string_view>

namespace cb::agent {

// What this agent can do, as Hello reports it; grows with the agent.
inline constexpr std::string_view kCapabilities[] = {"session.hello", "session.exec",
                                                     "session.events", "agents"};

// The Hello answer of a box with |box_public_key| and |identity|.
cocoonbox::agent::v1::HelloResponse make_hello(const crypto::X25519PublicKey& box_public_key,
                                               const crypto::BoxIdentity& identity);

class SessionService final : public cocoonbox::agent::v1::Session::Service {
 public:
  // |identity|, |exec| and |agents| are not owned and must outlive the service.
  SessionService(const crypto::X25519PublicKey& box_public_key, IdentityStore& identity,
                 ExecService& exec, AgentsService& agents)
      : box_public_key_(box_public_key), identity_(identity), exec_(exec), agents_(agents) {}

  // Errors: kUnavailable when the identity file went away after the call was authorized.
  asio::awaitable<Result<cocoonbox::agent::v1::HelloResponse>> Hello(
      grpc::CallContext& ctx, cocoonbox::agent::v1::HelloRequest&& req) override;

  // See ExecService::exec.
  asio::awaitable<Status> Exec(
      grpc::CallContext& ctx, grpc::ServerReader<cocoonbox::agent::v1::ExecRequest>& reader,
      grpc::ServerWriter<cocoonbox::agent::v1::ExecResponse>& writer) override {
    return exec_.exec(ctx, reader, writer);
  }

  // See AgentsService::events.
  asio::awaitable<Status> Events(grpc::CallContext& ctx, cocoonbox::agent::v1::EventsRequest&& req,
                                 grpc::ServerWriter<cocoonbox::agent::v1::Event>& writer) override {
    return agents_.events(ctx, std::move(req), writer);
  }

 private:
  crypto::X25519PublicKey box_public_key_;
  IdentityStore& identity_;
  ExecService& exec_;
  AgentsService& agents_;
};

}  // namespace cb::agent
