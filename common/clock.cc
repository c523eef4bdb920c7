// The real clock: steady_clock for deadlines, system_clock for timestamps.
#include "common/clock.h"

#include <chrono>
#include <thread>

namespace gossip {
namespace {

class SystemClock final : public Clock {
 public:
  std::int64_t monotonic_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::int64_t wall_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void sleep_for_ns(std::int64_t duration_ns) override {
    if (duration_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(duration_ns));
  }
};

}  // namespace

Clock& Clock::system() {
  static SystemClock clock;
  return clock;
}

}  // namespace gossip
