// The D-PSGD loop of gossipd (daemon/node.h) with n nodes as threads over the in-process exchange
// hub: the final parameters of every node equal gossip-sim's D-PSGD per-node parameters; a resumed
// run equals an uninterrupted one bit for bit; under fault.policy FAIL_STOP a dead neighbour makes
// every other node fail-stop with kExitNeighbourFailed and a checkpoint (carry_on_test.cc: the
// default policy).
#include "daemon/node.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "config/sgd_config.h"
#include "daemon/checkpoint.h"
#include "daemon/exit_codes.h"
#include "sim/simulator.h"
#include "tests/daemon/local_cluster.h"
#include "tests/support/files.h"
#include "tests/support/topologies.h"

namespace gossip::daemon {
namespace {

using testing::generated_topology;

using gossip::testing::TempDir;

TrainConfig small_config(std::uint64_t iterations) {
  return testing::valid_train_config(R"(
    seed: 9
    model { kind: MLP hidden: 8 }
    data { dataset: SYNTHETIC_LOGISTIC num_examples: 512 dim: 6 test_examples: 128 noise: 3 }
    batch_size: 8
    optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 weight_decay: 0.001 }
    eval_every: 10
    checkpoint { every: 10 keep: 5 }
    timeouts { deadline_ms: 2000 heartbeat_ms: 100 }
  )",
                                     iterations);
}

TEST_CASE("config fingerprint: an lr of 0 reads as it did before lr had presence") {
  // Checkpoints of pure-gossip runs written before optimizer.lr became required carry the
  // fingerprint of a text without "lr: 0"; they must stay loadable.
  TrainConfig with = small_config(10);
  with.mutable_optimizer()->set_lr(0);
  TrainConfig without = with;
  without.mutable_optimizer()->clear_lr();
  REQUIRE(with.optimizer().has_lr());
  CHECK(config_fingerprint(with) == config_fingerprint(without));
  TrainConfig other = with;
  other.mutable_optimizer()->set_lr(0.05);
  CHECK(config_fingerprint(other) != config_fingerprint(with));
}

// Every node as a thread over a fresh in-process hub (local_cluster.h).
std::vector<NodeResult> run_cluster(const topology::Topology& topo, const sgd::Problem& problem,
                                    const TrainConfig& config, const std::string& dir,
                                    bool resume = false, std::vector<int> dead = {}) {
  LocalExchangeHub hub(topo.num_nodes());
  return testing::run_local_cluster(topo, problem, config, dir, hub, dead, resume);
}

void check_against_simulator(topology::GeneratorKind kind, int n) {
  TempDir dir;
  const std::uint64_t iterations = 25;
  TrainConfig config = small_config(iterations);
  topology::Topology topo = generated_topology(kind, n);
  auto problem = sgd::make_problem(config::to_problem_config(config, n));
  REQUIRE_MESSAGE(problem.is_ok(), problem.status().to_string());

  auto results = run_cluster(topo, *problem, config, dir.path);
  for (int i = 0; i < n; ++i) REQUIRE_MESSAGE(results[i].exit_code == kExitOk, results[i].message);

  sim::RunConfig rc;
  rc.algorithm = sim::Algorithm::kDpsgd;
  rc.optimizer = config::to_optimizer_config(config, iterations);
  rc.batch_size = static_cast<int>(config.batch_size());
  rc.iterations = static_cast<std::int64_t>(iterations);
  rc.eval_every = static_cast<std::int64_t>(iterations);
  rc.eval_local = false;
  auto simulator = sim::Simulator::create(*problem, &topo, rc);
  REQUIRE_MESSAGE(simulator.is_ok(), simulator.status().to_string());
  REQUIRE((*simulator)->run().is_ok());
  const sim::StateMatrix& expected = (*simulator)->params();

  double max_diff = 0;
  double moved = 0;
  std::vector<float> x0 = problem->initial_params();
  for (int i = 0; i < n; ++i) {
    std::vector<float> got =
        testing::read_f32(dir.path + "/params/node_" + std::to_string(i) + ".f32");
    REQUIRE(got.size() == static_cast<std::size_t>(expected.rows()));
    for (std::size_t k = 0; k < got.size(); ++k) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[k] - expected(k, i))));
      moved = std::max(moved, static_cast<double>(std::fabs(got[k] - x0[k])));
    }
  }
  CHECK(moved > 1e-3);  // training happened
  CHECK(max_diff <= 1e-6);
}

TEST_CASE("threads over the in-process hub equal gossip-sim's D-PSGD: ring, n = 4") {
  check_against_simulator(topology::GeneratorKind::kRing, 4);
}

TEST_CASE("threads over the in-process hub equal gossip-sim's D-PSGD: exponential, n = 8") {
  check_against_simulator(topology::GeneratorKind::kExponential, 8);
}

TEST_CASE("threads over the in-process hub equal gossip-sim's D-PSGD: one-peer exponential") {
  check_against_simulator(topology::GeneratorKind::kOnePeerExponential, 8);
}

TEST_CASE("a resumed run equals an uninterrupted one bit for bit") {
  const int n = 4;
  topology::Topology topo = generated_topology(topology::GeneratorKind::kRing, n);
  TrainConfig full = small_config(30);
  auto problem = sgd::make_problem(config::to_problem_config(full, n));
  REQUIRE(problem.is_ok());
  TempDir a, b;
  for (const auto& r : run_cluster(topo, *problem, full, a.path)) REQUIRE(r.exit_code == kExitOk);
  // First 17 iterations, then resume to 30 from the final checkpoint at 17.
  TrainConfig part = small_config(17);
  for (const auto& r : run_cluster(topo, *problem, part, b.path)) REQUIRE(r.exit_code == kExitOk);
  auto resumed = run_cluster(topo, *problem, full, b.path, /*resume=*/true);
  for (const auto& r : resumed) {
    REQUIRE(r.exit_code == kExitOk);
    CHECK(r.iterations_done == 30);
  }
  for (int i = 0; i < n; ++i) {
    std::string name = "/params/node_" + std::to_string(i) + ".f32";
    CHECK(testing::read_f32(a.path + name) == testing::read_f32(b.path + name));
  }
}

TEST_CASE(
    "fault.policy FAIL_STOP: a dead neighbour makes every other node checkpoint and exit with code "
    "3") {
  const int n = 4;
  topology::Topology topo = generated_topology(topology::GeneratorKind::kRing, n);
  TrainConfig config = small_config(30);
  config.mutable_timeouts()->set_deadline_ms(300);
  config.mutable_fault()->set_policy(config::pb::Fault::FAIL_STOP);
  auto problem = sgd::make_problem(config::to_problem_config(config, n));
  REQUIRE(problem.is_ok());
  TempDir dir;
  auto results = run_cluster(topo, *problem, config, dir.path, false, /*dead=*/{2});
  for (int i : {0, 1, 3}) {
    CHECK(results[i].exit_code == kExitNeighbourFailed);
    CHECK(results[i].iterations_done <= 1);  // node 0 may finish iteration 0 first
    auto c = load_latest_checkpoint(
        Env::system(), dir.path + "/ckpt/node-" + std::to_string(i),
        {static_cast<std::uint32_t>(i), 0, problem->spec.num_params(), "", ""});
    CHECK_MESSAGE(c.is_ok(), c.status().to_string());
  }
  // The direct neighbours name node 2.
  CHECK(results[1].message.find("neighbour 2") != std::string::npos);
  CHECK(results[3].message.find("neighbour 2") != std::string::npos);
}

}  // namespace
}  // namespace gossip::daemon
