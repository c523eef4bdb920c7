// The round simulator (see round_simulator.h). Each node's computations are the calls gossipd's
// make for it, in the same order: the step is SgdStep's (gather the batch, loss_and_grad, the
// optimizer's direction, x ← x − γ u by Backend::mix), the round's arithmetic sgd/round.h's.
#include "sim/round_simulator.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "common/check.h"
#include "sgd/choco.h"
#include "sgd/ring_allreduce.h"

namespace gossip::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

Result<std::unique_ptr<RoundSimulator>> RoundSimulator::create(const sgd::Problem& problem,
                                                               const topology::Topology* topology,
                                                               RunConfig config) {
  GOSSIP_RETURN_IF_ERROR(config.validate());
  GOSSIP_RETURN_IF_ERROR(config.round.validate());
  std::unique_ptr<RoundSimulator> s(new RoundSimulator());
  s->problem_ = &problem;
  s->config_ = config;
  s->round_ = config.round;
  s->n_ = problem.config.num_nodes;
  s->d_ = problem.spec.num_params();
  GOSSIP_RETURN_IF_ERROR(check_topology(topology, config.algorithm, s->n_));
  if (config.algorithm == Algorithm::kDpsgd) s->topology_ = topology;
  s->workers_.resize(worker_count(config.threads, s->n_));
  for (Worker& w : s->workers_) {
    GOSSIP_ASSIGN_OR_RETURN(w.backend, sgd::make_backend(sgd::Device::kCpu, 1));
    GOSSIP_ASSIGN_OR_RETURN(w.model, w.backend->make_model(problem.spec));
    w.grad.assign(s->d_, 0.0f);
    w.u.assign(s->d_, 0.0f);
  }
  s->optimizer_ = std::make_unique<sgd::Optimizer>(config.optimizer, s->d_);
  GOSSIP_ASSIGN_OR_RETURN(s->samplers_, node_samplers(problem, config.batch_size));
  s->eval_train_ = sgd::first_examples(problem.train, config.eval_examples);
  s->eval_test_ = sgd::first_examples(problem.test, config.eval_examples);
  return s;
}

template <typename Fn>
void RoundSimulator::for_nodes(const Fn& fn) {
  const int workers = static_cast<int>(workers_.size());
  const auto range = [&](int w) {
    const int first = static_cast<int>(std::int64_t{n_} * w / workers);
    const int last = static_cast<int>(std::int64_t{n_} * (w + 1) / workers);
    for (int i = first; i < last; ++i) fn(workers_[w], i);
  };
  if (workers == 1) {
    range(0);
    return;
  }
#pragma omp parallel num_threads(workers)
  {
    for (int w = omp_get_thread_num(); w < workers; w += omp_get_num_threads()) range(w);
  }
}

void RoundSimulator::inner_steps(Worker& w, int i, std::int64_t t0, std::int64_t t1) {
  Node& node = nodes_[i];
  const Clock& clock = Clock::system();
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t start_ns = clock.monotonic_ns();
    sgd::gather(*problem_->train, samplers_[i].next(), w.batch);
    node.batch_loss += w.model->loss_and_grad(node.x.data(), w.batch, w.grad.data());
    ++node.batch_count;
    optimizer_->step(*w.backend, t, node.x.data(), w.grad.data(),
                     node.state.empty() ? nullptr : node.state.data(), w.u.data());
    w.compute_s += 1e-9 * static_cast<double>(clock.monotonic_ns() - start_ns);
    ++w.compute_steps;
  }
}

// Round r's gossip messages m_i = fl(a_i − Δ_i) (and, for CHOCO, each edge's compressed
// difference against its copy as it is now), from every node's progress node.delta.
void RoundSimulator::post_messages(std::int64_t r) {
  const topology::Topology& topo = *topology_;
  const sgd::CompressionSpec& spec = round_.compression;
  sent_.round = r;
  sent_.messages.assign(static_cast<std::size_t>(n_), std::vector<float>(d_));
  sent_.edges.clear();
  std::vector<float> diff(d_);
  for (int i = 0; i < n_; ++i) {
    sgd::pseudo_gradient(sent_.messages[i], nodes_[i].anchor, nodes_[i].delta);
    const auto out = topo.out_neighbors(i, r);
    bytes_sent_ += static_cast<double>(
        (round_.choco() ? sgd::gossip_message_bytes(spec, d_) : 4 * d_) * out.size());
    if (!round_.choco()) continue;
    for (const topology::Neighbor& o : out) {
      std::vector<float>& copy = copies_[{i, o.node}];
      if (copy.empty()) copy.assign(d_, 0.0f);
      std::vector<std::byte>& q = sent_.edges[{i, o.node}];
      q.resize(sgd::compressed_bytes(spec, d_));
      sgd::pseudo_gradient(diff, sent_.messages[i], copy);
      sgd::compress(spec, diff, q);
    }
  }
}

