// Cost model: Lian et al. Table 1 closed forms, the clocks with and without stragglers against
// hand-computed schedules, and the parsers' errors.
#include "sim/cost_model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tests/sim/test_configs.h"

namespace gossip::sim {
namespace {

TEST_CASE("communication closed forms") {
  const Network net{8e9, 1e-3};  // 1 GB/s, 1 ms
  const double m = 1e8;          // 100 MB
  // Parameter server: 2(α + nM/B) = 2(0.001 + 32·0.1) = 6.402 s.
  CHECK(parameter_server_comm_s(32, m, net) == doctest::Approx(6.402));
  // Ring allreduce: 2(n−1)α + 2((n−1)/n)M/B = 0.062 + 2·(31/32)·0.1 = 0.25575 s.
  CHECK(ring_allreduce_comm_s(32, m, net) == doctest::Approx(0.25575));
  // Gossip on a ring (Δ = 2): α + 2M/B = 0.201 s.
  CHECK(gossip_comm_s(2, m, net) == doctest::Approx(0.201));
  CHECK(net.bytes_per_second() == 1e9);
}

TEST_CASE("Gloo's ring allreduce: segments, and the rendezvous between bandwidth and latency") {
  // Segments as gloo/allreduce.cc cuts them: a multiple of n, at least 2n, at most 1 MiB each,
  // rounded up to whole floats.
  const GlooSegments mlp = gloo_segments(8, 940584);  // the demo MLP: 16 segments
  CHECK(mlp.per_rank == 2);
  CHECK(mlp.bytes == 58788);                            // ⌈940584 / 16⌉ = 58787, to 4 bytes
  const GlooSegments big = gloo_segments(8, 19081256);  // the 5M MLP: ⌈18.2⌉ = 19 → 24
  CHECK(big.per_rank == 3);
  CHECK(big.bytes == 795056);
  CHECK(gloo_segments(3, 1e9).per_rank == 318);  // ⌈953.7⌉ = 954 = 3 · 318 segments of 1 MiB
  CHECK(gloo_segments(1, 4096).per_rank == 2);

  // No latency: 2(n−1)·m·S/B = Table 1's bandwidth term 2((n−1)/n)·M/B when S·k = M.
  Network fast{8e9, 0.0};  // 1 GB/s
  const double m = 16 * 4096.0;
  CHECK(gloo_ring_allreduce_comm_s(8, m, fast) == doctest::Approx(2.0 * 7 / 8 * m / 1e9));
  // Latency-bound (a 5 ms link that moves a segment in ~0): 2(n−1)·m hops of α each, twice
  // Table 1's 2(n−1)α when m = 2.
  Network far{8e12, 5e-3};
  CHECK(gloo_ring_allreduce_comm_s(8, 940584, far) ==
        doctest::Approx(28 * (5e-3 + 0.5 * 58788 / 1e12)));
  CHECK(gloo_ring_allreduce_comm_s(8, 940584, far) ==
        doctest::Approx(2 * (ring_allreduce_comm_s(8, 940584, far))).epsilon(1e-3));
  // In between, the larger of the two per hop: at 100 Mbit/s and 5 ms a 58,788-byte segment
  // takes 4.70 ms on the wire, so a hop is α + S/2B = 7.35 ms.
  Network mid{1e8, 5e-3};
  const double s_over_b = 58788 / 12.5e6;
  CHECK(gloo_ring_allreduce_comm_s(8, 940584, mid) == doctest::Approx(28 * (5e-3 + s_over_b / 2)));
  Network slow{1e7, 5e-3};  // 10 Mbit/s: bandwidth-bound, the latency hidden by the window
  CHECK(gloo_ring_allreduce_comm_s(8, 940584, slow) == doctest::Approx(28 * 58788 / 1.25e6));
  CHECK(gloo_ring_allreduce_comm_s(1, 940584, slow) == 0.0);

  // The clock uses it, and charges o per segment hop: 2(n−1)·m = 42 messages for m = 3.
  CostInputs in;
  in.net = mid;
  in.message_bytes = 19081256;
  in.compute_s = 0.01;
  in.message_overhead_s = 1e-3;
  in.allreduce = AllreduceModel::kGloo;
  SimClock ar(Scheme::kRingAllreduce, 8, in);
  for (int t = 0; t < 3; ++t) ar.advance(t, {}, 0);
  const double comm = gloo_ring_allreduce_comm_s(8, 19081256, mid);
  CHECK(ar.last_comm_s() == doctest::Approx(comm));
  CHECK(ar.now_s() == doctest::Approx(3 * (0.01 + std::max(comm, 42 * 1e-3))));
  in.message_overhead_s = 0.1;  // now the 42 messages' overhead dominates the wire
  SimClock busy(Scheme::kRingAllreduce, 8, in);
  busy.advance(0, {}, 0);
  CHECK(busy.now_s() == doctest::Approx(0.01 + 4.2));

  // The ring of rounds (algorithms/gloo_ring.h): 2(n − 1) rendezvous steps of one ⌈M/n⌉ chunk.
  CHECK(gloo_hops_allreduce_comm_s(8, 940584, mid) ==
        doctest::Approx(14 * (2 * 5e-3 + 117573 / mid.bytes_per_second())));
  CHECK(gloo_hops_allreduce_comm_s(1, 940584, mid) == 0.0);
  CHECK(allreduce_comm_s(AllreduceModel::kGlooHops, 8, 940584, mid) ==
        gloo_hops_allreduce_comm_s(8, 940584, mid));
  CHECK(parse_allreduce_model("gloo-hops").value() == AllreduceModel::kGlooHops);
  CHECK(parse_allreduce_model("gloo").value() == AllreduceModel::kGloo);
  CHECK(parse_allreduce_model("table1").value() == AllreduceModel::kTable1);
  CHECK(parse_allreduce_model("nccl").status().message().find("table1, gloo or gloo-hops") !=
        std::string::npos);
}

TEST_CASE("without stragglers: C-PSGD adds compute and comm, D-PSGD overlaps them") {
  CostInputs in;
  in.net = {1e9, 1e-3};
  in.message_bytes = 4e6;  // 1M params: M/B = 32 ms
  const auto ring = ring_in_neighbours(8);
  for (double compute : {0.005, 0.05, 0.5}) {
    in.compute_s = compute;
    SimClock ps(Scheme::kParameterServer, 8, in), ar(Scheme::kRingAllreduce, 8, in),
        gossip(Scheme::kGossip, 8, in);
    for (int t = 0; t < 10; ++t) {
      ps.advance(t, {}, 0);
      ar.advance(t, {}, 0);
      gossip.advance(t, ring, 2);
    }
    CHECK(ps.now_s() == doctest::Approx(10 * (compute + parameter_server_comm_s(8, 4e6, in.net))));
    CHECK(ar.now_s() == doctest::Approx(10 * (compute + ring_allreduce_comm_s(8, 4e6, in.net))));
    CHECK(gossip.now_s() == doctest::Approx(10 * std::max(compute, gossip_comm_s(2, 4e6, in.net))));
  }
}

TEST_CASE("payload fraction and shared cores: the closed forms of sim/cost_model.h") {
  CostInputs in;
  in.net = {8e8, 1e-4};  // 100 MB/s on the wire, 0.1 ms
  in.net.payload_fraction = 0.8;
  CHECK(in.net.bytes_per_second() == doctest::Approx(8e7));
  in.message_bytes = 8e6;  // M/B = 0.1 s of payload
  in.compute_s = 0.01;
  in.cpu_share = 0.25;       // 8 nodes on 2 cores
  in.cpu_s_per_byte = 1e-9;  // 1 ns per byte moved
  const auto ring = ring_in_neighbours(8);
  // Ring: every node sends 2 and receives 2 messages, V = 4M = 32 MB → κV = 32 ms.
  // Link-bound: max((0.01 + 0.032)/0.25 = 0.168, 0.0001 + 2·0.1 = 0.2001) = 0.2001.
  SimClock gossip(Scheme::kGossip, 8, in);
  for (int t = 0; t < 5; ++t) gossip.advance(t, ring, 2);
  CHECK(gossip.now_s() == doctest::Approx(5 * 0.2001));
  // CPU-bound at 8 ns per byte: (0.01 + 0.256)/0.25 = 1.064 s per iteration.
  in.cpu_s_per_byte = 8e-9;
  SimClock cpu_bound(Scheme::kGossip, 8, in);
  for (int t = 0; t < 5; ++t) cpu_bound.advance(t, ring, 2);
  CHECK(cpu_bound.now_s() == doctest::Approx(5 * 1.064));
  // Ring allreduce: c/s + max(comm, κ·2·2((n−1)/n)M/s); comm = 14·0.0001 + 1.75·0.1 = 0.1764,
  // κV/s = 8e-9 · 28e6 / 0.25 = 0.896 → 0.04 + 0.896 per iteration.
  SimClock ar(Scheme::kRingAllreduce, 8, in);
  for (int t = 0; t < 5; ++t) ar.advance(t, {}, 0);
  CHECK(ar.now_s() == doctest::Approx(5 * (0.04 + 0.896)));
  in.cpu_s_per_byte = 0;
  SimClock ar_link(Scheme::kRingAllreduce, 8, in);
  ar_link.advance(0, {}, 0);
  CHECK(ar_link.now_s() == doctest::Approx(0.04 + 0.1764));
  // A node that only sends (no in-neighbours) still pays for its sent bytes.
  in.cpu_s_per_byte = 1e-9;
  in.cpu_share = 1;
  std::vector<std::vector<int>> star(3);
  star[1] = {0};
  star[2] = {0};  // node 0 sends 2 messages, nodes 1 and 2 receive one each
  SimClock s(Scheme::kGossip, 3, in);
  s.advance(0, star, 2);
  // Node 0: 0.01 + 2·0.008 = 0.026; nodes 1, 2: max(0.01 + 0.008, 0.0001 + 0.2) = 0.2001.
  CHECK(s.now_s() == doctest::Approx(0.2001));
  in.net.bandwidth_bps = 8e12;  // the link is free: node 0's CPU is the last to finish
  SimClock fast(Scheme::kGossip, 3, in);
  fast.advance(0, star, 2);
  CHECK(fast.now_s() == doctest::Approx(0.026));
}

TEST_CASE("message overhead: added after a D-PSGD exchange, overlapping an allreduce's wire") {
  CostInputs in;
  in.net = {8e8, 1e-4};  // M/B = 0.1 s
  in.message_bytes = 1e7;
  in.compute_s = 0.01;
  in.message_overhead_s = 1e-3;
  const auto ring = ring_in_neighbours(8);
  // Ring: 4 messages per node → max(0.01, 0.2001) + 0.004 per iteration.
  SimClock gossip(Scheme::kGossip, 8, in);
  for (int t = 0; t < 3; ++t) gossip.advance(t, ring, 2);
  CHECK(gossip.now_s() == doctest::Approx(3 * 0.2041));
  // Ring allreduce: 4(n−1) = 28 messages; 28 ms is under the wire's 0.1764 s, so it hides.
  SimClock ar(Scheme::kRingAllreduce, 8, in);
  ar.advance(0, {}, 0);
  CHECK(ar.now_s() == doctest::Approx(0.01 + 14 * 1e-4 + 1.75 * 0.1));
  // At 10 ms per message the 28 messages (0.28 s) are the bound; with 1 ns per byte moved
  // (V = 2·1.75·M = 35 MB) the CPU side is 0.035 + 0.28.
  in.message_overhead_s = 1e-2;
  SimClock slow(Scheme::kRingAllreduce, 8, in);
  slow.advance(0, {}, 0);
  CHECK(slow.now_s() == doctest::Approx(0.01 + 0.28));
  in.cpu_s_per_byte = 1e-9;
  SimClock cpu(Scheme::kRingAllreduce, 8, in);
  cpu.advance(0, {}, 0);
  CHECK(cpu.now_s() == doctest::Approx(0.01 + 0.035 + 0.28));
}

TEST_CASE("when every node is slowed, both clocks scale their compute") {
  CostInputs in;
  in.net = {8.0, 0.5};     // 1 byte/s, α = 0.5 s
  in.message_bytes = 0.0;  // comm = α = 0.5 s
  in.compute_s = 1.0;
  // Slowdown 10 for every node with probability 1 at every iteration: everything scales.
  in.straggler.kind = StragglerModel::Kind::kBernoulli;
  in.straggler.probability = 1.0;
  in.straggler.factor = 10.0;
  SimClock all_slow(Scheme::kGossip, 3, in);
  all_slow.advance(0, ring_in_neighbours(3), 2);
  CHECK(all_slow.now_s() == doctest::Approx(10.0));
  SimClock ar(Scheme::kRingAllreduce, 3, in);
  ar.advance(0, {}, 0);
  CHECK(ar.now_s() == doctest::Approx(10.0 + ring_allreduce_comm_s(3, 0, in.net)));
}

TEST_CASE("D-PSGD start-time recurrence against a hand-computed schedule") {
  // Find a seed where, with probability 1/3, exactly node 0 is slow at iteration 0 and nobody
  // is slow at iterations 1 and 2; then S^1 = (10, 1, 1), S^2 = (11, 10.5, 10.5),
  // S^3 = (12, 11.5, 11.5) for compute 1, factor 10 and comm 0.5 on a ring of 3.
  StragglerModel m;
  m.kind = StragglerModel::Kind::kBernoulli;
  m.probability = 1.0 / 3;
  m.factor = 10;
  bool found = false;
  for (std::uint64_t seed = 0; seed < 10000 && !found; ++seed) {
    m.seed = seed;
    found = m.slowdown(0, 0) == 10 && m.slowdown(0, 1) == 1 && m.slowdown(0, 2) == 1;
    for (int t = 1; t < 3; ++t) {
      for (int i = 0; i < 3; ++i) found = found && m.slowdown(t, i) == 1;
    }
  }
  REQUIRE(found);
  CostInputs in;
  in.net = {8.0, 0.5};
  in.message_bytes = 0;
  in.compute_s = 1.0;
  in.straggler = m;
  SimClock gossip(Scheme::kGossip, 3, in);
  const auto ring = ring_in_neighbours(3);
  gossip.advance(0, ring, 2);
  CHECK(gossip.now_s() == doctest::Approx(10.0));
  gossip.advance(1, ring, 2);
  CHECK(gossip.now_s() == doctest::Approx(11.0));
  gossip.advance(2, ring, 2);
  CHECK(gossip.now_s() == doctest::Approx(12.0));
  // C-PSGD waits for the slowest of all three at iteration 0, then runs at full speed.
  SimClock ps(Scheme::kParameterServer, 3, in);
  for (int t = 0; t < 3; ++t) ps.advance(t, {}, 0);
  CHECK(ps.now_s() == doctest::Approx(10 + 1 + 1 + 3 * parameter_server_comm_s(3, 0, in.net)));
}

TEST_CASE("one slow host (node:K:F, link:K:F): lock-step schedules by hand") {
  CostInputs in;
  const auto ring = ring_in_neighbours(3);
  // node:0:10, compute 1, comm 0.5: node 0 takes 10 per iteration and everyone waits for it.
  in.net = {8.0, 0.5};
  in.message_bytes = 0;
  in.compute_s = 1.0;
  auto node = parse_straggler_model("node:0:10", 1);
  REQUIRE(node.is_ok());
  in.straggler = *node;
  CHECK(node->slowdown(5, 0) == 10);
  CHECK(node->slowdown(5, 1) == 1);
  CHECK(node->link_slowdown(0) == 1);
  SimClock gossip(Scheme::kGossip, 3, in);
  for (int t = 0; t < 3; ++t) gossip.advance(t, ring, 2);
  CHECK(gossip.now_s() == doctest::Approx(30.0));
  // link:0:4 on the ring (Δ = 2, M/B = 1, no latency): a send takes α + 2M/B = 2, node 0's 8;
  // compute 0.1. S(node 0), S(nodes 1, 2): (2, 8), (10, 10), (12, 18), (20, 20).
  in.net = {8.0, 0.0};
  in.message_bytes = 1.0;
  in.compute_s = 0.1;
  auto link = parse_straggler_model("link:0:4", 1);
  REQUIRE(link.is_ok());
  in.straggler = *link;
  CHECK(link->slowdown(5, 0) == 1);
  CHECK(link->link_slowdown(0) == 4);
  CHECK(link->link_slowdown(2) == 1);
  SimClock slow(Scheme::kGossip, 3, in);
  const double expect[] = {8, 10, 18, 20};
  for (int t = 0; t < 4; ++t) {
    slow.advance(t, ring, 2);
    CHECK(slow.now_s() == doctest::Approx(expect[t]));
  }
  // An allreduce waits for the slow link at every step: the ring at a quarter of the rate.
  SimClock ar(Scheme::kRingAllreduce, 3, in);
  ar.advance(0, {}, 0);
  Network quarter = in.net;
  quarter.bandwidth_bps /= 4;
  CHECK(ar.now_s() == doctest::Approx(0.1 + ring_allreduce_comm_s(3, 1.0, quarter)));
  CHECK_FALSE(parse_straggler_model("node:-1:2", 1).is_ok());
  CHECK_FALSE(parse_straggler_model("link:1.5:2", 1).is_ok());
  CHECK_FALSE(parse_straggler_model("link:1:0.5", 1).is_ok());
  CHECK(parse_straggler_model("link:3:4", 1)->to_string() == "link:3:4");
}

TEST_CASE("asynchronous gossip: nobody waits, a busy edge is skipped, a slow host ends alone") {
  // The directed ring 0 -> 1 -> 2 (-> 0): node i hears from i - 1.
  const std::vector<std::vector<int>> dring = {{2}, {0}, {1}};
  CostInputs in;
  in.asynchronous = true;
  in.net = {8.0, 0.5};  // α 0.5, M/B 0: a message is taken α after it leaves, acknowledged α later
  in.message_bytes = 0;
  in.compute_s = 1.0;
  in.message_overhead_s = 0.1;
  SimClock even(Scheme::kGossip, 3, in);
  for (int t = 0; t < 4; ++t) {
    even.advance(t, dring, 1);
    // Each node sends one message and takes one every iteration (taken at S + 1 <= the next start).
    CHECK(even.now_s() == doctest::Approx((t + 1) * 1.2));
  }
  // node:0:10: node 0 takes 10 per iteration and nobody waits for it; it is alone once node 2,
  // its in-neighbour, has ended, so the run ends with the others (lock step: 30 after 3).
  in.message_overhead_s = 0;
  in.straggler = *parse_straggler_model("node:0:10", 1);
  SimClock slow(Scheme::kGossip, 3, in);
  for (int t = 0; t < 3; ++t) slow.advance(t, dring, 1);
  CHECK(slow.now_s() == doctest::Approx(3.0));
  // link:0:4 with M/B = 1 and compute 0.1: node 0's message takes 4 on the wire, so it skips node 1
  // until its previous message is taken (its iteration 40) — and nobody waits: 0.1 per iteration.
  in.net = {8.0, 0.0};
  in.message_bytes = 1.0;
  in.compute_s = 0.1;
  in.cpu_s_per_byte = 0.01;  // a message sent or taken costs 0.01 of CPU
  in.straggler = *parse_straggler_model("link:0:4", 1);
  SimClock link(Scheme::kGossip, 3, in);
  link.advance(0, dring, 1);  // everyone sends and takes one message
  CHECK(link.now_s() == doctest::Approx(0.12));
  link.advance(1, dring, 1);  // nodes 1 and 2: acknowledged at 1.0 > 0.12, skipped; so is node 0
  CHECK(link.now_s() == doctest::Approx(0.22));
  // Shared cores: 4 nodes on 2 cores (share 0.5), node 0 at a quarter: the others share what it
  // leaves, (4 * 0.5 - 0.5 / 4) / 3 = 0.625 of a core each, 1.6 per iteration.
  const std::vector<std::vector<int>> dring4 = {{3}, {0}, {1}, {2}};
  in = CostInputs{};
  in.asynchronous = true;
  in.net = {8.0, 0.0};
  in.compute_s = 1.0;
  in.cpu_share = 0.5;
  in.straggler = *parse_straggler_model("node:0:4", 1);
  SimClock shared(Scheme::kGossip, 4, in);
  shared.advance(0, dring4, 1);
  shared.advance(1, dring4, 1);
  CHECK(shared.now_s() == doctest::Approx(3.2));
}

TEST_CASE("a node with no in-neighbours waits for nobody") {
  CostInputs in;
  in.net = {8.0, 5.0};
  in.compute_s = 1.0;
  SimClock lone(Scheme::kGossip, 1, in);
  for (int t = 0; t < 4; ++t) lone.advance(t, {{}}, 0);
  CHECK(lone.now_s() == doctest::Approx(4.0));
}

TEST_CASE("straggler draws are deterministic, paired and have the stated distribution") {
  auto m = parse_straggler_model("bernoulli:0.1:4", 7);
  REQUIRE(m.is_ok());
  int slow = 0;
  const int draws = 20000;
  for (int t = 0; t < draws / 10; ++t) {
    for (int i = 0; i < 10; ++i) {
      const double s = m->slowdown(t, i);
      CHECK((s == 1.0 || s == 4.0));
      slow += s == 4.0;
      CHECK(s == m->slowdown(t, i));  // a pure function of (seed, t, i)
    }
  }
  // Binomial(20000, 0.1): sd = 42; 5 sd.
  CHECK(std::abs(slow - 2000) < 212);
  auto ln = parse_straggler_model("lognormal:0.5", 7);
  REQUIRE(ln.is_ok());
  double sum_log = 0, sum_log2 = 0;
  for (int t = 0; t < draws; ++t) {
    const double l = std::log(ln->slowdown(t, 3));
    sum_log += l;
    sum_log2 += l * l;
  }
  CHECK(std::abs(sum_log / draws) < 0.02);  // mean 0, se 0.0035
  CHECK(std::sqrt(sum_log2 / draws) == doctest::Approx(0.5).epsilon(0.03));
  CHECK(parse_straggler_model("none", 1)->slowdown(5, 5) == 1.0);
}

TEST_CASE("parsers accept units and reject nonsense with a message") {
  CHECK(*parse_bandwidth_bps("1Gbps") == 1e9);
  CHECK(*parse_bandwidth_bps("2.5 Gbit/s") == 2.5e9);
  CHECK(*parse_bandwidth_bps("100Mbps") == 1e8);
  CHECK(*parse_bandwidth_bps("1e6") == 1e6);
  CHECK(*parse_duration_s("1ms") == doctest::Approx(1e-3));
  CHECK(*parse_duration_s("50us") == doctest::Approx(5e-5));
  CHECK(*parse_duration_s("2") == 2.0);
  CHECK(*parse_count("25M") == 25e6);
  CHECK(*parse_count("1.5k") == 1500);
  CHECK(!parse_bandwidth_bps("fast").is_ok());
  CHECK(!parse_bandwidth_bps("1 GB").is_ok());
  CHECK(!parse_bandwidth_bps("0Gbps").is_ok());
  CHECK(!parse_duration_s("-1ms").is_ok());
  CHECK(!parse_duration_s("1 fortnight").is_ok());
  CHECK(!parse_straggler_model("bernoulli:2:3", 0).is_ok());
  CHECK(!parse_straggler_model("bernoulli:0.1:0.5", 0).is_ok());
  CHECK(!parse_straggler_model("gaussian:1", 0).is_ok());
  const auto bad = parse_bandwidth_bps("7 parsecs");
  CHECK(bad.status().message().find("unknown unit") != std::string::npos);
}

}  // namespace
}  // namespace gossip::sim
