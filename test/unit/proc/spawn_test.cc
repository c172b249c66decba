#include "proc/spawn.h"

#include "proc/user.h"
#include "support/temp_dir.h"

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/this_coro.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cb::proc {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

constexpr const char* kPath = "PATH=/usr/bin:/bin";

// Runs |task| on |io|; fails the test if it has not finished within 5 s (a hang is a bug,
// and this keeps it from stalling the suite).
void run_sync(asio::io_context& io, asio::awaitable<void> task) {
  bool done = false;
  asio::co_spawn(io, std::move(task), [&done](std::exception_ptr e) {
    done = true;
    if (e) std::rethrow_exception(e);
  });
  io.run_for(5s);
  REQUIRE(done);
}

// Reads |d| to the end of its output.
asio::awaitable<Result<std::string>> read_all(Descriptor& d) {
  std::string out;
  char buf[4096];
  while (true) {
    auto [ec, n] = co_await d.async_read_some(asio::buffer(buf));
    out.append(buf, n);
    if (is_end_of_output(ec)) co_return out;
    if (ec) co_return internal_error(ec.message());
  }
}

// Reads |d| into |out| until |out| contains |needle|.
asio::awaitable<Status> read_until(Descriptor& d, std::string& out, std::string_view needle) {
  char buf[4096];
  while (out.find(needle) == std::string::npos) {
    auto [ec, n] = co_await d.async_read_some(asio::buffer(buf));
    out.append(buf, n);
    if (ec) co_return internal_error(ec.message() + " before \"" + std::string(needle) + "\"");
  }
  co_return ok_status();
}

// Spawns |options|, reads stdout (or the PTY) to the end, and waits for the exit.
struct Outcome {
  Status spawned;
  std::string out;
  std::string err;
  ExitStatus exit;
};

Outcome run_to_end(SpawnOptions options) {
  asio::io_context io;
  Outcome o;
  run_sync(io, [&]() -> asio::awaitable<void> {
    auto p = spawn(co_await asio::this_coro::executor, options);
    if (!p.ok()) {
      o.spawned = p.status();
      co_return;
    }
    p->close_stdin();
    Descriptor* out = p->pty_master() ? p->pty_master() : p->stdout_pipe();
    if (out != nullptr) {
      auto text = co_await read_all(*out);
      INFO(text.status().to_string());
      REQUIRE(text.ok());
      o.out = *text;
    }
    if (p->stderr_pipe() != nullptr) {
      auto text = co_await read_all(*p->stderr_pipe());
      REQUIRE(text.ok());
      o.err = *text;
    }
    auto st = co_await p->wait();
    REQUIRE(st.ok());
    o.exit = *st;
  }());
  return o;
}

Outcome run_ok(SpawnOptions options) {
  Outcome o = run_to_end(std::move(options));
  INFO(o.spawned.to_string());
  REQUIRE(o.spawned.ok());
  return o;
}

// Waits up to 2 s for process |pid| (not necessarily our child) to terminate.
bool terminates_within_2s(int pidfd) {
  struct pollfd pfd {
    pidfd, POLLIN, 0
  };
  return ::poll(&pfd, 1, 2000) == 1;
}

TEST_CASE("spawn: argv, env and cwd are honoured and the parent environment stays out",
          "[proc][unit]") {
  TempDir dir;
  ::setenv("CB_PROC_TEST_PARENT", "leak", 1);

  SECTION("the child's environment is exactly the one given") {
    SpawnOptions o;
    o.argv = {"env"};  // found through the child's PATH
    o.env = {"FOO=bar baz", kPath};
    Outcome r = run_ok(o);
    CHECK(r.out == "FOO=bar baz\nPATH=/usr/bin:/bin\n");
    CHECK(r.exit.success());
  }
  SECTION("argv reaches the program unsplit and cwd is entered") {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "pwd; printf '%s|' \"$@\"", "sh", "a b", "", "c"};
    o.env = {kPath};
    o.cwd = dir.path();
    Outcome r = run_ok(o);
    CHECK(r.out == std::filesystem::canonical(dir.path()).string() + "\na b||c|");
  }
  SECTION("inherit_env passes the parent's environment, overridden by env") {
    ::setenv("CB_PROC_TEST_FOO", "parent", 1);
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "echo \"$CB_PROC_TEST_FOO $CB_PROC_TEST_PARENT\""};
    o.env = {"CB_PROC_TEST_FOO=child"};
    o.inherit_env = true;
    CHECK(run_ok(o).out == "child leak\n");
    ::unsetenv("CB_PROC_TEST_FOO");
  }
  ::unsetenv("CB_PROC_TEST_PARENT");
}

