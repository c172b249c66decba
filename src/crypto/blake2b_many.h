#pragma once
// Keyed BLAKE2b-256 of many messages at once: the same digests as blake2b_256(), computed
// 4 (AVX2) or 8 (AVX-512) messages side by side in SIMD lanes. BLAKE2b is serial within a
// message, so one message cannot go faster than about 1.4 GB/s on a core; a save hashes
// every chunk it reads, and its chunks come many at a time (src/state/scanner.cc).
//
// Thread-safety: free functions; safe from any thread.

#include "crypto/blake2b.h"

#include <span>
#include <string_view>

namespace cb::crypto {

// Messages hashed side by side on this CPU: 8 with AVX-512F, 4 with AVX2, else 1.
int blake2b_many_lanes();

// out[i] = blake2b_256(key, inputs[i]) for every i, |lanes| messages at a time: 0 takes
// blake2b_many_lanes(); 1, 4 or 8 ask for that width, and one the CPU lacks falls back to
// the widest it has (tests compare every width it has against blake2b_256()).
// REQUIRES: out.size() == inputs.size().
void blake2b_256_many(std::span<const uint8_t, kSymmetricKeySize> key,
                      std::span<const std::string_view> inputs, std::span<Blake2b256Digest> out,
                      int lanes = 0);

}  // namespace cb::crypto
