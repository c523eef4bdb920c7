// The round arithmetic (sgd/round.h, sgd/choco.h) on a quadratic, against closed forms computed
// here in double. Node i's loss is F_i(x) = ½‖x − b_i‖², so H full-gradient steps of size γ from
// the anchor give y_i = b_i + (1 − γ)^H (a_i − b_i) and Δ_i = κ (a_i − b_i), κ = 1 − (1 − γ)^H:
//  - local steps, plain gossip, outer none: the stacked anchors follow A ← W (A − κ (A − B)) (local
//    SGD, then gossip averaging), so the consensus distance of every round matches the double
//    recursion;
//  - outer Nesterov over gossip: the network average follows DiLoCo's recursion on the mean
//    pseudo-gradient, e ← e − lr (κ e + β m), m ← β m + κ e with e = ā − b̄, on a ring and on the
//    time-varying one-peer exponential graph;
//  - CHOCO gossip (pure, Δ = 0): the mean is kept exactly (up to float rounding) whatever the
//    compressor, and the consensus distance decays at the rate of the exact-compression CHOCO
//    iteration I + γ (W − I): ρ_γ² per round, ρ_γ = max_{k≠0} |1 − γ (1 − λ_k)| (ring:
//    λ_k = (1 + 2 cos(2πk/n))/3), for int8 and bf16.
#include "sgd/round.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <vector>

#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/choco.h"
#include "tests/support/topologies.h"
#include "topology/topology.h"

namespace gossip::sim {
namespace {

using testing::generated_topology;

constexpr int kDim = 24;

std::vector<std::vector<double>> random_vectors(int n, std::uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<std::vector<double>> v(n, std::vector<double>(kDim));
  for (auto& x : v) {
    for (double& e : x) e = scale * (rng.uniform() * 2 - 1);
  }
  return v;
}

double consensus(const std::vector<std::vector<double>>& x) {
  const std::size_t n = x.size();
  double dist = 0;
  for (int k = 0; k < kDim; ++k) {
    double mean = 0;
    for (const auto& xi : x) mean += xi[k];
    mean /= static_cast<double>(n);
    for (const auto& xi : x) dist += (xi[k] - mean) * (xi[k] - mean);
  }
  return dist / static_cast<double>(n);
}

std::vector<std::vector<double>> to_double(const std::vector<std::vector<float>>& x) {
  std::vector<std::vector<double>> out;
  for (const auto& xi : x) out.emplace_back(xi.begin(), xi.end());
  return out;
}

// One local-step round of the gossip family in float, as gossipd and gossip-sim take it: H steps
// x ← x − γ (x − b), Δ = fl(a − y), the message m = fl(a − Δ), z by the plain combine over W(r),
// the outer step.
void float_round(const topology::Topology& topo, std::int64_t r, int h, float gamma,
                 const sgd::OuterConfig& outer, const std::vector<std::vector<float>>& b,
                 std::vector<std::vector<float>>& anchors, std::vector<std::vector<float>>& m,
                 sgd::Backend& cpu) {
  const int n = topo.num_nodes();
  std::vector<std::vector<float>> next = anchors, messages(n, std::vector<float>(kDim));
  for (int i = 0; i < n; ++i) {
    std::vector<float> y = anchors[i], delta(kDim);
    for (int s = 0; s < h; ++s) {
      for (int k = 0; k < kDim; ++k) y[k] = y[k] - gamma * (y[k] - b[i][k]);
    }
    sgd::pseudo_gradient(delta, anchors[i], y);
    sgd::pseudo_gradient(messages[i], anchors[i], delta);
  }
  for (int i = 0; i < n; ++i) {
    std::vector<float> z(kDim), d(kDim);
    std::vector<sgd::RoundTerm> in;
    for (const topology::Neighbor& nb : topo.in_neighbors(i, r)) {
      in.push_back({nb.node, nb.weight, messages[nb.node].data()});
    }
    std::vector<sgd::MixTerm> terms;
    sgd::plain_gossip_terms(i, topo.self_weight(i, r), messages[i].data(), in, terms);
    sgd::combine(cpu, z, terms);
    sgd::gossip_outer_step(outer, next[i], z, d, m[i]);
  }
  anchors = next;
}

TEST_CASE(
    "rounds: local steps' consensus distance on a quadratic follows A <- W A - kappa (A - B)") {
  const int n = 8, h = 5;
  const float gamma = 0.1f;
  const topology::Topology ring = generated_topology(topology::GeneratorKind::kRing, n);
  auto cpu = sgd::make_backend(sgd::Device::kCpu, 1);
  REQUIRE(cpu.is_ok());
  const auto b_d = random_vectors(n, 7, 1.0), a_d = random_vectors(n, 8, 3.0);
  std::vector<std::vector<float>> b, anchors, m(n);
  for (int i = 0; i < n; ++i) {
    b.emplace_back(b_d[i].begin(), b_d[i].end());
    anchors.emplace_back(a_d[i].begin(), a_d[i].end());
  }
  std::vector<std::vector<double>> ref = to_double(anchors);
  const double kappa = 1 - std::pow(1 - static_cast<double>(gamma), h);
  const Eigen::MatrixXd w(ring.mixing_matrix(0));
  for (int r = 0; r < 40; ++r) {
    float_round(ring, r, h, gamma, {}, b, anchors, m, **cpu);
    std::vector<std::vector<double>> next(n, std::vector<double>(kDim, 0.0));
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < kDim; ++k) {
        for (int j = 0; j < n; ++j) {
          next[i][k] += w(i, j) * (ref[j][k] - kappa * (ref[j][k] - b_d[j][k]));
        }
      }
    }
    ref = next;
    const double mine = consensus(to_double(anchors)), theirs = consensus(ref);
    CAPTURE(r);
    CHECK(mine == doctest::Approx(theirs).epsilon(1e-4));
  }
  // Not vacuous: the distance settled at the recursion's fixed point, far from both 0 and x_0's.
  CHECK(consensus(ref) > 1e-4);
  CHECK(consensus(ref) < 0.5 * consensus(to_double([&] {
                           std::vector<std::vector<float>> a0;
                           for (const auto& a : a_d) a0.emplace_back(a.begin(), a.end());
                           return a0;
                         }())));
}

