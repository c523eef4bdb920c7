// Spectral analysis, dense method: Eigen's SelfAdjointEigenSolver for symmetric W (with the gap
// refined from the eigenvectors as a Rayleigh quotient up to n = 600), BDCSVD of W - J (or of one
// period's product - J) and the complex eigenvalues otherwise. The reference the other methods are
// tested against; kAuto uses it up to dense_max_nodes.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "topology/spectral.h"
#include "topology/spectral_internal.h"

namespace gossip::topology {
namespace {

using namespace spectral_internal;  // helpers shared by the spectral methods

// ---------------------------------------------------------------- dense

Eigen::MatrixXd dense_product(const std::vector<const SparseMatrix*>& ws) {
  Eigen::MatrixXd p = Eigen::MatrixXd(*ws.front());
  for (std::size_t t = 1; t < ws.size(); ++t) p = (*ws[t]) * p;  // W(t) ... W(0)
  return p;
}
}  // namespace

Result<SpectralReport> spectral_internal::dense_method(const std::vector<const SparseMatrix*>& ws) {
  const int n = static_cast<int>(ws.front()->rows());
  SpectralReport rep;
  rep.method = SpectralMethod::kDense;
  rep.num_nodes = n;
  rep.period = static_cast<int>(ws.size());
  rep.symmetric = ws.size() == 1 && is_symmetric(*ws.front());
  if (rep.symmetric) {
    const Eigen::MatrixXd a = Eigen::MatrixXd(*ws.front());
    const bool vectors = n <= 600;
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(
        a, vectors ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    if (es.info() != Eigen::Success) return internal_error("dense eigensolver failed");
    const auto& ev = es.eigenvalues();  // ascending; ev[n-1] = 1 for connected W
    if (n == 1) {
      fill_symmetric(rep, 1.0, 1.0);
      rep.detail = "dense (1 node)";
      return rep;
    }
    double omr = 1.0 - ev[n - 2], opr = 1.0 + ev[0];
    if (vectors) {
      const Eigen::VectorXd v2 = deflate(es.eigenvectors().col(n - 2));
      const Eigen::VectorXd vn = deflate(es.eigenvectors().col(0));
      omr = one_minus_rayleigh(*ws.front(), v2);
      opr = one_plus_rayleigh(*ws.front(), vn);
      rep.residual = std::max((a * v2 - ev[n - 2] * v2).norm() / v2.norm(),
                              (a * vn - ev[0] * vn).norm() / vn.norm());
      rep.detail = "dense SelfAdjointEigenSolver with eigenvectors, Rayleigh-refined gap";
    } else {
      rep.residual = n * kEps;  // backward-stable bound |W| n eps
      rep.detail = "dense SelfAdjointEigenSolver (eigenvalues only; residual is the n*eps bound)";
    }
    fill_symmetric(rep, omr, opr);
    return rep;
  }
  Eigen::MatrixXd p = dense_product(ws);
  Eigen::MatrixXd pj = p;
  pj.array() -= 1.0 / n;
  Eigen::BDCSVD<Eigen::MatrixXd> svd(pj);
  rep.rho = svd.singularValues()(0);
  rep.gap = 1.0 - rep.rho;
  Eigen::EigenSolver<Eigen::MatrixXd> es(p, false);
  std::vector<double> mods;
  for (int i = 0; i < n; ++i) mods.push_back(std::abs(es.eigenvalues()[i]));
  std::sort(mods.rbegin(), mods.rend());
  rep.abs_lambda2 = n > 1 ? mods[1] : 0.0;
  rep.lambda2 = rep.lambda_n = rep.one_minus_lambda2 = rep.one_plus_lambda_n = kNaN;
  rep.residual = n * kEps;
  rep.detail = std::string("dense BDCSVD of ") +
               (ws.size() > 1 ? "the period's product - J" : "W - J") +
               " (residual is the n*eps bound)";
  return rep;
}
}  // namespace gossip::topology
