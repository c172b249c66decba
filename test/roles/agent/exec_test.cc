// Session.Exec: plan_exec() and resolve_exec_user() as plain functions, then a real agent on a
// unix socket running real processes, called through our gRPC client the way the edge does.

#include "agent_harness.h"
#include "cocoonbox/agent/v1/session.cbgrpc.h"
#include "grpc/client.h"
#include "net/signal.h"
#include "roles/agent/agent_server.h"
#include "roles/agent/exec_service.h"
#include "test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace cb::agent {
namespace {

namespace v1 = ::cocoonbox::agent::v1;
using namespace std::chrono_literals;
using test::call_options_with;
using test::one;
using test::Setup;
using test::TempDir;
using test::with_agent;
using test::write_file;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

ExecUser plain_user() {
  ExecUser u;
  u.account.name = "dev";
  u.account.uid = 1000;
  u.account.gid = 1000;
  u.account.home = "/home/dev";
  u.account.shell = "/bin/bash";
  return u;
}

v1::ExecStart command_start(std::string_view command) {
  v1::ExecStart start;
  start.set_command(std::string(command));
  return start;
}

v1::ExecStart argv_start(const std::vector<std::string>& args) {
  v1::ExecStart start;
  for (const auto& a : args) start.mutable_argv()->add_args(a);
  return start;
}

// argv from space-separated |words|: for coroutine bodies, where gcc 12 mishandles braced
// lists of string literals.
v1::ExecStart argv_words(std::string_view words) {
  v1::ExecStart start;
  auto* args = start.mutable_argv();
  while (!words.empty()) {
    const size_t space = words.find(' ');
    args->add_args(std::string(words.substr(0, space)));
    if (space == std::string_view::npos) break;
    words.remove_prefix(space + 1);
  }
  return start;
}

// ---- plain functions ----

TEST_CASE("plan_exec: argv, command and shell become the right argv", "[agent][unit]") {
  ExecConfig config;
  const ExecUser user = plain_user();

  auto argv = plan_exec(argv_start({"ls", "-l"}), user, config);
  REQUIRE(argv.status() == ok_status());
  CHECK(argv->spawn.argv == std::vector<std::string>{"ls", "-l"});
  CHECK(argv->spawn.new_session);
  CHECK_FALSE(argv->spawn.pty);
  CHECK_FALSE(argv->spawn.user);

  auto command = plan_exec(command_start("echo hi | wc -c"), user, config);
  REQUIRE(command.status() == ok_status());
  CHECK(command->spawn.argv == std::vector<std::string>{"/bin/bash", "-c", "echo hi | wc -c"});

  v1::ExecStart login = command_start("echo hi");
  login.set_login_shell(true);
  auto login_plan = plan_exec(login, user, config);
  REQUIRE(login_plan.status() == ok_status());
  CHECK(login_plan->spawn.argv == std::vector<std::string>{"/bin/bash", "-l", "-c", "echo hi"});

  v1::ExecStart login_argv = argv_start({"printenv", "PATH"});
  login_argv.set_login_shell(true);
  auto login_argv_plan = plan_exec(login_argv, user, config);
  REQUIRE(login_argv_plan.status() == ok_status());
  CHECK(login_argv_plan->spawn.argv == std::vector<std::string>{"/bin/bash", "-l", "-c",
                                                                "exec \"$@\"", "/bin/bash",
                                                                "printenv", "PATH"});

  v1::ExecStart shell;
  shell.mutable_shell();
  auto shell_plan = plan_exec(shell, user, config);
  REQUIRE(shell_plan.status() == ok_status());
  CHECK(shell_plan->spawn.argv == std::vector<std::string>{"/bin/bash"});

  ExecUser no_shell = user;
  no_shell.account.shell.clear();
  auto sh = plan_exec(command_start("true"), no_shell, config);
  REQUIRE(sh.status() == ok_status());
  CHECK(sh->spawn.argv.front() == "/bin/sh");

  ExecUser root = user;
  root.switch_user = true;
  auto switched = plan_exec(command_start("true"), root, config);
  REQUIRE(switched.status() == ok_status());
  CHECK(switched->spawn.user == std::optional<std::string>("dev"));
}

TEST_CASE("plan_exec: the environment is the defaults plus the caller's, nothing else",
          "[agent][unit]") {
  ExecConfig config;
  v1::ExecStart start = command_start("env");
  (*start.mutable_env())["FOO"] = "bar";
  (*start.mutable_env())["LANG"] = "de_DE.UTF-8";
  auto plan = plan_exec(start, plain_user(), config);
  REQUIRE(plan.status() == ok_status());
  const auto& env = plan->spawn.env;
  CHECK_FALSE(plan->spawn.inherit_env);
  CHECK(contains(env, "HOME=/home/dev"));
  CHECK(contains(env, "USER=dev"));
  CHECK(contains(env, "LOGNAME=dev"));
  CHECK(contains(env, "SHELL=/bin/bash"));
  CHECK(contains(env, "PATH=" + std::string(kExecPath)));
  CHECK(contains(env, "LANG=de_DE.UTF-8"));
  CHECK(contains(env, "FOO=bar"));
  CHECK(env.size() == 7);
  CHECK_FALSE(std::any_of(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("TERM=", 0) == 0; }));

  v1::ExecStart pty = command_start("true");
  pty.mutable_pty();
  (*pty.mutable_env())["TERM"] = "vt100";
  auto pty_plan = plan_exec(pty, plain_user(), config);
  REQUIRE(pty_plan.status() == ok_status());
  CHECK(contains(pty_plan->spawn.env, "TERM=xterm-256color"));
  CHECK_FALSE(contains(pty_plan->spawn.env, "TERM=vt100"));
  REQUIRE(pty_plan->spawn.pty);
  CHECK(pty_plan->spawn.pty->rows == 24);
  CHECK(pty_plan->spawn.pty->cols == 80);
  CHECK(pty_plan->spawn.pty->term == "xterm-256color");
}

