#include "crypto/blake2b_many.h"

#include "base/check.h"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cb::crypto {

namespace {

// RFC 7693: the initialization vector, the message schedule and the compression function F.
constexpr uint64_t kIv[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                             0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                             0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

constexpr uint8_t kSigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

constexpr size_t kBlock = 128;

uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

// The 12 rounds of F: G on the columns, then on the diagonals, of the 4x4 working vector,
// with the message words in the round's order. |g| mixes v[a], v[b], v[c], v[d] with the two
// words; M is a word, or a SIMD register of one word per lane. Always inlined, so |g| (the
// SIMD ones carry their target attribute) inlines into the caller's target too.
template <typename M, typename G>
[[gnu::always_inline]] inline void rounds(const M (&m)[16], G& g) {
  for (const auto& s : kSigma) {
    g(0, 4, 8, 12, m[s[0]], m[s[1]]);
    g(1, 5, 9, 13, m[s[2]], m[s[3]]);
    g(2, 6, 10, 14, m[s[4]], m[s[5]]);
    g(3, 7, 11, 15, m[s[6]], m[s[7]]);
    g(0, 5, 10, 15, m[s[8]], m[s[9]]);
    g(1, 6, 11, 12, m[s[10]], m[s[11]]);
    g(2, 7, 8, 13, m[s[12]], m[s[13]]);
    g(3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
}

// F on one message: |t| is the byte count including this block (messages here stay far
// below 2^64 bytes, so the counter's high word is 0).
void compress(uint64_t h[8], const uint8_t* block, uint64_t t, bool last) {
  uint64_t m[16], v[16];
  for (int i = 0; i < 16; ++i) m[i] = load64(block + 8 * i);
  for (int i = 0; i < 8; ++i) {
    v[i] = h[i];
    v[i + 8] = kIv[i];
  }
  v[12] ^= t;
  if (last) v[14] = ~v[14];
  auto g = [&](int a, int b, int c, int d, uint64_t x, uint64_t y) {
    v[a] = v[a] + v[b] + x;
    v[d] = rotr(v[d] ^ v[a], 32);
    v[c] = v[c] + v[d];
    v[b] = rotr(v[b] ^ v[c], 24);
    v[a] = v[a] + v[b] + y;
    v[d] = rotr(v[d] ^ v[a], 16);
    v[c] = v[c] + v[d];
    v[b] = rotr(v[b] ^ v[c], 63);
  };
  rounds(m, g);
  for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
}

#if defined(__x86_64__)

// F on 4 messages in the 64-bit lanes of AVX2 registers: h[i][lane], p[lane] the block,
// t[lane] the byte counts; never a last block (those are compressed one at a time).
__attribute__((target("avx2"))) void compress_x4(uint64_t h[8][4], const uint8_t* const p[4],
                                                 const uint64_t t[4]) {
  __m256i m[16];
  for (int j = 0; j < 16; j += 4) {  // words j..j+3 of each lane's block, transposed
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[0] + 8 * j));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[1] + 8 * j));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[2] + 8 * j));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[3] + 8 * j));
    const __m256i ab0 = _mm256_unpacklo_epi64(a, b), ab1 = _mm256_unpackhi_epi64(a, b);
    const __m256i cd0 = _mm256_unpacklo_epi64(c, d), cd1 = _mm256_unpackhi_epi64(c, d);
    m[j + 0] = _mm256_permute2x128_si256(ab0, cd0, 0x20);
    m[j + 1] = _mm256_permute2x128_si256(ab1, cd1, 0x20);
    m[j + 2] = _mm256_permute2x128_si256(ab0, cd0, 0x31);
    m[j + 3] = _mm256_permute2x128_si256(ab1, cd1, 0x31);
  }
  __m256i v[16];
  for (int i = 0; i < 8; ++i) {
    v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h[i]));
    v[i + 8] = _mm256_set1_epi64x(int64_t(kIv[i]));
  }
  v[12] = _mm256_xor_si256(v[12], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t)));
  const __m256i rot16 = _mm256_setr_epi8(2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9, 2, 3,
                                         4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9);
  const __m256i rot24 = _mm256_setr_epi8(3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10, 3, 4,
                                         5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10);
  auto g = [&](int a, int b, int c, int d, const __m256i& x, const __m256i& y)
      __attribute__((target("avx2"))) {
    v[a] = _mm256_add_epi64(_mm256_add_epi64(v[a], v[b]), x);
    v[d] = _mm256_shuffle_epi32(_mm256_xor_si256(v[d], v[a]), _MM_SHUFFLE(2, 3, 0, 1));
    v[c] = _mm256_add_epi64(v[c], v[d]);
    v[b] = _mm256_shuffle_epi8(_mm256_xor_si256(v[b], v[c]), rot24);
    v[a] = _mm256_add_epi64(_mm256_add_epi64(v[a], v[b]), y);
    v[d] = _mm256_shuffle_epi8(_mm256_xor_si256(v[d], v[a]), rot16);
    v[c] = _mm256_add_epi64(v[c], v[d]);
    const __m256i bc = _mm256_xor_si256(v[b], v[c]);
    v[b] = _mm256_or_si256(_mm256_srli_epi64(bc, 63), _mm256_add_epi64(bc, bc));
  };
  rounds(m, g);
  for (int i = 0; i < 8; ++i) {
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h[i]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h[i]),
                        _mm256_xor_si256(hi, _mm256_xor_si256(v[i], v[i + 8])));
  }
}

