// The simulator: n virtual nodes in one process running C-PSGD or D-PSGD on a real gossip_sgd
// problem and a real gossip_topology mixing matrix, recording the convergence at evaluation
// points. Simulated wall time is not computed here: the run records iterations, and
// sim/cost_model.h turns iterations into seconds afterwards (so one run serves every bandwidth,
// latency and straggler setting of a sweep).
//
// Algorithms (docs/design.md §1):
//   C-PSGD  one model x; every node i draws its batch and computes g_i at x; the optimizer is fed
//           the exact average (1/n) Σ_i g_i (summed in node order in double, rounded once).
//   D-PSGD  (Lian et al., NeurIPS 2017, Algorithm 1) every node i computes g_i at its own x_i^t and
//           its direction u_i^t (per-node momentum), then x_i^{t+1} = Σ_j W_ij x_j^t − γ_t u_i^t
//           ("combine then adapt": the gossip reads x^t only, so it overlaps the gradient).
//           W may vary with t (one-peer exponential graph).
//   push-sum (Stochastic Gradient Push, Assran et al. 2019; topology/push_sum.h) every node i keeps
//           its de-biased z_i (the column of X) and its weight w_i (w^0 = 1): g_i and u_i at z_i^t,
//           then w_i^{t+1} = Σ_j p_ij w_j^t and z_i^{t+1} = Σ_j c_ij z_j^t − (γ_t / w_i^{t+1})
//           u_i^t with P(t) column-stochastic and c_ij = p_ij w_j^t / w_i^{t+1} — gossipd's
//           PUSH_SUM (algorithms/push_sum.h), the same arithmetic (topology::push_sum_mix) and
//           rounding.
//   D-PSGD, adapt-then-combine (Sayed 2014, "diffusion"): x_i^{t+1} = Σ_j W_ij (x_j^t − γ_t u_j^t).
//           Not overlappable, offered for comparison; with W = J and identical starts it is exactly
//           C-PSGD (the test holds them together), whereas combine-then-adapt with W = J evaluates
//           each g_i at x̄^{t−1} − γ u_i^{t−1} rather than at x̄^t and differs from C-PSGD by O(γ²).
//
// Per-node computations are those of gossipd: the same x_0 (Problem::initial_params), batches
// (Problem::sampler(i, batch)), optimizer (sgd::Optimizer, per-node momentum state) and mixing
// rounding (sim/node_state.h: terms in increasing node order).
//
// Blocks (RunConfig::iteration_blocks): CTA D-PSGD on a banded W (every in-neighbour within a small
// circular distance r: ring, torus) runs up to ~60 iterations at a time in a skewed order (node i's
// step of iteration t0 + j at position i + r·j), so each node's data set rows and columns are
// reused while in cache; the same operations on the same values as one iteration at a time.
//
// Threads (RunConfig::threads): the nodes of one iteration are split into contiguous ranges, one
// per thread (OpenMP), each thread with its own model, backend and scratch; an iteration ends when
// every thread is done (ATC: two phases, adapt then mix; blocks: each thread's trapezoid, then the
// triangles around the range boundaries). Results do not depend on the thread count: the
// batch losses, C-PSGD's gradient average and the local accuracies are summed in node order after
// the parallel part. The measured compute time per step is taken on every thread, so with several
// threads it includes their contention for memory.
//
// A Simulator is not thread-safe itself; one Simulator per caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "sgd/backend.h"
#include "sgd/optimizer.h"
#include "sgd/problem.h"
#include "sgd/round.h"
#include "sim/node_state.h"
#include "topology/topology.h"

