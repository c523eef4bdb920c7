// Pricing rounds (sim/experiment.h round_times, the round series of price): the closed forms of
// a round on a ring without stragglers, for gossip and DiLoCo, with and without overlap; and a
// round series priced as the model of --model-params, its bytes scaled from the measured ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "sgd/compress.h"
#include "sim/experiment.h"
#include "tests/sim/test_configs.h"

namespace gossip::sim {
namespace {

TEST_CASE("round_times: a round's closed forms on a ring of 8 without stragglers") {
  CostInputs in;
  in.net = {1e8, 2e-3};  // 12.5 MB/s, 2 ms
  in.message_bytes = 1e6;
  const std::vector<std::vector<std::vector<int>>> graph = {ring_in_neighbours(8)};
  const std::vector<int> degree = {2};
  const double wire = 2e-3 + 2 * 1e6 / 12.5e6;  // α + Δ M / B = 0.162 s
  // DiLoCo's ring of rounds: 2(n − 1) steps, each a rendezvous (α there, α + ⌈M/n⌉/B back).
  const double ring = 14 * (2 * 2e-3 + 125000 / 12.5e6);  // 0.196 s
  constexpr std::int64_t kRounds = 7;
  for (double compute : {1e-4, 1e-3, 0.05}) {
    in.compute_s = compute;
    for (int h : {1, 10, 50}) {
      for (bool overlap : {false, true}) {
        CAPTURE(compute);
        CAPTURE(h);
        CAPTURE(overlap);
        sgd::RoundConfig round;
        round.local_steps = h;
        round.compression.kind = sgd::CompressionKind::kInt8;
        round.overlap = overlap;
        const auto g = round_times(Scheme::kGossip, 8, in, round, graph, degree, kRounds);
        const auto a = round_times(Scheme::kRingAllreduce, 8, in, round, {}, {}, kRounds);
        REQUIRE(g.size() == kRounds + 1);
        REQUIRE(a.size() == kRounds + 1);
        const double hc = h * compute;
        // Without overlap the message leaves after the round's H steps (sgd/round.h): compute,
        // then the wire; with overlap the wire runs during the next round's steps.
        const double gossip_round = overlap ? std::max(hc, wire) : hc + wire;
        const double diloco = overlap ? kRounds * std::max(hc, ring) + ring : kRounds * (hc + ring);
        CHECK(g[kRounds] == doctest::Approx(kRounds * gossip_round));
        CHECK(a[kRounds] == doctest::Approx(diloco));
      }
    }
    // A per-iteration round is D-PSGD and C-PSGD: the exchange overlaps the gradient.
    const sgd::RoundConfig per_step;
    REQUIRE(per_step.per_iteration());
    const auto g = round_times(Scheme::kGossip, 8, in, per_step, graph, degree, kRounds);
    CHECK(g[kRounds] == doctest::Approx(kRounds * std::max(compute, wire)));
    const auto a = round_times(Scheme::kRingAllreduce, 8, in, per_step, {}, {}, kRounds);
    CHECK(a[kRounds] ==
          doctest::Approx(kRounds * (compute + ring_allreduce_comm_s(8, 1e6, in.net))));
  }
}

TEST_CASE("a round series is priced as the model of --model-params") {
  ExperimentConfig c = least_squares_experiment(4, 1024, 256, 8, 40);
  c.run.round.local_steps = 10;
  c.run.round.compression.kind = sgd::CompressionKind::kInt8;
  c.cost.net = {1e7, 5e-3};
  c.cost.compute_s = 1e-3;
  auto own = run_experiment(c);
  REQUIRE(own.is_ok());
  c.cost.model_params = 1e6;
  auto big = run_experiment(c);
  REQUIRE(big.is_ok());
  REQUIRE(own->series.size() == 2);  // DiLoCo, local-step gossip
  REQUIRE(big->series.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const Series& a = own->series[k];
    const Series& b = big->series[k];
    CAPTURE(a.algorithm);
    // A gossip message moves whole floats: 9 parameters in int8 are 13 bytes, sent as 16.
    const auto bytes = [&](std::size_t params) {
      return static_cast<double>(a.scheme == Scheme::kGossip
                                     ? sgd::gossip_message_bytes(c.run.round.compression, params)
                                     : sgd::compressed_bytes(c.run.round.compression, params));
    };
    const double m_big = bytes(1000000);
    const double m_own = bytes(9);
    CHECK(m_own == (a.scheme == Scheme::kGossip ? 16 : 13));
    CHECK(a.message_bytes == m_own);
    CHECK(b.message_bytes == m_big);
    CHECK(b.bytes_per_node == doctest::Approx(a.bytes_per_node * m_big / m_own));
  }
  // 10^6 parameters in int8: 1,015,628 bytes, whole floats (the same for both schemes).
  const double m_big = static_cast<double>(sgd::compressed_bytes(c.run.round.compression, 1000000));
  REQUIRE(m_big == 1015628);
  // Gossip on a ring of 4 (Δ = 2), 4 rounds of 10 steps: 4 (10 c + α + 2 M / B).
  const Series& gossip = big->series[1];
  REQUIRE(gossip.scheme == Scheme::kGossip);
  CHECK(gossip.time_s.back() == doctest::Approx(4 * (10e-3 + 5e-3 + 2 * m_big / 1.25e6)));
  // Each node sends its message to its 2 neighbours once a round.
  CHECK(gossip.bytes_per_node == doctest::Approx(4 * 2 * m_big));
  // DiLoCo: 4 (10 c + the ring of rounds of M: 6 steps of 2α + ⌈M/4⌉/B).
  const Series& diloco = big->series[0];
  REQUIRE(diloco.scheme == Scheme::kRingAllreduce);
  CHECK(diloco.time_s.back() ==
        doctest::Approx(4 * (10e-3 + 6 * (2 * 5e-3 + std::ceil(m_big / 4) / 1.25e6))));
}

}  // namespace
}  // namespace gossip::sim
