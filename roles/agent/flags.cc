#include "roles/agent/flags.h"

#include "roles/agent/version.h"

#include <CLI/CLI.hpp>
#include <asio/ip/address.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace cb::agent {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

Result<HostPort> parse_host_port(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalid_argument(fmt::format("address {:?}: want [IPV6]:PORT", text));
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return invalid_argument(fmt::format("address {:?}: want HOST:PORT", text));
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return invalid_argument(fmt::format("address {:?}: write an IPv6 host in brackets", text));
  }
  if (host.empty()) return invalid_argument(fmt::format("address {:?}: empty host", text));
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535)
    return invalid_argument(fmt::format("address {:?}: port must be 0..65535", text));

  HostPort out;
  out.port = static_cast<uint16_t>(value);
  if (host == "localhost") {
    out.host = "127.0.0.1";
    return out;
  }
  std::error_code addr_ec;
  const asio::ip::address addr = asio::ip::make_address(std::string(host), addr_ec);
  if (addr_ec)
    return invalid_argument(
        fmt::format("address {:?}: host must be an IP address or localhost", text));
  out.host = addr.to_string();
  return out;
}

bool is_loopback(const HostPort& address) {
  std::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(address.host, ec);
  return !ec && addr.is_loopback();
}

Result<std::string> default_data_dir(bool is_root, const char* xdg_data_home, const char* home) {
  if (is_root) return std::string(kRootDataDir);
  if (xdg_data_home != nullptr && xdg_data_home[0] == '/')
    return std::string(xdg_data_home) + "/cocoonbox-agent";
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.local/share/cocoonbox-agent";
  return invalid_argument("no default data directory: set --data-dir, XDG_DATA_HOME or HOME");
}

std::variant<Flags, int> parse_flags(std::span<char* const> args) {
  Flags flags;
  // The local backend names the account its user namespace maps for the tools.
  if (const char* desktop = std::getenv("COCOONBOX_DESKTOP_USER");
      desktop != nullptr && desktop[0] != '\0') {
    flags.desktop_user = desktop;
  }
  std::string listen;
  std::string data_dir;
  CLI::App app("The agent that lives in each box: serves cocoonbox.agent.v1.* to the api's edge.",
               "cocoonbox agent");
  app.set_version_flag("--version", "cocoonbox agent " + std::string(agent_version()));
  app.add_option("--socket", flags.socket_path, "unix socket to serve (created 0660)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "also serve on this TCP HOST:PORT (loopback only; port 0 picks one and the "
                 "chosen address is printed)");
  app.add_flag("--allow-remote", flags.allow_remote,
               "let --listen bind a non-loopback address (plaintext h2c: only behind a trusted "
               "network)");
  app.add_option("--identity", flags.identity_path,
                 "identity file the api writes at every boot and wake")
      ->capture_default_str();
  app.add_option("--data-dir", data_dir,
                 "state directory holding agent.db and box.key (default /var/lib/cocoonbox-agent "
                 "as root, else $XDG_DATA_HOME/cocoonbox-agent)");
  app.add_option("--desktop-user", flags.desktop_user,
                 "account Session.Exec runs processes as, when the agent runs as root and the "
                 "account exists (else the agent's own); default $COCOONBOX_DESKTOP_USER, "
                 "else user")
      ->capture_default_str();
  app.add_option("--workspace", flags.workspace,
                 "Session.Exec's default working directory (the user's home when it does not "
                 "exist)")
      ->capture_default_str();
  app.add_option("--model", flags.model,
                 "the agents' main model, as the gateway names it (no default: without it Send "
                 "is refused)");
  app.add_option("--model-wire", flags.model_wire, "the main model's wire: openai | anthropic")
      ->check(CLI::IsMember({"openai", "anthropic"}))
      ->capture_default_str();
  app.add_flag("--model-vision", flags.model_vision,
               "the main model sees images (else tool-result images become a text note)");
  app.add_option("--model-context-tokens", flags.model_context_tokens,
                 "the main model's context window in tokens")
      ->check(CLI::Range(int64_t{1024}, int64_t{100000000}))
      ->capture_default_str();
  app.add_option("--model-endpoint", flags.model_endpoint,
                 "the model door (default unix:$COCOONBOX_RUN_DIR/model.sock when set, else "
                 "unix:/run/cocoonbox/model.sock); http(s)://HOST[:PORT] for tests");
  app.add_option("--max-steps", flags.max_steps, "model calls per agent turn at most")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--approval-timeout", flags.approval_timeout_s,
                 "seconds a tool call waits for the user's approval; then the turn waits for "
                 "the user")
      ->check(CLI::Range(1, 7 * 24 * 3600))
      ->capture_default_str();
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);
    return 2;
  }

  auto usage = [](std::string_view message) {
    fmt::print(stderr, "cocoonbox agent: {}\nRun with --help for more information.\n", message);
    return 2;
  };
  if (flags.socket_path.empty()) return usage("--socket must not be empty");
  if (flags.identity_path.empty()) return usage("--identity must not be empty");
  if (flags.workspace.empty() || flags.workspace[0] != '/')
    return usage("--workspace must be an absolute path");
  if (!listen.empty()) {
    auto address = parse_host_port(listen);
    if (!address.ok()) return usage(fmt::format("--listen: {}", address.status().message()));
    if (!flags.allow_remote && !is_loopback(*address)) {
      return usage(
          fmt::format("--listen {}: not a loopback address; the agent serves plaintext h2c, so it "
                      "listens on loopback only unless --allow-remote is given",
                      address->to_string()));
    }
    flags.listen = std::move(*address);
  } else if (flags.allow_remote) {
    return usage("--allow-remote needs --listen");
  }
  if (data_dir.empty()) {
    auto dir =
        default_data_dir(::geteuid() == 0, std::getenv("XDG_DATA_HOME"), std::getenv("HOME"));
    if (!dir.ok()) return usage(dir.status().message());
    data_dir = std::move(*dir);
  }
  flags.data_dir = std::move(data_dir);
  if (flags.model_endpoint.empty()) {
    const char* run_dir = std::getenv("COCOONBOX_RUN_DIR");
    flags.model_endpoint = run_dir != nullptr && run_dir[0] == '/'
                               ? fmt::format("unix:{}/model.sock", run_dir)
                               : std::string("unix:/run/cocoonbox/model.sock");
  }
  return flags;
}

}  // namespace cb::agent
