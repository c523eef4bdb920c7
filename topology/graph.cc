// Graph construction and connectivity. Adjacency is built by counting sort so that graphs of
// millions of nodes build in linear time.
#include "topology/graph.h"

#include <algorithm>
#include <deque>

#include "common/check.h"

namespace gossip::topology {

Result<Graph> Graph::undirected(int num_nodes, const std::vector<std::pair<int, int>>& edges) {
  std::vector<std::pair<int, int>> arcs;
  arcs.reserve(edges.size() * 2);
  for (auto [i, j] : edges) {
    arcs.emplace_back(i, j);
    arcs.emplace_back(j, i);
  }
  return build(num_nodes, false, arcs);
}

Result<Graph> Graph::directed(int num_nodes, const std::vector<std::pair<int, int>>& arcs) {
  return build(num_nodes, true, arcs);
}

Result<Graph> Graph::build(int n, bool directed, const std::vector<std::pair<int, int>>& arcs) {
  if (n <= 0)
    return invalid_argument("a topology needs at least one node (got " + std::to_string(n) + ")");
  const char* what = directed ? "arc " : "edge ";
  for (auto [i, j] : arcs) {
    if (i >= 0 && i < n && j >= 0 && j < n && i != j) [[likely]]
      continue;
    // The message is built only on failure: no allocation per arc on the normal path.
    const std::string name =
        std::string(what) + std::to_string(i) + (directed ? " -> " : " -- ") + std::to_string(j);
    if (i < 0 || i >= n || j < 0 || j >= n)
      return invalid_argument(name + ": node out of range 0.." + std::to_string(n - 1));
    return invalid_argument(name + ": self loop (the diagonal of W is implicit)");
  }
  Graph g;
  g.n_ = n;
  g.directed_ = directed;
  auto fill = [n](const std::vector<std::pair<int, int>>& a, bool by_from,
                  std::vector<std::int64_t>& off, std::vector<int>& adj) {
    off.assign(static_cast<std::size_t>(n) + 1, 0);
    for (auto [i, j] : a) ++off[static_cast<std::size_t>(by_from ? i : j) + 1];
    for (int i = 0; i < n; ++i) off[i + 1] += off[i];
    adj.resize(a.size());
    std::vector<std::int64_t> pos(off.begin(), off.end() - 1);
    for (auto [i, j] : a) adj[pos[by_from ? i : j]++] = by_from ? j : i;
    for (int i = 0; i < n; ++i) std::sort(adj.begin() + off[i], adj.begin() + off[i + 1]);
  };
  fill(arcs, true, g.out_offsets_, g.out_adj_);
  for (int i = 0; i < n; ++i) {
    auto nb = g.out_neighbors(i);
    auto dup = std::adjacent_find(nb.begin(), nb.end());
    if (dup != nb.end())
      return invalid_argument(std::string("duplicate ") + what + std::to_string(i) +
                              (directed ? " -> " : " -- ") + std::to_string(*dup));
  }
  if (directed) {
    fill(arcs, false, g.in_offsets_, g.in_adj_);
  }
  return g;
}

std::int64_t Graph::num_edges() const {
  const auto arcs = static_cast<std::int64_t>(out_adj_.size());
  return directed_ ? arcs : arcs / 2;
}

std::span<const int> Graph::out_neighbors(int i) const {
  GOSSIP_CHECK(i >= 0 && i < n_) << "node " << i;
  return {out_adj_.data() + out_offsets_[i],
          static_cast<std::size_t>(out_offsets_[i + 1] - out_offsets_[i])};
}

std::span<const int> Graph::in_neighbors(int i) const {
  if (!directed_) return out_neighbors(i);
  GOSSIP_CHECK(i >= 0 && i < n_) << "node " << i;
  return {in_adj_.data() + in_offsets_[i],
          static_cast<std::size_t>(in_offsets_[i + 1] - in_offsets_[i])};
}

int Graph::max_degree() const {
  int d = 0;
  for (int i = 0; i < n_; ++i) d = std::max(d, out_degree(i));
  return d;
}

int Graph::min_degree() const {
  int d = n_;
  for (int i = 0; i < n_; ++i) d = std::min(d, out_degree(i));
  return d;
}

bool Graph::has_arc(int from, int to) const {
  auto nb = out_neighbors(from);
  return std::binary_search(nb.begin(), nb.end(), to);
}

std::vector<std::pair<int, int>> Graph::edges() const {
  std::vector<std::pair<int, int>> e;
  e.reserve(static_cast<std::size_t>(num_edges()));
  for (int i = 0; i < n_; ++i)
    for (int j : out_neighbors(i))
      if (directed_ || i < j) e.emplace_back(i, j);
  return e;
}

bool Graph::reaches_all(bool forward) const {
  std::vector<char> seen(static_cast<std::size_t>(n_), 0);
  std::vector<int> stack{0};
  seen[0] = 1;
  int count = 1;
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    for (int j : forward ? out_neighbors(i) : in_neighbors(i)) {
      if (!seen[j]) {
        seen[j] = 1;
        ++count;
        stack.push_back(j);
      }
    }
  }
  return count == n_;
}

bool Graph::is_connected() const {
  if (n_ == 0) return false;
  return reaches_all(true) && (!directed_ || reaches_all(false));
}

int Graph::diameter() const {
  if (!is_connected()) return -1;
  int diam = 0;
  std::vector<int> dist(static_cast<std::size_t>(n_));
  std::deque<int> queue;
  for (int s = 0; s < n_; ++s) {
    std::fill(dist.begin(), dist.end(), -1);
    dist[s] = 0;
    queue.assign(1, s);
    while (!queue.empty()) {
      const int i = queue.front();
      queue.pop_front();
      for (int j : out_neighbors(i))
        if (dist[j] < 0) {
          dist[j] = dist[i] + 1;
          diam = std::max(diam, dist[j]);
          queue.push_back(j);
        }
    }
  }
  return diam;
}

}  // namespace gossip::topology
