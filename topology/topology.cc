// Topology: assembly of graph, addresses and W(t); neighbour queries; the fingerprint.
#include "topology/topology.h"

#include <openssl/evp.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/check.h"
#include "common/little_endian.h"
#include "topology/optimize.h"

namespace gossip::topology {
namespace {

// The translation group under which a generated W is invariant (see symmetry_group()).
std::vector<int> generator_symmetry(const GeneratorSpec& spec, int n) {
  switch (spec.kind) {
    case GeneratorKind::kRing:
    case GeneratorKind::kKRing:
    case GeneratorKind::kComplete:
    case GeneratorKind::kExponential:
    case GeneratorKind::kOnePeerExponential:
      return {n};
    case GeneratorKind::kTorus:
      return {spec.rows, spec.cols};
    case GeneratorKind::kHypercube:
      return std::vector<int>(static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(n))),
                              2);
    default:
      return {};
  }
}

// A one-element schedule that takes w's storage (swap): a braced list, push_back or std::move
// would copy it, Eigen 3.4's SparseMatrix having no move constructor.
std::vector<SparseMatrix> single(SparseMatrix& w) {
  std::vector<SparseMatrix> v(1);
  v[0].swap(w);
  return v;
}

}  // namespace

std::vector<SparseMatrix> one_peer_exponential_schedule(int n) {
  const int tau = std::max(1, exponential_hops(n));
  std::vector<SparseMatrix> out;
  for (int k = 0; k < tau; ++k) {
    const std::int64_t hop = (std::int64_t{1} << k) % n;
    std::vector<Eigen::Triplet<double>> t;
    t.reserve(2 * static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      // x_i <- (x_i + x_{i - 2^k}) / 2: i receives from i - 2^k and sends to i + 2^k, matching
      // the arcs i -> i + 2^k of the exponential graph.
      t.emplace_back(i, i, 0.5);
      t.emplace_back(i, static_cast<int>((i - hop + n) % n), 0.5);
    }
    SparseMatrix w(n, n);
    w.setFromTriplets(t.begin(), t.end());  // duplicates (n = 1 hop wraps) are summed
    w.makeCompressed();
    out.push_back(std::move(w));
  }
  return out;
}

Result<Topology> Topology::generate(const GeneratorSpec& spec, WeightScheme scheme,
                                    const std::string& host, int base_port) {
  return generate(spec, scheme, Placement{.host = host, .base_port = base_port, .hosts = {}});
}

Result<Topology> Topology::generate(const GeneratorSpec& spec, WeightScheme scheme,
                                    const Placement& placement) {
  if (scheme == WeightScheme::kExplicit)
    return invalid_argument("a generated topology cannot have explicit weights");
  if (spec.kind == GeneratorKind::kEdgeList)
    return invalid_argument("edge lists are loaded through a topology file (topology_file.h)");
  GOSSIP_ASSIGN_OR_RETURN(Graph g, generate_graph(spec));
  const int n = g.num_nodes();
  GOSSIP_ASSIGN_OR_RETURN(std::vector<NodeAddress> addresses, place_nodes(n, placement));

  Topology t;
  t.name_ = std::string(generator_kind_name(spec.kind)) + std::to_string(n);
  t.graph_ = std::move(g);
  t.addresses_ = std::move(addresses);
  t.scheme_ = scheme;
  t.symmetry_ = generator_symmetry(spec, n);
  if (spec.kind == GeneratorKind::kOnePeerExponential) {
    if (scheme != WeightScheme::kDefault)
      return invalid_argument("one_peer_exponential has fixed weights 1/2; weight scheme '" +
                              std::string(weight_scheme_name(scheme)) + "' does not apply");
    t.set_mixing(one_peer_exponential_schedule(n));
    return t;
  }
  if (scheme == WeightScheme::kOptimized) {
    GOSSIP_ASSIGN_OR_RETURN(auto opt, optimize_weights(t.graph_));
    t.set_mixing(single(opt.weights), /*symmetric=*/true);  // weights_from_edge_values
    return t;
  }
  SparseMatrix w;
  GOSSIP_RETURN_IF_ERROR(compute_weights_into(t.graph_, scheme, w));
  // Every scheme gives W_ij = W_ji bit for bit on an undirected graph (symmetric formulas; uniform
  // only on regular graphs); tests/topology/topology_test.cc checks the row copy against Eigen's.
  t.set_mixing(single(w), /*symmetric=*/!t.graph_.is_directed());
  return t;
}

Result<Topology> Topology::from_parts(std::string name, Graph graph,
                                      std::vector<NodeAddress> addresses, SparseMatrix weights,
                                      WeightScheme scheme, std::vector<int> symmetry) {
  const int n = graph.num_nodes();
  if (weights.rows() != n || weights.cols() != n)
    return invalid_argument("weights are " + std::to_string(weights.rows()) + "x" +
                            std::to_string(weights.cols()) + " for " + std::to_string(n) +
                            " nodes");
  if (!addresses.empty() && static_cast<int>(addresses.size()) != n)
    return invalid_argument(std::to_string(addresses.size()) + " addresses for " +
                            std::to_string(n) + " nodes");
  Topology t;
  t.name_ = std::move(name);
  t.graph_ = std::move(graph);
  t.addresses_ = std::move(addresses);
  t.scheme_ = scheme;
  t.symmetry_ = std::move(symmetry);
  weights.makeCompressed();
  t.set_mixing(single(weights));
  return t;
}

