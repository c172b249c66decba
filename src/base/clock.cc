#include "base/clock.h"

namespace cb {
namespace {
class SystemClock final : public Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    return std::chrono::system_clock::now();
  }
  std::chrono::steady_clock::time_point steady_now() const override {
    return std::chrono::steady_clock::now();
  }
};
}  // namespace

Clock& system_clock() {
  static SystemClock* clock = new SystemClock();  // never destroyed: usable during exit
  return *clock;
}
}  // namespace cb
