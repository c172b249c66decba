// S3Store against a real S3 server that verifies signatures: Ceph's radosgw, started on
// loopback by run_s3.sh, which passes it in the environment:
//   CB_S3_ENDPOINT     http://127.0.0.1:<port>
//   CB_S3_TLS_ENDPOINT https://127.0.0.1:<port> (the same gateway over TLS)
//   CB_S3_CA_FILE      the PEM certificate of the TLS endpoint
//   CB_S3_BUCKET       an existing, empty bucket
//   CB_S3_ACCESS_KEY   the access key id
//   CB_S3_SECRET_FILE  a file holding the secret
// Not registered with catch_discover_tests: without the gateway every case fails, so it runs
// only through run_s3.sh (ctest: interop_s3_radosgw).

#include "base/clock.h"
#include "crypto/random.h"
#include "state/restore.h"
#include "state/s3_store.h"
#include "state/save.h"
#include "state/store_url.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"
#include "unit/state/store_contract.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace cb::state {
namespace {

using namespace std::chrono_literals;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  INFO("environment variable " << name << " (set by test/state/run_s3.sh)");
  REQUIRE(v != nullptr);
  return v;
}

// A prefix no other case uses, so cases share the bucket without seeing each other.
std::string fresh_prefix() {
  static std::atomic<int> n{0};
  uint8_t b[4];
  crypto::system_random().fill(b);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "t%d-%02x%02x%02x%02x", n++, b[0], b[1], b[2], b[3]);
  return buf;
}

S3Store::Options options(const std::string& prefix) {
  S3Store::Options o;
  o.endpoint = env("CB_S3_ENDPOINT");
  o.bucket = env("CB_S3_BUCKET");
  o.access_key_id = env("CB_S3_ACCESS_KEY");
  auto secret = read_secret_file(env("CB_S3_SECRET_FILE"));
  REQUIRE(secret.ok());
  o.secret_access_key = *secret;
  o.prefix = prefix;
  o.backoff_base = 50ms;
  return o;
}

std::unique_ptr<S3Store> open(S3Store::Options o) {
  auto store = S3Store::open(std::move(o));
  INFO(store.status().to_string());
  REQUIRE(store.ok());
  return std::move(store).value();
}

// Runs curl with |args| (each single-quoted; none may contain a quote); returns the HTTP
// status it printed, and the response body in |body|.
int curl(const std::string& args, std::string* body, const test::TempDir& dir) {
  const std::string out = (dir.path() / "curl.out").string();
  std::string cmd = "curl -sS -o '" + out + "' -w '%{http_code}' " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[64] = {};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, p);
  REQUIRE(::pclose(p) == 0);
  if (body != nullptr) *body = test_util::read_file(out);
  return std::atoi(std::string(buf, n).c_str());
}

TEST_CASE("S3Store on radosgw: passes the Store contract", "[state][s3][radosgw]") {
  auto store = open(options(fresh_prefix()));
  REQUIRE(store->check_bucket().ok());
  test_util::check_store_contract(*store);
}

TEST_CASE("S3Store on radosgw: passes the Store contract over TLS", "[state][s3][radosgw]") {
  S3Store::Options o = options(fresh_prefix());
  o.endpoint = env("CB_S3_TLS_ENDPOINT");
  o.ca_file = env("CB_S3_CA_FILE");
  auto store = open(std::move(o));
  test_util::check_store_contract(*store);

  SECTION("a server certificate nobody vouches for is refused") {
    S3Store::Options untrusted = options(fresh_prefix());
    untrusted.endpoint = env("CB_S3_TLS_ENDPOINT");
    untrusted.max_attempts = 1;
    auto s = open(std::move(untrusted));
    Status put = s->put("k", "v");
    CHECK(put.code() == Code::kUnavailable);
  }
}

TEST_CASE("S3Store on radosgw: a wrong secret fails with kPermissionDenied",
          "[state][s3][radosgw]") {
  const std::string prefix = fresh_prefix();
  auto good = open(options(prefix));
  REQUIRE(good->put("k", "v").ok());

  S3Store::Options o = options(prefix);
  o.secret_access_key += "x";
  auto bad = open(std::move(o));
  Status put = bad->put("k2", "v");
  CHECK(put.code() == Code::kPermissionDenied);
  CHECK(put.message().find("403 SignatureDoesNotMatch") != std::string::npos);
  CHECK(bad->get("k").status().code() == Code::kPermissionDenied);
  CHECK(bad->stat("k").status().code() == Code::kPermissionDenied);
  CHECK(bad->list("", "").status().code() == Code::kPermissionDenied);
  std::vector<std::string> keys = {"k"};
  CHECK(bad->delete_batch(keys).code() == Code::kPermissionDenied);
  // Nothing was written or deleted with the wrong secret.
  CHECK(good->stat("k2").status().code() == Code::kNotFound);
  CHECK(*good->get("k") == "v");

  S3Store::Options stranger = options(prefix);
  stranger.access_key_id = "NOSUCHKEY0000000000";
  Status who = open(std::move(stranger))->put("k3", "v");
  CHECK(who.code() == Code::kPermissionDenied);
  CHECK(who.message().find("InvalidAccessKeyId") != std::string::npos);
}