TEST_CASE("plan_exec: cwd defaults to the workspace; a relative one is refused", "[agent][unit]") {
  ExecConfig config;
  config.workspace = "/srv/ws";
  auto defaulted = plan_exec(command_start("pwd"), plain_user(), config);
  REQUIRE(defaulted.status() == ok_status());
  CHECK(defaulted->spawn.cwd == std::filesystem::path("/srv/ws"));
  CHECK_FALSE(defaulted->cwd_explicit);

  v1::ExecStart given = command_start("pwd");
  given.set_cwd("/tmp");
  auto explicit_cwd = plan_exec(given, plain_user(), config);
  REQUIRE(explicit_cwd.status() == ok_status());
  CHECK(explicit_cwd->spawn.cwd == std::filesystem::path("/tmp"));
  CHECK(explicit_cwd->cwd_explicit);
}

TEST_CASE("plan_exec: bad start frames are INVALID_ARGUMENT naming the field", "[agent][unit]") {
  ExecConfig config;
  struct Bad {
    std::string name;
    v1::ExecStart start;
    std::string field;
  };
  std::vector<Bad> bad;
  bad.push_back({"no program", v1::ExecStart(), "one of argv, command or shell"});
  {
    v1::ExecStart s;
    s.mutable_argv();
    bad.push_back({"empty argv", s, "start.argv"});
  }
  bad.push_back({"empty argv[0]", argv_start({""}), "start.argv"});
  bad.push_back({"NUL in argv", argv_start({"ls", std::string("a\0b", 3)}), "start.argv.args[1]"});
  {
    v1::ExecStart s;
    s.set_command("");
    bad.push_back({"empty command", s, "start.command"});
  }
  {
    v1::ExecStart s = command_start("pwd");
    s.set_cwd("relative/dir");
    bad.push_back({"relative cwd", s, "start.cwd"});
  }
  {
    v1::ExecStart s = command_start("env");
    (*s.mutable_env())["A=B"] = "x";
    bad.push_back({"env name with =", s, "start.env"});
  }
  {
    v1::ExecStart s = command_start("env");
    (*s.mutable_env())[""] = "x";
    bad.push_back({"empty env name", s, "start.env"});
  }
  {
    v1::ExecStart s = command_start("true");
    s.mutable_pty()->set_rows(70000);
    bad.push_back({"pty rows", s, "start.pty.rows"});
  }
  {
    v1::ExecStart s = command_start("true");
    s.mutable_pty()->set_term("xterm; rm -rf /");
    bad.push_back({"pty term", s, "start.pty.term"});
  }
  for (const Bad& b : bad) {
    INFO(b.name);
    auto plan = plan_exec(b.start, plain_user(), config);
    CHECK(plan.status().code() == Code::kInvalidArgument);
    CHECK_THAT(std::string(plan.status().message()), Catch::Contains(b.field));
  }
}

