// ControlMailbox (daemon/exchange.h): what it holds stays bounded whatever the run's length and
// whatever the peers send — verdicts of iterations already waited for are not kept, at most
// kMaxVerdictsPerPeer per peer are, and admissions that nobody takes stop at kMaxAdmissions —
// while the verdicts and admissions the loop asks for are still delivered.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>

#include "daemon/exchange.h"

namespace gossip::daemon {
namespace {

SteadyTime soon() { return std::chrono::steady_clock::now() + std::chrono::milliseconds(50); }

}  // namespace

TEST_CASE("ControlMailbox: a verdict per iteration of a long run keeps it at one per peer") {
  ControlMailbox box;
  const int peers[] = {1, 2};
  for (std::uint64_t t = 0; t < 100000; ++t) {
    box.put_verdict(1, {t, true, 2});
    box.put_verdict(2, {t, t % 2 == 0, 2});
    const auto got = box.wait_verdicts(t, peers, soon(), {}, {}, {});
    REQUIRE(got.size() == 2);
    REQUIRE(got.at(2).have_your_data == (t % 2 == 0));
    REQUIRE(box.verdicts_held() == 0);
  }
  // Late verdicts (an iteration already waited for) are not kept for a wait that never comes.
  for (std::uint64_t t = 0; t < 1000; ++t) box.put_verdict(1, {t, true, 2});
  CHECK(box.verdicts_held() == 0);
}

TEST_CASE("ControlMailbox: verdicts nobody waits for stop at kMaxVerdictsPerPeer per peer") {
  ControlMailbox box;
  // A peer that runs ahead (or a hostile one) while this node's loop does not wait for verdicts
  // (every neighbour dropped): the newest ones are kept.
  for (std::uint64_t t = 0; t < 10000; ++t) {
    box.put_verdict(1, {t, true, 2});
    box.put_verdict(3, {t * 7, true, 2});
  }
  CHECK(box.verdicts_held() == 2 * ControlMailbox::kMaxVerdictsPerPeer);
  const int one[] = {1};
  const auto got = box.wait_verdicts(9999, one, soon(), {}, {}, {});
  CHECK(got.count(1) == 1);
  CHECK(box.verdicts_held() == ControlMailbox::kMaxVerdictsPerPeer);  // node 3's, all above 9999
}

TEST_CASE("ControlMailbox: admissions nobody takes stop at kMaxAdmissions, then are counted") {
  ControlMailbox box;
  for (std::uint64_t k = 0; k < 3 * ControlMailbox::kMaxAdmissions; ++k) {
    box.put_admission({Admission::kAdmit, 1, k, false, k});
  }
  CHECK(box.admissions_held() == ControlMailbox::kMaxAdmissions);
  CHECK(box.admissions_dropped() == 2 * ControlMailbox::kMaxAdmissions);
  const auto taken = box.take_admissions();
  REQUIRE(taken.size() == ControlMailbox::kMaxAdmissions);
  CHECK(taken.front().iteration == 0);  // the first ones, in arrival order
  CHECK(box.admissions_held() == 0);
  box.put_admission({Admission::kAccept, 2, 5, true, 5});
  CHECK(box.take_admissions().size() == 1);
}

TEST_CASE(
    "ControlMailbox: a withdrawal of the waited-for iteration's admission ends the verdict wait "
    "for that peer at once") {
  ControlMailbox box;
  // The peer's last word on iteration 122 decides: a withdrawal, or a new proposal after it.
  box.put_admission({Admission::kAccept, 8, 122, true, 100});
  CHECK_FALSE(box.withdrawn(8, 122));
  box.put_admission({Admission::kAccept, 8, 122, false, 100});
  box.put_admission({Admission::kAdmit, 8, 127, false, 100});
  box.put_admission({Admission::kLeave, 8, 122, false, 0});
  CHECK(box.withdrawn(8, 122));
  CHECK_FALSE(box.withdrawn(8, 127));
  CHECK_FALSE(box.withdrawn(7, 122));
  box.put_admission({Admission::kAdmit, 8, 122, false, 101});
  CHECK_FALSE(box.withdrawn(8, 122));
  box.put_admission({Admission::kAccept, 8, 122, false, 101});
  // Node 7's verdict comes; node 8's never does, and the wait does not run to its 10 s deadline.
  box.put_verdict(7, {122, true, 4});
  const int peers[] = {7, 8};
  const auto start = std::chrono::steady_clock::now();
  const auto got = box.wait_verdicts(122, peers, start + std::chrono::seconds(10), {}, {}, {});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(got.size() == 1);
  CHECK(got.count(7) == 1);
  // The messages stay for the membership's next boundary.
  CHECK(box.take_admissions().size() == 6);
  CHECK_FALSE(box.withdrawn(8, 122));
}

}  // namespace gossip::daemon
