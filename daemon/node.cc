// The D-PSGD loop (see node.h for the algorithm and its failure behaviour). Why the pieces are
// arranged as they are:
//  - the optimizer direction is computed only after the neighbours' data arrived, so a failed or
//    interrupted iteration leaves the momentum buffer untouched and the checkpoint is exactly the
//    state at the start of the iteration (the sampler is rewound the same way);
//  - on the cpu backend the parameters are sent straight from the backend buffer (host memory);
//    on cuda a host copy is kept for sending, and received buffers are copied to the device on
//    the transfer stream.
#include "daemon/node.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/divergence.h"
#include "common/log.h"
#include "daemon/checkpoint.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"

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
  if (config.algorithm() == pb::TrainConfig::ALLREDUCE) c.set_algorithm(config.algorithm());
  std::string text = to_text(c);
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

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The first `count` examples of `data` (evaluation subsets).
sgd::Dataset head_of(const sgd::Dataset& data, std::int64_t count) {
  sgd::Dataset out;
  out.num_examples = std::min(count, data.num_examples);
  out.dim = data.dim;
  out.num_classes = data.num_classes;
  out.features.assign(data.features.begin(), data.features.begin() + out.num_examples * data.dim);
  if (!data.labels.empty())
    out.labels.assign(data.labels.begin(), data.labels.begin() + out.num_examples);
  if (!data.targets.empty())
    out.targets.assign(data.targets.begin(), data.targets.begin() + out.num_examples);
  return out;
}

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

std::int64_t membership_deadline_ns(std::chrono::milliseconds deadline) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(deadline).count();
}

}  // namespace

