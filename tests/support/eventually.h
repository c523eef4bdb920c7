// Waiting for something another thread or process does, with a deadline: tests never sleep a fixed
// time and hope.
#pragma once

#include <chrono>
#include <thread>

namespace gossip::testing {

// Polls `condition` every `poll_ms` until it holds or `timeout_ms` have passed, then looks once
// more; returns whether it held.
template <class Condition>
bool eventually(Condition condition, int timeout_ms = 5000, int poll_ms = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return condition();
}

}  // namespace gossip::testing