TEST_CASE("S3Store on radosgw: a missing bucket is kFailedPrecondition, not a missing object",
          "[state][s3][radosgw]") {
  S3Store::Options o = options("");
  o.bucket = "no-such-bucket-" + fresh_prefix();
  auto store = open(std::move(o));
  CHECK(store->get("k").status().code() == Code::kFailedPrecondition);
  CHECK(store->put("k", "v").code() == Code::kFailedPrecondition);
  CHECK(store->check_bucket().code() == Code::kFailedPrecondition);
}

TEST_CASE("S3Store on radosgw: many threads share one store", "[state][s3][radosgw]") {
  auto store = open(options(fresh_prefix()));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        std::string key = "w" + std::to_string(t) + "/" + std::to_string(i);
        std::string value(size_t(100 + i * 37), char('a' + t));
        if (!store->put(key, value).ok()) ++failures;
        auto got = store->get(key);
        if (!got.ok() || *got != value) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  auto all = list_all(*store, "");
  REQUIRE(all.ok());
  CHECK(all->size() == 160);
}

TEST_CASE("S3Store on radosgw: presigned URLs work with curl until they expire",
          "[state][s3][radosgw]") {
  test::TempDir dir;
  auto store = open(options(fresh_prefix()));
  REQUIRE(store->put("u/chunks/ab/abcd", "sealed chunk bytes").ok());

  auto get = store->presign_get("u/chunks/ab/abcd", 300s);
  REQUIRE(get.ok());
  std::string body;
  CHECK(curl("'" + *get + "'", &body, dir) == 200);
  CHECK(body == "sealed chunk bytes");

  // PUT through a presigned URL, read back with the store.
  const std::string upload = (dir.path() / "upload").string();
  {
    std::ofstream f(upload, std::ios::binary);
    f << std::string(70000, 'z') << "end";
  }
  auto put = store->presign_put("u/chunks/cd/cdef", 300s);
  REQUIRE(put.ok());
  CHECK(curl("-X PUT --data-binary '@" + upload + "' '" + *put + "'", nullptr, dir) == 200);
  auto stored = store->get("u/chunks/cd/cdef");
  REQUIRE(stored.ok());
  CHECK(*stored == std::string(70000, 'z') + "end");

  SECTION("expired") {
    auto old = store->presign_get("u/chunks/ab/abcd", 60s, std::chrono::system_clock::now() - 2h);
    REQUIRE(old.ok());
    CHECK(curl("'" + *old + "'", &body, dir) == 403);
  }
  SECTION("tampered: another object") {
    std::string other = *get;
    other.replace(other.find("/ab/abcd"), 8, "/cd/cdef");
    CHECK(curl("'" + other + "'", &body, dir) == 403);
  }
  SECTION("tampered: a longer expiry") {
    std::string longer = *get;
    longer.replace(longer.find("X-Amz-Expires=300"), 17, "X-Amz-Expires=900");
    CHECK(curl("'" + longer + "'", &body, dir) == 403);
  }
  SECTION("tampered: the signature") {
    std::string sig = *get;
    char& last = sig.back();
    last = last == '0' ? '1' : '0';
    CHECK(curl("'" + sig + "'", &body, dir) == 403);
  }
  SECTION("a GET URL does not allow a PUT") {
    CHECK(curl("-X PUT --data-binary '@" + upload + "' '" + *get + "'", nullptr, dir) == 403);
    CHECK(*store->get("u/chunks/ab/abcd") == "sealed chunk bytes");
  }
}

class FixedClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override { return now_; }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::time_point();
  }
  void advance(std::chrono::milliseconds d) { now_ += d; }

 private:
  std::chrono::system_clock::time_point now_{std::chrono::milliseconds(1'764'489'600'000)};
};

std::string noise(size_t n, uint64_t seed) {
  crypto::SeededRandom random(seed);
  std::string s(n, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(s.data()), n));
  return s;
}

