#include "state/store.h"

namespace cb::state {

Status Store::get_append(std::string_view key, std::string& out) {
  ASSIGN_OR_RETURN(std::string object, get(key));
  out += object;
  return ok_status();
}

std::vector<Result<std::string>> Store::get_many(std::span<const std::string> keys) {
  std::vector<Result<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(get(key));
  return out;
}

Status validate_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeySize) {
    return invalid_argument("object key: want 1.." + std::to_string(kMaxKeySize) + " bytes");
  }
  size_t start = 0;
  while (true) {
    size_t slash = key.find('/', start);
    std::string_view segment =
        key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (segment.empty()) return invalid_argument("object key: empty segment");
    if (segment.front() == '.') return invalid_argument("object key: a segment starts with '.'");
    for (char c : segment) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
      if (!ok) return invalid_argument("object key: a character outside [A-Za-z0-9._-]");
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return ok_status();
}

Result<std::vector<ObjectInfo>> list_all(Store& store, std::string_view prefix) {
  std::vector<ObjectInfo> all;
  std::string after;
  while (true) {
    ASSIGN_OR_RETURN(ListPage page, store.list(prefix, after, kDefaultListLimit));
    if (page.objects.empty()) break;
    after = page.objects.back().key;
    for (auto& o : page.objects) all.push_back(std::move(o));
    if (!page.truncated) break;
  }
  return all;
}

Status delete_all(Store& store, std::span<const std::string> keys) {
  while (!keys.empty()) {
    size_t n = keys.size() < kMaxDeleteBatch ? keys.size() : kMaxDeleteBatch;
    RETURN_IF_ERROR(store.delete_batch(keys.first(n)));
    keys = keys.subspan(n);
  }
  return ok_status();
}

}  // namespace cb::state
