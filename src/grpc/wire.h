#pragma once
// The gRPC-over-HTTP/2 header encodings (PROTOCOL-HTTP2.md): grpc-timeout, grpc-message
// percent-encoding, binary (-bin) metadata, and the HTTP-status-to-gRPC-code mapping.
// Pure functions; no I/O.

#include "base/result.h"
#include "http/headers.h"

#include <chrono>
#include <string>
#include <string_view>

namespace cb::grpc {

// Metadata as the application sees it: lower-case keys; values of "-bin" keys are raw bytes.
using Metadata = http::Headers;

// "1S", "250m", "100u": at most 8 digits and a unit of H, M, S, m, u, n.
// Errors: kInvalidArgument naming the bad value.
Result<std::chrono::nanoseconds> parse_timeout(std::string_view value);
// The shortest exact-or-rounded-up encoding with at most 8 digits.
std::string format_timeout(std::chrono::nanoseconds timeout);

// Percent-encodes bytes outside 0x20..0x7E and '%' itself (grpc-message).
std::string percent_encode(std::string_view message);
// Decodes %XX; malformed escapes are kept verbatim, as the spec asks.
std::string percent_decode(std::string_view encoded);

bool is_binary_key(std::string_view key);
// True for keys applications may not set: pseudo-headers, grpc-* reserved ones, and
// connection-level fields. Errors name the key.
Status validate_metadata(const Metadata& md);
// Wire form: -bin values base64-encoded (padding omitted, as grpc-core sends).
http::Headers metadata_to_wire(const Metadata& md);
// Application form: -bin values decoded (padded or not). Reserved keys are dropped.
// Errors: kInternal for an undecodable -bin value.
Result<Metadata> metadata_from_wire(const http::Headers& headers);

// The gRPC code for a non-200 HTTP status (PROTOCOL-HTTP2.md / http-grpc-status-mapping.md).
Code code_for_http_status(int http_status);

}  // namespace cb::grpc
