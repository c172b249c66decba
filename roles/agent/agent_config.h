#pragma once
// The agent config file, <data-dir>/agent.json (README.md §Agent config): the models per role
// (main, summarize, computer; seed §3), the default approval mode of new agents, and the
// loop's system prompt and step cap. The agent reads it again at the start of every turn, so
// an edit applies to the next turn without a restart; what the file does not say comes from
// the agent's flags (--model, --model-wire, ..., --max-steps).
//
//   {"models": {"main":      {"name": "gpt-x", "wire": "openai", "vision": true,
//                             "context_tokens": 128000},
//               "summarize": {"name": "small-x"},
//               "computer":  {"name": "claude-x", "wire": "anthropic", "vision": true}},
//    "approval_mode": "ask", "system_prompt": "...", "max_steps": 50}
//
//   ASSIGN_OR_RETURN(TurnConfig c, load_agent_config(data_dir / kAgentConfigFile, defaults));
//
// Thread-safety: plain functions; load_agent_config() blocks (reads a small file).

#include "base/result.h"
#include "model/conversation.h"

#include <filesystem>
#include <string>
#include <string_view>

namespace cb::agent {

inline constexpr std::string_view kAgentConfigFile = "agent.json";
inline constexpr size_t kMaxAgentConfigBytes = 1 << 20;

// What one turn runs with.
struct TurnConfig {
  model::ModelInfo main;       // name empty: no model, Send is refused
  model::ModelInfo summarize;  // name empty: |main| summarizes
  model::ModelInfo computer;   // name empty: |main| (the computer subagent is not built yet)
  std::string approval_mode = "auto";  // "auto" | "ask": the default of Create
  std::string system_prompt;           // empty: the agent's built-in prompt
  int max_steps = 50;

  // The model of a role, falling back to main.
  const model::ModelInfo& summarize_model() const;
};

// |text| (agent.json's content) laid over |defaults|: each field the file sets replaces the
// default; a role object's absent fields keep the --model* flag values that |defaults.main|
// carries. Unknown fields are ignored (a newer agent may write more).
// Errors: kFailedPrecondition "agent.json: <field>: <what is wrong>" (or "not valid JSON").
Result<TurnConfig> parse_agent_config(std::string_view text, const TurnConfig& defaults);

// Reads |path| and parses it; a missing file gives |defaults|.
// Errors: parse_agent_config()'s, and kFailedPrecondition when the file cannot be read or is
// larger than kMaxAgentConfigBytes (the message names the path).
Result<TurnConfig> load_agent_config(const std::filesystem::path& path, const TurnConfig& defaults);

}  // namespace cb::agent
