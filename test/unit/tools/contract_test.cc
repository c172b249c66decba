#include "tools/contract.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>

namespace cb::tools {
namespace {

using nlohmann::json;

// Every Tool object of a contract has what MCP clients need, and nothing a client would
// reject: a unique snake_case name, a description, an object inputSchema whose required
// fields are declared properties, and the four annotation hints.
void check_contract(const json& tools) {
  REQUIRE(tools.is_array());
  REQUIRE_FALSE(tools.empty());
  std::set<std::string> names;
  for (const auto& t : tools) {
    INFO(t.dump());
    REQUIRE(t["name"].is_string());
    const std::string name = t["name"];
    CHECK(names.insert(name).second);
    for (char c : name) CHECK(((c >= 'a' && c <= 'z') || c == '_'));
    CHECK(t["description"].is_string());
    CHECK(t["title"].is_string());
    const json& schema = t["inputSchema"];
    REQUIRE(schema["type"] == "object");
    REQUIRE(schema["properties"].is_object());
    CHECK(schema["additionalProperties"] == false);
    for (const auto& r : schema.value("required", json::array()))
      CHECK(schema["properties"].contains(r.get<std::string>()));
    for (const auto& [field, spec] : schema["properties"].items()) {
      INFO(field);
      CHECK(spec["type"].is_string());
      CHECK(spec["description"].is_string());
    }
    const json& a = t["annotations"];
    for (const char* hint : {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"})
      CHECK(a[hint].is_boolean());
    // A read-only tool cannot also be destructive.
    if (a["readOnlyHint"] == true) CHECK(a["destructiveHint"] == false);
  }
}

TEST_CASE("contract: the box and control tool lists are well formed", "[tools][unit]") {
  check_contract(box_tools());
  check_contract(control_tools());
  CHECK(json::parse(box_tools_json()) == box_tools());
  CHECK(json::parse(control_tools_json()) == control_tools());
}

TEST_CASE("contract: the tool names are the ones the issue and the seed name", "[tools][unit]") {
  std::set<std::string> box;
  for (const auto& t : box_tools()) box.insert(t["name"].get<std::string>());
  CHECK(box ==
        std::set<std::string>{"shell", "read_file", "write_file", "edit_file", "list_dir", "grep"});
  std::set<std::string> control;
  for (const auto& t : control_tools()) control.insert(t["name"].get<std::string>());
  CHECK(control == std::set<std::string>{"box_status", "box_list", "box_ensure", "box_hibernate",
                                         "box_upgrade", "box_create", "box_delete"});
  REQUIRE(find_tool(box_tools(), "grep") != nullptr);
  CHECK((*find_tool(box_tools(), "grep"))["annotations"]["readOnlyHint"] == true);
  CHECK(find_tool(box_tools(), "nope") == nullptr);
  CHECK(find_tool(json::object(), "grep") == nullptr);
}

TEST_CASE("contract: the browser tools are well formed and named as issue 6 names them",
          "[tools][unit]") {
  check_contract(browser_tools());
  CHECK(json::parse(browser_tools_json()) == browser_tools());
  std::set<std::string> names;
  for (const auto& t : browser_tools()) names.insert(t["name"].get<std::string>());
  CHECK(names == std::set<std::string>{"browser_navigate", "browser_snapshot", "browser_click",
                                       "browser_type", "browser_press", "browser_scroll",
                                       "browser_dialog", "browser_screenshot"});
  // No browser tool shares a name with a box tool: the model loop offers both lists.
  for (const auto& n : names) CHECK(find_tool(box_tools(), n) == nullptr);
  const json& type = (*find_tool(browser_tools(), "browser_type"))["inputSchema"];
  CHECK(check_arguments(type, json{{"ref", "e3"}, {"text", "hi"}, {"submit", true}}).ok());
  CHECK(check_arguments(type, json{{"text", "hi"}}).message() ==
        "arguments: missing required field \"ref\"");
  const json& scroll = (*find_tool(browser_tools(), "browser_scroll"))["inputSchema"];
  CHECK_FALSE(check_arguments(scroll, json{{"direction", "sideways"}}).ok());
}

TEST_CASE("check_arguments: names the bad field and says what it wants", "[tools][unit]") {
  const json& shell = (*find_tool(box_tools(), "shell"))["inputSchema"];
  CHECK(check_arguments(shell, json{{"command", "ls"}}).ok());
  CHECK(check_arguments(shell, json{{"command", "ls"}, {"cwd", "/tmp"}, {"timeout", 2.5}}).ok());

  auto bad = [&](const json& schema, const json& args) {
    Status st = check_arguments(schema, args);
    CHECK(st.code() == Code::kInvalidArgument);
    return std::string(st.message());
  };
  CHECK(bad(shell, json::object()) == "arguments: missing required field \"command\"");
  CHECK(bad(shell, json{{"command", ""}}) == "arguments.command: must not be empty");
  CHECK(bad(shell, json{{"command", 5}}) == "arguments.command: want a string, got an integer (5)");
  CHECK(bad(shell, json{{"command", "ls"}, {"timeout", 0}}) ==
        "arguments.timeout: must be at least 1, got 0");
  CHECK(bad(shell, json{{"command", "ls"}, {"timeout", 4000}}) ==
        "arguments.timeout: must be at most 3600, got 4000");
  CHECK(bad(shell, json{{"command", "ls"}, {"user", "root"}}) ==
        "arguments: unknown field \"user\" (known: command, cwd, session, timeout)");
  CHECK(check_arguments(shell, json{{"command", "ls"}, {"session", "build"}}).ok());
  CHECK(bad(shell, json{{"command", "ls"}, {"session", ""}}) ==
        "arguments.session: must not be empty");
  CHECK(bad(shell, json::array()) == "arguments: want an object, got an array ([])");

  const json& read = (*find_tool(box_tools(), "read_file"))["inputSchema"];
  CHECK(check_arguments(read, json{{"path", "a"}, {"offset", 3}}).ok());
  CHECK(check_arguments(read, json{{"path", "a"}, {"offset", 3.0}}).ok());
  CHECK(bad(read, json{{"path", "a"}, {"offset", 1.5}}) ==
        "arguments.offset: want an integer, got a number (1.5)");
  CHECK(bad(read, json{{"path", "a"}, {"limit", true}}) ==
        "arguments.limit: want an integer, got a boolean (true)");

  const json with_enum = {{"type", "object"},
                          {"properties", {{"mode", {{"type", "string"}, {"enum", {"a", "b"}}}}}}};
  CHECK(check_arguments(with_enum, json{{"mode", "a"}}).ok());
  CHECK(bad(with_enum, json{{"mode", "c"}}) ==
        "arguments.mode: want one of [\"a\",\"b\"], got \"c\"");
  // Without additionalProperties: false, unknown fields pass.
  CHECK(check_arguments(with_enum, json{{"other", 1}}).ok());
}

}  // namespace
}  // namespace cb::tools
