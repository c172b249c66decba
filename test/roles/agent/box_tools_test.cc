// The box tools (roles/agent/box_tools.h) on real files and real processes, in a temporary
// workspace, as the test's own account and (as root) as `nobody`.

#include "roles/agent/box_tools.h"

#include "base/base64.h"
#include "mcp/server.h"
#include "proc/user.h"
#include "roles/agent/box_mcp.h"
#include "support/run_sync.h"
#include "support/temp_dir.h"

#include <asio/experimental/awaitable_operators.hpp>
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cb::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const fs::path& p, std::string_view data) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
}

struct Fixture {
  TempDir dir;
  asio::io_context io;
  ExecConfig config;
  BoxToolsLimits limits;
  std::unique_ptr<BoxTools> tools;

  explicit Fixture(std::string desktop_user = "cb-no-such-user") {
    config.desktop_user = std::move(desktop_user);
    config.workspace = (dir.path() / "ws").string();
    fs::create_directories(config.workspace);
    make();
  }
  void make() {
    fs::create_directories(sessions());
    tools = std::make_unique<BoxTools>(io.get_executor(), config, limits, sessions());
  }
  fs::path ws() const { return config.workspace; }
  fs::path sessions() const { return dir.path() / "sessions"; }

  // |owner|: as the agent loop passes an agent's id; empty as the box MCP calls.
  Result<ToolResult> call(std::string name, json args, std::string owner = {}) {
    // co_spawn wants a default-constructible result.
    auto task = [&]() -> asio::awaitable<std::optional<Result<ToolResult>>> {
      auto r = co_await tools->call(name, args, owner);
      co_return std::optional<Result<ToolResult>>(std::move(r));
    };
    return *test::run_sync(io, task());
  }
  // A call that must succeed as a call; the tool may still report an error.
  ToolResult ok(std::string name, json args, std::string owner = {}) {
    auto r = call(std::move(name), std::move(args), std::move(owner));
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    // Whatever the tool read, the result serializes.
    CHECK_NOTHROW(r->to_json().dump());
    return *r;
  }
};

TEST_CASE("box tools: unknown tools and bad arguments are errors of the call", "[agent][tools]") {
  Fixture f;
  auto r = f.call("rm_rf", json::object());
  CHECK(r.status().code() == Code::kNotFound);
  r = f.call("read_file", json::object());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message() == "arguments: missing required field \"path\"");
  r = f.call("shell", json{{"command", "true"}, {"timeout", "soon"}});
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("arguments.timeout") == 0);
  r = f.call("write_file", json{{"path", std::string("a\0b", 3)}, {"content", ""}});
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message() == "arguments.path: contains a NUL byte");
}

