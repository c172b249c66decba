#pragma once
// Status is the result of an operation that can fail: ok, or a Code plus a message.
// Codes are gRPC's canonical codes (google.rpc.Code), so a Status produced anywhere can be
// sent as grpc-status without translation. ok() is cheap: an ok Status holds no allocation.
//
// Thread-safety: a Status is a value; distinct objects may be used from distinct threads.

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cb {

enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "OK", "CANCELLED", ... as gRPC spells them. Unknown values give "UNKNOWN".
std::string_view code_name(Code code);

// Maps an integer from the wire (grpc-status) to a Code; values outside 0..16 become kUnknown.
Code code_from_int(int value);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(Code code, std::string_view message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  std::string_view message() const { return rep_ ? std::string_view(rep_->message) : ""; }

  // Returns a copy whose message is "|prefix|: <message>"; ok stays ok.
  Status with_prefix(std::string_view prefix) const;

  // "OK" or "INVALID_ARGUMENT: <message>".
  std::string to_string() const;

  bool operator==(const Status& other) const {
    return code() == other.code() && message() == other.message();
  }

 private:
  struct Rep {
    Code code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

inline Status ok_status() { return Status(); }
Status cancelled(std::string_view msg);
Status unknown_error(std::string_view msg);
Status invalid_argument(std::string_view msg);
Status deadline_exceeded(std::string_view msg);
Status not_found(std::string_view msg);
Status already_exists(std::string_view msg);
Status permission_denied(std::string_view msg);
Status resource_exhausted(std::string_view msg);
Status failed_precondition(std::string_view msg);
Status aborted(std::string_view msg);
Status out_of_range(std::string_view msg);
Status unimplemented(std::string_view msg);
Status internal_error(std::string_view msg);
Status unavailable(std::string_view msg);
Status data_loss(std::string_view msg);
Status unauthenticated(std::string_view msg);

}  // namespace cb

template <>
struct fmt::formatter<cb::Status> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(const cb::Status& s, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(s.to_string(), ctx);
  }
};
