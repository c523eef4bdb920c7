// Unit tests of ExtendableDeadline (daemon/exchange.h), the deadline rule of every wait for a
// neighbour's data or verdict, driven with explicit times (no sleeping).
#include <doctest/doctest.h>

#include <chrono>

#include "daemon/exchange.h"

namespace gossip::daemon {
namespace {

using namespace std::chrono_literals;

const SteadyTime kT0{};  // construction time; span 400 ms

TEST_CASE("deadline: without a peer still coming it passes at the deadline, not before") {
  ExtendableDeadline d(kT0 + 400ms, kT0);
  const auto never = [] { return false; };
  CHECK_FALSE(d.passed(kT0 + 399ms, never));
  CHECK(d.passed(kT0 + 400ms, never));
  ExtendableDeadline no_rule(kT0 + 400ms, kT0);
  CHECK(no_rule.passed(kT0 + 400ms, nullptr));
}

TEST_CASE("deadline: a peer still behind extends it by whole spans, at most kMaxExtensions times") {
  ExtendableDeadline d(kT0 + 400ms, kT0);
  const auto always = [] { return true; };
  SteadyTime now = kT0 + 400ms;
  for (int k = 0; k < kMaxExtensions; ++k) {
    CHECK_FALSE(d.passed(now, always));
    CHECK(d.at() == kT0 + 400ms * (k + 2));
    now = d.at();
  }
  CHECK(d.passed(now, always));
}

TEST_CASE("deadline: a peer that caught up just before the deadline gets a span from then") {
  // Behind at every wake until 390 ms, caught up at 395 ms: it was held up, so at 400 ms the
  // wait goes on until 390 + 400 ms, and passes then if the data is still missing.
  ExtendableDeadline d(kT0 + 400ms, kT0);
  bool behind = true;
  const auto coming = [&] { return behind; };
  for (auto t = 0ms; t <= 390ms; t += 10ms) CHECK_FALSE(d.passed(kT0 + t, coming));
  behind = false;
  CHECK_FALSE(d.passed(kT0 + 395ms, coming));
  CHECK_FALSE(d.passed(kT0 + 400ms, coming));
  CHECK(d.at() == kT0 + 790ms);
  CHECK_FALSE(d.passed(kT0 + 789ms, coming));
  CHECK(d.passed(kT0 + 790ms, coming));
}

TEST_CASE("deadline: a peer last seen behind a whole span before the deadline gets nothing more") {
  ExtendableDeadline d(kT0 + 400ms, kT0);
  bool behind = true;
  const auto coming = [&] { return behind; };
  CHECK_FALSE(d.passed(kT0, coming));
  behind = false;
  CHECK_FALSE(d.passed(kT0 + 200ms, coming));
  CHECK(d.passed(kT0 + 400ms, coming));
}

}  // namespace
}  // namespace gossip::daemon
