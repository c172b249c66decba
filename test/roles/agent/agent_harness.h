#pragma once
// An in-process agent for tests: its files in a temporary directory (Setup), the edge's
// signing key and credentials, and with_agent(), which runs a real Agent on a fresh
// io_context around a test body.

#include "grpc/client.h"
#include "roles/agent/agent_server.h"
#include "support/run_sync.h"
#include "test_util.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cb::agent::test {

inline constexpr std::string_view kBox = "box-7f3a";
inline constexpr std::string_view kWake = "wake-0001";
inline constexpr std::string_view kKeyId = "edge-2026-10";

// One agent's files in a temporary directory.
struct Setup {
  TempDir dir;
  crypto::SeededRandom random{7};
  crypto::SigningKey edge_key = crypto::SigningKey::generate(random);  // the api's
  crypto::SeededRandom box_random{8};

  AgentConfig config() {
    AgentConfig c;
    c.socket_path = dir / "agent.sock";
    c.identity_path = dir / "identity";
    c.data_dir = dir.path() / "data";
    c.random = &box_random;
    return c;
  }
  void deliver(std::string_view wake = kWake) {
    write_file(dir / "identity", identity_json(edge_key, kKeyId, kBox, wake));
  }
  std::string credential(std::string_view wake = kWake) {
    return fresh_credential(edge_key, kKeyId, kBox, wake);
  }
};

inline std::vector<std::string> one(std::string credential) { return {std::move(credential)}; }
inline std::vector<std::string> none() { return {}; }

// Plain function, not a coroutine: gcc 12 mishandles braced temporaries in coroutine bodies.
inline grpc::CallOptions call_options_with(
    const std::vector<std::string>& credentials,
    std::chrono::steady_clock::duration timeout = std::chrono::seconds(5)) {
  grpc::CallOptions options;
  options.deadline = net::after(timeout);
  for (const auto& c : credentials) {
    options.metadata.push_back(http::Header{std::string(kCredentialHeader), c});
  }
  return options;
}

// Creates and starts an agent from |config|, runs |body| on the loop, then shuts the agent
// down (also when |body| throws, so run_sync always returns) and rethrows.
template <typename Body>
void with_agent(const AgentConfig& config, Body body) {
  asio::io_context io;
  auto agent = Agent::create(io.get_executor(), config);
  REQUIRE(agent.status() == ok_status());
  cb::test::run_sync(io, [&]() -> asio::awaitable<void> {
    std::exception_ptr failure;
    Status started = co_await (*agent)->start();
    if (!started.ok()) {
      failure = std::make_exception_ptr(std::runtime_error(started.to_string()));
    } else {
      try {
        co_await body(**agent);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    co_await (*agent)->shutdown(net::after(std::chrono::seconds(2)));
    if (failure) std::rethrow_exception(failure);
  }());
}

}  // namespace cb::agent::test