// GCC 12's AVX-512 intrinsics initialize their unused pass-through operand from itself
// (_mm512_undefined_epi32), which -Wuninitialized reports once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same on 8 messages in AVX-512 registers, with its native 64-bit rotate.
__attribute__((target("avx512f"))) void compress_x8(uint64_t h[8][8], const uint8_t* const p[8],
                                                    const uint64_t t[8]) {
  // Word j of every lane's block: a gather at each lane's address + 8j.
  const __m512i addresses = _mm512_loadu_si512(p);
  __m512i m[16];
  for (int j = 0; j < 16; ++j) {
    m[j] = _mm512_i64gather_epi64(_mm512_add_epi64(addresses, _mm512_set1_epi64(8 * j)),
                                  static_cast<const void*>(nullptr), 1);
  }
  __m512i v[16];
  for (int i = 0; i < 8; ++i) {
    v[i] = _mm512_loadu_si512(h[i]);
    v[i + 8] = _mm512_set1_epi64(int64_t(kIv[i]));
  }
  v[12] = _mm512_xor_si512(v[12], _mm512_loadu_si512(t));
  auto g = [&](int a, int b, int c, int d, const __m512i& x, const __m512i& y)
      __attribute__((target("avx512f"))) {
    v[a] = _mm512_add_epi64(_mm512_add_epi64(v[a], v[b]), x);
    v[d] = _mm512_ror_epi64(_mm512_xor_si512(v[d], v[a]), 32);
    v[c] = _mm512_add_epi64(v[c], v[d]);
    v[b] = _mm512_ror_epi64(_mm512_xor_si512(v[b], v[c]), 24);
    v[a] = _mm512_add_epi64(_mm512_add_epi64(v[a], v[b]), y);
    v[d] = _mm512_ror_epi64(_mm512_xor_si512(v[d], v[a]), 16);
    v[c] = _mm512_add_epi64(v[c], v[d]);
    v[b] = _mm512_ror_epi64(_mm512_xor_si512(v[b], v[c]), 63);
  };
  rounds(m, g);
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_si512(
        h[i], _mm512_xor_si512(_mm512_loadu_si512(h[i]), _mm512_xor_si512(v[i], v[i + 8])));
  }
}

#pragma GCC diagnostic pop

#endif  // __x86_64__

// The state after the key block, which every non-empty message keyed with |key| starts from.
std::array<uint64_t, 8> keyed_state(std::span<const uint8_t, kSymmetricKeySize> key) {
  std::array<uint64_t, 8> h;
  std::copy(std::begin(kIv), std::end(kIv), h.begin());
  h[0] ^= 0x01010000ULL ^ (uint64_t(kSymmetricKeySize) << 8) ^ kBlake2b256Size;
  uint8_t block[kBlock] = {};
  std::memcpy(block, key.data(), key.size());
  compress(h.data(), block, kBlock, false);
  return h;
}

// Compresses the last (partial or full) block of a message of |size| > 0 bytes whose state
// |h| has taken every block before it, and writes the digest.
void finish(uint64_t h[8], std::string_view message, Blake2b256Digest& out) {
  const size_t last = (message.size() - 1) / kBlock * kBlock;
  uint8_t block[kBlock] = {};
  std::memcpy(block, message.data() + last, message.size() - last);
  compress(h, block, kBlock + message.size(), true);
  for (size_t i = 0; i < kBlake2b256Size; ++i) out[i] = uint8_t(h[i / 8] >> (8 * (i % 8)));
}