namespace gossip::sim {

enum class Algorithm { kCpsgd, kDpsgd, kPushSum };
enum class MixOrder { kCombineThenAdapt, kAdaptThenCombine };

std::string_view algorithm_name(Algorithm algorithm);
// "cta" / "combine_then_adapt", "atc" / "adapt_then_combine".
Result<MixOrder> parse_mix_order(std::string_view name);
std::string_view mix_order_name(MixOrder order);

// A node joining or leaving a running job, as gossipd's carry-on policy does it (docs/daemon.md
// "Joins and leaves"): a node with a join event is absent until its iteration (gossipd's
// fault.standby_nodes), a leave takes a node out from its iteration on (SIGTERM's Leave{t_l}).
// While absent a node takes no steps and draws no batches; every present node mixes with its
// present neighbours only, with topology::row_weights (Metropolis–Hastings from the present
// degrees, else the absent neighbours' weight on W_ii), so W(t) stays symmetric and doubly
// stochastic on the present nodes. A joiner at t: x := the mean of its present in-neighbours'
// x^t (summed in double in the topology's in-neighbour order, rounded once; its own x_0 if none is
// present), zero momentum, its sampler from its first batch, then iteration t as usual — what
// gossipd's join does when every neighbour admits it at t.
struct RosterEvent {
  enum Kind { kJoin, kLeave };
  Kind kind = kJoin;
  int node = 0;
  std::int64_t iteration = 0;
};
// "join:NODE@ITER" / "leave:NODE@ITER".
std::string describe(const RosterEvent& e);

struct RunConfig {
  Algorithm algorithm = Algorithm::kDpsgd;
  MixOrder order = MixOrder::kCombineThenAdapt;
  sgd::OptimizerConfig optimizer;
  int batch_size = 32;
  std::int64_t iterations = 1000;
  std::int64_t eval_every = 100;  // also evaluates at iteration 0 and at the last iteration
  // Evaluate on at most this many examples of each split (0: all). Same subset (the first ones)
  // at every point and for every algorithm.
  std::int64_t eval_examples = 0;
  bool eval_local = true;  // mean test accuracy of the n local models (n evaluations per point)
  // Threads that step the nodes (0: one per usable CPU, gossip::usable_cpus(): the affinity mask
  // capped by the cgroup CPU quota). Each takes a contiguous range of nodes with its own model
  // and scratch; every result is the same bits for every thread count (per-node work is
  // independent, and every sum across nodes is taken in node order afterwards).
  int threads = 1;
  // Run CTA D-PSGD on a banded W (ring, torus) in skewed blocks of iterations (Simulator::
  // block_levels()): the same bits, faster when the data set outgrows the cache. false: one
  // iteration at a time (the reference the tests hold the blocks to).
  bool iteration_blocks = true;
  // Local steps, the outer optimizer and compression (sgd/round.h). Anything but one exchange per
  // iteration runs in the RoundSimulator (sim/round_simulator.h), not here.
  sgd::RoundConfig round;
  // Joins and leaves (RosterEvent): per-iteration combine-then-adapt D-PSGD on a topology whose
  // every W(t) is symmetric (the carry-on policy's condition); at most one join and one leave per
  // node, the join first, both at iterations >= 1 (one at or past `iterations` does not happen
  // in this run: a standby node that never joins).
  std::vector<RosterEvent> roster;

  Status validate() const;
};

// One evaluation point of one run.
struct EvalPoint {
  std::int64_t iteration = 0;      // iterations completed
  double train_loss = 0;           // data loss of the averaged model x̄ on the train split
  double test_loss = 0;            // ... on the test split
  double test_accuracy = 0;        // of x̄ (NaN for regression)
  double local_test_accuracy = 0;  // mean over nodes of the local models' accuracy (NaN: regression
                                   // or eval_local off)
  double consensus_distance = 0;   // (1/n) Σ ‖x_i − x̄‖²
  double batch_loss = 0;           // mean mini-batch loss over nodes and the iterations since the
                                   // previous point (NaN at iteration 0)
};

struct RunTrace {
  Algorithm algorithm = Algorithm::kDpsgd;
  std::vector<EvalPoint> points;
  double compute_s_per_step = 0;  // measured mean wall time of one node's gradient + direction
                                  // (D-PSGD: clocked on every 16th iteration from the first)
  double wall_s = 0;              // wall time of the whole run
};

// Called with (iterations done, total) after every iteration, or after every block of iterations
// (Simulator::block_levels()); for progress bars.
using ProgressFn = std::function<void(std::int64_t, std::int64_t)>;

class Simulator {
 public:
  // `topology` is needed for D-PSGD (its n must equal the problem's num_nodes) and ignored for
  // C-PSGD. The problem and topology must outlive the simulator.
  static Result<std::unique_ptr<Simulator>> create(const sgd::Problem& problem,
                                                   const topology::Topology* topology,
                                                   RunConfig config);

  // Runs all iterations from x_0 and returns the evaluation points.
  Result<RunTrace> run(const ProgressFn& progress = {});

