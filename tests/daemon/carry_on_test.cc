// The carry-on fault policy (daemon/node.h) with n nodes as threads over the in-process exchange
// hub: the weight rule (equal to the topology's Metropolis–Hastings W without failures, closed
// forms after a drop, symmetric and doubly stochastic), the verdict phase (a lost buffer, a NaN or
// an Inf payload drops the edge on both ends from the same iteration; the live link brings it
// back through Admit/Accept at the same iteration on both ends), and pure gossip through a dead
// node converging to the survivors' average.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "config/sgd_config.h"
#include "daemon/checkpoint.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "tests/daemon/local_cluster.h"
#include "tests/support/files.h"
#include "tests/support/topologies.h"

namespace gossip::daemon {
namespace {

using testing::generated_topology;

using gossip::testing::TempDir;
using Row = std::vector<std::pair<int, double>>;

TrainConfig config_with(std::uint64_t iterations, double lr) {
  return testing::valid_train_config(R"(
    seed: 5
    model { kind: LOGISTIC }
    data { dataset: SYNTHETIC_LOGISTIC num_examples: 512 dim: 6 test_examples: 64 noise: 1 }
    batch_size: 8
    optimizer { kind: SGD }
    checkpoint { every: 0 keep: 2 }
    timeouts { deadline_ms: 400 heartbeat_ms: 100 }
  )",
                                     iterations, lr);
}

Row topology_row(const topology::Topology& topo, int i, std::int64_t t = 0) {
  Row r;
  bool self_added = false;
  for (const auto& nb : topo.in_neighbors(i, t)) {
    if (!self_added && nb.node > i) {
      r.emplace_back(i, topo.self_weight(i, t));
      self_added = true;
    }
    r.emplace_back(nb.node, nb.weight);
  }
  if (!self_added) r.emplace_back(i, topo.self_weight(i, t));
  return r;
}

// Checks that the rows (node -> row) form a symmetric, doubly stochastic matrix on `nodes`, with
// no entry outside them.
void check_doubly_stochastic(const std::map<int, Row>& rows, const std::string& what) {
  std::map<std::pair<int, int>, double> w;
  for (const auto& [i, row] : rows) {
    double sum = 0;
    for (const auto& [j, v] : row) {
      CHECK_MESSAGE(rows.count(j) == 1, what << ": node " << i << " mixes node " << j);
      CHECK_MESSAGE(v >= 0, what);
      w[{i, j}] = v;
      sum += v;
    }
    CHECK_MESSAGE(std::fabs(sum - 1.0) <= 1e-12, what << ": row " << i << " sums to " << sum);
  }
  for (const auto& [ij, v] : w) {
    auto it = w.find({ij.second, ij.first});
    CHECK_MESSAGE((it != w.end() && it->second == v), what << ": W(" << ij.first << "," << ij.second
                                                           << ") = " << v
                                                           << " has no equal mirror");
  }
}

TEST_CASE(
    "carry-on weights: without failures they equal the topology's Metropolis-Hastings rows bit for "
    "bit") {
  for (const auto& topo : {generated_topology(topology::GeneratorKind::kRing, 5),
                           generated_topology(topology::GeneratorKind::kStar, 6),
                           generated_topology(topology::GeneratorKind::kTorus, 12, 3, 4),
                           generated_topology(topology::GeneratorKind::kGrid, 12, 3, 4)}) {
    CHECK(mixing_is_symmetric(topo));
    for (int i = 0; i < topo.num_nodes(); ++i) {
      REQUIRE(uses_metropolis_hastings(topo, i));
      std::map<int, std::uint32_t> used;
      for (const auto& nb : topo.in_neighbors(i, 0)) {
        used[nb.node] = static_cast<std::uint32_t>(topo.graph().degree(nb.node));
      }
      RowWeights w = row_weights(topo, i, 0, true, static_cast<std::uint32_t>(used.size()), used);
      CHECK(w.row(i) == topology_row(topo, i));
    }
  }
  // Directed graphs (the exponential graph) cannot carry on: W would lose double stochasticity.
  CHECK_FALSE(mixing_is_symmetric(generated_topology(topology::GeneratorKind::kExponential, 8)));
}

TEST_CASE("carry-on weights: closed form after the edge 0-1 of a 4-ring drops") {
  topology::Topology ring = generated_topology(topology::GeneratorKind::kRing, 4);
  // Iteration t of the drop: degrees are still the planned 2; the edge is not used.
  std::map<int, Row> at_drop, after;
  at_drop[0] = row_weights(ring, 0, 0, true, 2, {{3, 2}}).row(0);
  at_drop[1] = row_weights(ring, 1, 0, true, 2, {{2, 2}}).row(1);
  at_drop[2] = row_weights(ring, 2, 0, true, 2, {{1, 2}, {3, 2}}).row(2);
  at_drop[3] = row_weights(ring, 3, 0, true, 2, {{0, 2}, {2, 2}}).row(3);
  CHECK(at_drop[0] == Row{{0, 1.0 - 1.0 / 3}, {3, 1.0 / 3}});
  CHECK(at_drop[2] == Row{{1, 1.0 / 3}, {2, 1.0 - (1.0 / 3 + 1.0 / 3)}, {3, 1.0 / 3}});
  check_doubly_stochastic(at_drop, "at the drop");
  // From t+1 on: d_0 = d_1 = 1, d_2 = d_3 = 2; max(1, 2) = 2 on every remaining edge.
  after[0] = row_weights(ring, 0, 1, true, 1, {{3, 2}}).row(0);
  after[1] = row_weights(ring, 1, 1, true, 1, {{2, 2}}).row(1);
  after[2] = row_weights(ring, 2, 1, true, 2, {{1, 1}, {3, 2}}).row(2);
  after[3] = row_weights(ring, 3, 1, true, 2, {{0, 1}, {2, 2}}).row(3);
  CHECK(after[0] == Row{{0, 1.0 - 1.0 / 3}, {3, 1.0 / 3}});
  check_doubly_stochastic(after, "after the drop");
  // A star losing a leaf: hub degree 3 -> 2, leaves' weights 1/(1+2) instead of 1/(1+3).
  topology::Topology star = generated_topology(topology::GeneratorKind::kStar, 4);
  std::map<int, Row> s;
  s[0] = row_weights(star, 0, 1, true, 2, {{1, 1}, {2, 1}}).row(0);
  s[1] = row_weights(star, 1, 1, true, 1, {{0, 2}}).row(1);
  s[2] = row_weights(star, 2, 1, true, 1, {{0, 2}}).row(2);
  CHECK(s[0] == Row{{0, 1.0 - 2.0 / 3}, {1, 1.0 / 3}, {2, 1.0 / 3}});
  CHECK(s[1] == Row{{0, 1.0 / 3}, {1, 1.0 - 1.0 / 3}});
  check_doubly_stochastic(s, "star");
  // Other schemes: the dropped weight moves onto the diagonal.
  topology::GeneratorSpec spec;
  spec.kind = topology::GeneratorKind::kRing;
  spec.nodes = 4;
  auto lazy = topology::Topology::generate(spec, topology::WeightScheme::kLazyMetropolisHastings);
  REQUIRE(lazy.is_ok());
  CHECK_FALSE(uses_metropolis_hastings(*lazy, 0));
  RowWeights l = row_weights(*lazy, 0, 0, false, 1, {{3, 2}});
  CHECK(l.self == lazy->self_weight(0) + lazy->in_neighbors(0)[0].weight);
  CHECK(l.neighbours == Row{{3, lazy->in_neighbors(0)[1].weight}});
}

// ---- clusters of threads

struct ClusterResult {
  std::vector<NodeResult> results;
  std::vector<std::vector<float>> params;                            // final x_i (survivors)
  std::vector<std::vector<std::map<std::string, JsonValue>>> lines;  // metrics per node
};

std::vector<std::map<std::string, JsonValue>> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::map<std::string, JsonValue>> out;
  for (std::string line; std::getline(in, line);) {
    auto m = parse_flat_json(line);
    REQUIRE_MESSAGE(m.is_ok(), line);
    out.push_back(*m);
  }
  return out;
}