// The messages of round sent_.round arrived: every edge's copy takes its message, then every node
// combines (sgd/round.h) and takes its outer step on its anchor.
void RoundSimulator::combine_messages() {
  const topology::Topology& topo = *topology_;
  const std::int64_t r = sent_.round;
  for (auto& [edge, q] : sent_.edges)
    sgd::choco_decode_apply(round_.compression, q, copies_.at(edge));
  for_nodes([&](Worker& w, int i) {
    Node& node = nodes_[i];
    std::vector<float> z(d_), d(d_);
    std::vector<sgd::MixTerm> terms;
    std::vector<sgd::RoundTerm> in, out;
    if (!round_.choco()) {
      for (const topology::Neighbor& nb : topo.in_neighbors(i, r)) {
        in.push_back({nb.node, nb.weight, sent_.messages[nb.node].data()});
      }
      sgd::plain_gossip_terms(i, topo.self_weight(i, r), sent_.messages[i].data(), in, terms);
    } else {
      for (const topology::Neighbor& nb : topo.in_neighbors(i, r)) {
        in.push_back({nb.node, nb.weight, copies_.at({nb.node, i}).data()});
      }
      for (const topology::Neighbor& nb : topo.out_neighbors(i, r)) {
        out.push_back({nb.node, nb.weight, copies_.at({i, nb.node}).data()});
      }
      sgd::choco_gossip_terms(sent_.messages[i].data(), round_.choco_step, in, out, terms);
    }
    sgd::combine(*w.backend, z, terms);
    sgd::gossip_outer_step(round_.outer, node.anchor, z, d, node.momentum);
  });
}

// Local-step gossip's round (algorithms/local_gossip.h), every edge used.
void RoundSimulator::gossip_round(std::int64_t r, std::int64_t t0, std::int64_t t1,
                                  bool final_round) {
  for_nodes([&](Worker& w, int i) { inner_steps(w, i, t0, t1); });
  for (Node& node : nodes_) sgd::pseudo_gradient(node.delta, node.start, node.x);  // Δ = fl(s − y)
  if (!round_.overlap) {
    post_messages(r);
    combine_messages();
    for (Node& node : nodes_) node.x = node.start = node.anchor;
    return;
  }
  // Overlap: round r−1's messages, in flight during this round, arrive now; round r's go out, and
  // the next round starts at the message itself, fl(a − Δ).
  if (pending_) combine_messages();
  post_messages(r);
  pending_ = true;
  for (int i = 0; i < n_; ++i) nodes_[i].x = nodes_[i].start = sent_.messages[i];
  if (final_round) {
    combine_messages();
    pending_ = false;
    for (Node& node : nodes_) node.x = node.start = node.anchor;
  }
}