TEST_CASE("exec_signal_number: the five signals; anything else is refused", "[agent][unit]") {
  CHECK(*exec_signal_number(v1::EXEC_SIGNAL_INT) == SIGINT);
  CHECK(*exec_signal_number(v1::EXEC_SIGNAL_TERM) == SIGTERM);
  CHECK(*exec_signal_number(v1::EXEC_SIGNAL_HUP) == SIGHUP);
  CHECK(*exec_signal_number(v1::EXEC_SIGNAL_KILL) == SIGKILL);
  CHECK(*exec_signal_number(v1::EXEC_SIGNAL_QUIT) == SIGQUIT);
  CHECK(exec_signal_number(v1::EXEC_SIGNAL_UNSPECIFIED).status().code() == Code::kInvalidArgument);
  CHECK(exec_signal_number(static_cast<v1::ExecSignal>(99)).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("resolve_exec_user: the desktop user as root, else the agent's own account",
          "[agent][unit]") {
  auto own = resolve_exec_user("cb-no-such-user", ::geteuid());
  REQUIRE(own.status() == ok_status());
  CHECK_FALSE(own->switch_user);
  CHECK(own->account.uid == ::geteuid());

  auto as_root = resolve_exec_user("nobody", 0);
  REQUIRE(as_root.status() == ok_status());
  CHECK(as_root->switch_user);
  CHECK(as_root->account.name == "nobody");

  auto not_root = resolve_exec_user("nobody", 0 == ::geteuid() ? 4242 : ::geteuid());
  REQUIRE(not_root.status() == ok_status());
  CHECK_FALSE(not_root->switch_user);

  auto unknown_uid = resolve_exec_user("", 4242);
  REQUIRE(unknown_uid.status() == ok_status());
  if (!proc::lookup_uid(4242).ok()) {
    CHECK(unknown_uid->account.name == "uid4242");
    CHECK(unknown_uid->account.home == "/");
  }
}

// ---- a real agent ----

using ExecStream = grpc::ClientReaderWriter<v1::ExecRequest, v1::ExecResponse>;
constexpr size_t kStdinChunk = 64 * 1024;

// What came back on one Exec call. A plain value: it outlives the test's io_context.
struct ExecResult {
  std::optional<v1::ExecStarted> started;
  std::string out;
  std::string err;
  std::optional<v1::ExecExit> exit;
  uint64_t credited = 0;
  uint64_t sent = 0;
  int frames_after_exit = 0;
  int extra_started = 0;
  int empty_frames = 0;
  bool ended = false;
  Status status = unavailable("not ended");
};

// The client side of one Exec call: sends frames, records every response. Holds a timer:
// destroy it before the io_context (keep the ExecResult).
class ExecSession : public ExecResult {
 public:
  ExecSession(ExecStream stream, const net::Executor& executor)
      : stream_(std::move(stream)), changed_(executor) {}

  asio::awaitable<Status> send(const v1::ExecRequest& req) { return stream_.write(req); }

  asio::awaitable<Status> send_signal(v1::ExecSignal signal) {
    v1::ExecRequest req;
    req.set_signal(signal);
    co_return co_await stream_.write(req);
  }

  asio::awaitable<Status> close_stdin() {
    v1::ExecRequest req;
    req.mutable_stdin_close();
    co_return co_await stream_.write(req);
  }

  asio::awaitable<Status> writes_done() { return stream_.writes_done(); }

  // Sends |data| (which must outlive the call) as stdin frames of |chunk| bytes, keeping at
  // most started.stdin_window bytes uncredited unless |ignore_credit|.
  asio::awaitable<Status> send_stdin(std::string_view data, bool ignore_credit = false,
                                     size_t chunk = kStdinChunk) {
    size_t off = 0;
    while (off < data.size()) {
      const size_t n = std::min(chunk, data.size() - off);
      if (!ignore_credit) {
        while (!ended && (!started || sent - credited + n > started->stdin_window())) {
          Status w = co_await changed_.wait();
          if (!w.ok()) co_return w;
        }
        if (ended) co_return unavailable("the call ended while stdin was left");
      }
      v1::ExecRequest req;
      req.set_stdin_data(std::string(data.substr(off, n)));
      Status w = co_await stream_.write(req);
      if (!w.ok()) co_return w;
      sent += n;
      off += n;
      changed_.notify();
    }
    co_return ok_status();
  }

  // Reads one response; false at the end of the call (then call receive_all() for the status).
  asio::awaitable<bool> read_one() {
    std::optional<v1::ExecResponse> r = co_await stream_.read();
    if (!r) co_return false;
    record(*r);
    co_return true;
  }

  // Reads responses until the call ends; returns its status.
  asio::awaitable<Status> receive_all() {
    for (;;) {
      std::optional<v1::ExecResponse> r = co_await stream_.read();
      if (!r) break;
      record(*r);
    }
    status = co_await stream_.finish();
    ended = true;
    changed_.notify();
    co_return status;
  }

  // Waits until |done()| holds, re-checked after every response, or the call ended, or 10 s.
  template <typename Done>
  asio::awaitable<bool> wait_for(Done done) {
    const auto deadline = net::after(10s);
    while (!done() && !ended && std::chrono::steady_clock::now() < deadline) {
      Status w = co_await changed_.wait_until(deadline);
      (void)w;
    }
    co_return done();
  }

  void cancel() { stream_.call().cancel(); }

  void record(const v1::ExecResponse& r) {
    if (exit) ++frames_after_exit;
    switch (r.frame_case()) {
      case v1::ExecResponse::kStarted:
        if (started) ++extra_started;
        started = r.started();
        break;
      case v1::ExecResponse::kStdoutData:
        out += r.stdout_data();
        break;
      case v1::ExecResponse::kStderrData:
        err += r.stderr_data();
        break;
      case v1::ExecResponse::kStdinCredit:
        credited += r.stdin_credit().bytes();
        break;
      case v1::ExecResponse::kExit:
        exit = r.exit();
        break;
      case v1::ExecResponse::FRAME_NOT_SET:
        ++empty_frames;
        break;
    }
    changed_.notify();
  }

 private:
  ExecStream stream_;
  net::Signal changed_;
};

std::shared_ptr<grpc::Channel> channel_to(const Agent& agent, const net::Executor& executor) {
  grpc::ChannelOptions options;
  options.dial.unix_path = agent.socket_path();
  return grpc::Channel::create(executor, std::move(options));
}

// Opens an Exec call and sends |start|; |principal| (if not empty) goes as
// x-cocoonbox-principal.
asio::awaitable<Result<std::unique_ptr<ExecSession>>> open_exec(
    grpc::Channel& channel, const std::string& credential, const v1::ExecStart& start,
    std::chrono::steady_clock::duration timeout = 20s, std::string principal = std::string()) {
  grpc::CallOptions options = call_options_with(one(credential), timeout);
  if (!principal.empty())
    options.metadata.push_back(http::Header{std::string(kPrincipalHeader), principal});
  auto stream = co_await grpc::streaming_call<v1::ExecRequest, v1::ExecResponse>(
      channel, std::string("/cocoonbox.agent.v1.Session/Exec"), std::move(options));
  if (!stream.ok()) co_return stream.status();
  auto session = std::make_unique<ExecSession>(std::move(*stream), channel.executor());
  v1::ExecRequest req;
  *req.mutable_start() = start;
  Status w = co_await session->send(req);
  if (!w.ok()) co_return w;
  co_return session;
}

// Runs |start| to the end: sends |input| (within the credit window), then stdin_close, while
// reading everything; returns what came back.
asio::awaitable<ExecResult> run_exec(grpc::Channel& channel, const std::string& credential,
                                     const v1::ExecStart& start,
                                     const std::string& input = std::string()) {
  auto opened = co_await open_exec(channel, credential, start);
  REQUIRE(opened.status() == ok_status());
  ExecSession& session = **opened;
  auto send_all = [&]() -> asio::awaitable<Status> {
    Status st = co_await session.send_stdin(input);
    if (st.ok()) st = co_await session.close_stdin();
    co_return st;
  };
  using namespace asio::experimental::awaitable_operators;
  auto results = co_await (send_all() && session.receive_all());
  (void)results;
  ExecResult result = session;
  co_return result;
}

// An agent whose Exec runs as the test's own account (no desktop user), in a workspace
// under the test's directory, with a short kill grace.
AgentConfig exec_config(Setup& s) {
  AgentConfig c = s.config();
  c.exec.desktop_user = "cb-no-such-user";
  c.exec.workspace = s.dir / "workspace";
  c.exec.kill_grace = 300ms;
  std::filesystem::create_directories(c.exec.workspace);
  return c;
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  net::Timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait();
}

// True once |pid| no longer runs (gone, or a zombie nobody reaped yet).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

asio::awaitable<bool> eventually_gone(pid_t pid) {
  const auto deadline = net::after(10s);
  while (!process_gone(pid) && std::chrono::steady_clock::now() < deadline)
    co_await sleep_for(20ms);
  co_return process_gone(pid);
}

// Bytes |pid| has written so far (/proc/PID/io wchar), or -1.
int64_t bytes_written_by(pid_t pid) {
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return -1;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

TEST_CASE("Exec: exit codes pass through and stderr stays apart from stdout",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  std::optional<ExecResult> script, plain_false;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    script = co_await run_exec(
        *channel, s.credential(),
        command_start("uname -a; echo to-stderr >&2; false; echo \"false=$?\"; exit 42"));
    plain_false = co_await run_exec(*channel, s.credential(), argv_words("false"));
    channel->close();
  });
  REQUIRE(script->status == ok_status());
  REQUIRE(script->started);
  CHECK(script->started->pid() > 0);
  CHECK(script->started->terminfo() == v1::TERMINFO_STATUS_UNSPECIFIED);
  CHECK(script->started->cwd() == s.dir / "workspace");
  REQUIRE(script->exit);
  CHECK(script->exit->status_case() == v1::ExecExit::kCode);
  CHECK(script->exit->code() == 42);
  CHECK_THAT(script->out, Catch::StartsWith("Linux "));
  CHECK_THAT(script->out, Catch::EndsWith("\nfalse=1\n"));
  CHECK(script->err == "to-stderr\n");
  CHECK(script->frames_after_exit == 0);
  CHECK(script->extra_started == 0);

  REQUIRE(plain_false->status == ok_status());
  REQUIRE(plain_false->exit);
  CHECK(plain_false->exit->code() == 1);
  CHECK(plain_false->out.empty());
}

TEST_CASE("Exec: cwd, user and environment; the agent's own environment stays out",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  ::setenv("CB_AGENT_TEST_SECRET", "hunter2", 1);
  std::filesystem::create_directories(s.dir.path() / "elsewhere");
  std::optional<ExecResult> defaulted, elsewhere;
  AgentConfig config = exec_config(s);
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::ExecStart start = command_start("pwd; env");
    (*start.mutable_env())["CB_GIVEN"] = "given value";
    defaulted = co_await run_exec(*channel, s.credential(), start);
    v1::ExecStart other = argv_words("pwd");
    other.set_cwd(s.dir / "elsewhere");
    elsewhere = co_await run_exec(*channel, s.credential(), other);
    channel->close();
  });
  ::unsetenv("CB_AGENT_TEST_SECRET");
  auto own = proc::lookup_uid(::geteuid());
  REQUIRE(defaulted->status == ok_status());
  REQUIRE(defaulted->exit);
  CHECK(defaulted->exit->code() == 0);
  CHECK_THAT(defaulted->out, Catch::StartsWith(config.exec.workspace + "\n"));
  CHECK_THAT(defaulted->out, Catch::Contains("\nCB_GIVEN=given value\n"));
  CHECK_THAT(defaulted->out, Catch::Contains("\nLANG=C.UTF-8\n"));
  CHECK_THAT(defaulted->out, Catch::Contains("\nPATH=" + std::string(kExecPath) + "\n"));
  CHECK_FALSE(defaulted->out.find("hunter2") != std::string::npos);
  if (own.ok()) {
    CHECK(defaulted->started->user() == own->name);
    CHECK_THAT(defaulted->out, Catch::Contains("\nUSER=" + own->name + "\n"));
    CHECK_THAT(defaulted->out, Catch::Contains("\nHOME=" + own->home + "\n"));
  }
  REQUIRE(elsewhere->status == ok_status());
  CHECK(elsewhere->out == s.dir / "elsewhere" + "\n");
  CHECK(elsewhere->started->cwd() == s.dir / "elsewhere");
}

