// The D-PSGD loop (see node.h for the algorithm and its failure behaviour). run_node is the loop;
// NodeRun holds the parts it works with (local step, parameter buffers, checkpoints, metrics,
// membership) and the named steps of an iteration. Why the pieces are arranged as they are:
//  - the optimizer direction is computed only after the neighbours' data arrived, so a failed or
//    interrupted iteration leaves the momentum buffer untouched and the checkpoint is exactly the
//    state at the start of the iteration (the sampler is rewound the same way);
//  - time comes from the injected clock (Env::clock), except the exchange's deadlines, which the
//    transport waits on in real time;
//  - where parameters live (host or device, staged or not) is ParameterBuffers' business.
#include "daemon/node.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/divergence.h"
#include "common/log.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "daemon/node_checkpoints.h"
#include "daemon/node_job.h"
#include "daemon/outputs.h"
#include "daemon/param_buffers.h"

namespace gossip::daemon {

std::string config_fingerprint(const TrainConfig& config) {
  TrainConfig c;
  *c.mutable_model() = config.model();
  *c.mutable_data() = config.data();
  c.mutable_data()->clear_path();
  *c.mutable_shard() = config.shard();
  c.set_batch_size(config.batch_size());
  *c.mutable_optimizer() = config.optimizer();
  // lr has presence since it became required; an lr of 0 printed nothing before, so the text
  // (and the fingerprint of checkpoints written then) stays the same without it.
  if (c.optimizer().lr() == 0) c.mutable_optimizer()->clear_lr();
  c.set_seed(config.seed());
  // Only ALLREDUCE is named, so the fingerprints of D-PSGD checkpoints stay what they were.
  if (config.algorithm() == config::pb::TrainConfig::ALLREDUCE) c.set_algorithm(config.algorithm());
  std::string text = config::to_text(c);
  uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size()));
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return buf;
}

std::uint64_t topology_fingerprint64(const topology::Topology& topology) {
  return std::stoull(topology.fingerprint().substr(0, 16), nullptr, 16);
}

std::vector<int> all_neighbours(const topology::Topology& topology, int node) {
  std::vector<int> peers;
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : topology.in_neighbors(node, t)) peers.push_back(nb.node);
    for (const topology::Neighbor& nb : topology.out_neighbors(node, t)) peers.push_back(nb.node);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

