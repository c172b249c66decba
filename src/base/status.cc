#include "base/status.h"

namespace cb {

namespace {
constexpr std::string_view kNames[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};
}  // namespace

std::string_view code_name(Code code) {
  auto i = static_cast<int>(code);
  if (i < 0 || i > 16) return "UNKNOWN";
  return kNames[i];
}

Code code_from_int(int value) {
  if (value < 0 || value > 16) return Code::kUnknown;
  return static_cast<Code>(value);
}

Status::Status(Code code, std::string_view message) {
  if (code != Code::kOk) rep_ = std::make_unique<Rep>(Rep{code, std::string(message)});
}

Status::Status(const Status& other)
    : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
  return *this;
}

Status Status::with_prefix(std::string_view prefix) const {
  if (ok()) return Status();
  return Status(code(), fmt::format("{}: {}", prefix, message()));
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  if (rep_->message.empty()) return std::string(code_name(code()));
  return fmt::format("{}: {}", code_name(code()), rep_->message);
}

Status cancelled(std::string_view m) { return Status(Code::kCancelled, m); }
Status unknown_error(std::string_view m) { return Status(Code::kUnknown, m); }
Status invalid_argument(std::string_view m) { return Status(Code::kInvalidArgument, m); }
Status deadline_exceeded(std::string_view m) { return Status(Code::kDeadlineExceeded, m); }
Status not_found(std::string_view m) { return Status(Code::kNotFound, m); }
Status already_exists(std::string_view m) { return Status(Code::kAlreadyExists, m); }
Status permission_denied(std::string_view m) { return Status(Code::kPermissionDenied, m); }
Status resource_exhausted(std::string_view m) { return Status(Code::kResourceExhausted, m); }
Status failed_precondition(std::string_view m) { return Status(Code::kFailedPrecondition, m); }
Status aborted(std::string_view m) { return Status(Code::kAborted, m); }
Status out_of_range(std::string_view m) { return Status(Code::kOutOfRange, m); }
Status unimplemented(std::string_view m) { return Status(Code::kUnimplemented, m); }
Status internal_error(std::string_view m) { return Status(Code::kInternal, m); }
Status unavailable(std::string_view m) { return Status(Code::kUnavailable, m); }
Status data_loss(std::string_view m) { return Status(Code::kDataLoss, m); }
Status unauthenticated(std::string_view m) { return Status(Code::kUnauthenticated, m); }

}  // namespace cb
