// gossip-topo advise: the command line and the report of sim/link_advice.h's advice.
#include "topology/advise_command.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/cli.h"
#include "common/escape.h"
#include "common/json.h"
#include "common/units.h"
#include "sgd/model_spec.h"
#include "sim/link_advice.h"

namespace gossip::topology {
namespace {

int usage(const Status& s) {
  std::cerr << "gossip-topo: " << log_escape(s.to_string()) << "\n";
  return kExitUsageError;
}

// --params N, or --model: gossip-sim's Fashion-MNIST models (--problem fmnist-mlp, fmnist-softmax).
Result<double> model_params(const AdviseOptions& o) {
  if (o.model.empty() == o.params.empty()) {
    return invalid_argument("give one of --params N and --model mlp|softmax");
  }
  if (o.model.empty()) {
    Result<double> n = parse_count(o.params);
    if (!n.is_ok()) return n.status().with_context("--params");
    if (*n < 1) return invalid_argument("--params must be >= 1");
    return n;
  }
  sgd::ModelSpec spec;
  spec.input_dim = 784;
  spec.num_classes = 10;
  if (o.model == "mlp") {
    spec.kind = sgd::ModelKind::kMlp;
    spec.hidden = {256, 128};
  } else if (o.model == "softmax") {
    spec.kind = sgd::ModelKind::kSoftmax;
  } else {
    return invalid_argument("--model '" + o.model +
                            "': expected mlp (784-256-128-10) or softmax (784-10)");
  }
  return static_cast<double>(spec.num_params());
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * fraction);
  return buf;
}

std::string round_name(const sgd::RoundConfig& r) {
  std::ostringstream o;
  o << "local_steps " << r.local_steps << ", "
    << (r.compression.kind == sgd::CompressionKind::kNone
            ? std::string("float32")
            : std::string(sgd::kCompressionKinds.name(r.compression.kind)))
    << (r.overlap ? ", overlap" : ", no overlap");
  return o.str();
}

void print_topologies(std::ostream& out, const sim::LinkAdvice& a) {
  out << std::left << std::setw(22) << "topology" << std::right << std::setw(4) << "Δ"
      << std::setw(12) << "gap/iter" << std::setw(12) << "wire/iter" << std::setw(16)
      << "iters to 1000x" << std::setw(15) << "wire to 1000x"
      << "\n";
  for (std::size_t k = 0; k < a.topologies.size(); ++k) {
    const sim::TopologyChoice& t = a.topologies[k];
    char gap[32];
    std::snprintf(gap, sizeof(gap), "%.4g", t.gap_per_iteration);
    out << std::left << std::setw(22) << t.name << std::right << std::setw(3) << t.max_degree
        << std::setw(12) << gap << std::setw(12) << format_duration_s(t.wire_s) << std::setw(16)
        << (t.iterations_1000x < 0 ? std::string("never") : std::to_string(t.iterations_1000x))
        << std::setw(15)
        << (std::isfinite(t.wire_to_1000x_s) ? format_duration_s(t.wire_to_1000x_s) : "-")
        << (k == a.chosen ? "   <- least wire time to mix" : "") << "\n";
  }
}

void print_rounds(std::ostream& out, const sim::LinkAdvice& a) {
  out << std::setw(6) << "H" << std::setw(14) << "s/round" << std::setw(8) << "wire"
      << std::setw(20) << "s/round (overlap)" << std::setw(16) << "wire (overlap)" << std::setw(18)
      << "sent/node/round"
      << "\n";
  for (std::size_t k = 0; k < a.with_overlap.size(); ++k) {
    const sim::RoundChoice& plain = a.without_overlap[k];
    const sim::RoundChoice& lapped = a.with_overlap[k];
    out << std::setw(6) << plain.round.local_steps << std::setw(14)
        << format_duration_s(plain.round_s) << std::setw(8) << percent(plain.wire_fraction)
        << std::setw(20) << format_duration_s(lapped.round_s) << std::setw(16)
        << percent(lapped.wire_fraction) << std::setw(18)
        << format_size_bytes(plain.bytes_per_node_round)
        << (lapped.round.local_steps == a.recommended.round.local_steps ? "   <- recommended" : "")
        << "\n";
  }
}

void print_text(std::ostream& out, const sim::LinkAdvice& a) {
  const sim::LinkAdviceInputs& in = a.inputs;
  out << "link: " << format_bandwidth_bps(in.link.bandwidth_bps) << ", latency "
      << format_duration_s(in.link.latency_s) << "; " << in.nodes << " nodes; model "
      << static_cast<long long>(std::llround(in.params)) << " parameters ("
      << format_size_bytes(4.0 * in.params) << " in float32); compute "
      << format_duration_s(in.compute_s) << " per step\n\n";
  print_topologies(out, a);
  const sim::RoundChoice& p = a.per_step;
  out << "\nper-step D-PSGD on " << a.topologies[a.chosen].name << ": "
      << format_duration_s(p.round_s) << " per iteration, " << percent(p.wire_fraction)
      << " of it on the wire, " << format_size_bytes(p.bytes_per_node_round)
      << " sent per node per iteration\n";
  if (a.link_binds) {
    out << "the link binds (more than " << percent(sim::kWireFractionLimit)
        << " on the wire): int8 messages of " << format_size_bytes(a.recommended.message_bytes)
        << "; rounds of H steps:\n";
    print_rounds(out, a);
  }
  const sim::RoundChoice& r = a.recommended;
  const bool step = r.round.local_steps == 1;
  out << "\nrecommendation: " << a.topologies[a.chosen].name << ", " << round_name(r.round) << ": "
      << format_duration_s(r.round_s) << " per "
      << (step ? std::string("iteration")
               : "round of " + std::to_string(r.round.local_steps) + " steps")
      << ", " << percent(r.wire_fraction) << " on the wire, "
      << format_size_bytes(r.bytes_per_node_round) << " sent per node per "
      << (step ? "iteration" : "round");
  if (!a.hidden) out << " (the link still binds at the largest H)";
  out << "\n\ntraining config (gossipd --config, docs/daemon.md):\n"
      << sim::training_config_snippet(a) << "\ncheck the convergence before booking the cluster:\n"
      << sim::compare_command(a) << "\n";
}

std::string choice_json(const sim::RoundChoice& c) {
  std::ostringstream o;
  o << "{\"local_steps\": " << c.round.local_steps
    << ", \"compression\": " << json_quote(sgd::kCompressionKinds.name(c.round.compression.kind))
    << ", \"overlap\": " << (c.round.overlap ? "true" : "false")
    << ", \"message_bytes\": " << json_number(c.message_bytes)
    << ", \"round_s\": " << json_number(c.round_s)
    << ", \"wire_fraction\": " << json_number(c.wire_fraction)
    << ", \"bytes_per_node_round\": " << json_number(c.bytes_per_node_round) << "}";
  return o.str();
}

void print_json(std::ostream& out, const sim::LinkAdvice& a) {
  const sim::LinkAdviceInputs& in = a.inputs;
  out << "{\"nodes\": " << in.nodes << ", \"params\": " << json_number(in.params)
      << ", \"compute_s\": " << json_number(in.compute_s)
      << ", \"bandwidth_bps\": " << json_number(in.link.bandwidth_bps)
      << ", \"latency_s\": " << json_number(in.link.latency_s) << ", \"topologies\": [";
  for (std::size_t k = 0; k < a.topologies.size(); ++k) {
    const sim::TopologyChoice& t = a.topologies[k];
    out << (k ? ", " : "") << "{\"name\": " << json_quote(t.name)
        << ", \"max_degree\": " << t.max_degree
        << ", \"gap_per_iteration\": " << json_number(t.gap_per_iteration)
        << ", \"iterations_1000x\": " << t.iterations_1000x
        << ", \"wire_s\": " << json_number(t.wire_s) << "}";
  }
  out << "], \"topology\": " << json_quote(a.topologies[a.chosen].name)
      << ", \"per_step\": " << choice_json(a.per_step)
      << ", \"link_binds\": " << (a.link_binds ? "true" : "false") << ", \"rounds\": [";
  for (std::size_t k = 0; k < a.with_overlap.size(); ++k) {
    out << (k ? ", " : "") << choice_json(a.without_overlap[k]) << ", "
        << choice_json(a.with_overlap[k]);
  }
  out << "], \"recommendation\": " << choice_json(a.recommended)
      << ", \"hidden\": " << (a.hidden ? "true" : "false")
      << ", \"config\": " << json_quote(sim::training_config_snippet(a))
      << ", \"compare\": " << json_quote(sim::compare_command(a)) << "}\n";
}

}  // namespace

