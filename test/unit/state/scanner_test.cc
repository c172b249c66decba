#include "state/scanner.h"

#include "crypto/random.h"
#include "support/temp_dir.h"
#include "unit/state/state_test_util.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace cb::state {
namespace {

using test_util::kOldMtimeNs;
using test_util::write_file;

constexpr ChunkerParams kSmallChunks{256, 1024, 4096};

StateKeys test_keys() {
  crypto::SeededRandom random(1);
  return StateKeys(crypto::SymmetricKey::generate(random));
}

std::string noise(size_t n, uint64_t seed) {
  crypto::SeededRandom random(seed);
  std::string s(n, '\0');
  random.fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(s.data()), n));
  return s;
}

// Counts what the scanner hands over.
class CountingSink final : public ChunkSink {
 public:
  Status add(const ChunkId& id, std::span<const uint8_t> plaintext) override {
    ++chunks;
    bytes += plaintext.size();
    ids.push_back(id);
    return ok_status();
  }
  int chunks = 0;
  uint64_t bytes = 0;
  std::vector<ChunkId> ids;
};

ScanOptions options_for(const test::TempDir& dir) {
  ScanOptions o;
  o.roots = {{(dir.path() / "home").string(), "home/user"}};
  o.chunker = kSmallChunks;
  return o;
}

TEST_CASE("scan_tree: records files, dirs and symlinks with their metadata", "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  write_file(home / "a.txt", "hello", kOldMtimeNs + 123, 0640);
  write_file(home / "sub/big.bin", noise(20000, 1), kOldMtimeNs, 0600);
  write_file(home / "sub/empty", "", kOldMtimeNs, 0444);
  write_file(dir.path() / "outside/secret", "not saved");
  std::filesystem::create_symlink(dir.path() / "outside", home / "sub/link-out");
  REQUIRE(::mkfifo((home / "fifo").c_str(), 0600) == 0);
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = (home / "sock").string();
  REQUIRE(sock_path.size() < sizeof(addr.sun_path));
  std::copy(sock_path.begin(), sock_path.end(), addr.sun_path);
  REQUIRE(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  ::close(sock);
  test_util::set_mtime(home / "sub", kOldMtimeNs + 5);

  StateKeys keys = test_keys();
  CountingSink sink;
  auto scanned = scan_tree(options_for(dir), nullptr, keys, sink);
  REQUIRE(scanned.ok());
  const Manifest& m = scanned->manifest;
  std::vector<std::string> paths;
  for (const auto& e : m.entries) paths.push_back(e.path);
  CHECK(paths == std::vector<std::string>{"home/user", "home/user/a.txt", "home/user/sub",
                                          "home/user/sub/big.bin", "home/user/sub/empty",
                                          "home/user/sub/link-out"});
  const Entry* a = m.find("home/user/a.txt");
  CHECK(a->kind == EntryKind::kFile);
  CHECK(a->mode == 0640);
  CHECK(a->size == 5);
  CHECK(a->mtime_ns == kOldMtimeNs + 123);
  CHECK(a->uid == ::geteuid());
  if (::geteuid() == 0) CHECK(a->user == "root");
  REQUIRE(a->chunks.size() == 1);
  CHECK(a->chunks[0].id == keys.chunk_id("hello"));
  const Entry* big = m.find("home/user/sub/big.bin");
  CHECK(big->size == 20000);
  CHECK(big->chunks.size() > 3);  // 20000 bytes at avg 1 KiB
  CHECK(m.find("home/user/sub/empty")->chunks.empty());
  CHECK(m.find("home/user/sub/empty")->mode == 0444);
  CHECK(m.find("home/user/sub")->mtime_ns == kOldMtimeNs + 5);
  const Entry* link = m.find("home/user/sub/link-out");
  CHECK(link->kind == EntryKind::kSymlink);
  CHECK(link->target == (dir.path() / "outside").string());
  // The symlink was recorded, not followed.
  for (const auto& e : m.entries) CHECK(e.path.find("secret") == std::string::npos);
  // The FIFO and the socket are skipped with a note each.
  CHECK(scanned->stats.skipped == 2);
  REQUIRE(scanned->notes.size() == 2);
  CHECK(scanned->notes[0].find("FIFO") != std::string::npos);
  CHECK(scanned->notes[1].find("socket") != std::string::npos);
  CHECK(scanned->stats.files_read == 3);
  CHECK(sink.bytes == 20005);
}

TEST_CASE("scan_tree: a rescan re-reads only files whose stat changed", "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  for (int i = 0; i < 10; ++i) {
    write_file(home / ("f" + std::to_string(i)), noise(3000 + i, uint64_t(i)));
  }
  StateKeys keys = test_keys();
  CountingSink first_sink;
  auto first = scan_tree(options_for(dir), nullptr, keys, first_sink);
  REQUIRE(first.ok());
  CHECK(first->stats.files_read == 10);

  SECTION("nothing changed: nothing is read") {
    CountingSink sink;
    auto again = scan_tree(options_for(dir), &first->manifest, keys, sink);
    REQUIRE(again.ok());
    CHECK(again->stats.files_read == 0);
    CHECK(again->stats.files_reused == 10);
    CHECK(sink.chunks == 0);
    Manifest expected = first->manifest;
    expected.scan_started_ns = again->manifest.scan_started_ns;
    CHECK(again->manifest == expected);
  }
  SECTION("changed content, a new mtime, a replaced inode and a new file are read") {
    write_file(home / "f1", noise(5000, 99));               // size and content
    test_util::set_mtime(home / "f2", kOldMtimeNs + 1);     // mtime only
    std::filesystem::rename(home / "f3", home / "f3.old");  // another inode
    write_file(home / "f3", test_util::read_file(home / "f3.old"));
    std::filesystem::remove(home / "f3.old");
    write_file(home / "new", "fresh");
    std::filesystem::remove(home / "f4");
    CountingSink sink;
    auto again = scan_tree(options_for(dir), &first->manifest, keys, sink);
    REQUIRE(again.ok());
    CHECK(again->stats.files_read == 4);  // f1, f2, f3, new
    CHECK(again->stats.files_reused == 6);
    CHECK(again->manifest.find("home/user/f4") == nullptr);
    CHECK(again->manifest.find("home/user/f1")->size == 5000);
    // Unchanged content gives the same chunk ids.
    CHECK(again->manifest.find("home/user/f2")->chunks ==
          first->manifest.find("home/user/f2")->chunks);
    CHECK(again->manifest.find("home/user/f3")->chunks ==
          first->manifest.find("home/user/f3")->chunks);
  }
  SECTION("a chmod changes ctime, so the file is read again") {
    REQUIRE(::chmod((home / "f5").c_str(), 0600) == 0);
    CountingSink sink;
    auto again = scan_tree(options_for(dir), &first->manifest, keys, sink);
    REQUIRE(again.ok());
    CHECK(again->stats.files_read == 1);
    CHECK(again->manifest.find("home/user/f5")->mode == 0600);
  }
}

