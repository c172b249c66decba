#include "state/manifest.h"

#include "crypto/random.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace cb::state {
namespace {

StateKeys test_keys(uint64_t seed = 1) {
  crypto::SeededRandom random(seed);
  return StateKeys(crypto::SymmetricKey::generate(random));
}

Entry dir(std::string path) {
  Entry e;
  e.path = std::move(path);
  e.kind = EntryKind::kDir;
  e.mode = 0755;
  e.uid = 1000;
  e.gid = 1000;
  e.user = "user";
  e.group = "user";
  e.mtime_ns = 1'700'000'000'123'456'789;
  e.ctime_ns = 1'700'000'001'000'000'000;
  e.inode = 42;
  return e;
}

Entry file(std::string path, const StateKeys& keys, std::vector<std::string> chunks) {
  Entry e = dir(std::move(path));
  e.kind = EntryKind::kFile;
  e.mode = 0640;
  for (const auto& c : chunks) {
    e.chunks.push_back({keys.chunk_id(c), uint32_t(c.size())});
    e.size += c.size();
  }
  return e;
}

Entry link(std::string path, std::string target) {
  Entry e = dir(std::move(path));
  e.kind = EntryKind::kSymlink;
  e.mode = 0777;
  e.target = std::move(target);
  return e;
}

Manifest sample(const StateKeys& keys) {
  Manifest m;
  m.scan_started_ns = 1'700'000'002'000'000'000;
  m.entries = {dir("home/user"),
               file("home/user/a.txt", keys, {"hello"}),
               dir("home/user/d"),
               file("home/user/d/big", keys, {"one", "two", "three"}),
               file("home/user/d/empty", keys, {}),
               link("home/user/d/link", "../a.txt"),
               file("home/user/d-x", keys, {"x"}),
               dir("workspace")};
  m.entries[6].user = "root";  // a second name in the table
  m.entries[6].group = "";
  m.entries[6].uid = 0;
  m.entries[6].mtime_ns = -5;  // before 1970
  return m;
}

TEST_CASE("path_less: a directory's subtree follows it contiguously", "[state][unit]") {
  CHECK(path_less("a", "a/b"));
  CHECK(path_less("a/b", "a-b"));  // bytewise '-' < '/', but '/' sorts first here
  CHECK(path_less("a/z", "a0"));
  CHECK(!path_less("a", "a"));
  CHECK(path_less("a/b/c", "a/bc"));
}

TEST_CASE("validate_path: refuses absolute, empty, dot and dot-dot components", "[state][unit]") {
  CHECK(validate_path("home/user/x").ok());
  CHECK(validate_path("a/..b/c.").ok());
  for (const char* bad : {"", "/etc", "a//b", "a/", "../a", "a/..", "a/./b", "."}) {
    INFO(bad);
    CHECK(validate_path(bad).code() == Code::kInvalidArgument);
  }
  CHECK(validate_path(std::string("a\0b", 3)).code() == Code::kInvalidArgument);
  CHECK(validate_path(std::string(4097, 'a')).code() == Code::kInvalidArgument);
}

TEST_CASE("manifest: encodes and decodes to the same manifest", "[state][unit]") {
  StateKeys keys = test_keys();
  Manifest m = sample(keys);
  REQUIRE(validate_manifest(m).ok());
  std::string bytes = encode_manifest(m);
  auto back = decode_manifest(bytes);
  REQUIRE(back.ok());
  CHECK(*back == m);
  CHECK(decode_manifest(encode_manifest(Manifest()))->entries.empty());
}

TEST_CASE("manifest: paths share prefixes and names are a table", "[state][unit]") {
  StateKeys keys = test_keys();
  Manifest m;
  m.entries.push_back(dir("home/user/project/src"));
  for (int i = 0; i < 1000; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "home/user/project/src/file-%04d.c", i);
    m.entries.push_back(file(name, keys, {std::string(name)}));
  }
  // Written out, each entry would repeat its 33-byte path and both names; encoded, it costs
  // the 33-byte chunk reference, two 9-byte timestamps and about 17 bytes more.
  const std::string bytes = encode_manifest(m);
  CHECK(bytes.size() < 1000 * (33 + 18 + 20));
  CHECK(*decode_manifest(bytes) == m);
}

TEST_CASE("manifest: every truncation and stray byte is kDataLoss, never a crash",
          "[state][unit]") {
  StateKeys keys = test_keys();
  std::string bytes = encode_manifest(sample(keys));
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("length " << n);
    CHECK(decode_manifest(bytes.substr(0, n)).status().code() == Code::kDataLoss);
  }
  CHECK(decode_manifest(bytes + "x").status().code() == Code::kDataLoss);
  std::string other_magic = bytes;
  other_magic[3] = '2';
  CHECK(decode_manifest(other_magic).status().code() == Code::kDataLoss);
}

