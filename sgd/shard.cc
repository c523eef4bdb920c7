// Deterministic sharding. Every node runs the same computation for all nodes and keeps its own
// part: O(N) work on a data set that each node holds anyway, and no coordination.
#include "sgd/shard.h"

#include <algorithm>
#include <string>

#include "common/random.h"

namespace gossip::sgd {

namespace {

// Cuts `order` into num_nodes contiguous parts of sizes differing by at most one.
std::vector<std::vector<std::int64_t>> cut_even(const std::vector<std::int64_t>& order,
                                                int num_nodes) {
  std::vector<std::vector<std::int64_t>> shards(num_nodes);
  const std::int64_t n = static_cast<std::int64_t>(order.size());
  for (int i = 0; i < num_nodes; ++i) {
    const std::int64_t begin = n * i / num_nodes, end = n * (i + 1) / num_nodes;
    shards[i].assign(order.begin() + begin, order.begin() + end);
  }
  return shards;
}

}  // namespace

Result<std::vector<std::vector<std::int64_t>>> all_shards(const Dataset& data,
                                                          const ShardConfig& config, int num_nodes,
                                                          std::uint64_t seed) {
  if (num_nodes < 1) return invalid_argument("shard: num_nodes must be >= 1");
  if (data.num_examples < num_nodes) {
    return invalid_argument("shard: " + std::to_string(data.num_examples) +
                            " examples cannot be split over " + std::to_string(num_nodes) +
                            " nodes");
  }
  if (config.scheme != ShardScheme::kIid && !data.is_classification()) {
    return invalid_argument("shard: scheme " + std::string(kShardSchemes.name(config.scheme)) +
                            " needs a labelled data set; use iid");
  }
  Rng rng(seed);
  std::vector<std::int64_t> order(data.num_examples);
  for (std::int64_t i = 0; i < data.num_examples; ++i) order[i] = i;
  rng.shuffle(std::span<std::int64_t>(order));

  std::vector<std::vector<std::int64_t>> shards;
  switch (config.scheme) {
    case ShardScheme::kIid:
      shards = cut_even(order, num_nodes);
      break;
    case ShardScheme::kByLabel:
      // Stable sort keeps the seeded random order among examples of one label.
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
        return data.labels[a] < data.labels[b];
      });
      shards = cut_even(order, num_nodes);
      break;
    case ShardScheme::kDirichlet: {
      if (!(config.dirichlet_alpha > 0)) {
        return invalid_argument("shard: dirichlet_alpha must be > 0");
      }
      std::vector<std::vector<std::int64_t>> by_class(data.num_classes);
      for (std::int64_t i : order) by_class[data.labels[i]].push_back(i);
      constexpr int kMaxDraws = 1000;
      for (int draw = 0; draw < kMaxDraws; ++draw) {
        shards.assign(num_nodes, {});
        for (const auto& members : by_class) {
          std::vector<double> p(num_nodes);
          double total = 0;
          for (double& v : p) total += (v = rng.gamma(config.dirichlet_alpha));
          const std::int64_t m = static_cast<std::int64_t>(members.size());
          double cum = 0;
          std::int64_t begin = 0;
          for (int i = 0; i < num_nodes; ++i) {
            cum += p[i];
            std::int64_t end =
                i + 1 == num_nodes
                    ? m
                    : std::min<std::int64_t>(m, static_cast<std::int64_t>(cum / total * m));
            end = std::max(end, begin);
            shards[i].insert(shards[i].end(), members.begin() + begin, members.begin() + end);
            begin = end;
          }
        }
        bool all_nonempty =
            std::all_of(shards.begin(), shards.end(), [](const auto& s) { return !s.empty(); });
        if (all_nonempty) break;
        if (draw + 1 == kMaxDraws) {
          return invalid_argument(
              "shard: dirichlet_alpha " + std::to_string(config.dirichlet_alpha) +
              " left a node empty in " + std::to_string(kMaxDraws) + " draws; use a larger alpha");
        }
      }
      break;
    }
  }
  for (auto& s : shards) std::sort(s.begin(), s.end());
  return shards;
}

Result<std::vector<std::int64_t>> shard_indices(const Dataset& data, const ShardConfig& config,
                                                int num_nodes, int node, std::uint64_t seed) {
  if (node < 0 || node >= num_nodes) {
    return invalid_argument("shard: node " + std::to_string(node) + " is not in [0, " +
                            std::to_string(num_nodes) + ")");
  }
  GOSSIP_ASSIGN_OR_RETURN(auto shards, all_shards(data, config, num_nodes, seed));
  return std::move(shards[node]);
}

}  // namespace gossip::sgd
