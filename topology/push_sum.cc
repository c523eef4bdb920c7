// Push-sum weights (see push_sum.h).
#include "topology/push_sum.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "common/check.h"

namespace gossip::topology {

Status check_push_sum(const Topology& topology) {
  if (topology.weight_scheme() != WeightScheme::kExplicit) return Status::ok();
  for (int p = 0; p < topology.period(); ++p) {
    const SparseMatrix& w = topology.mixing_matrix(p);
    for (int j = 0; j < w.outerSize(); ++j) {
      double sum = 0;
      for (SparseMatrix::InnerIterator it(w, j); it; ++it) sum += it.value();
      if (std::abs(sum - 1.0) > 1e-9) {
        return invalid_argument(
            "weights: EXPLICIT: column " + std::to_string(j) + " of W(" + std::to_string(p) +
            ") sums to " + std::to_string(sum) +
            "; algorithm PUSH_SUM needs column-stochastic weights (what each node sends, "
            "including to itself, sums to 1): fix the file's weights or use the default scheme");
      }
    }
  }
  return Status::ok();
}

std::vector<std::pair<int, double>> push_sum_row(const Topology& topology, int i,
                                                 std::int64_t iteration) {
  std::vector<std::pair<int, double>> row;
  const bool given = topology.weight_scheme() == WeightScheme::kExplicit;
  auto p = [&](int j, double w_ij) {
    if (given) return w_ij;
    return 1.0 / (1.0 + static_cast<double>(topology.out_neighbors(j, iteration).size()));
  };
  bool self_added = false;
  for (const Neighbor& nb : topology.in_neighbors(i, iteration)) {
    if (!self_added && nb.node > i) {
      row.emplace_back(i, p(i, topology.self_weight(i, iteration)));
      self_added = true;
    }
    row.emplace_back(nb.node, p(nb.node, nb.weight));
  }
  if (!self_added) row.emplace_back(i, p(i, topology.self_weight(i, iteration)));
  return row;
}

namespace {

// Whether j sends to i at `iteration` (W_ij(iteration) > 0, j ≠ i).
bool sends_to(const Topology& topology, int j, int i, std::int64_t iteration) {
  for (const Neighbor& nb : topology.out_neighbors(j, iteration)) {
    if (nb.node == i) return true;
  }
  return false;
}

}  // namespace

std::int64_t push_sum_edge_gap(const Topology& topology) {
  const int n = topology.num_nodes();
  const std::int64_t period = topology.period();
  std::int64_t gap = 0;
  for (int j = 0; j < n; ++j) {
    std::map<int, std::vector<std::int64_t>> times;  // out-neighbour -> the times j sends to it
    for (std::int64_t p = 0; p < period; ++p) {
      for (const Neighbor& nb : topology.out_neighbors(j, p)) times[nb.node].push_back(p);
    }
    for (const auto& [i, at] : times) {
      for (std::size_t k = 0; k < at.size(); ++k) {
        const std::int64_t next = k + 1 < at.size() ? at[k + 1] : at[0] + period;
        gap = std::max(gap, next - at[k]);
      }
    }
  }
  return gap;
}

std::int64_t push_sum_last_send(const Topology& topology, int j, int i, std::int64_t total) {
  const std::int64_t period = topology.period();
  for (std::int64_t s = total - 1; s >= 0 && s >= total - period; --s) {
    if (sends_to(topology, j, i, s)) return s;
  }
  return -1;
}

double push_sum_entry(const Topology& topology, int i, int j, std::int64_t iteration) {
  for (const auto& [k, p] : push_sum_row(topology, i, iteration)) {
    if (k == j) return p;
  }
  return 0.0;
}

SparseMatrix push_sum_matrix(const Topology& topology, std::int64_t iteration) {
  const int n = topology.num_nodes();
  std::vector<Eigen::Triplet<double>> entries;
  for (int i = 0; i < n; ++i) {
    for (const auto& [j, p] : push_sum_row(topology, i, iteration)) entries.emplace_back(i, j, p);
  }
  SparseMatrix m(n, n);
  m.setFromTriplets(entries.begin(), entries.end());
  return m;
}

PushSumMix push_sum_mix(int i, std::span<const std::pair<int, double>> row,
                        std::span<const float> weights) {
  GOSSIP_CHECK_EQ(row.size(), weights.size());
  PushSumMix mix;
  for (std::size_t k = 0; k < row.size(); ++k) {
    GOSSIP_CHECK(weights[k] > 0.0f);
    mix.weight_sum += row[k].second * static_cast<double>(weights[k]);
  }
  mix.weight = static_cast<float>(mix.weight_sum);
  for (std::size_t k = 0; k < row.size(); ++k) {
    const double c = row[k].second * static_cast<double>(weights[k]) / mix.weight_sum;
    if (row[k].first == i) {
      mix.self = c;
    } else {
      mix.neighbours.emplace_back(row[k].first, c);
    }
  }
  return mix;
}

}  // namespace gossip::topology
