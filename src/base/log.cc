#include "base/log.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <unistd.h>

namespace cb::log {

namespace {
std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
std::mutex g_sink_mu;
Sink g_sink;  // guarded by g_sink_mu

constexpr std::string_view level_name(Level l) {
  switch (l) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

// Length of the valid UTF-8 sequence starting at |s[i]|, or 0 if it is not valid.
size_t utf8_len(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}
}  // namespace

void set_min_level(Level level) { g_min_level = static_cast<int>(level); }
Level min_level() { return static_cast<Level>(g_min_level.load()); }

void init_from_env() {
  const char* v = std::getenv("COCOONBOX_LOG_LEVEL");
  if (v == nullptr) return;
  std::string_view s(v);
  if (s == "debug")
    set_min_level(Level::kDebug);
  else if (s == "info")
    set_min_level(Level::kInfo);
  else if (s == "warn")
    set_min_level(Level::kWarn);
  else if (s == "error")
    set_min_level(Level::kError);
}

void set_sink(Sink sink) {
  std::lock_guard lock(g_sink_mu);
  g_sink = std::move(sink);
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
      ++i;
      continue;
    }
    size_t n = utf8_len(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  out.push_back('"');
}

std::string format_line(Level level, std::string_view msg, Fields fields) {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::string out;
  out.reserve(128);
  out += fmt::format(
      "{{\"ts\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\",\"msg\":",
      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms,
      level_name(level));
  append_json_string(out, msg);
  for (const auto& f : fields) {
    out.push_back(',');
    append_json_string(out, f.key);
    out.push_back(':');
    std::visit(
        [&out](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string_view> || std::is_same_v<V, std::string>) {
            append_json_string(out, v);
          } else if constexpr (std::is_same_v<V, bool>) {
            out += v ? "true" : "false";
          } else if constexpr (std::is_same_v<V, double>) {
            out += fmt::format("{}", v);
          } else {
            out += fmt::format("{}", v);
          }
        },
        f.value);
  }
  out += "}\n";
  return out;
}

void write(Level level, std::string_view msg, Fields fields) {
  if (static_cast<int>(level) < g_min_level.load()) return;
  std::string line = format_line(level, msg, fields);
  std::lock_guard lock(g_sink_mu);
  if (g_sink) {
    g_sink(line);
    return;
  }
  // One write(2) per line keeps lines whole; a short write on stderr is not retried.
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
}

}  // namespace cb::log
