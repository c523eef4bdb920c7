// Topology files, from the parsed message to a Topology: a generator block (with its host
// placement, or an EDGE_LIST file and its weights), or explicit nodes, edges and weights. Every
// semantic error (a repeated id, an edge to a missing node, a bad address, a host entry at fault)
// points at its field through the Locator. Also the tables between our enums and the .proto's.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "topology/optimize.h"
#include "topology/topology.pb.h"
#include "topology/topology_file_internal.h"

namespace gossip::topology::file_internal {
namespace {

// Our enums and the .proto's: one table per pair, read in both directions.
template <typename Ours, typename Wire>
struct WireName {
  Ours ours;
  Wire wire;
};

constexpr WireName<GeneratorKind, pb::GeneratorKind> kKindsOnWire[] = {
    {GeneratorKind::kRing, pb::RING},
    {GeneratorKind::kKRing, pb::K_RING},
    {GeneratorKind::kTorus, pb::TORUS},
    {GeneratorKind::kGrid, pb::GRID},
    {GeneratorKind::kHypercube, pb::HYPERCUBE},
    {GeneratorKind::kComplete, pb::COMPLETE},
    {GeneratorKind::kStar, pb::STAR},
    {GeneratorKind::kExponential, pb::EXPONENTIAL},
    {GeneratorKind::kOnePeerExponential, pb::ONE_PEER_EXPONENTIAL},
    {GeneratorKind::kRandomRegular, pb::RANDOM_REGULAR},
    {GeneratorKind::kErdosRenyi, pb::ERDOS_RENYI},
    {GeneratorKind::kEdgeList, pb::EDGE_LIST},
};
constexpr WireName<WeightScheme, pb::WeightScheme> kSchemesOnWire[] = {
    {WeightScheme::kMetropolisHastings, pb::METROPOLIS_HASTINGS},
    {WeightScheme::kMaxDegree, pb::MAX_DEGREE},
    {WeightScheme::kUniform, pb::UNIFORM},
    {WeightScheme::kLazyMetropolisHastings, pb::LAZY_METROPOLIS_HASTINGS},
    {WeightScheme::kLazyUniform, pb::LAZY_UNIFORM},
    {WeightScheme::kBestConstant, pb::BEST_CONSTANT},
    {WeightScheme::kExplicit, pb::EXPLICIT},
    {WeightScheme::kOptimized, pb::OPTIMIZED},
    {WeightScheme::kDefault, pb::WEIGHTS_DEFAULT},
};

template <typename Ours, typename Wire, std::size_t N>
std::optional<Ours> from_wire(const WireName<Ours, Wire> (&table)[N], Wire wire) {
  for (const auto& e : table) {
    if (e.wire == wire) return e.ours;
  }
  return std::nullopt;
}

template <typename Ours, typename Wire, std::size_t N>
std::optional<Wire> to_wire(const WireName<Ours, Wire> (&table)[N], Ours ours) {
  for (const auto& e : table) {
    if (e.ours == ours) return e.wire;
  }
  return std::nullopt;
}

}  // namespace

Result<GeneratorKind> kind_from_pb(pb::GeneratorKind k) {
  if (const auto kind = from_wire(kKindsOnWire, k)) return *kind;
  return invalid_argument("generator kind missing");
}

pb::GeneratorKind kind_to_pb(GeneratorKind k) {
  return to_wire(kKindsOnWire, k).value_or(pb::GENERATOR_UNSPECIFIED);
}

// WEIGHTS_DEFAULT, and any value this build does not know, is the default scheme.
WeightScheme scheme_from_pb(pb::WeightScheme s) {
  return from_wire(kSchemesOnWire, s).value_or(WeightScheme::kDefault);
}

pb::WeightScheme scheme_to_pb(WeightScheme s) {
  return to_wire(kSchemesOnWire, s).value_or(pb::WEIGHTS_DEFAULT);
}
namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

// Weights for a graph: a scheme, or the optimizer.
Result<SparseMatrix> scheme_weights(const Graph& g, WeightScheme scheme) {
  if (scheme == WeightScheme::kOptimized) {
    GOSSIP_ASSIGN_OR_RETURN(auto opt, optimize_weights(g));
    return std::move(opt.weights);
  }
  return compute_weights(g, scheme);
}

// The placement (placement.h) that a generator block and the file's host entries describe;
// errors point at the field.
Result<Placement> placement_of(const pb::TopologyFile& file, const Locator& loc) {
  const auto& gen = file.generator();
  Placement p;
  p.host = gen.host().empty() ? "127.0.0.1" : gen.host();
  constexpr int kDefaultBasePort = 7000;
  if (gen.base_port() > 65535)
    return err(loc.top(file, "generator"), "base_port " + std::to_string(gen.base_port()) +
                                               " runs outside the port range 1..65535");
  p.base_port = gen.has_base_port() ? static_cast<int>(gen.base_port()) : kDefaultBasePort;
  if (file.host_size() == 0) return p;
  if (!gen.host().empty())
    return err(loc.nested(file, "generator", -1, "host"),
               "generator.host and host entries both place the nodes; give one of them");
  if (gen.has_base_port() && gen.base_port() == 0)
    return err(loc.nested(file, "generator", -1, "base_port"),
               "base_port: 0 means no addresses, but host entries place the nodes on ports "
               "(leave base_port out for 7000)");
  for (int k = 0; k < file.host_size(); ++k) {
    const pb::Host& h = file.host(k);
    const std::string entry = "host entry " + std::to_string(k + 1);
    if (Status s = check_host_name(h.name()); !s.is_ok())
      return err(h.name().empty() ? loc.top(file, "host", k) : loc.nested(file, "host", k, "name"),
                 entry + ": " + s.message());
    if (h.has_slots() && h.slots() < 1)
      return err(
          loc.nested(file, "host", k, "slots"),
          entry + " (" + h.name() + "): slots " + std::to_string(h.slots()) + " (must be >= 1)");
    if (h.has_base_port() && (h.base_port() == 0 || h.base_port() > 65535))
      return err(loc.nested(file, "host", k, "base_port"),
                 entry + " (" + h.name() + "): base_port " + std::to_string(h.base_port()) +
                     " is not in 1..65535");
    p.hosts.push_back({.host = h.name(),
                       .slots = h.has_slots() ? h.slots() : 1,
                       .base_port = static_cast<int>(h.base_port())});
  }
  return p;
}

// The addresses of n nodes placed by the file; an error points at the host entry at fault, or at
// the host list (or the generator) as a whole.
Result<std::vector<NodeAddress>> file_addresses(int n, const Placement& p,
                                                const pb::TopologyFile& file, const Locator& loc) {
  int bad = -1;
  auto addrs = place_nodes(n, p, &bad);
  if (addrs.is_ok()) return addrs;
  const std::string where = bad >= 0               ? loc.top(file, "host", bad)
                            : file.host_size() > 0 ? loc.top(file, "host", 0)
                                                   : loc.top(file, "generator");
  return err(where, addrs.status().message());
}

}  // namespace

