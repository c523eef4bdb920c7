// The training config (config/train_config.proto) as gossip_sgd configs: the one mapping from what
// a user writes to what the SGD engine runs, used by gossipd (daemon/node.cc, run.cc, launcher.cc)
// and by `gossip-sim --config FILE`, so a simulation runs exactly the problem, shards, batches and
// optimizer of the job it models. Pure functions of a validated config (defaults filled).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "sgd/optimizer.h"
#include "sgd/problem.h"
#include "sgd/round.h"

namespace gossip::config {

// Model, data, shards and seed; num_nodes from the topology.
sgd::ProblemConfig to_problem_config(const TrainConfig& config, int num_nodes);
// Optimizer and learning-rate schedule; total_iterations from total_iterations() (cosine's T).
sgd::OptimizerConfig to_optimizer_config(const TrainConfig& config, std::uint64_t total_iterations);
// Local steps, the outer optimizer, compression and overlap.
sgd::RoundConfig to_round_config(const TrainConfig& config);
// The round settings of `overrides` ("field=value", as config/flags.h's rows for local steps, the
// outer optimizer, compression and overlap give them: gossip-sim's flags) on a training config of
// `algorithm` that holds nothing else: applied, defaults filled and checked as a config file's are
// (the same messages, "command line (local_steps=0): local_steps: must be >= 1 ..."), then mapped
// by to_round_config. InvalidArgument when a value does not parse or validate.
Result<sgd::RoundConfig> round_config_from_overrides(const std::vector<std::string>& overrides,
                                                     pb::TrainConfig::Algorithm algorithm);

// The algorithm and its settings as gossipd announces them in Hello, so that nodes of one job with
// different settings refuse each other naming the field: "" (D-PSGD per iteration) or "allreduce"
// (C-PSGD per iteration) or "push_sum staleness=τ" (PUSH_SUM, per iteration only), else
// "<dpsgd|allreduce> local_steps=H outer=... compression=... choco_step=... overlap=0|1 params=d"
// (the model's parameter count: a compressed message's size no longer tells it).
std::string hello_algorithm(const TrainConfig& config, std::uint64_t num_params);

}  // namespace gossip::config