  // The node models after run(), d × n: column i is node i (C-PSGD: every column is the one
  // model). A copy without the state's padding rows.
  StateMatrix params() const { return x_.topRows(static_cast<Eigen::Index>(dim_)); }
  int num_nodes() const { return num_nodes_; }
  const RunConfig& config() const { return config_; }
  // Push-sum: every node's weight w_i after run() (empty for the other algorithms).
  const std::vector<float>& push_sum_weights() const { return weights_; }
  // Whether node i takes part in the iteration about to run (after run(): in the last one).
  bool present(int i) const { return present_.empty() || present_[static_cast<std::size_t>(i)]; }
  // Iterations run as one skewed block (1: none): CTA D-PSGD with a banded W (a ring, a torus);
  // the same bits as one iteration at a time, with each node's data reused while in cache.
  int block_levels() const { return block_levels_; }

  // ---- Push-sum replay (sim/push_sum_replay.h), which takes the nodes' iterations in an order of
  // its own instead of run(). start_replay() sets the state run() starts from. replay_direction(i,
  // t, z) is node i's local step of its iteration t at z exactly as push_sum_step takes it (its
  // next batch, its gradient, its optimizer's direction with its own momentum state) and returns
  // the direction u (rows() floats, valid until the next call); node i's iterations must come in
  // the order 0, 1, ..., each once. z: rows() floats, padding rows zero (a rows() × 1
  // StateMatrix, laid out as a state column). learning_rate(t): γ_t as push_sum_step rounds it.
  Status start_replay();
  const float* replay_direction(int i, std::int64_t t, const float* z);
  float learning_rate(std::int64_t t) const;
  std::size_t rows() const { return rows_; }
  // Worker 0's backend (the cpu backend every worker has).
  sgd::Backend& backend() { return *workers_[0].backend; }

 private:
  Simulator() = default;
  // What one thread owns. Worker 0's model also evaluates the averaged model; its backend runs
  // C-PSGD's optimizer step.
  struct Worker {
    std::unique_ptr<sgd::Backend> backend;
    std::unique_ptr<sgd::Model> model;
    StateMatrix u;            // rows_ × 1: the direction of the node being stepped
    std::vector<float> grad;  // dim_
    double compute_s = 0;
    std::int64_t compute_steps = 0;
  };

  // The state of iteration 0: x_0 in every column, w = 1, zero momentum, no batch losses (run()
  // and start_replay()).
  Status reset_state();
  void step(std::int64_t t);
  // One push-sum iteration (see the file comment).
  void push_sum_step(std::int64_t t);
  // Iterations t0 .. t0 + levels − 1 of CTA D-PSGD at once, in a skewed order that keeps each
  // node's data in cache across them (see the .cc); the same bits as `levels` calls of step().
  void step_block(std::int64_t t0, int levels);
  void plan_blocks();  // sets block_levels_ and block_radius_ (create())
  void add_batch_losses();
  // step_block's skewed order over the steps (i', j), j < levels, i' in range(j) = [lo, hi).
  template <typename LevelRange>
  void skewed_steps(Worker& w, std::int64_t t0, int levels, const LevelRange& range);
  // Node i's batch gradient and direction at iteration t, at xi, into w.u; returns the batch loss.
  double node_direction(Worker& w, int i, std::int64_t t, const float* xi);
  // CTA: node_direction at x.col(i), then out.col(i) = Σ_j W_ij x_j − γ_t u_i (mix_node).
  double cta_node(Worker& w, int i, std::int64_t t, const MixingPlan& plan, const StateMatrix& x,
                  StateMatrix& out);
  // fn(w, first, last) for every worker w and its range [first, last) of [0, count) (contiguous,
  // in worker order), in parallel when there are several workers; returns when all are done.
  template <typename Fn>
  void for_ranges(int count, const Fn& fn);
  EvalPoint evaluate(std::int64_t iteration);
  // Joins and leaves (RunConfig::roster) due at t: the present set changes, a joiner takes its
  // present in-neighbours' mean, and the plans are rebuilt on the present subgraph.
  Status apply_roster(std::int64_t t);
  Status build_present_plans();

