// The algorithms gossipd runs, by the training config's `algorithm` field: the one place that
// maps a config to its AlgorithmFactory (daemon/algorithm.h), so `gossipd run` (daemon/run.cc)
// knows none of them by name.
//
//   DPSGD      algorithms/dpsgd.h: gossip with the topology's neighbours, every iteration; with
//              local steps, an outer optimizer or compression: algorithms/local_gossip.h
//   PUSH_SUM   algorithms/push_sum.h: Stochastic Gradient Push, every iteration (a topology with
//              EXPLICIT weights that are not column-stochastic is refused, naming `weights`)
//   ALLREDUCE  algorithms/allreduce.h: C-PSGD over Gloo (a build with -DGOSSIP_GLOO=OFF refuses it)
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"
#include "config/train_config.h"
#include "sgd/backend.h"
#include "topology/topology.h"

namespace gossip::daemon {
class AlgorithmFactory;
}  // namespace gossip::daemon

namespace gossip::algorithms {

struct FactoryOptions {
  int node = 0;
  bool insecure = false;            // the links are plaintext (--insecure)
  std::size_t num_params = 0;       // the model's (or the attached trainer's) parameter count
  sgd::Backend* backend = nullptr;  // the node's; borrowed for the run
  bool attached = false;            // the local step is an external trainer (docs/attach.md)
  bool update_session = false;      // ... which hands gossipd its update at every step
  std::string checkpoint_dir;       // the node's own ("" none): where an algorithm keeps its logs
};

// The factory for `config`'s algorithm at node `options.node` of `topology` (both borrowed for
// the run; `stop` too). InvalidArgument, naming the field or flag, for a combination this build
// or the algorithm does not support.
Result<std::unique_ptr<daemon::AlgorithmFactory>> make_algorithm_factory(
    const config::TrainConfig& config, const topology::Topology& topology,
    const FactoryOptions& options, const std::atomic<bool>& stop);

}  // namespace gossip::algorithms
