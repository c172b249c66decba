#pragma once
// Structured logging as JSON lines: one object per line with "ts" (RFC 3339 UTC, ms),
// "level", "msg" and the caller's fields, in order.
//
//   log::info("listening", {{"addr", addr}, {"port", port}});
//   -> {"ts":"2026-11-30T01:02:03.456Z","level":"info","msg":"listening","addr":"...","port":7443}
//
// Secrets never go into a log call (tokens, keys, credentials): callers pass a fingerprint.
// Thread-safety: every function may be called from any thread; a line is written with one
// write(2) so lines from several threads never interleave.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

namespace cb::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

struct Field {
  using Value = std::variant<std::string_view, std::string, int64_t, uint64_t, double, bool>;
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  Field(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  Field(std::string_view k, int v) : key(k), value(int64_t{v}) {}
  Field(std::string_view k, long v) : key(k), value(int64_t{v}) {}
  Field(std::string_view k, long long v) : key(k), value(int64_t{v}) {}
  Field(std::string_view k, unsigned v) : key(k), value(uint64_t{v}) {}
  Field(std::string_view k, unsigned long v) : key(k), value(uint64_t{v}) {}
  Field(std::string_view k, unsigned long long v) : key(k), value(uint64_t{v}) {}
  Field(std::string_view k, double v) : key(k), value(v) {}
  Field(std::string_view k, bool v) : key(k), value(v) {}
  std::string_view key;
  Value value;
};
using Fields = std::initializer_list<Field>;

// Lines below |level| are dropped. Default kInfo; COCOONBOX_LOG_LEVEL=debug|info|warn|error
// read once by init_from_env().
void set_min_level(Level level);
Level min_level();
void init_from_env();

// Where lines go: by default stderr. The sink receives one complete line including '\n'.
using Sink = std::function<void(std::string_view line)>;
void set_sink(Sink sink);  // empty restores stderr

// Formats one line without writing it (used by tests and by the sink-less path).
std::string format_line(Level level, std::string_view msg, Fields fields);

void write(Level level, std::string_view msg, Fields fields = {});
inline void debug(std::string_view msg, Fields f = {}) { write(Level::kDebug, msg, f); }
inline void info(std::string_view msg, Fields f = {}) { write(Level::kInfo, msg, f); }
inline void warn(std::string_view msg, Fields f = {}) { write(Level::kWarn, msg, f); }
inline void error(std::string_view msg, Fields f = {}) { write(Level::kError, msg, f); }

// Appends |s| to |out| as a JSON string literal with quotes (RFC 8259 escaping; bytes that
// are not valid UTF-8 are replaced by U+FFFD so every line stays valid JSON).
void append_json_string(std::string& out, std::string_view s);

}  // namespace cb::log