Status Topology::set_addresses(std::vector<NodeAddress> addresses) {
  if (!addresses.empty() && static_cast<int>(addresses.size()) != num_nodes())
    return invalid_argument(std::to_string(addresses.size()) + " addresses for " +
                            std::to_string(num_nodes()) + " nodes");
  addresses_ = std::move(addresses);
  return Status::ok();
}

void Topology::set_mixing(std::vector<SparseMatrix> mixing, bool symmetric) {
  mixing_ = std::move(mixing);
  mixing_rows_.clear();
  mixing_rows_.reserve(mixing_.size());  // growth would copy the matrices
  for (const auto& w : mixing_) {
    if (symmetric && w.isCompressed()) {
      // W = W^T: the compressed columns of W are its compressed rows.
      auto& r = mixing_rows_.emplace_back(w.rows(), w.cols());
      r.resizeNonZeros(w.nonZeros());
      std::copy(w.outerIndexPtr(), w.outerIndexPtr() + w.outerSize() + 1, r.outerIndexPtr());
      std::copy(w.innerIndexPtr(), w.innerIndexPtr() + w.nonZeros(), r.innerIndexPtr());
      std::copy(w.valuePtr(), w.valuePtr() + w.nonZeros(), r.valuePtr());
      continue;
    }
    mixing_rows_.emplace_back(w);
    mixing_rows_.back().makeCompressed();
  }
}

const SparseMatrix& Topology::mixing_matrix(std::int64_t iteration) const {
  GOSSIP_CHECK(!mixing_.empty()) << "empty topology";
  GOSSIP_CHECK_GE(iteration, 0);
  return mixing_[static_cast<std::size_t>(iteration % period())];
}

const Eigen::SparseMatrix<double, Eigen::RowMajor>& Topology::mixing_matrix_rows(
    std::int64_t iteration) const {
  GOSSIP_CHECK(!mixing_rows_.empty()) << "empty topology";
  GOSSIP_CHECK_GE(iteration, 0);
  return mixing_rows_[static_cast<std::size_t>(iteration % period())];
}

std::vector<Neighbor> Topology::in_neighbors(int i, std::int64_t iteration) const {
  GOSSIP_CHECK(i >= 0 && i < num_nodes()) << "node " << i;
  std::vector<Neighbor> out;
  for (Eigen::SparseMatrix<double, Eigen::RowMajor>::InnerIterator it(mixing_matrix_rows(iteration),
                                                                      i);
       it; ++it)
    if (it.col() != i && it.value() != 0.0) out.push_back({static_cast<int>(it.col()), it.value()});
  return out;
}

std::vector<Neighbor> Topology::out_neighbors(int i, std::int64_t iteration) const {
  GOSSIP_CHECK(i >= 0 && i < num_nodes()) << "node " << i;
  std::vector<Neighbor> out;
  for (SparseMatrix::InnerIterator it(mixing_matrix(iteration), i); it; ++it)
    if (it.row() != i && it.value() != 0.0) out.push_back({static_cast<int>(it.row()), it.value()});
  return out;
}

double Topology::self_weight(int i, std::int64_t iteration) const {
  GOSSIP_CHECK(i >= 0 && i < num_nodes()) << "node " << i;
  return mixing_matrix(iteration).coeff(i, i);
}

std::string Topology::fingerprint() const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  GOSSIP_CHECK(ctx != nullptr);
  GOSSIP_CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1);
  // The bytes go through a buffer: one EVP_DigestUpdate per 8-byte value was most of the time of
  // a large topology's fingerprint. The digest is of the same byte stream either way.
  std::vector<unsigned char> buffer;
  buffer.reserve(1 << 16);
  auto flush = [&] {
    EVP_DigestUpdate(ctx, buffer.data(), buffer.size());
    buffer.clear();
  };
  auto put_bytes = [&](const void* data, std::size_t size) {
    if (buffer.size() + size > buffer.capacity()) flush();
    if (size > buffer.capacity()) {
      EVP_DigestUpdate(ctx, data, size);
      return;
    }
    const auto* bytes = static_cast<const unsigned char*>(data);
    buffer.insert(buffer.end(), bytes, bytes + size);
  };
  auto put_u64 = [&](std::uint64_t v) {
    unsigned char b[8];
    gossip::put_u64(b, v);
    put_bytes(b, 8);
  };
  auto put_str = [&](const std::string& s) {
    put_u64(s.size());
    put_bytes(s.data(), s.size());
  };
  put_str("gossip-topology-v1");
  put_u64(static_cast<std::uint64_t>(num_nodes()));
  put_u64(is_directed() ? 1 : 0);
  put_u64(addresses_.size());
  for (const auto& a : addresses_) put_str(a.to_string());
  put_u64(mixing_rows_.size());
  for (const auto& w : mixing_rows_) {
    put_u64(static_cast<std::uint64_t>(w.nonZeros()));
    for (int i = 0; i < w.outerSize(); ++i)
      for (Eigen::SparseMatrix<double, Eigen::RowMajor>::InnerIterator it(w, i); it; ++it) {
        put_u64(static_cast<std::uint64_t>(i));
        put_u64(static_cast<std::uint64_t>(it.col()));
        put_u64(std::bit_cast<std::uint64_t>(it.value()));
      }
  }
  flush();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  GOSSIP_CHECK(EVP_DigestFinal_ex(ctx, digest, &len) == 1);
  EVP_MD_CTX_free(ctx);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned k = 0; k < len; ++k) {
    hex += kHex[digest[k] >> 4];
    hex += kHex[digest[k] & 15];
  }
  return hex;
}

}  // namespace gossip::topology
