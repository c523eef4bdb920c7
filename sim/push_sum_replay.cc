// The replay of an asynchronous push-sum run (see push_sum_replay.h). States are kept per (node,
// iteration) and dropped when their last reader — the node's own next iteration and each
// out-neighbour that mixes the message — is done, so memory follows the messages in flight, not
// the run's length.
#include "sim/push_sum_replay.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "common/check.h"
#include "topology/push_sum.h"

namespace gossip::sim {

namespace {

// p_ij(s): the weight node j gave the message it sent node i at its iteration s (j == i: what
// node i keeps of its own state at s).
double push_sum_entry(const topology::Topology& topology, int i, int j, std::int64_t s) {
  for (const auto& [node, p] : topology::push_sum_row(topology, i, s)) {
    if (node == j) return p;
  }
  GOSSIP_CHECK(false) << "node " << j << " does not send to node " << i << " at " << s
                      << " (read_push_sum_logs checks this)";
  return 0;
}

struct State {
  StateMatrix z;  // rows × 1
  float w = 1;
};

std::string hex(float w) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(w));
  return buf;
}

}  // namespace

Result<PushSumReplayed> replay_push_sum(const PushSumLogs& logs,
                                        const topology::Topology& topology,
                                        const StateMatrix& start, sgd::Backend& backend,
                                        const LocalStepFn& step, const ProgressFn& progress) {
  const int n = logs.num_nodes;
  const std::int64_t T = logs.iterations;
  GOSSIP_CHECK_EQ(start.cols(), n);
  GOSSIP_CHECK_EQ(topology.num_nodes(), n);
  const Eigen::Index rows = start.rows();
  const auto slots = static_cast<std::size_t>(T + 1);
  // readers[i][s]: the reads of z_i^s still to come (node i's own step s, each message taken).
  std::vector<std::vector<int>> readers(static_cast<std::size_t>(n), std::vector<int>(slots, 1));
  for (const PushSumOrder& log : logs.logs) {
    for (const auto& line : log.consumed) {
      for (const PushSumMessage& m : line) ++readers[m.node][static_cast<std::size_t>(m.iteration)];
    }
    for (const PushSumMessage& m : log.drained) {
      ++readers[m.node][static_cast<std::size_t>(m.iteration)];
    }
  }
  std::vector<std::vector<std::unique_ptr<State>>> states(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    states[i].resize(slots + 1);  // [T + 1]: after the drain
    states[i][0] = std::make_unique<State>(State{start.col(i), 1.0f});
  }
  const auto read = [&](int j, std::int64_t s) {
    if (--readers[j][static_cast<std::size_t>(s)] == 0) states[j][static_cast<std::size_t>(s)].reset();
  };

  std::vector<std::pair<int, double>> row;
  std::vector<float> weights;
  std::vector<const float*> xs;
  std::vector<sgd::MixTerm> terms;
  std::int64_t done = 0;
  for (const PushSumStep& st : logs.order) {
    const int i = st.node;
    const std::int64_t t = st.iteration;
    const bool drain = t == T;
    const PushSumOrder& log = logs.logs[i];
    const std::vector<PushSumMessage>& taken =
        drain ? log.drained : log.consumed[static_cast<std::size_t>(t)];
    const State& own = *states[i][static_cast<std::size_t>(t)];
    auto next = std::make_unique<State>();
    if (drain && taken.empty()) {
      *next = own;  // nothing in flight: z and w stay
    } else {
      // The row: the messages in (j, s) order, node i's own entry before the first j > i.
      row.clear();
      weights.clear();
      xs.clear();
      const auto add_own = [&] {
        row.emplace_back(i, drain ? 1.0 : push_sum_entry(topology, i, i, t));
        weights.push_back(own.w);
        xs.push_back(own.z.data());
      };
      bool own_added = false;
      for (const PushSumMessage& m : taken) {
        if (!own_added && m.node > i) {
          add_own();
          own_added = true;
        }
        const State& sent = *states[m.node][static_cast<std::size_t>(m.iteration)];
        row.emplace_back(m.node, push_sum_entry(topology, i, m.node, m.iteration));
        weights.push_back(sent.w);
        xs.push_back(sent.z.data());
      }
      if (!own_added) add_own();
      const topology::PushSumMix mix = topology::push_sum_mix(i, row, weights);
      terms.clear();
      std::size_t k = 0;
      for (std::size_t e = 0; e < row.size(); ++e) {
        const double c = row[e].first == i ? mix.self : mix.neighbours[k++].second;
        terms.push_back({static_cast<float>(c), xs[e]});
      }
      next->z.resize(rows, 1);
      if (drain) {
        backend.mix(next->z.data(), terms, 0.0f, nullptr, static_cast<std::size_t>(rows));
      } else {
        const LocalStep local = step(i, t, own.z.data());
        backend.mix(next->z.data(), terms, mix.scaled_gamma(local.gamma), local.u,
                    static_cast<std::size_t>(rows));
      }
      next->w = mix.weight;
    }
    states[i][static_cast<std::size_t>(t + 1)] = std::move(next);
    read(i, t);
    for (const PushSumMessage& m : taken) read(m.node, m.iteration);
    if (progress) progress(++done, static_cast<std::int64_t>(logs.order.size()));
  }

  PushSumReplayed out;
  out.params.resize(rows, n);
  out.weights.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const State& last = *states[i][slots];
    out.params.col(i) = last.z;
    out.weights[static_cast<std::size_t>(i)] = last.w;
  }
  for (int i = 0; i < n; ++i) {
    const PushSumOrder& log = logs.logs[i];
    const float w = out.weights[static_cast<std::size_t>(i)];
    if (std::bit_cast<std::uint32_t>(w) != std::bit_cast<std::uint32_t>(log.weight)) {
      return failed_precondition(
          log.path + ":" + std::to_string(PushSumOrder::line_of(T + 1)) + ": weight " +
          hex(log.weight) + ", but the replay ends node " + std::to_string(i) + " with " + hex(w) +
          ": the replay does not reproduce this run (another config, topology or build?)");
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
      replay_push_sum(logs, topology_, start, sim.backend(),
                      [&](int i, std::int64_t t, const float* z) {
                        return LocalStep{sim.replay_direction(i, t, z), sim.learning_rate(t)};
                      },
                      progress));
  const StateMatrix params = out.params.topRows(static_cast<Eigen::Index>(x0.size()));
  out.params = params;
  return out;
}

}  // namespace gossip::sim
