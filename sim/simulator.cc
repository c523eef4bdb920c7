// The simulation loop. Every node's gradient and direction are computed with the real gossip_sgd
// backend (cpu); the n models live in one d×n matrix (sim/node_state.h). D-PSGD makes one pass over
// the nodes per iteration: CTA forms node i's gossip column right after its direction (mix_node),
// ATC adapts in place during the pass and mixes all columns after it (one blocked mix()).
#include "sim/simulator.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <utility>

#include "common/check.h"
#include "common/clock.h"
#include "common/cpus.h"
#include "common/divergence.h"
#include "common/enum_names.h"
#include "sgd/cpu/cpu_backend.h"
#include "sgd/cpu/dense_net.h"
#include "sgd/mean.h"
#include "topology/present_weights.h"
#include "topology/push_sum.h"

namespace gossip::sim {

namespace {
constexpr EnumName<Algorithm> kAlgorithmNames[] = {
    {Algorithm::kCpsgd, "cpsgd"}, {Algorithm::kDpsgd, "dpsgd"}, {Algorithm::kPushSum, "push_sum"}};
constexpr EnumName<MixOrder> kMixOrderNames[] = {
    {MixOrder::kCombineThenAdapt, "cta"},
    {MixOrder::kAdaptThenCombine, "atc"},
    {MixOrder::kCombineThenAdapt, "combine_then_adapt"},  // aliases
    {MixOrder::kAdaptThenCombine, "adapt_then_combine"},
};
}  // namespace

std::string_view algorithm_name(Algorithm algorithm) {
  return enum_name(kAlgorithmNames, algorithm);
}

Result<MixOrder> parse_mix_order(std::string_view name) {
  return parse_enum(kMixOrderNames, name, "mix order");
}

std::string_view mix_order_name(MixOrder order) { return enum_name(kMixOrderNames, order); }

Status RunConfig::validate() const {
  GOSSIP_RETURN_IF_ERROR(optimizer.validate());
  if (batch_size <= 0) return invalid_argument("batch size must be > 0");
  if (iterations < 0) return invalid_argument("iterations must be >= 0");
  if (eval_every <= 0) return invalid_argument("eval-every must be > 0");
  if (eval_examples < 0) return invalid_argument("eval-examples must be >= 0");
  if (algorithm == Algorithm::kPushSum && !round.per_iteration()) {
    return invalid_argument(
        "push_sum communicates every iteration, uncompressed: no local steps, outer optimizer or "
        "compression");
  }
  if (threads < 0)
    return invalid_argument("threads must be >= 0 (0: one per CPU this process may use)");
  if (!roster.empty()) {
    if (algorithm != Algorithm::kDpsgd || order != MixOrder::kCombineThenAdapt ||
        !round.per_iteration()) {
      return invalid_argument(
          "joins and leaves run with per-iteration combine-then-adapt D-PSGD (gossipd's carry-on "
          "policy), not with " +
          std::string(algorithm_name(algorithm)) + (round.per_iteration() ? "" : " in rounds") +
          (order == MixOrder::kCombineThenAdapt ? "" : " adapt-then-combine"));
    }
    std::map<int, std::pair<int, int>> seen;  // node -> (joins, leaves)
    std::map<int, std::int64_t> joined_at;
    for (const RosterEvent& e : roster) {
      if (e.node < 0) return invalid_argument(describe(e) + ": node ids are >= 0");
      if (e.iteration < 1) {
        return invalid_argument(describe(e) +
                                ": the iteration must be >= 1 (a node present "
                                "from iteration 0 needs no join)");
      }
      auto& [joins, leaves] = seen[e.node];
      if (e.kind == RosterEvent::kJoin) {
        if (++joins > 1) return invalid_argument(describe(e) + ": a node joins at most once");
        joined_at[e.node] = e.iteration;
      } else if (++leaves > 1) {
        return invalid_argument(describe(e) + ": a node leaves at most once");
      }
    }
    for (const RosterEvent& e : roster) {
      auto j = joined_at.find(e.node);
      if (e.kind == RosterEvent::kLeave && j != joined_at.end() && e.iteration <= j->second) {
        return invalid_argument(describe(e) + ": it leaves before it joins (join at " +
                                std::to_string(j->second) + ")");
      }
    }
  }
  return Status::ok();
}

std::string describe(const RosterEvent& e) {
  return std::string(e.kind == RosterEvent::kJoin ? "join:" : "leave:") + std::to_string(e.node) +
         "@" + std::to_string(e.iteration);
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// D-PSGD clocks its per-node compute on every kComputeTimingStride-th iteration (from t = 0).
constexpr std::int64_t kComputeTimingStride = 16;

// step_block: the bytes a block's nodes may occupy (a share of a last-level cache; on the 32 MB L3
// of the development VM 4 and 8 MB ran alike, 1 MB 1.5x slower at n = 1024, 16 MB a little
// slower: bench/sim_bench, 2026-11-23), and the most iterations in one block.
constexpr double kBlockBudgetBytes = 8.0 * 1024 * 1024;
constexpr int kMaxBlockLevels = 64;

// C-PSGD on several workers: the most memory for every node's gradient at once.
constexpr double kMaxGradientBytes = 1024.0 * 1024 * 1024;

}  // namespace

Result<std::unique_ptr<Simulator>> Simulator::create(const sgd::Problem& problem,
                                                     const topology::Topology* topology,
                                                     RunConfig config) {
  GOSSIP_RETURN_IF_ERROR(config.validate());
  if (!config.round.per_iteration()) {
    return invalid_argument(
        "local steps, an outer optimizer or compression run in the round "
        "simulator (sim/round_simulator.h)");
  }
  std::unique_ptr<Simulator> s(new Simulator());
  s->problem_ = &problem;
  s->config_ = config;
  s->num_nodes_ = problem.config.num_nodes;
  s->dim_ = problem.spec.num_params();
  s->rows_ = static_cast<std::size_t>(padded_rows(static_cast<Eigen::Index>(s->dim_)));
  if (static_cast<int>(problem.shards.size()) != s->num_nodes_) {
    return invalid_argument("problem has " + std::to_string(problem.shards.size()) +
                            " shards for " + std::to_string(s->num_nodes_) + " nodes");
  }
  GOSSIP_RETURN_IF_ERROR(check_topology(topology, config.algorithm, s->num_nodes_));
  if (config.algorithm == Algorithm::kPushSum) s->topology_ = topology;
  if (config.algorithm == Algorithm::kDpsgd) {
    s->topology_ = topology;
    for (int p = 0; p < topology->period(); ++p) {
      GOSSIP_ASSIGN_OR_RETURN(auto plan, MixingPlan::from_matrix(topology->mixing_matrix(p)));
      s->plans_.push_back(std::move(plan));
    }
  }
  if (!config.roster.empty()) {
    for (const RosterEvent& e : config.roster) {
      if (e.node >= s->num_nodes_) {
        return invalid_argument(describe(e) + ": the topology has nodes 0.." +
                                std::to_string(s->num_nodes_ - 1));
      }
    }
    if (topology->is_directed() || !topology::mixing_is_symmetric(*topology)) {
      return invalid_argument(
          "joins and leaves need a topology whose every W(t) is symmetric (an undirected graph "
          "with symmetric weights), as gossipd's carry-on policy does; " +
          topology->name() + " is not");
    }
    s->config_.iteration_blocks = false;  // the present set changes between iterations
  }
  // One-thread backends: the simulator's parallelism is across nodes, and a one-thread backend
  // keeps the per-step compute time it measures comparable with one real node's.
  s->workers_.resize(worker_count(config.threads, s->num_nodes_));
  for (Worker& w : s->workers_) {
    GOSSIP_ASSIGN_OR_RETURN(w.backend, sgd::make_backend(sgd::Device::kCpu, 1));
    GOSSIP_ASSIGN_OR_RETURN(w.model, w.backend->make_model(problem.spec));
  }
  s->optimizer_ = std::make_unique<sgd::Optimizer>(config.optimizer, s->dim_);
  GOSSIP_ASSIGN_OR_RETURN(s->samplers_, node_samplers(problem, config.batch_size));
  if (sgd::cpu::is_linear(problem.spec)) {
    s->train_rows_ = std::make_unique<const sgd::AlignedRows>(*problem.train);
  }
  s->plan_blocks();
  s->eval_train_ = sgd::first_examples(problem.train, config.eval_examples);
  s->eval_test_ = sgd::first_examples(problem.test, config.eval_examples);
  return s;
}

void Simulator::plan_blocks() {
  block_levels_ = 1;
  block_radius_ = 0;
  // Blocks of iterations (step_block) for CTA D-PSGD, on any number of workers, with one W whose
  // in-neighbours all lie within a circular distance r that is small against n: a ring (r = 1), a
  // torus (r = its row length), any circulant band.
  if (!config_.iteration_blocks || config_.algorithm != Algorithm::kDpsgd ||
      config_.order != MixOrder::kCombineThenAdapt || plans_.size() != 1) {
    return;
  }
  const int n = num_nodes_;
  const MixingPlan& plan = plans_[0];
  int r = 0;
  for (int i = 0; i < n; ++i) {
    for (int e = plan.row_begin()[i]; e < plan.row_begin()[i + 1]; ++e) {
      const int d = std::abs(plan.column()[e] - i);
      r = std::max(r, std::min(d, n - d));
    }
  }
  // The bytes a node's step touches again on its next level: its shard's rows (the model reads
  // its batch from them) and its state columns (x, the next x, the velocity).
  const sgd::Dataset& train = *problem_->train;
  const double row_bytes =
      4.0 * static_cast<double>(train_rows_ ? train_rows_->stride() : train.dim);
  const double shard_rows = static_cast<double>(train.num_examples) / n;
  const double node_bytes = shard_rows * row_bytes + 3.0 * 4.0 * static_cast<double>(rows_);
  // A block's working set is about r·levels nodes' bytes.
  double levels = std::floor(kBlockBudgetBytes / (std::max(r, 1) * node_bytes));
  const int workers = static_cast<int>(workers_.size());
  if (workers > 1) {
    // step_block's phase-2 triangles reach r·(levels − 1) + r into each range from its left end
    // and must stay apart from the next: ranges longer than 2r·levels + r.
    const int shortest = n / workers;
    levels = std::min(levels, std::floor((shortest - r - 1) / (2.0 * std::max(r, 1))));
  }
  if (r == 0 || 2 * r >= n || levels < 2) return;
  block_radius_ = r;
  block_levels_ = static_cast<int>(std::min(levels, static_cast<double>(kMaxBlockLevels)));
}

Status Simulator::reset_state() {
  const int n = num_nodes_;
  const auto d = static_cast<Eigen::Index>(rows_);  // padded: see rows_
  const std::vector<float> x0 = problem_->initial_params();
  GOSSIP_CHECK_EQ(x0.size(), dim_);
  const bool cpsgd = config_.algorithm == Algorithm::kCpsgd;
  const Eigen::Index cols = cpsgd ? 1 : n;
  x_ = StateMatrix::Zero(d, cols);
  for (Eigen::Index i = 0; i < cols; ++i) {
    std::memcpy(x_.col(i).data(), x0.data(), dim_ * sizeof(float));
  }
  next_ = StateMatrix::Zero(d, cols);
  u_ = StateMatrix::Zero(cpsgd ? d : 0, 1);  // its padding rows stay zero
  velocity_ =
      StateMatrix::Zero(d * static_cast<Eigen::Index>(optimizer_->state_size() / dim_), cols);
  grad_.assign(cpsgd ? dim_ : 0, 0.0f);
  weights_.assign(config_.algorithm == Algorithm::kPushSum ? n : 0, 1.0f);
  grad_sum_.assign(cpsgd ? dim_ : 0, 0.0);
  // C-PSGD on several workers keeps every node's gradient (summed in node order afterwards), up to
  // kMaxGradientBytes; beyond that the gradients run on one worker, streamed into the sum.
  const bool keep_grads =
      cpsgd && workers_.size() > 1 && 4.0 * static_cast<double>(dim_) * n <= kMaxGradientBytes;
  grads_ = StateMatrix::Zero(keep_grads ? static_cast<Eigen::Index>(dim_) : 0, keep_grads ? n : 0);
  for (Worker& w : workers_) {
    w.u = StateMatrix::Zero(cpsgd ? 0 : d, 1);  // one direction at a time; padding rows stay zero
    w.grad.assign(dim_, 0.0f);
    w.compute_s = 0;
    w.compute_steps = 0;
  }
  batch_loss_sum_ = 0;
  batch_loss_count_ = 0;
  compute_s_ = 0;
  compute_steps_ = 0;
  present_.clear();
  if (!config_.roster.empty()) {
    present_.assign(static_cast<std::size_t>(n), 1);
    for (const RosterEvent& e : config_.roster) {
      if (e.kind == RosterEvent::kJoin) present_[static_cast<std::size_t>(e.node)] = 0;
    }
    GOSSIP_RETURN_IF_ERROR(build_present_plans());
  }
  return Status::ok();
}

Status Simulator::start_replay() {
  if (config_.algorithm != Algorithm::kPushSum) {
    return invalid_argument("a replay runs push-sum, not " +
                            std::string(algorithm_name(config_.algorithm)));
  }
  return reset_state();
}

const float* Simulator::replay_direction(int i, std::int64_t t, const float* z) {
  GOSSIP_CHECK(i >= 0 && i < num_nodes_) << "node " << i;
  Worker& w = workers_[0];
  node_direction(w, i, t, z);
  return w.u.data();
}

float Simulator::learning_rate(std::int64_t t) const {
  return static_cast<float>(optimizer_->learning_rate(t));
}

Result<RunTrace> Simulator::run(const ProgressFn& progress) {
  GOSSIP_RETURN_IF_ERROR(reset_state());
  const bool cpsgd = config_.algorithm == Algorithm::kCpsgd;
  const int n = num_nodes_;
  Status roster_status = Status::ok();

  Result<RunTrace> trace = run_loop(
      config_,
      [&](std::int64_t t) {
        // A block of levels never crosses an evaluation point.
        const std::int64_t next_eval =
            std::min(config_.iterations, (t / config_.eval_every + 1) * config_.eval_every);
        const int levels = static_cast<int>(std::min<std::int64_t>(block_levels_, next_eval - t));
        if (config_.algorithm == Algorithm::kPushSum) {
          push_sum_step(t);
          return t + 1;
        }
        if (!present_.empty()) {
          if (Status st = apply_roster(t); !st.is_ok() && roster_status.is_ok()) {
            roster_status = st;
          }
        }
        if (levels > 1) {
          step_block(t, levels);
        } else {
          step(t);
        }
        return t + levels;
      },
      [&] { return std::span<const float>(x_.data(), static_cast<std::size_t>(x_.size())); },
      [&](std::int64_t t) { return evaluate(t); }, progress);
  if (!trace.is_ok()) return trace;
  GOSSIP_RETURN_IF_ERROR(roster_status);
  if (cpsgd) {
    // Every node holds the one model: make params() read like D-PSGD's.
    const StateMatrix one = x_;
    x_ = one.replicate(1, n);
  }
  for (const Worker& w : workers_) {
    compute_s_ += w.compute_s;
    compute_steps_ += w.compute_steps;
  }
  trace->compute_s_per_step = compute_steps_ > 0 ? compute_s_ / compute_steps_ : 0;
  return trace;
}

Result<RunTrace> run_loop(const RunConfig& config,
                          const std::function<std::int64_t(std::int64_t)>& advance,
                          const std::function<std::span<const float>()>& probe,
                          const std::function<EvalPoint(std::int64_t)>& evaluate,
                          const ProgressFn& progress) {
  RunTrace trace;
  trace.algorithm = config.algorithm;
  Stopwatch wall;
  trace.points.push_back(evaluate(0));
  const std::int64_t total = config.iterations;
  for (std::int64_t t0 = 0; t0 < total;) {
    const std::int64_t t1 = advance(t0);
    const std::span<const float> x = probe();
    for (std::size_t i = 0; i < x.size(); i += 61) {
      if (!std::isfinite(x[i])) return diverged(t1, "the parameters are not finite (NaN or Inf)");
    }
    if (t1 / config.eval_every != t0 / config.eval_every || t1 == total) {
      trace.points.push_back(evaluate(t1));
    }
    if (progress) progress(t1, total);
    t0 = t1;
  }
  trace.wall_s = wall.elapsed_seconds();
  return trace;
}

template <typename Fn>
void Simulator::for_ranges(int count, const Fn& fn) {
  const int workers = static_cast<int>(workers_.size());
  const auto range = [&](int w) {
    fn(w, static_cast<int>(std::int64_t{count} * w / workers),
       static_cast<int>(std::int64_t{count} * (w + 1) / workers));
  };
  if (workers == 1) {
    range(0);
    return;
  }
#pragma omp parallel num_threads(workers)
  {
    // OpenMP may start fewer threads than asked (OMP_THREAD_LIMIT); then a thread takes several
    // workers, one after the other, and each worker is still used by one thread only.
    for (int w = omp_get_thread_num(); w < workers; w += omp_get_num_threads()) range(w);
  }
}

double Simulator::node_direction(Worker& w, int i, std::int64_t t, const float* xi) {
  const bool timed = t % kComputeTimingStride == 0;
  const Clock& clock = Clock::system();
  const std::int64_t start_ns = timed ? clock.monotonic_ns() : 0;
  const double loss = w.model->loss_and_grad_rows(xi, *problem_->train, train_rows_.get(),
                                                  samplers_[i].next(), w.grad.data());
  optimizer_->direction(*w.backend, t, xi, w.grad.data(),
                        velocity_.size() > 0 ? velocity_.col(i).data() : nullptr, w.u.data());
  if (timed) {
    w.compute_s += 1e-9 * static_cast<double>(clock.monotonic_ns() - start_ns);
    ++w.compute_steps;
  }
  return loss;
}

double Simulator::cta_node(Worker& w, int i, std::int64_t t, const MixingPlan& plan,
                           const StateMatrix& x, StateMatrix& out) {
  const double loss = node_direction(w, i, t, x.col(i).data());
  const auto gamma = static_cast<float>(optimizer_->learning_rate(t));
  mix_node(plan, x, i, gamma, w.u.data(), out.col(i).data());
  return loss;
}

template <typename LevelRange>
void Simulator::skewed_steps(Worker& w, std::int64_t t0, int levels, const LevelRange& range) {
  const int n = num_nodes_;
  const std::int64_t r = block_radius_;
  const MixingPlan& plan = plans_[0];
  StateMatrix* buf[2] = {&x_, &next_};
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  for (int j = 0; j < levels; ++j) {
    const auto [lo, hi] = range(j);
    if (lo < hi) {
      first = std::min(first, lo + r * j);
      last = std::max(last, hi + r * j);
    }
  }
  for (std::int64_t p = first; p < last; ++p) {
    for (int j = 0; j < levels; ++j) {
      const std::int64_t ip = p - r * j;
      const auto [lo, hi] = range(j);
      if (ip < lo || ip >= hi) continue;
      const int i = static_cast<int>(((ip % n) + n) % n);
      batch_losses_[static_cast<std::size_t>(j) * n + i] =
          cta_node(w, i, t0 + j, plan, *buf[j & 1], *buf[(j + 1) & 1]);
    }
  }
}

void Simulator::step_block(std::int64_t t0, int levels) {
  // Iterations t0 .. t0 + levels − 1 ("levels") of CTA D-PSGD with a banded W (every
  // in-neighbour within circular distance r = block_radius_). x^{t0+j} lives in buf[j % 2] (x_,
  // next_); node i's step on level j reads x^{t0+j} of nodes i − r .. i + r and writes
  // x_i^{t0+j+1} over x_i^{t0+j−1}.
  //
  // skewed_steps runs, for each level j, the nodes of an interval [lo_j, hi_j) (node i' mod n),
  // step (i', j) at position p = i' + r·j, positions in increasing order and, within a position,
  // levels in increasing order. A step then runs after the neighbours' level j − 1 steps it reads
  // (positions p − 2r .. p, the one at p on a lower level) and before their level j + 1 steps,
  // which overwrite what it reads (positions ≥ p, the one at p on a higher level); and the
  // neighbours' level j − 1 steps that read the x_i^{t0+j−1} it overwrites sit at positions ≤ p.
  // Steps outside the intervals must be done before (what they produce) or after (what they
  // overwrite) as the phases below arrange.
  //
  // One worker: level j is [r·j, n + r·j), all n nodes with the ring wrapped (a parallelogram).
  // Several: worker w owns [a_w, a_{w+1}); phase 1 runs on every worker the trapezoid
  // [a_w + r·j, a_{w+1} − r·j) (nothing in it reads outside the worker's own range), phase 2 the
  // triangle [a_w − r·j, a_w + r·j) around its left boundary (it reads phase 1's results on both
  // sides, and nothing phase 1 still needs); plan_blocks keeps every range longer than
  // 2r·levels + r so the triangles are apart. Either way: the same operations on the same values
  // as `levels` calls of step(), so the same bits (simulator_test holds them together). What it
  // buys: a node's steps on consecutive levels are r positions apart, so its shard of the data set
  // and its columns are used `levels` times while they are in cache instead of once per pass over
  // all n nodes.
  const int n = num_nodes_;
  const std::int64_t r = block_radius_;
  const int workers = static_cast<int>(workers_.size());
  batch_losses_.assign(static_cast<std::size_t>(levels) * n, 0.0);
  using Interval = std::pair<std::int64_t, std::int64_t>;
  if (workers == 1) {
    skewed_steps(workers_[0], t0, levels, [&](int j) { return Interval{r * j, n + r * j}; });
  } else {
    const auto start = [&](int w) { return std::int64_t{n} * w / workers; };
    for_ranges(workers, [&](int w, int, int) {
      skewed_steps(workers_[w], t0, levels, [&](int j) {
        return Interval{start(w) + r * j, start(w + 1) - r * j};
      });
    });
    for_ranges(workers, [&](int w, int, int) {
      skewed_steps(workers_[w], t0, levels, [&](int j) {
        return Interval{start(w) - r * j, start(w) + r * j};
      });
    });
  }
  add_batch_losses();
  if (levels & 1) x_.swap(next_);
}

void Simulator::step(std::int64_t t) {
  const int n = num_nodes_;
  batch_losses_.assign(static_cast<std::size_t>(n), 0.0);
  const bool momentum = velocity_.size() > 0;
  const auto gamma = static_cast<float>(optimizer_->learning_rate(t));
  const sgd::Dataset& train = *problem_->train;
  const Clock& clock = Clock::system();
  if (config_.algorithm == Algorithm::kCpsgd) {
    // Every node's gradient at the one model x; their average summed in node order in double
    // (one worker: streamed into grad_sum_; several: gradients kept in grads_ and summed per
    // element in the same order afterwards, so the same bits).
    const std::int64_t start_ns = clock.monotonic_ns();
    const float* x = x_.data();
    if (grads_.size() == 0) {
      Worker& w = workers_[0];
      std::fill(grad_sum_.begin(), grad_sum_.end(), 0.0);
      for (int i = 0; i < n; ++i) {
        batch_losses_[i] = w.model->loss_and_grad_rows(x, train, train_rows_.get(),
                                                       samplers_[i].next(), w.grad.data());
        for (std::size_t k = 0; k < dim_; ++k) grad_sum_[k] += w.grad[k];
      }
      for (std::size_t k = 0; k < dim_; ++k) grad_[k] = static_cast<float>(grad_sum_[k] / n);
    } else {
      for_ranges(n, [&](int w, int first, int last) {
        Worker& wk = workers_[w];
        for (int i = first; i < last; ++i) {
          batch_losses_[i] = wk.model->loss_and_grad_rows(x, train, train_rows_.get(),
                                                          samplers_[i].next(), wk.grad.data());
          std::memcpy(grads_.col(i).data(), wk.grad.data(), dim_ * sizeof(float));
        }
      });
      for_ranges(static_cast<int>(dim_), [&](int, int first, int last) {
        double* sum = grad_sum_.data();
        for (int k = first; k < last; ++k) sum[k] = 0;
        for (int i = 0; i < n; ++i) {
          const float* g = grads_.col(i).data();
          for (int k = first; k < last; ++k) sum[k] += g[k];
        }
        for (int k = first; k < last; ++k) grad_[k] = static_cast<float>(sum[k] / n);
      });
    }
    optimizer_->step(*workers_[0].backend, t, x_.data(), grad_.data(),
                     momentum ? velocity_.data() : nullptr, u_.data());
    compute_s_ += 1e-9 * static_cast<double>(clock.monotonic_ns() - start_ns) *
                  static_cast<double>(grads_.size() == 0 ? 1 : workers_.size()) / n;
    compute_steps_ += 1;
  } else {
    // D-PSGD, one pass over the nodes: node i's gradient and direction at its own x_i^t, then at
    // once (while u_i and x_i are in L1) its share of the gossip: CTA forms next_i = Σ_j W_ij x_j^t
    // − γ u_i (mix_node: column i of mix(), the same bits; it reads x^t only, which no node
    // overwrites before the swap); ATC adapts x_i ← x_i − γ u_i in place (no other node's
    // gradient reads x_i) and mixes after the pass. Each worker's u is one column, reused by its
    // nodes.
    // No software prefetch of the batch rows: prefetching node i + 1's rows (all 64 lines of each
    // of its 8 rows, one node ahead) while node i computes measured 10-30% slower than none, and
    // prefetching only the first 2 or 8 lines of each row no different from none
    // (bench/sim_bench, n = 64 and 1024, 2026-11-23).
    // The compute time (batch draw, gradient, direction) is clocked per node on every
    // kComputeTimingStride-th iteration only: two clock reads per node cost a few percent of a
    // node-iteration here.
    const MixingPlan& plan =
        plans_[static_cast<std::size_t>(t % static_cast<std::int64_t>(plans_.size()))];
    const bool cta = config_.order == MixOrder::kCombineThenAdapt;
    for_ranges(n, [&](int wi, int first, int last) {
      Worker& w = workers_[wi];
      for (int i = first; i < last; ++i) {
        if (!present(i)) {  // absent (not joined yet, or left): its x is kept as it is
          next_.col(i) = x_.col(i);
          continue;
        }
        if (cta) {
          batch_losses_[i] = cta_node(w, i, t, plan, x_, next_);
        } else {
          batch_losses_[i] = node_direction(w, i, t, x_.col(i).data());
          // Adapt locally: x_i ← fma(−γ, u_i, 1·x_i), Backend::mix's rounding (the weight 1 is
          // exact), on the cpu kernels of the active instruction-set level.
          float* xi = x_.col(i).data();
          const sgd::MixTerm self{1.0f, xi};
          sgd::cpu::mix(xi, {&self, 1}, gamma, w.u.data(), dim_);
        }
      }
    });
    if (!cta) {
      if (workers_.size() == 1) {
        mix(plan, x_, 0.0f, nullptr, next_);
      } else {
        // Column by column: mix_node gives mix()'s bits.
        for_ranges(n, [&](int, int first, int last) {
          for (int i = first; i < last; ++i)
            mix_node(plan, x_, i, 0.0f, nullptr, next_.col(i).data());
        });
      }
    }
    x_.swap(next_);
  }
  add_batch_losses();
}

void Simulator::push_sum_step(std::int64_t t) {
  // Every node's combination depends on the weights w^t only, so all are formed first; then one
  // pass as CTA D-PSGD's, node i's row of the combination C(t) and its own step size
  // fl(γ_t / w_i^{t+1}) in place of W(t) and γ_t.
  const int n = num_nodes_;
  std::vector<topology::PushSumMix> mixes;
  std::vector<Eigen::Triplet<double>> entries;
  std::vector<float> w;
  for (int i = 0; i < n; ++i) {
    const std::vector<std::pair<int, double>> row = topology::push_sum_row(*topology_, i, t);
    w.clear();
    for (const auto& [j, p] : row) w.push_back(weights_[static_cast<std::size_t>(j)]);
    mixes.push_back(topology::push_sum_mix(i, row, w));
    entries.emplace_back(i, i, mixes.back().self);
    for (const auto& [j, c] : mixes.back().neighbours) entries.emplace_back(i, j, c);
  }
  Eigen::SparseMatrix<double> c(n, n);
  c.setFromTriplets(entries.begin(), entries.end());
  Result<MixingPlan> made = MixingPlan::from_matrix(c);
  GOSSIP_CHECK(made.is_ok()) << made.status().to_string();  // finite, nonnegative by construction
  const MixingPlan& plan = *made;
  const auto gamma = static_cast<float>(optimizer_->learning_rate(t));
  batch_losses_.assign(static_cast<std::size_t>(n), 0.0);
  for_ranges(n, [&](int wi, int first, int last) {
    Worker& wk = workers_[wi];
    for (int i = first; i < last; ++i) {
      batch_losses_[i] = node_direction(wk, i, t, x_.col(i).data());
      mix_node(plan, x_, i, mixes[i].scaled_gamma(gamma), wk.u.data(), next_.col(i).data());
    }
  });
  for (int i = 0; i < n; ++i) weights_[static_cast<std::size_t>(i)] = mixes[i].weight;
  x_.swap(next_);
  add_batch_losses();
}

void Simulator::add_batch_losses() {
  // In iteration and node order, whatever the workers and blocks: the same sum every time.
  if (!present_.empty()) {  // step() only: one iteration, the present nodes' losses
    for (std::size_t i = 0; i < batch_losses_.size(); ++i) {
      if (!present_[i]) continue;
      batch_loss_sum_ += batch_losses_[i];
      ++batch_loss_count_;
    }
    return;
  }
  for (const double loss : batch_losses_) batch_loss_sum_ += loss;
  batch_loss_count_ += static_cast<std::int64_t>(batch_losses_.size());
}

Status Simulator::build_present_plans() {
  const int n = num_nodes_;
  plans_.clear();
  for (int p = 0; p < topology_->period(); ++p) {
    // Planned degrees on the present subgraph: d_i(p) = present in-neighbours of i.
    std::vector<std::uint32_t> degree(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      if (!present(i)) continue;
      for (const topology::Neighbor& nb : topology_->in_neighbors(i, p)) {
        if (present(nb.node)) ++degree[static_cast<std::size_t>(i)];
      }
    }
    std::vector<Eigen::Triplet<double>> entries;
    for (int i = 0; i < n; ++i) {
      if (!present(i)) {
        entries.emplace_back(i, i, 1.0);
        continue;
      }
      std::map<int, std::uint32_t> used;
      for (const topology::Neighbor& nb : topology_->in_neighbors(i, p)) {
        if (present(nb.node)) used[nb.node] = degree[static_cast<std::size_t>(nb.node)];
      }
      const topology::RowWeights w =
          topology::row_weights(*topology_, i, p, topology::uses_metropolis_hastings(*topology_, i),
                                degree[static_cast<std::size_t>(i)], used);
      for (const auto& [j, v] : w.row(i)) entries.emplace_back(i, j, v);
    }
    Eigen::SparseMatrix<double> w(n, n);
    w.setFromTriplets(entries.begin(), entries.end());
    GOSSIP_ASSIGN_OR_RETURN(auto plan, MixingPlan::from_matrix(w));
    plans_.push_back(std::move(plan));
  }
  return Status::ok();
}

Status Simulator::apply_roster(std::int64_t t) {
  bool changed = false;
  for (const RosterEvent& e : config_.roster) {  // leaves first: a joiner averages who stays
    if (e.iteration != t || e.kind != RosterEvent::kLeave) continue;
    present_[static_cast<std::size_t>(e.node)] = 0;
    changed = true;
  }
  for (const RosterEvent& e : config_.roster) {
    if (e.iteration != t || e.kind != RosterEvent::kJoin) continue;
    const int j = e.node;
    std::vector<const float*> present_in;
    for (const topology::Neighbor& nb : topology_->in_neighbors(j, t)) {
      if (present(nb.node)) present_in.push_back(x_.col(nb.node).data());
    }
    if (!present_in.empty()) sgd::mean_rounded_once(present_in, dim_, x_.col(j).data());
    if (velocity_.size() > 0) velocity_.col(j).setZero();
    present_[static_cast<std::size_t>(j)] = 1;
    changed = true;
  }
  return changed ? build_present_plans() : Status::ok();
}

Status check_topology(const topology::Topology* topology, Algorithm algorithm, int num_nodes) {
  if (algorithm == Algorithm::kCpsgd) return Status::ok();
  if (topology == nullptr) return invalid_argument("D-PSGD and push-sum need a topology");
  if (topology->num_nodes() != num_nodes) {
    return invalid_argument("topology '" + topology->name() + "' has " +
                            std::to_string(topology->num_nodes()) + " nodes but the problem is " +
                            "sharded over " + std::to_string(num_nodes));
  }
  if (algorithm == Algorithm::kPushSum) return topology::check_push_sum(*topology);
  return Status::ok();
}

Result<std::vector<sgd::BatchSampler>> node_samplers(const sgd::Problem& problem, int batch_size) {
  std::vector<sgd::BatchSampler> samplers;
  for (int i = 0; i < problem.config.num_nodes; ++i) {
    if (problem.shards[i].empty()) {
      return invalid_argument("node " + std::to_string(i) + " has an empty data shard");
    }
    samplers.push_back(problem.sampler(i, batch_size));
  }
  return samplers;
}

std::size_t worker_count(int threads, int num_nodes) {
  const int wanted = threads > 0 ? threads : usable_cpus();
  return static_cast<std::size_t>(std::clamp(wanted, 1, std::max(1, num_nodes)));
}

EvalPoint evaluate_models(const StateMatrix& x, sgd::Model& model, const sgd::Dataset& train,
                          const sgd::Dataset& test, std::span<const double> local_accuracy) {
  EvalPoint p;
  const Eigen::VectorXd mean_d = node_average(x);
  const std::vector<float> mean(mean_d.data(), mean_d.data() + mean_d.size());
  const sgd::EvalResult on_train = model.evaluate(mean.data(), train);
  const sgd::EvalResult on_test = model.evaluate(mean.data(), test);
  p.train_loss = on_train.loss;
  p.test_loss = on_test.loss;
  p.test_accuracy = test.is_classification() ? on_test.accuracy : kNaN;
  p.local_test_accuracy = kNaN;
  if (!local_accuracy.empty()) {
    double sum = 0;
    for (const double a : local_accuracy) sum += a;  // in node order
    p.local_test_accuracy = sum / static_cast<double>(local_accuracy.size());
  }
  p.consensus_distance = consensus_distance(x);
  return p;
}

EvalPoint Simulator::evaluate(std::int64_t iteration) {
  // With joins and leaves, the nodes present at the iteration that ran last.
  StateMatrix here;
  if (!present_.empty()) {
    std::vector<Eigen::Index> cols;
    for (int i = 0; i < num_nodes_; ++i) {
      if (present(i)) cols.push_back(i);
    }
    here.resize(x_.rows(), static_cast<Eigen::Index>(cols.size()));
    for (std::size_t k = 0; k < cols.size(); ++k) {
      here.col(static_cast<Eigen::Index>(k)) = x_.col(cols[k]);
    }
  }
  const StateMatrix& x = present_.empty() ? x_ : here;
  std::vector<double> accuracy;
  if (problem_->test->is_classification() && config_.eval_local && x.cols() > 1) {
    const int n = static_cast<int>(x.cols());
    accuracy.resize(static_cast<std::size_t>(n));
    for_ranges(n, [&](int w, int first, int last) {
      for (int i = first; i < last; ++i) {
        accuracy[i] = workers_[w].model->evaluate(x.col(i).data(), *eval_test_).accuracy;
      }
    });
  }
  EvalPoint p = evaluate_models(x, *workers_[0].model, *eval_train_, *eval_test_, accuracy);
  p.iteration = iteration;
  // C-PSGD: the local models are the one model.
  if (problem_->test->is_classification() && config_.eval_local && x.cols() == 1) {
    p.local_test_accuracy = p.test_accuracy;
  }
  p.batch_loss = batch_loss_count_ > 0 ? batch_loss_sum_ / batch_loss_count_ : kNaN;
  batch_loss_sum_ = 0;
  batch_loss_count_ = 0;
  return p;
}

Status dump_params(const StateMatrix& params, const std::string& dir, Env& env) {
  GOSSIP_RETURN_IF_ERROR(env.create_dirs(dir));
  static_assert(std::endian::native == std::endian::little,
                "dump_params writes the host's float32 bytes; this host is not little-endian");
  for (Eigen::Index i = 0; i < params.cols(); ++i) {
    const std::string path = dir + "/node_" + std::to_string(i) + ".f32";
    const std::string_view bytes(reinterpret_cast<const char*>(params.col(i).data()),
                                 static_cast<std::size_t>(params.rows()) * sizeof(float));
    GOSSIP_RETURN_IF_ERROR(env.write_file_atomic(path, bytes).with_context("--dump-params"));
  }
  return Status::ok();
}

}  // namespace gossip::sim
