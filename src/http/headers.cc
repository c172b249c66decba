#include "http/headers.h"

#include <strings.h>

namespace cb::http {

const std::string* find_header(const Headers& headers, std::string_view name) {
  for (const auto& h : headers) {
    if (h.name.size() == name.size() && ::strncasecmp(h.name.data(), name.data(), name.size()) == 0)
      return &h.value;
  }
  return nullptr;
}

std::string_view RequestHead::path_only() const {
  std::string_view p(path);
  auto q = p.find('?');
  return q == std::string_view::npos ? p : p.substr(0, q);
}

}  // namespace cb::http