TEST_CASE("validate_manifest: refuses what a restore must never see", "[state][unit]") {
  StateKeys keys = test_keys();
  auto refused = [](Manifest m) { return validate_manifest(m).code() == Code::kInvalidArgument; };
  Manifest base = sample(keys);
  SECTION("an entry below a symlink") {
    Manifest m = base;
    m.entries.insert(m.entries.begin() + 6, file("home/user/d/link/escape", keys, {"x"}));
    CHECK(refused(m));
  }
  SECTION("an entry below a file") {
    Manifest m = base;
    m.entries.insert(m.entries.begin() + 2, file("home/user/a.txt/x", keys, {"x"}));
    CHECK(refused(m));
  }
  SECTION("dot-dot, absolute, unsorted, duplicate") {
    Manifest m = base;
    m.entries[1].path = "home/user/../a.txt";
    CHECK(refused(m));
    m = base;
    m.entries[7].path = "/workspace";
    CHECK(refused(m));
    m = base;
    std::swap(m.entries[0], m.entries[1]);
    CHECK(refused(m));
    m = base;
    m.entries[2] = m.entries[1];
    CHECK(refused(m));
  }
  SECTION("a size that is not the sum of the chunks") {
    Manifest m = base;
    m.entries[1].size += 1;
    CHECK(refused(m));
  }
  SECTION("an encoded manifest that breaks a rule does not decode") {
    Manifest m = base;
    m.entries.insert(m.entries.begin() + 6, file("home/user/d/link/escape", keys, {"x"}));
    CHECK(decode_manifest(encode_manifest(m)).status().code() == Code::kDataLoss);
  }
}

TEST_CASE("manifest: sealed manifests open only with the key and the same additional data",
          "[state][unit]") {
  StateKeys keys = test_keys();
  crypto::SeededRandom random(5);
  Manifest m = sample(keys);
  std::string sealed = seal_manifest(keys, m, "manifest/box1/s1", random);
  auto opened = open_manifest(keys, sealed, "manifest/box1/s1");
  REQUIRE(opened.ok());
  CHECK(*opened == m);
  CHECK(open_manifest(keys, sealed, "manifest/box1/s2").status().code() == Code::kDataLoss);
  CHECK(open_manifest(test_keys(2), sealed, "manifest/box1/s1").status().code() == Code::kDataLoss);
  std::string tampered = sealed;
  tampered[tampered.size() / 2] ^= 1;
  CHECK(open_manifest(keys, tampered, "manifest/box1/s1").status().code() == Code::kDataLoss);
}

TEST_CASE("manifest: find, referenced_chunks, select_entries and list_directory", "[state][unit]") {
  StateKeys keys = test_keys();
  Manifest m = sample(keys);
  REQUIRE(m.find("home/user/d/big") != nullptr);
  CHECK(m.find("home/user/d/big")->chunks.size() == 3);
  CHECK(m.find("home/user/nope") == nullptr);

  auto chunks = referenced_chunks(m);
  CHECK(chunks.size() == 5);  // hello, one, two, three, x
  CHECK(std::is_sorted(chunks.begin(), chunks.end()));

  auto paths_of = [](const std::vector<const Entry*>& entries) {
    std::vector<std::string> out;
    for (const Entry* e : entries) out.push_back(e->path);
    return out;
  };
  std::vector<std::string> scope = {"home/user/d"};
  CHECK(paths_of(*select_entries(m, scope)) ==
        std::vector<std::string>{"home/user/d", "home/user/d/big", "home/user/d/empty",
                                 "home/user/d/link"});
  std::vector<std::string> bad_scope = {"home/user/../etc"};
  CHECK(select_entries(m, bad_scope).status().code() == Code::kInvalidArgument);

  CHECK(paths_of(*list_directory(m, "")) == std::vector<std::string>{"home/user", "workspace"});
  CHECK(paths_of(*list_directory(m, "home/user")) ==
        std::vector<std::string>{"home/user/a.txt", "home/user/d", "home/user/d-x"});
  CHECK(list_directory(m, "home/user/a.txt").status().code() == Code::kFailedPrecondition);
  CHECK(list_directory(m, "home/nobody").status().code() == Code::kNotFound);
}