TEST_CASE("scan_tree: a file modified just before the previous scan is read again",
          "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t now_ns = int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  write_file(home / "settled", "old");
  write_file(home / "racy", "new", now_ns - 1'000'000);  // 1 ms before the scan
  StateKeys keys = test_keys();
  CountingSink sink;
  auto first = scan_tree(options_for(dir), nullptr, keys, sink);
  REQUIRE(first.ok());
  auto again = scan_tree(options_for(dir), &first->manifest, keys, sink);
  REQUIRE(again.ok());
  // An equal stat proves nothing for "racy": it could have been rewritten in the same tick.
  CHECK(again->stats.files_read == 1);
  CHECK(again->stats.files_reused == 1);
}

TEST_CASE("scan_tree: exclusions and restore leftovers are left out with their subtrees",
          "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  write_file(home / "keep", "k");
  write_file(home / ".cache/x/y", "c");
  write_file(home / ".cb-restore-0011223344556677/partial", "p");
  write_file(home / "Restored/.cb-restore-ab/partial", "p");
  ScanOptions o = options_for(dir);
  o.exclude = {"home/user/.cache"};
  StateKeys keys = test_keys();
  CountingSink sink;
  auto scanned = scan_tree(o, nullptr, keys, sink);
  REQUIRE(scanned.ok());
  std::vector<std::string> paths;
  for (const auto& e : scanned->manifest.entries) paths.push_back(e.path);
  CHECK(paths == std::vector<std::string>{"home/user", "home/user/Restored", "home/user/keep"});
}

// A sink for several reading threads: counts under a lock, and fails the |fail_at|th chunk.
class LockedSink final : public ChunkSink {
 public:
  explicit LockedSink(int fail_at = 0) : fail_at_(fail_at) {}
  Status add(const ChunkId& id, std::span<const uint8_t> plaintext) override {
    std::lock_guard lock(mu_);
    if (++calls_ == fail_at_) return data_loss("sink refused a chunk");
    bytes += plaintext.size();
    ids.insert(id);
    return ok_status();
  }
  uint64_t bytes = 0;
  std::set<ChunkId> ids;