Status write_final_parameters(Env& env, const NodeOptions& options, std::span<const float> x,
                              std::uint64_t iteration) {
  const int self = options.node_id;
  std::vector<std::pair<std::string, const char*>> outputs;  // path, what asked for it
  if (!options.dump_params_dir.empty()) {
    outputs.emplace_back(dump_params_file(options.dump_params_dir, self), "--dump-params");
  }
  if (!options.config.final_params_path().empty()) {
    outputs.emplace_back(final_params_path_for(options.config.final_params_path(), self),
                         "final_params_path");
  }
  if (outputs.empty()) return Status::ok();
  if (!all_finite(x)) {
    return diverged(static_cast<std::int64_t>(iteration),
                    "the final parameters contain NaN or Inf (not written)");
  }
  const std::string_view bytes(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
  for (const auto& [path, what] : outputs) {
    Status s = Status::ok();
    if (const std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
      s = env.create_dirs(path.substr(0, slash));
    }
    if (s.is_ok()) s = env.write_file_atomic(path, bytes);
    if (!s.is_ok()) return s.with_context(what);
  }
  return Status::ok();
}

namespace {

// Membership's view of the network, from the exchange.
class ExchangePeers final : public PeerView {
 public:
  explicit ExchangePeers(const ParameterExchange& exchange) : exchange_(exchange) {}
  bool link_up(int peer) const override { return exchange_.link_up(peer); }
  std::optional<std::uint64_t> peer_iteration(int peer) const override {
    return exchange_.peer_iteration(peer);
  }

 private:
  const ParameterExchange& exchange_;
};

// Whether neighbour `peer` has announced an iteration before t (it is alive and behind).
std::function<bool(int)> behind_of(const ParameterExchange& exchange, std::uint64_t t) {
  return [&exchange, t](int peer) {
    std::optional<std::uint64_t> at = exchange.peer_iteration(peer);
    return at && *at < t;
  };
}

std::string not_finite(std::uint64_t t) {
  return "its iteration-" + std::to_string(t) + " parameters contain NaN or Inf";
}

// One node's run: the parts the loop (run_node below) works with, and the named steps it takes.
class NodeRun {
 public:
  NodeRun(const NodeOptions& options, const topology::Topology& topology, NodeJob& job,
          ParameterBuffers& buffers, NodeCheckpoints& checkpoints, MetricsWriter& metrics,
          ParameterExchange& exchange, const std::atomic<bool>& stop, Env& env)
      : options_(options),
        cfg_(options.config),
        self_(options.node_id),
        topology_(topology),
        job_(job),
        step_(*job.step),
        buffers_(buffers),
        checkpoints_(checkpoints),
        metrics_(metrics),
        exchange_(exchange),
        stop_(stop),
        env_(env),
        clock_(env.clock()),
        deadline_(std::chrono::milliseconds(cfg_.timeouts().deadline_ms())),
        carry_on_(carry_on_policy()),
        everyone_(all_neighbours(topology, self_)),
        peers_(exchange),
        membership_({self_, everyone_, cfg_.fault().admit_margin(),
                     std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count()},
                    peers_, clock_),
        mh_(carry_on_ && uses_metropolis_hastings(topology, self_)) {}

  bool interrupted() const { return stop_.load(std::memory_order_relaxed); }
  bool carry_on() const { return carry_on_; }
  NodeResult& result() { return result_; }
  MetricsWriter& metrics() { return metrics_; }

  // The local step could not go on at iteration t (LocalStep::begin or end): a diverged step
  // stops without a checkpoint; otherwise the step's owner is gone and the node leaves the group
  // with a checkpoint of the state it holds.
  NodeResult step_failed(std::uint64_t t, const Status& s) {
    if (s.code() == StatusCode::kAborted) {
      metrics_.flush_iterations();
      metrics_.event(t, "diverged", s.message());
      result_.iterations_done = t;
      return fail(kExitDiverged, s);
    }
    GOSSIP_LOG(kError) << s.to_string();
    return stop_at(t, step_.position(), kExitTrainerGone, s.to_string());
  }

  NodeResult fail(int code, const Status& status) {
    result_.exit_code = code;
    result_.message = status.to_string();
    step_.finish(result_.message);
    GOSSIP_LOG(kError) << result_.message;
    return result_;
  }

  // The parameter buffers hold x (from x_0, a checkpoint, or the step's begin()).
  void have_x() { have_x_ = true; }

  Status save(std::uint64_t iteration, const sgd::SamplerState& position) {
    // Nothing to save before an external trainer posted its x_0.
    if (!checkpoints_.enabled() || !have_x_) return Status::ok();
    return checkpoints_.save(iteration, buffers_.x_to_host(), position, step_.state());
  }

  // Ends the run at the start of iteration t (checkpoint of the state then, position `before`).
  NodeResult stop_at(std::uint64_t t, const sgd::SamplerState& before, int code,
                     const std::string& why) {
    metrics_.flush_iterations();
    metrics_.event(t,
                   code == kExitStopped       ? "stopped"
                   : code == kExitTrainerGone ? "trainer_gone"
                                              : "neighbour_failed",
                   why);
    Status s = save(t, before);
    result_.exit_code = code;
    result_.iterations_done = t;
    result_.message = why;
    if (!s.is_ok()) {
      GOSSIP_LOG(kError) << "checkpoint at iteration " << t << " failed: " << s.to_string();
      result_.message += "; checkpoint failed: " + s.to_string();
    } else if (checkpoints_.enabled()) {
      GOSSIP_LOG(kInfo) << "checkpoint written at iteration " << t;
    }
    step_.finish(result_.message);
    return result_;
  }

  // Abandons iteration t: the batch is drawn again on resume.
  NodeResult abandon(std::uint64_t t, const sgd::SamplerState& before, int code,
                     const std::string& why) {
    if (Status s = step_.rewind(before); !s.is_ok()) return fail(kExitError, s);
    return stop_at(t, before, code, why);
  }

  // Carries out Membership's decisions at iteration t.
  void carry_out(const MembershipActions& a, std::uint64_t t) {
    for (const auto& [to_peer, message] : a.send) exchange_.send_admission(to_peer, message);
    for (int j : a.admitted) {
      exchange_.skip_before(j, t);  // nothing it sent before the gap may fill a receive
      GOSSIP_LOG(kInfo) << "edge to node " << j << " re-admitted from iteration " << t;
      metrics_.event(t, "edge_admitted",
                     "node " + std::to_string(j) + " from iteration " + std::to_string(t), j);
    }
    for (const auto& [j, reason] : a.dropped) {
      GOSSIP_LOG(kWarning) << "dropping the edge to node " << j << " from iteration " << t << ": "
                           << reason;
      metrics_.event(t, "edge_dropped", "node " + std::to_string(j) + ": " + reason, j);
    }
  }

  // Iteration t's neighbours (dropped edges left out) and the exchange set up for them.
  void plan(std::uint64_t t) {
    if (carry_on_) carry_out(membership_.start_iteration(t, exchange_.take_admissions()), t);
    const auto it = static_cast<std::int64_t>(t);
    in_ = topology_.in_neighbors(self_, it);
    std::vector<topology::Neighbor> out = topology_.out_neighbors(self_, it);
    if (carry_on_) {
      auto is_dropped = [&](const topology::Neighbor& nb) {
        return membership_.is_dropped(nb.node);
      };
      std::erase_if(in_, is_dropped);
      std::erase_if(out, is_dropped);
    }
    planned_ = static_cast<std::uint32_t>(in_.size());  // d_i(t)
    exchange_.set_iteration(t, planned_);
    to_.clear();
    for (const topology::Neighbor& nb : out) to_.push_back(nb.node);
    from_.clear();
    for (const topology::Neighbor& nb : in_) from_.push_back({nb.node, buffers_.inbox(nb.node)});
    unusable_.clear();
  }

  std::uint64_t rejoin(std::uint64_t start, std::uint64_t total);
  void rejoin_average(std::uint64_t t);
  void post_exchange(std::uint64_t t) {
    pending_ = exchange_.begin(t, buffers_.outgoing(), to_, from_);
  }
  std::optional<NodeResult> gossip(std::uint64_t t, const sgd::SamplerState& before);
  IterationStats mix(std::uint64_t t, IterationStats stats);
  std::optional<NodeResult> after_iteration(std::uint64_t done, std::uint64_t total);
  NodeResult finish(std::uint64_t iterations);

  std::optional<std::uint64_t> rejoin_at;  // set while a restarted node has not rejoined yet

 private:
  bool carry_on_policy() const {
    // Fault policy (node.h). Carry-on needs a symmetric W(t); Metropolis–Hastings rows are
    // recomputed from the degrees both ends announce, other schemes move a dropped edge's weight
    // onto the diagonal.
    if (cfg_.fault().policy() == config::pb::Fault::FAIL_STOP) return false;
    if (mixing_is_symmetric(topology_)) return true;
    GOSSIP_LOG(kWarning)
        << "fault.policy CARRY_ON needs a symmetric W(t) (an undirected topology); "
        << (topology_.name().empty() ? std::string("this topology") : topology_.name())
        << " is directed, so this node fails stop (checkpoint, exit " << kExitNeighbourFailed
        << ") when a neighbour fails";
    return false;
  }
  // A deadline for the exchange's and mailbox's condition-variable waits, which run on real
  // time (std::chrono::steady_clock); the loop's own timings use the injected clock.
  SteadyTime after_deadline() const { return std::chrono::steady_clock::now() + deadline_; }

  const NodeOptions& options_;
  const TrainConfig& cfg_;
  const int self_;
  const topology::Topology& topology_;
  NodeJob& job_;
  LocalStep& step_;
  ParameterBuffers& buffers_;
  NodeCheckpoints& checkpoints_;
  MetricsWriter& metrics_;
  ParameterExchange& exchange_;
  const std::atomic<bool>& stop_;
  Env& env_;
  Clock& clock_;
  const std::chrono::milliseconds deadline_;
  const bool carry_on_;
  const std::vector<int> everyone_;
  const ExchangePeers peers_;
  Membership membership_;
  const bool mh_;
  NodeResult result_;
  bool have_x_ = false;

  // Iteration t.
  std::vector<topology::Neighbor> in_;
  std::uint32_t planned_ = 0;
  std::vector<int> to_;
  std::vector<Inbox> from_;
  std::map<int, std::string> unusable_;  // why a neighbour's x_j^t cannot be mixed
  std::map<int, std::uint32_t> used_;    // neighbour -> its planned degree d_j(t)
  std::unique_ptr<PendingExchange> pending_;
  std::vector<std::pair<int, double>> last_row_;  // the row of W in the last weights line
  bool row_logged_ = false;
};

// A restarted node (resumed from a checkpoint while its neighbours are ahead) rejoins at an
// agreed t_a (membership.h); returns the iteration to go on from.
std::uint64_t NodeRun::rejoin(std::uint64_t start, std::uint64_t total) {
  std::optional<std::uint64_t> ahead = membership_.begin_rejoin(start);
  if (!ahead) return start;
  MembershipActions actions;
  for (int round = 0; round < 5 && !interrupted(); ++round) {
    carry_out(membership_.propose_rejoin(start), start);
    // Answers (and crossing proposals) arrive within the deadline.
    const std::int64_t until_ns =
        clock_.monotonic_ns() +
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_).count();
    while (membership_.awaiting_answers() && clock_.monotonic_ns() < until_ns && !interrupted()) {
      clock_.sleep_for_ns(2'000'000);
      carry_out(membership_.receive(exchange_.take_admissions(), start), start);
    }
    actions = {};
    const bool agreed = membership_.end_rejoin_round(round, start, actions);
    carry_out(actions, start);
    if (agreed) break;
  }
  actions = {};
  const std::uint64_t t_a = membership_.finish_rejoin(start, actions);
  carry_out(actions, start);
  GOSSIP_LOG(kInfo) << "rejoining: checkpoint at iteration " << start << ", neighbours at up to "
                    << *ahead << "; jumping to iteration " << t_a << " (" << membership_.agreed()
                    << " of " << everyone_.size() << " neighbours accepted)";
  if (t_a < total) rejoin_at = t_a;
  result_.iterations_done = t_a;
  return t_a;
}

// The rejoin iteration (t_a, or the first later one with a neighbour if none delivered at t_a —
// an agreement the proposer withdrew too late): first the neighbours' x_j^t, then x_t := their
// average is what is sent.
void NodeRun::rejoin_average(std::uint64_t t) {
  if (!rejoin_at || t < *rejoin_at || from_.empty()) return;
  std::unique_ptr<PendingExchange> first = exchange_.begin(t, buffers_.outgoing(), {}, from_);
  for (const NeighbourFailure& f : first->wait(
           after_deadline(), [this] { return interrupted(); }, behind_of(exchange_, t))) {
    unusable_.emplace(f.peer, f.status.to_string());
  }
  first.reset();
  const std::size_t d = buffers_.num_params();
  std::vector<double> sum(d, 0.0);
  int count = 0;
  for (const Inbox& in_box : from_) {
    if (unusable_.count(in_box.peer)) continue;
    if (!all_finite(in_box.buffer)) {
      unusable_.emplace(in_box.peer, not_finite(t));
      continue;
    }
    for (std::size_t k = 0; k < d; ++k) sum[k] += in_box.buffer[k];
    ++count;
  }
  if (count > 0) {
    std::vector<float> avg(d);
    for (std::size_t k = 0; k < d; ++k) avg[k] = static_cast<float>(sum[k] / count);
    buffers_.set_x(avg);
    GOSSIP_LOG(kInfo) << "rejoined at iteration " << t << ": x := average of " << count
                      << " neighbours";
    metrics_.event(t, "rejoined",
                   "x := average of " + std::to_string(count) + " neighbours' parameters");
    rejoin_at.reset();
  }
  from_.clear();  // received already
}

// Waits for the neighbours' x_j^t and decides which are mixed (used_). Under fail-stop a missing
// one ends the run; under carry-on both ends of an edge exchange verdicts and drop it together.
std::optional<NodeResult> NodeRun::gossip(std::uint64_t t, const sgd::SamplerState& before) {
  // A neighbour that is connected but still finishing iteration t-1 (held up by a failure
  // elsewhere) is waited for longer; under fail-stop only the deadline counts.
  std::vector<NeighbourFailure> failures = pending_->wait(
      after_deadline(), [this] { return interrupted(); },
      carry_on_ ? behind_of(exchange_, t) : std::function<bool(int)>());
  pending_.reset();
  for (const NeighbourFailure& f : failures) unusable_.emplace(f.peer, f.status.to_string());
  for (const topology::Neighbor& nb : in_) {
    if (!unusable_.count(nb.node) && !all_finite(buffers_.inbox(nb.node))) {
      unusable_.emplace(nb.node, not_finite(t));
    }
  }
  if (!unusable_.empty() && interrupted()) {
    return abandon(t, before, kExitStopped, "stop requested (signal)");
  }
  used_.clear();
  if (!carry_on_) {
    if (!unusable_.empty()) {
      std::string why;
      for (const auto& [peer, reason] : unusable_) {
        GOSSIP_LOG(kError) << "neighbour " << peer << " failed at iteration " << t << ": "
                           << reason;
        why += (why.empty() ? "" : "; ") + std::string("neighbour ") + std::to_string(peer) + ": " +
               reason;
      }
      return abandon(t, before, kExitNeighbourFailed, why);
    }
    for (const topology::Neighbor& nb : in_) used_[nb.node] = 0;
    return std::nullopt;
  }
  // Verdict phase: the edge is used at t iff both ends have each other's x^t and both verdicts
  // arrived; otherwise both ends drop it from t on.
  std::vector<int> peers;
  for (const topology::Neighbor& nb : in_) {
    peers.push_back(nb.node);
    exchange_.send_verdict(nb.node, {t, unusable_.count(nb.node) == 0, planned_});
  }
  std::map<int, Verdict> verdicts;
  if (!peers.empty()) {
    verdicts =
        exchange_.wait_verdicts(t, peers, after_deadline(), [this] { return interrupted(); });
  }
  if (verdicts.size() < peers.size() && interrupted()) {
    return abandon(t, before, kExitStopped, "stop requested (signal)");
  }
  MembershipActions actions;
  used_ = membership_.decide(peers, unusable_, verdicts, actions);
  carry_out(actions, t);
  if (used_.size() < peers.size()) {
    GOSSIP_LOG(kWarning) << "active degree dropped to " << used_.size() << " at iteration " << t;
    if (membership_.partitioned()) {
      GOSSIP_LOG(kWarning) << "partitioned: no neighbours left at iteration " << t
                           << "; training alone";
      metrics_.event(t, "partitioned", "no neighbours left; training alone");
    }
  }
  return std::nullopt;
}

// u_t, then x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t with the row of W(t) for the neighbours used
// (logged when it changed). Returns `stats` with the learning rate and the mix time.
IterationStats NodeRun::mix(std::uint64_t t, IterationStats stats) {
  const auto it = static_cast<std::int64_t>(t);
  for (const auto& [j, dj] : used_) buffers_.upload(j);
  const RowWeights w = row_weights(topology_, self_, it, mh_, planned_, used_);
  std::vector<std::pair<int, double>> row = w.row(self_);
  if (!row_logged_ || row != last_row_) {
    metrics_.weights(t, row);
    last_row_ = std::move(row);
    row_logged_ = true;
  }
  const std::int64_t t3 = clock_.monotonic_ns();
  stats.lr = step_.direction(buffers_.x(), buffers_.update(), t);
  buffers_.mix(self_, w, stats.lr, step_.has_update());
  stats.mix_s = static_cast<double>(clock_.monotonic_ns() - t3) * 1e-9;
  return stats;
}

// After iteration done−1: evaluation and the periodic checkpoint.
std::optional<NodeResult> NodeRun::after_iteration(std::uint64_t done, std::uint64_t total) {
  result_.iterations_done = done;
  if (cfg_.eval_every() > 0 && done % cfg_.eval_every() == 0 && done < total && job_.eval_set) {
    if (std::optional<sgd::EvalResult> e = step_.evaluate(buffers_.x(), *job_.eval_set)) {
      metrics_.eval(done, e->loss, e->accuracy);
    }
  }
  if (cfg_.checkpoint().every() > 0 && done % cfg_.checkpoint().every() == 0 && done < total) {
    if (Status s = save(done, step_.position()); !s.is_ok()) {
      if (s.code() == StatusCode::kAborted) {
        metrics_.flush_iterations();
        metrics_.event(done, "diverged", s.message());
        return fail(kExitDiverged, s);
      }
      // Training goes on: a full disk should not cost the run, only durability (logged).
      GOSSIP_LOG(kError) << "periodic checkpoint failed: " << s.to_string();
      metrics_.event(done, "checkpoint_failed", s.to_string());
    }
  }
  return std::nullopt;
}

// The end of the run: final evaluation, checkpoint, parameter files, metrics.
NodeResult NodeRun::finish(std::uint64_t iterations) {
  metrics_.flush_iterations();
  result_.iterations_done = iterations;
  std::optional<sgd::EvalResult> e;
  if (job_.test_set) e = step_.evaluate(buffers_.x(), *job_.test_set);
  if (e) {
    metrics_.eval(iterations, e->loss, e->accuracy);
    result_.final_test_accuracy = e->accuracy;
    result_.final_test_loss = e->loss;
  }
  if (Status s = save(iterations, step_.position()); !s.is_ok()) {
    if (s.code() == StatusCode::kAborted) {
      metrics_.event(iterations, "diverged", s.message());
      return fail(kExitDiverged, s);
    }
    return fail(kExitError, s.with_context("final checkpoint"));
  }
  if (Status s = write_final_parameters(env_, options_, buffers_.x_to_host(), iterations);
      !s.is_ok()) {
    return fail(s.code() == StatusCode::kAborted ? kExitDiverged : kExitError, s);
  }
  // The metrics file is an output the user asked for: lost lines are an error, not exit 0.
  if (Status s = metrics_.close(); !s.is_ok()) return fail(kExitError, s);
  step_.finish("");
  result_.exit_code = kExitOk;
  result_.message = "done";
  if (e) {
    GOSSIP_LOG(kInfo) << "finished " << iterations << " iterations; local model test accuracy "
                      << e->accuracy << ", loss " << e->loss;
  } else {
    GOSSIP_LOG(kInfo) << "finished " << iterations << " iterations";
  }
  return result_;
}

// The result of a run that ends before its first iteration: logged, and the step told why.
NodeResult failed_before_start(LocalStep& step, int code, const Status& status) {
  NodeResult r;
  r.exit_code = code;
  r.message = status.to_string();
  step.finish(r.message);
  GOSSIP_LOG(kError) << r.message;
  return r;
}

}  // namespace

