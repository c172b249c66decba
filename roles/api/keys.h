#pragma once
// The api's secrets on disk (architecture §6): the master key that seals every secret at rest,
// and the edge's ed25519 signing key for box credentials (seed §12.1 option A).
//
//   <data-dir>/master.key      32 random bytes, mode 0600
//   <data-dir>/edge-key.sealed the signing key's 32-byte seed, sealed under the master key with
//                              additional data "cocoonbox edge signing key v1"
//
// Both are created on first start. A key file readable by group or others is refused, so a
// misconfigured deployment fails loudly instead of running with an exposed key.

#include "base/result.h"
#include "crypto/keys.h"

#include <filesystem>
#include <string>

namespace cb::api {

struct EdgeKey {
  crypto::SigningKey key;
  std::string key_id;  // "k" + first 12 hex digits of SHA-256(public key)
};

// Loads <dir>/master.key or creates it. Errors: kFailedPrecondition (wrong size, or mode
// allows group/other access), kUnavailable (I/O).
Result<crypto::SymmetricKey> load_or_create_master_key(const std::filesystem::path& dir);

// Loads <dir>/edge-key.sealed or creates it. Errors: kDataLoss (does not open under the master
// key), kFailedPrecondition (mode), kUnavailable (I/O).
Result<EdgeKey> load_or_create_edge_key(const std::filesystem::path& dir,
                                        const crypto::SymmetricKey& master);

// Writes |data| to |path| with |mode| atomically (temp file, fsync, rename).
Status write_file_atomic(const std::filesystem::path& path, std::string_view data, int mode);

}  // namespace cb::api
