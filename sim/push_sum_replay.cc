// The replay of an asynchronous push-sum run (see push_sum_replay.h). States are kept per (node,
// iteration) and dropped when their last reader — the node's own next iteration and each
// out-neighbour that mixes the message — is done, so memory follows the messages in flight, not
// the run's length.
#include "sim/push_sum_replay.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "common/check.h"
#include "topology/push_sum.h"

namespace gossip::sim {

namespace {

struct State {
  StateMatrix z;  // rows × 1
  float w = 1;
};

std::string hex(float w) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(w));
  return buf;
}

// Node i's iteration t (`drain`: its drain, `step` not called) from its state `own` and the
// messages `taken`, as push_sum_replay.h states it; `sent(m)` is the state message m carries.
template <typename Sent>
State mix_step(const topology::Topology& topology, int i, std::int64_t t, bool drain,
               const std::vector<int>& kept, const State& own,
               const std::vector<PushSumMessage>& taken, const Sent& sent, sgd::Backend& backend,
               const LocalStepFn& step) {
  const bool any_mass =
      std::any_of(taken.begin(), taken.end(), [](const PushSumMessage& m) { return !m.empty; });
  if (drain && !any_mass) return own;  // nothing with mass was in flight: z and w stay
  // The row: the messages in (j, s) order, node i's own entry before the first j > i.
  std::vector<std::pair<int, double>> row;
  std::vector<float> weights;
  std::vector<const float*> xs;
  const auto add = [&](int j, double p, const State& state) {
    row.emplace_back(j, p);
    weights.push_back(state.w);
    xs.push_back(state.z.data());
  };
  const auto add_own = [&] {
    double p = drain ? 1.0 : topology::push_sum_entry(topology, i, i, t);
    if (!drain) {
      for (const int o : kept)
        p += topology::push_sum_entry(topology, o, i, t);  // skipped: stays here
    }
    add(i, p, own);
  };
  bool own_added = false;
  for (const PushSumMessage& m : taken) {
    if (m.empty) continue;
    if (!own_added && m.node > i) {
      add_own();
      own_added = true;
    }
    add(m.node, topology::push_sum_entry(topology, i, m.node, m.iteration), sent(m));
  }
  if (!own_added) add_own();
  const topology::PushSumMix mix = topology::push_sum_mix(i, row, weights);
  std::vector<sgd::MixTerm> terms;
  std::size_t k = 0;
  for (std::size_t e = 0; e < row.size(); ++e) {
    const double c = row[e].first == i ? mix.self : mix.neighbours[k++].second;
    terms.push_back({static_cast<float>(c), xs[e]});
  }
  State next;
  next.z.resize(own.z.rows(), 1);
  const auto rows = static_cast<std::size_t>(own.z.rows());
  if (drain) {
    backend.mix(next.z.data(), terms, 0.0f, nullptr, rows);
  } else {
    const LocalStep local = step(i, t, own.z.data());
    backend.mix(next.z.data(), terms, local.gamma, local.u, rows);
  }
  next.w = mix.weight;
  return next;
}

}  // namespace

