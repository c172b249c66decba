#pragma once
// A TokenIndex answers "whose token is this?" for the api's edge without touching the
// database: an in-memory map from the SHA-256 of every active token to its id and user,
// rebuilt from api.db when meta.change_generation moves.
//
//   api::TokenIndex index(*store);
//   Result<bool> loaded = co_await index.refresh_if_changed();            // at startup
//   if (!loaded.ok()) co_return loaded.status();
//   ... every ~500 ms: Result<bool> r = co_await index.refresh_if_changed();  (log errors)
//   Result<api::Principal> who = index.authenticate(bearer);            // per request
//
// Freshness: a token issued or revoked by another process (`cocoonbox api token revoke`)
// takes effect at the next refresh_if_changed() after its commit, that is within one refresh
// period. Between refreshes a revoked token still authenticates; the api also refreshes after
// its own user and token writes.
//
// Why a plain hash-map lookup is safe against timing attacks: the map is keyed by SHA-256 of
// the presented token, never by the token. An attacker who times the lookup learns, at most,
// how the digest of a token *they chose* compares with stored digests (bucket, prefix of
// equal bytes). Turning that into a stored token needs a SHA-256 preimage, and each stored
// token carries 256 random bits, so the partial-match signal that breaks a byte-by-byte
// compare of plaintext secrets gives nothing usable here. The cost of hashing depends only on
// the input's length, which the attacker already knows.
//
// Affinity: one executor (the api's loop). authenticate() is synchronous and cheap;
// refresh_if_changed() suspends while the Store's worker reads. Neither copyable nor movable.
// REQUIRES: the Store outlives the TokenIndex.

#include "base/result.h"
#include "crypto/hash.h"
#include "roles/api/store/store.h"

#include <asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace cb::api {

// Who a bearer token belongs to.
struct Principal {
  std::string token_id;  // "tk_..."; safe to log
  int64_t user_id = 0;
  std::string user_name;
};

class TokenIndex {
 public:
  // An empty index over |store|: authenticate() refuses everything until the first
  // refresh_if_changed() has loaded the tokens.
  explicit TokenIndex(Store& store);

  TokenIndex(const TokenIndex&) = delete;
  TokenIndex& operator=(const TokenIndex&) = delete;

  // Reads meta.change_generation (one small query on the worker) and, when it differs from
  // the generation loaded last, reloads every active token. Returns true when it reloaded.
  // On error the index keeps serving what it had.
  // Errors: those of Store::tokens_if_changed().
  asio::awaitable<Result<bool>> refresh_if_changed();

  // The principal for |bearer_token| (the token itself, without "Bearer "): SHA-256 of it,
  // then one map lookup. Errors: kUnauthenticated "unknown or revoked token" for anything
  // not active as of the last refresh; the token is never echoed in the message.
  Result<Principal> authenticate(std::string_view bearer_token) const;

  // The change generation of the loaded tokens; nullopt before the first load.
  std::optional<int64_t> generation() const { return generation_; }
  // How many active tokens are loaded.
  std::size_t size() const { return by_digest_.size(); }

 private:
  // SHA-256 output is uniform, so its first bytes are already a good bucket hash.
  struct DigestHash {
    std::size_t operator()(const crypto::Sha256Digest& d) const {
      std::size_t h = 0;
      std::memcpy(&h, d.data(), sizeof(h));
      return h;
    }
  };

  Store& store_;
  std::optional<int64_t> generation_;
  std::unordered_map<crypto::Sha256Digest, Principal, DigestHash> by_digest_;
};

}  // namespace cb::api
