#include "roles/cli/cli.h"

#include "base/log.h"
#include "client/config.h"
#include "client/connect.h"
#include "client/endpoint.h"
#include "cocoonbox/control/v1/boxes.cbgrpc.h"
#include "roles/cli/chat.h"
#include "roles/cli/failure.h"
#include "roles/cli/setup.h"
#include "roles/cli/state_cmds.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fcntl.h>
#include <iostream>
#include <optional>
#include <string>
#include <termios.h>
#include <unistd.h>
#include <vector>

namespace cb::cli {

namespace pb = ::cocoonbox::control::v1;
namespace fs = std::filesystem;

namespace {

// What the user asked for, filled by CLI11.
struct Options {
  std::string command;     // "login", ..., "box create", "box rm"
  std::string endpoint;    // login
  std::string token_from;  // login: "-" = stdin
  std::string credential_helper;
  std::string box;  // --box or the NAME of box create/rm
  bool json = false;
  bool yes = false;
  bool no_wait = false;
  std::string shell;   // completion
  std::string client;  // setup
  bool print = false;  // setup
};

std::string state_name(pb::State s) {
  switch (s) {
    case pb::STATE_ABSENT:
      return "absent";
    case pb::STATE_STARTING:
      return "starting";
    case pb::STATE_RUNNING:
      return "running";
    case pb::STATE_HIBERNATING:
      return "hibernating";
    case pb::STATE_HIBERNATED:
      return "hibernated";
    case pb::STATE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

std::string phase_name(pb::Phase p) {
  switch (p) {
    case pb::PHASE_PENDING:
      return "pending";
    case pb::PHASE_BACKING_UP:
      return "backing up";
    case pb::PHASE_CREATING:
      return "creating";
    case pb::PHASE_STARTING:
      return "starting";
    case pb::PHASE_FREEZING:
      return "freezing";
    case pb::PHASE_THAWING:
      return "thawing";
    case pb::PHASE_CLEANING_UP:
      return "cleaning up";
    case pb::PHASE_DONE:
      return "done";
    case pb::PHASE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

nlohmann::json box_json(const pb::Box& b) {
  return {{"id", b.id()},
          {"name", b.name()},
          {"state", state_name(b.state())},
          {"image", b.image()},
          {"backend", b.backend()},
          {"detail", b.detail()},
          {"isolated", b.isolated()},
          {"attached_clients", b.attached_clients()},
          {"created_at_ms", b.created_at_ms()},
          {"state_changed_at_ms", b.state_changed_at_ms()}};
}

void print_box(const pb::Box& b, bool json) {
  if (json) {
    std::cout << box_json(b).dump() << "\n";
    return;
  }
  std::cout << fmt::format("{} ({}): {}", b.name(), b.id(), state_name(b.state()));
  if (!b.detail().empty()) std::cout << " - " << b.detail();
  std::cout << "\n";
}

// "box main: NOT_FOUND" style: the api's message, which names the field or the box.
Failure from_status(const Status& st, std::string_view what) {
  Failure f;
  if (st.code() == Code::kUnauthenticated) {
    f.message = fmt::format("{}: the api refused the token ({}); run `cocoonbox login`", what,
                            st.message());
  } else if (st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded) {
    f.message = fmt::format("{}: cannot reach the api: {}", what, st.message());
  } else {
    f.message = fmt::format("{}: {}", what, st.message());
  }
  return f;
}

bool stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

// Progress of one operation on stderr: one rewritten line on a terminal, plain lines otherwise.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(stderr_is_tty()) {}
  ~Progress() { done(); }
  void update(std::string_view phase, std::string_view detail) {
    std::string line = fmt::format("{}: {}{}{}", label_, phase, detail.empty() ? "" : ": ", detail);
    if (tty_) {
      fmt::print(stderr, "\r\033[K{}", line);
      open_ = true;
    } else {
      fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
  }
  void done() {
    if (open_) fmt::print(stderr, "\n");
    open_ = false;
  }

 private:
  std::string label_;
  bool tty_;
  bool open_ = false;
};

// Reads a line from the terminal with echo off (the token prompt).
std::optional<std::string> read_hidden(const std::string& prompt) {
  int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  (void)!::write(fd, prompt.data(), prompt.size());
  termios old{};
  bool restore = ::tcgetattr(fd, &old) == 0;
  if (restore) {
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(fd, TCSAFLUSH, &quiet);
  }
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  if (restore) ::tcsetattr(fd, TCSAFLUSH, &old);
  (void)!::write(fd, "\n", 1);
  ::close(fd);
  return line;
}

// Asks a yes/no question on the terminal; nullopt when there is no terminal.
std::optional<bool> confirm(const std::string& question) {
  int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string q = question + " [y/N] ";
  (void)!::write(fd, q.data(), q.size());
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  ::close(fd);
  return line == "y" || line == "Y" || line == "yes";
}

std::string trim(std::string s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

class Cli {
 public:
  explicit Cli(Options o) : o_(std::move(o)) {}

  asio::awaitable<int> run() {
    std::optional<Failure> f;
    if (o_.command == "login") {
      f = co_await login();
    } else if (o_.command == "logout") {
      f = co_await logout();
    } else if (o_.command == "mcp-headers") {
      f = co_await mcp_headers();
    } else {
      f = co_await connect();
      if (!f) f = co_await act();
    }
    if (conn_) conn_->channel->close();
    if (f) {
      std::cerr << "cocoonbox " << o_.command << ": " << f->message << "\n";
      co_return f->code;
    }
    co_return kOk;
  }

 private:
  asio::awaitable<std::optional<Failure>> act() {
    if (o_.command == "status") co_return co_await status();
    if (o_.command == "ensure") co_return co_await ensure(o_.box, false);
    if (o_.command == "box create") co_return co_await ensure(o_.box, true);
    if (o_.command == "hibernate") co_return co_await hibernate();
    if (o_.command == "upgrade") co_return co_await upgrade();
    if (o_.command == "box rm") co_return co_await remove();
    if (o_.command == "boxes") co_return co_await list();
    co_return Failure{fmt::format("unknown command {:?}", o_.command), kUsage};
  }

  // ---- login ----

  asio::awaitable<std::optional<Failure>> login() {
    auto dir = client::config_dir();
    if (!dir.ok()) co_return Failure{std::string(dir.status().message())};
    auto existing = client::load_config(*dir);
    std::string url = o_.endpoint;
    if (url.empty() && existing.ok() && *existing) url = (*existing)->endpoint;
    if (url.empty()) url = std::string(client::kDefaultEndpoint);
    auto endpoint = client::parse_endpoint(url);
    if (!endpoint.ok()) co_return Failure{std::string(endpoint.status().message()), kUsage};

    std::string token;
    if (!o_.token_from.empty() && o_.token_from != "-") {
      co_return Failure{
          "--token takes only \"-\" (read the token from stdin); a token in argv "
          "would be visible to every user of this machine",
          kUsage};
    }
    if (o_.token_from == "-" || ::isatty(STDIN_FILENO) != 1) {
      std::getline(std::cin, token);
    } else {
      auto typed = read_hidden(fmt::format("Token for {}: ", endpoint->url));
      if (!typed) co_return Failure{"no terminal to ask for the token: use --token - and stdin"};
      token = *typed;
    }
    token = trim(token);
    if (token.empty()) co_return Failure{"no token given", kUsage};

    auto c = client::open_connection(co_await asio::this_coro::executor, *endpoint, token);
    if (!c.ok()) co_return Failure{std::string(c.status().message())};
    conn_ = std::move(*c);
    pb::Boxes::Stub stub(conn_->channel);
    pb::ListBoxesRequest req;
    auto boxes = co_await stub.List(req, conn_->call_options(std::chrono::seconds(20)));
    if (!boxes.ok()) co_return from_status(boxes.status(), "checking the token");

    client::ClientConfig cfg;
    cfg.endpoint = endpoint->url;
    cfg.credential_helper = o_.credential_helper;
    if (cfg.credential_helper.empty() && existing.ok() && *existing && o_.endpoint.empty())
      cfg.credential_helper = (*existing)->credential_helper;
    Status saved = client::save_config(*dir, cfg);
    if (!saved.ok()) co_return Failure{std::string(saved.message())};
    Status stored = co_await client::store_token(*dir, cfg, token);
    if (!stored.ok()) co_return Failure{std::string(stored.message())};
    if (o_.json) {
      std::cout
          << nlohmann::json({{"endpoint", cfg.endpoint}, {"boxes", boxes->boxes_size()}}).dump()
          << "\n";
    } else {
      std::cout << fmt::format(
          "Logged in to {} ({} box{}). The token is in {}.\n", cfg.endpoint, boxes->boxes_size(),
          boxes->boxes_size() == 1 ? "" : "es",
          cfg.credential_helper.empty() ? (*dir / "token").string() : "the credential helper");
    }
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> logout() {
    auto dir = client::config_dir();
    if (!dir.ok()) co_return Failure{std::string(dir.status().message())};
    auto cfg = client::load_config(*dir);
    if (!cfg.ok()) co_return Failure{std::string(cfg.status().message())};
    if (!*cfg) {
      if (!o_.json) std::cout << "Not logged in.\n";
      co_return std::nullopt;
    }
    Status st = co_await client::erase_login(*dir, **cfg);
    if (!st.ok()) co_return Failure{std::string(st.message())};
    if (!o_.json) std::cout << fmt::format("Logged out of {}.\n", (*cfg)->endpoint);
    co_return std::nullopt;
  }

  // The headers helper of a client's direct HTTP config (seed §13.2): the token goes to the
  // client's pipe, never into its config file or environment.
  asio::awaitable<std::optional<Failure>> mcp_headers() {
    auto dir = client::config_dir();
    if (!dir.ok()) co_return Failure{std::string(dir.status().message())};
    auto cfg = client::load_config(*dir);
    if (!cfg.ok()) co_return Failure{std::string(cfg.status().message())};
    if (!*cfg) co_return Failure{"not logged in: run `cocoonbox login` first"};
    auto token = co_await client::load_token(*dir, **cfg);
    if (!token.ok()) co_return Failure{std::string(token.status().message())};
    std::cout << nlohmann::json({{"Authorization", "Bearer " + *token}}).dump() << "\n";
    co_return std::nullopt;
  }

  // ---- the rest: signed in ----

  asio::awaitable<std::optional<Failure>> connect() {
    auto ex = co_await asio::this_coro::executor;
    auto c = co_await client::connect_signed_in(ex);
    if (!c.ok()) co_return Failure{std::string(c.status().message())};
    conn_ = std::move(*c);
    co_return std::nullopt;
  }

  grpc::CallOptions opts() const { return conn_->call_options(std::chrono::seconds(30)); }

  std::string box_label() const { return o_.box.empty() ? std::string("main") : o_.box; }

  // Follows |op_id| to its end, with progress on stderr. Returns the final event.
  asio::awaitable<Result<pb::OperationEvent>> follow(const std::string& op_id,
                                                     const std::string& label) {
    pb::Boxes::Stub stub(conn_->channel);
    Progress progress(label);
    std::string offset;
    pb::OperationEvent last;
    // A dropped stream (an api restart) is resumed after the last event seen.
    for (int attempt = 0; attempt < 30; ++attempt) {
      pb::WatchOperationRequest req;
      req.set_operation_id(op_id);
      req.set_offset_key(offset);
      grpc::CallOptions options = conn_->call_options();
      auto reader = co_await stub.WatchOperation(req, std::move(options));
      if (!reader.ok()) co_return reader.status();
      for (;;) {
        auto ev = co_await reader->read();
        if (!ev) break;
        last = *ev;
        offset = ev->offset_key();
        progress.update(phase_name(ev->phase()), ev->detail());
      }
      Status st = co_await reader->finish();
      if (last.phase() == pb::PHASE_DONE || last.phase() == pb::PHASE_FAILED) co_return last;
      if (st.code() != Code::kUnavailable) {
        if (!st.ok()) co_return st;
        co_return internal_error("the operation stream ended before the operation did");
      }
      net::Timer t(co_await asio::this_coro::executor, net::after(std::chrono::seconds(1)));
      co_await t.async_wait();
    }
    co_return unavailable("lost the operation stream");
  }

  asio::awaitable<std::optional<Failure>> status() {
    pb::Boxes::Stub stub(conn_->channel);
    pb::BoxRef ref;
    ref.set_box(o_.box);
    auto box = co_await stub.Get(ref, opts());
    if (!box.ok()) co_return from_status(box.status(), "box " + box_label());
    if (o_.json) {
      auto j = box_json(*box);
      j["endpoint"] = conn_->endpoint.url;
      std::cout << j.dump() << "\n";
    } else {
      std::cout << fmt::format("endpoint: {}\n", conn_->endpoint.url);
      std::cout << fmt::format("box:      {} ({})\n", box->name(), box->id());
      std::cout << fmt::format("state:    {}\n", state_name(box->state()));
      std::cout << fmt::format("image:    {} ({} backend{})\n", box->image(), box->backend(),
                               box->isolated() ? "" : ", NOT isolated");
      std::cout << fmt::format("clients:  {} attached\n", box->attached_clients());
      if (!box->detail().empty()) std::cout << fmt::format("detail:   {}\n", box->detail());
    }
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> ensure(const std::string& name, bool create) {
    pb::Boxes::Stub stub(conn_->channel);
    if (create) {
      pb::BoxRef ref;
      ref.set_box(name);
      auto existing = co_await stub.Get(ref, opts());
      if (existing.ok())
        co_return Failure{fmt::format("box {} already exists ({})", name, existing->id())};
      if (existing.status().code() != Code::kNotFound)
        co_return from_status(existing.status(), "box " + name);
    }
    pb::EnsureRequest req;
    req.set_name(name);
    req.set_wait(false);
    auto box = co_await stub.Ensure(req, opts());
    if (!box.ok()) co_return from_status(box.status(), "box " + box_label());
    if (!o_.no_wait && !box->operation_id().empty()) {
      auto end = co_await follow(box->operation_id(), "box " + box->name());
      if (!end.ok()) co_return from_status(end.status(), "box " + box->name());
      pb::BoxRef ref;
      ref.set_box(box->id());
      auto now = co_await stub.Get(ref, opts());
      if (!now.ok()) co_return from_status(now.status(), "box " + box->name());
      *box = *now;
      if (end->phase() == pb::PHASE_FAILED) {
        print_box(*box, o_.json);
        co_return Failure{fmt::format("box {} did not start: {}", box->name(), end->detail())};
      }
    }
    print_box(*box, o_.json);
    co_return std::nullopt;
  }

  // Starts an operation with |start| and follows it unless --no-wait.
  asio::awaitable<std::optional<Failure>> run_operation(Result<pb::Operation> op,
                                                        const std::string& verb) {
    if (!op.ok()) co_return from_status(op.status(), "box " + box_label());
    if (o_.no_wait) {
      if (o_.json) {
        std::cout << nlohmann::json(
                         {{"operation", op->id()}, {"box_id", op->box_id()}, {"kind", op->kind()}})
                         .dump()
                  << "\n";
      } else {
        std::cout << fmt::format("{} of box {} started: operation {}\n", verb, box_label(),
                                 op->id());
      }
      co_return std::nullopt;
    }
    auto end = co_await follow(op->id(), "box " + box_label());
    if (!end.ok()) co_return from_status(end.status(), "box " + box_label());
    if (end->phase() == pb::PHASE_FAILED)
      co_return Failure{fmt::format("{} of box {} failed: {}", verb, box_label(), end->detail())};
    if (o_.json) {
      std::cout << nlohmann::json({{"operation", op->id()},
                                   {"box_id", op->box_id()},
                                   {"kind", op->kind()},
                                   {"result", "done"},
                                   {"detail", end->detail()}})
                       .dump()
                << "\n";
    } else {
      std::cout << fmt::format("box {}: {}\n", box_label(), end->detail());
    }
    co_return std::nullopt;
  }

  asio::awaitable<std::optional<Failure>> hibernate() {
    pb::Boxes::Stub stub(conn_->channel);
    pb::BoxRef ref;
    ref.set_box(o_.box);
    auto op = co_await stub.Hibernate(ref, opts());
    co_return co_await run_operation(std::move(op), "hibernate");
  }

  asio::awaitable<std::optional<Failure>> upgrade() {
    if (!o_.yes) {
      // §13.3's wording: what a user keeps and loses.
      auto ok = confirm(fmt::format(
          "Upgrade box {} to the current image? Running programs restart; files, logins and "
          "agent history are kept.",
          box_label()));
      if (!ok) co_return Failure{"not on a terminal: add --yes to upgrade", kUsage};
      if (!*ok) co_return Failure{"not upgraded"};
    }
    pb::Boxes::Stub stub(conn_->channel);
    pb::RecreateRequest req;
    req.set_box(o_.box);
    req.set_preserve_data(true);
    auto op = co_await stub.Recreate(req, opts());
    co_return co_await run_operation(std::move(op), "upgrade");
  }

  asio::awaitable<std::optional<Failure>> remove() {
    if (!o_.yes) {
      auto ok = confirm(fmt::format(
          "Delete box {} with all its files, logins and agent history? This cannot be undone.",
          o_.box));
      if (!ok) co_return Failure{"not on a terminal: add --yes to delete", kUsage};
      if (!*ok) co_return Failure{"not deleted"};
    }
    pb::Boxes::Stub stub(conn_->channel);
    pb::BoxRef ref;
    ref.set_box(o_.box);
    auto op = co_await stub.Delete(ref, opts());
    co_return co_await run_operation(std::move(op), "delete");
  }

  asio::awaitable<std::optional<Failure>> list() {
    pb::Boxes::Stub stub(conn_->channel);
    pb::ListBoxesRequest req;
    auto r = co_await stub.List(req, opts());
    if (!r.ok()) co_return from_status(r.status(), "boxes");
    if (o_.json) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& b : r->boxes()) a.push_back(box_json(b));
      std::cout << a.dump() << "\n";
      co_return std::nullopt;
    }
    if (r->boxes_size() == 0) {
      std::cout << "No boxes yet: `cocoonbox ensure` creates \"main\".\n";
      co_return std::nullopt;
    }
    std::cout << fmt::format("{:<20} {:<17} {:<12} {}\n", "NAME", "ID", "STATE", "CLIENTS");
    for (const auto& b : r->boxes()) {
      std::cout << fmt::format("{:<20} {:<17} {:<12} {}\n", b.name(), b.id(), state_name(b.state()),
                               b.attached_clients());
    }
    co_return std::nullopt;
  }

  Options o_;
  std::optional<client::Connection> conn_;
};

constexpr std::string_view kBashCompletion = R"(# bash completion for cocoonbox
_cocoonbox() {
  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "login logout status ensure hibernate upgrade boxes box save snapshots browse restore agents chat setup mcp mcp-headers completion rsh api agent --help --version" -- "$cur"))
    return
  fi
  case $cmd in
    login) COMPREPLY=($(compgen -W "--endpoint --token --credential-helper --json --help" -- "$cur")) ;;
    status|ensure|hibernate) COMPREPLY=($(compgen -W "--box --json --no-wait --help" -- "$cur")) ;;
    upgrade) COMPREPLY=($(compgen -W "--box --yes --json --no-wait --help" -- "$cur")) ;;
    boxes|logout) COMPREPLY=($(compgen -W "--json --help" -- "$cur")) ;;
    save) COMPREPLY=($(compgen -W "--box --quiesce --json --help" -- "$cur")) ;;
    snapshots|browse|agents) COMPREPLY=($(compgen -W "--box --json --help" -- "$cur")) ;;
    restore) COMPREPLY=($(compgen -W "--snapshot --at --target --box --json --help" -- "$cur")) ;;
    chat) COMPREPLY=($(compgen -W "--box --agent --new --json --help" -- "$cur")) ;;
    mcp) COMPREPLY=($(compgen -W "--box --no-wake --help" -- "$cur")) ;;
    box) if [[ $COMP_CWORD -eq 2 ]]; then COMPREPLY=($(compgen -W "create rm" -- "$cur"));
         else COMPREPLY=($(compgen -W "--json --yes --no-wait --help" -- "$cur")); fi ;;
    completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    setup) if [[ $COMP_CWORD -eq 2 ]]; then COMPREPLY=($(compgen -W "claude codex cursor" -- "$cur"));
           else COMPREPLY=($(compgen -W "--print --box --json --help" -- "$cur")); fi ;;
  esac
}
complete -F _cocoonbox cocoonbox
)";

