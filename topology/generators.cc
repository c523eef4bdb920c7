// Generators. Random graphs use the Steger–Wormald pairing (random d-regular) and
// Batagelj–Brandes geometric skipping (Erdős–Rényi), both linear in the number of edges, so that
// graphs of 10^5..10^6 nodes build in well under a second.
#include "topology/generators.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <span>

#include "common/enum_names.h"
#include "common/memory.h"
#include "common/random.h"

namespace gossip::topology {
namespace {

// Names, then aliases (common/enum_names.h).
constexpr EnumName<GeneratorKind> kKindNames[] = {
    {GeneratorKind::kRing, "ring"},
    {GeneratorKind::kKRing, "k_ring"},
    {GeneratorKind::kTorus, "torus"},
    {GeneratorKind::kGrid, "grid"},
    {GeneratorKind::kHypercube, "hypercube"},
    {GeneratorKind::kComplete, "complete"},
    {GeneratorKind::kStar, "star"},
    {GeneratorKind::kExponential, "exponential"},
    {GeneratorKind::kOnePeerExponential, "one_peer_exponential"},
    {GeneratorKind::kRandomRegular, "random_regular"},
    {GeneratorKind::kErdosRenyi, "erdos_renyi"},
    {GeneratorKind::kEdgeList, "edge_list"},
    {GeneratorKind::kGrid, "mesh"},
    {GeneratorKind::kExponential, "exp"},
};

Status need(bool ok, std::string_view kind, const std::string& what) {
  if (ok) return Status::ok();
  return invalid_argument(std::string(kind) + " generator: " + what);
}

// Steger & Wormald (1999): pair random free stubs, refusing loops and repeated edges; restart on a
// dead end. Nearly uniform for d = o(n^{1/28}) and fast for all small d. The edges of a simple
// d-regular graph (connected when `connected`), or InvalidArgument after 100 attempts.
Result<std::vector<std::pair<int, int>>> pair_stubs(int n, int d, bool connected,
                                                    std::uint64_t seed) {
  Rng rng(seed, 0x7265677Full);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<int> stubs;
    stubs.reserve(static_cast<std::size_t>(n) * d);
    for (int i = 0; i < n; ++i)
      for (int s = 0; s < d; ++s) stubs.push_back(i);
    // Node i's partners so far: partners[i·d, i·d + paired[i]). A scan of at most d ints decides
    // "edge already there" exactly as a hash set of edges would, in a fraction of its memory and
    // time (one cache line for small d instead of a node allocation per edge).
    std::vector<int> partners(stubs.size()), paired(static_cast<std::size_t>(n), 0);
    auto linked = [&](int i, int j) {
      const int* first = partners.data() + static_cast<std::size_t>(i) * d;
      const int* last = first + paired[static_cast<std::size_t>(i)];
      return std::find(first, last, j) != last;
    };
    auto link = [&](int i, int j) {
      partners[static_cast<std::size_t>(i) * d + paired[static_cast<std::size_t>(i)]++] = j;
    };
    std::vector<std::pair<int, int>> edges;
    edges.reserve(stubs.size() / 2);
    bool dead_end = false;
    while (!stubs.empty() && !dead_end) {
      int failures = 0;
      for (;;) {
        const std::size_t a = rng.uniform_int(stubs.size());
        const std::size_t b = rng.uniform_int(stubs.size());
        const int i = stubs[a], j = stubs[b];
        if (a != b && i != j && !linked(i, j)) {
          link(i, j);
          link(j, i);
          edges.emplace_back(i, j);
          // Remove both stubs (larger index first so the smaller stays valid).
          for (std::size_t idx : {std::max(a, b), std::min(a, b)}) {
            stubs[idx] = stubs.back();
            stubs.pop_back();
          }
          break;
        }
        if (++failures > 1000) {
          dead_end = true;
          break;
        }
      }
    }
    if (dead_end) continue;
    if (!connected) return edges;
    GOSSIP_ASSIGN_OR_RETURN(Graph g, Graph::undirected(n, edges));
    if (g.is_connected()) return edges;
  }
  return invalid_argument("random_regular generator: no " +
                          std::string(connected ? "connected " : "") + "simple " +
                          std::to_string(d) + "-regular graph on " + std::to_string(n) +
                          " nodes in 100 attempts of random pairing (seed " + std::to_string(seed) +
                          "); try another --seed");
}

// A connected d-regular graph on n nodes, for every (n, d) where one exists; InvalidArgument
// saying why for the others. Three regimes, so that no possible case is left to luck:
//  - d = 2: the connected 2-regular graphs are the Hamiltonian cycles, so one random cyclic
//    order (random pairing makes a union of cycles, connected with probability ~ sqrt(pi/2n));
//  - d >= n/2: the complement of a random (n-1-d)-regular graph, which needs no connectivity:
//    two non-adjacent nodes have d + d >= n neighbours among the other n - 2, so a common one,
//    and the graph is connected (pairing stubs this dense mostly ends at a dead end);
//  - otherwise random pairing (connected with high probability for d >= 3).
Result<Graph> random_regular(int n, int d, std::uint64_t seed) {
  const std::string what = "random_regular generator: degree " + std::to_string(d) + " with " +
                           std::to_string(n) + " nodes is impossible: ";
  if (n == 1 && d == 0) return Graph::undirected(1, {});  // one node alone
  if (d < 1) {
    return invalid_argument(what +
                            "in a connected graph of 2 or more nodes every node has a "
                            "neighbour (degree >= 1)");
  }
  if (d >= n) {
    return invalid_argument(what + "a node has at most nodes - 1 = " + std::to_string(n - 1) +
                            " neighbours (degree nodes - 1 is the complete graph)");
  }
  if ((std::int64_t{n} * d) % 2 != 0) {
    return invalid_argument(what +
                            "the degrees add up to twice the number of edges, so nodes x "
                            "degree (" +
                            std::to_string(std::int64_t{n} * d) + ") must be even");
  }
  if (d == 1 && n > 2) {
    return invalid_argument(what +
                            "a 1-regular graph is nodes/2 separate edges, connected only "
                            "for 2 nodes");
  }
  std::vector<std::pair<int, int>> edges;
  if (d == 2) {
    Rng rng(seed, 0x7265677Full);
    std::vector<int> order(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    rng.shuffle(std::span<int>(order));
    for (int i = 0; i < n; ++i) {
      edges.emplace_back(order[static_cast<std::size_t>(i)],
                         order[static_cast<std::size_t>((i + 1) % n)]);
    }
  } else if (2 * d >= n) {
    GOSSIP_ASSIGN_OR_RETURN(const auto missing, pair_stubs(n, n - 1 - d, false, seed));
    std::vector<std::vector<int>> absent(static_cast<std::size_t>(n));
    for (auto [i, j] : missing) {
      absent[static_cast<std::size_t>(i)].push_back(j);
      absent[static_cast<std::size_t>(j)].push_back(i);
    }
    for (int i = 0; i < n; ++i) {
      auto& a = absent[static_cast<std::size_t>(i)];
      std::sort(a.begin(), a.end());
      for (int j = i + 1; j < n; ++j) {
        if (!std::binary_search(a.begin(), a.end(), j)) edges.emplace_back(i, j);
      }
    }
  } else {
    GOSSIP_ASSIGN_OR_RETURN(edges, pair_stubs(n, d, true, seed));
  }
  return Graph::undirected(n, edges);
}

// Batagelj & Brandes (2005): skip over absent pairs with geometric jumps.
Result<Graph> erdos_renyi(int n, double p, std::uint64_t seed) {
  Rng rng(seed, 0x6572646Full);
  std::vector<std::pair<int, int>> edges;
  if (p >= 1.0) {
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) edges.emplace_back(i, j);
  } else if (p > 0.0) {
    const double log_q = std::log1p(-p);
    std::int64_t v = 1, w = -1;
    while (v < n) {
      const double r = rng.uniform();
      // A tiny p makes the jump astronomically large (beyond int64): past the last pair, done.
      const double jump = std::floor(std::log1p(-r) / log_q);
      if (!(jump < static_cast<double>(n) * n)) break;
      w += 1 + static_cast<std::int64_t>(jump);
      while (w >= v && v < n) {
        w -= v;
        ++v;
      }
      if (v < n) edges.emplace_back(static_cast<int>(w), static_cast<int>(v));
    }
  }
  GOSSIP_ASSIGN_OR_RETURN(Graph g, Graph::undirected(n, edges));
  if (!g.is_connected())
    return invalid_argument("erdos_renyi generator: G(n=" + std::to_string(n) +
                            ", p=" + std::to_string(p) + ", seed=" + std::to_string(seed) +
                            ") is not connected; raise p (connectivity needs p > ln(n)/n = " +
                            std::to_string(std::log(n) / n) + ") or try another seed");
  return g;
}

}  // namespace

