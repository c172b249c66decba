#include "client/endpoint.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <charconv>

namespace cb::client {

bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

Result<Endpoint> parse_endpoint(std::string_view url) {
  Endpoint e;
  std::string_view rest;
  if (url.substr(0, 8) == "https://") {
    e.tls = true;
    rest = url.substr(8);
  } else if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else {
    return invalid_argument(
        fmt::format("endpoint: {:?} must start with https:// (or http:// for loopback)", url));
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos || rest.find('?') != std::string_view::npos ||
      rest.find('@') != std::string_view::npos)
    return invalid_argument(fmt::format("endpoint: {:?} must be scheme://host[:port] only", url));
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos)
      return invalid_argument(fmt::format("endpoint: {:?} has an unclosed [", url));
    e.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return invalid_argument(fmt::format("endpoint: {:?}: junk after ]", url));
      port_text = after.substr(1);
    }
  } else {
    size_t colon = rest.rfind(':');
    e.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port_text = rest.substr(colon + 1);
  }
  if (e.host.empty()) return invalid_argument(fmt::format("endpoint: {:?} has no host", url));
  if (port_text.empty()) {
    if (!e.tls)
      return invalid_argument(fmt::format("endpoint: {:?} needs a port for http://", url));
    e.port = 443;
  } else {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), v);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || v == 0 || v > 65535)
      return invalid_argument(fmt::format("endpoint: {:?} has a bad port", url));
    e.port = static_cast<uint16_t>(v);
  }
  if (!e.tls && !is_loopback_host(e.host)) {
    return invalid_argument(fmt::format(
        "endpoint: plaintext http:// is allowed only to loopback; use https://{}", rest));
  }
  bool v6 = e.host.find(':') != std::string::npos;
  e.url = fmt::format("{}://{}{}{}:{}", e.tls ? "https" : "http", v6 ? "[" : "", e.host,
                      v6 ? "]" : "", e.port);
  return e;
}

}  // namespace cb::client
