#include "roles/api/control_tools.h"

#include "roles/api/boxes_service.h"
#include "tools/contract.h"

#include <fmt/format.h>

namespace cb::api {

using nlohmann::json;

namespace {

json text_result(std::string text, bool is_error, json structured = nullptr) {
  json r = {{"content", json::array({{{"type", "text"}, {"text", std::move(text)}}})},
            {"isError", is_error}};
  if (!structured.is_null()) r["structuredContent"] = std::move(structured);
  return r;
}

// What the api refused, in words, as a tool failure the model can act on.
json refusal(const Status& st, std::string_view what) {
  std::string reason(st.message());
  if (st.code() == Code::kResourceExhausted) reason += " (hibernate or delete another box first)";
  return text_result(fmt::format("{}: {}", what, reason), true,
                     json{{"error", std::string(code_name(st.code()))}, {"message", st.message()}});
}

json box_json(const BoxView& v, const std::string& latest_image) {
  json j = {{"id", v.box.id},
            {"name", v.box.name},
            {"state", std::string(box_state_name(v.box.state))},
            {"image", v.box.image},
            {"latest_image", latest_image},
            {"attached_clients", v.attached_clients},
            {"isolated", v.isolated},
            {"state_changed_at_ms", v.box.state_changed_at_ms}};
  if (!v.box.detail.empty()) j["detail"] = v.box.detail;
  if (!v.operation_id.empty()) j["operation_id"] = v.operation_id;
  return j;
}

std::string box_line(const BoxView& v) {
  std::string s = fmt::format("box {} ({}): {}", v.box.name, v.box.id, box_state_name(v.box.state));
  if (!v.box.detail.empty()) s += " - " + v.box.detail;
  return s;
}

std::string ref_of(const json& args, std::string_view field = "box") {
  auto it = args.find(field);
  return it != args.end() ? it->get<std::string>() : std::string();
}

std::string label_of(const std::string& ref) { return ref.empty() ? std::string("main") : ref; }

}  // namespace

asio::awaitable<json> ControlTools::box_result(int64_t user_id, std::string ref,
                                               std::string summary) {
  auto v = co_await manager_.get(user_id, ref);
  if (!v.ok()) co_return text_result(summary, false);
  json structured = box_json(*v, manager_.image());
  co_return text_result(fmt::format("{}\n{}", summary, box_line(*v)), false, structured);
}

asio::awaitable<json> ControlTools::finish(const Operation& op, std::string verb,
                                           std::string box_label, int64_t user_id,
                                           const Progress& progress) {
  BoxManager::EventSink sink = [&](const OperationEvent& e) -> asio::awaitable<Status> {
    if (progress) {
      // Named first: gcc 12 destroys a conditional's temporary twice in a coroutine call.
      std::string line = fmt::format("{} box {}: {}", verb, box_label, phase_name(e.phase));
      if (!e.detail.empty()) line += ": " + e.detail;
      co_await progress(std::move(line));
    }
    co_return ok_status();
  };
  auto last = co_await manager_.follow(op.id, 0, sink);
  if (!last.ok()) co_return refusal(last.status(), fmt::format("{} box {}", verb, box_label));
  if (last->phase == Phase::kFailed) {
    co_return text_result(
        fmt::format("{} box {} failed: {}", verb, box_label, last->detail), true,
        json{{"operation_id", op.id}, {"result", "failed"}, {"detail", last->detail}});
  }
  std::string summary = fmt::format("{} box {}: done", verb, box_label);
  if (!last->detail.empty()) summary += ": " + last->detail;
  json r = co_await box_result(user_id, op.box_id, std::move(summary));
  if (r.contains("structuredContent")) r["structuredContent"]["operation_id"] = op.id;
  co_return r;
}

asio::awaitable<Result<json>> ControlTools::call(int64_t user_id, std::string_view name,
                                                 const json& arguments, Progress progress) {
  const json* tool = tools::find_tool(tools::control_tools(), name);
  if (tool == nullptr) co_return not_found(fmt::format("no tool {:?}", name));
  const json args = arguments.is_null() ? json::object() : arguments;
  CO_RETURN_IF_ERROR(tools::check_arguments((*tool)["inputSchema"], args));

  if (name == "box_list") {
    auto views = co_await manager_.list(user_id);
    if (!views.ok()) co_return refusal(views.status(), "listing boxes");
    json boxes = json::array();
    std::string text;
    for (const auto& v : *views) {
      boxes.push_back(box_json(v, manager_.image()));
      text += box_line(v) + "\n";
    }
    if (views->empty()) text = "no boxes yet: box_ensure creates \"main\"\n";
    text.pop_back();
    co_return text_result(std::move(text), false, json{{"boxes", std::move(boxes)}});
  }

  const std::string ref = ref_of(args);
  const std::string label = label_of(ref);
  if (name == "box_status") {
    auto v = co_await manager_.get(user_id, ref);
    if (!v.ok()) co_return refusal(v.status(), "box " + label);
    json structured = box_json(*v, manager_.image());
    std::string text =
        box_line(*v) + fmt::format("\nimage: {} (latest: {})", v->box.image, manager_.image());
    if (!v->operation_id.empty()) text += "\noperation in progress: " + v->operation_id;
    co_return text_result(std::move(text), false, std::move(structured));
  }

  if (name == "box_ensure" || name == "box_create") {
    const bool create = name == "box_create";
    const std::string box_name = create ? args["name"].get<std::string>() : ref;
    if (create) {
      auto existing = co_await manager_.get(user_id, box_name);
      if (existing.ok()) {
        co_return text_result(fmt::format("box {} already exists ({})", box_name, existing->box.id),
                              true, box_json(*existing, manager_.image()));
      }
      if (existing.status().code() != Code::kNotFound)
        co_return refusal(existing.status(), "box " + box_name);
    }
    std::string op_id;
    auto v = co_await manager_.ensure(user_id, box_name, false, &op_id);
    if (!v.ok()) co_return refusal(v.status(), "box " + label_of(box_name));
    if (op_id.empty()) {
      co_return text_result(box_line(*v), false, box_json(*v, manager_.image()));
    }
    if (!create && !args.value("wait", true)) {
      json structured = box_json(*v, manager_.image());
      structured["operation_id"] = op_id;
      co_return text_result(fmt::format("{}; operation {} started", box_line(*v), op_id), false,
                            std::move(structured));
    }
    Operation op;
    op.id = op_id;
    op.box_id = v->box.id;
    std::string verb = create ? "creating" : "waking";
    co_return co_await finish(op, std::move(verb), v->box.name, user_id, progress);
  }

  if (name == "box_hibernate") {
    auto op = co_await manager_.hibernate(user_id, ref);
    if (!op.ok()) co_return refusal(op.status(), "box " + label);
    std::string verb = "hibernating";
    co_return co_await finish(*op, std::move(verb), label, user_id, progress);
  }

  if (name == "box_upgrade") {
    if (!args["confirm"].get<bool>()) {
      co_return text_result(fmt::format("not upgraded: {}. Call box_upgrade again with confirm: "
                                        "true to go ahead.",
                                        kUpgradeKeeps),
                            true);
    }
    auto op = co_await manager_.recreate(user_id, ref, /*preserve_data=*/true);
    if (!op.ok()) co_return refusal(op.status(), "box " + label);
    std::string verb = "upgrading";
    co_return co_await finish(*op, std::move(verb), label, user_id, progress);
  }

  if (name == "box_delete") {
    if (!args["confirm"].get<bool>()) {
      co_return text_result(fmt::format("not deleted: box {}'s programs stop and its files are "
                                        "removed for good. Call box_delete again with confirm: "
                                        "true to go ahead.",
                                        label),
                            true);
    }
    auto op = co_await manager_.remove(user_id, ref);
    if (!op.ok()) co_return refusal(op.status(), "box " + label);
    std::string verb = "deleting";
    co_return co_await finish(*op, std::move(verb), label, user_id, progress);
  }
  co_return internal_error(fmt::format("tool {:?} is in the contract but not implemented", name));
}

namespace {

mcp::ServerOptions control_options() {
  mcp::ServerOptions o;
  o.info.name = "cocoonbox-control";
  o.info.title = "cocoonbox control";
  o.info.version = COCOONBOX_API_VERSION;
  o.instructions =
      "Lifecycle of your cocoonbox boxes: status, wake (box_ensure), hibernate, upgrade, "
      "create and delete. Box tools that act inside a box are served per box.";
  return o;
}

}  // namespace

ControlMcp::ControlMcp(net::Executor executor, BoxManager& manager, TokenIndex& tokens)
    : tools_(manager),
      tokens_(tokens),
      server_(control_options(), *this),
      http_(server_, executor, [this] {
        mcp::HttpServerOptions o;
        o.authenticate =
            [this](const http::RequestHead& head) -> asio::awaitable<Result<std::string>> {
          auto token = bearer_token(http::find_header(head.headers, "authorization"));
          if (!token.ok()) co_return token.status();
          auto who = tokens_.authenticate(*token);
          if (!who.ok()) co_return who.status();
          co_return std::to_string(who->user_id);
        };
        return o;
      }()) {
  for (const auto& t : tools::control_tools()) {
    auto tool = mcp::Tool::from_json(t);
    if (!tool.ok()) std::abort();  // the contract's unit test keeps it valid
    list_.push_back(std::move(*tool));
  }
}

void ControlMcp::mount(http::Router& router) {
  http_.mount(router, std::string(tools::kControlMcpPath));
}

asio::awaitable<Result<std::vector<mcp::Tool>>> ControlMcp::list_tools(mcp::RequestContext&) {
  co_return list_;
}

asio::awaitable<mcp::Reply> ControlMcp::call_tool(mcp::RequestContext& ctx, const std::string& name,
                                                  const mcp::Json& arguments) {
  if (tools::find_tool(tools::control_tools(), name) == nullptr)
    co_return mcp::Reply::unknown_tool(name);
  const int64_t user_id = std::stoll(ctx.principal());
  double step = 0;
  ControlTools::Progress progress = [&](std::string message) -> asio::awaitable<void> {
    (void)co_await ctx.report_progress(++step, std::nullopt, std::move(message));
  };
  auto r = co_await tools_.call(user_id, name, arguments, progress);
  if (!r.ok()) {
    if (r.status().code() == Code::kInvalidArgument)
      co_return mcp::Reply::from_tool_result(mcp::ToolResult::error(r.status().message()));
    co_return mcp::Reply::from_status(r.status());
  }
  auto result = mcp::ToolResult::from_json(*r);
  if (!result.ok()) co_return mcp::Reply::from_status(result.status());
  co_return mcp::Reply::from_tool_result(*result);
}

}  // namespace cb::api
