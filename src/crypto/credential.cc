#include "crypto/credential.h"

#include "base/base64.h"
#include "base/check.h"
#include "crypto/bytes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace cb::crypto {

namespace {

constexpr std::string_view kVersion = "v1";

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

Status reject(std::string_view why) { return unauthenticated("credential: " + std::string(why)); }

// Decodes one base64url part strictly. base64url_decode accepts '=' padding; the credential
// grammar does not, so that one text has one meaning.
Result<std::string> decode_part(std::string_view part, std::string_view name) {
  if (part.empty()) return reject(std::string(name) + ": empty");
  if (part.find('=') != std::string_view::npos) {
    return reject(std::string(name) + ": '=' padding is not allowed");
  }
  auto bytes = base64url_decode(part);
  if (!bytes.ok()) return reject(std::string(name) + ": not base64url");
  return bytes;
}

// A canonical decimal int64: optional '-', then "0" or a digit 1-9 followed by digits; "-0",
// '+', leading zeros, spaces and out-of-range values are refused so that one exp has one text.
std::optional<int64_t> parse_canonical_int64(std::string_view text) {
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.remove_prefix(1);
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (digits[0] == '0' && (digits.size() > 1 || negative)) return std::nullopt;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool id_is_valid(std::string_view id) {
  return !id.empty() && id.find('|') == std::string_view::npos;
}

}  // namespace

std::string issue_credential(const SigningKey& key, std::string_view key_id,
                             std::string_view box_id, std::string_view wake_id, int64_t exp_unix) {
  CB_CHECK(id_is_valid(key_id));
  CB_CHECK(id_is_valid(box_id));
  CB_CHECK(id_is_valid(wake_id));
  std::string payload;
  payload.append(key_id).append("|").append(box_id).append("|").append(wake_id).append("|");
  payload += std::to_string(exp_unix);
  std::string text = std::string(kVersion) + "." + base64url_encode(payload);
  const Ed25519Signature signature = key.sign(text);
  text += ".";
  text += base64url_encode(char_view(signature));
  CB_CHECK(text.size() <= kMaxCredentialSize);
  return text;
}

Result<ParsedCredential> parse_credential(std::string_view text) {
  if (text.empty()) return reject("empty");
  if (text.size() > kMaxCredentialSize) {
    return reject("longer than " + std::to_string(kMaxCredentialSize) + " bytes");
  }
  const std::vector<std::string_view> parts = split(text, '.');
  if (parts.size() != 3) {
    return reject("want 3 '.'-separated parts (version, payload, signature), got " +
                  std::to_string(parts.size()));
  }
  if (parts[0] != kVersion) return reject("version: want \"v1\"");

  ASSIGN_OR_RETURN(const std::string payload, decode_part(parts[1], "payload"));
  const std::vector<std::string_view> fields = split(payload, '|');
  if (fields.size() != 4) {
    return reject("payload: want 4 '|'-separated fields (key_id|box_id|wake_id|exp_unix), got " +
                  std::to_string(fields.size()));
  }
  constexpr std::string_view kFieldNames[] = {"key_id", "box_id", "wake_id", "exp_unix"};
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].empty()) return reject("payload: " + std::string(kFieldNames[i]) + " is empty");
  }
  const std::optional<int64_t> exp = parse_canonical_int64(fields[3]);
  if (!exp) return reject("payload: exp_unix is not a canonical decimal int64");

  ASSIGN_OR_RETURN(const std::string signature, decode_part(parts[2], "signature"));
  if (signature.size() != kEd25519SignatureSize) {
    return reject("signature: want " + std::to_string(kEd25519SignatureSize) + " bytes, got " +
                  std::to_string(signature.size()));
  }

  ParsedCredential parsed;
  parsed.claims.key_id = std::string(fields[0]);
  parsed.claims.box_id = std::string(fields[1]);
  parsed.claims.wake_id = std::string(fields[2]);
  parsed.claims.exp_unix = *exp;
  parsed.signed_text = std::string(text.substr(0, parts[0].size() + 1 + parts[1].size()));
  std::copy(signature.begin(), signature.end(), reinterpret_cast<char*>(parsed.signature.data()));
  return parsed;
}

