// Topology files, the other way: the file message for a generator (what `gossip-topo generate`
// prints) or an explicit one (nodes, edges, and weights unless the scheme re-derives them) that
// reloads to the same fingerprint, and its text-format and JSON renderings.
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <string>

#include "topology/topology.pb.h"
#include "topology/topology_file.h"
#include "topology/topology_file_internal.h"

namespace gossip::topology {
namespace {

namespace gp = google::protobuf;

using file_internal::kind_to_pb;
using file_internal::scheme_to_pb;

}  // namespace

pb::TopologyFile generator_file(const std::string& name, const GeneratorSpec& spec,
                                WeightScheme scheme, const std::string& host, int base_port) {
  return generator_file(name, spec, scheme,
                        Placement{.host = host, .base_port = base_port, .hosts = {}});
}

pb::TopologyFile generator_file(const std::string& name, const GeneratorSpec& spec,
                                WeightScheme scheme, const Placement& placement) {
  pb::TopologyFile f;
  if (!name.empty()) f.set_name(name);
  auto* g = f.mutable_generator();
  g->set_kind(kind_to_pb(spec.kind));
  if (spec.kind == GeneratorKind::kTorus || spec.kind == GeneratorKind::kGrid) {
    g->set_rows(spec.rows);
    g->set_cols(spec.cols);
  } else if (spec.nodes > 0) {
    g->set_nodes(spec.nodes);
  }
  if (spec.kind == GeneratorKind::kKRing) g->set_k(spec.k);
  if (spec.kind == GeneratorKind::kRandomRegular) g->set_degree(spec.degree);
  if (spec.kind == GeneratorKind::kErdosRenyi) g->set_p(spec.p);
  if (spec.kind == GeneratorKind::kRandomRegular || spec.kind == GeneratorKind::kErdosRenyi)
    g->set_seed(spec.seed);
  if (spec.kind == GeneratorKind::kEdgeList) {
    g->set_edge_list(spec.edge_list_path);
    g->set_directed(spec.directed);
  }
  // base_port is written even when 0 (no addresses): unset would reload as 7000.
  g->set_base_port(placement.base_port);
  if (placement.hosts.empty()) g->set_host(placement.host);
  for (const HostSlots& h : placement.hosts) {
    auto* e = f.add_host();
    e->set_name(h.host);
    e->set_slots(h.slots);
    if (h.base_port > 0) e->set_base_port(h.base_port);
  }
  f.set_weights(scheme_to_pb(scheme));
  return f;
}

std::string to_text(const pb::TopologyFile& file) {
  std::string out;
  gp::TextFormat::Printer printer;
  printer.PrintToString(file, &out);
  return out;
}

Result<std::string> to_json(const pb::TopologyFile& file) {
  std::string out;
  gp::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  auto st = gp::util::MessageToJsonString(file, &out, opts);
  if (!st.ok()) return internal_error("JSON export: " + std::string(st.message()));
  return out;
}

Result<pb::TopologyFile> explicit_file(const Topology& topology) {
  if (topology.is_time_varying())
    return invalid_argument(
        "a time-varying topology has no single W; export it in generator form "
        "(host entries place its nodes on several hosts)");
  pb::TopologyFile f;
  f.set_name(topology.name());
  f.set_directed(topology.is_directed());
  const int n = topology.num_nodes();
  constexpr int kDefaultBasePort = 7000;
  if (topology.addresses().empty() && kDefaultBasePort + static_cast<std::int64_t>(n) - 1 > 65535) {
    return invalid_argument("an explicit file needs an address per node and " + std::to_string(n) +
                            " nodes do not fit ports " + std::to_string(kDefaultBasePort) +
                            "..65535; give a host list or write the generator form");
  }
  for (int i = 0; i < n; ++i) {
    auto* node = f.add_node();
    node->set_id(i);
    // Files always carry addresses; a topology built without them gets loopback ports 7000 + i.
    node->set_address(topology.addresses().empty()
                          ? "127.0.0.1:" + std::to_string(kDefaultBasePort + i)
                          : topology.addresses()[i].to_string());
  }
  // Schemes that are a function of the graph alone are re-derived on load (bit for bit); all
  // others are written out, diagonal included, so the reload has the same fingerprint.
  const WeightScheme s = topology.weight_scheme();
  const bool derived = s == WeightScheme::kDefault || s == WeightScheme::kMetropolisHastings ||
                       s == WeightScheme::kMaxDegree || s == WeightScheme::kUniform ||
                       s == WeightScheme::kLazyMetropolisHastings ||
                       s == WeightScheme::kLazyUniform;
  f.set_weights(derived ? scheme_to_pb(s) : pb::EXPLICIT);
  const auto& w = topology.mixing_matrix(0);
  for (auto [a, b] : topology.graph().edges()) {
    auto* e = f.add_edge();
    e->set_from(a);
    e->set_to(b);
    if (!derived) e->set_weight(w.coeff(b, a));
  }
  if (!derived)
    for (int i = 0; i < n; ++i) {
      auto* e = f.add_edge();
      e->set_from(i);
      e->set_to(i);
      e->set_weight(w.coeff(i, i));
    }
  return f;
}

Result<std::string> explicit_text(const Topology& topology) {
  GOSSIP_ASSIGN_OR_RETURN(auto f, explicit_file(topology));
  return to_text(f);
}

}  // namespace gossip::topology