Result<Topology> from_generator(const pb::TopologyFile& file, const Locator& loc,
                                const std::string& filename, Env& env) {
  const auto& gen = file.generator();
  auto kind = kind_from_pb(gen.kind());
  if (!kind.is_ok())
    return err(loc.top(file, "generator"),
               "generator.kind is missing (RING, K_RING, TORUS, GRID, HYPERCUBE, COMPLETE, STAR, "
               "EXPONENTIAL, ONE_PEER_EXPONENTIAL, RANDOM_REGULAR, ERDOS_RENYI, EDGE_LIST)");
  if (gen.nodes() > static_cast<std::uint32_t>(kMaxGeneratorNodes))
    return err(loc.nested(file, "generator", -1, "nodes"),
               "generator.nodes: " + std::to_string(gen.nodes()) + " is more than the limit of " +
                   std::to_string(kMaxGeneratorNodes) + " nodes");
  GeneratorSpec spec;
  spec.kind = *kind;
  spec.nodes = static_cast<int>(gen.nodes());
  spec.rows = static_cast<int>(gen.rows());
  spec.cols = static_cast<int>(gen.cols());
  spec.k = gen.k() == 0 ? 1 : static_cast<int>(gen.k());
  spec.degree = static_cast<int>(gen.degree());
  spec.p = gen.p();
  spec.seed = gen.seed();
  spec.directed = gen.directed();
  GOSSIP_ASSIGN_OR_RETURN(const Placement placement, placement_of(file, loc));
  const WeightScheme scheme = scheme_from_pb(file.weights());
  const std::string where = loc.top(file, "generator");

  if (spec.kind != GeneratorKind::kEdgeList) {
    if (scheme == WeightScheme::kExplicit)
      return err(loc.top(file, "weights"),
                 "EXPLICIT weights need explicit edges (or an EDGE_LIST with weights)");
    // Placed after generating, so that the generator's own errors come first and a placement
    // error points at its host entry.
    auto t = Topology::generate(spec, scheme);
    if (!t.is_ok()) return err(where, t.status().message());
    GOSSIP_ASSIGN_OR_RETURN(std::vector<NodeAddress> addrs,
                            file_addresses(t->num_nodes(), placement, file, loc));
    GOSSIP_RETURN_IF_ERROR(t->set_addresses(std::move(addrs)));
    if (!file.name().empty()) t->set_name(file.name());
    return t;
  }
  if (gen.edge_list().empty()) return err(where, "EDGE_LIST generator needs edge_list: \"path\"");
  const std::string path =
      gen.edge_list().front() == '/' ? gen.edge_list() : dir_of(filename) + gen.edge_list();
  GOSSIP_ASSIGN_OR_RETURN(std::string text, env.read_file(path));
  GOSSIP_ASSIGN_OR_RETURN(EdgeList list, parse_edge_list(text, path));
  if (list.num_nodes > kMaxGeneratorNodes)
    return err(path, "node id " + std::to_string(list.num_nodes - 1) +
                         " means more than the limit of " + std::to_string(kMaxGeneratorNodes) +
                         " nodes");
  int n = list.num_nodes;
  if (spec.nodes > 0) {
    if (spec.nodes < n)
      return err(where, "nodes: " + std::to_string(spec.nodes) + " but " + path + " uses node id " +
                            std::to_string(n - 1));
    n = spec.nodes;
  }
  auto g = spec.directed ? Graph::directed(n, list.edges) : Graph::undirected(n, list.edges);
  if (!g.is_ok()) return err(path, g.status().message());
  SparseMatrix w;
  if (scheme == WeightScheme::kExplicit) {
    if (list.weights.empty())
      return err(loc.top(file, "weights"), "EXPLICIT weights but " + path + " has no weights");
    std::vector<Eigen::Triplet<double>> t;
    std::vector<double> off(static_cast<std::size_t>(n), 0.0);
    for (std::size_t e = 0; e < list.edges.size(); ++e) {
      const auto [a, b] = list.edges[e];
      t.emplace_back(b, a, list.weights[e]);
      off[b] += list.weights[e];
      if (!spec.directed) {
        t.emplace_back(a, b, list.weights[e]);
        off[a] += list.weights[e];
      }
    }
    for (int i = 0; i < n; ++i) t.emplace_back(i, i, 1.0 - off[i]);
    w.resize(n, n);
    w.setFromTriplets(t.begin(), t.end());
  } else {
    if (!list.weights.empty())
      return err(loc.top(file, "weights"),
                 path + " carries weights; set weights: EXPLICIT to use them");
    auto ws = scheme_weights(*g, scheme);
    if (!ws.is_ok()) return err(where, ws.status().message());
    w = std::move(*ws);
  }
  GOSSIP_ASSIGN_OR_RETURN(std::vector<NodeAddress> addrs, file_addresses(n, placement, file, loc));
  return Topology::from_parts(file.name(), std::move(*g), std::move(addrs), std::move(w), scheme);
}

