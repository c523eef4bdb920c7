// The job wiring of one node: what it trains (daemon/node.h, NodeJob) built from the training
// config — gossip_sgd's model on this node's shard (make_sgd_job), or an external trainer attached
// over a Unix socket (daemon/attach_step.h). The loop itself does not know which.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "config/train_config.h"
#include "daemon/node.h"
#include "sgd/backend.h"
#include "sgd/dataset.h"
#include "sgd/problem.h"

namespace gossip::daemon {

// The evaluation set of a config: the first eval_examples examples of `test` (all of them when
// eval_examples is 0 or larger than the set).
std::shared_ptr<const sgd::Dataset> evaluation_set(const TrainConfig& config,
                                                   const std::shared_ptr<const sgd::Dataset>& test);

// Node `node` of `num_nodes` training `problem` with SgdStep on `backend` (both borrowed). Every
// node runs the same number of iterations: epochs count passes over the MEAN shard.
Result<NodeJob> make_sgd_job(const TrainConfig& config, const sgd::Problem& problem,
                             sgd::Backend& backend, int node, int num_nodes);

}  // namespace gossip::daemon
