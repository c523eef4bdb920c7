// The asynchronous push-sum replay (sim/push_sum_replay.h) against an independent reference:
// tests/sim/push_sum_reference.py under /usr/bin/python3 (numpy) makes a schedule on the directed
// ring of 4 — node 0 at a quarter of the others' speed for half the run, delays of 1 to 3 ticks,
// staleness 3, so nodes mix 0, 1 or several messages per iteration, older and newer than it, and
// some in the drain — writes it as gossipd's logs, and runs the numerator-form recursion in float64
// (x_i = w_i z_i; x_i ← p_ii x_i + Σ p_ij(s) x_j^s − γ u_i, w_i ← p_ii w_i + Σ p_ij(s) w_j^s). Node
// i's loss is ½‖z − b_i‖², so u_i = z_i − b_i. The replay reads those logs (its final weights must
// equal their weight lines to the bit, checked by replay_push_sum) and must match the reference to
// float32 rounding; with γ = 0 (pure gossip from distinct starts) mass is conserved, the average is
// kept and the de-biased z_i approach it. Skipped with a message where numpy is missing.
//
// Tolerance: |z − z_ref| ≤ 2e-6·max(1, |z_ref|): float32 against float64 through 40 iterations of
// mixing and steps (measured 1.5e-7 with γ = 0.1).
#include "sim/push_sum_replay.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "sgd/backend.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "topology/graph.h"

