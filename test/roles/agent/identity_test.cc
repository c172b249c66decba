// IdentityStore on its own: no network. The identity file is rewritten in place, within the
// same second, as a careless writer would, and every rewrite must still be seen.

#include "roles/agent/identity.h"

#include "base/clock.h"
#include "test_util.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>

namespace cb::agent {
namespace {

using test::fresh_credential;
using test::identity_json;
using test::TempDir;
using test::write_file;

http::Headers with_credential(const std::string& credential) {
  http::Headers h;
  h.push_back({"content-type", "application/grpc"});
  h.push_back({std::string(kCredentialHeader), credential});
  return h;
}

TEST_CASE("IdentityStore: a missing file is UNAVAILABLE until the api delivers it",
          "[agent][unit]") {
  TempDir dir;
  crypto::SeededRandom random(1);
  const auto key = crypto::SigningKey::generate(random);
  IdentityStore store(dir / "identity", system_clock());

  auto missing = store.current();
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Code::kUnavailable);
  CHECK_THAT(std::string(missing.status().message()),
             Catch::Contains("identity not delivered yet"));

  write_file(dir / "identity", identity_json(key, "k1", "box-1", "wake-aaaa"));
  auto loaded = store.current();
  REQUIRE(loaded.ok());
  CHECK((*loaded)->identity().box_id == "box-1");
  CHECK((*loaded)->identity().wake_id == "wake-aaaa");
  CHECK((*loaded)->identity().key_id == "k1");
}

TEST_CASE("IdentityStore: an in-place rewrite of the same size is seen on the next call",
          "[agent][unit]") {
  TempDir dir;
  crypto::SeededRandom random(2);
  const auto key = crypto::SigningKey::generate(random);
  const std::string path = dir / "identity";
  IdentityStore store(path, system_clock());

  write_file(path, identity_json(key, "k1", "box-1", "wake-aaaa"));
  const std::string old_cred = fresh_credential(key, "k1", "box-1", "wake-aaaa");
  CHECK(store.check(with_credential(old_cred)).ok());

  // Same length, same inode, most likely the same mtime tick.
  write_file(path, identity_json(key, "k1", "box-1", "wake-bbbb"));
  Status old_st = store.check(with_credential(old_cred));
  CHECK(old_st.code() == Code::kUnauthenticated);
  CHECK_THAT(std::string(old_st.message()), Catch::Contains("wake_id"));
  CHECK(store.check(with_credential(fresh_credential(key, "k1", "box-1", "wake-bbbb"))).ok());
}

TEST_CASE("IdentityStore: an invalid or unreadable file is UNAVAILABLE, and recovers",
          "[agent][unit]") {
  TempDir dir;
  crypto::SeededRandom random(3);
  const auto key = crypto::SigningKey::generate(random);
  const std::string path = dir / "identity";
  IdentityStore store(path, system_clock());

  SECTION("half-written JSON") {
    write_file(path, "{\"box_id\":\"bo");
    auto r = store.current();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("is invalid"));
  }
  SECTION("a directory") {
    std::filesystem::create_directory(path);
    auto r = store.current();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("not a regular file"));
    std::filesystem::remove(path);
  }
  SECTION("too large") {
    write_file(path, std::string(kMaxIdentityFileSize + 1, ' '));
    auto r = store.current();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kUnavailable);
  }
  write_file(path, identity_json(key, "k1", "box-1", "wake-aaaa"));
  CHECK(store.current().ok());
  // And it goes away again.
  std::filesystem::remove(path);
  auto gone = store.current();
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.status().code() == Code::kUnavailable);
}

TEST_CASE("IdentityStore: check wants exactly one credential header", "[agent][unit]") {
  TempDir dir;
  crypto::SeededRandom random(4);
  const auto key = crypto::SigningKey::generate(random);
  const std::string path = dir / "identity";
  write_file(path, identity_json(key, "k1", "box-1", "wake-aaaa"));
  IdentityStore store(path, system_clock());
  const std::string cred = fresh_credential(key, "k1", "box-1", "wake-aaaa");

  Status none = store.check({});
  CHECK(none.code() == Code::kUnauthenticated);
  CHECK_THAT(std::string(none.message()), Catch::Contains("missing x-cocoonbox-credential"));

  http::Headers two = with_credential(cred);
  two.push_back({std::string(kCredentialHeader), cred});
  Status dup = store.check(two);
  CHECK(dup.code() == Code::kUnauthenticated);
  CHECK_THAT(std::string(dup.message()), Catch::Contains("several"));

  CHECK(store.check(with_credential(cred)).ok());
}

TEST_CASE("IdentityStore: a missing header is UNAUTHENTICATED even before the identity exists",
          "[agent][unit]") {
  TempDir dir;
  IdentityStore store(dir / "identity", system_clock());
  CHECK(store.check({}).code() == Code::kUnauthenticated);
  CHECK(store.check(with_credential("v1.x.y")).code() == Code::kUnavailable);
}

}  // namespace
}  // namespace cb::agent