TEST_CASE("box tools: write_file and read_file", "[agent][tools]") {
  Fixture f;
  SECTION("a relative path is under the workspace; parents are created; nothing else is left") {
    ToolResult w = f.ok("write_file", json{{"path", "src/a/hello.txt"}, {"content", "one\ntwo\n"}});
    CHECK_FALSE(w.is_error);
    CHECK(slurp(f.ws() / "src/a/hello.txt") == "one\ntwo\n");
    CHECK(std::distance(fs::directory_iterator(f.ws() / "src/a"), fs::directory_iterator()) == 1);
    ToolResult r = f.ok("read_file", json{{"path", (f.ws() / "src/a/hello.txt").string()}});
    CHECK_FALSE(r.is_error);
    CHECK(r.text() == "     1\tone\n     2\ttwo\n");
    CHECK(r.structured["total_lines"] == 2);
  }
  SECTION("an existing file keeps its mode; a symlink keeps pointing at the rewritten file") {
    put(f.ws() / "secret", "old");
    ::chmod((f.ws() / "secret").c_str(), 0600);
    fs::create_symlink("secret", f.ws() / "link");
    f.ok("write_file", json{{"path", "link"}, {"content", "new"}});
    CHECK(fs::is_symlink(f.ws() / "link"));
    CHECK(slurp(f.ws() / "secret") == "new");
    struct stat st {};
    REQUIRE(::stat((f.ws() / "secret").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
  }
  SECTION("offset and limit page through a long file, with a note saying where to go on") {
    std::string text;
    for (int i = 1; i <= 10; ++i) text += "line " + std::to_string(i) + "\n";
    put(f.ws() / "ten", text);
    ToolResult r = f.ok("read_file", json{{"path", "ten"}, {"offset", 4}, {"limit", 3}});
    CHECK(r.text() ==
          "     4\tline 4\n     5\tline 5\n     6\tline 6\n"
          "[lines 4-6 of 10; call again with offset 7 for more]");
    r = f.ok("read_file", json{{"path", "ten"}, {"offset", 11}});
    CHECK(r.text() == "(the file has 10 lines; offset 11 is past the end)");
  }
  SECTION("long lines are cut, CRLF is shown as lines, bad UTF-8 is replaced") {
    f.limits.line_chars = 5;
    f.make();
    put(f.ws() / "wide", "abcdefgh\r\nxy\xff\n");
    ToolResult r = f.ok("read_file", json{{"path", "wide"}});
    CHECK(r.text() ==
          "     1\tabcde\n     2\txy\xEF\xBF\xBD\n[1 lines longer than 5 characters were cut]");
  }
  SECTION("images come back as image content; other binaries, directories, missing files fail") {
    std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDRxx", 20);
    put(f.ws() / "pic.png", png);
    ToolResult r = f.ok("read_file", json{{"path", "pic.png"}});
    CHECK_FALSE(r.is_error);
    REQUIRE(r.content.size() == 1);
    CHECK(r.content[0]["type"] == "image");
    CHECK(r.content[0]["mimeType"] == "image/png");
    CHECK(base64_decode(r.content[0]["data"].get<std::string>()).value() == png);

    put(f.ws() / "blob", std::string("ab\0cd", 5));
    r = f.ok("read_file", json{{"path", "blob"}});
    CHECK(r.is_error);
    CHECK(r.text().find("is a binary file") != std::string::npos);
    r = f.ok("read_file", json{{"path", "."}});
    CHECK(r.is_error);
    CHECK(r.text().find("is a directory: use list_dir") != std::string::npos);
    r = f.ok("read_file", json{{"path", "nope"}});
    CHECK(r.is_error);
    CHECK(r.text() == (f.ws() / "nope").string() + ": No such file or directory");
    put(f.ws() / "empty", "");
    CHECK(f.ok("read_file", json{{"path", "empty"}}).text() == "(empty file)");
  }
}

TEST_CASE("box tools: files over the limits are refused with their size", "[agent][tools]") {
  Fixture f;
  f.limits.text_file_bytes = 1000;
  f.limits.image_bytes = 100;
  f.make();
  put(f.ws() / "big.txt", std::string(5000, 'x'));
  ToolResult r = f.ok("read_file", json{{"path", "big.txt"}});
  CHECK(r.is_error);
  CHECK(r.text().find("is 4.9 KiB: larger than the 1000 B read_file takes") != std::string::npos);
  r = f.ok("edit_file", json{{"path", "big.txt"}, {"old_string", "x"}, {"new_string", "y"}});
  CHECK(r.is_error);
  CHECK(r.text().find("larger than") != std::string::npos);
  put(f.ws() / "big.png", "\x89PNG\r\n\x1a\n" + std::string(500, 'p'));
  r = f.ok("read_file", json{{"path", "big.png"}});
  CHECK(r.is_error);
  CHECK(r.text().find("image/png of 508 B") != std::string::npos);
  // A dangling symlink is a missing file.
  fs::create_symlink("nowhere", f.ws() / "dangling");
  r = f.ok("read_file", json{{"path", "dangling"}});
  CHECK(r.is_error);
  CHECK(r.text().find("No such file or directory") != std::string::npos);
}

TEST_CASE("box tools: edit_file replaces exactly what it is told", "[agent][tools]") {
  Fixture f;
  put(f.ws() / "code.py", "a = 1\nb = 2\na = 1\n");
  ToolResult r = f.ok("edit_file",
                      json{{"path", "code.py"}, {"old_string", "b = 2"}, {"new_string", "b = 3"}});
  CHECK_FALSE(r.is_error);
  CHECK(slurp(f.ws() / "code.py") == "a = 1\nb = 3\na = 1\n");
  CHECK(r.text().find("replaced 1 occurrence\n") != std::string::npos);
  CHECK(r.text().find("     2\tb = 3\n") != std::string::npos);

  r = f.ok("edit_file",
           json{{"path", "code.py"}, {"old_string", "a = 1"}, {"new_string", "a = 0"}});
  CHECK(r.is_error);
  CHECK(r.text().find("occurs 2 times") != std::string::npos);
  CHECK(slurp(f.ws() / "code.py") == "a = 1\nb = 3\na = 1\n");

  r = f.ok("edit_file", json{{"path", "code.py"},
                             {"old_string", "a = 1"},
                             {"new_string", "a = 0"},
                             {"replace_all", true}});
  CHECK_FALSE(r.is_error);
  CHECK(slurp(f.ws() / "code.py") == "a = 0\nb = 3\na = 0\n");
  CHECK(r.structured["replacements"] == 2);

  r = f.ok("edit_file", json{{"path", "code.py"}, {"old_string", "c = 1"}, {"new_string", "x"}});
  CHECK(r.is_error);
  CHECK(r.text().find("was not found") != std::string::npos);
  r = f.ok("edit_file",
           json{{"path", "code.py"}, {"old_string", "b = 3"}, {"new_string", "b = 3"}});
  CHECK(r.is_error);
  CHECK(slurp(f.ws() / "code.py") == "a = 0\nb = 3\na = 0\n");
}

TEST_CASE("box tools: list_dir", "[agent][tools]") {
  Fixture f;
  put(f.ws() / "b.txt", "12345");
  put(f.ws() / "a/inner", "");
  put(f.ws() / ".hidden", "");
  fs::create_symlink("b.txt", f.ws() / "c");
  ToolResult r = f.ok("list_dir", json::object());
  CHECK(r.text() == "a/\nb.txt  5 B\nc -> b.txt\n[1 hidden entries; set hidden to see them]");
  CHECK(r.structured["entries"].size() == 3);
  r = f.ok("list_dir", json{{"hidden", true}});
  CHECK(r.text() == ".hidden  0 B\na/\nb.txt  5 B\nc -> b.txt");
  r = f.ok("list_dir", json{{"path", "b.txt"}});
  CHECK(r.is_error);
  r = f.ok("list_dir", json{{"path", "a"}});
  CHECK(r.text() == "inner  0 B");
}

TEST_CASE("box tools: shell", "[agent][tools]") {
  Fixture f;
  SECTION("stdout, stderr kept apart, the exit code, the workspace as cwd") {
    ToolResult r = f.ok("shell", json{{"command", "pwd; echo oops >&2; exit 3"}});
    CHECK_FALSE(r.is_error);
    CHECK(r.text() == f.ws().string() + "\n[stderr]\noops\n[exit code 3]");
    CHECK(r.structured["exit_code"] == 3);
    CHECK(r.structured["timed_out"] == false);
    fs::create_directories(f.ws() / "sub");
    r = f.ok("shell", json{{"command", "pwd"}, {"cwd", "sub"}});
    CHECK(r.text() == (f.ws() / "sub").string() + "\n[exit code 0]");
    r = f.ok("shell", json{{"command", "pwd"}, {"cwd", "missing"}});
    CHECK(r.is_error);
  }
  SECTION("a command killed by a signal says so") {
    ToolResult r = f.ok("shell", json{{"command", "kill -TERM $$"}});
    CHECK(r.text() == "[killed by SIGTERM]");
    CHECK(r.structured["signal"] == "SIGTERM");
  }
  SECTION("long output keeps its head and tail with a note") {
    f.limits.shell_output = 100;
    f.make();
    ToolResult r = f.ok("shell", json{{"command", "seq 1 10000"}});
    CHECK(r.structured["stdout_bytes"] == 48894);
    CHECK(r.structured["truncated"] == true);
    CHECK(r.text().rfind("1\n2\n3\n", 0) == 0);
    CHECK(r.text().find("[... 47.7 KiB left out ...]") != std::string::npos);  // 48,794 bytes
    CHECK(r.text().find("9999\n10000\n[exit code 0]") != std::string::npos);
  }
  SECTION("a timeout kills the whole process group") {
    const fs::path pidfile = f.ws() / "pid";
    ToolResult r =
        f.ok("shell", json{{"command", "sleep 30 & echo $! > pid; wait"}, {"timeout", 1}});
    CHECK(r.is_error);
    CHECK(r.structured["timed_out"] == true);
    CHECK(r.text().find("[timed out after 1s") != std::string::npos);
    const pid_t sleeper = std::stoi(slurp(pidfile));
    // Killed and reaped by init (or a zombie of nobody's): either way no longer running. The
    // orphaned sleeper dies asynchronously after the group's SIGKILL (on a loaded machine it
    // can still be exiting when the tool returns), so wait for that, for at most 10 s.
    auto sleeper_state = [&] {
      std::string state;
      std::ifstream stat_file("/proc/" + std::to_string(sleeper) + "/stat");
      if (stat_file) {
        std::string pid_s, comm;
        stat_file >> pid_s >> comm >> state;
      }
      return state;
    };
    std::string state = sleeper_state();
    for (int i = 0; i < 1000 && !(state.empty() || state == "Z"); ++i) {
      ::usleep(10'000);
      state = sleeper_state();
    }
    CHECK((state.empty() || state == "Z"));
  }
}

TEST_CASE("box tools: shell sessions keep cwd and exported variables", "[agent][tools]") {
  Fixture f;
  fs::create_directories(f.ws() / "sub/deeper");
  auto run = [&](std::string command, std::string owner, json extra = json::object()) {
    json args = extra;
    args["command"] = std::move(command);
    return f.ok("shell", args, std::move(owner));
  };
  SECTION("cd, then pwd in the next call") {
    CHECK(run("cd sub", "ag_1").text() == "[exit code 0]");
    CHECK(run("pwd", "ag_1").text() == (f.ws() / "sub").string() + "\n[exit code 0]");
    CHECK(run("cd deeper && cd - >/dev/null && pwd", "ag_1").text() ==
          (f.ws() / "sub").string() + "\n[exit code 0]");
    ToolResult r = run("pwd", "ag_1");
    CHECK(r.structured["session"] == "agent-ag_1");
    // An explicit cwd wins, and is where the session is afterwards.
    CHECK(run("pwd", "ag_1", json{{"cwd", "sub/deeper"}}).text() ==
          (f.ws() / "sub/deeper").string() + "\n[exit code 0]");
    CHECK(run("pwd", "ag_1").text() == (f.ws() / "sub/deeper").string() + "\n[exit code 0]");
  }
  SECTION("export, then echo; plain shell variables stay behind; exit codes are kept") {
    CHECK(run("export GREETING='hello world' QUOTE=\"it's \\\"x\\\"\"; LOCAL=1; exit 7", "ag_1")
              .text() == "[exit code 7]");
    CHECK(run("echo \"$GREETING|$QUOTE|${LOCAL-unset}\"", "ag_1").text() ==
          "hello world|it's \"x\"|unset\n[exit code 0]");
    CHECK(run("unset GREETING; export MULTI=$'a\\nb'", "ag_1").text() == "[exit code 0]");
    CHECK(run("echo \"${GREETING-gone}\"; printf '%s' \"$MULTI\" | wc -l", "ag_1").text() ==
          "gone\n1\n[exit code 0]");
  }
  SECTION("a timed-out command leaves the session as it was before it") {
    run("cd sub; export STAGE=before", "ag_1");
    ToolResult r = run("cd /; export STAGE=during; sleep 30", "ag_1", json{{"timeout", 1}});
    CHECK(r.is_error);
    CHECK(r.structured["timed_out"] == true);
    CHECK(r.text().find("the session keeps its state from before it") != std::string::npos);
    CHECK(run("pwd; echo $STAGE", "ag_1").text() ==
          (f.ws() / "sub").string() + "\nbefore\n[exit code 0]");
    // A syntax error is an ordinary failure: the state is saved as usual.
    CHECK(run("if then", "ag_1").text().find("[exit code 2]") != std::string::npos);
    CHECK(run("echo $STAGE", "ag_1").text() == "before\n[exit code 0]");
  }
  SECTION("sessions are independent, and one-off calls have none") {
    run("cd sub; export WHO=one", "ag_1");
    run("cd sub/deeper; export WHO=two", "ag_2");
    run("export WHO=mcp", "", json{{"session", "build"}});
    run("export WHO=named", "ag_1", json{{"session", "build"}});
    CHECK(run("echo $PWD $WHO", "ag_1").text() ==
          (f.ws() / "sub").string() + " one\n[exit code 0]");
    CHECK(run("echo $PWD $WHO", "ag_2").text() ==
          (f.ws() / "sub/deeper").string() + " two\n[exit code 0]");
    CHECK(run("echo $WHO", "", json{{"session", "build"}}).text() == "mcp\n[exit code 0]");
    CHECK(run("echo $WHO", "ag_1", json{{"session", "build"}}).text() == "named\n[exit code 0]");
    ToolResult r = run("echo ${WHO-none}; pwd", "");
    CHECK(r.text() == "none\n" + f.ws().string() + "\n[exit code 0]");
    CHECK_FALSE(r.structured.contains("session"));
  }
  SECTION("a directory that is gone: the session goes on in the workspace") {
    run("mkdir -p tmpdir && cd tmpdir", "ag_1");
    fs::remove(f.ws() / "tmpdir");
    ToolResult r = run("pwd", "ag_1");
    CHECK(r.text() == f.ws().string() + "\n[stderr]\n[session: " + (f.ws() / "tmpdir").string() +
                          " is gone; running in " + f.ws().string() + "]\n[exit code 0]");
  }
  SECTION("bad session names are errors of the call") {
    auto r = f.call("shell", json{{"command", "true"}, {"session", "../x"}});
    CHECK(r.status().code() == Code::kInvalidArgument);
    r = f.call("shell", json{{"command", "true"}, {"session", ".hidden"}});
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
}

// A shell call as a coroutine, for running several at once.
asio::awaitable<ToolResult> shell_call(BoxTools& tools, json args, std::string owner,
                                       const McpShellScope* scope = nullptr) {
  auto r = co_await tools.call("shell", args, owner, scope);
  REQUIRE(r.ok());
  co_return std::move(*r);
}

// True once |p| (not followed if a symlink) is gone. Session state is removed on the tools'
// worker thread after the call that ends it returns, so look again for up to 10 s (a bound,
// not a timing assertion).
bool gone_soon(const fs::path& p) {
  std::error_code ec;
  for (int i = 0; i < 1000; ++i) {
    if (!fs::exists(fs::symlink_status(p, ec))) return true;
    ::usleep(10'000);
  }
  return !fs::exists(fs::symlink_status(p, ec));
}

TEST_CASE("box tools: commands of one session run one after another, in call order",
          "[agent][tools]") {
  using namespace asio::experimental::awaitable_operators;
  Fixture f;
  fs::create_directories(f.ws() / "sub");
  REQUIRE(::mkfifo((f.ws() / "go").c_str(), 0600) == 0);
  // The first command blocks on the FIFO until a third, session-less call writes to it; the
  // second, called meanwhile in the same session, waits for the first and starts from the
  // state it left. (Run at once, both would start from the same state and the one to end
  // last would drop the other's export.)
  const json first = json{{"command", "export A=1; cd sub; read -r x < ../go; echo got $x"}};
  const json second = json{{"command", "export B=2; echo B in $PWD"}};
  const json release = json{{"command", "echo go > go"}};
  auto all = [&]() -> asio::awaitable<std::tuple<ToolResult, ToolResult, ToolResult>> {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto results =
        co_await (shell_call(*f.tools, first, "ag_1") && shell_call(*f.tools, second, "ag_1") &&
                  shell_call(*f.tools, release, ""));
    co_return results;
  };
  auto [a, b, c] = test::run_sync(f.io, all());
  CHECK(a.text() == "got go\n[exit code 0]");
  CHECK(b.text() == "B in " + (f.ws() / "sub").string() + "\n[exit code 0]");
  CHECK(c.text() == "[exit code 0]");
  CHECK(f.ok("shell", json{{"command", "echo \"$A $B $PWD\""}}, "ag_1").text() ==
        "1 2 " + (f.ws() / "sub").string() + "\n[exit code 0]");
}

TEST_CASE(
    "box tools: shell sessions end with their MCP session or agent; a sweep removes a "
    "dead agent's",
    "[agent][tools]") {
  Fixture f;
  // Creates the sessions root (0700) through a real call.
  REQUIRE_FALSE(f.ok("shell", json{{"command", "export X=agent"}}, "ag_1").is_error);
  const fs::path root = f.sessions() / ("cocoonbox-shell-" + std::to_string(::geteuid()));
  REQUIRE(fs::is_directory(root / "agent-ag_1"));

  SECTION("an MCP session's shell sessions are its own and go when it ends") {
    auto one = f.tools->open_mcp_scope();
    auto two = f.tools->open_mcp_scope();
    CHECK(one->prefix() != two->prefix());
    const json set = json{{"command", "export X=one"}, {"session", "build"}};
    const json get = json{{"command", "echo ${X-unset}"}, {"session", "build"}};
    ToolResult r = test::run_sync(f.io, shell_call(*f.tools, set, "", one.get()));
    CHECK(r.structured["session"] == one->prefix() + "build");
    CHECK(test::run_sync(f.io, shell_call(*f.tools, get, "", one.get())).text() ==
          "one\n[exit code 0]");
    CHECK(test::run_sync(f.io, shell_call(*f.tools, get, "", two.get())).text() ==
          "unset\n[exit code 0]");
    const fs::path dir_one = root / (one->prefix() + "build");
    const fs::path dir_two = root / (two->prefix() + "build");
    REQUIRE(fs::exists(dir_one / "state"));
    REQUIRE(fs::is_directory(dir_two));
    one.reset();
    CHECK(gone_soon(dir_one));
    CHECK(fs::is_directory(dir_two));
    CHECK(fs::is_directory(root / "agent-ag_1"));
  }
  SECTION("an agent's sessions, its named ones too, and no other agent's") {
    REQUIRE_FALSE(f.ok("shell", json{{"command", "true"}, {"session", "web"}}, "ag_1").is_error);
    REQUIRE_FALSE(f.ok("shell", json{{"command", "true"}}, "ag_10").is_error);
    REQUIRE(fs::is_directory(root / "agent-ag_1-web"));
    f.tools->end_agent_sessions("ag_1");
    CHECK(gone_soon(root / "agent-ag_1"));
    CHECK(gone_soon(root / "agent-ag_1-web"));
    CHECK(fs::is_directory(root / "agent-ag_10"));
  }
  SECTION("at start, a dead agent's MCP sessions are swept; symlinks are removed, not followed") {
    const pid_t dead = ::fork();
    REQUIRE(dead >= 0);
    if (dead == 0) ::_exit(0);
    REQUIRE(::waitpid(dead, nullptr, 0) == dead);
    auto make_session = [&](const std::string& key) {
      REQUIRE(::mkdir((root / key).c_str(), 0700) == 0);
      std::ofstream(root / key / "state") << "export X=old\n";
      std::ofstream(root / key / "state.123") << "partial";
    };
    const std::string of_dead = fmt::format("mcp-{}-1-build", dead);
    const std::string of_me = fmt::format("mcp-{}-4-build", ::getpid());  // an earlier agent's
    const std::string of_live = "mcp-1-1-build";  // pid 1 runs: another agent's, kept
    const std::string unscoped = "mcp-build";     // no owner to outlive: kept
    for (const auto& k : {of_dead, of_me, of_live, unscoped}) make_session(k);
    const fs::path outside = f.dir.path() / "outside";
    fs::create_directories(outside);
    std::ofstream(outside / "keep") << "precious";
    const std::string link = fmt::format("mcp-{}-2-link", dead);
    fs::create_directory_symlink(outside, root / link);

    auto task = [&]() -> asio::awaitable<size_t> {
      const size_t n = co_await f.tools->sweep_sessions();
      co_return n;
    };
    CHECK(test::run_sync(f.io, task()) == 3);
    CHECK_FALSE(fs::exists(fs::symlink_status(root / of_dead)));
    CHECK_FALSE(fs::exists(fs::symlink_status(root / of_me)));
    CHECK_FALSE(fs::exists(fs::symlink_status(root / link)));
    CHECK(fs::exists(outside / "keep"));
    CHECK(fs::exists(root / of_live / "state"));
    CHECK(fs::exists(root / unscoped / "state"));
    CHECK(fs::exists(root / "agent-ag_1" / "state"));
  }
}

// The MCP transport seam: records what the session sends.
class Recorder : public mcp::RequestChannel, public mcp::SessionOutlet {
 public:
  asio::awaitable<Status> send(const mcp::Message& message) override {
    sent.push_back(message);
    co_return ok_status();
  }
  void post(mcp::Message message) override { posted.push_back(std::move(message)); }
  std::vector<mcp::Message> sent;
  std::vector<mcp::Message> posted;
};

TEST_CASE("box MCP: a shell session belongs to its MCP session and goes when that ends",
          "[agent][tools]") {
  Fixture f;
  BoxMcpTools tools(*f.tools);
  mcp::ServerOptions options;
  options.info.name = "box-test";
  options.info.version = "1";
  mcp::Server server(options, tools);
  Recorder recorder;
  mcp::TransportContext transport;
  auto session = server.open_session(f.io.get_executor(), recorder, "s1");
  int next_id = 1;
  auto request = [&](std::string method, mcp::Json params) {
    auto r = test::run_sync(
        f.io, session->handle_request(
                  mcp::Message::request(next_id++, std::move(method), std::move(params)), recorder,
                  transport));
    REQUIRE(r.has_value());
    return r->result;
  };
  request("initialize", mcp::Json{{"protocolVersion", "2025-06-18"},
                                  {"capabilities", mcp::Json::object()},
                                  {"clientInfo", {{"name", "t"}, {"version", "1"}}}});
  const mcp::Json set = {{"name", "shell"},
                         {"arguments", {{"command", "export X=1"}, {"session", "build"}}}};
  mcp::Json r = request("tools/call", set);
  INFO(r.dump());
  REQUIRE(r["structuredContent"]["session"].is_string());
  const std::string key = r["structuredContent"]["session"].get<std::string>();
  CHECK(key.rfind(fmt::format("mcp-{}-", ::getpid()), 0) == 0);
  const mcp::Json get = {{"name", "shell"},
                         {"arguments", {{"command", "echo $X"}, {"session", "build"}}}};
  CHECK(request("tools/call", get)["content"][0]["text"] == "1\n[exit code 0]");
  const fs::path dir = f.sessions() / ("cocoonbox-shell-" + std::to_string(::geteuid())) / key;
  REQUIRE(fs::exists(dir / "state"));
  session->close();
  session.reset();
  CHECK(gone_soon(dir));
}

TEST_CASE("box tools: shell sessions are private to the user", "[agent][tools]") {
  Fixture f;
  ToolResult r = f.ok("shell", json{{"command", "export SECRET=1"}}, "ag_1");
  CHECK_FALSE(r.is_error);
  const fs::path root = f.sessions() / ("cocoonbox-shell-" + std::to_string(::geteuid()));
  for (const fs::path& d : {root, root / "agent-ag_1"}) {
    struct stat st {};
    REQUIRE(::lstat(d.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(st.st_uid == ::geteuid());
  }
  SECTION("a session directory that is not private is refused, not used") {
    ::chmod((root / "agent-ag_1").c_str(), 0755);
    r = f.ok("shell", json{{"command", "echo $SECRET"}}, "ag_1");
    CHECK(r.is_error);
    CHECK(r.text().find("is not a private directory") != std::string::npos);
  }
  SECTION("a symlink planted in its place is refused") {
    fs::create_directories(f.dir.path() / "elsewhere");
    ::chmod((f.dir.path() / "elsewhere").c_str(), 0700);
    fs::create_directory_symlink(f.dir.path() / "elsewhere", root / "agent-ag_2");
    r = f.ok("shell", json{{"command", "true"}}, "ag_2");
    CHECK(r.is_error);
    CHECK(r.text().find("is not a private directory") != std::string::npos);
    CHECK(fs::is_empty(f.dir.path() / "elsewhere"));
  }
}

TEST_CASE("box tools: grep", "[agent][tools]") {
  Fixture f;
  put(f.ws() / "src/main.cc", "int main() {\n  return 0;\n}\n");
  put(f.ws() / "src/util.py", "def Main():\n    pass\n");
  put(f.ws() / ".git/config", "main = yes\n");
  put(f.ws() / "bin", std::string("main\0", 5));
  ToolResult r = f.ok("grep", json{{"pattern", "main\\("}});
  CHECK(r.text() == (f.ws() / "src/main.cc").string() + ":1:int main() {");
  r = f.ok("grep", json{{"pattern", "main"}, {"ignore_case", true}, {"glob", "*.py"}});
  CHECK(r.text() == (f.ws() / "src/util.py").string() + ":1:def Main():");
  r = f.ok("grep", json{{"pattern", "\\w+"}, {"path", "src"}, {"max_results", 2}});
  CHECK(r.structured["matches"] == 2);
  CHECK(r.structured["more"] == true);
  CHECK(r.text().find("[stopped at 2 matches") != std::string::npos);
  r = f.ok("grep", json{{"pattern", "absent_word"}});
  CHECK_FALSE(r.is_error);
  CHECK(r.text() == "no matches under " + f.ws().string());
  r = f.ok("grep", json{{"pattern", "("}});
  CHECK(r.is_error);
  CHECK(r.text().find("grep:") == 0);
}

TEST_CASE("box tools: as root they act as the desktop user", "[agent][tools]") {
  if (::geteuid() != 0 || !proc::lookup_user("nobody").ok()) {
    WARN("skipped: needs root and a 'nobody' account");
    return;
  }
  Fixture f("nobody");
  const auto nobody = proc::lookup_user("nobody").value();
  ::chmod(f.dir.path().c_str(), 0755);
  fs::create_directories(f.ws() / "mine");
  REQUIRE(::chown((f.ws() / "mine").c_str(), nobody.uid, nobody.gid) == 0);
  // The workspace itself is root's and 0755: nobody may read it but not write into it.
  ::chmod(f.ws().c_str(), 0755);
  put(f.ws() / "root-only", "secret");
  ::chmod((f.ws() / "root-only").c_str(), 0600);

  ToolResult r = f.ok("write_file", json{{"path", "denied.txt"}, {"content", "x"}});
  CHECK(r.is_error);
  CHECK(r.text().find("Permission denied") != std::string::npos);
  CHECK_FALSE(fs::exists(f.ws() / "denied.txt"));
  r = f.ok("read_file", json{{"path", "root-only"}});
  CHECK(r.is_error);
  CHECK(r.text().find("Permission denied") != std::string::npos);

  r = f.ok("write_file", json{{"path", "mine/ok.txt"}, {"content", "x"}});
  CHECK_FALSE(r.is_error);
  struct stat st {};
  REQUIRE(::stat((f.ws() / "mine/ok.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == nobody.uid);
  CHECK(st.st_gid == nobody.gid);

  // Processes run as nobody too: with nobody's login shell (nologin), and grep as nobody.
  r = f.ok("shell", json{{"command", "id -un"}});
  CHECK(r.text() == "This account is currently not available.\n[exit code 1]");
  r = f.ok("grep", json{{"pattern", "secret"}, {"path", "root-only"}});
  CHECK(r.is_error);
  CHECK(r.text().find("Permission denied") != std::string::npos);
  r = f.ok("list_dir", json::object());
  CHECK_FALSE(r.is_error);

  // A shell session is nobody's: its directories belong to nobody, 0700, and it works.
  ::chmod(f.sessions().c_str(), 0755);
  r = f.ok("shell", json{{"command", "cd mine; export X=kept"}}, "ag_1");
  CHECK(r.text() == "[exit code 0]");
  r = f.ok("shell", json{{"command", "echo $PWD $X; id -u"}}, "ag_1");
  CHECK(r.text() ==
        (f.ws() / "mine").string() + " kept\n" + std::to_string(nobody.uid) + "\n[exit code 0]");
  const fs::path root = f.sessions() / ("cocoonbox-shell-" + std::to_string(nobody.uid));
  for (const fs::path& d : {root, root / "agent-ag_1"}) {
    struct stat st {};
    REQUIRE(::lstat(d.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(st.st_uid == nobody.uid);
  }
}

}  // namespace
}  // namespace cb::agent