// The average's recursion under an outer Nesterov step (round.h: why the average is preserved).
void average_follows_diloco(const topology::Topology& topo) {
  const int n = topo.num_nodes(), h = 4;
  const float gamma = 0.05f;
  sgd::OuterConfig outer;
  outer.kind = sgd::OuterKind::kNesterov;
  outer.lr = 0.7;
  outer.momentum = 0.9;
  auto cpu = sgd::make_backend(sgd::Device::kCpu, 1);
  REQUIRE(cpu.is_ok());
  const auto b_d = random_vectors(n, 11, 1.0), a_d = random_vectors(n, 12, 0.5);
  std::vector<std::vector<float>> b, anchors, m(n, std::vector<float>(kDim, 0.0f));
  for (int i = 0; i < n; ++i) {
    b.emplace_back(b_d[i].begin(), b_d[i].end());
    anchors.emplace_back(a_d[i].begin(), a_d[i].end());
  }
  const double kappa = 1 - std::pow(1 - static_cast<double>(gamma), h);
  std::vector<double> e(kDim), mom(kDim, 0.0);
  for (int k = 0; k < kDim; ++k) {
    for (int i = 0; i < n; ++i) e[k] += (a_d[i][k] - b_d[i][k]) / n;
  }
  double worst = 0, scale = 0;
  for (int r = 0; r < 30; ++r) {
    float_round(topo, r, h, gamma, outer, b, anchors, m, **cpu);
    for (int k = 0; k < kDim; ++k) {
      const double d = kappa * e[k];
      mom[k] = outer.momentum * mom[k] + d;
      e[k] -= outer.lr * (d + outer.momentum * mom[k]);
      double mean = 0;
      for (int i = 0; i < n; ++i) mean += (anchors[i][k] - b_d[i][k]) / n;
      worst = std::max(worst, std::fabs(mean - e[k]));
      scale = std::max(scale, std::fabs(e[k]));
    }
  }
  MESSAGE(topo.name() << ": max |mean(a - b) - e| = " << worst << " (|e| up to " << scale << ")");
  CHECK(worst < 1e-5);
  CHECK(scale > 1e-2);  // the recursion moved the average (momentum overshoots it)
}

TEST_CASE("rounds: with an outer Nesterov step the network average follows DiLoCo's recursion") {
  average_follows_diloco(generated_topology(topology::GeneratorKind::kRing, 8));
  average_follows_diloco(generated_topology(topology::GeneratorKind::kOnePeerExponential, 8));
}