TEST_CASE("Exec: as root it runs as the desktop user", "[agent][exec][integration]") {
  if (::geteuid() != 0 || !proc::lookup_user("nobody").ok()) {
    WARN("skipped: needs root and a 'nobody' account");
    return;
  }
  Setup s;
  s.deliver();
  AgentConfig config = exec_config(s);
  config.exec.desktop_user = "nobody";
  config.exec.workspace = s.dir / "no-such-workspace";
  std::optional<ExecResult> who;
  with_agent(config, [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    who = co_await run_exec(*channel, s.credential(), argv_words("id -un"));
    channel->close();
  });
  REQUIRE(who->status == ok_status());
  CHECK(who->out == "nobody\n");
  CHECK(who->started->user() == "nobody");
  // No workspace, and nobody's home does not exist: the root directory.
  CHECK(who->started->cwd() == "/");
}

TEST_CASE("Exec: MiBs of random bytes go through cat both ways unchanged, within the credit",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  const std::string data = random_bytes(9u << 20, 42);  // more than two stdin windows
  std::optional<ExecResult> cat;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    cat = co_await run_exec(*channel, s.credential(), argv_words("cat"), data);
    channel->close();
  });
  REQUIRE(cat->status == ok_status());
  REQUIRE(cat->started);
  CHECK(cat->started->stdin_window() == ExecConfig().stdin_window);
  REQUIRE(cat->exit);
  CHECK(cat->exit->code() == 0);
  CHECK(cat->out.size() == data.size());
  CHECK(cat->out == data);
  CHECK(cat->credited == data.size());
  CHECK(cat->err.empty());
}

TEST_CASE("Exec: stdin_close and the end of the request stream both end stdin",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  std::optional<ExecResult> closed;
  std::optional<ExecResult> half_closed;
  Status half_close_sent;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    closed = co_await run_exec(*channel, s.credential(), command_start("cat; echo after-eof"),
                               std::string("abc"));
    auto opened = co_await open_exec(*channel, s.credential(), command_start("wc -c"));
    REQUIRE(opened.status() == ok_status());
    ExecSession& session = **opened;
    auto send = [&]() -> asio::awaitable<Status> {
      Status st = co_await session.send_stdin(std::string_view("12345"));
      if (st.ok()) st = co_await session.writes_done();
      co_return st;
    };
    using namespace asio::experimental::awaitable_operators;
    auto results = co_await (send() && session.receive_all());
    half_close_sent = std::get<0>(results);
    half_closed = static_cast<ExecResult&>(**opened);
    channel->close();
  });
  REQUIRE(closed->status == ok_status());
  CHECK(closed->out == "abcafter-eof\n");
  CHECK(closed->exit->code() == 0);
  CHECK(half_close_sent == ok_status());
  REQUIRE(half_closed->status == ok_status());
  CHECK(half_closed->out == "5\n");
}

