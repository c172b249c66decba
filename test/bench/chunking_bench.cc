// Benchmark driver for the state layer's chunker (issue 7): picks min/avg/max for
// kDefaultChunkerParams (src/state/chunker.h). Test-only; never part of the product binary.
//
//   chunking_bench [--scale N] [--only AVG_KIB]
//
// Builds bench_tree.h's tree in memory (no disk, so the numbers measure the chunker and not
// the page cache), about 340 MiB at --scale 1, and its 1 % edit.
//
// For each candidate (avg 16 KiB .. 2 MiB, min = avg/4, max = avg*4) it reports:
//   chunk MB/s    find_cut alone over the whole tree (median of 3 passes)
//   save MB/s     the whole per-chunk pipeline once: cut, BLAKE2b id, zstd 3, XChaCha20-Poly1305
//   chunks        distinct chunks of the tree = objects in the store
//   stored MiB    sealed bytes of the distinct chunks (after dedup and zstd)
//   manifest KiB  34 bytes per chunk reference (32-byte id + size varint), before zstd
//   edit: new chunks / new MiB   chunks of the edited tree not in the original (what the next
//                  save uploads), and their plaintext size; "x edit" divides by the bytes the
//                  edits actually changed
//
// Output: a markdown table on stdout; progress on stderr.

#include "bench_tree.h"
#include "crypto/random.h"
#include "state/chunk.h"
#include "state/chunker.h"
#include "state/keys.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using cb::state::ChunkerParams;
using Clock = std::chrono::steady_clock;

using cb::bench::edit_tree;
using cb::bench::Files;
using cb::bench::Gen;
using cb::bench::make_tree;
using cb::bench::total_bytes;

struct Chunks {
  std::unordered_set<std::string> set;  // the chunks' bytes (the bench has the memory)
  size_t unique_bytes = 0;
  size_t refs = 0;
};

Chunks chunk_tree(const Files& t, const ChunkerParams& p) {
  Chunks c;
  for (const auto& file : t) {
    std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(file.data()), file.size());
    while (!data.empty()) {
      size_t cut = cb::state::find_cut(data, p);
      ++c.refs;
      if (c.set.emplace(reinterpret_cast<const char*>(data.data()), cut).second) {
        c.unique_bytes += cut;
      }
      data = data.subspan(cut);
    }
  }
  return c;
}

double cut_mbps(const Files& t, const ChunkerParams& p) {
  std::vector<double> runs;
  size_t sink = 0;
  for (int r = 0; r < 3; ++r) {
    auto start = Clock::now();
    for (const auto& file : t) {
      std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(file.data()), file.size());
      while (!data.empty()) {
        size_t cut = cb::state::find_cut(data, p);
        sink += cut;
        data = data.subspan(cut);
      }
    }
    runs.push_back(double(total_bytes(t)) / 1e6 /
                   std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (sink == 0) std::fprintf(stderr, "?\n");
  std::sort(runs.begin(), runs.end());
  return runs[1];
}

// Cut, id, zstd, seal every distinct chunk once, as a first save would; returns MB/s of the
// tree's logical bytes and the sealed bytes.
std::pair<double, size_t> save_pipeline(const Files& t, const ChunkerParams& p,
                                        const cb::state::StateKeys& keys) {
  cb::crypto::SeededRandom random(1);
  std::unordered_set<cb::state::ChunkId, cb::state::ChunkIdHash> seen;
  size_t sealed_bytes = 0;
  auto start = Clock::now();
  for (const auto& file : t) {
    std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(file.data()), file.size());
    while (!data.empty()) {
      size_t cut = cb::state::find_cut(data, p);
      auto chunk = data.first(cut);
      auto id = keys.chunk_id(chunk);
      if (seen.insert(id).second) {
        sealed_bytes += cb::state::seal_chunk(keys, id, chunk).size();
      }
      data = data.subspan(cut);
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return {double(total_bytes(t)) / 1e6 / secs, sealed_bytes};
}

}  // namespace

int main(int argc, char** argv) {
  int scale = 1;
  long only = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--scale" && i + 1 < argc) {
      scale = std::atoi(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      only = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: chunking_bench [--scale N] [--only AVG_KIB]\n");
      return 2;
    }
  }
  if (scale < 1) scale = 1;
  Gen gen;
  std::fprintf(stderr, "generating the tree...\n");
  Files tree = make_tree(gen, scale);
  Files edited = tree;
  const size_t changed_bytes = edit_tree(gen, edited, scale);
  const double mib = 1024.0 * 1024.0;
  std::fprintf(stderr, "tree: %zu files, %.1f MiB; edits change %.2f MiB (%.2f%%)\n", tree.size(),
               double(total_bytes(tree)) / mib, double(changed_bytes) / mib,
               100.0 * double(changed_bytes) / double(total_bytes(tree)));
  cb::crypto::SeededRandom key_random(7);
  cb::state::StateKeys keys(cb::crypto::SymmetricKey::generate(key_random));

  std::printf("tree: %zu files, %.1f MiB logical; edits change %.2f MiB (%.2f%%)\n\n", tree.size(),
              double(total_bytes(tree)) / mib, double(changed_bytes) / mib,
              100.0 * double(changed_bytes) / double(total_bytes(tree)));
  std::printf(
      "| min / avg / max KiB | chunk MB/s | save MB/s | chunks | mean KiB | dedup MiB | stored "
      "MiB | manifest KiB | edit: new chunks | edit: new MiB | x edit |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (uint32_t avg_kib : {16u, 32u, 64u, 128u, 256u, 512u, 1024u, 2048u}) {
    if (only != 0 && long(avg_kib) != only) continue;
    ChunkerParams p{avg_kib * 1024 / 4, avg_kib * 1024, avg_kib * 1024 * 4};
    std::fprintf(stderr, "avg %u KiB...\n", avg_kib);
    double cut = cut_mbps(tree, p);
    Chunks before = chunk_tree(tree, p);
    Chunks after = chunk_tree(edited, p);
    size_t new_chunks = 0, new_bytes = 0;
    for (const auto& c : after.set) {
      if (before.set.count(c) == 0) {
        ++new_chunks;
        new_bytes += c.size();
      }
    }
    auto [save, sealed] = save_pipeline(tree, p, keys);
    std::printf(
        "| %u / %u / %u | %.0f | %.0f | %zu | %.1f | %.1f | %.1f | %.0f | %zu | %.2f | %.1f |\n",
        p.min_size / 1024, p.avg_size / 1024, p.max_size / 1024, cut, save, before.set.size(),
        double(before.unique_bytes) / double(before.set.size()) / 1024.0,
        double(before.unique_bytes) / mib, double(sealed) / mib, double(before.refs) * 34 / 1024,
        new_chunks, double(new_bytes) / mib, double(new_bytes) / double(changed_bytes));
    std::fflush(stdout);
  }
  return 0;
}
