#pragma once
// The one place where std::error_code becomes a Status (house style H7):
//   operation_aborted -> kCancelled, timed_out -> kDeadlineExceeded,
//   reset, refused, eof, broken pipe, unreachable -> kUnavailable,
//   anything else -> kUnknown. The message is "<what>: <error text>".

#include "base/status.h"

#include <string_view>
#include <system_error>

namespace cb::net {

Status to_status(const std::error_code& ec, std::string_view what);

}  // namespace cb::net
