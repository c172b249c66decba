#pragma once
// Agent: one running agent (README.md): its data directory (0700) with agent.db and box.key,
// the identity store, the Session service (Hello, Exec), and an HTTP/2 server for them on a unix
// socket (0660) plus an optional TCP listener. Every call passes the credential check of
// IdentityStore::check() first (grpc::Server::set_authorizer); refusals are logged with the
// method and the reason, never the credential.
//
// Lifecycle: create() (blocking set-up, before the loop runs) -> start() (records the start in
// agent.db and accepts) -> shutdown() (stops accepting, drains until the deadline, removes the
// socket file). `cocoonbox agent` (agent.cc) drives it from flags and signals; tests drive it
// in-process.
//
// Affinity: the executor passed to create().

#include "base/clock.h"
#include "base/result.h"
#include "crypto/keys.h"
#include "crypto/random.h"
#include "db/worker.h"
#include "grpc/server.h"
#include "http/server.h"
#include "mcp/http_server.h"
#include "mcp/server.h"
#include "net/asio.h"
#include "roles/agent/agents_service.h"
#include "roles/agent/box_mcp.h"
#include "roles/agent/box_tools.h"
#include "roles/agent/browser_tools.h"
#include "roles/agent/exec_service.h"
#include "roles/agent/flags.h"
#include "roles/agent/identity.h"
#include "roles/agent/session_service.h"
#include "roles/agent/state_service.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>

namespace cb::agent {

struct AgentConfig {
  std::string socket_path;
  std::optional<HostPort> listen;  // policy (loopback unless --allow-remote) is the caller's
  std::string identity_path;
  std::filesystem::path data_dir;
  const Clock* clock = &system_clock();               // credential expiry, agent_starts
  crypto::Random* random = &crypto::system_random();  // the box key, on first start
  ExecConfig exec;      // Session.Exec: desktop user, default cwd, kill grace
  AgentsConfig agents;  // Agents: the models and the loop's limits
  // State: the roots and the door; unset: default_state_config(exec.workspace). agent_db,
  // agent_copy_dir (<data_dir>/state) and wait_for_turns are always this agent's own.
  std::optional<StateConfig> state;
};

class Agent {
 public:
  // Creates the data directory (mode 0700, parents as needed) and the socket's directory,
  // opens and migrates agent.db, loads or creates box.key, and binds the listeners; the unix
  // socket is created 0660. A stale socket file (nobody accepts on it) is replaced; a live
  // one, or a path that is not a socket, is refused. Blocking: call before the loop runs.
  // Errors: kInvalidArgument (socket path too long), kFailedPrecondition (socket path in use
  //   or not a socket; data dir not a directory), kUnavailable (bind), kInternal (file
  //   system), and those of open_agent_db() and load_or_create_box_key().
  static Result<std::unique_ptr<Agent>> create(net::Executor executor, AgentConfig config);

  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  // Removes the socket file if it is still the one this agent bound.
  ~Agent();

  // Records this start in agent.db and starts accepting. Errors: agent.db's.
  asio::awaitable<Status> start();
  // Removes the socket file, stops accepting, lets calls in flight finish until |deadline|,
  // then closes what is left and SIGKILLs the process groups of Execs still running.
  asio::awaitable<void> shutdown(net::Deadline deadline);

  const std::string& socket_path() const { return config_.socket_path; }
  // The TCP listener's address with the port it got, if there is one.
  const std::optional<HostPort>& tcp_address() const { return tcp_address_; }
  const crypto::X25519PublicKey& box_public_key() const { return box_key_.public_key(); }

 private:
  Agent(net::Executor executor, AgentConfig config, std::unique_ptr<db::Worker> db,
        crypto::X25519KeyPair box_key);
  Status listen();
  void remove_socket();

  net::Executor executor_;
  AgentConfig config_;
  std::unique_ptr<db::Worker> db_;
  crypto::X25519KeyPair box_key_;
  IdentityStore identity_;
  ExecService exec_;
  SessionService session_;
  // The box MCP: tools, their provider, the MCP server and its HTTP transport, each
  // outliving the next.
  BoxTools box_tools_;
  BoxMcpTools box_mcp_tools_;
  mcp::Server mcp_server_;
  mcp::HttpServerTransport mcp_http_;
  // The browser_* tools (Chromium on demand), a tool set of agents_.
  BrowserTools browser_tools_;
  // Agents and the model loop; uses box_tools_, browser_tools_ and db_.
  AgentsService agents_;
  // State: saves and restores, called by the api.
  StateService state_;
  // Declared in this order so the HTTP server goes first, then the router it uses, then the
  // gRPC server the router's routes point into, then the service.
  grpc::Server grpc_server_;
  http::Router router_;
  std::unique_ptr<http::Server> http_server_;
  std::optional<HostPort> tcp_address_;
  // The socket file as bound, so only our own socket is ever removed.
  std::optional<std::pair<dev_t, ino_t>> socket_id_;
};

}  // namespace cb::agent
