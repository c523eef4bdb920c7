// Experiments: what `gossip-sim run|compare|sweep` do, as a library so tests can drive them.
//
// An experiment builds the problem (gossip_sgd) and the topologies (gossip_topology), runs the
// convergence of C-PSGD once and of D-PSGD once per topology, then prices the iterations with the
// cost model (sim/cost_model.h) for each communication scheme:
//
//   series "cpsgd-ps"         the C-PSGD run, timed as a parameter server
//   series "cpsgd-allreduce"  the same C-PSGD run, timed as ring allreduce (identical iterates:
//                             the two differ only in how the average travels)
//   series "dpsgd"            one per topology, timed with the overlapped gossip clock
//
// With rounds (RunConfig::round: local steps, an outer optimizer, compression, overlap) C-PSGD is
// DiLoCo, priced as "cpsgd-allreduce", and D-PSGD local-step gossip, priced as "dpsgd", each
// carrying its round settings (Series::rounds); per_step_baseline adds the per-step series.
//
// Because pricing is separate from convergence, a sweep over bandwidth, latency or stragglers
// reuses the runs; a sweep over nodes or topology reruns them.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sgd/problem.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"
#include "topology/topology.h"

namespace gossip::sim {

// A generator name ("ring", "torus", "exponential", "one_peer_exponential", "complete", ...) with
// n nodes and the weight scheme, or the path of a topology file (then `nodes` must be 0 or match).
// A torus of n nodes uses the most square rows × cols factorisation.
Result<topology::Topology> make_topology(const std::string& name_or_path, int nodes,
                                         topology::WeightScheme scheme);

// The communication graph the gossip clock takes, over one period of W(t): the in-neighbours of
// each node in each W(t) and its Δ (topology/comm_cost.h link_degree, as gossip-topo counts it).
struct CommGraph {
  std::vector<std::vector<std::vector<int>>> in_neighbours;
  std::vector<int> max_degree;
};
Result<CommGraph> comm_graph(const topology::Topology& topology);

struct CostConfig {
  Network net;
  // Seconds of one local step; nullopt: the mean measured on the real backend during the runs.
  std::optional<double> compute_s;
  // Parameters whose size the messages have; nullopt: the simulated model's own.
  std::optional<double> model_params;
  StragglerModel straggler;
  double cpu_share = 1.0;                              // CostInputs::cpu_share
  double cpu_s_per_byte = 0.0;                         // CostInputs::cpu_s_per_byte
  double message_overhead_s = 0.0;                     // CostInputs::message_overhead_s
  AllreduceModel allreduce = AllreduceModel::kTable1;  // CostInputs::allreduce
  bool asynchronous = false;                           // CostInputs::asynchronous
};

struct ExperimentConfig {
  sgd::ProblemConfig problem;  // num_nodes is overwritten with `nodes`
  RunConfig run;               // run.algorithm is set per series
  int nodes = 16;
  std::vector<std::string> topologies = {"ring"};
  topology::WeightScheme weights = topology::WeightScheme::kDefault;
  bool include_cpsgd = true;
  bool include_dpsgd = true;
  // The gossip series run push-sum (Stochastic Gradient Push, Algorithm::kPushSum) instead of
  // D-PSGD, priced as gossip (one message per out-neighbour per iteration).
  bool push_sum = false;
  // With rounds (run.round not one exchange per iteration): run the per-step algorithms too, so
  // that local-step gossip and DiLoCo are priced beside per-step D-PSGD and C-PSGD (compare).
  bool per_step_baseline = false;
  CostConfig cost;
  double target_loss = std::numeric_limits<double>::quiet_NaN();      // train loss of x̄ ≤ this
  double target_accuracy = std::numeric_limits<double>::quiet_NaN();  // test accuracy of x̄ ≥ this
};

// A convergence run with what is needed to price it.
struct Run {
  RunTrace trace;
  std::string topology;  // "" for C-PSGD
  int nodes = 0;
  double rho = std::numeric_limits<double>::quiet_NaN();  // per iteration, from gossip_topology
  // Per-iteration communication graph (D-PSGD): in-neighbours and Δ of each W(t) in the period.
  std::vector<std::vector<std::vector<int>>> in_neighbours;
  std::vector<int> max_degree;
  StateMatrix final_params;
  // Rounds (RunConfig::round not one exchange per iteration, the RoundSimulator): the round
  // settings and what one node sends per round, as measured.
  sgd::RoundConfig round;
  double bytes_per_round = 0;
};

// One priced series: a run under one communication scheme.
struct Series {
  std::string algorithm;  // "cpsgd-ps", "cpsgd-allreduce", "dpsgd"
  std::string topology;
  int nodes = 0;
  double rho = std::numeric_limits<double>::quiet_NaN();
  Scheme scheme = Scheme::kGossip;
  std::vector<EvalPoint> points;
  std::vector<double> time_s;  // simulated seconds at each point
  double compute_s = 0;        // per step, as priced
  double comm_s = 0;           // per iteration (gossip: per link)
  double message_bytes = 0;
  std::string rounds;         // "" (every iteration communicates) or "H=50 nesterov int8 ..."
  double bytes_per_node = 0;  // sent by one node over the whole run
  bool has_target = false;    // a target loss or accuracy was set
  // First evaluation point that meets the target (nullopt: never, or no target).
  std::optional<std::int64_t> iterations_to_target;
  std::optional<double> time_to_target_s;
};

struct ExperimentResult {
  std::vector<Run> runs;
  std::vector<Series> series;
  double compute_s = 0;      // per step, as priced
  double message_bytes = 0;  // as priced
};

// Runs the convergence of every algorithm/topology of `config`. `progress` gets a label.
using LabelledProgress = std::function<void(const std::string&, std::int64_t, std::int64_t)>;
Result<std::vector<Run>> run_convergence(const ExperimentConfig& config,
                                         const LabelledProgress& progress = {});

// Prices `runs` under `cost` and the targets of `config`.
ExperimentResult price(const std::vector<Run>& runs, const ExperimentConfig& config,
                       const CostConfig& cost, double model_params);

// Both steps.
Result<ExperimentResult> run_experiment(const ExperimentConfig& config,
                                        const LabelledProgress& progress = {});

// Rounds (sim/round_simulator.h): the cumulative time after each round 0..rounds of a run whose
// round settings are `round`, one round taking H local steps and one exchange of `message_bytes`
// (the compressed message):
//   gossip:    the D-PSGD clock with a step of H × compute; the message leaves after the round's
//              steps, so a round takes H c + α + Δ M_c / B without stragglers, or with overlap
//              (the exchange runs during the next round's steps) max(H c, α + Δ M_c / B);
//   allreduce: H c + the ring of M_c (2(n−1) steps of α + M_c / (n B), Table 1's ring), or with
//              overlap max(H c, ring) per round and the last ring at the end.
// A per-iteration `round` (RoundConfig::per_iteration: the algorithms run as D-PSGD and C-PSGD)
// is priced by cumulative_times: a round is one iteration.
std::vector<double> round_times(Scheme scheme, int nodes, const CostInputs& inputs,
                                const sgd::RoundConfig& round,
                                const std::vector<std::vector<std::vector<int>>>& in_neighbours,
                                const std::vector<int>& max_degree, std::int64_t rounds);

// The time of every iteration 1..iterations of one scheme, for the given communication graph
// period (ignored by the centralised schemes). Returns the cumulative time after each iteration
// (element t is the time at which t iterations are done; element 0 is 0).
std::vector<double> cumulative_times(
    Scheme scheme, int nodes, const CostInputs& inputs,
    const std::vector<std::vector<std::vector<int>>>& in_neighbours,
    const std::vector<int>& max_degree, std::int64_t iterations);

// "H=50 nesterov int8 overlap": a round config as series and progress labels name it.
std::string round_label(const sgd::RoundConfig& round);

// ---- sweeps
// local_steps and compression set run.round's H and compression kind (each value a new run).
enum class SweepParam { kBandwidth, kLatency, kNodes, kTopology, kLocalSteps, kCompression };
// bandwidth|latency|nodes|topology|local_steps|compression ('-' read as '_').
Result<SweepParam> parse_sweep_param(std::string_view name);
std::string_view sweep_param_name(SweepParam param);

struct SweepPoint {
  std::string value;  // as given
  std::vector<Series> series;
};

struct SweepResult {
  SweepParam param = SweepParam::kBandwidth;
  std::vector<SweepPoint> points;
  // Human-readable crossover statements ("D-PSGD (ring) beats cpsgd-allreduce up to 10Gbps; ...").
  std::vector<std::string> crossovers;
};

// InvalidArgument naming the first value of `values` that `param` cannot take (a bandwidth,
// duration, node count or local step count that does not parse, a compression kind that is not
// none, bf16 or int8; an empty list). Topology values are checked when
// they are built: run_sweep calls this and then, for a topology or node sweep, builds every
// point's topologies, all before the first simulation (run_convergence likewise builds all of
// its topologies before its first run).
Status check_sweep_values(SweepParam param, const std::vector<std::string>& values);

Result<SweepResult> run_sweep(const ExperimentConfig& config, SweepParam param,
                              const std::vector<std::string>& values,
                              const LabelledProgress& progress = {});

}  // namespace gossip::sim
