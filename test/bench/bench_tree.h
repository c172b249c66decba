#pragma once
// The generated tree of the state benchmarks (chunking_bench, state_bench), in one place so
// both measure the same bytes. Deterministic: xorshift64* from a fixed seed, so every run and
// every tool sees the same tree and the same edit. Test-only; never part of the product binary.
//
// Per scale unit (about 340 MiB):
//   small   3000 source-like text files, 1-40 KiB
//   medium  200 files, 64 KiB - 2 MiB, half text (even indexes), half incompressible
//   large   a 64 MiB database of 4 KiB text pages, a 48 MiB incompressible image, a 32 MiB log
//   dups    300 small and 20 medium files again under other names
// The edit changes about 1 % the way a day of work does: 300 small files get a line inserted
// in the middle; 30 new small files; 5 medium text files get 100 bytes inserted at a random
// place; 512 random database pages are rewritten in place; 1 MiB is appended to the log.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace cb::bench {

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

inline std::vector<std::string> make_words(Rng& rng) {
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

// File contents, by index; the path of index i is the benchmark's business.
using Files = std::vector<std::string>;

// The index of the database and the log of the first scale unit.
constexpr size_t kDb = 3200, kLog = 3202;

inline size_t total_bytes(const Files& f) {
  size_t n = 0;
  for (const auto& s : f) n += s.size();
  return n;
}

inline Files make_tree(Gen& gen, int scale) {
  Files f;
  for (int s = 0; s < scale; ++s) {
    for (int i = 0; i < 3000; ++i) f.push_back(gen.text(1024 + gen.rng.below(39 * 1024)));
    for (int i = 0; i < 200; ++i) {
      size_t size = 64 * 1024 + gen.rng.below(2 * 1024 * 1024 - 64 * 1024);
      f.push_back(i % 2 == 0 ? gen.text(size) : gen.noise(size));
    }
    std::string db;
    while (db.size() < 64u * 1024 * 1024) db += gen.text(4096);
    f.push_back(std::move(db));
    f.push_back(gen.noise(48u * 1024 * 1024));
    f.push_back(gen.text(32u * 1024 * 1024));
  }
  for (int i = 0; i < 300 * scale; ++i) f.push_back(f[gen.rng.below(3000)]);
  for (int i = 0; i < 20 * scale; ++i) f.push_back(f[3000 + gen.rng.below(200)]);
  return f;
}

// Edits |f| in place; returns the bytes the edits wrote.
inline size_t edit_tree(Gen& gen, Files& f, int scale) {
  size_t changed = 0;
  for (int i = 0; i < 300 * scale; ++i) {
    std::string& file = f[gen.rng.below(3000)];
    std::string l = gen.line();
    size_t at = file.find('\n', file.size() / 2);
    file.insert(at == std::string::npos ? file.size() : at + 1, l);
    changed += l.size();
  }
  for (int i = 0; i < 30 * scale; ++i) {
    f.push_back(gen.text(1024 + gen.rng.below(39 * 1024)));
    changed += f.back().size();
  }
  for (int i = 0; i < 5 * scale; ++i) {
    std::string& file = f[3000 + 2 * gen.rng.below(100)];  // even indexes are text
    file.insert(gen.rng.below(file.size()), gen.text(100));
    changed += 100;
  }
  std::string& db = f[kDb];
  for (int i = 0; i < 512; ++i) {
    size_t page = gen.rng.below(db.size() / 4096);
    db.replace(page * 4096, 4096, gen.text(4096));
    changed += 4096;
  }
  f[kLog] += gen.text(1024 * 1024);
  changed += 1024 * 1024;
  return changed;
}

}  // namespace cb::bench