TEST_CASE("S3Store on radosgw: save_snapshot and restore_snapshot round trip",
          "[state][s3][radosgw]") {
  using test_util::kOldMtimeNs;
  using test_util::picture;
  using test_util::write_file;
  test::TempDir dir;
  // Through the URL factory, as the api opens its store.
  const std::string url =
      "s3://" + env("CB_S3_BUCKET") + "/" + fresh_prefix() + "?endpoint=" + env("CB_S3_ENDPOINT") +
      "&access_key=" + env("CB_S3_ACCESS_KEY") + "&secret_file=" + env("CB_S3_SECRET_FILE");
  auto opened = open_store_url(url);
  INFO(opened.status().to_string());
  REQUIRE(opened.ok());
  Store& store = **opened;

  crypto::SeededRandom key_random(1);
  StateKeys keys(crypto::SymmetricKey::generate(key_random));
  crypto::SeededRandom random(2);
  FixedClock clock;
  const auto home = dir.path() / "home";
  write_file(home / "notes.txt", "remember the milk\n", kOldMtimeNs + 1, 0640);
  write_file(home / "work/big.bin", noise(600000, 7), kOldMtimeNs + 2, 0600);
  write_file(home / "work/copy.bin", noise(600000, 7), kOldMtimeNs + 3, 0644);
  write_file(home / "work/empty", "", kOldMtimeNs + 4, 0444);
  std::filesystem::create_directories(home / "work/deep/er");
  std::filesystem::create_symlink("../notes.txt", home / "work/link");
  for (const char* d : {"work/deep/er", "work/deep", "work", ""}) {
    test_util::set_mtime(home / d, kOldMtimeNs + 100);
  }

  SaveOptions save;
  save.scan.roots = {{home.string(), "home/user"}};
  auto restore = [&](const BoxLocation& box, const std::string& id, const std::string& name) {
    auto manifest = load_manifest(store, keys, box, id);
    REQUIRE(manifest.ok());
    RestoreOptions o;
    o.strip = "home/user";
    o.target = (dir.path() / name).string();
    auto done = restore_snapshot(store, keys, box.user, *manifest, o, random);
    INFO(done.status().to_string());
    REQUIRE(done.ok());
    return std::filesystem::path(o.target);
  };

  BoxLocation box{"u1", "box1"};
  clock.advance(1000ms);
  auto first = save_snapshot(store, keys, box, save, clock, random);
  INFO(first.status().to_string());
  REQUIRE(first.ok());
  CHECK(first->record.stats.files == 4);
  CHECK(first->record.stats.added_bytes == 18 + 600000);  // the copy is deduplicated
  CHECK(picture(restore(box, first->record.snapshot_id, "r1")) == picture(home));

  // A change, a second save, and both snapshots restore to what was saved.
  const auto before = picture(home);
  write_file(home / "notes.txt", "remember the eggs too\n", kOldMtimeNs + 10, 0640);
  clock.advance(1000ms);
  auto second = save_snapshot(store, keys, box, save, clock, random);
  REQUIRE(second.ok());
  CHECK(second->record.parent == first->record.snapshot_id);
  CHECK(second->record.stats.changed_files == 1);
  CHECK(picture(restore(box, second->record.snapshot_id, "r2")) == picture(home));
  CHECK(picture(restore(box, first->record.snapshot_id, "r1b")) == before);
  auto timeline = load_timeline(store, keys, box);
  REQUIRE(timeline.ok());
  CHECK(timeline->entries.size() == 2);

  // A second box of the same user stores no chunk the first already stored (§22.5).
  BoxLocation box2{"u1", "box2"};
  clock.advance(1000ms);
  auto other = save_snapshot(store, keys, box2, save, clock, random);
  REQUIRE(other.ok());
  CHECK(other->record.stats.added_chunks == 0);
  CHECK(picture(restore(box2, other->record.snapshot_id, "r3")) == picture(home));

  // A chunk replaced in the store fails the restore with kDataLoss, never wrong bytes.
  auto manifest = load_manifest(store, keys, box, second->record.snapshot_id);
  REQUIRE(manifest.ok());
  auto referenced = referenced_chunks(*manifest);
  REQUIRE(!referenced.empty());
  REQUIRE(store.put(chunk_key("u1", referenced.front()), "not the chunk").ok());
  RestoreOptions o;
  o.strip = "home/user";
  o.target = (dir.path() / "r4").string();
  auto broken = restore_snapshot(store, keys, "u1", *manifest, o, random);
  CHECK(broken.status().code() == Code::kDataLoss);
  CHECK(!std::filesystem::exists(dir.path() / "r4"));
}

}  // namespace
}  // namespace cb::state
