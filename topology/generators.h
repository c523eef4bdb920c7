// Generators: the standard gossip graphs by kind and size (docs/design.md §1), seeded where random.
// Every generator returns a Graph on nodes 0..n-1; the Topology (topology.h) adds addresses and
// weights. Random generators use common/random.h, so a seed gives the same graph everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/graph.h"

namespace gossip::topology {

enum class GeneratorKind {
  kRing,                // i -- i+1 mod n
  kKRing,               // i -- i+s mod n for s = 1..k
  kTorus,               // rows x cols with wrap-around; node = r * cols + c
  kGrid,                // rows x cols without wrap-around
  kHypercube,           // n = 2^d, i -- i xor 2^b
  kComplete,            // every pair
  kStar,                // hub 0 -- every other node
  kExponential,         // directed, i -> i + 2^k mod n for k < ceil(log2 n)
  kOnePeerExponential,  // time-varying; the Graph holds the union of all arcs (= kExponential)
  kRandomRegular,       // seeded random d-regular (configuration model with restarts)
  kErdosRenyi,          // seeded G(n, p); InvalidArgument unless connected
  kEdgeList,            // imported from a plain edge-list file
};

// "ring", "k_ring", "torus", "grid" (also "mesh"), "hypercube", "complete", "star",
// "exponential", "one_peer_exponential", "random_regular", "erdos_renyi", "edge_list".
Result<GeneratorKind> parse_generator_kind(std::string_view name);
std::string_view generator_kind_name(GeneratorKind kind);

struct GeneratorSpec {
  GeneratorKind kind = GeneratorKind::kRing;
  int nodes = 0;                 // n; for torus/grid derived from rows x cols when 0
  int rows = 0, cols = 0;        // torus, grid
  int k = 1;                     // k_ring: neighbours on each side
  int degree = 0;                // random_regular
  double p = 0.0;                // erdos_renyi
  std::uint64_t seed = 0;        // random_regular, erdos_renyi
  std::string edge_list_path{};  // edge_list
  bool directed = false;         // edge_list: arcs instead of edges
};

// The most nodes any generator builds (edge lists included): 10^7 sparse nodes is a few GB of
// graph and weights; anything larger is a typo, not a job. COMPLETE stops at 20000 nodes.
inline constexpr int kMaxGeneratorNodes = 10'000'000;
// The most edges (arcs for directed kinds) a generator may produce: K_RING, EXPONENTIAL,
// RANDOM_REGULAR and ERDOS_RENYI grow faster than n.
inline constexpr std::int64_t kMaxGeneratorEdges = 200'000'000;
// Memory a generated topology takes per edge and per node (edge list, adjacency, the sparse
// mixing matrix and the validation's copies), for the check against the machine's memory
// (common/memory.h) that runs before a generator allocates anything.
inline constexpr double kGeneratorBytesPerEdge = 160;
inline constexpr double kGeneratorBytesPerNode = 200;

// The number of nodes the spec describes (rows * cols for torus/grid), or InvalidArgument when
// it is not positive or above kMaxGeneratorNodes.
Result<int> generator_num_nodes(const GeneratorSpec& spec);

// About how many edges (arcs for directed kinds) generate_graph builds for `spec` with `n` nodes
// (exact for the deterministic kinds, the expectation for erdos_renyi, n for edge lists): what
// the size checks below and gossip-topo's notice about long runs go by.
double generator_edge_estimate(const GeneratorSpec& spec, int n);
// The memory generate_graph and the checks on its result take for `spec` with `n` nodes, in bytes
// (kGeneratorBytesPerEdge per edge, kGeneratorBytesPerNode per node).
double generator_bytes_estimate(const GeneratorSpec& spec, int n);

Result<Graph> generate_graph(const GeneratorSpec& spec);

// ceil(log2 n): the number of distinct hops of the exponential graphs.
int exponential_hops(int n);

// Plain edge list: "i j" or "i j weight" per line, '#' starts a comment. Node count is
// max id + 1 unless num_nodes > 0. Errors name file:line.
struct EdgeList {
  int num_nodes = 0;
  std::vector<std::pair<int, int>> edges;
  std::vector<double> weights;  // empty, or one per edge when every line carries one
};
Result<EdgeList> parse_edge_list(std::string_view text, const std::string& filename);

}  // namespace gossip::topology
