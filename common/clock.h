// Clock: the one source of time, injected so that deadline, heartbeat and backoff logic can be
// tested with a ManualClock instead of real sleeps.
//
// Units are in the names. monotonic_ns() never goes backwards and is what deadlines use;
// wall_ms() is Unix time for log lines and metrics only. SystemClock is thread-safe; ManualClock
// is thread-safe too (its time is an atomic), so a test thread may advance it while others read.
#pragma once

#include <atomic>
#include <cstdint>

namespace gossip {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::int64_t monotonic_ns() const = 0;
  virtual std::int64_t wall_ms() const = 0;
  virtual void sleep_for_ns(std::int64_t duration_ns) = 0;

  double monotonic_seconds() const { return static_cast<double>(monotonic_ns()) * 1e-9; }

  // The process-wide real clock.
  static Clock& system();
};

// A clock that moves only when told to; sleep_for_ns advances it instead of sleeping.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::int64_t start_ns = 0) : now_ns_(start_ns) {}
  std::int64_t monotonic_ns() const override { return now_ns_.load(); }
  std::int64_t wall_ms() const override { return now_ns_.load() / 1'000'000; }
  void sleep_for_ns(std::int64_t duration_ns) override { advance_ns(duration_ns); }
  void advance_ns(std::int64_t duration_ns) { now_ns_.fetch_add(duration_ns); }

 private:
  std::atomic<std::int64_t> now_ns_;
};

// Measures elapsed monotonic time from construction or the last restart().
class Stopwatch {
 public:
  explicit Stopwatch(const Clock& clock = Clock::system()) : clock_(clock) { restart(); }
  void restart() { start_ns_ = clock_.monotonic_ns(); }
  std::int64_t elapsed_ns() const { return clock_.monotonic_ns() - start_ns_; }
  double elapsed_seconds() const { return static_cast<double>(elapsed_ns()) * 1e-9; }

 private:
  const Clock& clock_;
  std::int64_t start_ns_ = 0;
};

}  // namespace gossip
