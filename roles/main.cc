// The cocoonbox dispatcher (house style H3): one static binary, roles picked by
// basename(argv[0]) ("cocoonbox-<role>" links made by scripts/install) or by the first
// argument ("cocoonbox <role> ..."). Process-wide setup happens here and only here.
//
// kRoles lists the roles this binary really has; --help prints exactly that list.

#include "base/log.h"
#include "roles/roles.h"

#include <fmt/format.h>
#include <sodium.h>

#include <csignal>
#include <cstdio>
#include <malloc.h>
#include <span>
#include <string_view>

namespace cb {
namespace {

constexpr std::string_view kVersion = COCOONBOX_VERSION;

void print_help(std::FILE* out) {
  fmt::print(out,
             "cocoonbox {}: your own computer in the cloud, with an agent living in it.\n\n"
             "Usage:\n"
             "  cocoonbox <role> [args...]       or a link named cocoonbox-<role>\n"
             "  cocoonbox --version | --help\n\n",
             kVersion);
  if (kRoles.empty()) {
    fmt::print(out, "Roles: none are built into this binary yet.\n");
    return;
  }
  fmt::print(out, "Roles:\n");
  for (const Role& r : kRoles) fmt::print(out, "  {:<10} {}\n", r.name, r.summary);
  if (!kCommands.empty()) {
    fmt::print(out, "\nCommands:\n");
    for (const Role& c : kCommands) fmt::print(out, "  {:<10} {}\n", c.name, c.summary);
  }
  fmt::print(out, "\nRun 'cocoonbox <role|command> --help' for its own flags and examples.\n");
}

const Role* find_role(std::string_view name) {
  for (const Role& r : kRoles) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const Role* find_command(std::string_view name) {
  for (const Role& c : kCommands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Every role streams bytes through buffers of 64 KiB to a few MiB (HTTP/2 windows, pipes,
// gRPC messages). With glibc's defaults such buffers are mmap'd, or the heap top is trimmed, and
// re-faulted as they come and go: 1 GiB up through rsh cost the api 26,500 page faults and
// 1.44 s of CPU and the agent 7,700 faults and 1.69 s; with these 4,200 faults and 0.91 s, and
// 800 faults and 0.89 s (2026-11-30). Live heaps stay bounded by the windows, so this only
// keeps memory that is about to be used again.
constexpr int kMallocMmapThreshold = 16 << 20;
constexpr int kMallocTrimThreshold = 64 << 20;

// Process-wide setup shared by every role.
int setup() {
  ::mallopt(M_MMAP_THRESHOLD, kMallocMmapThreshold);
  ::mallopt(M_TRIM_THRESHOLD, kMallocTrimThreshold);
  // A peer that goes away must surface as EPIPE on the write, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  log::init_from_env();
  if (sodium_init() < 0) {
    fmt::print(stderr, "cocoonbox: libsodium failed to initialise\n");
    return 1;
  }
  return 0;
}

int dispatch(int argc, char** argv) {
  std::span<char* const> args(argv, static_cast<size_t>(argc));
  std::string_view self = argc > 0 ? argv[0] : "cocoonbox";
  if (auto slash = self.rfind('/'); slash != std::string_view::npos) self.remove_prefix(slash + 1);
  constexpr std::string_view kPrefix = "cocoonbox-";
  if (self.substr(0, kPrefix.size()) == kPrefix) {
    std::string_view name = self.substr(kPrefix.size());
    const Role* role = find_role(name);
    if (role == nullptr) {
      fmt::print(stderr, "cocoonbox: no role {:?} (invoked as {}); see 'cocoonbox --help'\n", name,
                 self);
      return 2;
    }
    if (int rc = setup(); rc != 0) return rc;
    return role->run(args);
  }
  if (argc < 2) {
    print_help(stderr);
    return 2;
  }
  std::string_view first = argv[1];
  if (first == "--version" || first == "-V" || first == "version") {
    fmt::print("cocoonbox {}\n", kVersion);
    return 0;
  }
  if (first == "--help" || first == "-h" || first == "help") {
    print_help(stdout);
    return 0;
  }
  if (first == "--list-roles") {  // for scripts/install: one role name a line
    for (const Role& r : kRoles) fmt::print("{}\n", r.name);
    return 0;
  }
  const Role* role = find_role(first);
  if (role == nullptr) role = find_command(first);
  if (role == nullptr) {
    fmt::print(stderr, "cocoonbox: unknown command {:?}; see 'cocoonbox --help'\n", first);
    return 2;
  }
  if (int rc = setup(); rc != 0) return rc;
  return role->run(args.subspan(1));
}

}  // namespace
}  // namespace cb

int main(int argc, char** argv) { return cb::dispatch(argc, argv); }