TEST_CASE("Process: wait reports the exit code, through a pidfd or SIGCHLD", "[proc][unit]") {
  bool sigchld = GENERATE(false, true);
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "exit 7"};
  o.use_sigchld_for_test = sigchld;
  Outcome r = run_ok(o);
  CHECK(r.exit.exited);
  CHECK(r.exit.code == 7);
  CHECK_FALSE(r.exit.success());
  CHECK(r.exit.to_string() == "exited with code 7");
}

TEST_CASE("Process: wait reports the signal that killed the child", "[proc][unit]") {
  bool sigchld = GENERATE(false, true);
  SECTION("the child kills itself") {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "kill -TERM $$"};
    o.use_sigchld_for_test = sigchld;
    Outcome r = run_ok(o);
    CHECK_FALSE(r.exit.exited);
    CHECK(r.exit.signal == SIGTERM);
    CHECK(r.exit.to_string() == "killed by signal 15 (SIGTERM)");
  }
  SECTION("Process::signal kills it") {
    asio::io_context io;
    run_sync(io, [&]() -> asio::awaitable<void> {
      SpawnOptions o;
      o.argv = {"/bin/cat"};  // blocks reading its open stdin pipe
      o.use_sigchld_for_test = sigchld;
      auto p = spawn(co_await asio::this_coro::executor, o);
      REQUIRE(p.ok());
      REQUIRE(p->signal(SIGKILL).ok());
      auto st = co_await p->wait();
      REQUIRE(st.ok());
      CHECK(st->signal == SIGKILL);
      // Waiting again gives the same answer; signalling a reaped pid is refused.
      auto again = co_await p->wait();
      REQUIRE(again.ok());
      CHECK(again->signal == SIGKILL);
      CHECK(p->signal(SIGTERM).code() == Code::kFailedPrecondition);
    }());
  }
}

TEST_CASE("spawn: exec and cwd failures are reported with the errno text", "[proc][unit]") {
  TempDir dir;
  SECTION("a missing program by path") {
    SpawnOptions o;
    o.argv = {"/nonexistent/cb-prog"};
    Outcome r = run_to_end(o);
    CHECK(r.spawned.code() == Code::kNotFound);
    CHECK(r.spawned.message() == "exec /nonexistent/cb-prog: No such file or directory");
  }
  SECTION("a missing program searched in PATH") {
    SpawnOptions o;
    o.argv = {"cb-no-such-program"};
    o.env = {kPath};
    Outcome r = run_to_end(o);
    CHECK(r.spawned.code() == Code::kNotFound);
    CHECK(r.spawned.message().find("cb-no-such-program") != std::string_view::npos);
  }
  SECTION("a file that is not executable") {
    { std::ofstream(dir.file("script.sh")) << "#!/bin/sh\necho hi\n"; }
    ::chmod(dir.file("script.sh").c_str(), 0644);
    SpawnOptions o;
    o.argv = {dir.file("script.sh").string()};
    Outcome r = run_to_end(o);
    CHECK(r.spawned.code() == Code::kPermissionDenied);
    CHECK(r.spawned.message().find("Permission denied") != std::string_view::npos);
  }
  SECTION("a missing working directory") {
    SpawnOptions o;
    o.argv = {"/bin/true"};
    o.cwd = dir.file("gone");
    Outcome r = run_to_end(o);
    CHECK(r.spawned.code() == Code::kNotFound);
    CHECK(r.spawned.message().find("chdir") != std::string_view::npos);
    CHECK(r.spawned.message().find("gone") != std::string_view::npos);
  }
  SECTION("an empty argv") {
    CHECK(run_to_end(SpawnOptions{}).spawned.code() == Code::kInvalidArgument);
  }
}

