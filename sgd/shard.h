// Sharding a data set across n nodes, deterministically from a seed: node i computes its own shard
// from (dataset, n, i, seed) alone, and the shards of all nodes form a partition of the data set
// (disjoint, covering every example). Schemes:
//
//   iid        a seeded permutation cut into n nearly equal parts (sizes differ by ≤ 1)
//   by_label   examples sorted by label (ties in seeded random order) and cut into n contiguous
//              equal parts: the pathological non-iid split of McMahan et al. 2017 — with n ≥ C
//              each node sees one or two labels
//   dirichlet  label skew (Hsu et al. 2019): for each class c, proportions p_c ~ Dir(α·1_n) over
//              nodes; class c's examples (seeded order) are cut by the cumulative proportions.
//              Small α: few labels per node; large α: close to iid. Redrawn (same stream) when a
//              node would be empty.
//
// Regression data sets (no labels) support iid only.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/status.h"
#include "sgd/dataset.h"

namespace gossip::sgd {

enum class ShardScheme { kIid, kByLabel, kDirichlet };
inline constexpr EnumTable<ShardScheme, 3> kShardSchemes{"shard scheme",
                                                         {{ShardScheme::kIid, "iid"},
                                                          {ShardScheme::kByLabel, "by_label"},
                                                          {ShardScheme::kDirichlet, "dirichlet"}}};

struct ShardConfig {
  ShardScheme scheme = ShardScheme::kIid;
  double dirichlet_alpha = 0.5;  // dirichlet only; > 0
};

// Indices (ascending) of node `node`'s examples among `data`'s, 0 ≤ node < num_nodes.
Result<std::vector<std::int64_t>> shard_indices(const Dataset& data, const ShardConfig& config,
                                                int num_nodes, int node, std::uint64_t seed);

// Every node's shard at once (what shard_indices computes internally); for the simulator and tests.
Result<std::vector<std::vector<std::int64_t>>> all_shards(const Dataset& data,
                                                          const ShardConfig& config, int num_nodes,
                                                          std::uint64_t seed);

}  // namespace gossip::sgd