namespace gossip::sim {
namespace {

constexpr int kNodes = 4;
constexpr int kDim = 16;

bool have_numpy() {
  return gossip::testing::run_shell("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0;
}

std::vector<double> read_f64(const std::string& path, std::size_t count) {
  std::vector<double> v(count);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(double)));
  REQUIRE_MESSAGE(f.gcount() == static_cast<std::streamsize>(count * sizeof(double)), path);
  return v;
}

topology::Topology directed_ring(int n) {
  std::vector<std::pair<int, int>> arcs;
  for (int i = 0; i < n; ++i) arcs.emplace_back(i, (i + 1) % n);
  auto graph = topology::Graph::directed(n, arcs);
  REQUIRE(graph.is_ok());
  // Push-sum takes the support only (p_ij = 1 / (1 + out-degree of j)); W is any with it.
  std::vector<Eigen::Triplet<double>> e;
  for (int i = 0; i < n; ++i) {
    e.emplace_back(i, i, 0.5);
    e.emplace_back(i, (i + n - 1) % n, 0.5);
  }
  topology::SparseMatrix w(n, n);
  w.setFromTriplets(e.begin(), e.end());
  auto topo = topology::Topology::from_parts("directed_ring", std::move(graph).value(), {}, w,
                                             topology::WeightScheme::kUniform);
  REQUIRE_MESSAGE(topo.is_ok(), topo.status().to_string());
  return std::move(topo).value();
}

// The reference's schedule of `iterations` and its float64 results, and the replay of its logs.
struct Compared {
  std::vector<double> z0, z_ref, w_ref;  // node-major, kNodes × kDim (w: kNodes)
  PushSumReplayed replayed;
};

Compared replay_against_reference(std::int64_t iterations, float gamma, int seed) {
  gossip::testing::TempDir dir;
  const char* src = std::getenv("GOSSIP_SOURCE_DIR");
  REQUIRE_MESSAGE(src != nullptr, "GOSSIP_SOURCE_DIR is set by ctest");
  char gamma_text[32];  // the float32 γ the replay steps with, exactly
  std::snprintf(gamma_text, sizeof gamma_text, "%.17g", static_cast<double>(gamma));
  const std::string cmd = "/usr/bin/python3 " + std::string(src) +
                          "/tests/sim/push_sum_reference.py quadratic " + dir.path + " " +
                          std::to_string(kNodes) + " " + std::to_string(iterations) + " " +
                          std::to_string(kDim) + " " + gamma_text + " " + std::to_string(seed);
  REQUIRE(gossip::testing::run_shell(cmd) == 0);
  Compared c;
  const std::size_t nd = std::size_t{kNodes} * kDim;
  c.z0 = read_f64(dir.file("z0.f64"), nd);
  const std::vector<double> b = read_f64(dir.file("b.f64"), nd);
  c.z_ref = read_f64(dir.file("z.f64"), nd);
  c.w_ref = read_f64(dir.file("w.f64"), kNodes);

  const topology::Topology ring = directed_ring(kNodes);
  auto logs = read_push_sum_logs(dir.file("logs"), ring, iterations);
  REQUIRE_MESSAGE(logs.is_ok(), logs.status().to_string());
  StateMatrix start(kDim, kNodes);
  for (int i = 0; i < kNodes; ++i) {
    for (int k = 0; k < kDim; ++k) start(k, i) = static_cast<float>(c.z0[i * kDim + k]);
  }
  std::vector<float> u(kDim);
  auto backend = sgd::make_backend(sgd::Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  std::vector<std::int64_t> next(kNodes, 0);
  auto replayed =
      replay_push_sum(*logs, ring, start, **backend, [&](int i, std::int64_t t, const float* z) {
        CHECK(t == next[i]++);  // each node's iterations in order
        for (int k = 0; k < kDim; ++k) u[k] = z[k] - static_cast<float>(b[i * kDim + k]);
        return LocalStep{u.data(), gamma};
      });
  REQUIRE_MESSAGE(replayed.is_ok(), replayed.status().to_string());
  // Each node's iterations, as many as its log has lines (a node alone ends early); some node does.
  bool early = false;
  for (int i = 0; i < kNodes; ++i) {
    CHECK(next[i] == logs->logs[i].ran());
    early |= next[i] < iterations;
  }
  CHECK(early);
  c.replayed = std::move(replayed).value();
  return c;
}

// max over nodes and entries of |z − z_ref| / max(1, |z_ref|).
double worst_error(const Compared& c) {
  double worst = 0;
  for (int i = 0; i < kNodes; ++i) {
    for (int k = 0; k < kDim; ++k) {
      const double ref = c.z_ref[i * kDim + k];
      worst =
          std::max(worst, std::fabs(c.replayed.params(k, i) - ref) / std::max(1.0, std::fabs(ref)));
    }
  }
  return worst;
}

TEST_CASE("push-sum replay of an asynchronous schedule on a quadratic matches numpy's recursion") {
  if (!have_numpy()) {
    MESSAGE("/usr/bin/python3 with numpy not found; skipped");
    return;
  }
  const Compared c = replay_against_reference(40, 0.1f, 7);
  const double worst = worst_error(c);
  MESSAGE("replay vs numpy float64, z: " << worst);
  CHECK(worst <= 2e-6);
  double weight_sum = 0;
  for (int i = 0; i < kNodes; ++i) {
    const float w = c.replayed.weights[i];
    CHECK(w == doctest::Approx(c.w_ref[i]).epsilon(1e-6));
    weight_sum += w;
  }
  CHECK(weight_sum == doctest::Approx(kNodes).epsilon(1e-6));
  // Not vacuous: the weights moved off 1 and the nodes still disagree (b_i differ), far beyond the
  // tolerance.
  CHECK(
      std::any_of(c.w_ref.begin(), c.w_ref.end(), [](double w) { return std::fabs(w - 1) > 0.1; }));
  double spread = 0;
  for (int k = 0; k < kDim; ++k)
    spread = std::max(spread, std::fabs(c.z_ref[k] - c.z_ref[kDim + k]));
  CHECK(spread > 0.1);
}

TEST_CASE(
    "push-sum replay, pure gossip on an asynchronous schedule: the weights sum to n, sum_i w_i z_i "
    "is kept and the de-biased z_i approach the exact average") {
  if (!have_numpy()) {
    MESSAGE("/usr/bin/python3 with numpy not found; skipped");
    return;
  }
  double previous = 1e300;
  for (const std::int64_t iterations : {8, 40, 160}) {
    CAPTURE(iterations);
    const Compared c = replay_against_reference(iterations, 0.0f, 11);
    CHECK(worst_error(c) <= 2e-6);
    double weight_sum = 0, error = 0, start_spread = 0;
    for (int i = 0; i < kNodes; ++i) weight_sum += c.replayed.weights[i];
    CHECK(weight_sum == doctest::Approx(kNodes).epsilon(1e-6));
    for (int k = 0; k < kDim; ++k) {
      double mass = 0, start_sum = 0;
      for (int i = 0; i < kNodes; ++i) {
        mass += static_cast<double>(c.replayed.weights[i]) * c.replayed.params(k, i);
        start_sum += c.z0[i * kDim + k];
      }
      CHECK(mass == doctest::Approx(start_sum).epsilon(1e-5).scale(1.0));
      const double mean = start_sum / kNodes;
      for (int i = 0; i < kNodes; ++i) {
        error = std::max(error, std::fabs(c.replayed.params(k, i) - mean));
        start_spread = std::max(start_spread, std::fabs(c.z0[i * kDim + k] - mean));
      }
    }
    MESSAGE("iterations " << iterations << ": max |z_i - mean| " << error << " (starts "
                          << start_spread << ")");
    CHECK(error < previous);
    previous = error;
    if (iterations == 160) CHECK(error < 1e-4 * start_spread);
  }
}

}  // namespace
}  // namespace gossip::sim
