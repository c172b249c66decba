#include "state/pack.h"

#include "crypto/hash.h"
#include "state/encoding_internal.h"
#include "state/store.h"
#include "state/zstd_internal.h"

namespace cb::state {

namespace {

constexpr uint64_t kPackIndexVersion = 1;

}  // namespace

uint64_t PackIndex::live_bytes() const {
  uint64_t n = 0;
  for (const PackEntry& e : entries) n += e.size;
  return n;
}

std::string encode_pack_index(const PackIndex& index) {
  std::string raw;
  raw.reserve(16 + index.entries.size() * 96);
  internal::put_varint(raw, kPackIndexVersion);
  internal::put_varint(raw, index.data_size);
  internal::put_varint(raw, index.entries.size());
  uint64_t end = 0;
  for (const PackEntry& e : index.entries) {
    internal::put_bytes(raw, e.key);
    internal::put_varint(raw, e.offset - end);
    internal::put_varint(raw, e.size);
    end = e.offset + e.size;
  }
  // Level 3: the keys are hex under one prefix, which zstd's literals coding halves.
  std::string out = internal::zstd_compress(raw, 3);
  const crypto::Sha256Digest digest = crypto::sha256(out);
  internal::put_u32le(out, uint32_t(out.size()));
  out.append(reinterpret_cast<const char*>(digest.data()), kPackDigestSize);
  out += kPackMagic;
  return out;
}

Result<size_t> pack_index_size(std::string_view tail, std::string_view what) {
  if (tail.size() < kPackFooterSize) return data_loss(std::string(what) + ": no pack footer");
  const std::string_view footer = tail.substr(tail.size() - kPackFooterSize);
  if (footer.substr(4 + kPackDigestSize) != kPackMagic)
    return data_loss(std::string(what) + ": bad pack magic");
  const uint32_t size = internal::get_u32le(footer);
  if (size > kMaxPackIndexSize) {
    return data_loss(std::string(what) + ": pack index of " + std::to_string(size) + " bytes");
  }
  return size_t(size);
}

Result<PackIndex> decode_pack_index(std::string_view tail, std::string_view what,
                                    size_t* consumed) {
  ASSIGN_OR_RETURN(size_t size, pack_index_size(tail, what));
  if (tail.size() - kPackFooterSize < size) {
    return data_loss(std::string(what) + ": pack index larger than the file");
  }
  const std::string_view frame = tail.substr(tail.size() - kPackFooterSize - size, size);
  const crypto::Sha256Digest digest = crypto::sha256(frame);
  if (std::string_view(reinterpret_cast<const char*>(digest.data()), kPackDigestSize) !=
      tail.substr(tail.size() - kPackFooterSize + 4, kPackDigestSize)) {
    return data_loss(std::string(what) + ": pack index digest mismatch");
  }
  ASSIGN_OR_RETURN(std::string raw, internal::zstd_decompress(frame, kMaxPackIndexSize, what));
  internal::Reader r(raw, what);
  ASSIGN_OR_RETURN(uint64_t version, r.varint());
  if (version != kPackIndexVersion) return r.bad("pack index version " + std::to_string(version));
  PackIndex index;
  ASSIGN_OR_RETURN(index.data_size, r.varint());
  ASSIGN_OR_RETURN(uint64_t count, r.varint());
  // Every entry takes at least 3 bytes: a count beyond that is a lie, not an allocation.
  if (count > r.remaining() / 3) return r.bad("entry count beyond the index");
  index.entries.reserve(size_t(count));
  uint64_t end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    PackEntry e;
    ASSIGN_OR_RETURN(std::string_view key, r.bytes(kMaxKeySize));
    if (Status s = validate_key(key); !s.ok()) return r.bad(s.message());
    ASSIGN_OR_RETURN(uint64_t gap, r.varint());
    ASSIGN_OR_RETURN(e.size, r.varint());
    if (gap > index.data_size - end || e.size > index.data_size - end - gap) {
      return r.bad("entry " + std::to_string(i) + " beyond the data");
    }
    e.key = std::string(key);
    e.offset = end + gap;
    end = e.offset + e.size;
    index.entries.push_back(std::move(e));
  }
  if (!r.done()) return r.bad("bytes after the entries");
  if (consumed != nullptr) *consumed = size + kPackFooterSize;
  return index;
}

}  // namespace cb::state
