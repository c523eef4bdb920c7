// The advice for a link (link_advice.h): the rule's three steps over the cost model's prices.
#include "sim/link_advice.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "sgd/compress.h"
#include "sim/experiment.h"
#include "topology/advisor.h"
#include "topology/spectral.h"

namespace gossip::sim {
namespace {

constexpr const char* kTopologyCandidates[] = {
    "ring", "torus", "hypercube", "exponential", "one_peer_exponential", "complete"};

// A wire fraction this close to 0 is 0: the round is compute (the mean over a period of equal
// rounds may differ from H·c in the last bit).
constexpr double kHidden = 1e-9;

// The round setting `round` on `graph`, priced by round_times over one period of W(t).
RoundChoice price_round(const LinkAdviceInputs& in, const CommGraph& graph,
                        const sgd::RoundConfig& round) {
  RoundChoice choice;
  choice.round = round;
  const auto params = static_cast<std::size_t>(std::llround(in.params));
  choice.message_bytes = static_cast<double>(sgd::gossip_message_bytes(round.compression, params));
  CostInputs cost;
  cost.net = in.link;
  cost.compute_s = in.compute_s;
  cost.message_bytes = choice.message_bytes;
  const auto rounds = static_cast<std::int64_t>(graph.in_neighbours.size());
  const std::vector<double> times = round_times(Scheme::kGossip, in.nodes, cost, round,
                                                graph.in_neighbours, graph.max_degree, rounds);
  choice.round_s = times.back() / static_cast<double>(rounds);
  const double fraction = 1.0 - round.local_steps * in.compute_s / choice.round_s;
  choice.wire_fraction = fraction < kHidden ? 0.0 : fraction;
  int delta = 0;
  for (int d : graph.max_degree) delta = std::max(delta, d);
  choice.bytes_per_node_round = topology::gossip_bytes_per_node(delta, choice.message_bytes);
  return choice;
}

// Step 1: every candidate that can be built for n, with its gap and float32 wire time.
Result<std::vector<TopologyChoice>> candidate_topologies(const LinkAdviceInputs& in) {
  std::vector<TopologyChoice> out;
  topology::CostModel model;
  model.model_bytes = 4.0 * in.params;
  model.bandwidth_bytes_per_s = in.link.bandwidth_bps / 8.0;
  model.latency_s = in.link.latency_s;
  for (const char* name : kTopologyCandidates) {
    auto topo = make_topology(name, in.nodes, topology::WeightScheme::kDefault);
    if (!topo.is_ok()) continue;  // not defined for this n (a hypercube of 6)
    GOSSIP_ASSIGN_OR_RETURN(const topology::SpectralReport report, topology::analyze(*topo));
    const topology::Advice a = topology::advise(*topo, report, model);
    TopologyChoice t;
    t.name = name;
    t.max_degree = a.max_degree;
    t.gap_per_iteration = a.gap_per_iteration;
    t.iterations_1000x = a.iterations_1000x;
    t.wire_s = a.dpsgd_seconds;
    t.wire_to_1000x_s = a.iterations_1000x < 0 ? std::numeric_limits<double>::infinity()
                                               : static_cast<double>(a.iterations_1000x) * t.wire_s;
    out.push_back(t);
  }
  if (out.empty()) return invalid_argument("no generated topology for " + std::to_string(in.nodes));
  return out;
}

std::size_t fastest_mixing(const std::vector<TopologyChoice>& topologies) {
  std::size_t best = 0;
  for (std::size_t k = 1; k < topologies.size(); ++k) {
    const TopologyChoice& a = topologies[k];
    const TopologyChoice& b = topologies[best];
    const double scale = std::max(std::abs(b.wire_to_1000x_s), 1e-300);
    const bool tie = std::abs(a.wire_to_1000x_s - b.wire_to_1000x_s) <= 1e-9 * scale;
    if ((!tie && a.wire_to_1000x_s < b.wire_to_1000x_s) || (tie && a.max_degree < b.max_degree)) {
      best = k;
    }
  }
  return best;
}

Status check_inputs(const LinkAdviceInputs& in) {
  if (in.nodes < 2) return invalid_argument("--nodes must be >= 2");
  if (!(in.params >= 1) || !std::isfinite(in.params)) {
    return invalid_argument("the model must have >= 1 parameter");
  }
  if (!(in.compute_s > 0) || !std::isfinite(in.compute_s)) {
    return invalid_argument("--compute-time must be > 0");
  }
  if (!(in.link.bandwidth_bps > 0) || !std::isfinite(in.link.bandwidth_bps) ||
      !(in.link.latency_s >= 0) || !std::isfinite(in.link.latency_s)) {
    return invalid_argument("the link needs a bandwidth > 0 and a latency >= 0");
  }
  return Status::ok();
}

// "10Mbps", "5ms": a value in the largest unit that keeps it >= 1, as common/units.h parses it.
std::string with_unit(double value, std::initializer_list<std::pair<const char*, double>> units) {
  std::pair<const char*, double> pick = *units.begin();
  for (const auto& u : units) {
    if (value >= u.second) pick = u;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.6g%s", value / pick.second, pick.first);
  return buf;
}

}  // namespace

Result<LinkAdvice> advise_link(const LinkAdviceInputs& in) {
  GOSSIP_RETURN_IF_ERROR(check_inputs(in));
  LinkAdvice advice;
  advice.inputs = in;
  GOSSIP_ASSIGN_OR_RETURN(advice.topologies, candidate_topologies(in));
  advice.chosen = fastest_mixing(advice.topologies);
  GOSSIP_ASSIGN_OR_RETURN(const topology::Topology topo,
                          make_topology(advice.topologies[advice.chosen].name, in.nodes,
                                        topology::WeightScheme::kDefault));
  GOSSIP_ASSIGN_OR_RETURN(const CommGraph graph, comm_graph(topo));
  // Step 2: per-step D-PSGD.
  advice.per_step = price_round(in, graph, sgd::RoundConfig{});
  advice.recommended = advice.per_step;
  advice.link_binds = advice.per_step.wire_fraction > kWireFractionLimit;
  if (!advice.link_binds) return advice;
  // Step 3: int8 with overlap, the smallest H whose wire the overlap hides.
  bool found = false;
  for (int h : kLocalStepCandidates) {
    sgd::RoundConfig round;
    round.local_steps = h;
    round.compression.kind = sgd::CompressionKind::kInt8;
    advice.without_overlap.push_back(price_round(in, graph, round));
    round.overlap = true;
    advice.with_overlap.push_back(price_round(in, graph, round));
    if (!found && advice.with_overlap.back().wire_fraction == 0) {
      found = true;
      advice.recommended = advice.with_overlap.back();
    }
  }
  if (!found) {
    advice.recommended = advice.with_overlap.back();
    advice.hidden = false;
  }
  return advice;
}

std::string training_config_snippet(const LinkAdvice& advice) {
  const sgd::RoundConfig& r = advice.recommended.round;
  std::ostringstream o;
  o << "# topology: gossip-topo generate " << advice.topologies[advice.chosen].name << " --nodes "
    << advice.inputs.nodes << " [--hosts ...] > topology.pbtxt\n";
  if (r.per_iteration()) {
    o << "# per-step D-PSGD: the defaults (local_steps 1, no compression, no overlap)\n";
    return o.str();
  }
  o << "local_steps: " << r.local_steps << "\n";
  if (r.compression.kind != sgd::CompressionKind::kNone) {
    std::string kind(sgd::kCompressionKinds.name(r.compression.kind));
    for (char& ch : kind) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    o << "compression { kind: " << kind << " }\n";
  }
  if (r.overlap) o << "overlap: true\n";
  o << "# outer { kind: NESTEROV }  # DiLoCo's outer step (lr 0.7, momentum 0.9): try it with "
       "gossip-sim\n";
  return o.str();
}

std::string compare_command(const LinkAdvice& advice) {
  const LinkAdviceInputs& in = advice.inputs;
  const sgd::RoundConfig& r = advice.recommended.round;
  std::ostringstream o;
  o << "gossip-sim compare --nodes " << in.nodes << " --topology "
    << advice.topologies[advice.chosen].name << " --bandwidth "
    << with_unit(in.link.bandwidth_bps, {{"bps", 1}, {"Kbps", 1e3}, {"Mbps", 1e6}, {"Gbps", 1e9}})
    << " --latency " << with_unit(in.link.latency_s, {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1}})
    << " --compute-time " << with_unit(in.compute_s, {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1}})
    << " --model-params " << static_cast<long long>(std::llround(in.params));
  if (!r.per_iteration()) {
    o << " --local-steps " << r.local_steps << " --compression "
      << sgd::kCompressionKinds.name(r.compression.kind) << (r.overlap ? " --overlap" : "");
  }
  o << " --problem ... --target-accuracy ...";
  return o.str();
}

}  // namespace gossip::sim
