// The problem factory: deterministic per seed, model/data compatibility errors, and single-node
// SGD reaching the known optimum of the synthetic problems (least squares against the normal
// equations solved in double; logistic regression recovering the planted separator's direction).
#include "sgd/problem.h"

#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "sgd/backend.h"
#include "sgd/optimizer.h"

namespace gossip::sgd {
namespace {

// A synthetic problem: `model` on `data`, train and test examples of dimension dim
// around a planted optimum, with `noise` (the data kind's noise parameter).
ProblemConfig synthetic_config(ModelKind model, DataKind data, int train, int test, int dim,
                               double noise) {
  ProblemConfig c;
  c.model = model;
  c.data = data;
  c.synthetic_train = train;
  c.synthetic_test = test;
  c.synthetic_dim = dim;
  c.synthetic_noise = noise;
  return c;
}

ProblemConfig least_squares_config() {
  ProblemConfig c =
      synthetic_config(ModelKind::kLeastSquares, DataKind::kLeastSquares, 2000, 500, 10, 0.1);
  c.num_nodes = 4;
  c.seed = 17;
  return c;
}

// Trains one node on its whole shard with mini-batch SGD; returns the final parameters.
std::vector<float> train(const Problem& p, int node, const OptimizerConfig& oc, int steps,
                         int batch_size) {
  auto backend = make_backend(Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  auto model = (*backend)->make_model(p.spec);
  REQUIRE(model.is_ok());
  std::vector<float> x = p.initial_params(), g(x.size()), u(x.size());
  Optimizer opt(oc, x.size());
  std::vector<float> state(opt.state_size());
  BatchSampler sampler = p.sampler(node, batch_size);
  Batch batch;
  for (int t = 0; t < steps; ++t) {
    gather(*p.train, sampler.next(), batch);
    (*model)->loss_and_grad(x.data(), batch, g.data());
    opt.step(**backend, t, x.data(), g.data(), state.empty() ? nullptr : state.data(), u.data());
  }
  return x;
}

TEST_CASE("make_problem is deterministic in the seed and shards partition the training set") {
  auto a = make_problem(least_squares_config());
  auto b = make_problem(least_squares_config());
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(a->train->features == b->train->features);
  CHECK(a->test->targets == b->test->targets);
  CHECK(a->planted == b->planted);
  CHECK(a->shards == b->shards);
  CHECK(a->initial_params() == b->initial_params());
  CHECK(a->train->num_examples == 2000);
  CHECK(a->test->num_examples == 500);
  CHECK(a->spec.num_params() == 11);
  CHECK(a->planted.size() == 11);
  std::size_t total = 0;
  for (const auto& s : a->shards) total += s.size();
  CHECK(total == 2000);
  auto sa = a->sampler(2, 8), sb = b->sampler(2, 8);
  auto va = sa.next();
  auto vb = sb.next();
  CHECK(std::vector<std::int64_t>(va.begin(), va.end()) ==
        std::vector<std::int64_t>(vb.begin(), vb.end()));
  ProblemConfig other = least_squares_config();
  other.seed = 18;
  CHECK(make_problem(other)->planted != a->planted);
}

TEST_CASE("config errors name the field") {
  ProblemConfig c = least_squares_config();
  c.model = ModelKind::kSoftmax;
  auto r = make_problem(c);
  REQUIRE(!r.is_ok());
  CHECK(r.status().message().find("least_squares") != std::string::npos);
  c = least_squares_config();
  c.num_nodes = 0;
  CHECK(make_problem(c).status().message().find("num_nodes") != std::string::npos);
  c = ProblemConfig{};
  c.model = ModelKind::kMlp;
  CHECK(make_problem(c).status().message().find("hidden") != std::string::npos);
  c = ProblemConfig{};
  c.data_dir = "/nonexistent";
  auto missing = make_problem(c);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("dataset-fashion-mnist") != std::string::npos);
  CHECK(!kDataKinds.parse("cifar").is_ok());
}

TEST_CASE("least squares: SGD converges to the normal-equations solution of the node's shard") {
  auto p = make_problem(least_squares_config());
  REQUIRE(p.is_ok());
  const auto& shard = p->shards[1];
  const int d = p->train->dim;
  Eigen::MatrixXd a(shard.size(), d + 1);
  Eigen::VectorXd y(shard.size());
  for (std::size_t r = 0; r < shard.size(); ++r) {
    for (int k = 0; k < d; ++k) a(r, k) = p->train->features[shard[r] * d + k];
    a(r, d) = 1.0;
    y(r) = p->train->targets[shard[r]];
  }
  const Eigen::VectorXd opt = a.colPivHouseholderQr().solve(y);
  OptimizerConfig oc;
  oc.schedule.kind = ScheduleKind::kCosine;
  oc.schedule.lr = 0.1;
  oc.schedule.total_steps = 3000;
  oc.momentum = 0.5;
  const std::vector<float> x = train(*p, 1, oc, 3000, 32);
  double err = 0, err_planted = 0;
  for (int k = 0; k <= d; ++k) {
    err = std::max(err, std::abs(x[k] - opt(k)));
    err_planted = std::max(err_planted, std::abs(double(p->planted[k]) - opt(k)));
  }
  CAPTURE(err);
  CHECK(err < 2e-3);
  // and the shard's optimum is near the planted x* (noise 0.1, 500 examples)
  CHECK(err_planted < 0.05);
}

TEST_CASE("logistic: SGD recovers the planted separator's direction and Bayes-level accuracy") {
  // Noise parameter 4: ‖w*‖.
  ProblemConfig c =
      synthetic_config(ModelKind::kLogistic, DataKind::kLogistic, 20000, 5000, 5, 4.0);
  c.seed = 3;
  auto p = make_problem(c);
  REQUIRE(p.is_ok());
  OptimizerConfig oc;
  oc.schedule.lr = 0.5;
  const std::vector<float> x = train(*p, 0, oc, 4000, 64);
  double dot = 0, nx = 0, nw = 0;
  for (int k = 0; k < 5; ++k) {
    dot += x[k] * p->planted[k];
    nx += x[k] * x[k];
    nw += p->planted[k] * p->planted[k];
  }
  const double cosine = dot / std::sqrt(nx * nw);
  CAPTURE(cosine);
  CHECK(cosine > 0.99);
  auto backend = make_backend(Device::kCpu, 1);
  auto model = (*backend)->make_model(p->spec);
  const EvalResult ours = (*model)->evaluate(x.data(), *p->test);
  const EvalResult bayes = (*model)->evaluate(p->planted.data(), *p->test);
  CAPTURE(ours.accuracy);
  CAPTURE(bayes.accuracy);
  CHECK(ours.accuracy > bayes.accuracy - 0.01);
  CHECK(ours.loss < bayes.loss + 0.01);
}

}  // namespace
}  // namespace gossip::sgd
