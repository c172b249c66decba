#include "client/config.h"

#include "base/file.h"
#include "proc/spawn.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace cb::client {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigFile = "cli.json";
constexpr const char* kTokenFile = "token";

Status ensure_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return internal_error(fmt::format("create {}: {}", dir.string(), ec.message()));
  if (::chmod(dir.c_str(), 0700) != 0)
    return internal_error(fmt::format("chmod {}: {}", dir.string(), std::strerror(errno)));
  return ok_status();
}

// Writes |data| to dir/name with mode 0600 through a temp file and a rename.
Status write_private(const fs::path& dir, const char* name, std::string_view data) {
  RETURN_IF_ERROR(ensure_dir(dir));
  AtomicWriteOptions o;
  o.mode = 0600;
  o.follow_symlink = false;
  return write_file_atomic(dir / name, data, o);
}

Result<std::optional<std::string>> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::optional<std::string>();
    return internal_error(fmt::format("read {}: {}", path.string(), std::strerror(errno)));
  }
  std::ostringstream s;
  s << in.rdbuf();
  return std::optional<std::string>(s.str());
}

// Runs the credential helper with |verb|, feeding |input| on stdin; returns its stdout.
asio::awaitable<Result<std::string>> run_helper(const std::string& helper, std::string verb,
                                                std::string input) {
  auto ex = co_await asio::this_coro::executor;
  proc::SpawnOptions opts;
  opts.argv = {"/bin/sh", "-c", helper + " " + verb};
  opts.inherit_env = true;
  CO_ASSIGN_OR_RETURN(proc::Process p, proc::spawn(ex, opts));
  auto [wec, wn] = co_await asio::async_write(*p.stdin_pipe(), asio::buffer(input));
  (void)wec;
  (void)wn;
  p.close_stdin();
  std::string out;
  std::string err;
  char buf[4096];
  for (;;) {
    auto [ec, n] = co_await p.stdout_pipe()->async_read_some(asio::buffer(buf));
    out.append(buf, n);
    if (ec) break;
  }
  for (;;) {
    auto [ec, n] = co_await p.stderr_pipe()->async_read_some(asio::buffer(buf));
    err.append(buf, n);
    if (ec || err.size() > 4096) break;
  }
  CO_ASSIGN_OR_RETURN(proc::ExitStatus st, co_await p.wait());
  if (!st.success()) {  // a helper may ignore its stdin: a write error alone is fine
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
    co_return internal_error(fmt::format("credential helper {:?} {} {}{}{}", helper, verb,
                                         st.to_string(), err.empty() ? "" : ": ", err));
  }
  co_return out;
}

}  // namespace

Result<fs::path> config_dir() {
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x != nullptr && x[0] == '/')
    return fs::path(x) / "cocoonbox";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/')
    return fs::path(h) / ".config" / "cocoonbox";
  return failed_precondition("neither XDG_CONFIG_HOME nor HOME is set");
}

Result<std::optional<ClientConfig>> load_config(const fs::path& dir) {
  ASSIGN_OR_RETURN(auto text, read_file(dir / kConfigFile));
  if (!text) return std::optional<ClientConfig>();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("endpoint") || !j["endpoint"].is_string()) {
    return data_loss(fmt::format("{} is not a cocoonbox client config (want {{\"endpoint\": ...}})",
                                 (dir / kConfigFile).string()));
  }
  ClientConfig c;
  c.endpoint = j["endpoint"].get<std::string>();
  if (j.contains("credential_helper") && j["credential_helper"].is_string())
    c.credential_helper = j["credential_helper"].get<std::string>();
  return std::optional<ClientConfig>(std::move(c));
}

Status save_config(const fs::path& dir, const ClientConfig& config) {
  nlohmann::json j = {{"endpoint", config.endpoint}};
  if (!config.credential_helper.empty()) j["credential_helper"] = config.credential_helper;
  return write_private(dir, kConfigFile, j.dump(2) + "\n");
}

asio::awaitable<Result<std::string>> load_token(const fs::path& dir, const ClientConfig& config) {
  std::string token;
  if (!config.credential_helper.empty()) {
    CO_ASSIGN_OR_RETURN(std::string out, co_await run_helper(config.credential_helper, "get",
                                                             "endpoint=" + config.endpoint + "\n"));
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("token=", 0) == 0) token = line.substr(6);
    }
  } else {
    CO_ASSIGN_OR_RETURN(auto text, read_file(dir / kTokenFile));
    if (text) token = *text;
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
    token.pop_back();
  if (token.empty())
    co_return unauthenticated("not logged in: run `cocoonbox login` (token from stdin)");
  co_return token;
}

asio::awaitable<Status> store_token(const fs::path& dir, const ClientConfig& config,
                                    std::string token) {
  if (!config.credential_helper.empty()) {
    auto r = co_await run_helper(config.credential_helper, "store",
                                 "endpoint=" + config.endpoint + "\ntoken=" + token + "\n");
    co_return r.status();
  }
  co_return write_private(dir, kTokenFile, token + "\n");
}

asio::awaitable<Status> erase_login(const fs::path& dir, const ClientConfig& config) {
  if (!config.credential_helper.empty()) {
    auto r = co_await run_helper(config.credential_helper, "erase",
                                 "endpoint=" + config.endpoint + "\n");
    if (!r.ok()) co_return r.status();
  }
  std::error_code ec;
  fs::remove(dir / kTokenFile, ec);
  if (ec)
    co_return internal_error(
        fmt::format("remove {}: {}", (dir / kTokenFile).string(), ec.message()));
  fs::remove(dir / kConfigFile, ec);
  if (ec)
    co_return internal_error(
        fmt::format("remove {}: {}", (dir / kConfigFile).string(), ec.message()));
  co_return ok_status();
}

}  // namespace cb::client
