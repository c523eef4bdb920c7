// The advice for a link (sim/link_advice.h) against its stated rule, evaluated with the cost
// model's closed forms (no stragglers): a per-iteration wire time α + Δ·M/B, an int8 message of
// d + 4⌈d/256⌉ bytes, per-step D-PSGD max(c, w), an overlapped round max(H·c, w), a plain one
// H·c + w.
#include "sim/link_advice.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

namespace gossip::sim {
namespace {

constexpr double kMlpParams = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;  // 235146

// One int8 gossip message of d parameters: d bytes and a scale per 256, in whole floats.
double int8_bytes(double d) { return 4 * std::ceil((d + 4 * std::ceil(d / 256)) / 4); }

LinkAdviceInputs inputs(double bandwidth_bps, double latency_s, double compute_s,
                        double params = kMlpParams, int nodes = 8) {
  LinkAdviceInputs in;
  in.link.bandwidth_bps = bandwidth_bps;
  in.link.latency_s = latency_s;
  in.compute_s = compute_s;
  in.params = params;
  in.nodes = nodes;
  return in;
}

// Step 1: every candidate's wire time is α + Δ·4d/B, and the chosen one has the least wire time to
// shrink the consensus error 1000×.
void check_topology_rule(const LinkAdvice& a) {
  const LinkAdviceInputs& in = a.inputs;
  REQUIRE(!a.topologies.empty());
  for (const TopologyChoice& t : a.topologies) {
    CAPTURE(t.name);
    CHECK(t.wire_s == doctest::Approx(in.link.latency_s +
                                      t.max_degree * 4 * in.params / (in.link.bandwidth_bps / 8)));
    CHECK(a.topologies[a.chosen].wire_to_1000x_s <= t.wire_to_1000x_s * (1 + 1e-9));
  }
}

TEST_CASE(
    "10 Mbit/s, 5 ms, the demo MLP at 0.45 ms a step: one-peer graph, int8, large H, overlap") {
  const double c = 0.45e-3;
  auto a = advise_link(inputs(1e7, 5e-3, c));
  REQUIRE(a.is_ok());
  check_topology_rule(*a);
  // 8 nodes: the one-peer exponential graph averages exactly in log2 8 = 3 iterations of one
  // message each; every other candidate sends more per mixing.
  CHECK(a->topologies[a->chosen].name == "one_peer_exponential");
  CHECK(a->topologies[a->chosen].iterations_1000x == 3);
  CHECK(a->topologies[a->chosen].max_degree == 1);
  const double w32 = 5e-3 + 4 * kMlpParams / 1.25e6;
  CHECK(a->per_step.round_s == doctest::Approx(std::max(c, w32)));
  CHECK(a->per_step.wire_fraction == doctest::Approx(1 - c / w32));
  CHECK(a->link_binds);
  // Step 3: int8 with overlap, the smallest candidate H with H·c ≥ the int8 message's wire time.
  const double w8 = 5e-3 + int8_bytes(kMlpParams) / 1.25e6;
  const RoundChoice& r = a->recommended;
  CHECK(r.round.compression.kind == sgd::CompressionKind::kInt8);
  CHECK(r.round.overlap);
  CHECK(r.round.local_steps == 500);  // 250 · 0.45 ms = 112.5 ms < w8 = 196 ms ≤ 225 ms
  CHECK(r.round.local_steps * c >= w8);
  const int* h = std::find(std::begin(kLocalStepCandidates), std::end(kLocalStepCandidates),
                           r.round.local_steps);
  REQUIRE(h != std::begin(kLocalStepCandidates));
  CHECK(*(h - 1) * c < w8);
  CHECK(a->hidden);
  CHECK(r.round_s == doctest::Approx(500 * c));
  CHECK(r.wire_fraction == 0);
  CHECK(r.message_bytes == int8_bytes(kMlpParams));
  CHECK(r.bytes_per_node_round == int8_bytes(kMlpParams));
  // The table: every H without overlap is H·c + w8 (the message leaves after the steps), with
  // overlap max(H·c, w8); without overlap the wire is more than 1/6 of the recommended round.
  REQUIRE(a->with_overlap.size() == std::size(kLocalStepCandidates));
  for (std::size_t k = 0; k < a->with_overlap.size(); ++k) {
    const double hc = kLocalStepCandidates[k] * c;
    CHECK(a->without_overlap[k].round_s == doctest::Approx(hc + w8));
    CHECK(a->with_overlap[k].round_s == doctest::Approx(std::max(hc, w8)));
    if (kLocalStepCandidates[k] == 500) CHECK(a->without_overlap[k].wire_fraction > 1.0 / 6);
  }
  const std::string snippet = training_config_snippet(*a);
  CHECK(snippet.find("local_steps: 500\ncompression { kind: INT8 }\noverlap: true\n") !=
        std::string::npos);
  CHECK(snippet.find("gossip-topo generate one_peer_exponential --nodes 8") != std::string::npos);
  CHECK(compare_command(*a).find("--bandwidth 10Mbps --latency 5ms --compute-time 450us "
                                 "--model-params 235146 --local-steps 500 --compression int8 "
                                 "--overlap") != std::string::npos);
}

TEST_CASE("an unshaped 10 Gbit/s link at 10 ms a step: per-step D-PSGD, nothing to hide") {
  const double c = 10e-3;
  auto a = advise_link(inputs(1e10, 50e-6, c));
  REQUIRE(a.is_ok());
  check_topology_rule(*a);
  const double w32 = 50e-6 + 4 * kMlpParams / 1.25e9;  // 0.8 ms: hidden behind the gradient
  REQUIRE(w32 < c);
  CHECK(!a->link_binds);
  CHECK(a->per_step.round_s == doctest::Approx(c));
  CHECK(a->per_step.wire_fraction == 0);
  CHECK(a->recommended.round.per_iteration());
  CHECK(a->with_overlap.empty());
  CHECK(training_config_snippet(*a).find("per-step D-PSGD") != std::string::npos);
}

TEST_CASE("a link bound near the limit, a link no H hides, and 6 nodes") {
  // Per-step wire 1.2 c: bound (wire fraction 1/6 > 10%); int8 at H = 1 is hidden by overlap.
  const double c = 1e-2;
  const double params = 1.2 * c * 1.25e9 / 4;  // w32 = 1.2 c at 10 Gbit/s, no latency
  auto near = advise_link(inputs(1e10, 0, c, params));
  REQUIRE(near.is_ok());
  CHECK(near->link_binds);
  CHECK(near->per_step.wire_fraction == doctest::Approx(1 - 1 / 1.2));
  CHECK(near->recommended.round.local_steps == 1);
  CHECK(near->recommended.round.overlap);
  CHECK(near->recommended.round_s == doctest::Approx(c));
  // 1 µs of compute against 200 ms of wire: H = 1000 hides 1 ms, not enough.
  auto none = advise_link(inputs(1e7, 5e-3, 1e-6));
  REQUIRE(none.is_ok());
  CHECK(!none->hidden);
  CHECK(none->recommended.round.local_steps == 1000);
  CHECK(none->recommended.wire_fraction > 0.99);
  // 6 nodes: no hypercube; the rule still picks the least wire time to mix.
  auto six = advise_link(inputs(1e7, 5e-3, 0.45e-3, kMlpParams, 6));
  REQUIRE(six.is_ok());
  check_topology_rule(*six);
  for (const TopologyChoice& t : six->topologies) CHECK(t.name != "hypercube");
}

TEST_CASE("inputs outside the model are refused") {
  CHECK(!advise_link(inputs(1e7, 5e-3, 1e-3, kMlpParams, 1)).is_ok());
  CHECK(!advise_link(inputs(1e7, 5e-3, 0)).is_ok());
  CHECK(!advise_link(inputs(1e7, 5e-3, 1e-3, 0)).is_ok());
  CHECK(!advise_link(inputs(0, 5e-3, 1e-3)).is_ok());
  CHECK(!advise_link(inputs(1e7, -1, 1e-3)).is_ok());
}

}  // namespace
}  // namespace gossip::sim