Result<GeneratorKind> parse_generator_kind(std::string_view name) {
  return parse_enum(kKindNames, name, "topology kind");
}

std::string_view generator_kind_name(GeneratorKind kind) { return enum_name(kKindNames, kind); }

int exponential_hops(int n) {
  int tau = 0;
  while ((std::int64_t{1} << tau) < n) ++tau;
  return tau;
}

Result<int> generator_num_nodes(const GeneratorSpec& spec) {
  const auto kind = generator_kind_name(spec.kind);
  if (spec.kind == GeneratorKind::kTorus || spec.kind == GeneratorKind::kGrid) {
    GOSSIP_RETURN_IF_ERROR(
        need(spec.rows > 0 && spec.cols > 0, kind, "needs rows > 0 and cols > 0"));
    const std::int64_t n = std::int64_t{spec.rows} * spec.cols;
    GOSSIP_RETURN_IF_ERROR(need(n <= kMaxGeneratorNodes, kind,
                                "rows x cols = " + std::to_string(n) + " nodes is more than " +
                                    std::to_string(kMaxGeneratorNodes)));
    GOSSIP_RETURN_IF_ERROR(need(
        spec.nodes == 0 || spec.nodes == n, kind,
        "nodes (" + std::to_string(spec.nodes) + ") != rows x cols (" + std::to_string(n) + ")"));
    return static_cast<int>(n);
  }
  GOSSIP_RETURN_IF_ERROR(need(spec.nodes <= kMaxGeneratorNodes, kind,
                              "nodes: " + std::to_string(spec.nodes) + " is more than " +
                                  std::to_string(kMaxGeneratorNodes)));
  if (spec.kind == GeneratorKind::kEdgeList) return spec.nodes;
  GOSSIP_RETURN_IF_ERROR(need(spec.nodes > 0, kind, "needs nodes > 0"));
  return spec.nodes;
}

