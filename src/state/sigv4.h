#pragma once
// AWS Signature Version 4 (docs.aws.amazon.com "Signature Version 4 signing process" and the
// S3 API reference "Authenticating Requests (AWS Signature Version 4)"): signing a request in
// its Authorization header, and presigning a URL (query-string auth), as the S3 store backend
// and the api's presigned chunk URLs need. Sans-I/O: strings in, strings out; the HTTP client
// is someone else's.
//
//   canonical request := method "\n" canonical_uri "\n" canonical_query "\n"
//                        (lower(name) ":" trim(value) "\n")* "\n" signed_headers "\n" payload_hash
//   string to sign    := "AWS4-HMAC-SHA256\n" amz_date "\n" scope "\n" hex(sha256(canonical
//   request)) scope             := date "/" region "/" service "/aws4_request" signing key       :=
//   HMAC(HMAC(HMAC(HMAC("AWS4" secret, date), region), service), "aws4_request") signature :=
//   hex(HMAC(signing key, string to sign))
//
// Tested against AWS's published examples (test/unit/state/sigv4_test.cc).
//
// Thread-safety: free functions.

#include "base/result.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cb::state::sigv4 {

// sha256 of the empty string: the payload hash of a request without a body.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr int64_t kMaxPresignSeconds = 7 * 24 * 3600;  // S3's limit

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials (x-amz-security-token)
};

using Pairs = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "PUT", ...
  std::string path;    // decoded, starting with '/': "/bucket/key with spaces"
  Pairs query;         // decoded names and values; a bare name has value ""
  Pairs headers;       // as sent; must include "host". sign() adds the x-amz-* ones.
  std::string payload_sha256 = std::string(kEmptyPayloadSha256);  // hex, or UNSIGNED-PAYLOAD
};

struct Signing {
  std::string region;    // "us-east-1"
  std::string service;   // "s3"
  std::string amz_date;  // "YYYYMMDDTHHMMSSZ" (amz_date())
};

// "YYYYMMDDTHHMMSSZ" in UTC.
std::string amz_date(std::chrono::system_clock::time_point at);

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - _ . ~ stay, every other byte
// becomes %XX (upper-case hex); '/' stays unless |encode_slash|.
std::string uri_encode(std::string_view text, bool encode_slash);

// The canonical request of |request| (all its headers are signed).
// Errors: kInvalidArgument if the path does not start with '/', there is no host header, or
//   a header name is empty.
Result<std::string> canonical_request(const Request& request);

// The string to sign for |canonical_request|.
std::string string_to_sign(const Signing& signing, std::string_view canonical_request);

// The 32-byte signing key for |secret| on the date part of |signing|.
std::string signing_key(std::string_view secret, const Signing& signing);

// Signs |request| in place for header authentication: adds x-amz-date, x-amz-content-sha256
// (for service "s3", which requires it) and x-amz-security-token (with a session token) to
// its headers, and returns the Authorization header value:
//   "AWS4-HMAC-SHA256 Credential=<id>/<scope>, SignedHeaders=<names>, Signature=<hex>"
// Errors: as canonical_request(); kInvalidArgument for a malformed amz_date.
Result<std::string> sign(Request& request, const Credentials& credentials, const Signing& signing);

// A presigned URL "<scheme>://<host><encoded path>?<query>" for |request| valid for
// |expires_seconds| (1..kMaxPresignSeconds) from signing.amz_date. The request's headers
// (at least host) are signed and must be sent as given; the payload is UNSIGNED-PAYLOAD.
// Errors: as sign(); kInvalidArgument for expires_seconds out of range.
Result<std::string> presign(const Request& request, std::string_view scheme,
                            const Credentials& credentials, const Signing& signing,
                            int64_t expires_seconds);

}  // namespace cb::state::sigv4