// Pure CHOCO gossip (Δ = 0) on a ring of n: per-edge copies, the combine of round.h.
struct ChocoRun {
  std::vector<double> distance;  // per round, from round 0
  double mean_drift = 0;         // max over rounds and coordinates of |mean − mean_0|
};

ChocoRun choco(const sgd::CompressionSpec& spec, double step, int n, int rounds) {
  const topology::Topology ring = generated_topology(topology::GeneratorKind::kRing, n);
  auto cpu = sgd::make_backend(sgd::Device::kCpu, 1);
  REQUIRE(cpu.is_ok());
  const auto a_d = random_vectors(n, 21, 2.0);
  std::vector<std::vector<float>> x;
  for (const auto& a : a_d) x.emplace_back(a.begin(), a.end());
  std::map<std::pair<int, int>, std::vector<float>> copies;
  std::vector<double> mean0(kDim, 0.0);
  for (int k = 0; k < kDim; ++k) {
    for (int i = 0; i < n; ++i) mean0[k] += x[i][k] / n;
  }
  ChocoRun out;
  for (int r = 0; r < rounds; ++r) {
    out.distance.push_back(consensus(to_double(x)));
    std::vector<float> diff(kDim);
    for (int i = 0; i < n; ++i) {
      for (const topology::Neighbor& o : ring.out_neighbors(i, r)) {
        std::vector<float>& c = copies[{i, o.node}];
        if (c.empty()) c.assign(kDim, 0.0f);
        std::vector<std::byte> q(sgd::compressed_bytes(spec, kDim));
        sgd::pseudo_gradient(diff, x[i], c);
        sgd::compress(spec, diff, q);
        sgd::choco_decode_apply(spec, q, c);
      }
    }
    std::vector<std::vector<float>> next = x;
    for (int i = 0; i < n; ++i) {
      std::vector<sgd::RoundTerm> in, o;
      for (const topology::Neighbor& nb : ring.in_neighbors(i, r)) {
        in.push_back({nb.node, nb.weight, copies.at({nb.node, i}).data()});
      }
      for (const topology::Neighbor& nb : ring.out_neighbors(i, r)) {
        o.push_back({nb.node, nb.weight, copies.at({i, nb.node}).data()});
      }
      std::vector<sgd::MixTerm> terms;
      sgd::choco_gossip_terms(x[i].data(), step, in, o, terms);
      sgd::combine(**cpu, next[i], terms);
    }
    x = next;
    for (int k = 0; k < kDim; ++k) {
      double mean = 0;
      for (int i = 0; i < n; ++i) mean += x[i][k] / n;
      out.mean_drift = std::max(out.mean_drift, std::fabs(mean - mean0[k]));
    }
  }
  return out;
}

TEST_CASE("rounds: CHOCO gossip keeps the mean and contracts at the rate of I + gamma (W - I)") {
  const int n = 8;
  for (const sgd::CompressionKind kind :
       {sgd::CompressionKind::kInt8, sgd::CompressionKind::kBf16}) {
    for (const double step : {1.0, 0.5}) {
      sgd::CompressionSpec spec;
      spec.kind = kind;
      spec.block_floats = 16;
      CAPTURE(sgd::kCompressionKinds.name(kind));
      CAPTURE(step);
      // ρ_γ over the ring's Metropolis–Hastings spectrum, λ_k = (1 + 2 cos(2πk/n)) / 3.
      double rho = 0;
      for (int k = 1; k < n; ++k) {
        const double lambda = (1 + 2 * std::cos(2 * std::numbers::pi * k / n)) / 3;
        rho = std::max(rho, std::fabs(1 - step * (1 - lambda)));
      }
      const ChocoRun run = choco(spec, step, n, 40);
      // The measured rate per round over rounds 5..25 (before any floor), against ρ_γ².
      const double rate = std::pow(run.distance[25] / run.distance[5], 1.0 / 20);
      MESSAGE("rate " << rate << " against rho^2 = " << rho * rho << ", mean drift "
                      << run.mean_drift);
      CHECK(rate == doctest::Approx(rho * rho).epsilon(0.05));
      CHECK(run.mean_drift < 1e-5);
      // No floor: the compressed differences shrink with the copies' error, so the decay goes on.
      CHECK(run.distance[39] < 2 * std::pow(rho * rho, 39) * run.distance[0]);
    }
  }
}

}  // namespace
}  // namespace gossip::sim
