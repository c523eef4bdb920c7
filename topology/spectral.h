// Spectral analysis of a mixing matrix: rho = ||W - J||_2, gap = 1 - rho, lambda_2, lambda_n.
// Consensus error under pure gossip shrinks like rho^t, so this number ties the topology to the
// simulator and to the daemon's measured decay.
//
// Methods (chosen by kAuto, or forced):
//  - kExact: W invariant under a translation group Z_m1 x ... x Z_mk (circulant: ring, k-ring,
//    complete, exponential; torus; hypercube). Eigenvalues are the group's Fourier transform of
//    row 0, lambda_k = sum_g w_g exp(-2 pi i <k, g/m>). For symmetric W the gap is computed as
//    sum_g w_g 2 sin^2(theta/2) (and 1 + lambda as sum_g w_g 2 cos^2(theta/2)), so tiny gaps keep
//    full relative accuracy (ring of 10^6: 1.3e-11 to ~1e-15 relative). Such W are normal, so
//    ||W - J||_2 = max_{k != 0} |lambda_k|. O(n * nnz(row 0)). For (Z_2)^d (hypercube, any
//    XOR-invariant W) a fast Walsh-Hadamard transform carrying the even and odd partial sums,
//    so 1 - lambda = 2 * (odd sum) and 1 + lambda = 2 * (even sum) without cancellation;
//    O(n log n).
//  - kDense: Eigen's SelfAdjointEigenSolver (symmetric) or BDCSVD of W - J and the complex
//    eigenvalues (non-symmetric). n <= dense_max_nodes.
//  - kLanczos: symmetric W: plain Lanczos (no restarts, no reorthogonalisation, three vectors)
//    on P W P with P = I - J, both ends of the spectrum from one Krylov space, convergence by
//    Paige's Ritz residual bound, Ritz vectors from a second pass (symmetric_extremes below).
//    Non-symmetric W and schedules: Spectra's Lanczos on (W - J)^T (W - J). The gap is
//    recomputed from the Ritz vector as a Rayleigh quotient of I - W written as a sum over edges
//    (1/2 sum_ij W_ij (v_i - v_j)^2), which keeps relative accuracy for small gaps.
// Thread-safe: pure functions.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/topology.h"
#include "topology/weights.h"