CLI::App* add_advise_command(CLI::App& app, AdviseOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "advise",
      "what to run on a link: topology, local steps, compression and overlap, from gossip-sim's "
      "cost model (docs/topology.md, 'Advice for a link')");
  o.link.add(*cmd);
  cmd->add_option("--params", o.params, "model parameters, e.g. 25M");
  cmd->add_option("--model", o.model,
                  "or a model of gossip-sim's: mlp (784-256-128-10) or softmax (784-10)");
  cmd->add_option("-n,--nodes", o.nodes, "nodes")->capture_default_str();
  cmd->add_option("--compute-time", o.compute_time, "seconds of one local step, e.g. 0.45ms")
      ->capture_default_str();
  cmd->add_flag("--json", o.json, "machine-readable output");
  return cmd;
}

int run_advise(const AdviseOptions& o) {
  sim::LinkAdviceInputs in;
  Result<Link> link = o.link.link();
  if (!link.is_ok()) return usage(link.status());
  in.link = *link;
  Result<double> params = model_params(o);
  if (!params.is_ok()) return usage(params.status());
  in.params = *params;
  Result<double> compute = parse_duration_s(o.compute_time);
  if (!compute.is_ok()) return usage(compute.status().with_context("--compute-time"));
  in.compute_s = *compute;
  in.nodes = o.nodes;
  Result<sim::LinkAdvice> advice = sim::advise_link(in);
  if (!advice.is_ok()) return usage(advice.status());
  if (o.json) {
    print_json(std::cout, *advice);
  } else {
    print_text(std::cout, *advice);
  }
  return 0;
}

}  // namespace gossip::topology
