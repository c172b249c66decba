#include "roles/cli/setup.h"

#include "base/file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

namespace cb::cli {

namespace fs = std::filesystem;
// ordered_json: a client's file keeps its keys in their order.
using json = nlohmann::ordered_json;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::string(v) : fallback;
}

Result<std::string> read_optional(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::string();
  std::ifstream in(p, std::ios::binary);
  if (!in) return failed_precondition(fmt::format("cannot read {}", p.string()));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A TOML basic string.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// |text| without the tables [mcp_servers.cocoonbox] and [mcp_servers.cocoonbox.*].
std::string drop_toml_table(std::string_view text) {
  std::string out;
  bool dropping = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl == std::string_view::npos ? text.size() : nl + 1);
    text.remove_prefix(line.size());
    std::string_view t = line;
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    if (t.starts_with("[")) {
      dropping = t.starts_with("[mcp_servers.cocoonbox]") ||
                 t.starts_with("[mcp_servers.cocoonbox.") ||
                 t.starts_with("[mcp_servers.\"cocoonbox\"]");
    }
    if (!dropping) out += line;
  }
  return out;
}

}  // namespace

fs::path self_command() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "cocoonbox";
  // "cocoonbox" when that is what PATH finds, so the config survives an upgrade in place.
  std::string path = env_or("PATH", "");
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir =
        path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty()) {
      fs::path candidate = fs::path(dir) / "cocoonbox";
      if (fs::exists(candidate, ec) && fs::equivalent(candidate, self, ec) && !ec)
        return "cocoonbox";
      if (fs::exists(candidate, ec)) break;  // another cocoonbox comes first: be explicit
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return self;
}

Result<SetupPlan> plan_setup(std::string_view client, const std::string& box,
                             const fs::path& command) {
  const std::string home = env_or("HOME", "");
  if (home.empty()) return failed_precondition("HOME is not set");
  std::vector<std::string> args = {"mcp"};
  if (!box.empty()) {
    args.push_back("--box");
    args.push_back(box);
  }
  SetupPlan plan;
  plan.client = std::string(client);
  if (client == "claude" || client == "cursor") {
    plan.file = client == "claude" ? fs::path(env_or("CLAUDE_CONFIG_DIR", home)) / ".claude.json"
                                   : fs::path(home) / ".cursor" / "mcp.json";
    json server = {{"command", command.string()}, {"args", args}};
    if (client == "claude")
      server = {{"type", "stdio"},
                {"command", command.string()},
                {"args", args},
                {"env", json::object()}};
    plan.snippet = json{{"mcpServers", {{"cocoonbox", server}}}}.dump(2) + "\n";
    ASSIGN_OR_RETURN(std::string old, read_optional(plan.file));
    json doc = json::object();
    if (!old.empty()) {
      doc = json::parse(old, nullptr, false);
      if (doc.is_discarded() || !doc.is_object())
        return failed_precondition(
            fmt::format("{} is not a JSON object: fix or move it first", plan.file.string()));
    }
    if (doc.contains("mcpServers") && !doc["mcpServers"].is_object())
      return failed_precondition(
          fmt::format("{}: mcpServers is not an object", plan.file.string()));
    plan.replaced = doc.contains("mcpServers") && doc["mcpServers"].contains("cocoonbox");
    doc["mcpServers"]["cocoonbox"] = server;
    plan.content = doc.dump(2) + "\n";
    return plan;
  }
  if (client == "codex") {
    plan.file = fs::path(env_or("CODEX_HOME", home + "/.codex")) / "config.toml";
    std::string table = fmt::format("[mcp_servers.cocoonbox]\ncommand = {}\nargs = [",
                                    toml_string(command.string()));
    for (size_t i = 0; i < args.size(); ++i) table += (i ? ", " : "") + toml_string(args[i]);
    table += "]\n";
    plan.snippet = table;
    ASSIGN_OR_RETURN(std::string old, read_optional(plan.file));
    std::string kept = drop_toml_table(old);
    plan.replaced = kept.size() != old.size();
    if (!kept.empty() && kept.back() != '\n') kept += '\n';
    if (!kept.empty()) kept += '\n';
    plan.content = kept + table;
    return plan;
  }
  return invalid_argument(fmt::format("unknown client {:?}: want claude, codex or cursor", client));
}

Status apply_setup(const SetupPlan& plan) {
  AtomicWriteOptions o;
  o.create_parents = true;
  // A new file is private: these files hold other servers' settings, some with secrets.
  std::error_code ec;
  if (!fs::exists(plan.file, ec)) o.mode = 0600;
  return write_file_atomic(plan.file, plan.content, o);
}

}  // namespace cb::cli