TEST_CASE("Process: stdin piped to cat comes back on stdout", "[proc][unit]") {
  // 256 KiB: four times a default pipe buffer, so writing and reading must overlap.
  std::string payload;
  for (int i = 0; payload.size() < 256 * 1024; ++i) payload += std::to_string(i) + "\n";
  asio::io_context io;
  std::string echoed;
  Status wrote = internal_error("writer did not finish");
  run_sync(io, [&]() -> asio::awaitable<void> {
    SpawnOptions o;
    o.argv = {"/bin/cat"};
    auto p = spawn(co_await asio::this_coro::executor, o);
    REQUIRE(p.ok());
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto [ec, n] =
              co_await asio::async_write(*p->stdin_pipe(), asio::buffer(payload),
                                         asio::experimental::as_tuple(asio::use_awaitable));
          wrote = ec ? internal_error(ec.message()) : ok_status();
          p->close_stdin();
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    auto out = co_await read_all(*p->stdout_pipe());
    REQUIRE(out.ok());
    echoed = *out;
    auto st = co_await p->wait();
    REQUIRE(st.ok());
    CHECK(st->success());
  }());
  CHECK(wrote.ok());
  CHECK(echoed.size() == payload.size());
  CHECK(echoed == payload);
}

TEST_CASE("Process: stderr is kept apart from stdout", "[proc][unit]") {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo out; echo err >&2; echo more"};
  Outcome r = run_ok(o);
  CHECK(r.out == "out\nmore\n");
  CHECK(r.err == "err\n");

  SECTION("Stdio::kNull gives /dev/null and no pipe") {
    SpawnOptions n;
    n.argv = {"/bin/sh", "-c", "cat; echo done; echo hidden >&2"};
    n.stdin_mode = Stdio::kNull;
    n.stderr_mode = Stdio::kNull;
    Outcome rn = run_ok(n);
    CHECK(rn.out == "done\n");
    CHECK(rn.err.empty());
  }
}

TEST_CASE("spawn: pipe_size enlarges the stdio pipes", "[proc][unit]") {
  asio::io_context io;
  SpawnOptions o;
  o.argv = {"/bin/cat"};
  o.pipe_size = 1 << 20;
  auto p = spawn(io.get_executor(), o);
  REQUIRE(p.ok());
  // Each end reports its pipe's capacity; the default is 64 KiB.
  const int in = ::fcntl(p->stdin_pipe()->native_handle(), F_GETPIPE_SZ);
  const int out = ::fcntl(p->stdout_pipe()->native_handle(), F_GETPIPE_SZ);
  const int err = ::fcntl(p->stderr_pipe()->native_handle(), F_GETPIPE_SZ);
  CHECK(in == 1 << 20);
  CHECK(out == 1 << 20);
  CHECK(err == 1 << 20);
  p->close_stdin();
  run_sync(io, [&]() -> asio::awaitable<void> {
    auto st = co_await p->wait();
    CHECK(st.ok());
  }());
}