// Gives every node its own random x_0 through an iteration-0 checkpoint (so that pure gossip has
// something to average); returns the x_0 of each node.
std::vector<std::vector<float>> distinct_starts(const topology::Topology& topo,
                                                const sgd::Problem& problem,
                                                const TrainConfig& config, const std::string& dir) {
  std::vector<std::vector<float>> x0;
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0, 1);
  for (int i = 0; i < topo.num_nodes(); ++i) {
    Checkpoint c;
    c.node = static_cast<std::uint32_t>(i);
    c.iteration = 0;
    c.topology_fingerprint = topo.fingerprint();
    c.config_fingerprint = config_fingerprint(config);
    sgd::SamplerState ss = problem.sampler(i, static_cast<int>(config.batch_size())).state();
    c.sampler.rng_state = ss.epoch_rng_state;
    c.sampler.epoch = ss.epoch;
    c.sampler.position = ss.position;
    c.sampler.batches = ss.batches;
    c.params.resize(problem.spec.num_params());
    for (float& v : c.params) v = normal(rng);
    x0.push_back(c.params);
    auto w = write_checkpoint(Env::system(), dir + "/ckpt/node-" + std::to_string(i), c, 2);
    REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
  }
  return x0;
}

ClusterResult run_cluster(const topology::Topology& topo, const sgd::Problem& problem,
                          const TrainConfig& config, const std::string& dir, LocalExchangeHub& hub,
                          const std::vector<int>& dead, bool resume) {
  const int n = topo.num_nodes();
  ClusterResult out;
  out.results = testing::run_local_cluster(topo, problem, config, dir, hub, dead, resume);
  out.params.resize(n);
  out.lines.resize(n);
  for (int i = 0; i < n; ++i) {
    if (std::find(dead.begin(), dead.end(), i) != dead.end()) continue;
    out.lines[i] = read_lines(dir + "/metrics-" + std::to_string(i) + ".jsonl");
    if (out.results[i].exit_code == kExitOk) {
      out.params[i] = testing::read_f32(dir + "/params/node_" + std::to_string(i) + ".f32");
    }
  }
  return out;
}

