#include "base/check.h"
#include "state/zstd_internal.h"

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
}  // namespace

std::string zstd_compress(std::string_view data, int level) {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxDeleter> cctx(ZSTD_createCCtx());
  CB_CHECK(cctx != nullptr);
  std::string out(ZSTD_compressBound(data.size()), '\0');
  size_t n = ZSTD_compressCCtx(cctx.get(), out.data(), out.size(), data.data(), data.size(), level);
  CB_CHECK(!ZSTD_isError(n));  // only fails on a too small buffer or bad level: a bug
  out.resize(n);
  return out;
}

Result<std::string> zstd_decompress(std::string_view frame, size_t max_size,
                                    std::string_view what) {
  unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return data_loss(std::string(what) + ": not a zstd frame");
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
    return data_loss(std::string(what) + ": zstd frame without a content size");
  }
  if (size > max_size) {
    return data_loss(std::string(what) + ": zstd content size " + std::to_string(size) +
                     " above the limit " + std::to_string(max_size));
  }
  thread_local std::unique_ptr<ZSTD_DCtx, DctxDeleter> dctx(ZSTD_createDCtx());
  CB_CHECK(dctx != nullptr);
  std::string out(size_t(size), '\0');
  size_t n = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) {
    return data_loss(std::string(what) + ": zstd: " + ZSTD_getErrorName(n));
  }
  if (n != size) return data_loss(std::string(what) + ": zstd frame shorter than declared");
  return out;
}

}  // namespace cb::state::internal