CredentialVerifier::CredentialVerifier(BoxIdentity identity, const Clock& clock)
    : identity_(std::move(identity)), clock_(clock) {}

Result<Credential> CredentialVerifier::verify(std::string_view text) const {
  ASSIGN_OR_RETURN(ParsedCredential parsed, parse_credential(text));
  const Credential& claims = parsed.claims;
  // key_id first: a credential for another key cannot verify, and saying so is clearer than
  // "bad signature" when keys rotate.
  if (claims.key_id != identity_.key_id) return reject("key_id is not this box's signing key");
  if (!verify_ed25519(identity_.public_key, parsed.signed_text, parsed.signature)) {
    return reject("signature does not verify");
  }
  if (claims.box_id != identity_.box_id) return reject("box_id names another box");
  if (claims.wake_id != identity_.wake_id) return reject("wake_id names another wake");

  // now <= exp + skew and exp <= now + lifetime + skew, written so neither side overflows
  // for any int64 exp or now.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kFuture = kCredentialLifetimeSeconds + kCredentialSkewSeconds;
  const int64_t now = clock_.now_unix();
  if (now >= kMin + kCredentialSkewSeconds && claims.exp_unix < now - kCredentialSkewSeconds) {
    return reject("expired");
  }
  if (now <= kMax - kFuture && claims.exp_unix > now + kFuture) {
    return reject("exp_unix is too far in the future");
  }
  return std::move(parsed.claims);
}

Result<BoxIdentity> parse_box_identity(std::string_view json) {
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return invalid_argument("identity: not valid JSON");
  if (!doc.is_object()) return invalid_argument("identity: not a JSON object");

  auto string_member = [&](const char* name) -> Result<std::string> {
    auto it = doc.find(name);
    if (it == doc.end()) return invalid_argument(std::string("identity: ") + name + ": missing");
    if (!it->is_string()) {
      return invalid_argument(std::string("identity: ") + name + ": not a string");
    }
    std::string value = it->get<std::string>();
    if (value.empty()) return invalid_argument(std::string("identity: ") + name + ": empty");
    return value;
  };

  BoxIdentity identity;
  ASSIGN_OR_RETURN(identity.box_id, string_member("box_id"));
  ASSIGN_OR_RETURN(identity.wake_id, string_member("wake_id"));
  ASSIGN_OR_RETURN(identity.key_id, string_member("key_id"));
  for (auto [name, id] :
       {std::pair{"box_id", &identity.box_id}, std::pair{"wake_id", &identity.wake_id},
        std::pair{"key_id", &identity.key_id}}) {
    if (!id_is_valid(*id)) {
      return invalid_argument(std::string("identity: ") + name + ": contains '|'");
    }
  }
  ASSIGN_OR_RETURN(const std::string key_text, string_member("public_key"));
  auto key_bytes = base64url_decode(key_text);
  if (!key_bytes.ok()) return invalid_argument("identity: public_key: not base64url");
  auto key = ed25519_public_key_from_bytes(*key_bytes);
  if (!key.ok()) return key.status().with_prefix("identity: public_key");
  identity.public_key = *key;
  return identity;
}

Result<std::string> serialize_box_identity(const BoxIdentity& identity) {
  nlohmann::ordered_json doc;
  doc["box_id"] = identity.box_id;
  doc["wake_id"] = identity.wake_id;
  doc["key_id"] = identity.key_id;
  doc["public_key"] = base64url_encode(char_view(identity.public_key));
  // dump() throws type_error 316 on invalid UTF-8; the exception stays inside this function
  // (house style H8).
  try {
    return doc.dump();
  } catch (const nlohmann::json::exception&) {
    return invalid_argument("identity: an id is not valid UTF-8");
  }
}

}  // namespace cb::crypto