TEST_CASE("Exec: stdin the process never reads is dropped and credited, not fatal",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  const std::string data = random_bytes(1u << 20, 7);
  std::optional<ExecResult> head;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    head = co_await run_exec(*channel, s.credential(), argv_words("head -c 10"), data);
    channel->close();
  });
  REQUIRE(head->status == ok_status());
  CHECK(head->exit->code() == 0);
  CHECK(head->out == data.substr(0, 10));
}

TEST_CASE("Exec: signal frames reach the process group", "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  std::optional<ExecResult> trapped, killed, terminated;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    using namespace asio::experimental::awaitable_operators;

    // A shell that traps INT, waiting on a foreground sleep: INT kills the sleep (same group)
    // and the trap runs.
    auto opened = co_await open_exec(
        *channel, s.credential(),
        command_start("trap 'echo got-int; exit 9' INT; echo ready; sleep 1000; echo no"));
    REQUIRE(opened.status() == ok_status());
    ExecSession& trap = **opened;
    auto interrupt = [&]() -> asio::awaitable<Status> {
      bool ready = co_await trap.wait_for([&] { return trap.out == "ready\n"; });
      if (!ready) co_return internal_error("never ready: " + trap.out);
      co_return co_await trap.send_signal(v1::EXEC_SIGNAL_INT);
    };
    auto r1 = co_await (interrupt() && trap.receive_all());
    CHECK(std::get<0>(r1) == ok_status());
    trapped = static_cast<ExecResult&>(**opened);

    // A bare program killed by INT and by TERM: the exit frame names the signal.
    for (auto sig : {v1::EXEC_SIGNAL_INT, v1::EXEC_SIGNAL_TERM}) {
      auto o = co_await open_exec(*channel, s.credential(), argv_words("sleep 1000"));
      REQUIRE(o.status() == ok_status());
      ExecSession& sleeper = **o;
      auto send_sig = [&]() -> asio::awaitable<Status> {
        bool up = co_await sleeper.wait_for([&] { return sleeper.started.has_value(); });
        if (!up) co_return internal_error("never started");
        co_return co_await sleeper.send_signal(sig);
      };
      auto r = co_await (send_sig() && sleeper.receive_all());
      (void)r;
      if (sig == v1::EXEC_SIGNAL_INT) {
        killed = static_cast<ExecResult&>(**o);
      } else {
        terminated = static_cast<ExecResult&>(**o);
      }
    }
    channel->close();
  });
  REQUIRE(trapped->status == ok_status());
  CHECK(trapped->out == "ready\ngot-int\n");
  REQUIRE(trapped->exit);
  CHECK(trapped->exit->code() == 9);

  REQUIRE(killed->status == ok_status());
  REQUIRE(killed->exit);
  CHECK(killed->exit->status_case() == v1::ExecExit::kSignal);
  CHECK(killed->exit->signal() == SIGINT);
  CHECK(killed->exit->signal_name() == "INT");

  REQUIRE(terminated->status == ok_status());
  REQUIRE(terminated->exit);
  CHECK(terminated->exit->signal() == SIGTERM);
  CHECK(terminated->exit->signal_name() == "TERM");
}

TEST_CASE("Exec: under a pty the process has a terminal, TERM, and follows window changes",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  std::optional<ExecResult> tty, resized, eof;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::ExecStart start = command_start(
        "test -t 0 && test -t 1 && test -t 2 && echo tty-yes; echo \"term=$TERM\"; "
        "stty size; echo to-stderr >&2");
    start.mutable_pty()->set_rows(33);
    start.mutable_pty()->set_cols(111);
    tty = co_await run_exec(*channel, s.credential(), start);

    // A window change before the next stdin frame is applied before the process reads it.
    v1::ExecStart wait_then_size = command_start("echo ready; read line; stty size");
    wait_then_size.mutable_pty()->set_rows(33);
    wait_then_size.mutable_pty()->set_cols(111);
    auto opened = co_await open_exec(*channel, s.credential(), wait_then_size);
    REQUIRE(opened.status() == ok_status());
    ExecSession& session = **opened;
    auto drive = [&]() -> asio::awaitable<Status> {
      bool ready =
          co_await session.wait_for([&] { return session.out.find("ready") != std::string::npos; });
      if (!ready) co_return internal_error("never ready: " + session.out);
      v1::ExecRequest change;
      change.mutable_window_change()->set_rows(44);
      change.mutable_window_change()->set_cols(132);
      CO_RETURN_IF_ERROR(co_await session.send(change));
      co_return co_await session.send_stdin(std::string_view("go\n"));
    };
    using namespace asio::experimental::awaitable_operators;
    auto r = co_await (drive() && session.receive_all());
    CHECK(std::get<0>(r) == ok_status());
    resized = static_cast<ExecResult&>(**opened);

    // stdin_close under a pty types the end-of-file character.
    v1::ExecStart cat = argv_words("cat");
    cat.mutable_pty();
    eof = co_await run_exec(*channel, s.credential(), cat, std::string("typed line\n"));
    channel->close();
  });
  REQUIRE(tty->status == ok_status());
  CHECK(tty->started->terminfo() == v1::TERMINFO_STATUS_PRESENT);
  CHECK_THAT(tty->out, Catch::Contains("tty-yes\r\n"));
  CHECK_THAT(tty->out, Catch::Contains("term=xterm-256color\r\n"));
  CHECK_THAT(tty->out, Catch::Contains("33 111\r\n"));
  CHECK_THAT(tty->out, Catch::Contains("to-stderr"));  // one stream under a pty
  CHECK(tty->err.empty());
  CHECK(tty->exit->code() == 0);

  REQUIRE(resized->status == ok_status());
  CHECK_THAT(resized->out, Catch::Contains("44 132\r\n"));

  REQUIRE(eof->status == ok_status());
  CHECK(eof->exit->code() == 0);
  CHECK_THAT(eof->out, Catch::Contains("typed line"));
}