double generator_edge_estimate(const GeneratorSpec& spec, int n) {
  switch (spec.kind) {
    case GeneratorKind::kKRing:
      return double(n) * std::max(spec.k, 0);
    case GeneratorKind::kExponential:
    case GeneratorKind::kOnePeerExponential:
      return double(n) * exponential_hops(n);
    case GeneratorKind::kRandomRegular:
      return double(n) * std::max(spec.degree, 0) / 2;
    case GeneratorKind::kErdosRenyi:
      return spec.p * n * (n - 1.0) / 2;
    case GeneratorKind::kComplete:
      return n * (n - 1.0) / 2;
    case GeneratorKind::kTorus:
      return 2.0 * n;
    case GeneratorKind::kGrid:
      return std::max(0.0, 2.0 * n - spec.rows - spec.cols);
    case GeneratorKind::kHypercube:
      return n > 1 ? n * std::log2(double(n)) / 2 : 0.0;
    case GeneratorKind::kStar:
      return n - 1.0;
    default:  // ring
      return n;
  }
}

double generator_bytes_estimate(const GeneratorSpec& spec, int n) {
  return generator_edge_estimate(spec, n) * kGeneratorBytesPerEdge +
         double(n) * kGeneratorBytesPerNode;
}

Result<Graph> generate_graph(const GeneratorSpec& spec) {
  const auto kind = generator_kind_name(spec.kind);
  GOSSIP_ASSIGN_OR_RETURN(const int n, generator_num_nodes(spec));
  if (spec.kind == GeneratorKind::kErdosRenyi) {
    GOSSIP_RETURN_IF_ERROR(
        need(std::isfinite(spec.p) && spec.p > 0.0 && spec.p <= 1.0, kind,
             "needs a finite p with 0 < p <= 1, got p = " + std::to_string(spec.p)));
  }
  // Refuse before allocating: the kinds whose edge count grows faster than n.
  const double edges = generator_edge_estimate(spec, n);
  GOSSIP_RETURN_IF_ERROR(need(edges <= double(kMaxGeneratorEdges), kind,
                              "about " + std::to_string(static_cast<long long>(edges)) +
                                  " edges for nodes: " + std::to_string(n) + " is more than " +
                                  std::to_string(kMaxGeneratorEdges)));
  // The graph, its mixing matrix and the checks on them take about kGeneratorBytesPerEdge per
  // edge and kGeneratorBytesPerNode per node: refuse what cannot fit instead of dying half-way.
  const double bytes = generator_bytes_estimate(spec, n);
  if (Status s = check_memory(static_cast<std::uint64_t>(bytes), 0,
                              std::string(kind) + " generator with " + std::to_string(n) +
                                  " nodes (about " + std::to_string(static_cast<long long>(edges)) +
                                  " edges)");
      !s.is_ok()) {
    return s;
  }
  std::vector<std::pair<int, int>> e;
  switch (spec.kind) {
    case GeneratorKind::kRing:
      GOSSIP_RETURN_IF_ERROR(need(n >= 3, kind, "needs nodes >= 3 (n = 2 is the complete graph)"));
      for (int i = 0; i < n; ++i) e.emplace_back(i, (i + 1) % n);
      return Graph::undirected(n, e);
    case GeneratorKind::kKRing:
      GOSSIP_RETURN_IF_ERROR(need(spec.k >= 1 && 2 * spec.k < n, kind,
                                  "needs 1 <= k < nodes/2 (k = " + std::to_string(spec.k) + ")"));
      for (int i = 0; i < n; ++i)
        for (int s = 1; s <= spec.k; ++s) e.emplace_back(i, (i + s) % n);
      return Graph::undirected(n, e);
    case GeneratorKind::kTorus:
      GOSSIP_RETURN_IF_ERROR(need(spec.rows >= 3 && spec.cols >= 3, kind,
                                  "needs rows >= 3 and cols >= 3 (smaller sides repeat edges)"));
      [[fallthrough]];
    case GeneratorKind::kGrid: {
      const bool wrap = spec.kind == GeneratorKind::kTorus;
      const int R = spec.rows, C = spec.cols;
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
          const int i = r * C + c;
          if (wrap || c + 1 < C) e.emplace_back(i, r * C + (c + 1) % C);
          if (wrap || r + 1 < R) e.emplace_back(i, ((r + 1) % R) * C + c);
        }
      return Graph::undirected(n, e);
    }
    case GeneratorKind::kHypercube: {
      GOSSIP_RETURN_IF_ERROR(need(n >= 2 && (n & (n - 1)) == 0, kind,
                                  "needs nodes = 2^d (got " + std::to_string(n) + ")"));
      for (int i = 0; i < n; ++i)
        for (int b = 1; b < n; b <<= 1)
          if ((i & b) == 0) e.emplace_back(i, i | b);
      return Graph::undirected(n, e);
    }
    case GeneratorKind::kComplete:
      GOSSIP_RETURN_IF_ERROR(need(n >= 2, kind, "needs nodes >= 2"));
      GOSSIP_RETURN_IF_ERROR(need(n <= 20000, kind, "more than 20000 nodes is ~2e8 edges"));
      for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) e.emplace_back(i, j);
      return Graph::undirected(n, e);
    case GeneratorKind::kStar:
      GOSSIP_RETURN_IF_ERROR(need(n >= 2, kind, "needs nodes >= 2"));
      for (int i = 1; i < n; ++i) e.emplace_back(0, i);
      return Graph::undirected(n, e);
    case GeneratorKind::kExponential:
    case GeneratorKind::kOnePeerExponential: {
      GOSSIP_RETURN_IF_ERROR(need(n >= 2, kind, "needs nodes >= 2"));
      const int tau = exponential_hops(n);
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < tau; ++k)
          e.emplace_back(i, static_cast<int>((i + (std::int64_t{1} << k)) % n));
      return Graph::directed(n, e);
    }
    case GeneratorKind::kRandomRegular:
      return random_regular(n, spec.degree, spec.seed);  // degree n - 1: the complete graph
    case GeneratorKind::kErdosRenyi:
      return erdos_renyi(n, spec.p, spec.seed);
    case GeneratorKind::kEdgeList:
      return invalid_argument(
          "edge_list generator: load the file with parse_edge_list() and build the graph from it");
  }
  return invalid_argument("unknown generator kind");
}