  const sgd::Problem* problem_ = nullptr;
  const topology::Topology* topology_ = nullptr;
  RunConfig config_;
  int num_nodes_ = 0;
  std::size_t dim_ = 0;
  // Rows of the state matrices, padded_rows(dim_): every column starts on a 64-byte boundary, so
  // no vector load of the mixing or of the gradient spans two cache lines. The padding rows hold
  // zeros and stay zero (mixing forms Σ W_ij·0 − γ·0).
  std::size_t rows_ = 0;
  std::unique_ptr<sgd::Optimizer> optimizer_;
  std::vector<MixingPlan> plans_;  // one per W(t) of the period (on the present nodes)
  std::vector<char> present_;      // per node (empty: no roster, everyone present)
  std::vector<float> weights_;     // push-sum: w_i^t
  std::vector<sgd::BatchSampler> samplers_;
  std::shared_ptr<const sgd::Dataset> eval_train_, eval_test_;
  // The training rows 64-byte aligned (sgd::AlignedRows), for the linear models, which read their
  // batch rows in place; null for the others (they gather).
  std::unique_ptr<const sgd::AlignedRows> train_rows_;
  StateMatrix x_, next_, velocity_;  // rows_ × n (C-PSGD: rows_ × 1 except x_ for params())
  std::vector<Worker> workers_;      // at least one; no more than the nodes
  // Batch losses of the iterations being run (step: n; step_block: levels × n), iteration-major;
  // add_batch_losses() folds them into batch_loss_sum_ in iteration and node order.
  std::vector<double> batch_losses_;
  StateMatrix grads_;  // C-PSGD with several workers: every node's gradient, d × n
  std::vector<double> grad_sum_;
  std::vector<float> grad_;  // C-PSGD: the averaged gradient
  StateMatrix u_;            // C-PSGD: the optimizer's scratch direction, rows_ × 1
  // step_block: iterations per block (1: every iteration by step()) and W's circular bandwidth.
  int block_levels_ = 1;
  int block_radius_ = 0;
  double batch_loss_sum_ = 0;
  std::int64_t batch_loss_count_ = 0;
  double compute_s_ = 0;  // C-PSGD's per-step compute samples (D-PSGD: in the workers)
  std::int64_t compute_steps_ = 0;
};

// What the two simulators (this one and sim/round_simulator.h) check and build alike in create().
// D-PSGD and push-sum need a topology of `num_nodes` nodes (an error names both counts); C-PSGD
// none; push-sum's must pass topology::check_push_sum.
Status check_topology(const topology::Topology* topology, Algorithm algorithm, int num_nodes);
// One batch sampler per node of `problem`; an error names the first node with an empty shard.
Result<std::vector<sgd::BatchSampler>> node_samplers(const sgd::Problem& problem, int batch_size);
// Worker threads for RunConfig::threads `threads` (0: usable_cpus()): from 1 to `num_nodes`.
std::size_t worker_count(int threads, int num_nodes);

// The run loop both simulators share. Evaluates at iteration 0, then, until config.iterations:
// `advance(t)` runs the iterations from t and returns the iteration it reached (> t, at most
// config.iterations); a sparse divergence probe of `probe()` (every 61st entry: a divergence
// spreads to every entry within a few iterations and stays non-finite, so an advance's end sees
// one that arose inside it) stops the run with the divergence error; an evaluation where the
// advance reached or passed a multiple of config.eval_every, or the last iteration; `progress`.
// Returns the trace with its algorithm, points and wall_s (compute_s_per_step is the caller's).
Result<RunTrace> run_loop(const RunConfig& config,
                          const std::function<std::int64_t(std::int64_t)>& advance,
                          const std::function<std::span<const float>()>& probe,
                          const std::function<EvalPoint(std::int64_t)>& evaluate,
                          const ProgressFn& progress);

// An evaluation point of the node models `x` (d × n, column i node i; padding rows allowed): the
// averaged model's train and test loss and test accuracy (`model` evaluates them), the mean of
// `local_accuracy` (one per node; NaN when empty) and the consensus distance. `iteration` and
// `batch_loss` are the caller's to fill.
EvalPoint evaluate_models(const StateMatrix& x, sgd::Model& model, const sgd::Dataset& train,
                          const sgd::Dataset& test, std::span<const double> local_accuracy);

// Writes node i's parameters to DIR/node_<i>.f32 (raw float32, little-endian, d values), creating
// DIR. The format gossipd's exactness test reads.
Status dump_params(const StateMatrix& params, const std::string& dir, Env& env = Env::system());

}  // namespace gossip::sim
