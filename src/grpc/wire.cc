#include "grpc/wire.h"

#include "base/base64.h"

#include <fmt/format.h>

namespace cb::grpc {

Result<std::chrono::nanoseconds> parse_timeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9)
    return invalid_argument(fmt::format("grpc-timeout {:?}: want 1-8 digits and a unit", v));
  uint64_t n = 0;
  for (char c : v.substr(0, v.size() - 1)) {
    if (c < '0' || c > '9')
      return invalid_argument(fmt::format("grpc-timeout {:?}: not a number", v));
    n = n * 10 + uint64_t(c - '0');
  }
  using namespace std::chrono;
  // Clamp to ~100 years so unit conversion never overflows.
  auto hours_cap = [](uint64_t x, uint64_t per_hour) {
    return std::min<uint64_t>(x, 876000ull * per_hour);
  };
  switch (v.back()) {
    case 'H':
      return duration_cast<nanoseconds>(hours(hours_cap(n, 1)));
    case 'M':
      return duration_cast<nanoseconds>(minutes(hours_cap(n, 60)));
    case 'S':
      return duration_cast<nanoseconds>(seconds(hours_cap(n, 3600)));
    case 'm':
      return duration_cast<nanoseconds>(milliseconds(n));
    case 'u':
      return duration_cast<nanoseconds>(microseconds(n));
    case 'n':
      return nanoseconds(n);
    default:
      return invalid_argument(fmt::format("grpc-timeout {:?}: unknown unit", v));
  }
}

std::string format_timeout(std::chrono::nanoseconds t) {
  int64_t ns = std::max<int64_t>(t.count(), 1);
  constexpr int64_t kMax = 99999999;
  struct Unit {
    int64_t ns;
    char c;
  };
  constexpr Unit units[] = {{1, 'n'},          {1000, 'u'},        {1000000, 'm'},
                            {1000000000, 'S'}, {60000000000, 'M'}, {3600000000000, 'H'}};
  for (const auto& u : units) {
    // Round up (never shorten a deadline) without ns + u.ns - 1, which overflows near max.
    int64_t value = ns / u.ns + (ns % u.ns != 0 ? 1 : 0);
    if (value <= kMax) return fmt::format("{}{}", value, u.c);
  }
  return fmt::format("{}H", kMax);
}

std::string percent_encode(std::string_view m) {
  std::string out;
  out.reserve(m.size());
  for (char c : m) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '%') {
      out += fmt::format("%{:02X}", u);
    } else {
      out += c;
    }
  }
  return out;
}

std::string percent_decode(std::string_view e) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(e.size());
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i] == '%' && i + 2 < e.size()) {
      int hi = hex(e[i + 1]), lo = hex(e[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += char(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += e[i];
  }
  return out;
}

bool is_binary_key(std::string_view key) {
  return key.size() > 4 && key.substr(key.size() - 4) == "-bin";
}

namespace {
bool is_reserved(std::string_view k) {
  return k.empty() || k[0] == ':' || k == "content-type" || k == "te" || k == "user-agent" ||
         k == "grpc-status" || k == "grpc-message" || k == "grpc-timeout" || k == "grpc-encoding" ||
         k == "grpc-accept-encoding" || k == "grpc-status-details-bin" || k == "connection" ||
         k == "host" || k == "content-length" || k == "transfer-encoding";
}
}  // namespace

Status validate_metadata(const Metadata& md) {
  for (const auto& h : md) {
    if (is_reserved(h.name))
      return invalid_argument(fmt::format("metadata key {:?} is reserved", h.name));
    for (char c : h.name) {
      bool ok =
          (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
      if (!ok) return invalid_argument(fmt::format("metadata key {:?} is not valid", h.name));
    }
    if (!is_binary_key(h.name)) {
      for (char c : h.value) {
        if (c < 0x20 || c > 0x7e)
          return invalid_argument(
              fmt::format("metadata {:?}: ASCII values only (use a -bin key)", h.name));
      }
    }
  }
  return ok_status();
}

http::Headers metadata_to_wire(const Metadata& md) {
  http::Headers out;
  out.reserve(md.size());
  for (const auto& h : md) {
    if (is_binary_key(h.name)) {
      std::string enc = base64_encode(h.value);
      while (!enc.empty() && enc.back() == '=') enc.pop_back();
      out.push_back({h.name, std::move(enc)});
    } else {
      out.push_back(h);
    }
  }
  return out;
}

Result<Metadata> metadata_from_wire(const http::Headers& headers) {
  Metadata md;
  for (const auto& h : headers) {
    if (is_reserved(h.name)) continue;
    if (is_binary_key(h.name)) {
      // Several values may be joined with "," when a proxy merged them.
      std::string value;
      std::string_view rest = h.value;
      bool first = true;
      while (true) {
        auto comma = rest.find(',');
        std::string_view part = rest.substr(0, comma);
        while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
        auto dec = base64_decode(part);
        if (!dec.ok())
          return internal_error(fmt::format("metadata {:?}: bad base64 value", h.name));
        if (!first) {
          md.push_back({h.name, std::move(value)});
          value.clear();
        }
        value = std::move(*dec);
        first = false;
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
      }
      md.push_back({h.name, std::move(value)});
    } else {
      md.push_back(h);
    }
  }
  return md;
}

Code code_for_http_status(int s) {
  switch (s) {
    case 400:
      return Code::kInternal;
    case 401:
      return Code::kUnauthenticated;
    case 403:
      return Code::kPermissionDenied;
    case 404:
      return Code::kUnimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return Code::kUnavailable;
    default:
      return Code::kUnknown;
  }
}

}  // namespace cb::grpc
