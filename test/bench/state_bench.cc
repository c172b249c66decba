// Benchmark driver for `scripts/bench state` (issue 7): the state engine (src/state
// save_snapshot / restore_snapshot on an FsStore, in this process, default threads) on a generated
// tree, next to restic. It measures the engine, not the gRPC path of a box's save (agent,
// api, presigned URLs). Test-only; never part of the product binary.
//
//   state_bench gen DIR [--scale N]        write the tree (about 340 MiB per scale unit)
//   state_bench edit DIR [--scale N]       change about 1 % of it in place
//   state_bench save STORE DIR [--put-threads N] [--read-threads N]   one save of DIR as box
//                                          bench/box; JSON out
//   state_bench restore STORE TARGET [--fetch-threads N]   restore the head of bench/box
//                                          into TARGET (new)
//
// The tree and its 1 % edit are bench_tree.h's (chunking_bench measures the same bytes),
// written to disk. Every file gets a fixed mtime, so both tools see the same stat.

#include "base/clock.h"
#include "bench_tree.h"
#include "crypto/random.h"
#include "state/fs_store.h"
#include "state/restore.h"
#include "state/save.h"
#include "state/snapshot.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int64_t kBaseMtimeNs = 1'767'225'600'000'000'000;  // 2026-01-01T00:00:00Z
constexpr int64_t kEditMtimeNs = kBaseMtimeNs + 86'400'000'000'000;

using cb::bench::edit_tree;
using cb::bench::Files;
using cb::bench::Gen;
using cb::bench::make_tree;

std::filesystem::path file_path(const std::filesystem::path& dir, size_t i) {
  return dir / ("d" + std::to_string(i / 100)) / ("f" + std::to_string(i) + ".dat");
}

void write_file(const std::filesystem::path& p, const std::string& data, int64_t mtime_ns) {
  std::filesystem::create_directories(p.parent_path());
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, data.data(), data.size()) != ssize_t(data.size())) {
    std::perror(p.c_str());
    std::exit(1);
  }
  struct timespec t[2];
  t[0].tv_sec = t[1].tv_sec = time_t(mtime_ns / 1'000'000'000);
  t[0].tv_nsec = t[1].tv_nsec = 0;
  ::futimens(fd, t);
  ::close(fd);
}

// Directory mtimes change as files are written: pin them too.
void pin_dir_mtimes(const std::filesystem::path& dir, int64_t mtime_ns) {
  struct timespec t[2];
  t[0].tv_sec = t[1].tv_sec = time_t(mtime_ns / 1'000'000'000);
  t[0].tv_nsec = t[1].tv_nsec = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory()) ::utimensat(AT_FDCWD, e.path().c_str(), t, 0);
  }
  ::utimensat(AT_FDCWD, dir.c_str(), t, 0);
}

cb::state::StateKeys bench_keys() {
  cb::crypto::SeededRandom random(7);
  return cb::state::StateKeys(cb::crypto::SymmetricKey::generate(random));
}

const cb::state::BoxLocation kBox{"bench", "box"};

