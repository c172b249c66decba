#pragma once
// Base64 (RFC 4648 §4) and base64url (§5). Encoders write no padding for base64url and
// padding for standard base64 (gRPC -bin metadata and most peers expect it). Decoders accept
// input with or without padding and reject any other character with kInvalidArgument.

#include "base/result.h"

#include <string>
#include <string_view>

namespace cb {

std::string base64_encode(std::string_view bytes);
std::string base64url_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);
Result<std::string> base64url_decode(std::string_view text);

}  // namespace cb