// Every iteration's W over `alive` (rows from the weights lines) is symmetric and doubly
// stochastic.
void check_logged_rows(const ClusterResult& r, const std::vector<int>& alive,
                       std::uint64_t iterations) {
  std::map<int, std::vector<std::pair<std::uint64_t, Row>>> logged;
  for (int i : alive) {
    for (const auto& m : r.lines[i]) {
      if (m.at("type").text != "weights") continue;
      CHECK(m.count("unix_ms") == 1);
      auto row = parse_row(m.at("row").text);
      REQUIRE(row.is_ok());
      logged[i].emplace_back(static_cast<std::uint64_t>(m.at("iteration").number), *row);
    }
    REQUIRE_MESSAGE(!logged[i].empty(), "node " << i << " logged no weights");
    CHECK(logged[i].front().first == 0);
  }
  for (std::uint64_t t = 0; t < iterations; ++t) {
    std::map<int, Row> rows;
    for (int i : alive) {
      const Row* in_force = nullptr;
      for (const auto& [it, row] : logged[i]) {
        if (it <= t) in_force = &row;
      }
      REQUIRE(in_force != nullptr);
      rows[i] = *in_force;
    }
    check_doubly_stochastic(rows, "iteration " + std::to_string(t));
  }
}

// (iteration, peer) of every edge_dropped (or other) event of node i.
std::vector<std::pair<int, int>> drops_of(const ClusterResult& r, int i,
                                          const std::string& event = "edge_dropped") {
  std::vector<std::pair<int, int>> d;
  for (const auto& m : r.lines[i]) {
    if (m.at("type").text == "event" && m.at("event").text == event) {
      CHECK(m.count("unix_ms") == 1);
      d.emplace_back(static_cast<int>(m.at("iteration").number),
                     static_cast<int>(m.at("peer").number));
    }
  }
  return d;
}

