#pragma once
// errno -> Status for src/proc/*.cc only: the one place in this folder where errno values
// become Codes (house style H7).
//
//   ENOENT, ENOTDIR, ESRCH              -> kNotFound
//   EACCES, EPERM                       -> kPermissionDenied
//   EMFILE, ENFILE, ENOMEM, EAGAIN      -> kResourceExhausted
//   EINVAL                              -> kInvalidArgument
//   anything else                       -> kInternal
// The message is "<what>: <strerror text>".

#include "base/status.h"

#include <fmt/format.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <system_error>

namespace cb::proc::internal {

inline std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

inline Status errno_status(int err, std::string_view what) {
  std::string msg = fmt::format("{}: {}", what, errno_text(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ESRCH:
      return not_found(msg);
    case EACCES:
    case EPERM:
      return permission_denied(msg);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
      return resource_exhausted(msg);
    case EINVAL:
      return invalid_argument(msg);
    default:
      return internal_error(msg);
  }
}

}  // namespace cb::proc::internal
