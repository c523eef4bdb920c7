// Problem: the one place where a training config becomes data, shards, a model and a start point,
// so that gossip-sim and gossipd compute the same thing for node i from the same config and seed.
//
// From one seed, independent streams are derived with mix_seed(seed, salt):
//   data (synthetic sets) salt 1, shards salt 2, initial parameters salt 3, batch sampling salt 4
//   (BatchSampler then mixes in the node id). A synthetic problem draws train + test examples in
//   one stream around one planted optimum and splits them by rows (train first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/env.h"
#include "common/status.h"
#include "sgd/dataset.h"
#include "sgd/idx.h"
#include "sgd/model_spec.h"
#include "sgd/sampler.h"
#include "sgd/shard.h"

namespace gossip::sgd {

enum class DataKind { kLeastSquares, kLogistic, kFashionMnist };
inline constexpr EnumTable<DataKind, 3> kDataKinds{"data kind",
                                                   {{DataKind::kLeastSquares, "least_squares"},
                                                    {DataKind::kLogistic, "logistic"},
                                                    {DataKind::kFashionMnist, "fashion_mnist"}}};

struct ProblemConfig {
  ModelKind model = ModelKind::kSoftmax;
  std::vector<int> hidden;  // mlp only, e.g. {256, 128}
  float l2 = 0.0f;

  DataKind data = DataKind::kFashionMnist;
  std::string data_dir = kFashionMnistDir;  // fashion_mnist
  bool standardize = true;  // fashion_mnist: per-pixel standardisation fitted on train; else [0,1]

  // synthetic sets
  std::int64_t synthetic_train = 10000;
  std::int64_t synthetic_test = 2000;
  int synthetic_dim = 20;
  double synthetic_noise = 0.1;  // least_squares: noise stddev; logistic: ‖w*‖ (margin scale)

  ShardConfig shard;
  int num_nodes = 1;
  std::uint64_t seed = 1;

  // Fields against each other: model/data compatibility, n ≥ 1, sizes > 0. Messages name the field.
  Status validate() const;
};

struct Problem {
  ProblemConfig config;
  ModelSpec spec;
  std::shared_ptr<const Dataset> train;  // the full training set (shared by every node)
  std::shared_ptr<const Dataset> test;
  // synthetic data with a least_squares / logistic model: the planted (w*, b*) in the model's
  // flat layout; else empty
  std::vector<float> planted;
  std::vector<std::vector<std::int64_t>> shards;  // shards[i]: node i's indices into *train

  // x_0: identical for every node (init_params(spec, mix_seed(seed, 3))).
  std::vector<float> initial_params() const;
  // Node i's batch stream (BatchSampler(shards[i], batch_size, mix_seed(seed, 4), i)).
  BatchSampler sampler(int node, int batch_size) const;
};

Result<Problem> make_problem(const ProblemConfig& config, Env& env = Env::system());

}  // namespace gossip::sgd
