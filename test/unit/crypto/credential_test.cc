#include "crypto/credential.h"

#include "base/base64.h"
#include "crypto/bytes.h"

#include <catch2/catch.hpp>

#include <limits>

namespace cb::crypto {
namespace {

// A Clock that reads a settable wall time (seconds since the epoch).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t unix_seconds) : now_(unix_seconds) {}
  void set(int64_t unix_seconds) { now_ = unix_seconds; }
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::time_point(std::chrono::seconds(now_));
  }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::seconds(now_));
  }

 private:
  int64_t now_;
};

constexpr int64_t kNow = 1'750'000'000;

struct Fixture {
  SeededRandom random{21};
  SigningKey key = SigningKey::generate(random);
  SigningKey other_key = SigningKey::generate(random);
  FakeClock clock{kNow};
  BoxIdentity identity{"box-1", "wake-3", "key-a", key.public_key()};
  CredentialVerifier verifier{identity, clock};

  std::string issue(std::string_view key_id = "key-a", std::string_view box_id = "box-1",
                    std::string_view wake_id = "wake-3",
                    int64_t exp = kNow + kCredentialLifetimeSeconds) const {
    return issue_credential(key, key_id, box_id, wake_id, exp);
  }
};

// "v1.<b64url(payload)>.<b64url(signature over the first part)>", built by hand so tests can
// produce validly signed credentials that break the payload grammar.
std::string sign_raw(const SigningKey& key, std::string_view payload) {
  std::string text = "v1." + base64url_encode(payload);
  return text + "." + base64url_encode(char_view(key.sign(text)));
}

Code code_of(const Result<ParsedCredential>& r) { return r.status().code(); }

TEST_CASE("issue_credential: produces the documented wire form", "[crypto][unit]") {
  Fixture f;
  const std::string text = f.issue();
  const size_t first = text.find('.');
  const size_t second = text.find('.', first + 1);
  REQUIRE(second != std::string::npos);
  CHECK(text.substr(0, first) == "v1");
  auto payload = base64url_decode(text.substr(first + 1, second - first - 1));
  REQUIRE(payload.ok());
  CHECK(*payload == "key-a|box-1|wake-3|" + std::to_string(kNow + 600));
  auto signature = base64url_decode(text.substr(second + 1));
  REQUIRE(signature.ok());
  CHECK(verify_ed25519(f.key.public_key(), text.substr(0, second), *signature));
  CHECK(text.find('=') == std::string::npos);
}

TEST_CASE("parse_credential: round trips what issue_credential signs", "[crypto][unit]") {
  Fixture f;
  const std::string text = f.issue();
  auto parsed = parse_credential(text);
  REQUIRE(parsed.ok());
  CHECK(parsed->claims == Credential{"key-a", "box-1", "wake-3", kNow + 600});
  CHECK(parsed->signed_text == text.substr(0, text.rfind('.')));
  CHECK(parsed->signature == f.key.sign(parsed->signed_text));

  SECTION("negative and extreme exp values are canonical int64s") {
    for (int64_t exp : {int64_t(0), int64_t(-5), std::numeric_limits<int64_t>::max(),
                        std::numeric_limits<int64_t>::min()}) {
      auto p = parse_credential(f.issue("k", "b", "w", exp));
      REQUIRE(p.ok());
      CHECK(p->claims.exp_unix == exp);
    }
  }
}

TEST_CASE("CredentialVerifier: accepts a fresh credential for this box and wake",
          "[crypto][unit]") {
  Fixture f;
  auto claims = f.verifier.verify(f.issue());
  REQUIRE(claims.ok());
  CHECK(claims->box_id == "box-1");
  CHECK(claims->wake_id == "wake-3");
  CHECK(claims->key_id == "key-a");
}

TEST_CASE("CredentialVerifier: refuses a credential for another box", "[crypto][unit]") {
  Fixture f;
  auto r = f.verifier.verify(f.issue("key-a", "box-2"));
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(r.status().message() == "credential: box_id names another box");
}

