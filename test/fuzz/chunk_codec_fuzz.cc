// libFuzzer target for the chunk codec's zstd decoder (src/state/zstd_internal.h): a chunk
// object's body after authentication. The bytes authenticate under the user's state key, so
// they come from a box of that user, which may be compromised: another box of the same user
// decodes them on restore.
//
// The first input byte picks the frame format (even: standard, odd: magicless, chunk codecs 1
// and 2); the rest is the frame. Beyond "no crash, no sanitizer report" it checks what the
// contract promises: zstd_decompress() fails only with kDataLoss, never returns more than
// its limit, and what it returns compresses and decompresses back to itself in that format.
//
// Build and run: scripts/fuzz chunk_codec_fuzz 60

#include "state/zstd_internal.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace in = cb::state::internal;

void require(bool condition) {
  if (!condition) std::abort();
}

// Small enough that a fuzzed content size cannot make the fuzzer allocate much.
constexpr size_t kLimit = 1 << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const in::ZstdFrame format =
      data[0] % 2 == 0 ? in::ZstdFrame::kStandard : in::ZstdFrame::kMagicless;
  std::string_view frame(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto out = in::zstd_decompress(frame, kLimit, "chunk", format);
  if (!out.ok()) {
    require(out.status().code() == cb::Code::kDataLoss);
    return 0;
  }
  require(out->size() <= kLimit);
  std::string again;
  in::zstd_compress_append(*out, 1, format, in::ZstdTables::kLevel, again);
  auto back = in::zstd_decompress(again, kLimit, "chunk", format);
  require(back.ok() && *back == *out);
  return 0;
}
