#include "roles/agent/agent_config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cb::agent {
namespace {

using nlohmann::json;

Status bad(std::string_view field, std::string_view what) {
  return failed_precondition(fmt::format("agent.json: {}: {}", field, what));
}

Status read_model(const json& j, const std::string& field, const model::ModelInfo& defaults,
                  model::ModelInfo* out) {
  if (!j.is_object()) return bad(field, "must be an object");
  *out = defaults;
  out->name.clear();
  if (j.contains("name")) {
    const json& v = j["name"];
    if (!v.is_string() || v.get<std::string>().empty())
      return bad(field + ".name", "must be a non-empty string");
    out->name = v.get<std::string>();
  }
  if (j.contains("wire")) {
    const json& v = j["wire"];
    std::string w = v.is_string() ? v.get<std::string>() : std::string();
    if (w == "openai") {
      out->wire = model::Wire::kOpenAi;
    } else if (w == "anthropic") {
      out->wire = model::Wire::kAnthropic;
    } else {
      return bad(field + ".wire", "must be \"openai\" or \"anthropic\"");
    }
  }
  if (j.contains("vision")) {
    if (!j["vision"].is_boolean()) return bad(field + ".vision", "must be true or false");
    out->vision = j["vision"].get<bool>();
  }
  if (j.contains("context_tokens")) {
    const json& v = j["context_tokens"];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      return bad(field + ".context_tokens", "must be a positive integer");
    out->context_tokens = v.get<int64_t>();
  }
  if (out->name.empty() && field != "models.main") {
    // A role without a name uses main; other fields alone would mean nothing.
    if (j.size() > 0 && !j.contains("name")) return bad(field + ".name", "required");
  }
  return ok_status();
}

}  // namespace

const model::ModelInfo& TurnConfig::summarize_model() const {
  return summarize.name.empty() ? main : summarize;
}

Result<TurnConfig> parse_agent_config(std::string_view text, const TurnConfig& defaults) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return failed_precondition("agent.json: not valid JSON");
  if (!j.is_object()) return failed_precondition("agent.json: must be a JSON object");
  TurnConfig c = defaults;
  if (j.contains("models")) {
    const json& m = j["models"];
    if (!m.is_object()) return bad("models", "must be an object");
    if (m.contains("main")) {
      model::ModelInfo main;
      RETURN_IF_ERROR(read_model(m["main"], "models.main", defaults.main, &main));
      if (main.name.empty()) main.name = defaults.main.name;
      c.main = std::move(main);
    }
    if (m.contains("summarize")) {
      RETURN_IF_ERROR(read_model(m["summarize"], "models.summarize", defaults.main, &c.summarize));
    }
    if (m.contains("computer")) {
      RETURN_IF_ERROR(read_model(m["computer"], "models.computer", defaults.main, &c.computer));
    }
  }
  if (j.contains("approval_mode")) {
    const json& v = j["approval_mode"];
    std::string mode = v.is_string() ? v.get<std::string>() : std::string();
    if (mode != "auto" && mode != "ask") return bad("approval_mode", "must be \"auto\" or \"ask\"");
    c.approval_mode = mode;
  }
  if (j.contains("system_prompt")) {
    if (!j["system_prompt"].is_string()) return bad("system_prompt", "must be a string");
    c.system_prompt = j["system_prompt"].get<std::string>();
  }
  if (j.contains("max_steps")) {
    const json& v = j["max_steps"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 10000)
      return bad("max_steps", "must be an integer from 1 to 10000");
    c.max_steps = static_cast<int>(v.get<int64_t>());
  }
  return c;
}

Result<TurnConfig> load_agent_config(const std::filesystem::path& path,
                                     const TurnConfig& defaults) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec == std::errc::no_such_file_or_directory ||
      status.type() == std::filesystem::file_type::not_found)
    return defaults;
  if (ec)
    return failed_precondition(fmt::format("agent config {}: {}", path.string(), ec.message()));
  if (!std::filesystem::is_regular_file(status))
    return failed_precondition(fmt::format("agent config {}: not a regular file", path.string()));
  auto size = std::filesystem::file_size(path, ec);
  if (ec)
    return failed_precondition(fmt::format("agent config {}: {}", path.string(), ec.message()));
  if (size > kMaxAgentConfigBytes)
    return failed_precondition(fmt::format("agent config {}: {} bytes, more than {}", path.string(),
                                           size, kMaxAgentConfigBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return failed_precondition(
        fmt::format("agent config {}: {}", path.string(), std::strerror(errno)));
  std::ostringstream buf;
  buf << in.rdbuf();
  auto parsed = parse_agent_config(buf.str(), defaults);
  if (!parsed.ok()) return parsed.status().with_prefix(path.string());
  return parsed;
}

}  // namespace cb::agent