// §25.8: a manifest kept as its difference to another. The diff of any two valid manifests,
// applied to the first, gives the second; encoded and decoded it is the same delta.
TEST_CASE("manifest delta: diff, encode, decode and apply give the target back", "[state][unit]") {
  StateKeys keys = test_keys();
  const Manifest base = sample(keys);
  Manifest target = base;
  target.scan_started_ns += 1000;
  target.entries[1] = file("home/user/a.txt", keys, {"hello, again"});  // changed content
  target.entries[5].mtime_ns += 1;                                      // changed stat only
  target.entries.erase(target.entries.begin() + 4);                     // removed
  target.entries.push_back(file("workspace/new", keys, {"n1", "n2"}));  // added
  REQUIRE(validate_manifest(target).ok());

  ManifestDelta delta = diff_manifests(base, "20261130T150000.000Z-0a0b0c0d", target);
  CHECK(delta.base == "20261130T150000.000Z-0a0b0c0d");
  CHECK(delta.removed == std::vector<std::string>{"home/user/d/empty"});
  std::vector<std::string> changed;
  for (const Entry& e : delta.changes.entries) changed.push_back(e.path);
  CHECK(changed ==
        std::vector<std::string>{"home/user/a.txt", "home/user/d/link", "workspace/new"});

  auto decoded = decode_manifest_object(encode_manifest_delta(delta));
  REQUIRE(decoded.ok());
  REQUIRE(decoded->delta.has_value());
  CHECK(*decoded->delta == delta);
  auto applied = apply_delta(base, *decoded->delta);
  REQUIRE(applied.ok());
  CHECK(*applied == target);

  SECTION("a directory replaced by a file, its subtree gone") {
    Manifest t2 = base;
    t2.entries.erase(t2.entries.begin() + 2, t2.entries.begin() + 6);  // d and below
    t2.entries.insert(t2.entries.begin() + 2, file("home/user/d", keys, {"now a file"}));
    REQUIRE(validate_manifest(t2).ok());
    ManifestDelta d2 = diff_manifests(base, "s1", t2);
    CHECK(d2.removed.size() == 3);
    auto a2 = apply_delta(base, d2);
    REQUIRE(a2.ok());
    CHECK(*a2 == t2);
  }
  SECTION("no change is an empty delta") {
    ManifestDelta none = diff_manifests(base, "s1", base);
    CHECK(none.removed.empty());
    CHECK(none.changes.entries.empty());
    CHECK(*apply_delta(base, none) == base);
  }
  SECTION("a whole-manifest reader refuses a delta, naming its base") {
    auto whole = decode_manifest(encode_manifest_delta(delta));
    CHECK(whole.status().code() == Code::kFailedPrecondition);
    CHECK(whole.status().message().find("20261130T150000.000Z-0a0b0c0d") != std::string::npos);
    std::string sealed =
        seal_manifest_delta(keys, delta, "manifest/box1/s2", crypto::system_random());
    CHECK(open_manifest(keys, sealed, "manifest/box1/s2").status().code() ==
          Code::kFailedPrecondition);
    auto object = open_manifest_object(keys, sealed, "manifest/box1/s2");
    REQUIRE(object.ok());
    CHECK(object->delta == delta);
    CHECK(open_manifest_object(keys, sealed, "manifest/box1/s3").status().code() ==
          Code::kDataLoss);
  }
}

TEST_CASE("manifest delta: a delta that does not fit its base is kDataLoss naming the path",
          "[state][unit]") {
  StateKeys keys = test_keys();
  const Manifest base = sample(keys);
  ManifestDelta d;
  d.base = "s1";
  SECTION("a removed path the base lacks") {
    d.removed = {"home/user/nope"};
    auto r = apply_delta(base, d);
    CHECK(r.status().code() == Code::kDataLoss);
    CHECK(r.status().message().find("home/user/nope") != std::string::npos);
  }
  SECTION("a path both removed and changed") {
    d.removed = {"home/user/a.txt"};
    d.changes.entries = {file("home/user/a.txt", keys, {"x"})};
    CHECK(apply_delta(base, d).status().code() == Code::kDataLoss);
  }
  SECTION("a result with an entry below a file") {
    d.changes.entries = {file("home/user/a.txt/inner", keys, {"x"})};
    CHECK(apply_delta(base, d).status().code() == Code::kDataLoss);
  }
}

TEST_CASE("manifest delta: every truncation and stray byte is kDataLoss, never a crash",
          "[state][unit]") {
  StateKeys keys = test_keys();
  Manifest target = sample(keys);
  target.entries.erase(target.entries.begin() + 1);
  target.entries.push_back(file("workspace/z", keys, {"z"}));
  const std::string bytes = encode_manifest_delta(diff_manifests(sample(keys), "s1", target));
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n);
    CHECK(decode_manifest_object(bytes.substr(0, n)).status().code() == Code::kDataLoss);
  }
  CHECK(decode_manifest_object(bytes + "x").status().code() == Code::kDataLoss);
  std::string unknown_flags = bytes;
  unknown_flags[4] = 3;
  CHECK(decode_manifest_object(unknown_flags).status().code() == Code::kDataLoss);
}

}  // namespace
}  // namespace cb::state