// DiLoCo's round (algorithms/diloco.h): the nodes share the start, the anchor and the momentum.
void RoundSimulator::diloco_round(std::int64_t r, std::int64_t t0, std::int64_t t1,
                                  bool final_round) {
  (void)r;
  const sgd::CompressionSpec& spec = round_.compression;
  for_nodes([&](Worker& w, int i) { inner_steps(w, i, t0, t1); });
  std::vector<std::vector<float>> inputs(static_cast<std::size_t>(n_), std::vector<float>(d_));
  std::vector<float> delta(d_);
  std::vector<std::byte> bytes(sgd::compressed_bytes(spec, d_));
  for (int i = 0; i < n_; ++i) {
    sgd::pseudo_gradient(delta, nodes_[i].start, nodes_[i].x);  // Δ = fl(s − y)
    sgd::allreduce_round_input(spec, delta, nodes_[i].residual, bytes, inputs[i]);
    bytes_sent_ += static_cast<double>(sgd::ring_bytes_sent(spec, n_, d_, i));
  }
  std::vector<float> mean(d_);
  auto apply_mean = [&](const std::vector<std::vector<float>>& in) {
    std::vector<std::span<const float>> spans(in.begin(), in.end());
    sgd::ring_allreduce_mean_reference(spec, spans, mean);
    for (Node& node : nodes_) sgd::outer_step(round_.outer, node.anchor, mean, node.momentum);
  };
  if (!round_.overlap) {
    apply_mean(inputs);
    for (Node& node : nodes_) node.x = node.start = node.anchor;
    return;
  }
  if (pending_) apply_mean(pending_inputs_);
  pending_inputs_ = inputs;
  pending_ = true;
  if (final_round) {
    apply_mean(pending_inputs_);
    pending_ = false;
    for (Node& node : nodes_) node.x = node.start = node.anchor;
    return;
  }
  for (int i = 0; i < n_; ++i) {
    Node& node = nodes_[i];
    sgd::pseudo_gradient(delta, node.start, node.x);
    sgd::pseudo_gradient(node.start, node.anchor, delta);  // the next start: fl(a − Δ)
    node.x = node.start;
  }
}

Result<RunTrace> RoundSimulator::run(const ProgressFn& progress) {
  const std::vector<float> x0 = problem_->initial_params();
  nodes_.assign(static_cast<std::size_t>(n_), Node{});
  const bool compressed = round_.compression.kind != sgd::CompressionKind::kNone;
  for (Node& node : nodes_) {
    node.x = node.anchor = node.start = x0;
    node.delta.assign(d_, 0.0f);
    node.momentum.assign(round_.outer.state_size(d_), 0.0f);
    node.residual.assign(compressed ? d_ : 0, 0.0f);
    node.state.assign(optimizer_->state_size(), 0.0f);
  }
  copies_.clear();
  pending_ = false;
  bytes_sent_ = 0;
  rounds_ = 0;
  const std::int64_t h = round_.local_steps;
  Result<RunTrace> trace = run_loop(
      config_,
      [&](std::int64_t t0) {
        const std::int64_t total = config_.iterations, t1 = std::min(total, t0 + h), r = t0 / h;
        if (config_.algorithm == Algorithm::kDpsgd) {
          gossip_round(r, t0, t1, t1 == total);
        } else {
          diloco_round(r, t0, t1, t1 == total);
        }
        ++rounds_;
        return t1;
      },
      [&] { return std::span<const float>(nodes_[0].x.data(), d_); },
      [&](std::int64_t t) { return evaluate(t); }, progress);
  if (!trace.is_ok()) return trace;
  double compute_s = 0;
  std::int64_t steps = 0;
  for (const Worker& w : workers_) {
    compute_s += w.compute_s;
    steps += w.compute_steps;
  }
  trace->compute_s_per_step = steps > 0 ? compute_s / static_cast<double>(steps) : 0;
  return trace;
}

StateMatrix RoundSimulator::params() const {
  StateMatrix x(static_cast<Eigen::Index>(d_), n_);
  for (int i = 0; i < n_; ++i) std::memcpy(x.col(i).data(), nodes_[i].x.data(), d_ * sizeof(float));
  return x;
}

double RoundSimulator::bytes_per_round() const {
  return rounds_ > 0 ? bytes_sent_ / (static_cast<double>(rounds_) * n_) : 0;
}

EvalPoint RoundSimulator::evaluate(std::int64_t iteration) {
  double loss = 0;
  std::int64_t count = 0;
  for (Node& node : nodes_) {
    loss += node.batch_loss;
    count += node.batch_count;
    node.batch_loss = 0;
    node.batch_count = 0;
  }
  const StateMatrix x = params();
  std::vector<double> accuracy;
  if (problem_->test->is_classification() && config_.eval_local) {
    accuracy.resize(static_cast<std::size_t>(n_));
    for_nodes([&](Worker& w, int i) {
      accuracy[i] = w.model->evaluate(nodes_[i].x.data(), *eval_test_).accuracy;
    });
  }
  EvalPoint p = evaluate_models(x, *workers_[0].model, *eval_train_, *eval_test_, accuracy);
  p.iteration = iteration;
  p.batch_loss = count > 0 ? loss / static_cast<double>(count) : kNaN;
  return p;
}

}  // namespace gossip::sim