namespace gossip::topology {

enum class SpectralMethod { kAuto, kExact, kDense, kLanczos };
Result<SpectralMethod> parse_spectral_method(std::string_view name);  // auto|exact|dense|lanczos
std::string_view spectral_method_name(SpectralMethod method);

struct SpectralOptions {
  SpectralMethod method = SpectralMethod::kAuto;
  int dense_max_nodes = 1500;  // kAuto uses dense up to this n when no exact method applies
  // Lanczos: relative tolerance on Ritz residuals. The reported rho and gap are Rayleigh quotients
  // of the Ritz vectors, whose error is quadratic in the residual, so 1e-10 already gives rho to
  // ~1e-14 (measured on random 4-regular graphs of 1e5 nodes); tighter costs restarts.
  double tolerance = 1e-10;
  // Lanczos: most steps of the plain Lanczos recurrence (symmetric W), or restarts of Spectra's
  // solver (non-symmetric W and time-varying schedules, on M^T M).
  int max_iterations = 20000;
  std::vector<int> symmetry;  // translation group hint for kExact (Topology::symmetry_group())
  // Lanczos only (exact and dense are bounded by n): before it starts, its time is estimated
  // (lanczos_estimate); with time_limit_s > 0 an estimate above it is refused at once
  // (DeadlineExceeded naming the estimate), and a run that reaches the limit anyway stops there
  // (DeadlineExceeded naming the steps done). `note`, when set, is told an estimate of 5 s or more
  // before the run starts.
  double time_limit_s = 0;
  std::function<void(const std::string&)> note;
};

// What the Lanczos method would cost on W (or a schedule) before it runs. Plain Lanczos converges
// in about 1/sqrt(gap) steps, and a graph of bounded degree and hop diameter D has a gap of about
// 1/D^2, so steps ~ 3 D + 60 (measured on grids: 2.1 D on squares of side 100 to 800, 470 to 3432
// steps; 3.0 D on 60 x 80). D is the double-sweep lower bound (two breadth-first searches over W's
// pattern); one product's time is measured on W itself (three products), times 1.5 for the
// recurrence's vector passes.
struct LanczosEstimate {
  int diameter = 0;     // hop diameter of W's pattern (lower bound)
  int steps = 0;        // Lanczos steps expected
  double products = 0;  // products with W expected (both passes; schedules: every factor)
  double seconds_per_product = 0;
  double seconds = 0;             // products x seconds_per_product
  std::string to_string() const;  // "about 18054 steps (hop diameter >= 5998), 36108 products
                                  //  with W at 140 ms each: about 5055 s"
};
LanczosEstimate lanczos_estimate(const std::vector<const SparseMatrix*>& ws,
                                 const SpectralOptions& options = {});

struct SpectralReport {
  SpectralMethod method = SpectralMethod::kAuto;  // the one that ran
  std::string detail;  // e.g. "circulant (Z_1000000)", "Lanczos ncv=20, 35 restarts"
  bool symmetric = true;
  int num_nodes = 0;
  double rho = 0.0;  // ||W - J||_2 (of one period's product when time-varying)
  double gap = 0.0;  // 1 - rho, with full relative accuracy where the method allows
  // Symmetric W: the second-largest and smallest eigenvalues, and 1 - lambda_2, 1 + lambda_n
  // computed without cancellation. Non-symmetric W: lambda_2 = NaN, lambda_n = NaN.
  double lambda2 = 0.0, lambda_n = 0.0;
  double one_minus_lambda2 = 0.0, one_plus_lambda_n = 0.0;
  double abs_lambda2 = 0.0;  // second-largest eigenvalue modulus (= rho for normal W)
  // Achieved accuracy: largest residual ||A v - theta v|| over the returned eigenpairs (Lanczos,
  // dense), or a rounding bound n_terms * eps (exact).
  double residual = 0.0;
  int iterations = 0;
  double seconds = 0.0;
  int period = 1;                  // time-varying: rho is that of W(period-1) ... W(0)
  double rho_per_iteration = 0.0;  // rho^(1/period)
  double gap_per_iteration = 0.0;  // 1 - rho^(1/period), accurate for tiny gaps
};

// Spectrum of one matrix. `w` must be square and nonempty (CHECKed); other failures (a forced
// method that does not apply, Lanczos not converging) are InvalidArgument / Internal.
Result<SpectralReport> analyze_matrix(const SparseMatrix& w, const SpectralOptions& options = {});

// Spectrum of a topology: of W, or of the product of one period for time-varying schedules
// (exact for circulant schedules at any n; dense product otherwise).
Result<SpectralReport> analyze(const Topology& topology, SpectralOptions options = {});

// Eigenvalues (real part, imaginary part) of the matrix W invariant under the translation group
// `orders`, one per character k in mixed-radix order; InvalidArgument if W is not invariant.
struct GroupSpectrum {
  std::vector<double> re, im;        // lambda_k
  std::vector<double> one_minus_re;  // 1 - Re lambda_k, cancellation-free
  std::vector<double> one_plus_re;   // 1 + Re lambda_k, cancellation-free
};
Result<GroupSpectrum> group_spectrum(const SparseMatrix& w, const std::vector<int>& orders);

// lambda_2 and lambda_n of a symmetric doubly-stochastic W (the extreme eigenvalues of P W P on
// 1-perp, P = I - J) with unit eigenvectors u, v orthogonal to 1, by the plain (unrestarted,
// unreorthogonalised) Lanczos recurrence: both ends from one Krylov space, three vectors of memory,
// a second pass to form the Ritz vectors. Converged when the Ritz residual bound is below
// tolerance * max(|lambda_2|, |lambda_n|); `residual` is the true max ||P W P y - theta y||, ||y||
// = 1. `start` (optional): a start vector, e.g. u + v of a nearby W (warm start). `w` must be
// compressed.
struct SymmetricExtremes {
  double lambda2 = 0.0, lambda_n = 0.0;
  Eigen::VectorXd u, v;
  double residual = 0.0;
  int steps = 0;         // Lanczos steps (dimension of the Krylov space)
  int applications = 0;  // products with W, both passes
};
// `time_limit_s` > 0: DeadlineExceeded, naming the steps done, once the first pass has run that
// long without converging.
Result<SymmetricExtremes> symmetric_extremes(const SparseMatrix& w, double tolerance = 1e-10,
                                             int max_steps = 20000,
                                             const Eigen::VectorXd* start = nullptr,
                                             double time_limit_s = 0);

// Extreme eigenvalues of a symmetric Laplacian-like matrix L = I - W restricted to 1-perp:
// lambda_{n-1}(L) (smallest nonzero) and lambda_1(L) (largest). Used by best-constant weights.
Result<std::pair<double, double>> laplacian_extremes(const SparseMatrix& laplacian);

}  // namespace gossip::topology
