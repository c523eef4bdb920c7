// What tests/sim's test files build alike: a ring's in-neighbour lists and a small least-squares
// experiment. Header-only.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/experiment.h"

namespace gossip::sim {

// Node i's in-neighbours on a ring of n: {i − 1, i + 1} (mod n).
inline std::vector<std::vector<int>> ring_in_neighbours(int n) {
  std::vector<std::vector<int>> in(n);
  for (int i = 0; i < n; ++i) in[i] = {(i + n - 1) % n, (i + 1) % n};
  return in;
}

// Least squares on a synthetic `train`/`test` set of dimension `dim`, on a ring of `nodes`, for
// `iterations` iterations (evaluated every 20; batch 8, γ = 0.05); the cost model's inputs and the
// rounds are the caller's.
inline ExperimentConfig least_squares_experiment(int nodes, std::int64_t train, std::int64_t test,
                                                 int dim, std::int64_t iterations) {
  ExperimentConfig c;
  c.problem.model = sgd::ModelKind::kLeastSquares;
  c.problem.data = sgd::DataKind::kLeastSquares;
  c.problem.synthetic_train = train;
  c.problem.synthetic_test = test;
  c.problem.synthetic_dim = dim;
  c.nodes = nodes;
  c.topologies = {"ring"};
  c.run.iterations = iterations;
  c.run.eval_every = 20;
  c.run.batch_size = 8;
  c.run.optimizer.schedule.lr = 0.05;
  return c;
}

}  // namespace gossip::sim
