// Validation of a topology: run on every load (gossip-topo, gossip-sim, gossipd), so that nobody
// trains on a W that does not average. Rules (docs/design.md §1):
//   unique ids 0..n-1, unique addresses, ports 1..65535;
//   W nonnegative; every row and column sums to 1 within `tolerance`;
//   support of W within arcs ∪ diagonal; W symmetric for undirected graphs;
//   graph connected (strongly, for directed graphs); rho = ||W - J||_2 < 1 (of one period's
//   product when time-varying), e.g. the even ring with weights A/2 oscillates and is rejected.
// The first broken rule is returned as InvalidArgument naming the node, edge or entry.
#pragma once

#include "common/status.h"
#include "topology/spectral.h"
#include "topology/topology.h"

namespace gossip::topology {

struct ValidationOptions {
  double tolerance = 1e-9;
  bool check_spectrum = true;  // the rho < 1 rule (costs one spectral analysis)
  SpectralOptions spectral;
};

// Structure of one W against its graph (no spectrum, no addresses).
Status validate_weights(const Graph& graph, const SparseMatrix& w, double tolerance = 1e-9);

// Whether rho(W - J/n) < 1 follows from structure alone, for a topology whose W passed
// validate_weights: one W (not time-varying) on an undirected graph — so W is nonnegative,
// symmetric and doubly stochastic within the tolerance — with every W_ii > 0 and the graph of
// W's positive entries connected. Then W is irreducible and aperiodic, hence primitive
// (Perron–Frobenius): the eigenvalue 1 is simple and every other eigenvalue lies in (-1, 1), so
// rho = max(|lambda_2|, |lambda_n|) < 1. O(n + nnz(W)); false means "not proven", not "rho >= 1".
bool spectrum_follows_from_structure(const Topology& topology);

// Everything. When check_spectrum is set and `report` is not null, the spectral report is stored
// there so callers need not recompute it; with `report` null, the spectral analysis is skipped
// where spectrum_follows_from_structure() already proves rho < 1.
Status validate(const Topology& topology, const ValidationOptions& options = {},
                SpectralReport* report = nullptr);

}  // namespace gossip::topology
