#include "base/failpoint.h"

#include <cstdlib>

namespace cb {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::string parse_failpoint(std::string_view spec, std::string_view name) {
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view entry = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    if (trim(entry.substr(0, eq)) == name) return std::string(trim(entry.substr(eq + 1)));
  }
  return {};
}

std::string failpoint_action(std::string_view name) {
  static const std::string spec = [] {
    const char* v = std::getenv("COCOONBOX_FAILPOINTS");
    return std::string(v == nullptr ? "" : v);
  }();
  if (spec.empty()) return {};
  return parse_failpoint(spec, name);
}

}  // namespace cb