NodeResult run_node(const NodeOptions& options, const topology::Topology& topology,
                    const sgd::Problem& problem, sgd::Backend& backend, ParameterExchange& exchange,
                    const std::atomic<bool>& stop, Env& env) {
  NodeResult result;
  auto fail = [&](int code, const Status& status) {
    result.exit_code = code;
    result.message = status.to_string();
    GOSSIP_LOG(kError) << result.message;
    return result;
  };
  const int self = options.node_id;
  const TrainConfig& cfg = options.config;
  if (self < 0 || self >= topology.num_nodes()) {
    return fail(kExitUsage,
                invalid_argument("--node " + std::to_string(self) + " is not in the topology (0.." +
                                 std::to_string(topology.num_nodes() - 1) + ")"));
  }
  Result<std::unique_ptr<sgd::Model>> model_or = backend.make_model(problem.spec);
  if (!model_or.is_ok()) return fail(kExitUsage, model_or.status());
  sgd::Model& model = **model_or;
  const std::size_t d = problem.spec.num_params();
  // Every node must run the same number of iterations, so epochs count passes over the MEAN shard
  // (shard sizes differ between nodes: by one under iid, by much more under non-iid schemes).
  const std::uint64_t total = total_iterations(
      cfg, static_cast<std::size_t>(problem.train->num_examples / topology.num_nodes()));
  sgd::OptimizerConfig opt_cfg = to_optimizer_config(cfg, total);
  if (Status s = opt_cfg.validate(); !s.is_ok())
    return fail(kExitUsage, s.with_context("optimizer"));
  sgd::Optimizer optimizer(opt_cfg, d);
  sgd::BatchSampler sampler = problem.sampler(self, static_cast<int>(cfg.batch_size()));
  const bool on_host = backend.device() == sgd::Device::kCpu;

  // Backend buffers: x_t, x_{t+1}, gradient, direction, optimizer state.
  sgd::DeviceBuffer x = backend.alloc(d), next = backend.alloc(d), grad = backend.alloc(d),
                    update = backend.alloc(d),
                    state = backend.alloc(std::max<std::size_t>(optimizer.state_size(), 1));
  // What is sent, on a GPU node: x_t staged in page-locked host memory (Backend::alloc_host), so
  // the device-to-host copy runs at full bus speed; unused on cpu (x itself is host memory).
  sgd::DeviceBuffer x_host = backend.alloc_host(on_host ? 0 : d);
  std::vector<float> initial = problem.initial_params();
  std::uint64_t start = 0;
  std::vector<float> initial_state;

  CheckpointExpectation expect{static_cast<std::uint32_t>(self), d, optimizer.state_size(),
                               topology.fingerprint(), config_fingerprint(cfg)};
  // This run's identity (checkpoint.h): inherited from the checkpoint it resumes, else new.
  std::string run_id = new_run_id();
  const bool resuming = options.resume || options.resume_or_start || options.resume_at;
  if (resuming && !options.checkpoint_dir.empty()) {
    std::vector<std::string> skipped;
    Result<Checkpoint> c =
        options.resume_at
            ? load_checkpoint_file(
                  env, options.checkpoint_dir + "/" + checkpoint_file_name(*options.resume_at),
                  expect)
            : load_latest_checkpoint(env, options.checkpoint_dir, expect, &skipped);
    if (c.is_ok()) {
      initial = std::move(c->params);
      initial_state = std::move(c->optimizer_state);
      sgd::SamplerState ss;
      ss.epoch_rng_state = c->sampler.rng_state;
      ss.epoch = c->sampler.epoch;
      ss.position = c->sampler.position;
      ss.batches = c->sampler.batches;
      if (Status s = sampler.restore(ss); !s.is_ok())
        return fail(kExitError, s.with_context("resume"));
      start = c->iteration;
      if (!c->run_id.empty()) run_id = c->run_id;
      GOSSIP_LOG(kInfo) << "resumed from checkpoint at iteration " << start << " in "
                        << options.checkpoint_dir << " (run " << run_id << ")";
    } else if (options.resume_at || !options.resume_or_start) {
      // Starting from 0 instead would silently throw away the work the user asked to continue.
      std::string why = c.status().to_string();
      if (!skipped.empty()) {
        why += " (" + std::to_string(skipped.size()) +
               " checkpoint file(s) skipped as damaged or written for another config, topology or "
               "node; see the warnings above)";
      }
      return fail(kExitCannotResume,
                  failed_precondition(why + "; give --resume-or-start to start from iteration 0 "
                                            "instead")
                      .with_context(options.resume_at ? "--resume-at" : "--resume"));
    } else {
      // The unusable files are another run's: set aside (kept), so this run owns the directory.
      Result<std::string> aside = set_aside_checkpoints(env, options.checkpoint_dir, run_id);
      if (!aside.is_ok()) return fail(kExitError, aside.status().with_context("--resume-or-start"));
      GOSSIP_LOG(kWarning) << "--resume-or-start: no usable checkpoint in "
                           << options.checkpoint_dir << "; starting from iteration 0 (run "
                           << run_id << ")"
                           << (aside->empty() ? std::string()
                                              : "; the unusable files were moved to " + *aside);
    }
  } else if (!options.checkpoint_dir.empty()) {
    if (Status s = check_fresh_directory(env, options.checkpoint_dir); !s.is_ok()) {
      return fail(kExitUsage, s);
    }
  }
  backend.copy_to_device(x.data(), initial.data(), d);
  if (!initial_state.empty())
    backend.copy_to_device(state.data(), initial_state.data(), initial_state.size());
  backend.synchronize();
  if (!on_host) std::copy(initial.begin(), initial.end(), x_host.data());

  Result<MetricsWriter> metrics_or = MetricsWriter::open(
      options.metrics_path, self, cfg.metrics_every(), options.append_metrics || start > 0);
  if (!metrics_or.is_ok()) return fail(kExitError, metrics_or.status());
  MetricsWriter& metrics = *metrics_or;

  // Receive buffers, one per neighbour we ever hear from; page-locked on a GPU node, so that the
  // copy of each neighbour's x_j^t to the device (queued as soon as it arrives) is an
  // asynchronous DMA that overlaps the gradient computation.
  std::map<int, sgd::DeviceBuffer> inbox_host;
  std::map<int, sgd::DeviceBuffer> inbox_device;
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : topology.in_neighbors(self, t)) {
      if (inbox_host.count(nb.node)) continue;
      inbox_host[nb.node] = backend.alloc_host(d);
      if (!on_host) inbox_device[nb.node] = backend.alloc(d);
    }
  }

  std::shared_ptr<const sgd::Dataset> eval_set = problem.test;
  if (cfg.eval_examples() > 0 &&
      static_cast<std::int64_t>(cfg.eval_examples()) < problem.test->num_examples) {
    eval_set = std::make_shared<sgd::Dataset>(
        head_of(*problem.test, static_cast<std::int64_t>(cfg.eval_examples())));
  }

  auto save = [&](std::uint64_t iteration, const sgd::SamplerState& ss) -> Status {
    if (options.checkpoint_dir.empty()) return Status::ok();
    Checkpoint c;
    c.node = static_cast<std::uint32_t>(self);
    c.iteration = iteration;
    c.topology_fingerprint = expect.topology_fingerprint;
    c.config_fingerprint = expect.config_fingerprint;
    c.run_id = run_id;
    c.sampler.rng_state = ss.epoch_rng_state;
    c.sampler.epoch = ss.epoch;
    c.sampler.position = ss.position;
    c.sampler.batches = ss.batches;
    c.params.resize(d);
    backend.copy_to_host(c.params.data(), x.data(), d);
    // Never checkpoint a diverged model (common/divergence.h): the previous checkpoint stays the
    // newest one.
    if (!all_finite(c.params)) {
      return diverged(static_cast<std::int64_t>(iteration),
                      "the parameters contain NaN or Inf (not checkpointed)");
    }
    c.optimizer_state.resize(optimizer.state_size());
    if (!c.optimizer_state.empty())
      backend.copy_to_host(c.optimizer_state.data(), state.data(), c.optimizer_state.size());
    Result<std::string> path =
        write_checkpoint(env, options.checkpoint_dir, c, cfg.checkpoint().keep());
    if (!path.is_ok()) return path.status();
    GOSSIP_LOG(kDebug) << "checkpoint " << *path;
    return Status::ok();
  };
  auto stop_now = [&](std::uint64_t iteration, const sgd::SamplerState& ss, int code,
                      const std::string& why) {
    metrics.flush_iterations();
    metrics.event(iteration, code == kExitStopped ? "stopped" : "neighbour_failed", why);
    Status s = save(iteration, ss);
    result.exit_code = code;
    result.iterations_done = iteration;
    result.message = why;
    if (!s.is_ok()) {
      GOSSIP_LOG(kError) << "checkpoint at iteration " << iteration << " failed: " << s.to_string();
      result.message += "; checkpoint failed: " + s.to_string();
    } else if (!options.checkpoint_dir.empty()) {
      GOSSIP_LOG(kInfo) << "checkpoint written at iteration " << iteration;
    }
    return result;
  };

  const auto deadline = std::chrono::milliseconds(cfg.timeouts().deadline_ms());
  const bool overlap = !cfg.no_overlap();
  sgd::Batch batch;
  std::vector<int> to;
  std::vector<Inbox> from;
  std::vector<sgd::MixTerm> terms;
  std::uint64_t sent_before = exchange.bytes_sent(), received_before = exchange.bytes_received();
  auto interrupted = [&] { return stop.load(std::memory_order_relaxed); };

  // Fault policy (node.h). Carry-on needs a symmetric W(t); Metropolis–Hastings rows are
  // recomputed from the degrees both ends announce, other schemes move a dropped edge's weight
  // onto the diagonal.
  bool carry_on = cfg.fault().policy() != pb::Fault::FAIL_STOP;
  if (carry_on && !mixing_is_symmetric(topology)) {
    GOSSIP_LOG(kWarning)
        << "fault.policy CARRY_ON needs a symmetric W(t) (an undirected topology); "
        << (topology.name().empty() ? std::string("this topology") : topology.name())
        << " is directed, so this node fails stop (checkpoint, exit " << kExitNeighbourFailed
        << ") when a neighbour fails";
    carry_on = false;
  }
  const bool mh = carry_on && uses_metropolis_hastings(topology, self);
  std::vector<std::pair<int, double>> last_row;  // the row of W in the last weights line
  bool row_logged = false;
  const std::vector<int> everyone = all_neighbours(topology, self);
  const ExchangePeers peers(exchange);
  Membership membership(
      {self, everyone, cfg.fault().admit_margin(), membership_deadline_ns(deadline)}, peers,
      env.clock());
  // Carries out Membership's decisions at iteration t.
  auto carry_out = [&](const MembershipActions& a, std::uint64_t t) {
    for (const auto& [to_peer, message] : a.send) exchange.send_admission(to_peer, message);
    for (int j : a.admitted) {
      exchange.skip_before(j, t);  // nothing it sent before the gap may fill a receive
      GOSSIP_LOG(kInfo) << "edge to node " << j << " re-admitted from iteration " << t;
      metrics.event(t, "edge_admitted",
                    "node " + std::to_string(j) + " from iteration " + std::to_string(t), j);
    }
    for (const auto& [j, reason] : a.dropped) {
      GOSSIP_LOG(kWarning) << "dropping the edge to node " << j << " from iteration " << t << ": "
                           << reason;
      metrics.event(t, "edge_dropped", "node " + std::to_string(j) + ": " + reason, j);
    }
  };

  // A restarted node (resumed from a checkpoint while its neighbours are ahead) rejoins at an
  // agreed t_a (membership.h); at t_a it takes the average of the x_j^{t_a} of those that
  // accepted before sending its own (if none delivered, at the first later iteration with a
  // neighbour).
  std::optional<std::uint64_t> rejoin_at;
  if (carry_on && start > 0 && (options.resume || options.resume_at) && start < total) {
    if (std::optional<std::uint64_t> ahead = membership.begin_rejoin(start)) {
      Clock& clock = env.clock();
      MembershipActions actions;
      for (int round = 0; round < 5 && !interrupted(); ++round) {
        carry_out(membership.propose_rejoin(start), start);
        // Answers (and crossing proposals) arrive within the deadline.
        const std::int64_t until_ns = clock.monotonic_ns() + membership_deadline_ns(deadline);
        while (membership.awaiting_answers() && clock.monotonic_ns() < until_ns && !interrupted()) {
          clock.sleep_for_ns(2'000'000);
          carry_out(membership.receive(exchange.take_admissions(), start), start);
        }
        actions = {};
        const bool agreed = membership.end_rejoin_round(round, start, actions);
        carry_out(actions, start);
        if (agreed) break;
      }
      actions = {};
      const std::uint64_t t_a = membership.finish_rejoin(start, actions);
      carry_out(actions, start);
      GOSSIP_LOG(kInfo) << "rejoining: checkpoint at iteration " << start
                        << ", neighbours at up to " << *ahead << "; jumping to iteration " << t_a
                        << " (" << membership.agreed() << " of " << everyone.size()
                        << " neighbours accepted)";
      start = t_a;
      if (start < total) rejoin_at = t_a;
      result.iterations_done = start;
    }
  }

  for (std::uint64_t t = start; t < total; ++t) {
    const sgd::SamplerState before = sampler.state();
    if (interrupted()) return stop_now(t, before, kExitStopped, "stop requested (signal)");
    if (carry_on) carry_out(membership.start_iteration(t, exchange.take_admissions()), t);
    const std::int64_t it = static_cast<std::int64_t>(t);
    std::vector<topology::Neighbor> in = topology.in_neighbors(self, it);
    std::vector<topology::Neighbor> out = topology.out_neighbors(self, it);
    if (carry_on) {
      auto is_dropped = [&](const topology::Neighbor& nb) {
        return membership.is_dropped(nb.node);
      };
      std::erase_if(in, is_dropped);
      std::erase_if(out, is_dropped);
    }
    const auto planned = static_cast<std::uint32_t>(in.size());  // d_i(t)
    exchange.set_iteration(t, planned);
    to.clear();
    for (const topology::Neighbor& nb : out) to.push_back(nb.node);
    from.clear();
    for (const topology::Neighbor& nb : in) {
      from.push_back({nb.node, std::span<float>(inbox_host[nb.node].data(), d)});
    }
    std::span<const float> send(on_host ? x.data() : x_host.data(), d);

    // Rejoin iteration (t_a, or the first later one with a neighbour if none delivered at t_a —
    // an agreement the proposer withdrew too late): first the neighbours' x_j^t, then
    // x_t := their average is what we send.
    std::map<int, std::string> unusable;  // why a neighbour's x_j^t cannot be mixed
    if (rejoin_at && t >= *rejoin_at && !from.empty()) {
      std::unique_ptr<PendingExchange> first = exchange.begin(t, send, {}, from);
      for (const NeighbourFailure& f : first->wait(std::chrono::steady_clock::now() + deadline,
                                                   interrupted, [&exchange, t](int peer) {
                                                     auto at = exchange.peer_iteration(peer);
                                                     return at && *at < t;
                                                   })) {
        unusable.emplace(f.peer, f.status.to_string());
      }
      first.reset();
      std::vector<double> sum(d, 0.0);
      int count = 0;
      for (const Inbox& in_box : from) {
        if (unusable.count(in_box.peer)) continue;
        if (!all_finite(in_box.buffer)) {
          unusable.emplace(in_box.peer,
                           "its iteration-" + std::to_string(t) + " parameters contain NaN or Inf");
          continue;
        }
        for (std::size_t k = 0; k < d; ++k) sum[k] += in_box.buffer[k];
        ++count;
      }
      if (count > 0) {
        std::vector<float> avg(d);
        for (std::size_t k = 0; k < d; ++k) avg[k] = static_cast<float>(sum[k] / count);
        backend.copy_to_device(x.data(), avg.data(), d);
        backend.synchronize();
        if (!on_host) std::copy(avg.begin(), avg.end(), x_host.data());
        GOSSIP_LOG(kInfo) << "rejoined at iteration " << t << ": x := average of " << count
                          << " neighbours";
        metrics.event(t, "rejoined",
                      "x := average of " + std::to_string(count) + " neighbours' parameters");
        rejoin_at.reset();
      }
      from.clear();  // received already
    }

    IterationStats stats;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<PendingExchange> pending;
    if (overlap) pending = exchange.begin(t, send, to, from);
    sgd::gather(*problem.train, sampler.next(), batch);
    stats.loss = model.loss_and_grad(x.data(), batch, grad.data());
    auto t1 = std::chrono::steady_clock::now();
    stats.compute_s = std::chrono::duration<double>(t1 - t0).count();
    auto exchange_start = overlap ? t0 : t1;
    if (!overlap) pending = exchange.begin(t, send, to, from);
    // A neighbour that is connected but still finishing iteration t-1 (held up by a failure
    // elsewhere) is waited for longer; under fail-stop only the deadline counts, as before.
    std::function<bool(int)> behind;
    if (carry_on) {
      behind = [&exchange, t](int peer) {
        std::optional<std::uint64_t> at = exchange.peer_iteration(peer);
        return at && *at < t;
      };
    }
    std::vector<NeighbourFailure> failures =
        pending->wait(std::chrono::steady_clock::now() + deadline, interrupted, behind);
    pending.reset();
    // Why a neighbour's x_j^t cannot be mixed: it did not arrive whole, or it is not finite.
    for (const NeighbourFailure& f : failures) {
      unusable.emplace(f.peer, f.status.to_string());
    }
    for (const topology::Neighbor& nb : in) {
      if (!unusable.count(nb.node) &&
          !all_finite(std::span<const float>(inbox_host[nb.node].data(), d))) {
        unusable.emplace(nb.node,
                         "its iteration-" + std::to_string(t) + " parameters contain NaN or Inf");
      }
    }
    if (!unusable.empty() && interrupted()) {
      if (Status s = sampler.restore(before); !s.is_ok()) return fail(kExitError, s);
      return stop_now(t, before, kExitStopped, "stop requested (signal)");
    }
    std::map<int, std::uint32_t> used;  // neighbour -> its planned degree d_j(t)
    if (!carry_on) {
      if (!unusable.empty()) {
        // The abandoned iteration's batch is drawn again on resume.
        if (Status s = sampler.restore(before); !s.is_ok()) return fail(kExitError, s);
        std::string why;
        for (const auto& [peer, reason] : unusable) {
          GOSSIP_LOG(kError) << "neighbour " << peer << " failed at iteration " << t << ": "
                             << reason;
          why += (why.empty() ? "" : "; ") + std::string("neighbour ") + std::to_string(peer) +
                 ": " + reason;
        }
        return stop_now(t, before, kExitNeighbourFailed, why);
      }
      for (const topology::Neighbor& nb : in) used[nb.node] = 0;
    } else {
      // Verdict phase: the edge is used at t iff both ends have each other's x^t and both
      // verdicts arrived; otherwise both ends drop it from t on.
      std::vector<int> peers;
      for (const topology::Neighbor& nb : in) {
        peers.push_back(nb.node);
        exchange.send_verdict(nb.node, {t, unusable.count(nb.node) == 0, planned});
      }
      std::map<int, Verdict> verdicts;
      if (!peers.empty()) {
        verdicts = exchange.wait_verdicts(t, peers, std::chrono::steady_clock::now() + deadline,
                                          interrupted);
      }
      if (verdicts.size() < peers.size() && interrupted()) {
        if (Status s = sampler.restore(before); !s.is_ok()) return fail(kExitError, s);
        return stop_now(t, before, kExitStopped, "stop requested (signal)");
      }
      MembershipActions actions;
      used = membership.decide(peers, unusable, verdicts, actions);
      carry_out(actions, t);
      if (used.size() < peers.size()) {
        GOSSIP_LOG(kWarning) << "active degree dropped to " << used.size() << " at iteration " << t;
        if (membership.partitioned()) {
          GOSSIP_LOG(kWarning) << "partitioned: no neighbours left at iteration " << t
                               << "; training alone";
          metrics.event(t, "partitioned", "no neighbours left; training alone");
        }
      }
    }
    auto t2 = std::chrono::steady_clock::now();
    stats.wait_s = std::chrono::duration<double>(t2 - t1).count();
    stats.exchange_s = std::chrono::duration<double>(t2 - exchange_start).count();
    if (!on_host) {
      for (const auto& [j, dj] : used) {
        backend.copy_to_device(inbox_device[j].data(), inbox_host[j].data(), d);
      }
    }
    // W(t)'s row i, logged when it changed.
    const RowWeights w = row_weights(topology, self, it, mh, planned, used);
    std::vector<std::pair<int, double>> row = w.row(self);
    if (!row_logged || row != last_row) {
      metrics.weights(t, row);
      last_row = std::move(row);
      row_logged = true;
    }
    // u_t, then x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t (terms in increasing j, self included).
    auto t3 = std::chrono::steady_clock::now();
    optimizer.direction(backend, x.data(), grad.data(),
                        optimizer.state_size() > 0 ? state.data() : nullptr, update.data());
    const float gamma = static_cast<float>(optimizer.learning_rate(it));
    terms.clear();
    const float self_weight = static_cast<float>(w.self);
    bool self_added = self_weight == 0.0f;
    for (const auto& [j, wj] : w.neighbours) {
      if (!self_added && j > self) {
        terms.push_back({self_weight, x.data()});
        self_added = true;
      }
      terms.push_back(
          {static_cast<float>(wj), on_host ? inbox_host[j].data() : inbox_device[j].data()});
    }
    if (!self_added) terms.push_back({self_weight, x.data()});
    if (!on_host) backend.synchronize();
    backend.mix(next.data(), terms, gamma, update.data(), d);
    std::swap(x, next);
    if (!on_host) backend.copy_to_host(x_host.data(), x.data(), d);
    stats.mix_s = seconds_since(t3);
    stats.iteration_s = seconds_since(t0);
    stats.lr = gamma;
    std::uint64_t sent = exchange.bytes_sent(), received = exchange.bytes_received();
    stats.bytes_sent = sent - sent_before;
    stats.bytes_received = received - received_before;
    sent_before = sent;
    received_before = received;
    metrics.add_iteration(t, stats);
    if (!std::isfinite(stats.loss)) {
      // Diverged (common/divergence.h): stop without writing x anywhere.
      metrics.flush_iterations();
      const Status s = diverged(it, "the training loss is " + std::to_string(stats.loss));
      metrics.event(t, "diverged", s.message());
      result.iterations_done = t;
      return fail(kExitDiverged, s);
    }

    const std::uint64_t done = t + 1;
    result.iterations_done = done;
    if (cfg.eval_every() > 0 && done % cfg.eval_every() == 0 && done < total) {
      sgd::EvalResult e = model.evaluate(x.data(), *eval_set);
      metrics.eval(done, e.loss, e.accuracy);
    }
    if (cfg.checkpoint().every() > 0 && done % cfg.checkpoint().every() == 0 && done < total) {
      if (Status s = save(done, sampler.state()); !s.is_ok()) {
        if (s.code() == StatusCode::kAborted) {
          metrics.flush_iterations();
          metrics.event(done, "diverged", s.message());
          return fail(kExitDiverged, s);
        }
        // Training goes on: a full disk should not cost the run, only durability (logged).
        GOSSIP_LOG(kError) << "periodic checkpoint failed: " << s.to_string();
        metrics.event(done, "checkpoint_failed", s.to_string());
      }
    }
  }

  metrics.flush_iterations();
  result.iterations_done = std::max<std::uint64_t>(start, total);
  sgd::EvalResult e = model.evaluate(x.data(), *problem.test);
  metrics.eval(result.iterations_done, e.loss, e.accuracy);
  result.final_test_accuracy = e.accuracy;
  result.final_test_loss = e.loss;
  if (Status s = save(result.iterations_done, sampler.state()); !s.is_ok()) {
    if (s.code() == StatusCode::kAborted) {
      metrics.event(result.iterations_done, "diverged", s.message());
      return fail(kExitDiverged, s);
    }
    return fail(kExitError, s.with_context("final checkpoint"));
  }
  // Final parameters as raw little-endian float32: --dump-params DIR (DIR/node_<id>.f32) and the
  // config's final_params_path ("{node}" replaced by this node's id); parent directories created.
  std::vector<std::pair<std::string, const char*>> outputs;  // path, what asked for it
  if (!options.dump_params_dir.empty()) {
    outputs.emplace_back(options.dump_params_dir + "/node_" + std::to_string(self) + ".f32",
                         "--dump-params");
  }
  if (!cfg.final_params_path().empty()) {
    std::string path = cfg.final_params_path();
    for (std::size_t at; (at = path.find("{node}")) != std::string::npos;)
      path.replace(at, 6, std::to_string(self));
    outputs.emplace_back(std::move(path), "final_params_path");
  }
  if (!outputs.empty()) {
    std::vector<float> host(d);
    backend.copy_to_host(host.data(), x.data(), d);
    if (!all_finite(host)) {
      return fail(kExitDiverged, diverged(static_cast<std::int64_t>(result.iterations_done),
                                          "the final parameters contain NaN or Inf (not written)"));
    }
    const std::string_view bytes(reinterpret_cast<const char*>(host.data()), d * sizeof(float));
    for (const auto& [path, what] : outputs) {
      Status s = Status::ok();
      if (const std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
        s = env.create_dirs(path.substr(0, slash));
      }
      if (s.is_ok()) s = env.write_file_atomic(path, bytes);
      if (!s.is_ok()) return fail(kExitError, s.with_context(what));
    }
  }
  // The metrics file is an output the user asked for: lost lines are an error, not exit 0.
  if (Status s = metrics.close(); !s.is_ok()) return fail(kExitError, s);
  result.exit_code = kExitOk;
  result.message = "done";
  GOSSIP_LOG(kInfo) << "finished " << result.iterations_done
                    << " iterations; local model test accuracy " << e.accuracy << ", loss "
                    << e.loss;
  return result;
}

}  // namespace gossip::daemon
