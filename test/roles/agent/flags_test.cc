// Flags of `cocoonbox agent`: address parsing, the default data directory, usage exit codes.

#include "roles/agent/flags.h"

#include "roles/agent/agent.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

namespace cb::agent {
namespace {

// argv-style storage for parse_flags()/run().
struct Args {
  explicit Args(std::vector<std::string> words) : storage(std::move(words)) {
    for (auto& w : storage) ptrs.push_back(w.data());
  }
  std::span<char* const> span() const { return ptrs; }
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
};

TEST_CASE("parse_host_port: accepts IPv4, bracketed IPv6 and localhost", "[agent][unit]") {
  auto v4 = parse_host_port("127.0.0.1:0");
  REQUIRE(v4.ok());
  CHECK(v4->host == "127.0.0.1");
  CHECK(v4->port == 0);
  CHECK(v4->to_string() == "127.0.0.1:0");

  auto v6 = parse_host_port("[::1]:7443");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->port == 7443);
  CHECK(v6->to_string() == "[::1]:7443");

  auto local = parse_host_port("localhost:65535");
  REQUIRE(local.ok());
  CHECK(local->host == "127.0.0.1");
  CHECK(local->port == 65535);
}

TEST_CASE("parse_host_port: refuses malformed addresses", "[agent][unit]") {
  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:8x",
        "::1:80", "[::1]80", "[::1", "example.com:80", "127.0.0.1:+80"}) {
    INFO(bad);
    auto r = parse_host_port(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) {
      CHECK(r.status().code() == Code::kInvalidArgument);
    }
  }
}

TEST_CASE("is_loopback: only 127/8 and ::1", "[agent][unit]") {
  CHECK(is_loopback(*parse_host_port("127.0.0.1:1")));
  CHECK(is_loopback(*parse_host_port("127.1.2.3:1")));
  CHECK(is_loopback(*parse_host_port("[::1]:1")));
  CHECK_FALSE(is_loopback(*parse_host_port("0.0.0.0:1")));
  CHECK_FALSE(is_loopback(*parse_host_port("[::]:1")));
  CHECK_FALSE(is_loopback(*parse_host_port("10.0.0.1:1")));
}

TEST_CASE("default_data_dir: root, XDG_DATA_HOME, then HOME", "[agent][unit]") {
  CHECK(*default_data_dir(true, "/x", "/home/u") == "/var/lib/cocoonbox-agent");
  CHECK(*default_data_dir(false, "/x/data", "/home/u") == "/x/data/cocoonbox-agent");
  CHECK(*default_data_dir(false, nullptr, "/home/u") == "/home/u/.local/share/cocoonbox-agent");
  CHECK(*default_data_dir(false, "relative", "/home/u") == "/home/u/.local/share/cocoonbox-agent");
  CHECK(*default_data_dir(false, "", "/home/u") == "/home/u/.local/share/cocoonbox-agent");
  CHECK_FALSE(default_data_dir(false, nullptr, nullptr).ok());
}

TEST_CASE("parse_flags: defaults and explicit values", "[agent][unit]") {
  Args args({"agent", "--socket", "/tmp/a.sock", "--identity", "/tmp/id", "--data-dir", "/tmp/d",
             "--listen", "127.0.0.1:0"});
  auto parsed = parse_flags(args.span());
  REQUIRE(std::holds_alternative<Flags>(parsed));
  const Flags& f = std::get<Flags>(parsed);
  CHECK(f.socket_path == "/tmp/a.sock");
  CHECK(f.identity_path == "/tmp/id");
  CHECK(f.data_dir == "/tmp/d");
  REQUIRE(f.listen);
  CHECK(f.listen->to_string() == "127.0.0.1:0");

  Args bare({"agent"});
  auto defaults = parse_flags(bare.span());
  REQUIRE(std::holds_alternative<Flags>(defaults));
  CHECK(std::get<Flags>(defaults).socket_path == "/run/cocoonbox/agent.sock");
  CHECK(std::get<Flags>(defaults).identity_path == "/run/cocoonbox/identity");
  CHECK_FALSE(std::get<Flags>(defaults).data_dir.empty());
  CHECK_FALSE(std::get<Flags>(defaults).listen);
  CHECK(std::get<Flags>(defaults).desktop_user == "user");
  CHECK(std::get<Flags>(defaults).workspace == "/workspace");

  Args exec({"agent", "--data-dir", "/tmp/d", "--desktop-user", "dev", "--workspace", "/srv/w"});
  auto e = parse_flags(exec.span());
  REQUIRE(std::holds_alternative<Flags>(e));
  CHECK(std::get<Flags>(e).desktop_user == "dev");
  CHECK(std::get<Flags>(e).workspace == "/srv/w");
}

