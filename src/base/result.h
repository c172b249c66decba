#pragma once
// Result<T> holds either a T or a non-ok Status (absl::StatusOr semantics).
//
//   Result<int> r = parse(x);
//   if (!r.ok()) return r.status();
//   use(*r);
//
// Constructing a Result from an ok Status is a bug and aborts (CB_CHECK), because it would
// hold neither a value nor an error. Thread-safety: a value type.

#include "base/check.h"
#include "base/status.h"

#include <utility>
#include <variant>

namespace cb {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : v_(value) {}        // NOLINT: implicit by design
  Result(T&& value) : v_(std::move(value)) {}  // NOLINT
  Result(const Status& status) : v_(status) { CB_CHECK(!status.ok()); }  // NOLINT
  Result(Status&& status) : v_(std::move(status)) {                      // NOLINT
    CB_CHECK(!std::get<Status>(v_).ok());
  }
  template <typename U,
            typename = std::enable_if_t<
                std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, Status> &&
                !std::is_same_v<std::decay_t<U>, Result<T>> && !std::is_same_v<std::decay_t<U>, T>>>
  Result(U&& value) : v_(std::in_place_index<0>, std::forward<U>(value)) {}  // NOLINT

  Result(const Result&) = default;
  Result& operator=(const Result&) = default;
  Result(Result&&) noexcept = default;
  Result& operator=(Result&&) noexcept = default;

  bool ok() const { return v_.index() == 0; }
  // The error, or an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

  // REQUIRES: ok().
  T& value() & {
    CB_CHECK(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    CB_CHECK(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    CB_CHECK(ok());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? std::get<0>(v_) : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

namespace internal {
inline Status to_status(const Status& s) { return s; }
inline Status to_status(Status&& s) { return std::move(s); }
template <typename T>
Status to_status(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace cb

#define CB_CONCAT_INNER_(a, b) a##b
#define CB_CONCAT_(a, b) CB_CONCAT_INNER_(a, b)

// Evaluates |expr| (a Status or Result) and returns its Status from the caller when not ok.
#define RETURN_IF_ERROR(expr)                                    \
  do {                                                           \
    ::cb::Status cb_status_ = ::cb::internal::to_status((expr)); \
    if (!cb_status_.ok()) return cb_status_;                     \
  } while (0)

#define CO_RETURN_IF_ERROR(expr)                                 \
  do {                                                           \
    ::cb::Status cb_status_ = ::cb::internal::to_status((expr)); \
    if (!cb_status_.ok()) co_return cb_status_;                  \
  } while (0)

#define CB_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, ret) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) ret tmp.status();                     \
  lhs = std::move(tmp).value()

// Evaluates |expr| (a Result<T>); on error returns its Status, else assigns the value to |lhs|
// (which may be a declaration: ASSIGN_OR_RETURN(auto x, f());).
#define ASSIGN_OR_RETURN(lhs, expr) \
  CB_ASSIGN_OR_RETURN_IMPL_(CB_CONCAT_(cb_result_, __LINE__), lhs, expr, return )
#define CO_ASSIGN_OR_RETURN(lhs, expr) \
  CB_ASSIGN_OR_RETURN_IMPL_(CB_CONCAT_(cb_result_, __LINE__), lhs, expr, co_return )
