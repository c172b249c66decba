#include "roles/agent/agent_server.h"

#include "base/base64.h"
#include "base/log.h"
#include "crypto/bytes.h"
#include "roles/agent/agent_db.h"
#include "roles/agent/box_key.h"
#include "roles/agent/version.h"
#include "tools/contract.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace cb::agent {
namespace {

Status fs_error(std::string_view what, const std::filesystem::path& path, int err) {
  return internal_error(fmt::format("{} {}: {}", what, path.string(), std::strerror(err)));
}

// mkdir -p |dir|, then makes sure |dir| itself is a directory with mode |mode| exactly.
Status prepare_dir(const std::filesystem::path& dir, mode_t mode, bool tighten) {
  std::error_code ec;
  if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), ec);
  if (ec) return fs_error("create", dir.parent_path(), ec.value());
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return fs_error("create", dir, errno);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fs_error("stat", dir, errno);
  if (!S_ISDIR(st.st_mode))
    return failed_precondition(fmt::format("{} is not a directory", dir.string()));
  if (tighten && (st.st_mode & 07777) != mode) {
    if (::chmod(dir.c_str(), mode) != 0) return fs_error("chmod", dir, errno);
    if ((st.st_mode & 07777 & ~mode) != 0) {
      log::warn("data directory was open to others; tightened",
                {{"path", dir.string()}, {"mode", fmt::format("{:o}", st.st_mode & 07777)}});
    }
  }
  return ok_status();
}

