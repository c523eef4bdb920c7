// The config -> (data, shards, model, x_0) factory shared by gossip-sim and gossipd.
#include "sgd/problem.h"

#include <string>

#include "common/random.h"

namespace gossip::sgd {
namespace {
constexpr std::uint64_t kSaltData = 1, kSaltShards = 2, kSaltInit = 3, kSaltSampler = 4;
}  // namespace

Status ProblemConfig::validate() const {
  if (num_nodes < 1) return invalid_argument("num_nodes: must be >= 1");
  const std::string m(kModelKinds.name(model)), d(kDataKinds.name(data));
  switch (data) {
    case DataKind::kLeastSquares:
      if (model != ModelKind::kLeastSquares) {
        return invalid_argument("model: " + m + " does not fit data " + d +
                                " (regression targets); use model least_squares");
      }
      break;
    case DataKind::kLogistic:
      if (model == ModelKind::kLeastSquares) {
        return invalid_argument("model: least_squares does not fit data logistic (labels)");
      }
      break;
    case DataKind::kFashionMnist:
      if (model == ModelKind::kLeastSquares || model == ModelKind::kLogistic) {
        return invalid_argument("model: " + m +
                                " does not fit data fashion_mnist (10 classes); "
                                "use softmax or mlp");
      }
      break;
  }
  if (data != DataKind::kFashionMnist) {
    if (synthetic_train < num_nodes) {
      return invalid_argument("synthetic_train: must be >= num_nodes");
    }
    if (synthetic_test < 1) return invalid_argument("synthetic_test: must be >= 1");
    if (synthetic_dim < 1) return invalid_argument("synthetic_dim: must be >= 1");
    if (!(synthetic_noise >= 0)) return invalid_argument("synthetic_noise: must be >= 0");
  }
  if (model != ModelKind::kMlp && !hidden.empty()) {
    return invalid_argument("hidden: only model mlp has hidden layers");
  }
  if (model == ModelKind::kMlp && hidden.empty()) {
    return invalid_argument("hidden: model mlp needs at least one hidden layer size");
  }
  return Status::ok();
}

std::vector<float> Problem::initial_params() const {
  return init_params(spec, mix_seed(config.seed, kSaltInit));
}

BatchSampler Problem::sampler(int node, int batch_size) const {
  return BatchSampler(shards.at(node), batch_size, mix_seed(config.seed, kSaltSampler),
                      static_cast<std::uint64_t>(node));
}

namespace {

// Moves rows [begin, end) of `all` into a new data set.
Dataset take_rows(const Dataset& all, std::int64_t begin, std::int64_t end) {
  Dataset d;
  d.num_examples = end - begin;
  d.dim = all.dim;
  d.num_classes = all.num_classes;
  d.features.assign(all.features.begin() + begin * all.dim, all.features.begin() + end * all.dim);
  if (all.is_classification()) {
    d.labels.assign(all.labels.begin() + begin, all.labels.begin() + end);
  } else {
    d.targets.assign(all.targets.begin() + begin, all.targets.begin() + end);
  }
  return d;
}

}  // namespace

Result<Problem> make_problem(const ProblemConfig& config, Env& env) {
  GOSSIP_RETURN_IF_ERROR(config.validate());
  Problem p;
  p.config = config;
  Dataset train, test;
  if (config.data == DataKind::kFashionMnist) {
    GOSSIP_ASSIGN_OR_RETURN(train, load_fashion_mnist(config.data_dir, Split::kTrain, env));
    GOSSIP_ASSIGN_OR_RETURN(test, load_fashion_mnist(config.data_dir, Split::kTest, env));
    if (config.standardize) {
      const Standardizer s = Standardizer::fit(train);
      s.apply(train);
      s.apply(test);
    }
  } else {
    // One draw of train + test examples around one planted optimum, split by rows.
    const std::int64_t total = config.synthetic_train + config.synthetic_test;
    const std::uint64_t seed = mix_seed(config.seed, kSaltData);
    Dataset all =
        config.data == DataKind::kLeastSquares
            ? make_least_squares(total, config.synthetic_dim, config.synthetic_noise, seed,
                                 &p.planted)
            : make_logistic(total, config.synthetic_dim, config.synthetic_noise, seed, &p.planted);
    train = take_rows(all, 0, config.synthetic_train);
    test = take_rows(all, config.synthetic_train, total);
  }

  p.spec.kind = config.model;
  p.spec.input_dim = train.dim;
  p.spec.hidden = config.hidden;
  p.spec.l2 = config.l2;
  p.spec.num_classes = config.model == ModelKind::kLeastSquares ? 0
                       : config.model == ModelKind::kLogistic   ? 2
                                                                : train.num_classes;
  GOSSIP_RETURN_IF_ERROR(p.spec.validate());
  if (config.model != ModelKind::kLogistic && config.model != ModelKind::kLeastSquares) {
    p.planted.clear();  // a planted (w*, b*) is in the layout of a 1-output model only
  }
  GOSSIP_ASSIGN_OR_RETURN(p.shards, all_shards(train, config.shard, config.num_nodes,
                                               mix_seed(config.seed, kSaltShards)));
  p.train = std::make_shared<const Dataset>(std::move(train));
  p.test = std::make_shared<const Dataset>(std::move(test));
  return p;
}

}  // namespace gossip::sgd
