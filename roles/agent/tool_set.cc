#include "roles/agent/tool_set.h"

#include "tools/contract.h"

namespace cb::agent {

nlohmann::json BoxToolSet::defs() const { return tools::box_tools(); }

asio::awaitable<Result<ToolResult>> BoxToolSet::call(std::string_view name,
                                                     const nlohmann::json& arguments) {
  co_return co_await tools_.call(name, arguments);
}

asio::awaitable<Result<ToolResult>> BoxToolSet::call_for(std::string_view agent_id,
                                                         std::string_view name,
                                                         const nlohmann::json& arguments) {
  co_return co_await tools_.call(name, arguments, agent_id);
}

bool is_destructive(const nlohmann::json& tool) {
  if (!tool.is_object()) return false;
  auto a = tool.find("annotations");
  if (a == tool.end() || !a->is_object()) return false;
  auto d = a->find("destructiveHint");
  return d != a->end() && d->is_boolean() && d->get<bool>();
}

}  // namespace cb::agent