 private:
  std::mutex mu_;
  const int fail_at_;
  int calls_ = 0;
};

TEST_CASE("scan_tree: several reading threads build the manifest one thread builds",
          "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  for (int d = 0; d < 6; ++d) {
    for (int f = 0; f < 15; ++f) {
      const auto path = home / ("d" + std::to_string(d)) / ("f" + std::to_string(f));
      // Every third file repeats another's content: two threads may meet its chunks at once.
      const uint64_t seed = f % 3 == 0 ? 1000 + f : uint64_t(d * 100 + f);
      write_file(path, noise(100 + 700 * f, seed), kOldMtimeNs + f, 0600);
    }
    std::filesystem::create_symlink("f1", home / ("d" + std::to_string(d)) / "link");
    write_file(home / ("d" + std::to_string(d)) / "empty", "", kOldMtimeNs, 0644);
  }
  StateKeys keys = test_keys();
  ScanOptions one = options_for(dir);
  LockedSink sink_one;
  auto a = scan_tree(one, nullptr, keys, sink_one);
  REQUIRE(a.ok());
  ScanOptions four = one;
  four.read_threads = 4;
  LockedSink sink_four;
  auto b = scan_tree(four, nullptr, keys, sink_four);
  REQUIRE(b.ok());
  b->manifest.scan_started_ns = a->manifest.scan_started_ns;
  CHECK(b->manifest == a->manifest);
  CHECK(b->stats.files_read == a->stats.files_read);
  CHECK(b->stats.files_read == 6 * 16);
  CHECK(b->stats.bytes_read == a->stats.bytes_read);
  CHECK(sink_four.bytes == sink_one.bytes);
  CHECK(sink_four.ids == sink_one.ids);

  // A rescan reuses every file, on any number of threads.
  LockedSink sink_again;
  auto c = scan_tree(four, &a->manifest, keys, sink_again);
  REQUIRE(c.ok());
  CHECK(c->stats.files_reused == 6 * 16);
  CHECK(c->stats.files_read == 0);
  CHECK(sink_again.bytes == 0);

  // A sink's error stops the scan and is what it returns, whichever thread met it.
  for (int fail_at : {1, 7, 40}) {
    INFO(fail_at);
    LockedSink failing(fail_at);
    auto failed = scan_tree(four, nullptr, keys, failing);
    REQUIRE(!failed.ok());
    CHECK(failed.status().code() == Code::kDataLoss);
    CHECK(std::string(failed.status().message()) == "sink refused a chunk");
  }
}

// A file's chunk references as a scan of it alone makes them: ChunkReader's cuts, keyed ids.
std::vector<ChunkRef> chunks_alone(const std::filesystem::path& path, const StateKeys& keys) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ChunkReader reader(fd, kSmallChunks);
  std::vector<ChunkRef> refs;
  while (true) {
    auto chunk = reader.next();
    REQUIRE(chunk.ok());
    if (chunk->empty()) break;
    refs.push_back(ChunkRef{keys.chunk_id(*chunk), uint32_t(chunk->size())});
  }
  ::close(fd);
  return refs;
}

TEST_CASE("scan_tree: files smaller than a chunk, read together, chunk as each alone",
          "[state][unit]") {
  // Files under max_size (4096 here) are read up to 8 to a job into one buffer and hashed
  // together; sizes around min, avg and max, empty, duplicated, and larger ones between them.
  test::TempDir dir;
  const auto home = dir.path() / "home";
  const size_t sizes[] = {0,    1,    255,  256,  257,  1000, 1023, 1024, 1025,
                          2048, 4000, 4095, 4096, 4097, 9000, 3000, 3001, 12};
  std::vector<std::filesystem::path> files;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < std::size(sizes); ++i) {
      files.push_back(home / ("r" + std::to_string(round)) / ("f" + std::to_string(i)));
      // Round 2 repeats round 0's contents.
      write_file(files.back(), noise(sizes[i], round == 2 ? i : 100 * round + i), kOldMtimeNs,
                 0600);
    }
  }
  StateKeys keys = test_keys();
  for (int threads : {1, 2}) {
    INFO("read_threads " << threads);
    ScanOptions options = options_for(dir);
    options.read_threads = threads;
    LockedSink sink;
    auto scanned = scan_tree(options, nullptr, keys, sink);
    REQUIRE(scanned.ok());
    CHECK(scanned->stats.files_read == files.size());
    CHECK(scanned->notes.empty());
    std::set<ChunkId> expected_ids;
    for (const auto& path : files) {
      INFO(path.string());
      const std::string name = "home/user/" + path.lexically_relative(home).string();
      const Entry* e = scanned->manifest.find(name);
      REQUIRE(e != nullptr);
      CHECK(e->size == std::filesystem::file_size(path));
      const std::vector<ChunkRef> expected = chunks_alone(path, keys);
      CHECK(e->chunks == expected);
      for (const ChunkRef& c : expected) expected_ids.insert(c.id);
    }
    CHECK(sink.ids == expected_ids);
  }
}