// A socket file left by an agent that crashed refuses connections; a live agent's accepts.
// Refuses to replace anything that is not a socket.
Status check_socket_path(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return invalid_argument(
        fmt::format("socket path {:?} must be 1..{} bytes", path, sizeof(addr.sun_path) - 1));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return ok_status();
    return fs_error("stat", path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return failed_precondition(
        fmt::format("{} exists and is not a socket; refusing to replace it", path));
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fs_error("socket for", path, errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(fd);
  if (rc == 0 || err == EAGAIN) {
    return failed_precondition(fmt::format("another process is serving {}", path));
  }
  if (err == ECONNREFUSED || err == ENOENT) return ok_status();  // stale: replaced by bind
  return failed_precondition(
      fmt::format("cannot tell whether {} is in use: {}", path, std::strerror(err)));
}

void log_listening(std::string_view address) { log::info("listening", {{"addr", address}}); }

mcp::ServerOptions mcp_options() {
  mcp::ServerOptions o;
  o.info.name = "cocoonbox-box";
  o.info.title = "cocoonbox box";
  o.info.version = std::string(agent_version());
  o.instructions =
      "Tools that act inside the user's cocoonbox box (a persistent Linux machine) as its "
      "desktop user. Relative paths start in /workspace.";
  return o;
}

// Every MCP request carries the edge's credential for this wake, as gRPC calls do.
mcp::HttpServerOptions mcp_http_options(IdentityStore& identity) {
  mcp::HttpServerOptions o;
  o.authenticate =
      [&identity](const http::RequestHead& head) -> asio::awaitable<Result<std::string>> {
    Status st = identity.check(head.headers);
    if (!st.ok()) {
      log::warn("mcp request refused", {{"method", head.method}, {"error", st.to_string()}});
      co_return st;
    }
    co_return std::string("owner");
  };
  return o;
}

// State's config: the roots and the door, and this agent's database and turns for quiesced
// saves (state_service.h).
StateConfig state_config_for(const AgentConfig& config, AgentsService& agents) {
  StateConfig c = config.state ? *config.state : default_state_config(config.exec.workspace);
  c.agent_db = (config.data_dir / kAgentDbFile).string();
  c.agent_copy_dir = (config.data_dir / "state").string();
  c.wait_for_turns = [&agents](net::Deadline deadline) { return agents.wait_for_turns(deadline); };
  return c;
}

}  // namespace

Agent::Agent(net::Executor executor, AgentConfig config, std::unique_ptr<db::Worker> db,
             crypto::X25519KeyPair box_key)
    : executor_(std::move(executor)),
      config_(std::move(config)),
      db_(std::move(db)),
      box_key_(std::move(box_key)),
      identity_(config_.identity_path, *config_.clock),
      exec_(executor_, config_.exec),
      session_(box_key_.public_key(), identity_, exec_, agents_),
      box_tools_(executor_, config_.exec),
      box_mcp_tools_(box_tools_),
      mcp_server_(mcp_options(), box_mcp_tools_),
      mcp_http_(mcp_server_, executor_, mcp_http_options(identity_)),
      browser_tools_(executor_, browser_config_for(config_.exec)),
      agents_(executor_, *db_, box_tools_, config_.agents, *config_.clock, *config_.random),
      state_(state_config_for(config_, agents_)) {
  agents_.add_tool_set(browser_tools_);
  grpc_server_.add_service(session_);
  grpc_server_.add_service(agents_);
  grpc_server_.add_service(state_);
  // The authorizer runs on the loop for every call; |this| owns the gRPC server, so it
  // outlives every call the server routes.
  grpc_server_.set_authorizer([this](const http::RequestHead& head) {
    Status st = identity_.check(head.headers);
    if (!st.ok()) {
      log::warn("call refused", {{"method", head.path_only()}, {"error", st.to_string()}});
    }
    return st;
  });
  grpc_server_.register_with(router_);
  mcp_http_.mount(router_, std::string(tools::kAgentMcpPath));
  // gRPC needs HTTP/2; HTTP/1.1 connections are closed unanswered, so nothing is served
  // past the authorizer.
  http::ServerOptions options;
  options.allow_http1 = false;
  http_server_ = std::make_unique<http::Server>(executor_, router_, options);
}

Result<std::unique_ptr<Agent>> Agent::create(net::Executor executor, AgentConfig config) {
  RETURN_IF_ERROR(check_socket_path(config.socket_path));
  RETURN_IF_ERROR(prepare_dir(config.data_dir, 0700, /*tighten=*/true));
  const std::filesystem::path socket_dir = std::filesystem::path(config.socket_path).parent_path();
  if (!socket_dir.empty()) RETURN_IF_ERROR(prepare_dir(socket_dir, 0755, /*tighten=*/false));

  auto db = open_agent_db(config.data_dir);
  if (!db.ok())
    return db.status().with_prefix(fmt::format("{}/{}", config.data_dir.string(), kAgentDbFile));
  ASSIGN_OR_RETURN(crypto::X25519KeyPair box_key,
                   load_or_create_box_key(config.data_dir, *config.random));
  if (config.agents.config_file.empty())
    config.agents.config_file = config.data_dir / kAgentConfigFile;
  std::unique_ptr<Agent> agent(
      new Agent(std::move(executor), std::move(config), std::move(*db), std::move(box_key)));
  RETURN_IF_ERROR(agent->listen());
  return agent;
}

Status Agent::listen() {
  const std::string& path = config_.socket_path;
  // Bind under umask 0177, so the socket never exists with more than 0600, then open it to
  // the group. umask is process-wide; nothing else creates files while the agent starts.
  const mode_t old_mask = ::umask(0177);
  Status st = http_server_->listen_unix(path);
  ::umask(old_mask);
  RETURN_IF_ERROR(st);
  struct stat sock {};
  if (::lstat(path.c_str(), &sock) != 0) return fs_error("stat", path, errno);
  socket_id_.emplace(sock.st_dev, sock.st_ino);
  if (::chmod(path.c_str(), 0660) != 0) return fs_error("chmod", path, errno);

  if (config_.listen) {
    RETURN_IF_ERROR(http_server_->listen_tcp(config_.listen->host, config_.listen->port));
    HostPort bound = *config_.listen;
    bound.port = http_server_->port();
    if (!is_loopback(bound)) {
      log::warn("serving plaintext h2c on a non-loopback address", {{"addr", bound.to_string()}});
    }
    tcp_address_ = std::move(bound);
  }
  return ok_status();
}

Agent::~Agent() { remove_socket(); }

void Agent::remove_socket() {
  if (!socket_id_) return;
  struct stat st {};
  if (::lstat(config_.socket_path.c_str(), &st) == 0 && st.st_dev == socket_id_->first &&
      st.st_ino == socket_id_->second) {
    ::unlink(config_.socket_path.c_str());
  }
  socket_id_.reset();
}

asio::awaitable<Status> Agent::start() {
  auto identity = identity_.current();  // logs the identity, or that it is not there yet
  StartRecord record;
  record.started_unix = config_.clock->now_unix();
  if (identity.ok()) record.wake_id = (*identity)->identity().wake_id;
  record.agent_version = std::string(agent_version());
  record.pid = static_cast<int64_t>(::getpid());
  Status st = co_await record_start(*db_, std::move(record));
  if (!st.ok()) co_return st.with_prefix(std::string("agent.db"));
  st = co_await agents_.start();
  if (!st.ok()) co_return st.with_prefix(std::string("agent.db"));
  // Shell sessions of MCP sessions a previous agent had open (they all ended with it).
  const size_t swept = co_await box_tools_.sweep_sessions();
  if (swept > 0) log::info("shell sessions swept", {{"count", static_cast<int64_t>(swept)}});
  http_server_->start();
  log_listening(std::string("unix:") + config_.socket_path);
  if (tcp_address_) log_listening(tcp_address_->to_string());
  co_return ok_status();
}

asio::awaitable<void> Agent::shutdown(net::Deadline deadline) {
  remove_socket();
  mcp_http_.close_all();
  co_await agents_.stop();
  co_await browser_tools_.shutdown();
  co_await http_server_->shutdown(deadline);
  exec_.kill_all();
}

}  // namespace cb::agent