TEST_CASE("CredentialVerifier: refuses a credential for an older wake", "[crypto][unit]") {
  Fixture f;
  auto r = f.verifier.verify(f.issue("key-a", "box-1", "wake-2"));
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(r.status().message() == "credential: wake_id names another wake");
}

TEST_CASE("CredentialVerifier: refuses a credential naming another key id", "[crypto][unit]") {
  Fixture f;
  auto r = f.verifier.verify(f.issue("key-b"));
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(r.status().message() == "credential: key_id is not this box's signing key");
}

TEST_CASE("CredentialVerifier: refuses a signature from another key", "[crypto][unit]") {
  Fixture f;
  const std::string forged = issue_credential(f.other_key, "key-a", "box-1", "wake-3", kNow + 60);
  auto r = f.verifier.verify(forged);
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(r.status().message() == "credential: signature does not verify");

  SECTION("or a valid signature moved onto other claims") {
    const std::string genuine = f.issue();
    const std::string other = f.issue("key-a", "box-1", "wake-3", kNow + 599);
    const std::string spliced =
        other.substr(0, other.rfind('.')) + genuine.substr(genuine.rfind('.'));
    CHECK(f.verifier.verify(spliced).status().code() == Code::kUnauthenticated);
  }
}

TEST_CASE("CredentialVerifier: applies the 2 minute skew to expiry", "[crypto][unit]") {
  Fixture f;
  const int64_t exp = kNow + kCredentialLifetimeSeconds;
  const std::string text = f.issue("key-a", "box-1", "wake-3", exp);

  f.clock.set(exp);
  CHECK(f.verifier.verify(text).ok());
  f.clock.set(exp + kCredentialSkewSeconds);
  CHECK(f.verifier.verify(text).ok());
  f.clock.set(exp + kCredentialSkewSeconds + 1);
  auto r = f.verifier.verify(text);
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(r.status().message() == "credential: expired");
  f.clock.set(exp + 86400);
  CHECK(f.verifier.verify(text).status().code() == Code::kUnauthenticated);
}

TEST_CASE("CredentialVerifier: refuses an exp further ahead than lifetime plus skew",
          "[crypto][unit]") {
  Fixture f;
  const int64_t limit = kNow + kCredentialLifetimeSeconds + kCredentialSkewSeconds;
  CHECK(f.verifier.verify(f.issue("key-a", "box-1", "wake-3", limit)).ok());
  auto r = f.verifier.verify(f.issue("key-a", "box-1", "wake-3", limit + 1));
  CHECK(r.status().code() == Code::kUnauthenticated);
  CHECK(r.status().message() == "credential: exp_unix is too far in the future");
  CHECK(f.verifier.verify(f.issue("key-a", "box-1", "wake-3", std::numeric_limits<int64_t>::max()))
            .status()
            .code() == Code::kUnauthenticated);
  CHECK(f.verifier.verify(f.issue("key-a", "box-1", "wake-3", std::numeric_limits<int64_t>::min()))
            .status()
            .code() == Code::kUnauthenticated);
}

