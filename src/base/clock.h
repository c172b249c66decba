#pragma once
// Clock is the seam through which code reads time, so tests can pass a FakeClock
// (test/support/fake_clock.h). system_clock() is the process-wide real clock.
//
// Thread-safety: implementations must allow calls from any thread.

#include <chrono>
#include <cstdint>

namespace cb {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, for timestamps that leave the process (expiry, logs, records).
  virtual std::chrono::system_clock::time_point now() const = 0;
  // Monotonic time, for deadlines and durations.
  virtual std::chrono::steady_clock::time_point steady_now() const = 0;

  int64_t now_unix() const {
    return std::chrono::duration_cast<std::chrono::seconds>(now().time_since_epoch()).count();
  }
};

// The real clock. Never destroyed.
Clock& system_clock();

}  // namespace cb
