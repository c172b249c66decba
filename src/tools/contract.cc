#include "tools/contract.h"

#include "base/result.h"

#include <fmt/format.h>

#include <string>

namespace cb::tools {
namespace internal {
extern const std::string_view kBoxToolsJson;
extern const std::string_view kControlToolsJson;
extern const std::string_view kBrowserToolsJson;
}  // namespace internal

namespace {

using nlohmann::json;

json parse_contract(std::string_view text) {
  // The files are checked by the unit tests; a broken one must not build a working binary.
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) std::abort();
  return j;
}

std::string kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a value";
  }
}

// A short rendering of a bad value for an error message.
std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

bool is_integral(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return d == static_cast<double>(static_cast<long long>(d));
}

Status check(const json& schema, const json& v, const std::string& where) {
  if (!schema.is_object()) return ok_status();
  if (auto t = schema.find("type"); t != schema.end() && t->is_string()) {
    const std::string& want = t->get_ref<const std::string&>();
    bool fits = false;
    if (want == "object")
      fits = v.is_object();
    else if (want == "string")
      fits = v.is_string();
    else if (want == "number")
      fits = v.is_number();
    else if (want == "integer")
      fits = v.is_number() && is_integral(v);
    else if (want == "boolean")
      fits = v.is_boolean();
    else if (want == "array")
      fits = v.is_array();
    else if (want == "null")
      fits = v.is_null();
    else
      fits = true;
    if (!fits) {
      return invalid_argument(
          fmt::format("{}: want {} {}, got {} ({})", where,
                      want == "integer" || want == "array" || want == "object" ? "an" : "a", want,
                      kind_of(v), shown(v)));
    }
  }
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    bool found = false;
    for (const auto& option : *e) found = found || option == v;
    if (!found)
      return invalid_argument(
          fmt::format("{}: want one of {}, got {}", where, e->dump(), shown(v)));
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    if (auto m = schema.find("minimum");
        m != schema.end() && m->is_number() && d < m->get<double>())
      return invalid_argument(
          fmt::format("{}: must be at least {}, got {}", where, m->dump(), shown(v)));
    if (auto m = schema.find("maximum");
        m != schema.end() && m->is_number() && d > m->get<double>())
      return invalid_argument(
          fmt::format("{}: must be at most {}, got {}", where, m->dump(), shown(v)));
  }
  if (v.is_string()) {
    const size_t n = v.get_ref<const std::string&>().size();
    if (auto m = schema.find("minLength");
        m != schema.end() && m->is_number_unsigned() && n < m->get<size_t>()) {
      return invalid_argument(
          n == 0 ? fmt::format("{}: must not be empty", where)
                 : fmt::format("{}: must be at least {} characters", where, m->get<size_t>()));
    }
    if (auto m = schema.find("maxLength");
        m != schema.end() && m->is_number_unsigned() && n > m->get<size_t>())
      return invalid_argument(
          fmt::format("{}: must be at most {} characters, got {}", where, m->get<size_t>(), n));
  }
  if (v.is_object()) {
    const json empty = json::object();
    auto p = schema.find("properties");
    const json& props = p != schema.end() && p->is_object() ? *p : empty;
    if (auto r = schema.find("required"); r != schema.end() && r->is_array()) {
      for (const auto& name : *r) {
        if (name.is_string() && !v.contains(name.get_ref<const std::string&>()))
          return invalid_argument(fmt::format("{}: missing required field {}", where, name.dump()));
      }
    }
    auto extra = schema.find("additionalProperties");
    const bool closed = extra != schema.end() && extra->is_boolean() && !extra->get<bool>();
    for (const auto& [name, value] : v.items()) {
      auto sub = props.find(name);
      if (sub == props.end()) {
        if (closed) {
          std::string known;
          for (const auto& [k, unused] : props.items()) known += (known.empty() ? "" : ", ") + k;
          return invalid_argument(fmt::format("{}: unknown field {:?} (known: {})", where, name,
                                              known.empty() ? "none" : known));
        }
        continue;
      }
      RETURN_IF_ERROR(check(*sub, value, where + "." + name));
    }
  }
  if (v.is_array()) {
    if (auto items = schema.find("items"); items != schema.end()) {
      for (size_t i = 0; i < v.size(); ++i)
        RETURN_IF_ERROR(check(*items, v[i], fmt::format("{}[{}]", where, i)));
    }
  }
  return ok_status();
}

}  // namespace

std::string_view box_tools_json() { return internal::kBoxToolsJson; }
std::string_view control_tools_json() { return internal::kControlToolsJson; }
std::string_view browser_tools_json() { return internal::kBrowserToolsJson; }

const json& box_tools() {
  static const json tools = parse_contract(internal::kBoxToolsJson);
  return tools;
}

const json& control_tools() {
  static const json tools = parse_contract(internal::kControlToolsJson);
  return tools;
}

const json& browser_tools() {
  static const json tools = parse_contract(internal::kBrowserToolsJson);
  return tools;
}

const json* find_tool(const json& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    auto n = t.find("name");
    if (n != t.end() && n->is_string() && n->get_ref<const std::string&>() == name) return &t;
  }
  return nullptr;
}

Status check_arguments(const json& input_schema, const json& arguments) {
  return check(input_schema, arguments, "arguments");
}

}  // namespace cb::tools
