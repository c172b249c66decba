#include "roles/api/state_rules.h"

#include "crypto/blake2b.h"
#include "crypto/hash.h"
#include "crypto/hmac.h"

#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <optional>
#include <span>

namespace cb::api {

namespace {

constexpr char kUrlKeyContext[] = "cbsturl1";

std::string_view crypto_chars(std::span<const uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// One query parameter of |query| ("a=1&b=2"), or nullopt.
std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    if (part.size() > name.size() && part.substr(0, name.size()) == name &&
        part[name.size()] == '=')
      return part.substr(name.size() + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// Checks one box path component by component; returns it without the leading '/'.
Result<std::string> box_path(std::string_view path, std::string_view field) {
  if (path.empty() || path[0] != '/')
    return invalid_argument(
        fmt::format("{}: {:?} is not an absolute box path", field, std::string(path)));
  std::string_view rest = path.substr(1);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  std::string_view walk = rest;
  while (!walk.empty()) {
    size_t slash = walk.find('/');
    std::string_view comp = walk.substr(0, slash);
    if (comp == "..")
      return invalid_argument(fmt::format("{}: {:?} contains \"..\"", field, std::string(path)));
    if (comp.empty() || comp == ".")
      return invalid_argument(
          fmt::format("{}: {:?} has an empty or \".\" component", field, std::string(path)));
    if (comp.find('\0') != std::string_view::npos)
      return invalid_argument(fmt::format("{}: contains a NUL byte", field));
    if (slash == std::string_view::npos) break;
    walk.remove_prefix(slash + 1);
  }
  return std::string(rest);
}

bool within(std::string_view path, std::string_view root) {
  return path == root || (path.size() > root.size() && path.substr(0, root.size()) == root &&
                          path[root.size()] == '/');
}

}  // namespace

ChunkUrlSigner::ChunkUrlSigner(const crypto::SymmetricKey& master)
    : key_(crypto::derive_subkey(master, 1, kUrlKeyContext)) {}

std::string ChunkUrlSigner::mac(std::string_view method, std::string_view key,
                                int64_t expires_unix) const {
  auto d = crypto::hmac_sha256(crypto_chars(key_.bytes()),
                               fmt::format("{}\n{}\n{}", method, key, expires_unix));
  return crypto::hex_encode(std::span<const uint8_t>(d.data(), d.size()));
}

std::string ChunkUrlSigner::sign(std::string_view method, std::string_view key,
                                 int64_t expires_unix) const {
  return fmt::format("{}{}?exp={}&sig={}", kStateObjectPrefix, key, expires_unix,
                     mac(method, key, expires_unix));
}

Result<std::string> ChunkUrlSigner::verify(std::string_view method, std::string_view target,
                                           int64_t now_unix) const {
  if (target.substr(0, kStateObjectPrefix.size()) != kStateObjectPrefix)
    return invalid_argument("not a state object URL");
  target.remove_prefix(kStateObjectPrefix.size());
  size_t q = target.find('?');
  if (q == std::string_view::npos) return permission_denied("the URL is not signed");
  std::string_view key = target.substr(0, q);
  std::string_view query = target.substr(q + 1);
  auto exp_text = query_param(query, "exp");
  auto sig = query_param(query, "sig");
  if (!exp_text || !sig) return permission_denied("the URL is not signed");
  int64_t exp = 0;
  auto [end, ec] = std::from_chars(exp_text->data(), exp_text->data() + exp_text->size(), exp);
  if (ec != std::errc() || end != exp_text->data() + exp_text->size())
    return invalid_argument("exp: not a number");
  if (!crypto::constant_time_equal(mac(method, key, exp), *sig))
    return permission_denied("the URL's signature does not match");
  if (now_unix > exp) return permission_denied("the URL expired");
  return std::string(key);
}

Result<std::vector<std::string>> restore_scope(const std::vector<std::string>& paths) {
  if (paths.empty()) return invalid_argument("paths: at least one path is required");
  std::vector<std::string> out;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string field = fmt::format("paths[{}]", i);
    ASSIGN_OR_RETURN(std::string p, box_path(paths[i], field));
    if (!within(p, "home/user") && !within(p, "workspace"))
      return invalid_argument(
          fmt::format("{}: {:?} is outside /home/user and /workspace", field, paths[i]));
    out.push_back(std::move(p));
  }
  return out;
}

Status check_restore_target(std::string_view target) {
  if (target.empty() || target.size() > 255)
    return invalid_argument("target: must be one folder name of 1..255 bytes");
  if (target.find('/') != std::string_view::npos)
    return invalid_argument(
        fmt::format("target: {:?} contains '/': it must be one folder name", std::string(target)));
  if (target == "." || target == "..")
    return invalid_argument(fmt::format("target: {:?} is not a folder name", std::string(target)));
  if (target.rfind(".cb-restore-", 0) == 0)
    return invalid_argument("target: names starting with .cb-restore- are reserved");
  for (char c : target) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return invalid_argument("target: contains a control character");
  }
  return ok_status();
}

std::string default_restore_target(int64_t saved_at_ms) {
  std::time_t t = static_cast<std::time_t>(saved_at_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H%M%SZ", &tm);
  return buf;
}

Result<std::string> browse_dir(std::string_view dir) {
  if (dir.empty() || dir == "/") return std::string();
  return box_path(dir, "dir");
}

}  // namespace cb::api