constexpr std::string_view kZshCompletion = R"(#compdef cocoonbox
# zsh completion for cocoonbox
_cocoonbox() {
  local -a commands
  commands=(
    'login:sign in to an api with a token'
    'logout:forget the stored token'
    'status:show a box'
    'ensure:create or wake a box'
    'hibernate:freeze a box, keeping its programs'
    'upgrade:recreate a box on the current image, keeping its data'
    'boxes:list your boxes'
    'box:create or remove a box'
    'save:save the files of a box now'
    'snapshots:list the saves of a box'
    'browse:list a directory of a save'
    'restore:restore paths from a save into ~/Restored'
    'agents:list the agents in a box'
    'chat:talk to the agent in the box'
    'mcp:the MCP bridge for local coding agents (stdio)'
    'setup:register cocoonbox mcp with claude, codex or cursor'
    'mcp-headers:print the Authorization header for a direct MCP config'
    'completion:print shell completion'
  )
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    return
  fi
  case $words[2] in
    login) _arguments '--endpoint[api URL]:url:' '--token[- reads stdin]:token:(-)' '--credential-helper[command]:cmd:' '--json' ;;
    status|ensure|hibernate) _arguments '--box[box name]:name:' '--json' '--no-wait' ;;
    upgrade) _arguments '--box[box name]:name:' '--yes' '--json' '--no-wait' ;;
    save) _arguments '--box[box name]:name:' '--quiesce[let turns end, copy agent.db]' '--json' ;;
    snapshots|browse|agents) _arguments '--box[box name]:name:' '--json' ;;
    restore) _arguments '--snapshot[snapshot id]:id:' '--at[time]:time:' '--target[folder name]:name:' '--box[box name]:name:' '--json' ;;
    chat) _arguments '--box[box name]:name:' '--agent[agent id]:id:' '--new' '--json' ;;
    mcp) _arguments '--box[box name]:name:' '--no-wake' ;;
    box) (( CURRENT == 3 )) && _values 'subcommand' create rm || _arguments '--json' '--yes' '--no-wait' ;;
    completion) _values 'shell' bash zsh ;;
    setup) (( CURRENT == 3 )) && _values 'client' claude codex cursor || _arguments '--print' '--box[box name]:name:' '--json' ;;
    *) _arguments '--json' ;;
  esac
}
_cocoonbox "$@"
)";

