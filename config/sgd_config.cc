// Training config -> sgd configs. Enum values the config leaves unspecified were filled by
// fill_defaults; the fallbacks here only keep the switch total.
#include "config/sgd_config.h"

#include <cstdio>

namespace gossip::config {

sgd::ProblemConfig to_problem_config(const TrainConfig& c, int num_nodes) {
  sgd::ProblemConfig p;
  switch (c.model().kind()) {
    case pb::Model::LEAST_SQUARES:
      p.model = sgd::ModelKind::kLeastSquares;
      break;
    case pb::Model::LOGISTIC:
      p.model = sgd::ModelKind::kLogistic;
      break;
    case pb::Model::MLP:
      p.model = sgd::ModelKind::kMlp;
      break;
    default:
      p.model = sgd::ModelKind::kSoftmax;
      break;
  }
  p.hidden.assign(c.model().hidden().begin(), c.model().hidden().end());
  p.l2 = c.model().l2();
  switch (c.data().dataset()) {
    case pb::Data::SYNTHETIC_LEAST_SQUARES:
      p.data = sgd::DataKind::kLeastSquares;
      break;
    case pb::Data::SYNTHETIC_LOGISTIC:
      p.data = sgd::DataKind::kLogistic;
      break;
    default:
      p.data = sgd::DataKind::kFashionMnist;
      break;
  }
  if (!c.data().path().empty()) p.data_dir = c.data().path();
  p.standardize = !c.data().has_standardize() || c.data().standardize();
  if (c.data().num_examples() > 0)
    p.synthetic_train = static_cast<std::int64_t>(c.data().num_examples());
  if (c.data().test_examples() > 0)
    p.synthetic_test = static_cast<std::int64_t>(c.data().test_examples());
  if (c.data().dim() > 0) p.synthetic_dim = static_cast<int>(c.data().dim());
  if (c.data().noise() > 0) p.synthetic_noise = c.data().noise();
  switch (c.shard().scheme()) {
    case pb::Shard::BY_LABEL:
      p.shard.scheme = sgd::ShardScheme::kByLabel;
      break;
    case pb::Shard::DIRICHLET:
      p.shard.scheme = sgd::ShardScheme::kDirichlet;
      break;
    default:
      p.shard.scheme = sgd::ShardScheme::kIid;
      break;
  }
  if (c.shard().dirichlet_alpha() > 0) p.shard.dirichlet_alpha = c.shard().dirichlet_alpha();
  p.num_nodes = num_nodes;
  p.seed = c.seed();
  return p;
}

sgd::OptimizerConfig to_optimizer_config(const TrainConfig& c, std::uint64_t total_iterations) {
  const pb::Optimizer& o = c.optimizer();
  sgd::OptimizerConfig oc;
  switch (o.schedule()) {
    case pb::Optimizer::STEP:
      oc.schedule.kind = sgd::ScheduleKind::kStep;
      break;
    case pb::Optimizer::COSINE:
      oc.schedule.kind = sgd::ScheduleKind::kCosine;
      break;
    default:
      oc.schedule.kind = sgd::ScheduleKind::kConstant;
      break;
  }
  oc.schedule.lr = o.lr();
  oc.schedule.warmup_steps = static_cast<std::int64_t>(o.warmup_iterations());
  if (o.step_size() > 0) oc.schedule.step_size = static_cast<std::int64_t>(o.step_size());
  if (o.step_factor() > 0) oc.schedule.step_factor = o.step_factor();
  oc.schedule.total_steps = static_cast<std::int64_t>(total_iterations);
  oc.schedule.min_lr = o.min_lr();
  bool momentum = o.kind() == pb::Optimizer::MOMENTUM || o.kind() == pb::Optimizer::NESTEROV;
  oc.momentum = momentum ? o.momentum() : 0.0;
  oc.nesterov = o.kind() == pb::Optimizer::NESTEROV;
  oc.weight_decay = o.weight_decay();
  if (o.kind() == pb::Optimizer::ADAMW) {
    oc.kind = sgd::OptimizerKind::kAdamW;
    oc.beta1 = o.beta1();
    oc.beta2 = o.beta2();
    oc.eps = o.eps();
  }
  return oc;
}

sgd::RoundConfig to_round_config(const TrainConfig& c) {
  sgd::RoundConfig r;
  r.local_steps = static_cast<int>(c.local_steps());
  switch (c.outer().kind()) {
    case pb::Outer::SGD:
      r.outer.kind = sgd::OuterKind::kSgd;
      break;
    case pb::Outer::NESTEROV:
      r.outer.kind = sgd::OuterKind::kNesterov;
      break;
    default:
      r.outer.kind = sgd::OuterKind::kNone;
      break;
  }
  if (r.outer.kind != sgd::OuterKind::kNone) {
    r.outer.lr = c.outer().lr();
    r.outer.momentum = c.outer().momentum();
  }
  switch (c.compression().kind()) {
    case pb::Compression::BF16:
      r.compression.kind = sgd::CompressionKind::kBf16;
      break;
    case pb::Compression::INT8:
      r.compression.kind = sgd::CompressionKind::kInt8;
      break;
    default:
      r.compression.kind = sgd::CompressionKind::kNone;
      break;
  }
  r.compression.block_floats = c.compression().block_floats();
  if (c.compression().has_choco_step()) r.choco_step = c.compression().choco_step();
  r.overlap = c.overlap();
  return r;
}

Result<sgd::RoundConfig> round_config_from_overrides(const std::vector<std::string>& overrides,
                                                     pb::TrainConfig::Algorithm algorithm) {
  // The order of load_config_with_overrides: the assignments, then defaults, then validation.
  TrainConfig config;
  config.set_algorithm(algorithm);
  for (const std::string& o : overrides) GOSSIP_RETURN_IF_ERROR(apply_override(config, o));
  fill_defaults(config);
  GOSSIP_RETURN_IF_ERROR(
      validate_train_config(config, "command line", {}, overrides, ConfigUse::kRoundSettings));
  return to_round_config(config);
}

std::string hello_algorithm(const TrainConfig& c, std::uint64_t num_params) {
  const bool allreduce = c.algorithm() == pb::TrainConfig::ALLREDUCE;
  if (c.algorithm() == pb::TrainConfig::PUSH_SUM) {  // per iteration only
    return "push_sum staleness=" + std::to_string(c.staleness());
  }
  const sgd::RoundConfig r = to_round_config(c);
  if (r.per_iteration()) return allreduce ? "allreduce" : "";
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  std::string outer(sgd::kOuterKinds.name(r.outer.kind));
  if (r.outer.kind != sgd::OuterKind::kNone) {
    outer.append("(").append(number(r.outer.lr)).append(",").append(number(r.outer.momentum));
    outer.append(")");
  }
  std::string compression(sgd::kCompressionKinds.name(r.compression.kind));
  if (r.compression.kind == sgd::CompressionKind::kInt8) {
    compression.append("(").append(std::to_string(r.compression.block_floats)).append(")");
  }
  return std::string(allreduce ? "allreduce" : "dpsgd") +
         " local_steps=" + std::to_string(r.local_steps) + " outer=" + outer +
         " compression=" + compression + " choco_step=" + number(allreduce ? 0 : r.choco_step) +
         " overlap=" + (r.overlap ? "1" : "0") + " params=" + std::to_string(num_params);
}

}  // namespace gossip::config
