// `cocoonbox agent`: flags -> Agent -> serve until SIGTERM/SIGINT -> drain -> exit 0.

#include "roles/agent/agent.h"

#include "base/log.h"
#include "roles/agent/agent_server.h"
#include "roles/agent/exec_service.h"
#include "roles/agent/flags.h"
#include "roles/agent/version.h"

#include <climits>
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <malloc.h>
#include <string>
#include <string_view>
#include <sys/mman.h>
#include <unistd.h>

namespace cb::agent {
namespace {

// In-flight calls get this long to finish after SIGTERM/SIGINT.
constexpr std::chrono::seconds kDrainTimeout{2};

void log_start(const Flags& flags) {
  log::info("agent starting", {{"version", agent_version()},
                               {"pid", static_cast<int64_t>(::getpid())},
                               {"socket", flags.socket_path},
                               {"identity", flags.identity_path},
                               {"data_dir", flags.data_dir}});
}

// Whether the tools run apart from the loop (seed §3 "Privilege split"): only an agent that
// is root can hand them another account; otherwise they can read agent.db.
void log_tools_user(const Flags& flags) {
  auto user = resolve_exec_user(flags.desktop_user, ::geteuid());
  if (!user.ok()) {
    log::warn("tools' account unknown", {{"error", user.status().to_string()}});
  } else if (user->switch_user) {
    log::info("privilege split: tools run as the desktop user",
              {{"user", user->account.name}, {"uid", static_cast<int64_t>(user->account.uid)}});
  } else {
    log::warn("NO PRIVILEGE SPLIT: tools run as the agent's own account and can read its data",
              {{"user", user->account.name},
               {"uid", static_cast<int64_t>(user->account.uid)},
               {"why", ::geteuid() == 0 ? "the desktop user does not exist"
                                        : "the agent does not run as root"}});
  }
}

// Idle memory (issue 6: idle RSS <= 10 MB). Starting touches much that serving does not use
// again: flag parsing, migrations, the static initializers of every role in the one binary,
// and the kernel maps the executable's pages in 64 KiB fault-around blocks. Once the agent
// listens: return the free heap to the kernel (malloc_trim), and drop this process's mappings
// of the executable's read-only pages (MADV_DONTNEED). Those are clean private file pages: the
// page cache keeps them and the next use maps them back unchanged. A mapping that holds an
// anonymous (copy-on-write) page, such as RELRO after relocation, is left alone, since
// dropping it would bring back the file's bytes.
void release_startup_memory() {
  ::malloc_trim(0);
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return;
  exe[n] = '\0';
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  uintptr_t start = 0, end = 0;
  bool candidate = false;
  size_t dropped = 0;
  auto drop = [&] {
    if (!candidate) return;
    candidate = false;
    if (::madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED) == 0)
      dropped += end - start;
  };
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, perms, &path_at) >= 3 &&
        path_at > 0) {
      drop();  // the previous mapping, whose fields are all read
      start = lo;
      end = hi;
      candidate = perms[1] != 'w' && std::string_view(line).substr(path_at) == exe;
    } else if (candidate && line.rfind("Anonymous:", 0) == 0) {
      unsigned long kb = 1;
      if (std::sscanf(line.c_str(), "Anonymous: %lu", &kb) != 1 || kb != 0) candidate = false;
    }
  }
  drop();
  log::info("startup memory released",
            {{"executable_bytes_unmapped", static_cast<int64_t>(dropped)}});
}

void log_stop(int signo) { log::info("agent stopping", {{"signal", signo}}); }

// Printed on stdout once the agent accepts, so scripts (and --listen HOST:0) learn where.
void print_listening(const Agent& agent) {
  fmt::print("listening on unix:{}\n", agent.socket_path());
  if (agent.tcp_address()) fmt::print("listening on {}\n", agent.tcp_address()->to_string());
  std::fflush(stdout);
}

// The process's one coroutine root: start, wait for a signal, drain. Returns the exit status.
asio::awaitable<int> serve(Agent& agent, asio::signal_set& signals) {
  Status st = co_await agent.start();
  if (!st.ok()) {
    log::error("agent failed to start", {{"error", st.to_string()}});
    co_await agent.shutdown(net::after(kDrainTimeout));
    co_return 1;
  }
  print_listening(agent);
  release_startup_memory();
  auto [ec, signo] = co_await signals.async_wait(net::kToken);
  log_stop(ec ? 0 : signo);
  co_await agent.shutdown(net::after(kDrainTimeout));
  log::info("agent stopped");
  co_return 0;
}

int run_agent(const Flags& flags) {
  log_start(flags);
  log_tools_user(flags);
  asio::io_context io;
  AgentConfig config;
  config.socket_path = flags.socket_path;
  config.listen = flags.listen;
  config.identity_path = flags.identity_path;
  config.data_dir = flags.data_dir;
  config.exec.desktop_user = flags.desktop_user;
  config.exec.workspace = flags.workspace;
  config.agents.model_endpoint = flags.model_endpoint;
  config.agents.main.name = flags.model;
  config.agents.main.wire =
      flags.model_wire == "anthropic" ? model::Wire::kAnthropic : model::Wire::kOpenAi;
  config.agents.main.vision = flags.model_vision;
  config.agents.main.context_tokens = flags.model_context_tokens;
  config.agents.max_steps = flags.max_steps;
  config.agents.approval_timeout = std::chrono::seconds(flags.approval_timeout_s);
  auto agent = Agent::create(io.get_executor(), std::move(config));
  if (!agent.ok()) {
    log::error("agent failed to start", {{"error", agent.status().to_string()}});
    fmt::print(stderr, "cocoonbox agent: {}\n", agent.status().to_string());
    return 1;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  int rc = 1;
  asio::co_spawn(io, serve(**agent, signals), [&](std::exception_ptr e, int code) {
    rc = code;
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        log::error("agent failed", {{"error", ex.what()}});
      } catch (...) {
        log::error("agent failed", {{"error", "unknown exception"}});
      }
      rc = 1;
    }
    // Connections still winding down after the drain deadline need not finish.
    io.stop();
  });
  io.run();
  return rc;
}

}  // namespace

int run(std::span<char* const> args) {
  try {
    auto parsed = parse_flags(args);
    if (const int* rc = std::get_if<int>(&parsed)) return *rc;
    return run_agent(std::get<Flags>(parsed));
  } catch (const std::exception& e) {
    log::error("agent failed", {{"error", e.what()}});
    return 1;
  }
}

}  // namespace cb::agent