Result<Topology> from_explicit(const pb::TopologyFile& file, const Locator& loc) {
  const int n = file.node_size();
  if (n == 0)
    return err(loc.file(),
               "no nodes: give a generator { ... } block or node { id address } entries");
  std::vector<NodeAddress> addrs(static_cast<std::size_t>(n));
  std::vector<int> first_seen(static_cast<std::size_t>(n), -1);
  for (int k = 0; k < n; ++k) {
    const auto& node = file.node(k);
    const std::string where = loc.nested(file, "node", k, "id");
    if (node.id() >= static_cast<std::uint32_t>(n))
      return err(where, "node id " + std::to_string(node.id()) + " outside 0.." +
                            std::to_string(n - 1) +
                            " (ids must be 0..n-1 for n = " + std::to_string(n) + " nodes)");
    const int id = static_cast<int>(node.id());
    if (first_seen[id] >= 0)
      return err(where, "node id " + std::to_string(id) + " repeated (first at " +
                            loc.nested(file, "node", first_seen[id], "id") + ")");
    first_seen[id] = k;
    auto a = parse_address(node.address());
    if (!a.is_ok())
      return err(loc.nested(file, "node", k, "address"),
                 "node " + std::to_string(id) + ": " + a.status().message());
    addrs[id] = std::move(*a);
  }
  std::map<std::string, int> seen_addr;
  for (int k = 0; k < n; ++k) {
    const int id = static_cast<int>(file.node(k).id());
    auto [it, fresh] = seen_addr.emplace(addrs[id].to_string(), k);
    if (!fresh)
      return err(loc.nested(file, "node", k, "address"),
                 "address " + addrs[id].to_string() + " already used by node " +
                     std::to_string(file.node(it->second).id()) + " (" +
                     loc.nested(file, "node", it->second, "address") + ")");
  }
  const bool directed = file.directed();
  WeightScheme scheme = scheme_from_pb(file.weights());
  const bool explicit_w = scheme == WeightScheme::kExplicit;
  std::vector<std::pair<int, int>> arcs;
  std::map<std::pair<int, int>, int> seen;
  std::vector<Eigen::Triplet<double>> t;
  std::vector<double> off(static_cast<std::size_t>(n), 0.0);
  std::vector<char> has_self(static_cast<std::size_t>(n), 0);
  for (int k = 0; k < file.edge_size(); ++k) {
    const auto& e = file.edge(k);
    const std::string where = loc.top(file, "edge", k);
    if (e.from() >= static_cast<std::uint32_t>(n) || e.to() >= static_cast<std::uint32_t>(n))
      return err(where, "edge " + std::to_string(e.from()) + " -> " + std::to_string(e.to()) +
                            " names a node outside 0.." + std::to_string(n - 1));
    const int a = static_cast<int>(e.from()), b = static_cast<int>(e.to());
    const std::string name = directed ? "arc " + std::to_string(a) + " -> " + std::to_string(b)
                                      : "edge " + std::to_string(a) + " -- " + std::to_string(b);
    if (explicit_w && !e.has_weight())
      return err(where, name + ": weights: EXPLICIT but this edge has no weight");
    if (!explicit_w && e.has_weight())
      return err(loc.nested(file, "edge", k, "weight"),
                 name + " has a weight but the file says weights: " +
                     std::string(weight_scheme_name(scheme)) + " (set weights: EXPLICIT)");
    if (a == b) {
      if (!explicit_w)
        return err(where, name +
                              ": self loop (the diagonal of W is implicit unless weights: "
                              "EXPLICIT)");
      if (has_self[a]) return err(where, "second self weight for node " + std::to_string(a));
      has_self[a] = 1;
      t.emplace_back(a, a, e.weight());
      continue;
    }
    const std::pair<int, int> key =
        directed ? std::make_pair(a, b) : std::make_pair(std::min(a, b), std::max(a, b));
    auto [it, fresh] = seen.emplace(key, k);
    if (!fresh)
      return err(where, name + " repeated (first at " + loc.top(file, "edge", it->second) + ")");
    arcs.emplace_back(a, b);
    if (explicit_w) {
      t.emplace_back(b, a, e.weight());
      off[b] += e.weight();
      if (!directed) {
        t.emplace_back(a, b, e.weight());
        off[a] += e.weight();
      }
    }
  }
  auto g = directed ? Graph::directed(n, arcs) : Graph::undirected(n, arcs);
  if (!g.is_ok()) return err(loc.file(), g.status().message());
  SparseMatrix w;
  if (explicit_w) {
    for (int i = 0; i < n; ++i)
      if (!has_self[i]) t.emplace_back(i, i, 1.0 - off[i]);
    w.resize(n, n);
    w.setFromTriplets(t.begin(), t.end());
  } else {
    auto ws = scheme_weights(*g, scheme);
    if (!ws.is_ok()) return err(loc.top(file, "weights"), ws.status().message());
    w = std::move(*ws);
  }
  return Topology::from_parts(file.name(), std::move(*g), std::move(addrs), std::move(w), scheme);
}

}  // namespace gossip::topology::file_internal
