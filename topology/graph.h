// Graph: who talks to whom. n nodes 0..n-1 and a set of arcs, stored both ways as compressed
// adjacency (out- and in-neighbours, sorted). An undirected graph stores each edge as two arcs.
// A value type: immutable after construction, safe to read from any number of threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gossip::topology {

class Graph {
 public:
  Graph() = default;

  // Undirected graph from edges {i, j}, i != j, each listed once in either orientation.
  // InvalidArgument (naming the edge) for self loops, out-of-range ends or duplicates.
  static Result<Graph> undirected(int num_nodes, const std::vector<std::pair<int, int>>& edges);
  // Directed graph from arcs i -> j (i sends to j). Same checks.
  static Result<Graph> directed(int num_nodes, const std::vector<std::pair<int, int>>& arcs);

  int num_nodes() const { return n_; }
  bool is_directed() const { return directed_; }
  // Undirected: number of edges; directed: number of arcs.
  std::int64_t num_edges() const;

  // Nodes j with an arc i -> j (undirected: the neighbours of i), ascending.
  std::span<const int> out_neighbors(int i) const;
  // Nodes j with an arc j -> i (undirected: the neighbours of i), ascending.
  std::span<const int> in_neighbors(int i) const;
  int out_degree(int i) const { return static_cast<int>(out_neighbors(i).size()); }
  int in_degree(int i) const { return static_cast<int>(in_neighbors(i).size()); }
  // Undirected degree (== in == out degree).
  int degree(int i) const { return out_degree(i); }
  int max_degree() const;
  int min_degree() const;
  bool has_arc(int from, int to) const;

  // Undirected: each edge once as (i, j), i < j; directed: every arc (from, to). Sorted.
  std::vector<std::pair<int, int>> edges() const;

  // Connected (undirected) / strongly connected (directed). The empty graph is not connected.
  bool is_connected() const;
  // Undirected: hop diameter by BFS from every node (O(n m); use on small graphs). -1 if
  // disconnected.
  int diameter() const;

 private:
  static Result<Graph> build(int n, bool directed, const std::vector<std::pair<int, int>>& arcs);
  bool reaches_all(bool forward) const;

  int n_ = 0;
  bool directed_ = false;
  std::vector<std::int64_t> out_offsets_, in_offsets_;
  std::vector<int> out_adj_, in_adj_;
};

}  // namespace gossip::topology
