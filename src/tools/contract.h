#pragma once
// The MCP tool contracts (README.md): the box tools every box's agent serves and the control
// tools the api serves, as MCP Tool objects (name, title, description, inputSchema,
// annotations). The names and input schemas are the contract: the bridge answers tools/list
// from these copies while a box is down, and every server checks arguments against them.
//
// check_arguments() validates a tools/call's arguments against an inputSchema, for the subset
// of JSON Schema the contracts use: type (object, string, number, integer, boolean, array),
// properties, required, additionalProperties: false, minimum, maximum, minLength, maxLength,
// enum. Anything else in a schema is ignored.
//
// Thread-safe: the parsed lists are built once and never change.

#include "base/status.h"

#include <nlohmann/json.hpp>

#include <string_view>

namespace cb::tools {

// MCP endpoints. Clients call a box's tools at kBoxMcpPrefix + <box name or id> on the api,
// whose edge relays them to the agent's kAgentMcpPath; the api serves kControlMcpPath itself.
inline constexpr std::string_view kBoxMcpPrefix = "/cocoonbox.mcp/";
inline constexpr std::string_view kControlMcpPath = "/cocoonbox.mcp/control";
inline constexpr std::string_view kAgentMcpPath = "/cocoonbox.mcp/box";

// The contracts as compiled in: JSON arrays of MCP Tool objects.
std::string_view box_tools_json();
std::string_view control_tools_json();
// The agent's browser tools (browser_navigate, browser_snapshot, ...), which its model loop
// offers next to the box tools.
std::string_view browser_tools_json();

// The same, parsed.
const nlohmann::json& box_tools();
const nlohmann::json& control_tools();
const nlohmann::json& browser_tools();

// The tool named |name| in |tools| (an array of Tool objects), or nullptr.
const nlohmann::json* find_tool(const nlohmann::json& tools, std::string_view name);

// Checks |arguments| against |input_schema|. Errors: kInvalidArgument naming the first bad
// field by its path ("arguments.timeout: ...", "arguments: missing required field \"path\"").
Status check_arguments(const nlohmann::json& input_schema, const nlohmann::json& arguments);

}  // namespace cb::tools