int run_setup(const Options& o) {
  auto plan = plan_setup(o.client, o.box, self_command());
  if (!plan.ok()) {
    std::cerr << "cocoonbox setup: " << plan.status().message() << "\n";
    return plan.status().code() == Code::kInvalidArgument ? kUsage : kError;
  }
  if (o.print) {
    if (o.json) {
      std::cout << nlohmann::json({{"client", plan->client},
                                   {"file", plan->file.string()},
                                   {"entry", plan->snippet}})
                       .dump()
                << "\n";
    } else {
      std::cout << fmt::format("# {} reads MCP servers from {}; add:\n{}", plan->client,
                               plan->file.string(), plan->snippet);
    }
    return kOk;
  }
  if (Status st = apply_setup(*plan); !st.ok()) {
    std::cerr << "cocoonbox setup: " << st.message() << "\n";
    return kError;
  }
  if (o.json) {
    std::cout << nlohmann::json({{"client", plan->client},
                                 {"file", plan->file.string()},
                                 {"replaced", plan->replaced}})
                     .dump()
              << "\n";
  } else {
    std::cout << fmt::format("{} the cocoonbox MCP server in {}. Restart {} to pick it up.\n",
                             plan->replaced ? "Updated" : "Added", plan->file.string(),
                             plan->client);
  }
  return kOk;
}

}  // namespace

