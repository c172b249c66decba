#include "state/sigv4.h"

#include "crypto/bytes.h"
#include "crypto/hash.h"
#include "crypto/hmac.h"

#include <algorithm>
#include <cstdio>
#include <time.h>

namespace cb::state::sigv4 {

namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return out;
}

// Trims the value and folds runs of spaces and tabs into one space.
std::string trim_value(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string mac(std::string_view key, std::string_view message) {
  auto digest = crypto::hmac_sha256(key, message);
  return std::string(crypto::char_view(digest));
}

std::string scope_of(const Signing& s) {
  return s.amz_date.substr(0, 8) + "/" + s.region + "/" + s.service + "/aws4_request";
}

Status check_signing(const Signing& s) {
  const std::string& d = s.amz_date;
  bool ok = d.size() == 16 && d[8] == 'T' && d[15] == 'Z';
  for (size_t i = 0; ok && i < 15; ++i) ok = i == 8 || (d[i] >= '0' && d[i] <= '9');
  if (!ok) return invalid_argument("sigv4: amz_date must be YYYYMMDDTHHMMSSZ");
  if (s.region.empty() || s.service.empty()) {
    return invalid_argument("sigv4: region and service are required");
  }
  return ok_status();
}

// Lower-cased names with trimmed values, sorted by name; repeated names joined by ','.
Result<Pairs> canonical_headers(const Pairs& headers) {
  Pairs out;
  for (const auto& [name, value] : headers) {
    if (name.empty()) return invalid_argument("sigv4: empty header name");
    out.emplace_back(lower(name), trim_value(value));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Pairs merged;
  for (auto& h : out) {
    if (!merged.empty() && merged.back().first == h.first) {
      merged.back().second += "," + h.second;
    } else {
      merged.push_back(std::move(h));
    }
  }
  if (std::none_of(merged.begin(), merged.end(), [](const auto& h) { return h.first == "host"; })) {
    return invalid_argument("sigv4: a host header is required");
  }
  return merged;
}

std::string canonical_query(const Pairs& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [name, value] : query) {
    encoded.emplace_back(uri_encode(name, true), uri_encode(value, true));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name + "=" + value;
  }
  return out;
}

std::string signed_header_names(const Pairs& canonical) {
  std::string out;
  for (const auto& h : canonical) {
    if (!out.empty()) out += ';';
    out += h.first;
  }
  return out;
}

// The canonical request for already canonical pieces.
std::string assemble(const Request& r, const std::string& query, const Pairs& headers,
                     const std::string& signed_names) {
  std::string out = r.method + "\n" + uri_encode(r.path, false) + "\n" + query + "\n";
  for (const auto& [name, value] : headers) out += name + ":" + value + "\n";
  out += "\n" + signed_names + "\n" + r.payload_sha256;
  return out;
}

std::string signature(std::string_view secret, const Signing& s, std::string_view canonical) {
  return crypto::hex_encode(mac(signing_key(secret, s), string_to_sign(s, canonical)));
}

}  // namespace

std::string amz_date(std::chrono::system_clock::time_point at) {
  time_t t = std::chrono::system_clock::to_time_t(at);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[80];  // room for any int the compiler cannot rule out
  std::snprintf(buf, sizeof(buf), "%04d%02d%02dT%02d%02d%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

std::string uri_encode(std::string_view text, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = uint8_t(ch);
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !encode_slash);
    if (keep) {
      out += char(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<std::string> canonical_request(const Request& request) {
  if (request.path.empty() || request.path.front() != '/') {
    return invalid_argument("sigv4: the path must start with '/'");
  }
  ASSIGN_OR_RETURN(Pairs headers, canonical_headers(request.headers));
  return assemble(request, canonical_query(request.query), headers, signed_header_names(headers));
}

std::string string_to_sign(const Signing& signing, std::string_view canonical_request) {
  return std::string(kAlgorithm) + "\n" + signing.amz_date + "\n" + scope_of(signing) + "\n" +
         crypto::hex_encode(crypto::sha256(canonical_request));
}

std::string signing_key(std::string_view secret, const Signing& signing) {
  std::string key = mac("AWS4" + std::string(secret), signing.amz_date.substr(0, 8));
  key = mac(key, signing.region);
  key = mac(key, signing.service);
  return mac(key, "aws4_request");
}

Result<std::string> sign(Request& request, const Credentials& credentials, const Signing& signing) {
  RETURN_IF_ERROR(check_signing(signing));
  request.headers.emplace_back("x-amz-date", signing.amz_date);
  if (signing.service == "s3") {
    request.headers.emplace_back("x-amz-content-sha256", request.payload_sha256);
  }
  if (!credentials.session_token.empty()) {
    request.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  if (request.path.empty() || request.path.front() != '/') {
    return invalid_argument("sigv4: the path must start with '/'");
  }
  ASSIGN_OR_RETURN(Pairs headers, canonical_headers(request.headers));
  const std::string names = signed_header_names(headers);
  const std::string canonical = assemble(request, canonical_query(request.query), headers, names);
  return std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + "/" +
         scope_of(signing) + ", SignedHeaders=" + names +
         ", Signature=" + signature(credentials.secret_access_key, signing, canonical);
}

Result<std::string> presign(const Request& request, std::string_view scheme,
                            const Credentials& credentials, const Signing& signing,
                            int64_t expires_seconds) {
  RETURN_IF_ERROR(check_signing(signing));
  if (expires_seconds < 1 || expires_seconds > kMaxPresignSeconds) {
    return invalid_argument("sigv4: expiry must be 1.." + std::to_string(kMaxPresignSeconds) +
                            " seconds");
  }
  if (request.path.empty() || request.path.front() != '/') {
    return invalid_argument("sigv4: the path must start with '/'");
  }
  ASSIGN_OR_RETURN(Pairs headers, canonical_headers(request.headers));
  const std::string names = signed_header_names(headers);
  Request r = request;
  r.payload_sha256 = std::string(kUnsignedPayload);
  r.query.emplace_back("X-Amz-Algorithm", std::string(kAlgorithm));
  r.query.emplace_back("X-Amz-Credential", credentials.access_key_id + "/" + scope_of(signing));
  r.query.emplace_back("X-Amz-Date", signing.amz_date);
  r.query.emplace_back("X-Amz-Expires", std::to_string(expires_seconds));
  if (!credentials.session_token.empty()) {
    r.query.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  r.query.emplace_back("X-Amz-SignedHeaders", names);
  const std::string query = canonical_query(r.query);
  const std::string canonical = assemble(r, query, headers, names);
  std::string host;
  for (const auto& h : headers) {
    if (h.first == "host") host = h.second;
  }
  return std::string(scheme) + "://" + host + uri_encode(r.path, false) + "?" + query +
         "&X-Amz-Signature=" + signature(credentials.secret_access_key, signing, canonical);
}

}  // namespace cb::state::sigv4
