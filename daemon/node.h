// The D-PSGD loop of one node (Lian et al., NeurIPS 2017, Algorithm 1), independent of how
// parameters travel (daemon/exchange.h) — the same code runs in gossipd processes over TCP and in
// threads over an in-process hub in unit tests.
//
// Iteration t at node i:
//   1. post the exchange: send x_t to N_out(i, t), receive x_j^t from N_in(i, t) (the network
//      progresses on the transport's io thread from here on);
//   2. meanwhile, on this thread: batch ← sampler, g ← ∇F_i(x_t; batch) on the backend;
//   3. wait for the neighbours' x_j^t (deadline: timeouts.deadline_ms);
//   4. u ← optimizer direction (momentum, weight decay), then in one fused pass
//      x_{t+1} = Σ_{j ∈ N_in(i,t) ∪ {i}} W_ij(t) x_j^t − γ_t u, the terms in increasing j
//      (the order gossip-sim uses, so the bits agree).
// With no_overlap the exchange is posted after step 2 instead (benchmarks).
//
// Fail-stop: when a neighbour's data does not arrive by the deadline (or its link fails) the node
// writes a checkpoint of the state at the start of iteration t (x_t, optimizer state and sampler
// state untouched by the abandoned iteration), logs the neighbour and returns
// kExitNeighbourFailed. A stop request (SIGTERM) is honoured between iterations and while waiting:
// checkpoint, then kExitStopped. Weights are read from the topology at every iteration
// (W(t) for time-varying topologies), so the fault-tolerance issue can recompute them per
// iteration without changing this loop's structure.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "config/sgd_config.h"
#include "config/train_config.h"
#include "daemon/exchange.h"
#include "daemon/local_step.h"
#include "daemon/membership.h"
#include "daemon/node_checkpoints.h"
#include "sgd/backend.h"
#include "sgd/optimizer.h"
#include "sgd/problem.h"
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
Result<NodeStart> open_node_start(const NodeOptions& options, const topology::Topology& topology,
                                  const NodeJob& job, int* exit_code, Env& env = Env::system());

// Runs the loop of `job` from `start` to the end (or failure / stop); `stop` is set
// asynchronously by a signal handler. `backend` holds the parameter buffers and does the mixing.
NodeResult run_node(const NodeOptions& options, const topology::Topology& topology, NodeJob& job,
                    NodeStart& start, sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env = Env::system());

// open_node_start, then the loop above (a failure to start is reported through the job's step).
NodeResult run_node(const NodeOptions& options, const topology::Topology& topology, NodeJob& job,
                    sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env = Env::system());

// The built-in job: gossip_sgd's model on `problem` (node_job.h), then the loop above.
// `problem` and `backend` are this node's.
NodeResult run_node(const NodeOptions& options, const topology::Topology& topology,
                    const sgd::Problem& problem, sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env = Env::system());

}  // namespace gossip::daemon