TEST_CASE(
    "verdicts: a lost buffer, a NaN and an Inf payload drop the edge on both ends from the same "
    "iteration, and it is re-admitted on both ends at the same later iteration") {
  // One fault at a time, 30 iterations apart: with one edge down the ring is a path, whose ends
  // drift at most n - 1 iterations apart, so the re-admission (margin 3, doubled on each retry)
  // agrees within the gap. Two edges down at once would split the ring into two groups that run
  // on without any bound on their drift (no barrier), and the re-admission would then race the
  // end of the run.
  const int n = 6;
  topology::Topology topo = generated_topology(topology::GeneratorKind::kRing, n);
  TrainConfig config = config_with(100, 0.1);
  auto problem = sgd::make_problem(config::to_problem_config(config, n));
  REQUIRE(problem.is_ok());
  TempDir dir;
  LocalExchangeHub hub(n);
  hub.lose(2, 3, 5);                                              // 3 never gets x_2^5
  hub.poison(0, 1, 35, std::numeric_limits<float>::quiet_NaN());  // 1 gets a NaN from 0
  hub.poison(5, 4, 65, std::numeric_limits<float>::infinity());   // 4 gets an Inf from 5
  ClusterResult r = run_cluster(topo, *problem, config, dir.path, hub, {}, false);
  for (int i = 0; i < n; ++i) {
    REQUIRE_MESSAGE(r.results[i].exit_code == kExitOk, r.results[i].message);
    CHECK(r.results[i].iterations_done == 100);
    for (float v : r.params[i]) REQUIRE(std::isfinite(v));
  }
  using P = std::vector<std::pair<int, int>>;
  for (int i = 0; i < n; ++i) {
    for (auto [t, j] : drops_of(r, i)) MESSAGE("node " << i << " dropped " << j << " at " << t);
  }
  CHECK(drops_of(r, 2) == P{{5, 3}});
  CHECK(drops_of(r, 3) == P{{5, 2}});
  CHECK(drops_of(r, 0) == P{{35, 1}});
  CHECK(drops_of(r, 1) == P{{35, 0}});
  CHECK(drops_of(r, 5) == P{{65, 4}});
  CHECK(drops_of(r, 4) == P{{65, 5}});
  check_logged_rows(r, {0, 1, 2, 3, 4, 5}, 100);
  // The links stayed up, so each edge is re-admitted a few iterations later, at the same
  // iteration on both ends, and the run ends on the whole ring again (MH weights 1/3).
  auto admitted = [&](int i, int j) {
    for (auto [t, peer] : drops_of(r, i, "edge_admitted")) {
      if (peer == j) return t;
    }
    return -1;
  };
  for (auto [i, j, dropped_at] :
       {std::tuple{2, 3, 5}, std::tuple{0, 1, 35}, std::tuple{4, 5, 65}}) {
    MESSAGE("edge " << i << "-" << j << " dropped at " << dropped_at << ", re-admitted at "
                    << admitted(i, j));
    CHECK(admitted(i, j) > dropped_at);
    CHECK(admitted(i, j) == admitted(j, i));
  }
  for (int i = 0; i < n; ++i) {
    Row last;
    for (const auto& m : r.lines[i]) {
      if (m.at("type").text == "weights") last = *parse_row(m.at("row").text);
    }
    REQUIRE(last.size() == 3);
    for (const auto& [j, w] : last) CHECK(w == doctest::Approx(1.0 / 3).epsilon(1e-15));
  }
}

TEST_CASE("pure gossip through a dead node: survivors finish and converge to their average") {
  const int n = 12;
  topology::Topology topo = generated_topology(topology::GeneratorKind::kTorus, n, 3, n / 3);
  const std::uint64_t iterations = 150;
  TrainConfig config = config_with(iterations, 1e-30);  // pure gossip (lr 0 is refused by sgd)
  auto problem = sgd::make_problem(config::to_problem_config(config, n));
  REQUIRE(problem.is_ok());
  TempDir dir;
  std::vector<std::vector<float>> x0 = distinct_starts(topo, *problem, config, dir.path);
  LocalExchangeHub hub(n);
  const std::vector<int> dead = {4};
  ClusterResult r = run_cluster(topo, *problem, config, dir.path, hub, dead, /*resume=*/true);
  std::vector<int> alive;
  for (int i = 0; i < n; ++i) {
    if (i == 4) continue;
    alive.push_back(i);
    REQUIRE_MESSAGE(r.results[i].exit_code == kExitOk, r.results[i].message);
    CHECK(r.results[i].iterations_done == iterations);
  }
  // Node 4's four neighbours dropped it at iteration 0; nobody else dropped anything.
  for (int i : alive) {
    bool neighbour = topo.graph().has_arc(4, i);
    CHECK(drops_of(r, i) == (neighbour ? std::vector<std::pair<int, int>>{{0, 4}}
                                       : std::vector<std::pair<int, int>>{}));
  }
  check_logged_rows(r, alive, iterations);
  // W is doubly stochastic on the survivors from iteration 0: their average is preserved, and
  // pure gossip takes every survivor to it.
  const std::size_t d = x0[0].size();
  double spread0 = 0, err = 0;
  for (std::size_t k = 0; k < d; ++k) {
    double mean = 0;
    for (int i : alive) mean += x0[i][k];
    mean /= static_cast<double>(alive.size());
    for (int i : alive) {
      spread0 = std::max(spread0, std::fabs(x0[i][k] - mean));
      err = std::max(err, std::fabs(r.params[i][k] - mean));
    }
  }
  MESSAGE("max |x_i - survivors' mean of x_0|: " << spread0 << " at the start, " << err << " after "
                                                 << iterations << " iterations");
  CHECK(spread0 > 0.5);
  CHECK(err < 1e-4);
}

}  // namespace
}  // namespace gossip::daemon
