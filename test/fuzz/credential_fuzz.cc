// libFuzzer target for the box credential parser and verifier (src/crypto/credential.h): the
// x-cocoonbox-credential header is untrusted bytes from the network.
//
// Beyond "no crash, no sanitizer report" it checks properties the contract promises:
// - every rejection is kUnauthenticated;
// - verify() never accepts what parse_credential() refuses;
// - the grammar is canonical: an accepted input is exactly what re-encoding its parts gives,
//   so one credential has one spelling;
// - an accepted credential carries this harness's identity and a live expiry.
//
// The seed corpus (test/fuzz/corpus/credential/) holds credentials signed with the fixed key
// below, valid at kNow, so mutations start from inputs that reach the signature check.
//
// Build by hand:
//   clang++ -std=c++20 -fsanitize=fuzzer,address -DFMT_HEADER_ONLY -Isrc \
//     test/fuzz/credential_fuzz.cc src/crypto/*.cc src/base/*.cc -lsodium -o /tmp/credential_fuzz

#include "base/base64.h"
#include "base/clock.h"
#include "base/status.h"
#include "crypto/bytes.h"
#include "crypto/credential.h"
#include "crypto/keys.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using cb::crypto::CredentialVerifier;
using cb::crypto::SigningKey;

// 2025-06-15T15:06:40Z; the corpus credentials expire at kNow + 600.
constexpr int64_t kNow = 1'750'000'000;
// Exactly 32 bytes: the ed25519 seed that signed the corpus.
constexpr std::string_view kSeed = "cocoonbox credential fuzz seed!!";
static_assert(kSeed.size() == cb::crypto::kEd25519SeedSize);

class FixedClock final : public cb::Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::time_point(std::chrono::seconds(kNow));
  }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::seconds(kNow));
  }
};

struct Harness {
  FixedClock clock;
  SigningKey key = std::move(SigningKey::from_seed(kSeed)).value();
  CredentialVerifier verifier{{"box-1", "wake-3", "key-a", key.public_key()}, clock};
};

const Harness& harness() {
  static const Harness* h = new Harness();  // never destroyed: libFuzzer may exit anywhere
  return *h;
}

void check(bool property) {
  if (!property) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Harness& h = harness();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto parsed = cb::crypto::parse_credential(text);
  auto verified = h.verifier.verify(text);
  if (!parsed.ok()) {
    check(parsed.status().code() == cb::Code::kUnauthenticated);
    check(!verified.ok());
    return 0;
  }

  const cb::crypto::Credential& claims = parsed->claims;
  const std::string payload = claims.key_id + "|" + claims.box_id + "|" + claims.wake_id + "|" +
                              std::to_string(claims.exp_unix);
  const std::string signed_text = "v1." + cb::base64url_encode(payload);
  check(parsed->signed_text == signed_text);
  check(signed_text + "." + cb::base64url_encode(cb::crypto::char_view(parsed->signature)) == text);

  if (verified.ok()) {
    check(*verified == claims);
    check(claims.box_id == "box-1" && claims.wake_id == "wake-3" && claims.key_id == "key-a");
    check(claims.exp_unix >= kNow - cb::crypto::kCredentialSkewSeconds);
    check(claims.exp_unix <=
          kNow + cb::crypto::kCredentialLifetimeSeconds + cb::crypto::kCredentialSkewSeconds);
    check(cb::crypto::verify_ed25519(h.key.public_key(), parsed->signed_text, parsed->signature));
  } else {
    check(verified.status().code() == cb::Code::kUnauthenticated);
  }
  return 0;
}