// Hashes |inputs| W at a time with |compress_w|. A lane takes a message's blocks but its
// last; the lane's last block and any message of one block are compressed alone. A lane
// whose message ran out takes the next one, so messages of different sizes keep every lane
// busy until the last few, which finish one at a time.
template <int W, typename CompressW>
void hash_lanes(std::span<const uint8_t, kSymmetricKeySize> key,
                std::span<const std::string_view> inputs, std::span<Blake2b256Digest> out,
                CompressW compress_w) {
  const std::array<uint64_t, 8> keyed = keyed_state(key);
  alignas(64) uint64_t h[8][W];
  alignas(64) uint64_t t[W];
  const uint8_t* p[W];
  size_t input[W];
  size_t blocks_left[W];  // whole blocks before the message's last one; 0: lane idle
  static const uint8_t kIdleBlock[kBlock] = {};
  size_t next = 0;
  // Puts the next message with at least one block before its last into |lane|, finishing
  // the others on the way; false when none is left.
  auto take = [&](int lane) {
    while (next < inputs.size()) {
      const size_t i = next++;
      std::string_view message = inputs[i];
      if (message.empty()) {
        out[i] = blake2b_256(key, message);  // the key block is the last one
        continue;
      }
      if (message.size() <= kBlock) {
        std::array<uint64_t, 8> state = keyed;
        finish(state.data(), message, out[i]);
        continue;
      }
      for (int w = 0; w < 8; ++w) h[w][lane] = keyed[w];
      t[lane] = kBlock;
      p[lane] = reinterpret_cast<const uint8_t*>(message.data());
      input[lane] = i;
      blocks_left[lane] = (message.size() - 1) / kBlock;
      return true;
    }
    blocks_left[lane] = 0;
    p[lane] = kIdleBlock;
    return false;
  };
  int busy = 0;
  for (int lane = 0; lane < W; ++lane) busy += take(lane) ? 1 : 0;
  while (busy > 1) {
    size_t steps = SIZE_MAX;
    for (int lane = 0; lane < W; ++lane) {
      if (blocks_left[lane] > 0) steps = std::min(steps, blocks_left[lane]);
    }
    for (size_t s = 0; s < steps; ++s) {
      for (int lane = 0; lane < W; ++lane) t[lane] += kBlock;  // idle lanes' are never read
      compress_w(h, p, t);
      for (int lane = 0; lane < W; ++lane) {
        if (blocks_left[lane] > 0) p[lane] += kBlock;
      }
    }
    for (int lane = 0; lane < W; ++lane) {
      if (blocks_left[lane] == 0) continue;
      blocks_left[lane] -= steps;
      if (blocks_left[lane] > 0) continue;
      uint64_t state[8];
      for (int w = 0; w < 8; ++w) state[w] = h[w][lane];
      finish(state, inputs[input[lane]], out[input[lane]]);
      if (!take(lane)) --busy;
    }
  }
  // One lane left: its message goes on alone.
  for (int lane = 0; lane < W; ++lane) {
    if (blocks_left[lane] == 0) continue;
    uint64_t state[8];
    for (int w = 0; w < 8; ++w) state[w] = h[w][lane];
    for (; blocks_left[lane] > 0; --blocks_left[lane], p[lane] += kBlock) {
      t[lane] += kBlock;
      compress(state, p[lane], t[lane], false);
    }
    finish(state, inputs[input[lane]], out[input[lane]]);
  }
}

}  // namespace

int blake2b_many_lanes() {
#if defined(__x86_64__)
  static const int lanes = __builtin_cpu_supports("avx512f") ? 8
                           : __builtin_cpu_supports("avx2")  ? 4
                                                             : 1;
  return lanes;
#else
  return 1;
#endif
}

void blake2b_256_many(std::span<const uint8_t, kSymmetricKeySize> key,
                      std::span<const std::string_view> inputs, std::span<Blake2b256Digest> out,
                      int lanes) {
  CB_CHECK(out.size() == inputs.size());
  const int available = blake2b_many_lanes();
  lanes = lanes <= 0 ? available : std::min(lanes, available);
  if (lanes == 8 && inputs.size() < 4) lanes = 4;  // half the lanes or more would idle
  if (lanes > 1 && inputs.size() < 2) lanes = 1;
#if defined(__x86_64__)
  if (lanes >= 4) {
    if (lanes == 8) {
      hash_lanes<8>(key, inputs, out, compress_x8);
    } else {
      hash_lanes<4>(key, inputs, out, compress_x4);
    }
    return;
  }
#endif
  for (size_t i = 0; i < inputs.size(); ++i) out[i] = blake2b_256(key, inputs[i]);
}

}  // namespace cb::crypto