TEST_CASE("parse_credential: malformed strings are kUnauthenticated naming the part",
          "[crypto][unit]") {
  Fixture f;
  const std::string good = f.issue();
  const size_t dot1 = good.find('.');
  const size_t dot2 = good.rfind('.');
  const std::string payload_b64 = good.substr(dot1 + 1, dot2 - dot1 - 1);
  const std::string sig_b64 = good.substr(dot2 + 1);
  const std::string sig63 = base64url_encode(std::string(63, 's'));
  const std::string sig65 = base64url_encode(std::string(65, 's'));

  struct Case {
    const char* name;
    std::string text;
    const char* message_part;
  };
  const Case cases[] = {
      {"empty", "", "empty"},
      {"version only", "v1", "3 '.'-separated parts"},
      {"missing signature", "v1." + payload_b64, "got 2"},
      {"empty signature", "v1." + payload_b64 + ".", "signature: empty"},
      {"empty payload", "v1.." + sig_b64, "payload: empty"},
      {"only dots", "..", "version"},
      {"extra dot at the end", good + ".", "got 4"},
      {"extra part in the middle", "v1." + payload_b64 + ".x." + sig_b64, "got 4"},
      {"wrong version", "v2." + payload_b64 + "." + sig_b64, "version"},
      {"upper-case version", "V1." + payload_b64 + "." + sig_b64, "version"},
      {"bad base64 in payload", "v1." + payload_b64 + "!." + sig_b64, "payload: not base64url"},
      {"standard base64 alphabet", "v1.a+/b." + sig_b64, "payload: not base64url"},
      {"bad base64 in signature", "v1." + payload_b64 + ".*" + sig_b64, "signature: not base64url"},
      {"non-canonical trailing bits", "v1." + payload_b64 + "." + sig_b64.substr(0, 85) + "B",
       "signature: not base64url"},
      {"'=' padding on the signature", good + "==", "signature: '=' padding"},
      {"'=' padding on the payload", "v1." + base64url_encode("k|b|w|1") + "=." + sig_b64,
       "payload: '=' padding"},
      {"3 fields", sign_raw(f.key, "key-a|box-1|" + std::to_string(kNow)), "got 3"},
      {"5 fields", sign_raw(f.key, "key-a|box-1|wake-3|x|" + std::to_string(kNow)), "got 5"},
      {"empty key_id", sign_raw(f.key, "|box-1|wake-3|1"), "key_id is empty"},
      {"empty box_id", sign_raw(f.key, "key-a||wake-3|1"), "box_id is empty"},
      {"empty wake_id", sign_raw(f.key, "key-a|box-1||1"), "wake_id is empty"},
      {"empty exp", sign_raw(f.key, "key-a|box-1|wake-3|"), "exp_unix is empty"},
      {"non-numeric exp", sign_raw(f.key, "key-a|box-1|wake-3|soon"), "exp_unix"},
      {"exp with a suffix", sign_raw(f.key, "key-a|box-1|wake-3|12a"), "exp_unix"},
      {"exp with a leading zero", sign_raw(f.key, "key-a|box-1|wake-3|0123"), "exp_unix"},
      {"exp with a '+' sign", sign_raw(f.key, "key-a|box-1|wake-3|+123"), "exp_unix"},
      {"exp of -0", sign_raw(f.key, "key-a|box-1|wake-3|-0"), "exp_unix"},
      {"exp of a lone '-'", sign_raw(f.key, "key-a|box-1|wake-3|-"), "exp_unix"},
      {"exp with a space", sign_raw(f.key, "key-a|box-1|wake-3| 123"), "exp_unix"},
      {"exp above int64", sign_raw(f.key, "key-a|box-1|wake-3|9223372036854775808"), "exp_unix"},
      {"exp below int64", sign_raw(f.key, "key-a|box-1|wake-3|-9223372036854775809"), "exp_unix"},
      {"63-byte signature", "v1." + payload_b64 + "." + sig63, "signature: want 64 bytes, got 63"},
      {"65-byte signature", "v1." + payload_b64 + "." + sig65, "signature: want 64 bytes, got 65"},
      {"2 KB string", "v1." + std::string(2048, 'A') + "." + sig_b64, "longer than 1024"},
      {"1025 bytes", std::string(1025, 'v'), "longer than 1024"},
      {"NUL byte", "v1." + payload_b64 + std::string(1, '\0') + "." + sig_b64,
       "payload: not base64url"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    auto parsed = parse_credential(c.text);
    CHECK(code_of(parsed) == Code::kUnauthenticated);
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(c.message_part));
    CHECK_THAT(std::string(parsed.status().message()), Catch::StartsWith("credential: "));
    CHECK(f.verifier.verify(c.text).status().code() == Code::kUnauthenticated);
  }
}