int run(std::span<char* const> args) {
  Options o;
  CLI::App app("cocoonbox: your own computer in the cloud, with an agent living in it.",
               "cocoonbox");
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  cocoonbox login --endpoint http://127.0.0.1:7443 --token - < admin.token\n"
      "  cocoonbox ensure                 # create or wake the box \"main\"\n"
      "  cocoonbox status --json\n"
      "  cocoonbox box create work && cocoonbox ensure --box work\n"
      "  cocoonbox hibernate --box work\n"
      "  source <(cocoonbox completion bash)\n\n"
      "Exit codes: 0 ok, 1 error, 2 usage.");

  auto* login = app.add_subcommand("login", "Sign in to an api with a token, checked with the api");
  login->add_option("--endpoint", o.endpoint,
                    "api URL: https://HOST[:PORT], or http://127.0.0.1:PORT for a local api "
                    "(default: the last one, else http://127.0.0.1:7443)");
  login->add_option("--token", o.token_from,
                    "\"-\" reads the token from stdin; without it, a hidden prompt asks on a "
                    "terminal (the token never goes in argv)");
  login->add_option("--credential-helper", o.credential_helper,
                    "keep the token with this command (`CMD get|store|erase`) instead of a 0600 "
                    "file");
  login->add_flag("--json", o.json, "print the result as JSON");
  login->footer(
      "Examples:\n  cocoonbox api token issue alice | cocoonbox login --token -\n"
      "  cocoonbox login --endpoint https://box.example.com");

  auto* logout = app.add_subcommand("logout", "Forget the stored token and endpoint");
  logout->add_flag("--json", o.json, "no output on success");

  auto add_box_flags = [&o](CLI::App* c, bool wait) {
    c->add_option("--box", o.box, "box name or id (default: main)");
    c->add_flag("--json", o.json, "print the result as JSON");
    if (wait) c->add_flag("--no-wait", o.no_wait, "return once started; do not follow progress");
  };
  auto* status = app.add_subcommand("status", "Show a box: state, image, attached clients");
  add_box_flags(status, false);
  status->footer("Example:\n  cocoonbox status --box work --json");
  auto* ensure = app.add_subcommand("ensure", "Create the box if absent, wake it if hibernated");
  add_box_flags(ensure, true);
  ensure->footer("Examples:\n  cocoonbox ensure\n  cocoonbox ensure --box work --json");
  auto* hibernate = app.add_subcommand("hibernate", "Freeze the box: programs and memory are kept");
  add_box_flags(hibernate, true);
  auto* upgrade = app.add_subcommand(
      "upgrade",
      "Recreate the box on the current image. Running programs restart; files, logins and "
      "agent history are kept");
  add_box_flags(upgrade, true);
  upgrade->add_flag("--yes,-y", o.yes, "do not ask first");
  auto* boxes = app.add_subcommand("boxes", "List your boxes");
  boxes->add_flag("--json", o.json, "print a JSON array");
  auto* box = app.add_subcommand("box", "Create or remove a box");
  box->require_subcommand(1);
  auto* create = box->add_subcommand("create", "Create and start a box NAME");
  create->add_option("NAME", o.box, "[a-z0-9][a-z0-9-]{0,30}")->required();
  create->add_flag("--json", o.json, "print the result as JSON");
  create->add_flag("--no-wait", o.no_wait, "return once started");
  auto* rm = box->add_subcommand("rm", "Delete a box NAME with all its data");
  rm->add_option("NAME", o.box, "box name or id")->required();
  rm->add_flag("--yes,-y", o.yes, "do not ask first");
  rm->add_flag("--json", o.json, "print the result as JSON");
  rm->add_flag("--no-wait", o.no_wait, "return once started");
  auto* completion = app.add_subcommand("completion", "Print shell completion: bash or zsh");
  completion->add_option("SHELL", o.shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->footer("Example:\n  source <(cocoonbox completion bash)");

  auto* setup = app.add_subcommand(
      "setup", "Register `cocoonbox mcp` with a local coding agent (claude, codex or cursor)");
  setup->add_option("CLIENT", o.client, "claude, codex or cursor")
      ->required()
      ->check(CLI::IsMember({"claude", "codex", "cursor"}));
  setup->add_flag("--print", o.print, "print the entry and the file it belongs in; change nothing");
  setup->add_option("--box", o.box, "the box the client's tools use by default (default: main)");
  setup->add_flag("--json", o.json, "print what was done as JSON");
  setup->footer(
      "The entry runs `cocoonbox mcp`: no URL and no token goes into the client's files.\n"
      "Examples:\n  cocoonbox setup claude\n  cocoonbox setup codex --box work\n"
      "  cocoonbox setup cursor --print");
  app.add_subcommand("mcp-headers",
                     "Print {\"Authorization\": \"Bearer ...\"} for a client's headersHelper")
      ->footer(
          "For clients configured with the api's MCP URL directly, e.g. Claude Code's\n"
          "\"headersHelper\": \"cocoonbox mcp-headers\". Prefer `cocoonbox setup`.");

  StateOptions state_options;
  add_state_commands(app, state_options);
  ChatOptions chat_options;
  add_chat_commands(app, chat_options);

  std::vector<std::string> argv = {"cocoonbox"};
  for (char* a : args) argv.emplace_back(a);
  std::vector<const char*> cargv;
  for (auto& a : argv) cargv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  for (auto* sub : app.get_subcommands()) {
    o.command = sub->get_name();
    for (auto* leaf : sub->get_subcommands()) o.command += " " + leaf->get_name();
  }
  if (o.command == "completion") {
    std::cout << (o.shell == "bash" ? kBashCompletion : kZshCompletion);
    return kOk;
  }
  if (o.command == "setup") return run_setup(o);
  if (is_state_command(o.command)) return run_state_command(o.command, state_options);
  if (is_chat_command(o.command)) return run_chat_command(o.command, chat_options);
  // The CLI talks to people: its own logs only when asked (COCOONBOX_LOG_LEVEL).
  if (std::getenv("COCOONBOX_LOG_LEVEL") == nullptr) log::set_min_level(log::Level::kError);

  asio::io_context io;
  int rc = kError;
  Cli cli(std::move(o));
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { rc = co_await cli.run(); }, asio::detached);
  io.run();
  return rc;
}

}  // namespace cb::cli
