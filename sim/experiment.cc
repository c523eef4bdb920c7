// Experiments: convergence runs, then pricing with the cost model, then sweeps.
#include "sim/experiment.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "common/check.h"
#include "common/enum_names.h"
#include "sgd/compress.h"
#include "sgd/outer_optimizer.h"
#include "sim/round_simulator.h"
#include "topology/spectral.h"
#include "topology/topology_file.h"

namespace gossip::sim {

Result<topology::Topology> make_topology(const std::string& name_or_path, int nodes,
                                         topology::WeightScheme scheme) {
  auto kind = topology::parse_generator_kind(name_or_path);
  if (!kind.is_ok()) {
    std::error_code ec;
    if (!std::filesystem::exists(name_or_path, ec)) {
      return invalid_argument("topology '" + name_or_path +
                              "' is neither a generator (ring, torus, exponential, "
                              "one_peer_exponential, complete, hypercube, k_ring, ...) nor an "
                              "existing topology file");
    }
    GOSSIP_ASSIGN_OR_RETURN(auto topo, topology::load_topology(name_or_path));
    if (nodes != 0 && topo.num_nodes() != nodes) {
      return invalid_argument("topology file '" + name_or_path + "' has " +
                              std::to_string(topo.num_nodes()) + " nodes, but --nodes is " +
                              std::to_string(nodes));
    }
    if (topo.name().empty()) topo.set_name(std::filesystem::path(name_or_path).stem().string());
    return topo;
  }
  if (nodes <= 0) return invalid_argument("--nodes must be > 0");
  topology::GeneratorSpec spec;
  spec.kind = *kind;
  spec.nodes = nodes;
  if (spec.kind == topology::GeneratorKind::kTorus || spec.kind == topology::GeneratorKind::kGrid) {
    int rows = 1;
    for (int r = 1; r * r <= nodes; ++r) {
      if (nodes % r == 0) rows = r;
    }
    spec.rows = rows;
    spec.cols = nodes / rows;
  }
  const bool one_peer = spec.kind == topology::GeneratorKind::kOnePeerExponential;
  GOSSIP_ASSIGN_OR_RETURN(
      auto topo,
      topology::Topology::generate(spec, one_peer ? topology::WeightScheme::kDefault : scheme));
  topo.set_name(std::string(topology::generator_kind_name(spec.kind)));
  return topo;
}

Result<CommGraph> comm_graph(const topology::Topology& topology) {
  CommGraph graph;
  for (int p = 0; p < topology.period(); ++p) {
    GOSSIP_ASSIGN_OR_RETURN(auto plan, MixingPlan::from_matrix(topology.mixing_matrix(p)));
    graph.in_neighbours.push_back(plan.in_neighbours());
    // Δ as gossip-topo's advisor counts it (topology/comm_cost.h), so both price alike.
    graph.max_degree.push_back(topology::link_degree(topology.mixing_matrix(p)));
  }
  return graph;
}

std::vector<double> cumulative_times(
    Scheme scheme, int nodes, const CostInputs& inputs,
    const std::vector<std::vector<std::vector<int>>>& in_neighbours,
    const std::vector<int>& max_degree, std::int64_t iterations) {
  SimClock clock(scheme, nodes, inputs);
  std::vector<double> times(static_cast<std::size_t>(iterations) + 1, 0.0);
  static const std::vector<std::vector<int>> kNone;
  for (std::int64_t t = 0; t < iterations; ++t) {
    if (scheme == Scheme::kGossip) {
      const auto p = static_cast<std::size_t>(t % static_cast<std::int64_t>(in_neighbours.size()));
      clock.advance(t, in_neighbours[p], max_degree[p]);
    } else {
      clock.advance(t, kNone, 0);
    }
    times[static_cast<std::size_t>(t) + 1] = clock.now_s();
  }
  return times;
}

std::vector<double> round_times(Scheme scheme, int nodes, const CostInputs& inputs,
                                const sgd::RoundConfig& round,
                                const std::vector<std::vector<std::vector<int>>>& in_neighbours,
                                const std::vector<int>& max_degree, std::int64_t rounds) {
  if (round.per_iteration()) {
    return cumulative_times(scheme, nodes, inputs, in_neighbours, max_degree, rounds);
  }
  CostInputs per_round = inputs;
  per_round.compute_s = inputs.compute_s * round.local_steps;
  if (scheme == Scheme::kGossip) {
    // The round's message leaves after its H steps; with overlap it is combined a round later, so
    // the exchange runs during the next round's steps.
    per_round.gossip_overlaps_compute = round.overlap;
    return cumulative_times(scheme, nodes, per_round, in_neighbours, max_degree, rounds);
  }
  per_round.allreduce = AllreduceModel::kGlooHops;  // one chunk per ring step, each a rendezvous
  if (!round.overlap) {
    return cumulative_times(Scheme::kRingAllreduce, nodes, per_round, {}, {}, rounds);
  }
  const double ring =
      allreduce_comm_s(AllreduceModel::kGlooHops, nodes, inputs.message_bytes, inputs.net);
  std::vector<double> times(static_cast<std::size_t>(rounds) + 1, 0.0);
  for (std::int64_t r = 1; r <= rounds; ++r) {
    times[r] = times[r - 1] + std::max(per_round.compute_s / inputs.cpu_share, ring);
  }
  if (rounds > 0) times[rounds] += ring;  // the last mean, waited for at the end
  return times;
}

namespace {

// The D-PSGD topologies of `config` (none without D-PSGD), all built before anything runs: a bad
// name or file fails at once, not after the runs before it.
Result<std::vector<topology::Topology>> build_topologies(const ExperimentConfig& config) {
  std::vector<topology::Topology> topologies;
  if (!config.include_dpsgd) return topologies;
  for (const std::string& name : config.topologies) {
    GOSSIP_ASSIGN_OR_RETURN(topology::Topology topo,
                            make_topology(name, config.nodes, config.weights));
    topologies.push_back(std::move(topo));
  }
  return topologies;
}

// run_convergence on topologies already built from `config` (build_topologies).
Result<std::vector<Run>> run_on(const ExperimentConfig& config,
                                const std::vector<topology::Topology>& topologies,
                                const LabelledProgress& progress) {
  sgd::ProblemConfig pc = config.problem;
  pc.num_nodes = config.nodes;
  GOSSIP_RETURN_IF_ERROR(pc.validate());
  GOSSIP_ASSIGN_OR_RETURN(const sgd::Problem problem, sgd::make_problem(pc));
  std::vector<Run> runs;
  auto one = [&](Algorithm algorithm, const topology::Topology* topo,
                 const sgd::RoundConfig& round) -> Status {
    RunConfig rc = config.run;
    rc.algorithm = algorithm;
    rc.round = round;
    std::string label = algorithm == Algorithm::kCpsgd
                            ? "cpsgd"
                            : std::string(algorithm_name(algorithm)) + " " + topo->name();
    if (!round.per_iteration()) label += " [" + round_label(round) + "]";
    ProgressFn fn;
    if (progress) fn = [&](std::int64_t done, std::int64_t total) { progress(label, done, total); };
    Run run;
    if (rc.round.per_iteration()) {
      GOSSIP_ASSIGN_OR_RETURN(auto sim, Simulator::create(problem, topo, rc));
      GOSSIP_ASSIGN_OR_RETURN(run.trace, sim->run(fn));
      run.final_params = sim->params();
    } else {
      GOSSIP_ASSIGN_OR_RETURN(auto sim, RoundSimulator::create(problem, topo, rc));
      GOSSIP_ASSIGN_OR_RETURN(run.trace, sim->run(fn));
      run.final_params = sim->params();
      run.round = rc.round;
      run.bytes_per_round = sim->bytes_per_round();
    }
    run.nodes = config.nodes;
    if (topo != nullptr) {
      run.topology = topo->name();
      GOSSIP_ASSIGN_OR_RETURN(CommGraph graph, comm_graph(*topo));
      run.in_neighbours = std::move(graph.in_neighbours);
      run.max_degree = std::move(graph.max_degree);
      auto report = topology::analyze(*topo);
      if (report.is_ok()) run.rho = report->rho_per_iteration;
    }
    runs.push_back(std::move(run));
    return Status::ok();
  };
  std::vector<sgd::RoundConfig> rounds = {config.run.round};
  if (config.per_step_baseline && !config.run.round.per_iteration()) {
    rounds.insert(rounds.begin(), sgd::RoundConfig{});  // the per-step series first
  }
  for (const sgd::RoundConfig& round : rounds) {
    if (config.include_cpsgd) GOSSIP_RETURN_IF_ERROR(one(Algorithm::kCpsgd, nullptr, round));
    for (std::size_t k = 0; k < topologies.size(); ++k) {
      GOSSIP_RETURN_IF_ERROR(
          one(config.push_sum ? Algorithm::kPushSum : Algorithm::kDpsgd, &topologies[k], round)
              .with_context("topology " + config.topologies[k]));
    }
  }
  return runs;
}

ExperimentResult price_runs(const std::vector<Run>& runs, const ExperimentConfig& config) {
  const double params = runs.empty() ? 0.0 : static_cast<double>(runs[0].final_params.rows());
  return price(runs, config, config.cost, params);
}

}  // namespace

Result<std::vector<Run>> run_convergence(const ExperimentConfig& config,
                                         const LabelledProgress& progress) {
  GOSSIP_ASSIGN_OR_RETURN(const auto topologies, build_topologies(config));
  return run_on(config, topologies, progress);
}

namespace {

void find_target(const ExperimentConfig& config, Series& s) {
  const bool by_loss = !std::isnan(config.target_loss);
  const bool by_acc = !std::isnan(config.target_accuracy);
  if (!by_loss && !by_acc) return;
  s.has_target = true;
  for (std::size_t k = 0; k < s.points.size(); ++k) {
    const EvalPoint& p = s.points[k];
    const bool loss_ok = !by_loss || p.train_loss <= config.target_loss;
    const bool acc_ok = !by_acc || p.test_accuracy >= config.target_accuracy;
    if (loss_ok && acc_ok) {
      s.iterations_to_target = p.iteration;
      s.time_to_target_s = s.time_s[k];
      return;
    }
  }
}

// What one node sends per iteration: the parameter server's link moves n messages each way (the
// server's; a worker sends one), a ring allreduce 2(n−1)/n of a message, gossip one message to
// each out-neighbour (the largest out-degree of the period).
double per_iteration_bytes(Scheme scheme, const Run& r, double message_bytes) {
  switch (scheme) {
    case Scheme::kParameterServer:
      return message_bytes;
    case Scheme::kRingAllreduce:
      return r.nodes > 1 ? 2.0 * (r.nodes - 1) / r.nodes * message_bytes : 0.0;
    case Scheme::kGossip:
      break;
  }
  double out = 0;
  for (std::size_t p = 0; p < r.in_neighbours.size(); ++p) {
    std::vector<int> out_degree(static_cast<std::size_t>(r.nodes), 0);
    for (const auto& in : r.in_neighbours[p]) {
      for (int j : in) ++out_degree[static_cast<std::size_t>(j)];
    }
    double mean = 0;
    for (int d : out_degree) mean += d;
    out += mean / r.nodes;
  }
  return r.in_neighbours.empty()
             ? 0.0
             : out / static_cast<double>(r.in_neighbours.size()) * message_bytes;
}

// One series of a round run: the D-PSGD family over gossip, DiLoCo over the ring.
Series price_rounds(const Run& r, const ExperimentConfig& config, const CostInputs& in) {
  Series s;
  const bool gossip = r.trace.algorithm == Algorithm::kDpsgd;
  s.scheme = gossip ? Scheme::kGossip : Scheme::kRingAllreduce;
  s.algorithm = gossip ? "dpsgd" : "cpsgd-allreduce";
  s.topology = r.topology;
  s.nodes = r.nodes;
  s.rho = r.rho;
  s.points = r.trace.points;
  s.compute_s = in.compute_s;
  const sgd::RoundConfig& round = r.round;
  // The message of the priced model (in.message_bytes: 4 × --model-params, else the simulated
  // model's parameters), compressed; the bytes measured on the simulated model scale with it.
  const auto priced_params = static_cast<std::size_t>(std::llround(in.message_bytes / 4.0));
  const auto simulated_params = static_cast<std::size_t>(r.final_params.rows());
  // A gossip message moves whole floats (sgd::gossip_message_bytes); the ring's chunks do not.
  const auto message = [&](std::size_t params) {
    return static_cast<double>(gossip ? sgd::gossip_message_bytes(round.compression, params)
                                      : sgd::compressed_bytes(round.compression, params));
  };
  s.message_bytes = message(priced_params);
  const double simulated_bytes = message(simulated_params);
  s.rounds = round_label(round);
  CostInputs per = in;
  per.message_bytes = s.message_bytes;
  const std::int64_t h = round.local_steps;
  const std::int64_t iterations = s.points.empty() ? 0 : s.points.back().iteration;
  const std::int64_t rounds = (iterations + h - 1) / h;
  const std::vector<double> times =
      round_times(s.scheme, r.nodes, per, round, r.in_neighbours, r.max_degree, rounds);
  for (const EvalPoint& p : s.points) s.time_s.push_back(times[(p.iteration + h - 1) / h]);
  s.comm_s = gossip ? gossip_comm_s(*std::max_element(r.max_degree.begin(), r.max_degree.end()),
                                    s.message_bytes, in.net)
                    : allreduce_comm_s(AllreduceModel::kGlooHops, r.nodes, s.message_bytes, in.net);
  s.bytes_per_node =
      r.bytes_per_round * (s.message_bytes / simulated_bytes) * static_cast<double>(rounds);
  find_target(config, s);
  return s;
}

}  // namespace

std::string round_label(const sgd::RoundConfig& round) {
  std::ostringstream name;
  name << "H=" << round.local_steps << " " << sgd::kOuterKinds.name(round.outer.kind) << " "
       << sgd::kCompressionKinds.name(round.compression.kind) << (round.overlap ? " overlap" : "");
  return name.str();
}

ExperimentResult price(const std::vector<Run>& runs, const ExperimentConfig& config,
                       const CostConfig& cost, double model_params) {
  ExperimentResult result;
  result.runs = runs;
  double measured = 0;
  for (const Run& r : runs) measured += r.trace.compute_s_per_step;
  if (!runs.empty()) measured /= static_cast<double>(runs.size());
  CostInputs in;
  in.net = cost.net;
  in.compute_s = cost.compute_s.value_or(measured);
  in.message_bytes = 4.0 * cost.model_params.value_or(model_params);
  in.straggler = cost.straggler;
  in.cpu_share = cost.cpu_share;
  in.cpu_s_per_byte = cost.cpu_s_per_byte;
  in.message_overhead_s = cost.message_overhead_s;
  in.allreduce = cost.allreduce;
  in.asynchronous = cost.asynchronous;
  result.compute_s = in.compute_s;
  result.message_bytes = in.message_bytes;
  for (const Run& r : runs) {
    if (!r.round.per_iteration()) {
      result.series.push_back(price_rounds(r, config, in));
      continue;
    }
    std::vector<Scheme> schemes;
    if (r.trace.algorithm == Algorithm::kCpsgd) {
      schemes = {Scheme::kParameterServer, Scheme::kRingAllreduce};
    } else {
      schemes = {Scheme::kGossip};
    }
    const std::int64_t iterations = r.trace.points.empty() ? 0 : r.trace.points.back().iteration;
    for (Scheme scheme : schemes) {
      Series s;
      s.algorithm = scheme == Scheme::kParameterServer ? "cpsgd-ps"
                    : scheme == Scheme::kRingAllreduce ? "cpsgd-allreduce"
                                                       : algorithm_name(r.trace.algorithm);
      s.topology = r.topology;
      s.nodes = r.nodes;
      s.rho = r.rho;
      s.scheme = scheme;
      s.points = r.trace.points;
      s.compute_s = in.compute_s;
      s.message_bytes = in.message_bytes;
      const auto times =
          cumulative_times(scheme, r.nodes, in, r.in_neighbours, r.max_degree, iterations);
      for (const EvalPoint& p : s.points) s.time_s.push_back(times[p.iteration]);
      switch (scheme) {
        case Scheme::kParameterServer:
          s.comm_s = parameter_server_comm_s(r.nodes, in.message_bytes, in.net);
          break;
        case Scheme::kRingAllreduce:
          s.comm_s = allreduce_comm_s(in.allreduce, r.nodes, in.message_bytes, in.net);
          break;
        case Scheme::kGossip: {
          const int delta = r.max_degree.empty()
                                ? 0
                                : *std::max_element(r.max_degree.begin(), r.max_degree.end());
          s.comm_s = gossip_comm_s(delta, in.message_bytes, in.net);
          break;
        }
      }
      s.bytes_per_node =
          per_iteration_bytes(scheme, r, in.message_bytes) * static_cast<double>(iterations);
      find_target(config, s);
      result.series.push_back(std::move(s));
    }
  }
  return result;
}

Result<ExperimentResult> run_experiment(const ExperimentConfig& config,
                                        const LabelledProgress& progress) {
  GOSSIP_ASSIGN_OR_RETURN(auto runs, run_convergence(config, progress));
  return price_runs(runs, config);
}

namespace {
constexpr EnumName<SweepParam> kSweepParamNames[] = {{SweepParam::kBandwidth, "bandwidth"},
                                                     {SweepParam::kLatency, "latency"},
                                                     {SweepParam::kNodes, "nodes"},
                                                     {SweepParam::kTopology, "topology"},
                                                     {SweepParam::kLocalSteps, "local_steps"},
                                                     {SweepParam::kCompression, "compression"}};

// A compression sweep value as sgd's name ("INT8", as the config spells it, is "int8").
Result<sgd::CompressionKind> sweep_compression(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return sgd::kCompressionKinds.parse(value);
}
}  // namespace

Result<SweepParam> parse_sweep_param(std::string_view name) {
  std::string spelled(name);
  std::replace(spelled.begin(), spelled.end(), '-', '_');
  return parse_enum(kSweepParamNames, spelled, "sweep parameter");
}

std::string_view sweep_param_name(SweepParam param) { return enum_name(kSweepParamNames, param); }

namespace {

// Whether D-PSGD series `d` reaches the target (or, with no target, the end) before `c`.
std::optional<bool> dpsgd_wins(const Series& d, const Series& c) {
  if (d.has_target) {
    if (!d.time_to_target_s && !c.time_to_target_s) return std::nullopt;
    if (!d.time_to_target_s) return false;
    if (!c.time_to_target_s) return true;
    return *d.time_to_target_s < *c.time_to_target_s;
  }
  if (d.time_s.empty() || c.time_s.empty()) return std::nullopt;
  return d.time_s.back() < c.time_s.back();
}

// For each D-PSGD series of the first point and each C-PSGD series, where the winner changes.
std::vector<std::string> crossovers(const std::vector<SweepPoint>& points, SweepParam param) {
  std::vector<std::string> found;
  const auto& first = points.front().series;
  for (const Series& d : first) {
    if (d.scheme != Scheme::kGossip) continue;
    for (const Series& c : first) {
      if (c.scheme == Scheme::kGossip) continue;
      std::ostringstream msg;
      std::optional<bool> previous;
      bool changed = false;
      for (const SweepPoint& p : points) {
        const Series* dp = nullptr;
        const Series* cp = nullptr;
        for (const Series& s : p.series) {
          const bool same_topology = s.topology == d.topology || param == SweepParam::kTopology;
          if (s.scheme == Scheme::kGossip && same_topology) dp = &s;
          if (s.algorithm == c.algorithm) cp = &s;
        }
        if (dp == nullptr || cp == nullptr) continue;
        const auto win = dpsgd_wins(*dp, *cp);
        if (!win) continue;
        if (!previous) {
          msg << (*win ? "D-PSGD" : "C-PSGD") << " faster at " << p.value;
        } else if (*win != *previous) {
          msg << "; " << (*win ? "D-PSGD" : "C-PSGD") << " faster from " << p.value;
          changed = true;
        }
        previous = win;
      }
      const std::string who =
          "dpsgd" + (param == SweepParam::kTopology ? std::string() : " (" + d.topology + ")");
      if (changed) {
        found.push_back(who + " vs " + c.algorithm + ": " + msg.str());
      } else if (previous) {
        found.push_back(who + " vs " + c.algorithm + ": no crossover, " +
                        (*previous ? "D-PSGD" : "C-PSGD") + " faster at every value");
      }
    }
  }
  return found;
}

}  // namespace

Status check_sweep_values(SweepParam param, const std::vector<std::string>& values) {
  if (values.empty()) return invalid_argument("sweep needs at least one value (--values)");
  for (const std::string& v : values) {
    if (param == SweepParam::kBandwidth) {
      GOSSIP_RETURN_IF_ERROR(parse_bandwidth_bps(v).status());
    } else if (param == SweepParam::kLatency) {
      GOSSIP_RETURN_IF_ERROR(parse_duration_s(v).status());
    } else if (param == SweepParam::kNodes) {
      GOSSIP_ASSIGN_OR_RETURN(const double n, parse_count(v));
      if (n < 1 || n != std::floor(n) || n > std::numeric_limits<int>::max()) {
        return invalid_argument("sweep: nodes '" + v + "' is not a positive integer");
      }
    } else if (param == SweepParam::kLocalSteps) {
      Result<double> h = parse_count(v);
      if (!h.is_ok() || *h < 1 || *h != std::floor(*h) || *h > 1e6) {
        return invalid_argument("sweep: local_steps '" + v + "' is not an integer in [1, 1000000]");
      }
    } else if (param == SweepParam::kCompression) {
      GOSSIP_RETURN_IF_ERROR(sweep_compression(v).status().with_context("sweep"));
    }
  }
  return Status::ok();
}

Result<SweepResult> run_sweep(const ExperimentConfig& config, SweepParam param,
                              const std::vector<std::string>& values,
                              const LabelledProgress& progress) {
  GOSSIP_RETURN_IF_ERROR(check_sweep_values(param, values));
  // Every point's configuration; a sweep over topologies or node counts also builds every
  // point's topologies here, before the first simulation, so a bad value fails at once instead
  // of after the runs before it. Each is built once: with --weights optimized, building one means
  // solving its FDLA weights.
  std::vector<ExperimentConfig> point_configs;
  std::vector<std::vector<topology::Topology>> point_topologies;
  for (const std::string& v : values) {
    ExperimentConfig c = config;
    if (param == SweepParam::kBandwidth) {
      GOSSIP_ASSIGN_OR_RETURN(c.cost.net.bandwidth_bps, parse_bandwidth_bps(v));
    } else if (param == SweepParam::kLatency) {
      GOSSIP_ASSIGN_OR_RETURN(c.cost.net.latency_s, parse_duration_s(v));
    } else if (param == SweepParam::kNodes) {
      GOSSIP_ASSIGN_OR_RETURN(const double n, parse_count(v));  // checked above
      c.nodes = static_cast<int>(n);
    } else if (param == SweepParam::kLocalSteps) {
      GOSSIP_ASSIGN_OR_RETURN(const double h, parse_count(v));  // checked above
      c.run.round.local_steps = static_cast<int>(h);
    } else if (param == SweepParam::kCompression) {
      GOSSIP_ASSIGN_OR_RETURN(c.run.round.compression.kind, sweep_compression(v));
    } else {
      c.topologies = {v};
    }
    GOSSIP_RETURN_IF_ERROR(c.run.validate());
    if (param == SweepParam::kTopology || param == SweepParam::kNodes) {
      GOSSIP_ASSIGN_OR_RETURN(auto built, build_topologies(c));
      point_topologies.push_back(std::move(built));
    }
    point_configs.push_back(std::move(c));
  }
  SweepResult out;
  out.param = param;
  // Bandwidth and latency change only the prices: one convergence run serves every point. Local
  // steps and compression change the runs, not the topologies: built once.
  const bool reprice = param == SweepParam::kBandwidth || param == SweepParam::kLatency;
  const bool same_topologies =
      param == SweepParam::kLocalSteps || param == SweepParam::kCompression;
  std::vector<Run> shared;
  if (reprice) {
    GOSSIP_ASSIGN_OR_RETURN(shared, run_convergence(config, progress));
  }
  std::vector<topology::Topology> topologies;
  if (same_topologies) {
    GOSSIP_ASSIGN_OR_RETURN(topologies, build_topologies(config));
  }
  for (std::size_t k = 0; k < values.size(); ++k) {
    const ExperimentConfig& c = point_configs[k];
    SweepPoint point;
    point.value = values[k];
    ExperimentResult r;
    if (reprice) {
      r = price_runs(shared, c);
    } else {
      GOSSIP_ASSIGN_OR_RETURN(
          const auto runs, run_on(c, same_topologies ? topologies : point_topologies[k], progress));
      r = price_runs(runs, c);
    }
    point.series = std::move(r.series);
    out.points.push_back(std::move(point));
  }
  out.crossovers = crossovers(out.points, param);
  return out;
}

}  // namespace gossip::sim