TEST_CASE("Process: a pty child sees a /dev/pts terminal of the requested size", "[proc][unit]") {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "tty; stty size; echo \"$TERM\"; echo err >&2"};
  o.env = {kPath, "TERM=dumb"};
  o.pty = PtyOptions{30, 100, "xterm-256color"};
  Outcome r = run_ok(o);
  INFO(r.out);
  CHECK(r.out.rfind("/dev/pts/", 0) == 0);  // the terminal translates \n to \r\n
  CHECK(r.out.find("\r\n30 100\r\n") != std::string::npos);
  CHECK(r.out.find("\r\nxterm-256color\r\n") != std::string::npos);
  CHECK(r.out.find("err") != std::string::npos);  // stderr is the terminal too
  CHECK(r.err.empty());
  CHECK(r.exit.success());
}

TEST_CASE("Process: resize changes the size a pty child reads", "[proc][unit]") {
  asio::io_context io;
  run_sync(io, [&]() -> asio::awaitable<void> {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "stty size; read line; stty size"};
    o.env = {kPath};
    o.pty = PtyOptions{};
    auto p = spawn(co_await asio::this_coro::executor, o);
    REQUIRE(p.ok());
    CHECK(p->stdin_pipe() == nullptr);
    CHECK(p->stdout_pipe() == nullptr);
    std::string seen;
    Status s = co_await read_until(*p->pty_master(), seen, "24 80\r\n");
    INFO(s.to_string());
    REQUIRE(s.ok());
    REQUIRE(p->resize(50, 132).ok());
    // The shell is blocked in `read` until this line arrives, so the second `stty size`
    // runs after the resize.
    auto [ec, n] = co_await asio::async_write(*p->pty_master(), asio::buffer("go\n", 3),
                                              asio::experimental::as_tuple(asio::use_awaitable));
    REQUIRE_FALSE(ec);
    auto rest = co_await read_all(*p->pty_master());
    REQUIRE(rest.ok());
    CHECK(rest->find("50 132\r\n") != std::string::npos);
    auto st = co_await p->wait();
    REQUIRE(st.ok());
    CHECK(st->success());
  }());

  SECTION("without a pty, resize is kFailedPrecondition") {
    asio::io_context io2;
    run_sync(io2, [&]() -> asio::awaitable<void> {
      SpawnOptions o;
      o.argv = {"/bin/true"};
      auto p = spawn(co_await asio::this_coro::executor, o);
      REQUIRE(p.ok());
      CHECK(p->resize(10, 10).code() == Code::kFailedPrecondition);
      CHECK(p->kill_group().code() == Code::kFailedPrecondition);
      auto waited = co_await p->wait();
      REQUIRE(waited.ok());
    }());
  }
}

TEST_CASE("Process: a signal to a new session reaches the child's own children", "[proc][unit]") {
  asio::io_context io;
  run_sync(io, [&]() -> asio::awaitable<void> {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "sleep 100 & echo $!; wait"};
    o.env = {kPath};
    o.new_session = true;
    auto p = spawn(co_await asio::this_coro::executor, o);
    REQUIRE(p.ok());
    CHECK(::getpgid(p->pid()) == p->pid());
    std::string line;
    auto got_line = co_await read_until(*p->stdout_pipe(), line, "\n");
    REQUIRE(got_line.ok());
    pid_t grandchild = std::stoi(line);
    // Watch the grandchild through a pidfd of our own: it is not our child, so we cannot
    // wait for it, but its pidfd becomes readable when it terminates.
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, grandchild, 0));
    REQUIRE(pidfd >= 0);
    REQUIRE(p->signal(SIGTERM).ok());
    auto st = co_await p->wait();
    REQUIRE(st.ok());
    CHECK(st->signal == SIGTERM);
    CHECK(terminates_within_2s(pidfd));
    ::close(pidfd);
  }());
}

