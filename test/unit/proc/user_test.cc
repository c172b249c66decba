#include "proc/user.h"

#include "support/temp_dir.h"

#include <catch2/catch.hpp>

#include <fstream>

namespace cb::proc {
namespace {

using test::TempDir;

TEST_CASE("lookup_user: reads passwd and collects supplementary groups", "[proc][unit]") {
  TempDir dir;
  {
    std::ofstream passwd(dir.file("passwd"));
    passwd << "root:x:0:0:root:/root:/bin/bash\n"
              "# a comment\n"
              "broken:x:notanumber:1:::\n"
              "alice:x:1000:1000:Alice,,,:/home/alice:/bin/zsh\n";
    std::ofstream group(dir.file("group"));
    group << "root:x:0:\n"
             "alice:x:1000:\n"
             "sudo:x:27:bob,alice\n"
             "docker:x:999:alice\n"
             "audio:x:29:bob\n";
  }
  auto alice = lookup_user_in("alice", dir.file("passwd"), dir.file("group"));
  REQUIRE(alice.ok());
  CHECK(alice->name == "alice");
  CHECK(alice->uid == 1000);
  CHECK(alice->gid == 1000);
  CHECK(alice->home == "/home/alice");
  CHECK(alice->shell == "/bin/zsh");
  CHECK(alice->groups == std::vector<gid_t>{1000, 27, 999});

  CHECK(lookup_user_in("bob", dir.file("passwd"), dir.file("group")).status().code() ==
        Code::kNotFound);
  CHECK(lookup_user_in("broken", dir.file("passwd"), dir.file("group")).status().code() ==
        Code::kNotFound);
  CHECK(lookup_user_in("alice", dir.file("missing"), dir.file("group")).status().code() ==
        Code::kInternal);
  auto no_groups = lookup_user_in("root", dir.file("passwd"), dir.file("missing"));
  REQUIRE(no_groups.ok());
  CHECK(no_groups->groups == std::vector<gid_t>{0});
}

TEST_CASE("lookup_uid: finds the first account with a uid, with its groups", "[proc][unit]") {
  TempDir dir;
  {
    std::ofstream passwd(dir.file("passwd"));
    passwd << "root:x:0:0:root:/root:/bin/bash\n"
              "broken:x:1000:x:::\n"
              "alice:x:1000:1000:Alice:/home/alice:/bin/zsh\n"
              "alias:x:1000:1000:Alias:/home/alias:/bin/sh\n";
    std::ofstream group(dir.file("group"));
    group << "sudo:x:27:alice\n";
  }
  auto alice = lookup_uid_in(1000, dir.file("passwd"), dir.file("group"));
  REQUIRE(alice.ok());
  CHECK(alice->name == "alice");
  CHECK(alice->home == "/home/alice");
  CHECK(alice->groups == std::vector<gid_t>{1000, 27});
  CHECK(lookup_uid_in(4242, dir.file("passwd"), dir.file("group")).status().code() ==
        Code::kNotFound);
  auto root = lookup_uid(0);
  REQUIRE(root.ok());
  CHECK(root->name == "root");
}

TEST_CASE("lookup_user: finds root in /etc/passwd", "[proc][unit]") {
  auto root = lookup_user("root");
  REQUIRE(root.ok());
  CHECK(root->uid == 0);
  CHECK(root->gid == 0);
  CHECK(lookup_user("cb-no-such-user").status().code() == Code::kNotFound);
}

}  // namespace
}  // namespace cb::proc