TEST_CASE("Exec: an unknown terminal type is installed from the client's terminfo once",
          "[agent][exec][integration]") {
  if (std::system("infocmp -x xterm >/dev/null 2>&1") != 0) {
    WARN("skipped: no infocmp/terminfo here");
    return;
  }
  Setup s;
  s.deliver();
  const std::string home = s.dir / "home";
  std::filesystem::create_directories(home);
  // What the CLI would send: `infocmp -x TERM` of the local terminal, here renamed.
  const std::string src = s.dir / "term.src";
  REQUIRE(std::system(("infocmp -x xterm | sed 's/^xterm|/cb-test-term|/' > " + src).c_str()) == 0);
  std::ifstream in(src);
  std::stringstream text;
  text << in.rdbuf();
  const std::string terminfo = text.str();
  REQUIRE_THAT(terminfo, Catch::Contains("cb-test-term|"));

  std::optional<ExecResult> first, second, missing;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::ExecStart start = command_start("echo \"term=$TERM\"; infocmp >/dev/null && echo known");
    (*start.mutable_env())["HOME"] = home;
    start.mutable_pty()->set_term("cb-test-term");
    start.mutable_pty()->set_terminfo(terminfo);
    first = co_await run_exec(*channel, s.credential(), start);
    second = co_await run_exec(*channel, s.credential(), start);
    v1::ExecStart unknown = start;
    unknown.mutable_pty()->set_term("cb-unknown-term");
    unknown.mutable_pty()->clear_terminfo();
    missing = co_await run_exec(*channel, s.credential(), unknown);
    channel->close();
  });
  REQUIRE(first->status == ok_status());
  CHECK(first->started->terminfo() == v1::TERMINFO_STATUS_INSTALLED);
  CHECK_THAT(first->out, Catch::Contains("term=cb-test-term\r\nknown\r\n"));
  CHECK(std::filesystem::exists(home + "/.terminfo"));
  REQUIRE(second->status == ok_status());
  CHECK(second->started->terminfo() == v1::TERMINFO_STATUS_PRESENT);
  REQUIRE(missing->status == ok_status());
  CHECK(missing->started->terminfo() == v1::TERMINFO_STATUS_MISSING);
  CHECK_THAT(missing->out, Catch::Contains("term=cb-unknown-term\r\n"));
}

TEST_CASE("Exec: a login shell reads the user's profile", "[agent][exec][integration]") {
  auto own = proc::lookup_uid(::geteuid());
  if (!own.ok() || own->shell.find("bash") == std::string::npos) {
    WARN("skipped: the account's login shell is not bash, which reads ~/.profile");
    return;
  }
  Setup s;
  s.deliver();
  const std::string home = s.dir / "home";
  std::filesystem::create_directories(home);
  write_file(home + "/.profile", "export CB_FROM_PROFILE=yes\n");
  std::optional<ExecResult> login, plain, login_argv;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    v1::ExecStart start = command_start("echo \"profile=$CB_FROM_PROFILE\"");
    (*start.mutable_env())["HOME"] = home;
    start.set_login_shell(true);
    login = co_await run_exec(*channel, s.credential(), start);
    start.set_login_shell(false);
    plain = co_await run_exec(*channel, s.credential(), start);
    v1::ExecStart argv = argv_words("printenv CB_FROM_PROFILE");
    (*argv.mutable_env())["HOME"] = home;
    argv.set_login_shell(true);
    login_argv = co_await run_exec(*channel, s.credential(), argv);
    channel->close();
  });
  CHECK(login->out == "profile=yes\n");
  CHECK(plain->out == "profile=\n");
  CHECK(login_argv->out == "yes\n");
}

TEST_CASE("Exec: cancelling the call kills the process group", "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  Status cancelled_status;
  Status deadline_status;
  pid_t leader = 0, background = 0, stubborn = 0, late = 0;
  bool leader_gone = false, background_gone = false, stubborn_gone = false, late_gone = false;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    using namespace asio::experimental::awaitable_operators;

    // A shell with a child in the background: both go when the client resets the stream.
    auto opened = co_await open_exec(*channel, s.credential(),
                                     command_start("sleep 1000 & echo $!; sleep 1000"));
    REQUIRE(opened.status() == ok_status());
    ExecSession& session = **opened;
    auto cancel_when_running = [&]() -> asio::awaitable<Status> {
      bool up =
          co_await session.wait_for([&] { return session.out.find('\n') != std::string::npos; });
      if (!up) co_return internal_error("no pid printed");
      session.cancel();
      co_return ok_status();
    };
    auto r = co_await (cancel_when_running() && session.receive_all());
    (void)r;
    cancelled_status = session.status;
    leader = session.started ? session.started->pid() : 0;
    background = std::atoi(session.out.c_str());
    leader_gone = co_await eventually_gone(leader);
    background_gone = co_await eventually_gone(background);

    // One that ignores SIGTERM (and so does its child): SIGKILL after the grace period.
    auto o2 = co_await open_exec(*channel, s.credential(),
                                 command_start("trap '' TERM; echo $$; sleep 1000"));
    REQUIRE(o2.status() == ok_status());
    ExecSession& s2 = **o2;
    auto cancel2 = [&]() -> asio::awaitable<Status> {
      bool up = co_await s2.wait_for([&] { return s2.out.find('\n') != std::string::npos; });
      if (!up) co_return internal_error("no pid printed");
      s2.cancel();
      co_return ok_status();
    };
    auto r2 = co_await (cancel2() && s2.receive_all());
    (void)r2;
    stubborn = std::atoi(s2.out.c_str());
    stubborn_gone = co_await eventually_gone(stubborn);

    // The call's deadline passing does the same.
    auto o3 = co_await open_exec(*channel, s.credential(), argv_words("sleep 1000"), 500ms);
    REQUIRE(o3.status() == ok_status());
    ExecSession& s3 = **o3;
    Status st3 = co_await s3.receive_all();
    deadline_status = st3;
    late = s3.started ? s3.started->pid() : 0;
    late_gone = co_await eventually_gone(late);
    channel->close();
  });
  CHECK(cancelled_status.code() == Code::kCancelled);
  REQUIRE(leader > 0);
  REQUIRE(background > 0);
  CHECK(leader_gone);
  CHECK(background_gone);
  REQUIRE(stubborn > 0);
  CHECK(stubborn_gone);
  CHECK(deadline_status.code() == Code::kDeadlineExceeded);
  REQUIRE(late > 0);
  CHECK(late_gone);
}