Result<NodeStart> open_node_start(const NodeOptions& options, const topology::Topology& topology,
                                  const NodeJob& job, int* exit_code, Env& env) {
  const TrainConfig& cfg = options.config;
  NodeStart s{
      NodeCheckpoints(env,
                      {options.checkpoint_dir, options.resume, options.resume_or_start,
                       options.resume_at, cfg.checkpoint().keep()},
                      {static_cast<std::uint32_t>(options.node_id), job.num_params,
                       job.step->state_size(), topology.fingerprint(), config_fingerprint(cfg)}),
      std::nullopt};
  Result<std::optional<Checkpoint>> resumed = s.checkpoints.open(exit_code);
  if (!resumed.is_ok()) return resumed.status();
  s.resumed = std::move(*resumed);
  return s;
}

NodeResult run_node(const NodeOptions& options, const topology::Topology& topology, NodeJob& job,
                    sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env) {
  int code = kExitError;
  Result<NodeStart> node_start = open_node_start(options, topology, job, &code, env);
  if (!node_start.is_ok()) return failed_before_start(*job.step, code, node_start.status());
  return run_node(options, topology, job, *node_start, backend, exchange, stop, env);
}

NodeResult run_node(const NodeOptions& options, const topology::Topology& topology, NodeJob& job,
                    NodeStart& node_start, sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env) {
  const int self = options.node_id;
  const TrainConfig& cfg = options.config;
  LocalStep& step = *job.step;
  const std::size_t d = job.num_params;
  NodeCheckpoints& checkpoints = node_start.checkpoints;
  const std::optional<Checkpoint>& resumed = node_start.resumed;
  std::vector<int> senders;  // every node that sends to this one at some iteration
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : topology.in_neighbors(self, t)) senders.push_back(nb.node);
  }
  ParameterBuffers buffers(backend, d, senders);
  std::uint64_t start = 0;
  if (resumed) {
    const Checkpoint& c = *resumed;
    if (Status s = step.rewind(from_snapshot(c.sampler)); !s.is_ok())
      return failed_before_start(step, kExitError, s.with_context("resume"));
    step.load_state(c.optimizer_state);
    buffers.set_x(c.params);
    start = c.iteration;
  } else if (!job.initial_params.empty()) {
    buffers.set_x(job.initial_params);
  }
  Result<MetricsWriter> metrics = MetricsWriter::open(
      options.metrics_path, self, cfg.metrics_every(), options.append_metrics || start > 0);
  if (!metrics.is_ok()) return failed_before_start(step, kExitError, metrics.status());

  NodeRun run(options, topology, job, buffers, checkpoints, *metrics, exchange, stop, env);
  if (resumed || !job.initial_params.empty()) run.have_x();
  const std::uint64_t total = job.total_iterations;
  if (run.carry_on() && start > 0 && (options.resume || options.resume_at) && start < total) {
    start = run.rejoin(start, total);
  }
  if (Status s = step.start(start, resumed ? buffers.x_to_host() : std::vector<float>());
      !s.is_ok()) {
    return run.step_failed(start, s);
  }
  Clock& clock = env.clock();
  const bool overlap = !cfg.no_overlap();
  std::uint64_t sent_before = exchange.bytes_sent(), received_before = exchange.bytes_received();
  for (std::uint64_t t = start; t < total; ++t) {
    const sgd::SamplerState before = step.position();
    if (run.interrupted()) return run.stop_at(t, before, kExitStopped, "stop requested (signal)");
    run.plan(t);
    if (Status s = step.begin(t, buffers); !s.is_ok()) return run.step_failed(t, s);
    run.have_x();
    run.rejoin_average(t);
    // x_t goes out while the gradient at x_t is computed (after it, with no_overlap).
    IterationStats stats;
    const std::int64_t t0 = clock.monotonic_ns();
    if (overlap) run.post_exchange(t);
    const std::optional<double> loss = step.gradient(buffers.x(), t);
    const std::int64_t t1 = clock.monotonic_ns();
    if (!overlap) run.post_exchange(t);
    if (std::optional<NodeResult> ended = run.gossip(t, before)) return *ended;
    if (Status s = step.before_mix(t, buffers); !s.is_ok()) return run.step_failed(t, s);
    const std::int64_t t2 = clock.monotonic_ns();
    stats = run.mix(t, stats);
    stats.loss = loss.value_or(std::numeric_limits<double>::quiet_NaN());
    stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
    stats.wait_s = static_cast<double>(t2 - t1) * 1e-9;
    stats.exchange_s = static_cast<double>(t2 - (overlap ? t0 : t1)) * 1e-9;
    stats.iteration_s = static_cast<double>(clock.monotonic_ns() - t0) * 1e-9;
    stats.bytes_sent = exchange.bytes_sent() - sent_before;
    stats.bytes_received = exchange.bytes_received() - received_before;
    sent_before += stats.bytes_sent;
    received_before += stats.bytes_received;
    run.metrics().add_iteration(t, stats);
    if (loss && !std::isfinite(*loss)) {
      // Diverged (common/divergence.h): stop without writing x anywhere.
      run.metrics().flush_iterations();
      const Status s =
          diverged(static_cast<std::int64_t>(t), "the training loss is " + std::to_string(*loss));
      run.metrics().event(t, "diverged", s.message());
      run.result().iterations_done = t;
      return run.fail(kExitDiverged, s);
    }
    if (Status s = step.end(t, buffers); !s.is_ok()) return run.step_failed(t + 1, s);
    if (std::optional<NodeResult> ended = run.after_iteration(t + 1, total)) return *ended;
  }
  return run.finish(std::max<std::uint64_t>(start, total));
}

NodeResult run_node(const NodeOptions& options, const topology::Topology& topology,
                    const sgd::Problem& problem, sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env) {
  const int self = options.node_id;
  NodeResult result;
  if (self < 0 || self >= topology.num_nodes()) {
    result.exit_code = kExitUsage;
    result.message =
        invalid_argument("--node " + std::to_string(self) + " is not in the topology (0.." +
                         std::to_string(topology.num_nodes() - 1) + ")")
            .to_string();
    GOSSIP_LOG(kError) << result.message;
    return result;
  }
  Result<NodeJob> job = make_sgd_job(options.config, problem, backend, self, topology.num_nodes());
  if (!job.is_ok()) {
    result.exit_code = kExitUsage;
    result.message = job.status().to_string();
    GOSSIP_LOG(kError) << result.message;
    return result;
  }
  return run_node(options, topology, *job, backend, exchange, stop, env);
}

}  // namespace gossip::daemon
