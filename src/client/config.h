#pragma once
// The client's saved login (architecture §6): in $XDG_CONFIG_HOME/cocoonbox/ (else
// ~/.config/cocoonbox/), a 0700 directory holding
//   cli.json  {"endpoint": "https://...", "credential_helper": "..."}   (no secret in it)
//   token     the user token, 0600, when no credential helper is configured
// The token is never put in argv or in a child's environment.
//
// Credential helper: a command (run with /bin/sh -c "<helper> get|store|erase") that keeps the
// token elsewhere (a keyring, a password manager). It reads "endpoint=<url>\n" on stdin, and
// for `store` also "token=<token>\n"; `get` prints "token=<token>" on stdout. A non-zero exit
// is an error; its stderr is quoted in the message.

#include "base/result.h"
#include "net/asio.h"

#include <filesystem>
#include <optional>
#include <string>

namespace cb::client {

struct ClientConfig {
  std::string endpoint;           // a URL parse_endpoint() accepts
  std::string credential_helper;  // "" = the token file
};

// $XDG_CONFIG_HOME/cocoonbox, else $HOME/.config/cocoonbox.
// Errors: kFailedPrecondition when neither variable is set.
Result<std::filesystem::path> config_dir();

// nullopt when there is no cli.json (not logged in). Errors: kDataLoss (bad JSON, naming the
// file), kInternal (I/O).
Result<std::optional<ClientConfig>> load_config(const std::filesystem::path& dir);
// Writes cli.json atomically (temp file + rename), creating |dir| 0700.
Status save_config(const std::filesystem::path& dir, const ClientConfig& config);

// The stored token. Errors: kUnauthenticated "not logged in" when there is none; kInternal
// naming the helper when it fails.
asio::awaitable<Result<std::string>> load_token(const std::filesystem::path& dir,
                                                const ClientConfig& config);
asio::awaitable<Status> store_token(const std::filesystem::path& dir, const ClientConfig& config,
                                    std::string token);
// Removes the token and cli.json. Nothing stored is not an error.
asio::awaitable<Status> erase_login(const std::filesystem::path& dir, const ClientConfig& config);

}  // namespace cb::client
