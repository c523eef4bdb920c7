// Spectral analysis internals shared by its source files (not installed API): the constants, the
// symmetry test and the Rayleigh refinements every method uses, and the three methods that
// analyze_list (spectral.cc) chooses between. The files of the spectral analysis, one job each:
//   spectral.cc          entry points (analyze, analyze_matrix, laplacian_extremes), method names,
//                        the choice of method, the shared Rayleigh refinements
//   spectral_exact.cc    exact method: W invariant under a translation group (circulant, torus,
//                        (Z_2)^d by a fast Walsh-Hadamard transform); group_spectrum
//   spectral_dense.cc    dense method: Eigen's eigen-solvers and SVD, n <= dense_max_nodes
//   spectral_lanczos.cc  Lanczos method: the plain recurrence on P W P (symmetric_extremes) and
//                        Spectra's solver on M^T M (non-symmetric W, schedules)
#pragma once

#include <limits>
#include <vector>

#include "common/status.h"
#include "topology/spectral.h"

namespace gossip::topology::spectral_internal {

inline constexpr double kEps = std::numeric_limits<double>::epsilon();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// W equals its transpose bit for bit.
bool is_symmetric(const SparseMatrix& w);

// Rayleigh quotients v^T (I - W) v / v^T v and v^T (I + W) v / v^T v as sums over edges (W
// symmetric), so that small gaps keep full relative accuracy.
double one_minus_rayleigh(const SparseMatrix& w, const Eigen::VectorXd& v);
double one_plus_rayleigh(const SparseMatrix& w, const Eigen::VectorXd& v);
// v with its mean removed (projected on 1-perp).
Eigen::VectorXd deflate(Eigen::VectorXd v);
// rho, gap, lambda_2, lambda_n and |lambda|_2 of a symmetric W from omr = 1 - lambda_2 and
// opr = 1 + lambda_n.
void fill_symmetric(SpectralReport& rep, double omr, double opr);

// The methods, on W (one matrix) or on one period's product W(p-1) ... W(0) of a schedule.
Result<SpectralReport> exact_method(const std::vector<const SparseMatrix*>& ws,
                                    const std::vector<int>& orders);
Result<SpectralReport> dense_method(const std::vector<const SparseMatrix*>& ws);
Result<SpectralReport> lanczos_method(const std::vector<const SparseMatrix*>& ws,
                                      const SpectralOptions& o);

}  // namespace gossip::topology::spectral_internal
