#include "proc/user.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>

namespace cb::proc {

namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    auto pos = line.find(sep);
    out.push_back(line.substr(0, pos));
    if (pos == std::string_view::npos) return out;
    line.remove_prefix(pos + 1);
  }
}

bool parse_id(std::string_view text, unsigned& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// The first well-formed passwd(5) entry (name:password:UID:GID:GECOS:directory:shell) for
// which |match(name, uid)| holds, with its supplementary groups from |group|.
template <typename Match>
Result<User> find_user(const Match& match, std::string_view what,
                       const std::filesystem::path& passwd, const std::filesystem::path& group) {
  std::ifstream in(passwd);
  if (!in) return internal_error(fmt::format("user: cannot read {}", passwd.string()));
  std::optional<User> user;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = split(line, ':');
    if (f.size() < 7) continue;
    unsigned uid = 0;
    unsigned gid = 0;
    if (!parse_id(f[2], uid) || !parse_id(f[3], gid)) continue;  // malformed; keep looking
    if (!match(f[0], static_cast<uid_t>(uid))) continue;
    user = User{std::string(f[0]), uid, gid, std::string(f[5]), std::string(f[6]), {gid}};
    break;
  }
  if (!user) return not_found(fmt::format("user {} not found in {}", what, passwd.string()));

  // group(5): group_name:password:GID:user_list (comma-separated)
  std::ifstream groups(group);
  while (groups && std::getline(groups, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = split(line, ':');
    unsigned gid = 0;
    if (f.size() < 4 || !parse_id(f[2], gid)) continue;
    auto members = split(f[3], ',');
    if (std::find(members.begin(), members.end(), user->name) == members.end()) continue;
    if (std::find(user->groups.begin(), user->groups.end(), gid) == user->groups.end()) {
      user->groups.push_back(gid);
    }
  }
  return std::move(*user);
}

}  // namespace

Result<User> lookup_user_in(std::string_view name, const std::filesystem::path& passwd,
                            const std::filesystem::path& group) {
  if (name.empty()) return not_found("user: empty name");
  return find_user([name](std::string_view n, uid_t) { return n == name; }, name, passwd, group);
}

Result<User> lookup_uid_in(uid_t uid, const std::filesystem::path& passwd,
                           const std::filesystem::path& group) {
  return find_user([uid](std::string_view, uid_t u) { return u == uid; },
                   fmt::format("with uid {}", uid), passwd, group);
}

Result<User> lookup_uid(uid_t uid) { return lookup_uid_in(uid, "/etc/passwd", "/etc/group"); }

Result<User> lookup_user(std::string_view name) {
  return lookup_user_in(name, "/etc/passwd", "/etc/group");
}

}  // namespace cb::proc