int usage() {
  std::fprintf(stderr,
               "usage: state_bench gen|edit DIR [--scale N]\n"
               "       state_bench save STORE DIR [--put-threads N] [--read-threads N]\n"
               "       state_bench restore STORE TARGET [--fetch-threads N]\n");
  return 2;
}

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  int scale = 3;
  int put_threads = cb::state::SaveOptions().put_threads;
  int read_threads = cb::state::SaveOptions().read_threads;
  int fetch_threads = cb::state::RestoreOptions().fetch_threads;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--scale") == 0 && i + 1 < argc) scale = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--put-threads") == 0 && i + 1 < argc) {
      put_threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--read-threads") == 0 && i + 1 < argc) {
      read_threads = std::atoi(argv[++i]);
    }
    if (std::strcmp(argv[i], "--fetch-threads") == 0 && i + 1 < argc) {
      fetch_threads = std::atoi(argv[++i]);
    }
  }

  if (cmd == "gen" || cmd == "edit") {
    const std::filesystem::path dir = argv[2];
    Gen gen;
    Files files = make_tree(gen, scale);
    size_t total = 0;
    for (const auto& f : files) total += f.size();
    if (cmd == "gen") {
      for (size_t i = 0; i < files.size(); ++i) {
        write_file(file_path(dir, i), files[i], kBaseMtimeNs);
      }
      pin_dir_mtimes(dir, kBaseMtimeNs);
      std::printf("{\"files\":%zu,\"bytes\":%zu}\n", files.size(), total);
      return 0;
    }
    Files edited = files;
    const size_t changed = edit_tree(gen, edited, scale);
    size_t rewritten = 0;
    for (size_t i = 0; i < edited.size(); ++i) {
      if (i < files.size() && files[i] == edited[i]) continue;
      write_file(file_path(dir, i), edited[i], kEditMtimeNs);
      ++rewritten;
    }
    pin_dir_mtimes(dir, kEditMtimeNs);
    std::printf("{\"files_rewritten\":%zu,\"bytes_changed\":%zu,\"tree_bytes\":%zu}\n", rewritten,
                changed, total);
    return 0;
  }

  if ((cmd == "save" || cmd == "restore") && argc >= 4) {
    auto store = cb::state::FsStore::open(argv[2]);
    if (!store.ok()) {
      std::fprintf(stderr, "store: %s\n", std::string(store.status().message()).c_str());
      return 1;
    }
    const cb::state::StateKeys keys = bench_keys();
    auto& random = cb::crypto::system_random();
    const auto start = SteadyClock::now();
    if (cmd == "save") {
      cb::state::SaveOptions options;
      options.scan.roots = {{std::filesystem::absolute(argv[3]).string(), "home/user"}};
      options.put_threads = put_threads;
      options.read_threads = read_threads;
      auto saved =
          cb::state::save_snapshot(**store, keys, kBox, options, cb::system_clock(), random);
      if (!saved.ok()) {
        std::fprintf(stderr, "save: %s\n", std::string(saved.status().message()).c_str());
        return 1;
      }
      const auto& s = saved->record.stats;
      std::printf(
          "{\"seconds\":%.3f,\"files\":%llu,\"changed_files\":%llu,\"added_chunks\":%llu,"
          "\"added_bytes\":%llu,\"added_stored_bytes\":%llu,\"manifest_bytes\":%llu}\n",
          seconds_since(start), (unsigned long long)s.files, (unsigned long long)s.changed_files,
          (unsigned long long)s.added_chunks, (unsigned long long)s.added_bytes,
          (unsigned long long)s.added_stored_bytes,
          (unsigned long long)saved->record.manifest_bytes);
      return 0;
    }
    auto head = cb::state::load_head(**store, keys, kBox);
    if (!head.ok() || !head->has_value()) {
      std::fprintf(stderr, "restore: no head\n");
      return 1;
    }
    auto manifest = cb::state::load_manifest(**store, keys, kBox, (*head)->snapshot_id);
    if (!manifest.ok()) {
      std::fprintf(stderr, "restore: %s\n", std::string(manifest.status().message()).c_str());
      return 1;
    }
    cb::state::RestoreOptions options;
    options.strip = "home/user";
    options.target = std::filesystem::absolute(argv[3]).string();
    options.fetch_threads = fetch_threads;
    auto done = cb::state::restore_snapshot(**store, keys, kBox.user, *manifest, options, random);
    if (!done.ok()) {
      std::fprintf(stderr, "restore: %s\n", std::string(done.status().message()).c_str());
      return 1;
    }
    std::printf("{\"seconds\":%.3f,\"files\":%llu,\"bytes\":%llu,\"chunks\":%llu}\n",
                seconds_since(start), (unsigned long long)done->files,
                (unsigned long long)done->bytes, (unsigned long long)done->chunks_fetched);
    return 0;
  }
  return usage();
}
