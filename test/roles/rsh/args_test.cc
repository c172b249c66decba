#include "roles/rsh/args.h"

#include <catch2/catch.hpp>

namespace cb::rsh {
namespace {

Args parse_ok(std::vector<std::string> words) {
  auto r = parse_args(words);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("rsh args: people, git and rsync", "[rsh][unit]") {
  // A person: the command's words are one shell command line.
  Args a = parse_ok({"--box", "main", "uname -a; false; exit 42"});
  CHECK(a.box == "main");
  CHECK(a.command == "uname -a; false; exit 42");
  CHECK_FALSE(a.pty.has_value());
  a = parse_ok({"ls", "-la", "/workspace"});
  CHECK(a.box.empty());
  CHECK(a.command == "ls -la /workspace");
  a = parse_ok({"-t"});
  CHECK(a.pty == true);
  CHECK(a.command.empty());

  // git, ssh variant after a successful probe, and the simple variant.
  a = parse_ok(
      {"-o", "SendEnv=GIT_PROTOCOL", "-p", "2222", "box", "git-upload-pack '/workspace/r'"});
  CHECK(a.send_git_protocol);
  CHECK(a.box.empty());
  CHECK(a.command == "git-upload-pack '/workspace/r'");
  a = parse_ok({"--box", "main", "box", "git-receive-pack '/workspace/r'"});
  CHECK(a.box == "main");
  CHECK(a.command == "git-receive-pack '/workspace/r'");
  a = parse_ok({"--box", "main", "-G", "box"});
  CHECK(a.probe);

  // rsync: -l USER HOST rsync --server ...
  a = parse_ok({"-l", "user", "work.box", "rsync", "--server", "-vlogDtpre.iLsfxCIvu", ".", "/w/"});
  CHECK(a.box == "work");
  CHECK(a.command == "rsync --server -vlogDtpre.iLsfxCIvu . /w/");
  a = parse_ok({"user@box", "rsync", "--server", "."});
  CHECK(a.box.empty());
  CHECK(a.command == "rsync --server .");
}

TEST_CASE("rsh args: unknown ssh options and conflicting boxes are refused", "[rsh][unit]") {
  for (std::vector<std::string> bad :
       std::vector<std::vector<std::string>>{{"-A", "box", "true"},
                                             {"-o", "ProxyCommand=evil", "box", "true"},
                                             {"-L", "8080:localhost:80", "box", "true"},
                                             {"--box"},
                                             {"--box", "main", "work.box", "true"}}) {
    auto r = parse_args(bad);
    INFO(bad[0]);
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  auto r = parse_args({"-o", "ForwardAgent=yes", "box", "true"});
  CHECK(r.status().message().find("ForwardAgent=yes") != std::string_view::npos);
}

TEST_CASE("rsh args: HOST forms", "[rsh][unit]") {
  std::string box = "x";
  CHECK(parse_host("box", &box));
  CHECK(box.empty());
  CHECK(parse_host("me@dev.box", &box));
  CHECK(box == "dev");
  CHECK_FALSE(parse_host("uname", &box));
  CHECK_FALSE(parse_host("Bad_Name.box", &box));
  CHECK_FALSE(parse_host(".box", &box));
}

}  // namespace
}  // namespace cb::rsh
