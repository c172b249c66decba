// The api's state rules (roles/api/state_rules.h): the door's signed chunk URLs, the restore
// path and target checks of seed §25.4, and StateLocks (roles/api/state_locks.h).

#include "roles/api/state_rules.h"

#include "crypto/keys.h"
#include "crypto/random.h"
#include "roles/api/state_locks.h"
#include "support/run_sync.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cb::api {
namespace {

crypto::SymmetricKey key_from(uint64_t seed) {
  crypto::SeededRandom random(seed);
  return crypto::SymmetricKey::generate(random);
}

constexpr std::string_view kKey = "u1/chunks/ab/abcdef";

TEST_CASE("ChunkUrlSigner: a signed URL verifies for its method and key until it expires",
          "[api][state][unit]") {
  auto master = key_from(1);
  ChunkUrlSigner signer(master);
  std::string url = signer.sign("PUT", kKey, 1000);
  CHECK(url.rfind("/cocoonbox.state/v1/o/u1/chunks/ab/abcdef?exp=1000&sig=", 0) == 0);
  auto key = signer.verify("PUT", url, 999);
  REQUIRE(key.ok());
  CHECK(*key == kKey);
  CHECK(signer.verify("PUT", url, 1000).ok());  // valid through its expiry second

  SECTION("expired") {
    auto r = signer.verify("PUT", url, 1001);
    CHECK(r.status().code() == Code::kPermissionDenied);
    CHECK(std::string(r.status().message()).find("expired") != std::string::npos);
  }
  SECTION("another method") {
    CHECK(signer.verify("GET", url, 10).status().code() == Code::kPermissionDenied);
  }
  SECTION("another master key") {
    auto other = key_from(2);
    ChunkUrlSigner stranger(other);
    CHECK(stranger.verify("PUT", url, 10).status().code() == Code::kPermissionDenied);
    CHECK(stranger.sign("PUT", kKey, 1000) != url);
  }
  SECTION("a tampered path") {
    std::string moved = url;
    moved.replace(moved.find("abcdef"), 6, "abcdee");
    CHECK(signer.verify("PUT", moved, 10).status().code() == Code::kPermissionDenied);
    std::string other_user = url;
    other_user.replace(other_user.find("u1/"), 3, "u2/");
    CHECK(signer.verify("PUT", other_user, 10).status().code() == Code::kPermissionDenied);
  }
  SECTION("a later expiry with the old signature") {
    std::string later = url;
    later.replace(later.find("exp=1000"), 8, "exp=9000");
    CHECK(signer.verify("PUT", later, 10).status().code() == Code::kPermissionDenied);
  }
  SECTION("a changed signature, or none") {
    std::string bad = url;
    bad.back() = bad.back() == '0' ? '1' : '0';
    CHECK(signer.verify("PUT", bad, 10).status().code() == Code::kPermissionDenied);
    std::string bare = url.substr(0, url.find('?'));
    CHECK(signer.verify("PUT", bare, 10).status().code() == Code::kPermissionDenied);
  }
  SECTION("not a state object URL") {
    CHECK(signer.verify("PUT", "/v1/models", 10).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("restore_scope: box paths under the roots become manifest paths", "[api][state][unit]") {
  std::vector<std::string> in = {"/workspace/t/file-2", "/home/user/Documents/", "/workspace"};
  auto out = restore_scope(in);
  REQUIRE(out.ok());
  CHECK(*out == std::vector<std::string>{"workspace/t/file-2", "home/user/Documents", "workspace"});
}

TEST_CASE(
    "restore_scope: paths outside the roots, with .., or relative are refused naming "
    "the field",
    "[api][state][unit]") {
  auto refused = [](std::vector<std::string> paths, std::string_view field,
                    std::string_view words) {
    auto r = restore_scope(paths);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    std::string msg(r.status().message());
    CHECK(msg.find(field) != std::string::npos);
    CHECK(msg.find(words) != std::string::npos);
  };
  refused({"/etc/passwd"}, "paths[0]", "outside /home/user and /workspace");
  refused({"/workspace/a", "/home/user/../../etc"}, "paths[1]", "\"..\"");
  refused({"/workspace/../etc"}, "paths[0]", "\"..\"");
  refused({"workspace/a"}, "paths[0]", "not an absolute box path");
  refused({"/home/username"}, "paths[0]", "outside");  // a sibling, not within /home/user
  refused({"/workspace//a"}, "paths[0]", "empty");
  refused({"/workspace/./a"}, "paths[0]", "\".\"");
  refused({"/"}, "paths[0]", "outside");
  refused({}, "paths", "at least one");
}

TEST_CASE("check_restore_target: one folder name only", "[api][state][unit]") {
  CHECK(check_restore_target("2026-10-02T160812Z").ok());
  CHECK(check_restore_target("before the refactor").ok());
  const std::vector<std::string> bads = {"",   "a/b",           "/abs",      ".",
                                         "..", ".cb-restore-x", "tab\there", std::string(256, 'a')};
  for (const std::string& bad : bads) {
    auto st = check_restore_target(bad);
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(std::string(st.message()).rfind("target", 0) == 0);
  }
}

TEST_CASE("default_restore_target: the save time in UTC", "[api][state][unit]") {
  CHECK(default_restore_target(1790000000123) == "2026-09-21T141320Z");
}

TEST_CASE("browse_dir: the top, or a box path", "[api][state][unit]") {
  CHECK(*browse_dir("") == "");
  CHECK(*browse_dir("/") == "");
  CHECK(*browse_dir("/workspace/t/") == "workspace/t");
  CHECK(browse_dir("workspace").status().code() == Code::kInvalidArgument);
  CHECK(browse_dir("/workspace/../etc").status().code() == Code::kInvalidArgument);
}

TEST_CASE("StateLocks: an exclusive user lock waits for shared holders and blocks new ones",
          "[api][state][unit]") {
  asio::io_context io;
  StateLocks locks(io.get_executor());
  std::vector<std::string> order;
  auto run = [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto first = co_await locks.user_shared("u1");
    REQUIRE(first.ok());
    order.push_back("shared 1");
    // The sweep asks while a save holds the lock: it waits.
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          auto g = co_await locks.user_exclusive("u1");
          order.push_back("exclusive");
          net::Timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
          co_await t.async_wait();
          order.push_back("exclusive done");
        },
        asio::detached);
    // A later save waits behind the sweep.
    asio::co_spawn(
        ex,
        [&]() -> asio::awaitable<void> {
          auto g = co_await locks.user_shared("u1");
          order.push_back("shared 2");
        },
        asio::detached);
    // Another user's saves are not held up.
    auto other = co_await locks.user_shared("u2");
    REQUIRE(other.ok());
    order.push_back("other user");
    net::Timer t(ex, std::chrono::milliseconds(1));
    co_await t.async_wait();
    order.push_back("shared 1 done");
  };
  test::run_sync(io, run());
  CHECK(order == std::vector<std::string>{"shared 1", "other user", "shared 1 done", "exclusive",
                                          "exclusive done", "shared 2"});
  CHECK(locks.user_readers("u1") == 0);
}

TEST_CASE("StateLocks: saves of one box take turns", "[api][state][unit]") {
  asio::io_context io;
  StateLocks locks(io.get_executor());
  int inside = 0;
  int max_inside = 0;
  auto one = [&]() -> asio::awaitable<void> {
    auto g = co_await locks.box("bx_1");
    ++inside;
    max_inside = std::max(max_inside, inside);
    net::Timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
    co_await t.async_wait();
    --inside;
  };
  for (int i = 0; i < 3; ++i) asio::co_spawn(io, one(), asio::detached);
  io.run();
  CHECK(max_inside == 1);
  CHECK(inside == 0);
}

}  // namespace
}  // namespace cb::api