Result<EdgeList> parse_edge_list(std::string_view text, const std::string& filename) {
  EdgeList out;
  int max_id = -1;
  int line_no = 0;
  std::size_t with_weight = 0;
  while (!text.empty()) {
    ++line_no;
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> tokens;
    std::size_t pos = 0;
    while (pos < line.size()) {
      while (pos < line.size() &&
             (line[pos] == ' ' || line[pos] == '\t' || line[pos] == '\r' || line[pos] == ','))
        ++pos;
      const std::size_t start = pos;
      while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t' && line[pos] != '\r' &&
             line[pos] != ',')
        ++pos;
      if (pos > start) tokens.push_back(line.substr(start, pos - start));
    }
    if (tokens.empty()) continue;
    const std::string where = filename + ":" + std::to_string(line_no) + ": ";
    if (tokens.size() != 2 && tokens.size() != 3)
      return invalid_argument(where + "expected 'i j' or 'i j weight', got " +
                              std::to_string(tokens.size()) + " fields");
    int ij[2];
    for (int t = 0; t < 2; ++t) {
      auto [p, ec] = std::from_chars(tokens[t].data(), tokens[t].data() + tokens[t].size(), ij[t]);
      if (ec != std::errc() || p != tokens[t].data() + tokens[t].size() || ij[t] < 0)
        return invalid_argument(where + "node id '" + std::string(tokens[t]) +
                                "' is not a nonnegative integer");
    }
    if (tokens.size() == 3) {
      double w = 0;
      auto [p, ec] = std::from_chars(tokens[2].data(), tokens[2].data() + tokens[2].size(), w);
      if (ec != std::errc() || p != tokens[2].data() + tokens[2].size() || !std::isfinite(w))
        return invalid_argument(where + "weight '" + std::string(tokens[2]) + "' is not a number");
      out.weights.push_back(w);
      ++with_weight;
    }
    out.edges.emplace_back(ij[0], ij[1]);
    max_id = std::max({max_id, ij[0], ij[1]});
  }
  if (with_weight != 0 && with_weight != out.edges.size())
    return invalid_argument(filename + ": either every line carries a weight or none does");
  if (out.edges.empty()) return invalid_argument(filename + ": no edges");
  out.num_nodes = max_id + 1;
  return out;
}

}  // namespace gossip::topology