TEST_CASE("parse_credential: the cap applies to the whole header", "[crypto][unit]") {
  Fixture f;
  // Build a validly signed credential of exactly 1024 bytes by growing the box id.
  std::string box_id;
  std::string text;
  while (true) {
    std::string next = sign_raw(f.key, "k|" + box_id + "x|w|1");
    if (next.size() > kMaxCredentialSize) break;
    box_id += "x";
    text = next;
  }
  CHECK(parse_credential(text).ok());
  CHECK(code_of(parse_credential(sign_raw(f.key, "k|" + box_id + "x|w|1"))) ==
        Code::kUnauthenticated);
}

TEST_CASE("BoxIdentity: round trips through the identity file JSON", "[crypto][unit]") {
  Fixture f;
  auto json = serialize_box_identity(f.identity);
  REQUIRE(json.ok());
  CHECK(*json == R"({"box_id":"box-1","wake_id":"wake-3","key_id":"key-a","public_key":")" +
                     base64url_encode(char_view(f.key.public_key())) + R"("})");
  auto parsed = parse_box_identity(*json);
  REQUIRE(parsed.ok());
  CHECK(*parsed == f.identity);

  SECTION("unknown members are ignored") {
    std::string extended = json->substr(0, json->size() - 1) + R"(,"future":[1,2]})";
    auto again = parse_box_identity(extended);
    REQUIRE(again.ok());
    CHECK(*again == f.identity);
  }
  SECTION("an id that is not UTF-8 cannot be written") {
    BoxIdentity bad = f.identity;
    bad.box_id = "\xff\xfe";
    CHECK(serialize_box_identity(bad).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("parse_box_identity: errors are kInvalidArgument naming the field", "[crypto][unit]") {
  Fixture f;
  const std::string key = base64url_encode(char_view(f.key.public_key()));
  auto with = [&](std::string box, std::string wake, std::string key_id, std::string pk) {
    return "{" + box + wake + key_id + pk + "}";
  };
  const std::string box = R"("box_id":"b",)", wake = R"("wake_id":"w",)",
                    key_id = R"("key_id":"k",)", pk = R"("public_key":")" + key + R"(")";
  REQUIRE(parse_box_identity(with(box, wake, key_id, pk)).ok());

  struct Case {
    std::string json;
    const char* message;
  };
  const Case cases[] = {
      {"", "identity: not valid JSON"},
      {"{", "identity: not valid JSON"},
      {"[1]", "identity: not a JSON object"},
      {with("", wake, key_id, pk), "identity: box_id: missing"},
      {with(R"("box_id":7,)", wake, key_id, pk), "identity: box_id: not a string"},
      {with(R"("box_id":"",)", wake, key_id, pk), "identity: box_id: empty"},
      {with(R"("box_id":"a|b",)", wake, key_id, pk), "identity: box_id: contains '|'"},
      {with(box, "", key_id, pk), "identity: wake_id: missing"},
      {with(box, R"("wake_id":null,)", key_id, pk), "identity: wake_id: not a string"},
      {with(box, wake, "", pk), "identity: key_id: missing"},
      {with(box, wake, R"("key_id":"|",)", pk), "identity: key_id: contains '|'"},
      {with(box, wake, key_id, R"("x":1)"), "identity: public_key: missing"},
      {with(box, wake, key_id, R"("public_key":"!!")"), "identity: public_key: not base64url"},
      {with(box, wake, key_id, R"("public_key":"AAAA")"),
       "identity: public_key: ed25519 public key: want 32 bytes, got 3"},
  };
  for (const Case& c : cases) {
    INFO(c.json);
    auto parsed = parse_box_identity(c.json);
    CHECK(parsed.status().code() == Code::kInvalidArgument);
    CHECK(parsed.status().message() == c.message);
  }
}

}  // namespace
}  // namespace cb::crypto
