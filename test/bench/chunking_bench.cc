// Benchmark driver for the state layer's chunker (issue 7): picks min/avg/max for
// kDefaultChunkerParams (src/state/chunker.h). Test-only; never part of the product binary.
//
//   chunking_bench [--scale N] [--only AVG_KIB]
//
// Builds a tree in memory, deterministically (xorshift64*, no disk, so the numbers measure
// the chunker and not the page cache), about 300 MiB at --scale 1:
//   small   3000 source-like text files, 1-40 KiB
//   medium  200 files, 64 KiB - 2 MiB, half text, half incompressible (media, archives)
//   large   a 64 MiB database of 4 KiB pages (text rows), a 48 MiB incompressible image, a
//           32 MiB log
//   dups    300 of the small files and 20 of the medium ones again under other names
// then edits about 1% of it (4.4 MiB) the way a day of work does:
//   300 small files get a line inserted in the middle; 30 new small files;
//   5 medium text files get 100 bytes inserted at a random place;
//   the database gets 512 random pages rewritten in place; the log gets 1 MiB appended.
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

struct Rng {
  uint64_t x;
  uint64_t next() {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545f4914f6cdd1dULL;
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

std::vector<std::string> make_words(Rng& rng) {
  static const char* syllables[] = {"ka", "lo", "re", "mi", "tan", "so", "ver", "qu",  "ex",  "in",
                                    "al", "on", "ri", "st", "ch",  "ne", "da",  "pro", "con", "x"};
  std::vector<std::string> words;
  for (int i = 0; i < 3000; ++i) {
    std::string w;
    int n = 1 + int(rng.below(4));
    for (int j = 0; j < n; ++j) w += syllables[rng.below(20)];
    words.push_back(w);
  }
  return words;
}

struct Gen {
  Rng rng{0x9e3779b97f4a7c15ULL};
  std::vector<std::string> words = make_words(rng);

  std::string line() {
    std::string l(rng.below(4) * 2, ' ');
    int n = 2 + int(rng.below(10));
    for (int i = 0; i < n; ++i) {
      // Zipf-ish: low indexes far more often.
      size_t a = rng.below(words.size()), b = rng.below(words.size());
      l += words[std::min(a, b) / (1 + rng.below(3))];
      l += (rng.below(5) == 0) ? "(" : " ";
    }
    l += rng.below(3) == 0 ? ";\n" : "\n";
    return l;
  }
  std::string text(size_t size) {
    std::string out;
    while (out.size() < size) out += line();
    out.resize(size);
    return out;
  }
  std::string noise(size_t size) {
    std::string out(size, '\0');
    for (size_t i = 0; i + 8 <= size; i += 8) {
      uint64_t v = rng.next();
      std::memcpy(out.data() + i, &v, 8);
    }
    return out;
  }
};

struct Tree {
  std::vector<std::string> files;
  size_t bytes() const {
    size_t n = 0;
    for (const auto& f : files) n += f.size();
    return n;
  }
};

struct Edited {
  Tree tree;
  size_t changed_bytes = 0;  // bytes the edits wrote
};

Tree make_tree(Gen& gen, int scale) {
  Tree t;
  for (int s = 0; s < scale; ++s) {
    for (int i = 0; i < 3000; ++i) t.files.push_back(gen.text(1024 + gen.rng.below(39 * 1024)));
    for (int i = 0; i < 200; ++i) {
      size_t size = 64 * 1024 + gen.rng.below(2 * 1024 * 1024 - 64 * 1024);
      t.files.push_back(i % 2 == 0 ? gen.text(size) : gen.noise(size));
    }
    std::string db;
    while (db.size() < 64u * 1024 * 1024) db += gen.text(4096);
    t.files.push_back(std::move(db));
    t.files.push_back(gen.noise(48u * 1024 * 1024));
    t.files.push_back(gen.text(32u * 1024 * 1024));
  }
  for (int i = 0; i < 300 * scale; ++i) t.files.push_back(t.files[gen.rng.below(3000)]);
  for (int i = 0; i < 20 * scale; ++i) t.files.push_back(t.files[3000 + gen.rng.below(200)]);
  return t;
}

Edited edit_tree(Gen& gen, const Tree& base, int scale) {
  Edited e{base, 0};
  auto& f = e.tree.files;
  for (int i = 0; i < 300 * scale; ++i) {
    std::string& file = f[gen.rng.below(3000)];
    std::string l = gen.line();
    size_t at = file.find('\n', file.size() / 2);
    file.insert(at == std::string::npos ? file.size() : at + 1, l);
    e.changed_bytes += l.size();
  }
  for (int i = 0; i < 30 * scale; ++i) {
    f.push_back(gen.text(1024 + gen.rng.below(39 * 1024)));
    e.changed_bytes += f.back().size();
  }
  for (int i = 0; i < 5 * scale; ++i) {
    std::string& file = f[3000 + 2 * gen.rng.below(100)];  // even indexes are text
    file.insert(gen.rng.below(file.size()), gen.text(100));
    e.changed_bytes += 100;
  }
  // The large files of the first scale unit: db, image, log.
  std::string& db = f[3200];
  for (int i = 0; i < 512; ++i) {
    size_t page = gen.rng.below(db.size() / 4096);
    std::string p = gen.text(4096);
    db.replace(page * 4096, 4096, p);
    e.changed_bytes += 4096;
  }
  std::string& log = f[3202];
  log += gen.text(1024 * 1024);
  e.changed_bytes += 1024 * 1024;
  return e;
}

struct Chunks {
  std::unordered_set<std::string> set;  // the chunks' bytes (the bench has the memory)
  size_t unique_bytes = 0;
  size_t refs = 0;
};

Chunks chunk_tree(const Tree& t, const ChunkerParams& p) {
  Chunks c;
  for (const auto& file : t.files) {
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

double cut_mbps(const Tree& t, const ChunkerParams& p) {
  std::vector<double> runs;
  size_t sink = 0;
  for (int r = 0; r < 3; ++r) {
    auto start = Clock::now();
    for (const auto& file : t.files) {
      std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(file.data()), file.size());
      while (!data.empty()) {
        size_t cut = cb::state::find_cut(data, p);
        sink += cut;
        data = data.subspan(cut);
      }
    }
    runs.push_back(double(t.bytes()) / 1e6 /
                   std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (sink == 0) std::fprintf(stderr, "?\n");
  std::sort(runs.begin(), runs.end());
  return runs[1];
}

// Cut, id, zstd, seal every distinct chunk once, as a first save would; returns MB/s of the
// tree's logical bytes and the sealed bytes.
std::pair<double, size_t> save_pipeline(const Tree& t, const ChunkerParams& p,
                                        const cb::state::StateKeys& keys) {
  cb::crypto::SeededRandom random(1);
  std::unordered_set<cb::state::ChunkId, cb::state::ChunkIdHash> seen;
  size_t sealed_bytes = 0;
  auto start = Clock::now();
  for (const auto& file : t.files) {
    std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(file.data()), file.size());
    while (!data.empty()) {
      size_t cut = cb::state::find_cut(data, p);
      auto chunk = data.first(cut);
      auto id = keys.chunk_id(chunk);
      if (seen.insert(id).second) {
        sealed_bytes += cb::state::seal_chunk(keys, id, chunk, random).size();
      }
      data = data.subspan(cut);
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return {double(t.bytes()) / 1e6 / secs, sealed_bytes};
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
  Tree tree = make_tree(gen, scale);
  Edited edited = edit_tree(gen, tree, scale);
  const double mib = 1024.0 * 1024.0;
  std::fprintf(stderr, "tree: %zu files, %.1f MiB; edits change %.2f MiB (%.2f%%)\n",
               tree.files.size(), double(tree.bytes()) / mib, double(edited.changed_bytes) / mib,
               100.0 * double(edited.changed_bytes) / double(tree.bytes()));
  cb::crypto::SeededRandom key_random(7);
  cb::state::StateKeys keys(cb::crypto::SymmetricKey::generate(key_random));

  std::printf("tree: %zu files, %.1f MiB logical; edits change %.2f MiB (%.2f%%)\n\n",
              tree.files.size(), double(tree.bytes()) / mib, double(edited.changed_bytes) / mib,
              100.0 * double(edited.changed_bytes) / double(tree.bytes()));
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
    Chunks after = chunk_tree(edited.tree, p);
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
        new_chunks, double(new_bytes) / mib, double(new_bytes) / double(edited.changed_bytes));
    std::fflush(stdout);
  }
  return 0;
}