TEST_CASE("scan_tree: a small file waits for its group; a large one after it is read first",
          "[state][unit]") {
  // On the walking thread (read_threads 1): "a" (under max_size) waits in a group that the
  // walk's end hands over, "b" is read when the walk meets it.
  test::TempDir dir;
  const auto home = dir.path() / "home";
  write_file(home / "a", noise(100, 1), kOldMtimeNs, 0600);
  write_file(home / "b", noise(10000, 2), kOldMtimeNs, 0600);
  StateKeys keys = test_keys();
  CountingSink sink;
  REQUIRE(scan_tree(options_for(dir), nullptr, keys, sink).ok());
  REQUIRE(sink.ids.size() > 2);
  CHECK(sink.ids.back() == keys.chunk_id(noise(100, 1)));
  CHECK(sink.bytes == 10100);
}

TEST_CASE("scan_tree: running out of descriptors fails the scan instead of skipping files",
          "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  for (int i = 0; i < 40; ++i) {
    write_file(home / ("d" + std::to_string(i % 4)) / ("f" + std::to_string(i)), noise(50, i),
               kOldMtimeNs, 0600);
  }
  StateKeys keys = test_keys();
  // In a child, whose descriptor limit is a few above what it has open: the gathered small
  // files and the walk's folders need more.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const size_t open = test_util::open_fds();
    const struct rlimit limit { open + 4, open + 4 };
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(3);
    CountingSink sink;
    auto scanned = scan_tree(options_for(dir), nullptr, keys, sink);
    ::_exit(scanned.ok() ? 1 : scanned.status().code() == Code::kResourceExhausted ? 0 : 2);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// Appends a byte to each of |files| at its first chunk: the files change after they were read
// and before the scan's second stat of them.
class AppendingSink final : public ChunkSink {
 public:
  explicit AppendingSink(std::vector<std::filesystem::path> files) : files_(std::move(files)) {}
  Status add(const ChunkId&, std::span<const uint8_t>) override {
    if (++calls == 1) {
      for (const auto& f : files_) {
        std::ofstream(f, std::ios::app) << 'x';
      }
    }
    return ok_status();
  }
  int calls = 0;

 private:
  std::vector<std::filesystem::path> files_;
};

TEST_CASE("scan_tree: small files that change while read together are read again alone",
          "[state][unit]") {
  test::TempDir dir;
  const auto home = dir.path() / "home";
  std::vector<std::filesystem::path> files;
  for (int i = 0; i < 3; ++i) {
    files.push_back(home / ("f" + std::to_string(i)));
    write_file(files.back(), noise(500 + 1000 * i, i), kOldMtimeNs, 0600);
  }
  StateKeys keys = test_keys();
  AppendingSink sink(files);
  auto scanned = scan_tree(options_for(dir), nullptr, keys, sink);
  REQUIRE(scanned.ok());
  CHECK(scanned->stats.files_read == 3);
  // Each was read again after it changed, and that read was undisturbed: no note.
  CHECK(scanned->notes.empty());
  for (int i = 0; i < 3; ++i) {
    const Entry* e = scanned->manifest.find("home/user/f" + std::to_string(i));
    REQUIRE(e != nullptr);
    CHECK(e->size == uint64_t(500 + 1000 * i + 1));
    CHECK(e->chunks == chunks_alone(files[i], keys));
  }
}

TEST_CASE("scan_tree: bad roots are refused", "[state][unit]") {
  test::TempDir dir;
  StateKeys keys = test_keys();
  CountingSink sink;
  ScanOptions o;
  o.roots = {{(dir.path() / "missing").string(), "home/user"}};
  CHECK(scan_tree(o, nullptr, keys, sink).status().code() == Code::kNotFound);
  o.roots = {{dir.path().string(), "home"}, {dir.path().string(), "home/user"}};
  CHECK(scan_tree(o, nullptr, keys, sink).status().code() == Code::kInvalidArgument);
  o.roots = {{dir.path().string(), "/home"}};
  CHECK(scan_tree(o, nullptr, keys, sink).status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace cb::state
