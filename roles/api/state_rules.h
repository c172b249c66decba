#pragma once
// The api's checks and signatures for the state layer (README.md §State), as plain functions
// with their own tests (test/roles/api/state_rules_test.cc):
//
//   - ChunkUrlSigner: the signed, expiring, per-object URLs the api's door serves for the
//     filesystem store (the agent PUTs and GETs sealed chunks through them; an S3 store's
//     presigned URLs play the same part). A URL names one method, one object key and an
//     expiry, and is signed with HMAC-SHA-256 under a key derived from master.key:
//
//       /cocoonbox.state/v1/o/<key>?exp=<unix seconds>&sig=<hex HMAC>
//       HMAC(url_key, method "\n" key "\n" exp)     url_key = crypto_kdf(master, 1, "cbsturl1")
//
//   - restore_scope(): a RestorePaths request's box paths (§25.4) as manifest paths, refusing
//     paths outside /home/user and /workspace, with "..", or not absolute, naming the field.
//   - check_restore_target() / default_restore_target(): the folder under ~/Restored.
//
// Thread-safety: ChunkUrlSigner is immutable after construction.

#include "base/result.h"
#include "crypto/keys.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cb::api {

// Paths of the door's state routes (README.md §State).
inline constexpr std::string_view kStateUrlsPath = "/cocoonbox.state/v1/urls";
inline constexpr std::string_view kStateObjectPrefix = "/cocoonbox.state/v1/o/";
// Many chunks in one request (state/chunk_batch.h), with the filesystem store only: the
// ticket, not a signed URL, names what a request may fetch or store.
inline constexpr std::string_view kStateBatchGetPath = "/cocoonbox.state/v1/chunks/get";
inline constexpr std::string_view kStateBatchPutPath = "/cocoonbox.state/v1/chunks/put";
inline constexpr std::string_view kStateTicketHeader = "x-cocoonbox-state-ticket";

class ChunkUrlSigner {
 public:
  explicit ChunkUrlSigner(const crypto::SymmetricKey& master);

  // The door URL (origin-form target) for |method| ("GET" or "PUT") on object |key|, valid
  // until |expires_unix|.
  std::string sign(std::string_view method, std::string_view key, int64_t expires_unix) const;

  // The object key of the door URL |target| if it is signed for |method| and not expired at
  // |now_unix|. Errors: kInvalidArgument for a malformed target; kPermissionDenied when the
  //   signature does not match (another method, another key, a changed expiry, another
  //   master key) or the URL expired.
  Result<std::string> verify(std::string_view method, std::string_view target,
                             int64_t now_unix) const;

 private:
  std::string mac(std::string_view method, std::string_view key, int64_t expires_unix) const;
  crypto::SymmetricKey key_;
};

// The manifest paths of RestorePaths' box paths: "/workspace/t/a" -> "workspace/t/a".
// Errors: kInvalidArgument naming "paths[i]" for an empty list, a path that is not absolute,
//   has an empty, "." or ".." component, or lies outside /home/user and /workspace.
Result<std::vector<std::string>> restore_scope(const std::vector<std::string>& paths);

// Errors: kInvalidArgument naming "target" unless it is one folder name: 1..255 bytes of
//   printable characters without '/', not "." or "..", not starting with ".cb-restore-".
Status check_restore_target(std::string_view target);

// The folder a restore of a snapshot saved at |saved_at_ms| lands in by default:
// "2026-10-02T160812Z" (UTC).
std::string default_restore_target(int64_t saved_at_ms);

// A box path as a manifest path for BrowseSnapshot: "" and "/" are the top, "/workspace/t"
// is "workspace/t". Errors: kInvalidArgument naming "dir".
Result<std::string> browse_dir(std::string_view dir);

}  // namespace cb::api
