#pragma once
// SetClock: a Clock whose wall time a test sets (set_ms), for code that stamps or ages things
// by the time of day (snapshot ids, retention). Its steady clock stands still.

#include "base/clock.h"

#include <chrono>
#include <cstdint>

namespace cb::test {

class SetClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override { return now_; }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::time_point();
  }
  void set_ms(int64_t ms) {
    now_ = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
  }

 private:
  std::chrono::system_clock::time_point now_;
};

}  // namespace cb::test
