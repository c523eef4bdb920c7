// Topology: a graph plus node addresses plus mixing weights W(t) — everything a node daemon or the
// simulator needs to know about who averages with whom, and how strongly.
//
// Static topologies have one W; the one-peer exponential graph is time-varying with period
// tau = ceil(log2 n) and W(t) = W(t mod tau). A Topology is an immutable value after
// construction: safe to read from any number of threads. Building one does NOT validate it; call
// validate() (validate.h) — load_topology() (topology_file.h) does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/generators.h"
#include "topology/graph.h"
#include "topology/placement.h"
#include "topology/weights.h"

namespace gossip::topology {

struct Neighbor {
  int node = 0;
  double weight = 0.0;
};

class Topology {
 public:
  Topology() = default;

  // From a generator: addresses host:base_port+i, or no addresses when base_port is 0 (analysis
  // and simulation; also the only way to build more nodes than there are ports). kExplicit is
  // rejected; kOptimized runs optimize_weights() with its defaults. The one-peer exponential
  // graph only accepts kDefault (its weights are 1/2 by definition).
  static Result<Topology> generate(const GeneratorSpec& spec, WeightScheme scheme,
                                   const std::string& host = "127.0.0.1", int base_port = 0);
  // The same, with the nodes placed by `placement` (placement.h: one host, or a host list).
  static Result<Topology> generate(const GeneratorSpec& spec, WeightScheme scheme,
                                   const Placement& placement);

  // From explicit parts (a file, or another module). `weights` must be n x n; addresses empty or
  // n long. `symmetry` as for symmetry_group(); pass {} when unknown.
  static Result<Topology> from_parts(std::string name, Graph graph,
                                     std::vector<NodeAddress> addresses, SparseMatrix weights,
                                     WeightScheme scheme, std::vector<int> symmetry = {});

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Places the nodes elsewhere: `addresses` empty (none) or one per node, else InvalidArgument.
  Status set_addresses(std::vector<NodeAddress> addresses);
  int num_nodes() const { return graph_.num_nodes(); }
  const Graph& graph() const { return graph_; }
  bool is_directed() const { return graph_.is_directed(); }
  WeightScheme weight_scheme() const { return scheme_; }
  // Empty when the topology was built without addresses.
  const std::vector<NodeAddress>& addresses() const { return addresses_; }

  bool is_time_varying() const { return mixing_.size() > 1; }
  // Number of distinct W(t) in one period (1 for static topologies).
  int period() const { return static_cast<int>(mixing_.size()); }
  // W(iteration): the matrix applied at that iteration (W(iteration mod period)).
  const SparseMatrix& mixing_matrix(std::int64_t iteration = 0) const;
  // Row-major copy of W(iteration), for row access.
  const Eigen::SparseMatrix<double, Eigen::RowMajor>& mixing_matrix_rows(
      std::int64_t iteration = 0) const;

  // Nodes j != i with W_ij > 0 at that iteration (i receives x_j from them), ascending.
  std::vector<Neighbor> in_neighbors(int i, std::int64_t iteration = 0) const;
  // Nodes j != i with W_ji > 0 (i sends x_i to them; weight = W_ji), ascending.
  std::vector<Neighbor> out_neighbors(int i, std::int64_t iteration = 0) const;
  double self_weight(int i, std::int64_t iteration = 0) const;

  // A translation group that leaves W invariant, as the cyclic orders (m_1, ..., m_k) of
  // Z_m1 x ... x Z_mk acting on node ids written in mixed radix (last digit fastest): {n} for
  // ring-like (circulant) topologies, {rows, cols} for the torus, {2, ..., 2} for the hypercube;
  // empty when none is known. A hint for the exact spectral method, which re-verifies it.
  const std::vector<int>& symmetry_group() const { return symmetry_; }

  // SHA-256 (hex, 64 characters) of the canonical encoding of: n, directedness, addresses, and
  // every W(t) entry (i, j, IEEE-754 bits of the weight) in order. Two processes that agree on
  // the fingerprint agree on every weight bit for bit.
  std::string fingerprint() const;

 private:
  // `symmetric`: every W(t) is exactly symmetric (generated undirected topologies), so the
  // row-major copy is a plain copy of the column-major arrays instead of a transpose.
  void set_mixing(std::vector<SparseMatrix> mixing, bool symmetric = false);

  std::string name_;
  Graph graph_;
  std::vector<NodeAddress> addresses_;
  WeightScheme scheme_ = WeightScheme::kDefault;
  std::vector<SparseMatrix> mixing_;
  std::vector<Eigen::SparseMatrix<double, Eigen::RowMajor>> mixing_rows_;
  std::vector<int> symmetry_;
};

// W(t) of the one-peer exponential graph on n nodes (Ying et al. 2021): node i averages with
// i + 2^(t mod tau) mod n, weights 1/2. For n = 2^tau the product of tau consecutive W(t) is J.
std::vector<SparseMatrix> one_peer_exponential_schedule(int n);

}  // namespace gossip::topology