TEST_CASE("Exec: a stalled stdin does not hold up other calls on the same connection",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  const std::string flood = random_bytes(24u << 20, 3);
  size_t flood_written_at_second_call = 0;
  bool flood_done_at_second_call = true;
  Result<v1::HelloResponse> hello = unavailable("not called");
  std::optional<ExecResult> second;
  Status stalled_status;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto executor = co_await asio::this_coro::executor;
    auto channel = channel_to(agent, executor);
    using namespace asio::experimental::awaitable_operators;
    // The child never reads stdin; this client ignores the credit and keeps writing, so
    // everything between it and the pipe fills up: the client's buffer, the HTTP/2 window,
    // the agent's stdin queue.
    auto opened = co_await open_exec(*channel, s.credential(), argv_words("sleep 1000"));
    REQUIRE(opened.status() == ok_status());
    ExecSession& stalled = **opened;
    bool flood_done = false;
    auto flooder = [&]() -> asio::awaitable<Status> {
      size_t off = 0;
      Status st;
      while (off < flood.size() && st.ok()) {
        st = co_await stalled.send_stdin(std::string_view(flood).substr(off, kStdinChunk), true);
        off += kStdinChunk;
      }
      flood_done = true;
      co_return st;
    };
    auto others = [&]() -> asio::awaitable<Status> {
      // Stalled: the flooder makes no progress any more, with more written than the pipe and
      // the agent's stdin queue together hold.
      const auto deadline = net::after(10s);
      uint64_t last = 0;
      while (!flood_done && std::chrono::steady_clock::now() < deadline) {
        co_await sleep_for(100ms);
        if (stalled.sent == last && last >= (6u << 20)) break;
        last = stalled.sent;
      }
      flood_written_at_second_call = stalled.sent;
      v1::Session::Stub stub(channel);
      v1::HelloRequest req;
      hello = co_await stub.Hello(req, call_options_with(one(s.credential())));
      second = co_await run_exec(*channel, s.credential(), command_start("echo second"));
      flood_done_at_second_call = flood_done;
      stalled.cancel();
      co_return ok_status();
    };
    auto r = co_await (flooder() && stalled.receive_all() && others());
    (void)r;
    stalled_status = stalled.status;
    channel->close();
  });
  CHECK(flood_written_at_second_call >= (6u << 20));
  CHECK_FALSE(flood_done_at_second_call);
  CHECK(hello.status() == ok_status());
  REQUIRE(second);
  CHECK(second->status == ok_status());
  CHECK(second->out == "second\n");
  CHECK(stalled_status.code() == Code::kCancelled);
}

TEST_CASE("Exec: with stdin full, a client within its credit still gets a signal through",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  const std::string flood = random_bytes(16u << 20, 5);
  std::optional<ExecResult> trapped;
  uint64_t sent_before_signal = 0;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    using namespace asio::experimental::awaitable_operators;
    auto opened = co_await open_exec(
        *channel, s.credential(),
        command_start("trap 'echo got-int; exit 9' INT; echo ready; sleep 1000"));
    REQUIRE(opened.status() == ok_status());
    ExecSession& session = **opened;
    auto feed = [&]() -> asio::awaitable<Status> {
      // Blocks once the window is used up (the process never reads), until the call ends.
      Status st = co_await session.send_stdin(flood);
      (void)st;
      co_return ok_status();
    };
    auto interrupt = [&]() -> asio::awaitable<Status> {
      bool full = co_await session.wait_for([&] {
        return session.started && session.out == "ready\n" &&
               session.sent - session.credited + kStdinChunk > session.started->stdin_window();
      });
      if (!full) co_return internal_error("stdin never filled the window");
      sent_before_signal = session.sent;
      co_return co_await session.send_signal(v1::EXEC_SIGNAL_INT);
    };
    auto r = co_await (feed() && interrupt() && session.receive_all());
    (void)r;
    trapped = static_cast<ExecResult&>(**opened);
    channel->close();
  });
  CHECK(sent_before_signal >= ExecConfig().stdin_window - kStdinChunk);
  REQUIRE(trapped->status == ok_status());
  REQUIRE(trapped->exit);
  CHECK(trapped->exit->code() == 9);
  CHECK(trapped->out == "ready\ngot-int\n");
}

TEST_CASE("Exec: stdin frames that never line up with the credit still let INT through",
          "[agent][exec][integration]") {
  // 60000-byte frames never add up to the 4 MiB window: a client within its credit then stops
  // short of it, the agent keeps reading, and INT reaches a process that never reads stdin.
  // (A client that went up to one frame past its credit, as rsh did, left the agent with more
  // queued than the window: the INT frame behind waited until `sleep` ended, and the exit
  // frame said code 0.)
  constexpr size_t kOddChunk = 60000;
  Setup s;
  s.deliver();
  const std::string flood = random_bytes(16u << 20, 11);
  std::optional<ExecResult> killed;
  uint64_t uncredited_at_signal = 0;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    using namespace asio::experimental::awaitable_operators;
    auto opened = co_await open_exec(*channel, s.credential(), command_start("exec sleep 32"));
    REQUIRE(opened.status() == ok_status());
    ExecSession& session = **opened;
    auto feed = [&]() -> asio::awaitable<Status> {
      Status st = co_await session.send_stdin(flood, false, kOddChunk);
      (void)st;  // ends with an error once the call is over
      co_return ok_status();
    };
    auto interrupt = [&]() -> asio::awaitable<Status> {
      bool full = co_await session.wait_for([&] {
        return session.started &&
               session.sent - session.credited + kOddChunk > session.started->stdin_window();
      });
      if (!full) co_return internal_error("stdin never filled the window");
      uncredited_at_signal = session.sent - session.credited;
      co_return co_await session.send_signal(v1::EXEC_SIGNAL_INT);
    };
    auto r = co_await (feed() && interrupt() && session.receive_all());
    CHECK(std::get<1>(r) == ok_status());
    killed = static_cast<ExecResult&>(**opened);
    channel->close();
  });
  CHECK(uncredited_at_signal > ExecConfig().stdin_window - kOddChunk);
  REQUIRE(killed->status == ok_status());
  REQUIRE(killed->exit);
  CHECK(killed->exit->status_case() == v1::ExecExit::kSignal);
  CHECK(killed->exit->signal() == SIGINT);
  CHECK(killed->exit->signal_name() == "INT");
}

