#pragma once
// Header fields shared by HTTP/1.1 and HTTP/2. Names are lower case on every path into and
// out of cocoonbox (HTTP/2 requires it; HTTP/1.1 parsing lower-cases them).

#include <string>
#include <string_view>
#include <vector>

namespace cb::http {

struct Header {
  std::string name;
  std::string value;

  bool operator==(const Header&) const = default;
};
using Headers = std::vector<Header>;

// The first value of |name| (case-insensitive), or nullptr.
const std::string* find_header(const Headers& headers, std::string_view name);

// The request line and header fields of one request, as either protocol delivered them.
struct RequestHead {
  std::string method;
  std::string path;       // origin-form target including any query
  std::string authority;  // :authority or Host
  std::string scheme;     // "http" or "https"
  Headers headers;        // regular fields only (no pseudo-headers)

  // The path without the query string.
  std::string_view path_only() const;
};

}  // namespace cb::http
