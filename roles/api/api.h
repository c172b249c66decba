#pragma once
// `cocoonbox api`: the control plane and edge, on the host (architecture §2, §7).
//
//   cocoonbox api [--listen 127.0.0.1:7443] [--data-dir DIR] [--tls-cert F --tls-key F]
//                 [--backend local] [--idle-hibernate 30m] [--config FILE]
//                 [--gateway-url URL --gateway-key-file FILE]
//   cocoonbox api user add|list|rm|set-gateway ...   cocoonbox api token issue|revoke|list ...
//   cocoonbox api usage [--user NAME] [--since YYYY-MM-DD] [--json]
//
// With no flags it runs the embedded default: data dir, api.db, master.key, an admin user
// whose token goes to <data-dir>/admin.token (0600), plaintext h2c on 127.0.0.1:7443 only,
// the local machines backend. Plaintext is refused on a non-loopback address.

#include <span>

namespace cb::api {

// args[0] is "api". Returns the process exit status (0 ok, 1 error, 2 usage).
int run(std::span<char* const> args);

}  // namespace cb::api