TEST_CASE("Exec: a client that does not read stops the process's output, losing nothing",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  constexpr int64_t kTotal = 48 << 20;
  int64_t written_while_stalled = -1;
  std::optional<ExecResult> head;
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    const v1::ExecStart start = argv_words("head -c " + std::to_string(kTotal) + " /dev/zero");
    auto opened = co_await open_exec(*channel, s.credential(), start);
    REQUIRE(opened.status() == ok_status());
    ExecSession& session = **opened;
    // Read only the started frame (it comes before any output), then nothing: wait until
    // the process stops making progress.
    bool got_one = co_await session.read_one();
    REQUIRE(got_one);
    REQUIRE(session.started);
    const pid_t pid = session.started->pid();
    int64_t last = -2;
    const auto deadline = net::after(10s);
    while (std::chrono::steady_clock::now() < deadline) {
      co_await sleep_for(150ms);
      const int64_t now = bytes_written_by(pid);
      if (now == last) break;
      last = now;
    }
    written_while_stalled = last;
    // Now read everything.
    Status st = co_await session.receive_all();
    (void)st;
    head = static_cast<ExecResult&>(**opened);
    channel->close();
  });
  // Held up on the way: the pipe, one chunk in the agent, the HTTP/2 send buffer and the
  // client's stream window (a few MiB in all), far from everything.
  CHECK(written_while_stalled > 0);
  CHECK(written_while_stalled < (16 << 20));
  REQUIRE(head->status == ok_status());
  CHECK(static_cast<int64_t>(head->out.size()) == kTotal);
  CHECK(std::all_of(head->out.begin(), head->out.end(), [](char c) { return c == '\0'; }));
  REQUIRE(head->exit);
  CHECK(head->exit->code() == 0);
}

TEST_CASE("Exec: bad starts and protocol violations end the call with a clear status",
          "[agent][exec][integration]") {
  Setup s;
  s.deliver();
  struct Case {
    std::string name;
    std::vector<v1::ExecRequest> frames;
    bool half_close;
    std::string principal;
    Code code;
    std::string message;
  };
  auto start_frame = [](const v1::ExecStart& start) {
    v1::ExecRequest r;
    *r.mutable_start() = start;
    return r;
  };
  v1::ExecRequest stdin_frame;
  stdin_frame.set_stdin_data("x");
  v1::ExecRequest bad_signal;
  bad_signal.set_signal(v1::EXEC_SIGNAL_UNSPECIFIED);
  v1::ExecStart missing_cwd = command_start("pwd");
  missing_cwd.set_cwd(s.dir / "no-such-dir");
  v1::ExecStart sleep = argv_words("sleep 1000");

  std::vector<Case> cases = {
      {"stdin before start", {stdin_frame}, false, "", Code::kInvalidArgument, "must be start"},
      {"no frame at all", {}, true, "", Code::kInvalidArgument, "ended before start"},
      {"no program",
       {start_frame(v1::ExecStart())},
       false,
       "",
       Code::kInvalidArgument,
       "one of argv, command or shell"},
      {"empty argv",
       {start_frame(argv_words(""))},
       false,
       "",
       Code::kInvalidArgument,
       "start.argv"},
      {"missing cwd",
       {start_frame(missing_cwd)},
       false,
       "",
       Code::kFailedPrecondition,
       "start.cwd"},
      {"unknown program",
       {start_frame(argv_words("cb-no-such-program"))},
       false,
       "",
       Code::kNotFound,
       "cb-no-such-program"},
      {"second start",
       {start_frame(sleep), start_frame(sleep)},
       false,
       "",
       Code::kInvalidArgument,
       "sent twice"},
      {"unspecified signal",
       {start_frame(sleep), bad_signal},
       false,
       "",
       Code::kInvalidArgument,
       "signal"},
      {"a share, not the owner",
       {start_frame(argv_words("true"))},
       false,
       "share:sh_1:write",
       Code::kPermissionDenied,
       "owner"},
  };
  std::vector<Status> results;
  std::vector<int32_t> pids;
  Status as_owner = unavailable("not called");
  with_agent(exec_config(s), [&](Agent& agent) -> asio::awaitable<void> {
    auto channel = channel_to(agent, co_await asio::this_coro::executor);
    for (const Case& c : cases) {
      grpc::CallOptions options = call_options_with(one(s.credential()));
      if (!c.principal.empty())
        options.metadata.push_back(http::Header{std::string(kPrincipalHeader), c.principal});
      auto stream = co_await grpc::streaming_call<v1::ExecRequest, v1::ExecResponse>(
          *channel, std::string("/cocoonbox.agent.v1.Session/Exec"), std::move(options));
      REQUIRE(stream.status() == ok_status());
      ExecSession session(std::move(*stream), channel->executor());
      for (const auto& f : c.frames) {
        Status w = co_await session.send(f);
        (void)w;
      }
      if (c.half_close) {
        Status w = co_await session.writes_done();
        (void)w;
      }
      Status st = co_await session.receive_all();
      results.push_back(st);
      pids.push_back(session.started ? session.started->pid() : 0);
    }
    // The owner, said explicitly, is let in.
    auto opened = co_await open_exec(*channel, s.credential(), argv_words("true"), 20s,
                                     std::string(kOwnerPrincipal));
    REQUIRE(opened.status() == ok_status());
    as_owner = co_await (*opened)->receive_all();
    channel->close();
  });
  REQUIRE(results.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].name << ": " << results[i].to_string());
    CHECK(results[i].code() == cases[i].code);
    CHECK_THAT(std::string(results[i].message()), Catch::Contains(cases[i].message));
    if (pids[i] > 0) CHECK(process_gone(pids[i]));
  }
  CHECK(as_owner == ok_status());
}

}  // namespace
}  // namespace cb::agent
