#pragma once
// Where a client (the CLI, rsh, the MCP bridge) reaches the api: "https://host[:port]" over
// TLS, or "http://host:port" in cleartext, which is allowed only to a loopback host
// (architecture §4: plaintext h2c only on loopback).

#include "base/result.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace cb::client {

// The embedded default of `cocoonbox api` (architecture §7).
inline constexpr std::string_view kDefaultEndpoint = "http://127.0.0.1:7443";

struct Endpoint {
  std::string url;  // normalized: scheme://host:port, no trailing slash
  bool tls = false;
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;
};

// Errors: kInvalidArgument naming what is wrong ("endpoint: ...").
Result<Endpoint> parse_endpoint(std::string_view url);

// True for localhost, 127.0.0.0/8 and ::1.
bool is_loopback_host(std::string_view host);

}  // namespace cb::client
