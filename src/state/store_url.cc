#include "state/store_url.h"

#include "state/fs_store.h"
#include "state/s3_store.h"

#include <map>
#include <string>

namespace cb::state {

namespace {

Result<std::string> percent_decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c != '%') {
      out += c;
      continue;
    }
    auto hex = [](char h) -> int {
      if (h >= '0' && h <= '9') return h - '0';
      if (h >= 'a' && h <= 'f') return h - 'a' + 10;
      if (h >= 'A' && h <= 'F') return h - 'A' + 10;
      return -1;
    };
    int hi = i + 2 < text.size() ? hex(text[i + 1]) : -1;
    int lo = i + 2 < text.size() ? hex(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) return invalid_argument("store url: bad percent-encoding");
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<std::unique_ptr<Store>> open_s3(std::string_view rest) {
  std::string_view location = rest.substr(0, rest.find('?'));
  std::string_view query =
      rest.find('?') == std::string_view::npos ? "" : rest.substr(rest.find('?') + 1);
  S3Store::Options options;
  size_t slash = location.find('/');
  options.bucket = std::string(location.substr(0, slash));
  if (slash != std::string_view::npos) {
    std::string_view prefix = location.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    options.prefix = std::string(prefix);
  }
  std::map<std::string, std::string> params;
  while (!query.empty()) {
    std::string_view pair = query.substr(0, query.find('&'));
    query = pair.size() < query.size() ? query.substr(pair.size() + 1) : "";
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    if (eq == std::string_view::npos) {
      return invalid_argument("store url: parameter " + std::string(pair) + " has no value");
    }
    ASSIGN_OR_RETURN(std::string value, percent_decode(pair.substr(eq + 1)));
    std::string name(pair.substr(0, eq));
    if (!params.emplace(name, std::move(value)).second) {
      return invalid_argument("store url: parameter " + name + " given twice");
    }
  }
  std::string secret_file;
  for (const auto& [name, value] : params) {
    if (name == "endpoint") {
      options.endpoint = value;
    } else if (name == "region") {
      options.region = value;
    } else if (name == "access_key") {
      options.access_key_id = value;
    } else if (name == "secret_file") {
      secret_file = value;
    } else if (name == "ca_file") {
      options.ca_file = value;
    } else if (name == "verify") {
      if (value != "0" && value != "1") return invalid_argument("store url: verify is 0 or 1");
      options.verify_peer = value == "1";
    } else if (name == "secret" || name == "secret_key") {
      return invalid_argument("store url: never put the secret in the URL; use secret_file");
    } else {
      return invalid_argument("store url: unknown parameter " + name);
    }
  }
  if (options.endpoint.empty()) return invalid_argument("store url: s3 needs endpoint=");
  if (options.access_key_id.empty()) return invalid_argument("store url: s3 needs access_key=");
  if (secret_file.empty()) return invalid_argument("store url: s3 needs secret_file=");
  ASSIGN_OR_RETURN(options.secret_access_key, read_secret_file(secret_file));
  ASSIGN_OR_RETURN(auto store, S3Store::open(std::move(options)));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace

Result<std::unique_ptr<Store>> open_store_url(std::string_view url) {
  if (url.starts_with("file://")) {
    std::string_view path = url.substr(7);
    if (path.empty() || path.front() != '/') {
      return invalid_argument("store url: want file:///absolute/path");
    }
    if (path.find_first_of("?#") != std::string_view::npos) {
      return invalid_argument("store url: file URLs take no query or fragment");
    }
    ASSIGN_OR_RETURN(std::string decoded, percent_decode(path));
    ASSIGN_OR_RETURN(auto store, FsStore::open(decoded));
    return std::unique_ptr<Store>(std::move(store));
  }
  if (url.starts_with("s3://")) return open_s3(url.substr(5));
  return invalid_argument("store url: want file:///path or s3://bucket/prefix?endpoint=...");
}

}  // namespace cb::state