TEST_CASE("Process: kill_group kills what the child left behind in its group", "[proc][unit]") {
  asio::io_context io;
  run_sync(io, [&]() -> asio::awaitable<void> {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "sleep 100 & echo $!"};  // exits at once, sleep stays
    o.env = {kPath};
    o.new_session = true;
    auto p = spawn(co_await asio::this_coro::executor, o);
    REQUIRE(p.ok());
    std::string line;
    auto got_line = co_await read_until(*p->stdout_pipe(), line, "\n");
    REQUIRE(got_line.ok());
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, std::stoi(line), 0));
    REQUIRE(pidfd >= 0);
    auto st = co_await p->wait();
    REQUIRE(st.ok());
    CHECK(st->success());
    REQUIRE(p->kill_group().ok());
    CHECK(terminates_within_2s(pidfd));
    ::close(pidfd);
  }());
}

TEST_CASE("spawn: parent_death_signal ends the child when its parent is killed with -9",
          "[proc][unit]") {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    // The parent to be killed: spawns a long sleep, says its pid, waits. It never returns
    // into the test framework.
    ::close(report[0]);
    pid_t child = 0;
    try {
      asio::io_context io;
      SpawnOptions o;
      o.argv = {"/bin/sleep", "1000"};
      o.env = {kPath};
      o.parent_death_signal = SIGKILL;
      o.stdin_mode = Stdio::kNull;
      o.stdout_mode = Stdio::kNull;
      o.stderr_mode = Stdio::kNull;
      auto p = spawn(io.get_executor(), o);
      if (p.ok()) child = p->pid();
      [[maybe_unused]] ssize_t n = ::write(report[1], &child, sizeof child);
      while (true) ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(report[1]);
  pid_t child = 0;
  const bool reported =
      ::read(report[0], &child, sizeof child) == static_cast<ssize_t>(sizeof child) && child > 0;
  ::close(report[0]);
  const int pidfd = reported ? static_cast<int>(::syscall(SYS_pidfd_open, child, 0)) : -1;
  ::kill(parent, SIGKILL);
  REQUIRE(::waitpid(parent, nullptr, 0) == parent);
  REQUIRE(pidfd >= 0);
  // The kernel sends SIGKILL as the parent dies; give the sleep up to 20 s to be seen gone (a
  // bound for a loaded machine, not a timing assertion). Without the signal it sleeps on.
  pollfd pfd{pidfd, POLLIN, 0};
  const bool ended = ::poll(&pfd, 1, 20000) == 1;
  if (!ended) ::kill(child, SIGKILL);
  ::close(pidfd);
  CHECK(ended);
}

TEST_CASE("spawn: a child runs as another user with only that user's groups", "[proc][unit]") {
  if (::geteuid() != 0) {
    WARN("not running as root: cannot switch users, skipping");
    return;
  }
  auto nobody = lookup_user("nobody");
  if (!nobody.ok()) {
    WARN("no user 'nobody' in /etc/passwd, skipping");
    return;
  }
  TempDir dir;
  SECTION("by name") {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "id -u; id -g; id -G"};
    o.env = {kPath};
    o.user = "nobody";
    Outcome r = run_ok(o);
    std::string groups;
    for (gid_t g : nobody->groups) groups += (groups.empty() ? "" : " ") + std::to_string(g);
    CHECK(r.out == fmt::format("{}\n{}\n{}\n", nobody->uid, nobody->gid, groups));
  }
  SECTION("by uid, with the supplementary groups cleared") {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", "id -u; id -G"};
    o.env = {kPath};
    o.uid = nobody->uid;
    o.gid = nobody->gid;
    Outcome r = run_ok(o);
    CHECK(r.out == fmt::format("{}\n{}\n", nobody->uid, nobody->gid));
  }
  SECTION("the cwd is entered with the user's permissions") {
    std::filesystem::create_directory(dir.file("private"));
    ::chmod(dir.file("private").c_str(), 0700);
    SpawnOptions o;
    o.argv = {"/bin/true"};
    o.user = "nobody";
    o.cwd = dir.file("private");
    Outcome r = run_to_end(o);
    CHECK(r.spawned.code() == Code::kPermissionDenied);
    CHECK(r.spawned.message().find("chdir") != std::string_view::npos);
  }
}

}  // namespace
}  // namespace cb::proc
