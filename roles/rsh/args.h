#pragma once
// The command line of `cocoonbox rsh`, which must read like ssh's for git and rsync:
//
//   cocoonbox rsh [--box B] [-t|-T] [-p PORT] [-l USER] [-o SendEnv=GIT_PROTOCOL] [-4|-6] [-q]
//                 [HOST] COMMAND...
//   cocoonbox rsh -G HOST     git's probe for OpenSSH: answered with exit 255, so git uses
//                             its "simple" variant (host and command only)
//
// HOST is what git and rsync copy from a remote spec such as `box:/workspace/repo`: `box`
// (the --box box, default main) or `NAME.box` (the box NAME), with an optional `USER@`.
// Anything else in first position starts the command. COMMAND's words are joined with spaces
// into one shell command line, as ssh does. -p, -l, -4, -6 and -q are accepted and have no
// effect (the endpoint and the box's user are fixed); other ssh options are refused.

#include "base/result.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cb::rsh {

struct Args {
  bool probe = false;              // -G: answer git's probe and exit 255
  std::string box;                 // from --box or HOST; "" = main
  std::optional<bool> pty;         // -t: true, -T: false, neither: ssh's default
  std::string command;             // "" = an interactive shell
  bool send_git_protocol = false;  // -o SendEnv=GIT_PROTOCOL
};

// Errors: kInvalidArgument with a message naming the option.
Result<Args> parse_args(const std::vector<std::string>& args);

// True for "box", "NAME.box", "USER@box", "USER@NAME.box"; sets |box| to NAME ("" for box).
bool parse_host(const std::string& word, std::string* box);

}  // namespace cb::rsh
