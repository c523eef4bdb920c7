// What one gossipd node runs, whatever its algorithm: its options (NodeOptions), its job (NodeJob:
// the local step, the parameter count, the iterations, x_0, the evaluation sets), where its run
// starts (NodeStart: the checkpoint directory under the start rules and the checkpoint resumed),
// and what the run ended with (NodeResult). The loop itself is the node driver (daemon/driver.h);
// the algorithms are in algorithms/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "config/train_config.h"
#include "daemon/local_step.h"
#include "daemon/node_checkpoints.h"
#include "daemon/prometheus.h"
#include "topology/topology.h"

namespace gossip::daemon {

using config::TrainConfig;

struct NodeOptions {
  int node_id = 0;
  TrainConfig config;            // validated, defaults filled
  std::string checkpoint_dir;    // this node's directory ("" = no checkpoints)
  std::string metrics_path;      // "" none, "-" stdout
  bool append_metrics = false;   // resuming: append to the metrics file
  bool resume = false;           // start from the newest valid checkpoint; none usable: fail
  bool resume_or_start = false;  // as resume, but start from iteration 0 when none is usable
  std::optional<std::uint64_t> resume_at;  // start from the checkpoint of exactly this iteration
  std::string dump_params_dir;             // at the end write <dir>/node_<id>.f32 (raw float32)
  // Where the driver publishes a snapshot after every iteration (--metrics-listen); null: none.
  std::shared_ptr<LiveMetrics> live_metrics;
};

struct NodeResult {
  int exit_code = 0;
  std::string message;
  std::uint64_t iterations_done = 0;  // completed iterations (global count, including resumed)
  double final_test_accuracy = 0;
  double final_test_loss = 0;
};

// Stable hex digest of the fields that determine the computation (not paths, timeouts, device).
std::string config_fingerprint(const TrainConfig& config);
// The 64-bit topology fingerprint announced in Hello (first 16 hex digits of the SHA-256).
std::uint64_t topology_fingerprint64(const topology::Topology& topology);
// The final parameters x as raw little-endian float32 where the user asked for them:
// --dump-params DIR (DIR/node_<id>.f32) and the config's final_params_path ("{node}" replaced by
// the node's id); parent directories created, files written atomically. Non-finite x is never
// written (Aborted, common/divergence.h).
Status write_final_parameters(Env& env, const NodeOptions& options, std::span<const float> x,
                              std::uint64_t iteration);

// Every node i exchanges with at some iteration (union of in- and out-neighbours over a period).
std::vector<int> all_neighbours(const topology::Topology& topology, int node);

// What one node trains (daemon/node_job.h builds it): the local step, the parameter count, how
// many iterations the job has, x_0, and what the model is evaluated on (null: the step cannot
// evaluate, as for an external trainer).
struct NodeJob {
  std::unique_ptr<LocalStep> step;
  std::size_t num_params = 0;
  std::uint64_t total_iterations = 0;
  std::vector<float> initial_params;
  std::shared_ptr<const sgd::Dataset> eval_set;  // every eval_every iterations
  std::shared_ptr<const sgd::Dataset> test_set;  // at the end
};

// Where a node's run starts: its checkpoint directory under the start rules
// (daemon/node_checkpoints.h) and the checkpoint it resumes from (none: iteration 0).
struct NodeStart {
  NodeCheckpoints checkpoints;
  std::optional<Checkpoint> resumed;
};

// Applies the start rules of `options` to `job`. gossipd calls it before any neighbour is
// contacted, so that a run that cannot start is refused at once; on failure `exit_code` says
// which exit code (kExitUsage, kExitCannotResume or kExitError).
// `algorithm_state_size`: the floats of state the algorithm adds to a checkpoint
// (AlgorithmFactory::state_size).
Result<NodeStart> open_node_start(const NodeOptions& options, const topology::Topology& topology,
                                  const NodeJob& job, int* exit_code,
                                  std::size_t algorithm_state_size = 0, Env& env = Env::system());

}  // namespace gossip::daemon
