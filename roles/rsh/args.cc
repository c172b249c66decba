#include "roles/rsh/args.h"

#include <fmt/format.h>

namespace cb::rsh {

namespace {

bool valid_box_name(std::string_view n) {
  if (n.empty() || n.size() > 31) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i > 0);
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool parse_host(const std::string& word, std::string* box) {
  std::string_view h = word;
  if (auto at = h.find('@'); at != std::string_view::npos) h.remove_prefix(at + 1);
  if (h == "box") {
    box->clear();
    return true;
  }
  constexpr std::string_view kSuffix = ".box";
  if (h.size() > kSuffix.size() && h.substr(h.size() - kSuffix.size()) == kSuffix) {
    std::string_view name = h.substr(0, h.size() - kSuffix.size());
    if (!valid_box_name(name)) return false;
    *box = std::string(name);
    return true;
  }
  return false;
}

Result<Args> parse_args(const std::vector<std::string>& args) {
  Args a;
  std::optional<std::string> flag_box;
  size_t i = 0;
  auto value = [&](const std::string& opt) -> Result<std::string> {
    if (i + 1 >= args.size()) return invalid_argument(fmt::format("{} needs a value", opt));
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& w = args[i];
    if (w == "--") {
      ++i;
      break;
    }
    if (w.empty() || w[0] != '-') break;
    if (w == "--box") {
      ASSIGN_OR_RETURN(flag_box, value(w));
    } else if (w.rfind("--box=", 0) == 0) {
      flag_box = w.substr(6);
    } else if (w == "-G") {
      a.probe = true;
    } else if (w == "-t" || w == "-tt") {
      a.pty = true;
    } else if (w == "-T") {
      a.pty = false;
    } else if (w == "-4" || w == "-6" || w == "-q") {
      // Accepted for git and rsync: the endpoint decides the address family; nothing to quiet.
    } else if (w == "-p" || w == "-l") {
      ASSIGN_OR_RETURN(std::string v, value(w));
      (void)v;  // the endpoint and the box's user are fixed
    } else if (w.rfind("-p", 0) == 0 || w.rfind("-l", 0) == 0) {
      // -pPORT, -lUSER
    } else if (w == "-o" || w.rfind("-o", 0) == 0) {
      std::string opt;
      if (w == "-o") {
        ASSIGN_OR_RETURN(opt, value(w));
      } else {
        opt = w.substr(2);
      }
      if (opt == "SendEnv=GIT_PROTOCOL") {
        a.send_git_protocol = true;
      } else {
        return invalid_argument(fmt::format(
            "ssh option -o {} is not supported (only SendEnv=GIT_PROTOCOL, which git passes)",
            opt));
      }
    } else if (w == "--help" || w == "-h") {
      return invalid_argument("help");
    } else {
      return invalid_argument(fmt::format(
          "option {} is not supported; rsh takes --box, -t, -T and the ssh options git and "
          "rsync pass (-p, -l, -o SendEnv=GIT_PROTOCOL, -4, -6, -q)",
          w));
    }
  }
  std::string host_box;
  bool have_host = false;
  if (i < args.size() && (i + 1 < args.size() || a.probe) && parse_host(args[i], &host_box)) {
    have_host = true;
    ++i;
  }
  if (a.probe) return a;
  if (have_host && flag_box && !host_box.empty() && host_box != *flag_box) {
    return invalid_argument(
        fmt::format("host {}.box names another box than --box {}", host_box, *flag_box));
  }
  a.box = flag_box ? *flag_box : host_box;
  for (; i < args.size(); ++i) {
    if (!a.command.empty()) a.command += ' ';
    a.command += args[i];
  }
  return a;
}

}  // namespace cb::rsh