Result<PushSumReplayed> replay_push_sum(const PushSumLogs& logs, const topology::Topology& topology,
                                        const StateMatrix& start, sgd::Backend& backend,
                                        const LocalStepFn& step, const ProgressFn& progress) {
  const int n = logs.num_nodes;
  const std::int64_t T = logs.iterations;
  const auto ran = [&](int i) { return logs.logs[static_cast<std::size_t>(i)].ran(); };
  GOSSIP_CHECK_EQ(start.cols(), n);
  GOSSIP_CHECK_EQ(topology.num_nodes(), n);
  const auto slot = [](std::int64_t s) { return static_cast<std::size_t>(s); };
  // readers[i][s]: the reads of z_i^s still to come (node i's own step s, each message with mass
  // taken).
  std::vector<std::vector<int>> readers(slot(n), std::vector<int>(slot(T + 1), 1));
  const auto count = [&](const std::vector<PushSumMessage>& taken) {
    for (const PushSumMessage& m : taken) {
      if (!m.empty) ++readers[m.node][slot(m.iteration)];
    }
  };
  for (const PushSumOrder& log : logs.logs) {
    for (const auto& line : log.consumed) count(line);
    count(log.drained);
  }
  // states[i][s]: (z_i^s, w_i^s) while someone will read it, s ≤ E_i; [T + 1]: after the drain.
  std::vector<std::vector<std::unique_ptr<State>>> states(slot(n));
  for (int i = 0; i < n; ++i) {
    states[i].resize(slot(T + 2));
    states[i][0] = std::make_unique<State>(State{start.col(i), 1.0f});
  }
  const auto read = [&](int j, std::int64_t s) {
    if (--readers[j][slot(s)] == 0) states[j][slot(s)].reset();
  };
  const auto sent = [&](const PushSumMessage& m) -> const State& {
    return *states[m.node][slot(m.iteration)];
  };
  std::int64_t done = 0;
  for (const auto& [i, t] : logs.order) {
    const bool drain = t == ran(i);
    const std::vector<PushSumMessage>& taken =
        drain ? logs.logs[i].drained : logs.logs[i].consumed[slot(t)];
    states[i][slot(drain ? T + 1 : t + 1)] = std::make_unique<State>(
        mix_step(topology, i, t, drain, drain ? std::vector<int>() : logs.logs[i].kept[slot(t)],
                 *states[i][slot(t)], taken, sent, backend, step));
    read(i, t);
    for (const PushSumMessage& m : taken) {
      if (!m.empty) read(m.node, m.iteration);
    }
    if (progress) progress(++done, static_cast<std::int64_t>(logs.order.size()));
  }

  PushSumReplayed out;
  out.params.resize(start.rows(), n);
  out.weights.resize(slot(n));
  for (int i = 0; i < n; ++i) {
    const State& last = *states[i][slot(T + 1)];
    out.params.col(i) = last.z;
    out.weights[slot(i)] = last.w;
    const PushSumOrder& log = logs.logs[i];
    if (std::bit_cast<std::uint32_t>(last.w) != std::bit_cast<std::uint32_t>(log.weight)) {
      return failed_precondition(
          log.path + ":" + std::to_string(PushSumOrder::line_of(log.ran() + 1)) + ": weight " +
          hex(log.weight) + ", but the replay ends node " + std::to_string(i) + " with " +
          hex(last.w) + ": the replay does not reproduce this run (another config, topology or " +
          "build?)");
    }
  }
  return out;
}

Result<std::unique_ptr<PushSumReplay>> PushSumReplay::create(const ExperimentConfig& config) {
  if (!config.push_sum) return invalid_argument("a push-sum replay needs a push-sum config");
  if (config.topologies.size() != 1) return invalid_argument("a replay takes one topology");
  std::unique_ptr<PushSumReplay> r(new PushSumReplay());
  sgd::ProblemConfig pc = config.problem;
  pc.num_nodes = config.nodes;
  GOSSIP_RETURN_IF_ERROR(pc.validate());
  GOSSIP_ASSIGN_OR_RETURN(r->problem_, sgd::make_problem(pc));
  GOSSIP_ASSIGN_OR_RETURN(r->topology_,
                          make_topology(config.topologies[0], config.nodes, config.weights));
  RunConfig rc = config.run;
  rc.algorithm = Algorithm::kPushSum;
  rc.threads = 1;  // one node at a time
  GOSSIP_ASSIGN_OR_RETURN(r->simulator_, Simulator::create(r->problem_, &r->topology_, rc));
  return r;
}

Result<PushSumLogs> PushSumReplay::read_logs(const std::string& dir, Env& env) const {
  return read_push_sum_logs(dir, topology_, iterations(), env);
}

Result<PushSumReplayed> PushSumReplay::run(const PushSumLogs& logs, const ProgressFn& progress) {
  Simulator& sim = *simulator_;
  GOSSIP_RETURN_IF_ERROR(sim.start_replay());
  // x_0 in every column, in the simulator's padded, aligned layout (its gradient reads z there).
  const std::vector<float> x0 = problem_.initial_params();
  const auto rows = static_cast<Eigen::Index>(sim.rows());
  StateMatrix start = StateMatrix::Zero(rows, sim.num_nodes());
  for (int i = 0; i < sim.num_nodes(); ++i) {
    std::memcpy(start.col(i).data(), x0.data(), x0.size() * sizeof(float));
  }
  GOSSIP_ASSIGN_OR_RETURN(
      PushSumReplayed out,
      replay_push_sum(
          logs, topology_, start, sim.backend(),
          [&](int i, std::int64_t t, const float* z) {
            return LocalStep{sim.replay_direction(i, t, z), sim.learning_rate(t)};
          },
          progress));
  const StateMatrix params = out.params.topRows(static_cast<Eigen::Index>(x0.size()));
  out.params = params;
  return out;
}

}  // namespace gossip::sim
