#include "base/check.h"
#include "state/zstd_internal.h"

// ZSTD_c_format / ZSTD_d_format and ZSTD_getFrameHeader_advanced (magicless frames) are in
// zstd's static-linking API; the binary links libzstd statically.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <memory>

namespace cb::state::internal {

namespace {
struct CctxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_format_e zstd_format(ZstdFrame format) {
  return format == ZstdFrame::kMagicless ? ZSTD_f_zstd1_magicless : ZSTD_f_zstd1;
}
}  // namespace

std::string zstd_compress(std::string_view data, int level) {
  std::string out;
  zstd_compress_append(data, level, ZstdFrame::kStandard, ZstdTables::kLevel, out);
  return out;
}

size_t zstd_compress_append(std::string_view data, int level, ZstdFrame format, ZstdTables tables,
                            std::string& out) {
  const size_t start = out.size();
  out.resize(start + zstd_compress_bound(data.size()));
  const size_t n = zstd_compress_to(data, level, format, tables,
                                    std::span<char>(out.data() + start, out.size() - start));
  out.resize(start + n);
  return n;
}

size_t zstd_compress_bound(size_t size) { return ZSTD_compressBound(size); }

size_t zstd_compress_to(std::string_view data, int level, ZstdFrame format, ZstdTables tables,
                        std::span<char> out) {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxDeleter> cctx(ZSTD_createCCtx());
  ZSTD_CCtx* c = cctx.get();
  CB_CHECK(c != nullptr);
  CB_CHECK(out.size() >= ZSTD_compressBound(data.size()));
  // Only fail on a bad level or a too small buffer: bugs.
  CB_CHECK(!ZSTD_isError(ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters)));
  CB_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level)));
  CB_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_format, zstd_format(format))));
  if (tables == ZstdTables::kLarge) {
    CB_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, 17)));
    CB_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_chainLog, 16)));
  }
  const size_t n = ZSTD_compress2(c, out.data(), out.size(), data.data(), data.size());
  CB_CHECK(!ZSTD_isError(n));
  return n;
}

Result<std::string> zstd_decompress(std::string_view frame, size_t max_size, std::string_view what,
                                    ZstdFrame format) {
  ZSTD_frameHeader header;
  if (ZSTD_getFrameHeader_advanced(&header, frame.data(), frame.size(), zstd_format(format)) != 0 ||
      header.frameType != ZSTD_frame) {
    return data_loss(std::string(what) + ": not a zstd frame");
  }
  const unsigned long long size = header.frameContentSize;
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
    return data_loss(std::string(what) + ": zstd frame without a content size");
  }
  if (size > max_size) {
    return data_loss(std::string(what) + ": zstd content size " + std::to_string(size) +
                     " above the limit " + std::to_string(max_size));
  }
  thread_local std::unique_ptr<ZSTD_DCtx, DctxDeleter> dctx(ZSTD_createDCtx());
  CB_CHECK(dctx != nullptr);
  CB_CHECK(!ZSTD_isError(ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_and_parameters)));
  CB_CHECK(!ZSTD_isError(ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_format, zstd_format(format))));
  std::string out(size_t(size), '\0');
  size_t n = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) {
    return data_loss(std::string(what) + ": zstd: " + ZSTD_getErrorName(n));
  }
  if (n != size) return data_loss(std::string(what) + ": zstd frame shorter than declared");
  return out;
}

}  // namespace cb::state::internal