TEST_CASE("parse_flags: COCOONBOX_DESKTOP_USER is --desktop-user's default", "[agent][unit]") {
  ::setenv("COCOONBOX_DESKTOP_USER", "cocoonbox-box-desk", 1);
  Args bare({"agent", "--data-dir", "/tmp/d"});
  auto from_env = parse_flags(bare.span());
  Args given({"agent", "--data-dir", "/tmp/d", "--desktop-user", "dev"});
  auto explicit_flag = parse_flags(given.span());
  ::setenv("COCOONBOX_DESKTOP_USER", "", 1);
  auto empty = parse_flags(bare.span());
  ::unsetenv("COCOONBOX_DESKTOP_USER");
  REQUIRE(std::holds_alternative<Flags>(from_env));
  CHECK(std::get<Flags>(from_env).desktop_user == "cocoonbox-box-desk");
  REQUIRE(std::holds_alternative<Flags>(explicit_flag));
  CHECK(std::get<Flags>(explicit_flag).desktop_user == "dev");
  REQUIRE(std::holds_alternative<Flags>(empty));
  CHECK(std::get<Flags>(empty).desktop_user == "user");
}

TEST_CASE("parse_flags: a non-loopback --listen needs --allow-remote", "[agent][unit]") {
  Args refused({"agent", "--data-dir", "/tmp/d", "--listen", "0.0.0.0:7000"});
  auto r = parse_flags(refused.span());
  REQUIRE(std::holds_alternative<int>(r));
  CHECK(std::get<int>(r) == 2);

  Args allowed({"agent", "--data-dir", "/tmp/d", "--listen", "0.0.0.0:7000", "--allow-remote"});
  auto a = parse_flags(allowed.span());
  REQUIRE(std::holds_alternative<Flags>(a));
  CHECK(std::get<Flags>(a).allow_remote);
}

TEST_CASE("run: usage errors exit 2, --help and --version exit 0", "[agent][unit]") {
  for (std::vector<std::string> words :
       std::vector<std::vector<std::string>>{{"agent", "--no-such-flag"},
                                             {"agent", "extra"},
                                             {"agent", "--listen", "nonsense"},
                                             {"agent", "--listen"},
                                             {"agent", "--allow-remote"},
                                             {"agent", "--socket", ""},
                                             {"agent", "--workspace", "relative"}}) {
    INFO(words.back());
    Args args(words);
    CHECK(run(args.span()) == 2);
  }
  Args help({"agent", "--help"});
  CHECK(run(help.span()) == 0);
  Args version({"agent", "--version"});
  CHECK(run(version.span()) == 0);
}

}  // namespace
}  // namespace cb::agent

namespace cb::agent {

TEST_CASE("parse_flags: the model flags, and the model door's default", "[agent][unit]") {
  Args args({"agent", "--data-dir", "/tmp/d", "--model", "gpt-x", "--model-wire", "anthropic",
             "--model-vision", "--model-context-tokens", "200000", "--model-endpoint",
             "http://127.0.0.1:9", "--max-steps", "7", "--approval-timeout", "30"});
  auto parsed = parse_flags(args.span());
  REQUIRE(std::holds_alternative<Flags>(parsed));
  const Flags& f = std::get<Flags>(parsed);
  CHECK(f.model == "gpt-x");
  CHECK(f.model_wire == "anthropic");
  CHECK(f.model_vision);
  CHECK(f.model_context_tokens == 200000);
  CHECK(f.model_endpoint == "http://127.0.0.1:9");
  CHECK(f.max_steps == 7);
  CHECK(f.approval_timeout_s == 30);

  ::unsetenv("COCOONBOX_RUN_DIR");
  Args bare({"agent", "--data-dir", "/tmp/d"});
  auto defaults = parse_flags(bare.span());
  REQUIRE(std::holds_alternative<Flags>(defaults));
  CHECK(std::get<Flags>(defaults).model.empty());
  CHECK(std::get<Flags>(defaults).model_wire == "openai");
  CHECK(std::get<Flags>(defaults).model_endpoint == "unix:/run/cocoonbox/model.sock");
  ::setenv("COCOONBOX_RUN_DIR", "/tmp/box/run", 1);
  auto in_box = parse_flags(bare.span());
  ::unsetenv("COCOONBOX_RUN_DIR");
  REQUIRE(std::holds_alternative<Flags>(in_box));
  CHECK(std::get<Flags>(in_box).model_endpoint == "unix:/tmp/box/run/model.sock");

  Args bad_wire({"agent", "--data-dir", "/tmp/d", "--model-wire", "grpc"});
  auto bad = parse_flags(bad_wire.span());
  REQUIRE(std::holds_alternative<int>(bad));
  CHECK(std::get<int>(bad) == 2);
}

}  // namespace cb::agent
