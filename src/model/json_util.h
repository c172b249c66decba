#pragma once
// Exception-free reads of upstream JSON (house style H8: peer input never throws across our
// code). Private to src/model.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace cb::model::internal {

using nlohmann::json;

// |j|[key] when |j| is an object holding it, else nullptr.
inline const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

inline std::string string_field(const json& j, const char* key) {
  const json* f = field(j, key);
  return f != nullptr && f->is_string() ? f->get<std::string>() : std::string();
}

inline int64_t int_field(const json& j, const char* key, int64_t fallback = 0) {
  const json* f = field(j, key);
  if (f == nullptr) return fallback;
  if (f->is_number_integer()) return f->get<int64_t>();
  if (f->is_number_unsigned()) return static_cast<int64_t>(f->get<uint64_t>());
  if (f->is_number_float()) return static_cast<int64_t>(f->get<double>());
  return fallback;
}

inline bool has_number(const json& j, const char* key) {
  const json* f = field(j, key);
  return f != nullptr && f->is_number();
}

// Parses without throwing; a discarded value on error.
inline json parse_json(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// Serializes without throwing: invalid UTF-8 (a tool's binary output) becomes U+FFFD.
inline std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The first |n| bytes of |s|, with "..." when cut; for error messages.
inline std::string excerpt(std::string_view s, size_t n = 300) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

}  // namespace cb::model::internal
