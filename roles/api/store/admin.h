#pragma once
// The api's admin subcommands, run as a one-shot process against the data dir of a (possibly
// running) api server:
//
//   cocoonbox api [--data-dir DIR] user add NAME [--max-boxes N] [--max-running N] [--json]
//   cocoonbox api [--data-dir DIR] user list [--json]
//   cocoonbox api [--data-dir DIR] user rm NAME [--json]
//   cocoonbox api [--data-dir DIR] token issue NAME [--label L]
//   cocoonbox api [--data-dir DIR] token revoke ID [--json]
//   cocoonbox api [--data-dir DIR] token list NAME [--json]
//   cocoonbox api [--data-dir DIR] user set-gateway NAME --url URL --key-file FILE|- [--json]
//   cocoonbox api [--data-dir DIR] user set-gateway NAME --clear [--json]
//   cocoonbox api [--data-dir DIR] usage [--user NAME] [--since YYYY-MM-DD] [--json]
//
// `user set-gateway` reads the gateway key from FILE, or from stdin with `-` (never from
// argv, where every user of the host could read it in /proc); one trailing line end is
// dropped. The key is sealed in api.db under <data-dir>/master.key (README.md §Model gateways)
// and is printed nowhere. `usage` prints the model door's token counts per day, user, box,
// wire and model.
//
// `token issue` prints the token, once, as the only line on stdout (so `$(...)` captures
// exactly it); what it did goes to stderr. Every other command prints for humans, or one JSON
// value with --json. A running api sees user and token changes within a refresh period
// (token_index.h); boxes released by `user rm` are stopped by the api, which finds them with
// Store::list_all_boxes().
//
// Exit status: 0 ok; 1 error (a line on stderr naming the problem); 2 usage (CLI11 parse
// errors, which the api's parser reports, and arguments the store rejects as invalid, such
// as a malformed user name).
//
// Each command opens api.db with SyncStore (store.h) on the calling thread, creating the
// data dir and the database when missing; no io_context or worker thread is involved.
//
// Wiring, in the api's run():
//
//   CLI::App app("cocoonbox api");
//   api::AdminOptions admin;
//   app.add_option("--data-dir", data_dir);
//   api::add_admin_commands(app, admin);
//   ... app.parse(...) inside the api's try/catch for CLI::ParseError ...
//   if (admin.command != api::AdminCommand::kNone) {
//     admin.data_dir = data_dir;   // after defaulting
//     return api::run_admin_command(admin);
//   }
//
// Thread-safety: plain functions; AdminOptions is the caller's.

#include "crypto/keys.h"
#include "roles/api/store/store.h"

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace cb::api {

enum class AdminCommand {
  kNone,  // no admin subcommand on the command line: run the server
  kUserAdd,
  kUserList,
  kUserRemove,
  kTokenIssue,
  kTokenRevoke,
  kTokenList,
  kUserSetGateway,
  kUsage,
};

struct AdminOptions {
  // Where api.db lives: the api's --data-dir. The caller sets it after parsing.
  std::filesystem::path data_dir;
  // Set by the parser when an admin subcommand was given.
  AdminCommand command = AdminCommand::kNone;
  std::string name;      // NAME of user add/rm, token issue/list
  std::string token_id;  // ID of token revoke
  std::string label;     // token issue --label
  int max_boxes = kDefaultMaxBoxes;
  int max_running = kDefaultMaxRunning;
  bool json = false;
  // user set-gateway: --url, --key-file (a path, or "-" for |key_in|), --clear.
  std::string gateway_url;
  std::string gateway_key_file;
  bool gateway_clear = false;
  // Where `--key-file -` reads from; null means std::cin.
  std::istream* key_in = nullptr;
  // Loads (creating when missing) <data-dir>/master.key, for user set-gateway. The api sets it
  // (roles/api/keys.h load_or_create_master_key); unset, set-gateway fails.
  std::function<Result<crypto::SymmetricKey>(const std::filesystem::path&)> load_master_key;
  // usage: --user NAME ("" for all), --since YYYY-MM-DD ("" for all days).
  std::string usage_user;
  std::string usage_since;
  // Clock and randomness for the store (tests); the defaults are the real ones.
  StoreOptions store;
};

// Registers the `user` and `token` subcommands (and theirs) on |api_app|. Parsing fills
// |opts|, so |opts| must outlive the parse. Parent options such as --data-dir may also follow
// the subcommand.
void add_admin_commands(CLI::App& api_app, AdminOptions& opts);

// Runs the command in |opts| and returns the exit status; output goes to |out| and |err|.
// REQUIRES: opts.command != AdminCommand::kNone (else it prints a usage line and returns 2).
int run_admin_command(const AdminOptions& opts, std::ostream& out, std::ostream& err);
// The same on std::cout and std::cerr.
int run_admin_command(const AdminOptions& opts);

}  // namespace cb::api
