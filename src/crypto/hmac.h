#pragma once
// HMAC-SHA-256 (RFC 2104, FIPS 198-1) with a key of any length, for protocols that specify
// it: AWS Signature Version 4 (src/state/sigv4.h) derives its signing key through a chain of
// HMACs. Backed by libsodium (crypto_auth_hmacsha256_init/update/final).
//
// Thread-safety: a free function; safe from any thread.

#include "crypto/hash.h"

#include <string_view>

namespace cb::crypto {

// HMAC-SHA-256 of |message| under |key| (any length; keys longer than the 64-byte block are
// hashed first, as RFC 2104 says).
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

}  // namespace cb::crypto
