#include "roles/api/store/token_index.h"

#include <utility>

namespace cb::api {

namespace {

// Well above "cbt_" + 43 characters; anything longer cannot be one of ours, and refusing it
// before hashing bounds the work a request can cause. The length is not secret.
constexpr std::size_t kMaxBearerBytes = 256;

}  // namespace

TokenIndex::TokenIndex(Store& store) : store_(store) {}

asio::awaitable<Result<bool>> TokenIndex::refresh_if_changed() {
  auto snapshot = co_await store_.tokens_if_changed(generation_);
  if (!snapshot.ok()) co_return snapshot.status();
  if (!snapshot->has_value()) co_return false;
  TokenSnapshot& s = **snapshot;
  // A concurrent refresh (two callers on the loop) may have installed a newer snapshot while
  // this one was being read; generations only grow, so keep the newer.
  if (generation_ && *generation_ > s.generation) co_return false;
  std::unordered_map<crypto::Sha256Digest, Principal, DigestHash> fresh;
  fresh.reserve(s.tokens.size());
  for (ActiveToken& t : s.tokens) {
    Principal p;
    p.token_id = std::move(t.token_id);
    p.user_id = t.user_id;
    p.user_name = std::move(t.user_name);
    fresh.emplace(t.sha256, std::move(p));
  }
  by_digest_.swap(fresh);
  generation_ = s.generation;
  co_return true;
}

Result<Principal> TokenIndex::authenticate(std::string_view bearer_token) const {
  if (bearer_token.empty() || bearer_token.size() > kMaxBearerBytes) {
    return unauthenticated("unknown or revoked token");
  }
  // See the header: the lookup is keyed by the digest, so its timing reveals nothing
  // usable about any stored token.
  const crypto::Sha256Digest digest = crypto::sha256(bearer_token);
  auto it = by_digest_.find(digest);
  if (it == by_digest_.end()) return unauthenticated("unknown or revoked token");
  return it->second;
}

}  // namespace cb::api
