#include "roles/api/store/admin.h"

#include "crypto/bytes.h"
#include "model/client.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <ostream>
#include <sstream>
#include <string_view>

namespace cb::api {

namespace {

using nlohmann::json;

std::string_view command_name(AdminCommand c) {
  switch (c) {
    case AdminCommand::kNone:
      return "api";
    case AdminCommand::kUserAdd:
      return "user add";
    case AdminCommand::kUserList:
      return "user list";
    case AdminCommand::kUserRemove:
      return "user rm";
    case AdminCommand::kTokenIssue:
      return "token issue";
    case AdminCommand::kTokenRevoke:
      return "token revoke";
    case AdminCommand::kTokenList:
      return "token list";
    case AdminCommand::kUserSetGateway:
      return "user set-gateway";
    case AdminCommand::kUsage:
      return "usage";
  }
  return "api";
}

// Prints |status| for |command| and maps it to an exit status: arguments the store rejects
// are usage errors (2), everything else an error (1).
int fail(std::ostream& err, AdminCommand command, const Status& status) {
  err << fmt::format("cocoonbox api {}: {}\n", command_name(command), status.message());
  return status.code() == Code::kInvalidArgument ? 2 : 1;
}

// "2026-10-03T12:34:56Z" for a Unix time in milliseconds.
std::string utc_time(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

json user_json(const User& u) {
  return json{{"id", u.id},
              {"name", u.name},
              {"max_boxes", u.max_boxes},
              {"max_running", u.max_running},
              {"created_at_ms", u.created_at_ms}};
}

json token_json(const TokenInfo& t) {
  json j{
      {"id", t.id}, {"user_id", t.user_id}, {"label", t.label}, {"created_at_ms", t.created_at_ms}};
  j["revoked_at_ms"] = t.revoked_at_ms ? json(*t.revoked_at_ms) : json(nullptr);
  return j;
}

int user_add(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  auto user = store.add_user(o.name, o.max_boxes, o.max_running);
  if (!user.ok()) return fail(err, o.command, user.status());
  if (o.json) {
    out << user_json(*user).dump() << "\n";
  } else {
    out << fmt::format("added user {} (id {}): max_boxes {}, max_running {}\n", user->name,
                       user->id, user->max_boxes, user->max_running);
  }
  return 0;
}

int user_list(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  auto users = store.list_users();
  if (!users.ok()) return fail(err, o.command, users.status());
  if (o.json) {
    json j = json::array();
    for (const User& u : *users) j.push_back(user_json(u));
    out << j.dump() << "\n";
    return 0;
  }
  out << fmt::format("{:<32} {:>6} {:>9} {:>11}  {}\n", "NAME", "ID", "MAX_BOXES", "MAX_RUNNING",
                     "CREATED");
  for (const User& u : *users) {
    out << fmt::format("{:<32} {:>6} {:>9} {:>11}  {}\n", u.name, u.id, u.max_boxes, u.max_running,
                       utc_time(u.created_at_ms));
  }
  return 0;
}

int user_rm(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  auto released = store.remove_user(o.name);
  if (!released.ok()) return fail(err, o.command, released.status());
  if (o.json) {
    out << json{{"name", o.name}, {"released_boxes", *released}}.dump() << "\n";
  } else if (released->empty()) {
    out << fmt::format("removed user {}; its tokens are revoked; it had no boxes\n", o.name);
  } else {
    out << fmt::format(
        "removed user {}; its tokens are revoked; boxes released (the api stops their "
        "machines): {}\n",
        o.name, fmt::join(*released, " "));
  }
  return 0;
}

int token_issue(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  auto issued = store.issue_token(o.name, o.label);
  if (!issued.ok()) return fail(err, o.command, issued.status());
  // The only stdout line; it is not stored anywhere and cannot be shown again.
  out << issued->plaintext << "\n";
  err << fmt::format("issued token {} for user {}; it is shown only this once\n", issued->info.id,
                     o.name);
  return 0;
}

int token_revoke(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  Status s = store.revoke_token(o.token_id);
  if (!s.ok()) return fail(err, o.command, s);
  if (o.json) {
    out << json{{"id", o.token_id}, {"revoked", true}}.dump() << "\n";
  } else {
    out << fmt::format("revoked token {}\n", o.token_id);
  }
  return 0;
}

int token_list(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  auto tokens = store.list_tokens(o.name);
  if (!tokens.ok()) return fail(err, o.command, tokens.status());
  if (o.json) {
    json j = json::array();
    for (const TokenInfo& t : *tokens) j.push_back(token_json(t));
    out << j.dump() << "\n";
    return 0;
  }
  out << fmt::format("{:<16} {:<24} {:<20}  {}\n", "ID", "LABEL", "CREATED", "REVOKED");
  for (const TokenInfo& t : *tokens) {
    out << fmt::format("{:<16} {:<24} {:<20}  {}\n", t.id, t.label.empty() ? "-" : t.label,
                       utc_time(t.created_at_ms),
                       t.revoked_at_ms ? utc_time(*t.revoked_at_ms) : std::string("-"));
  }
  return 0;
}

// The gateway key in |path| ("-": |in|), with one trailing line end dropped (an editor's or
// echo's). The message of an error never holds the key.
Result<std::string> read_gateway_key(const std::string& path, std::istream& in) {
  std::ostringstream ss;
  if (path == "-") {
    ss << in.rdbuf();
  } else {
    std::ifstream f(path, std::ios::binary);
    if (!f) return invalid_argument(fmt::format("--key-file {}: {}", path, std::strerror(errno)));
    ss << f.rdbuf();
  }
  std::string key = ss.str();
  if (!key.empty() && key.back() == '\n') key.pop_back();
  if (!key.empty() && key.back() == '\r') key.pop_back();
  if (key.empty()) return invalid_argument(fmt::format("--key-file {}: no key in it", path));
  return key;
}

int user_set_gateway(SyncStore& store, const AdminOptions& o, std::ostream& out,
                     std::ostream& err) {
  if (o.gateway_clear) {
    if (!o.gateway_url.empty() || !o.gateway_key_file.empty())
      return fail(err, o.command, invalid_argument("--clear takes no --url or --key-file"));
    Status s = store.clear_user_gateway(o.name);
    if (!s.ok()) return fail(err, o.command, s);
    if (o.json) {
      out << json{{"name", o.name}, {"gateway_url", nullptr}}.dump() << "\n";
    } else {
      out << fmt::format(
          "user {}: gateway cleared; its boxes use the api's default gateway (--gateway-url), "
          "if it has one\n",
          o.name);
    }
    return 0;
  }
  if (o.gateway_url.empty() || o.gateway_key_file.empty())
    return fail(err, o.command,
                invalid_argument("give --url and --key-file (a file, or - for stdin), or --clear"));
  auto endpoint = model::parse_endpoint(o.gateway_url);
  if (!endpoint.ok()) return fail(err, o.command, endpoint.status());
  if (!o.load_master_key) return fail(err, o.command, internal_error("no master key loader"));
  auto master = o.load_master_key(o.data_dir);
  if (!master.ok()) return fail(err, o.command, master.status());
  auto key = read_gateway_key(o.gateway_key_file, o.key_in != nullptr ? *o.key_in : std::cin);
  if (!key.ok()) return fail(err, o.command, key.status());
  Status s = store.set_user_gateway(o.name, o.gateway_url, *key, master->bytes());
  crypto::wipe(*key);
  if (!s.ok()) return fail(err, o.command, s);
  if (o.json) {
    out << json{{"name", o.name}, {"gateway_url", o.gateway_url}}.dump() << "\n";
  } else {
    out << fmt::format(
        "user {}: model gateway {}; the key is sealed in api.db (boxes use it through the model "
        "door, from their next call)\n",
        o.name, o.gateway_url);
  }
  return 0;
}

json usage_json(const ModelUsage& u) {
  return json{{"day", u.day},
              {"user_id", u.user_id},
              {"user", u.user_name},
              {"box_id", u.box_id},
              {"box", u.box_name},
              {"wire", u.wire},
              {"model", u.model},
              {"requests", u.requests},
              {"failed", u.failed},
              {"input_tokens", u.input_tokens},
              {"output_tokens", u.output_tokens},
              {"cache_read_tokens", u.cache_read_tokens},
              {"cache_write_tokens", u.cache_write_tokens},
              {"last_at_ms", u.last_at_ms}};
}

int usage(SyncStore& store, const AdminOptions& o, std::ostream& out, std::ostream& err) {
  auto rows = store.model_usage(o.usage_user, o.usage_since);
  if (!rows.ok()) return fail(err, o.command, rows.status());
  if (o.json) {
    json j = json::array();
    for (const ModelUsage& u : *rows) j.push_back(usage_json(u));
    out << j.dump() << "\n";
    return 0;
  }
  constexpr std::string_view kRow =
      "{:<10} {:<12} {:<12} {:<16} {:<9} {:<28} {:>8} {:>6} {:>12} {:>12}\n";
  out << fmt::format(kRow, "DAY", "USER", "BOX", "BOX_ID", "WIRE", "MODEL", "REQUESTS", "FAILED",
                     "INPUT", "OUTPUT");
  ModelUsage total;
  for (const ModelUsage& u : *rows) {
    out << fmt::format(kRow, u.day, u.user_name.empty() ? "-" : u.user_name,
                       u.box_name.empty() ? "-" : u.box_name, u.box_id, u.wire,
                       u.model.empty() ? "-" : u.model, u.requests, u.failed, u.input_tokens,
                       u.output_tokens);
    total.requests += u.requests;
    total.failed += u.failed;
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
  }
  out << fmt::format(kRow, "total", "", "", "", "", "", total.requests, total.failed,
                     total.input_tokens, total.output_tokens);
  return 0;
}

// Adds a leaf subcommand that records |command| in |opts| when it is parsed.
CLI::App* leaf(CLI::App& parent, std::string name, std::string description, AdminOptions& opts,
               AdminCommand command) {
  CLI::App* app = parent.add_subcommand(std::move(name), std::move(description));
  app->fallthrough();
  app->callback([&opts, command] { opts.command = command; });
  return app;
}

}  // namespace

void add_admin_commands(CLI::App& api_app, AdminOptions& opts) {
  CLI::App* user = api_app.add_subcommand("user", "Manage users in <data-dir>/api.db");
  user->require_subcommand(1);
  user->fallthrough();
  CLI::App* token = api_app.add_subcommand("token", "Manage user tokens in <data-dir>/api.db");
  token->require_subcommand(1);
  token->fallthrough();

  CLI::App* add = leaf(*user, "add", "Add a user", opts, AdminCommand::kUserAdd);
  add->add_option("name", opts.name, "User name, [a-z][a-z0-9_-]{0,31}")
      ->required()
      ->type_name("NAME");
  add->add_option("--max-boxes", opts.max_boxes, "Boxes the user may have")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add->add_option("--max-running", opts.max_running, "Boxes the user may run at once")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add->add_flag("--json", opts.json, "Print JSON");

  CLI::App* list = leaf(*user, "list", "List users", opts, AdminCommand::kUserList);
  list->add_flag("--json", opts.json, "Print JSON");

  CLI::App* rm = leaf(*user, "rm", "Remove a user: revoke its tokens, release its boxes", opts,
                      AdminCommand::kUserRemove);
  rm->add_option("name", opts.name, "User name")->required()->type_name("NAME");
  rm->add_flag("--json", opts.json, "Print JSON");

  CLI::App* issue = leaf(*token, "issue", "Issue a token; prints it once on stdout", opts,
                         AdminCommand::kTokenIssue);
  issue->add_option("name", opts.name, "User name")->required()->type_name("NAME");
  issue->add_option("--label", opts.label, "Free text to recognise the token by (<= 64 bytes)");

  CLI::App* revoke = leaf(*token, "revoke", "Revoke a token", opts, AdminCommand::kTokenRevoke);
  revoke->add_option("id", opts.token_id, "Token id (tk_...)")->required()->type_name("ID");
  revoke->add_flag("--json", opts.json, "Print JSON");

  CLI::App* tlist = leaf(*token, "list", "List a user's tokens (never their secrets)", opts,
                         AdminCommand::kTokenList);
  tlist->add_option("name", opts.name, "User name")->required()->type_name("NAME");
  tlist->add_flag("--json", opts.json, "Print JSON");

  CLI::App* gateway =
      leaf(*user, "set-gateway",
           "Set the user's model gateway; the key is sealed in api.db and never enters a box", opts,
           AdminCommand::kUserSetGateway);
  gateway->add_option("name", opts.name, "User name")->required()->type_name("NAME");
  gateway->add_option("--url", opts.gateway_url,
                      "Gateway base URL: http(s)://host[:port][/prefix]; calls go to "
                      "<prefix>/v1/...");
  gateway
      ->add_option("--key-file", opts.gateway_key_file,
                   "File holding the gateway key, or - to read it from stdin")
      ->type_name("FILE");
  gateway->add_flag("--clear", opts.gateway_clear,
                    "Remove the user's gateway (the api's default applies)");
  gateway->add_flag("--json", opts.json, "Print JSON");

  CLI::App* use = leaf(api_app, "usage", "Model token usage through the model door", opts,
                       AdminCommand::kUsage);
  use->add_option("--user", opts.usage_user, "Only this user's usage")->type_name("NAME");
  use->add_option("--since", opts.usage_since, "Only from this UTC day on")
      ->type_name("YYYY-MM-DD");
  use->add_flag("--json", opts.json, "Print JSON");
}

int run_admin_command(const AdminOptions& opts, std::ostream& out, std::ostream& err) {
  if (opts.command == AdminCommand::kNone) {
    err << "cocoonbox api: no admin command (user add|list|rm|set-gateway, token "
           "issue|revoke|list, usage)\n";
    return 2;
  }
  auto store = SyncStore::open(opts.data_dir, opts.store);
  if (!store.ok()) {
    return fail(err, opts.command,
                store.status().with_prefix(fmt::format("open {}", opts.data_dir.string())));
  }
  switch (opts.command) {
    case AdminCommand::kUserAdd:
      return user_add(*store, opts, out, err);
    case AdminCommand::kUserList:
      return user_list(*store, opts, out, err);
    case AdminCommand::kUserRemove:
      return user_rm(*store, opts, out, err);
    case AdminCommand::kTokenIssue:
      return token_issue(*store, opts, out, err);
    case AdminCommand::kTokenRevoke:
      return token_revoke(*store, opts, out, err);
    case AdminCommand::kTokenList:
      return token_list(*store, opts, out, err);
    case AdminCommand::kUserSetGateway:
      return user_set_gateway(*store, opts, out, err);
    case AdminCommand::kUsage:
      return usage(*store, opts, out, err);
    case AdminCommand::kNone:
      break;
  }
  return 2;
}

int run_admin_command(const AdminOptions& opts) {
  return run_admin_command(opts, std::cout, std::cerr);
}

}  // namespace cb::api
