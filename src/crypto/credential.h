#pragma once
// Box credentials (architecture §4 "Box identity", product design §12.1 option A). The api
// signs a short-lived credential for one box and one wake of it; the box's agent checks it on
// every relayed call (x-cocoonbox-credential) against the identity file the api wrote at boot
// or wake. A credential from another box, another key or an older wake is refused.
//
// Wire form (README.md §FORMAT, "Credential"):
//   v1.<b64url(key_id|box_id|wake_id|exp_unix)>.<b64url(ed25519 signature)>
// base64url without padding; the signature covers the ASCII bytes of "v1.<payload_b64url>",
// that is the text before the second dot exactly as sent, so a verifier checks the bytes it
// received and never has to re-encode anything.
//
// Expiry: credentials live kCredentialLifetimeSeconds (10 min) and a kCredentialSkewSeconds
// (2 min) clock skew is allowed both ways. With now = clock.now_unix(), a credential is
// accepted while now <= exp_unix + 120, and refused if exp_unix > now + 600 + 120 (it claims
// a lifetime no issuer gives, or the clocks are far apart).
//
// Every rejection is kUnauthenticated with a message naming the part or check that failed
// (never the secret or the whole input), so the edge can pass it on as grpc-status 16.
//
// Thread-safety: free functions are safe from any thread. A CredentialVerifier is immutable
// after construction; verify() may run on many threads at once if the Clock allows it.

#include "base/clock.h"
#include "base/result.h"
#include "crypto/keys.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cb::crypto {

// 1024 bytes: a cap on the whole header value, far above real credentials (ids are short),
// so a peer cannot make the verifier decode large inputs.
inline constexpr size_t kMaxCredentialSize = 1024;
inline constexpr int64_t kCredentialLifetimeSeconds = 10 * 60;
inline constexpr int64_t kCredentialSkewSeconds = 2 * 60;

// The claims of a credential.
struct Credential {
  std::string key_id;
  std::string box_id;
  std::string wake_id;
  int64_t exp_unix = 0;

  bool operator==(const Credential&) const = default;
};

// A syntactically valid credential, not yet verified.
struct ParsedCredential {
  Credential claims;
  std::string signed_text;  // "v1.<payload_b64url>", the bytes the signature covers
  Ed25519Signature signature{};
};

// The credential for |key_id|, |box_id|, |wake_id| expiring at |exp_unix|, signed by |key|.
// The issuer normally passes exp_unix = clock.now_unix() + kCredentialLifetimeSeconds.
// REQUIRES: the three ids are non-empty and contain no '|', and the credential fits in
// kMaxCredentialSize; these are the issuer's own data, so a violation is a bug and aborts
// (CB_CHECK) rather than produce a credential no verifier accepts.
std::string issue_credential(const SigningKey& key, std::string_view key_id,
                             std::string_view box_id, std::string_view wake_id, int64_t exp_unix);

// Splits and decodes |text| strictly: at most kMaxCredentialSize bytes; exactly three
// '.'-separated parts; version "v1"; payload and signature in base64url without '=' padding
// (canonical: unused trailing bits must be zero); payload exactly four '|'-separated fields,
// none empty; exp_unix a canonical decimal int64 (optional '-', no '+', no leading zeros, no
// "-0"); signature exactly 64 bytes. Checks no signature.
// Errors: kUnauthenticated naming the bad part.
Result<ParsedCredential> parse_credential(std::string_view text);

// What a box knows about itself, from its identity file: the ids a credential must carry and
// the public key it must be signed with.
struct BoxIdentity {
  std::string box_id;
  std::string wake_id;
  std::string key_id;
  Ed25519PublicKey public_key{};

  bool operator==(const BoxIdentity&) const = default;
};

// Checks credentials presented to one box.
class CredentialVerifier {
 public:
  // |clock| is not owned and must outlive the verifier.
  CredentialVerifier(BoxIdentity identity, const Clock& clock);

  CredentialVerifier(const CredentialVerifier&) = delete;
  CredentialVerifier& operator=(const CredentialVerifier&) = delete;

  // The claims of |text| if it parses (parse_credential), names this identity's key_id, is
  // signed by its public key, names its box_id and wake_id, and is within the expiry window
  // (see the top of this file). Checks run in that order.
  // Errors: kUnauthenticated naming the failed check.
  Result<Credential> verify(std::string_view text) const;

  const BoxIdentity& identity() const { return identity_; }

 private:
  BoxIdentity identity_;
  const Clock& clock_;
};

// The identity file: a JSON object {"box_id": s, "wake_id": s, "key_id": s,
// "public_key": s}, the public key in base64url (padding accepted, not written). Other
// members are ignored, so the file can grow.
// Errors: kInvalidArgument naming the field: not JSON or not an object; a member missing,
//   not a string or empty; an id containing '|'; a public key that is not base64url or not
//   a valid 32-byte ed25519 key.
Result<BoxIdentity> parse_box_identity(std::string_view json);

// The identity file text for |identity| (one line, members in the order above).
// Errors: kInvalidArgument if an id is not valid UTF-8, which JSON cannot carry.
Result<std::string> serialize_box_identity(const BoxIdentity& identity);

}  // namespace cb::crypto
