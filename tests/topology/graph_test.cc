// Graph: adjacency both ways, duplicate and range checks, connectivity, diameter.
#include "topology/graph.h"

#include <doctest/doctest.h>

namespace gossip::topology {
namespace {

TEST_CASE("undirected adjacency is symmetric and sorted") {
  auto g = Graph::undirected(5, {{0, 1}, {3, 0}, {1, 2}, {2, 3}, {3, 4}});
  REQUIRE(g.is_ok());
  CHECK(g->num_edges() == 5);
  auto nb = g->out_neighbors(3);
  CHECK(std::vector<int>(nb.begin(), nb.end()) == std::vector<int>{0, 2, 4});
  CHECK(g->degree(3) == 3);
  CHECK(g->max_degree() == 3);
  CHECK(g->min_degree() == 1);
  CHECK(g->has_arc(4, 3));
  CHECK(g->edges().front() == std::pair{0, 1});
  CHECK(g->is_connected());
  CHECK(g->diameter() == 3);  // 4 - 3 - 0 - 1? no: 4-3-2-1 or 4-3-0-1: 3 hops
}

TEST_CASE("directed graphs keep in- and out-neighbours apart - strong connectivity") {
  auto g = Graph::directed(3, {{0, 1}, {1, 2}});
  REQUIRE(g.is_ok());
  CHECK(g->out_degree(0) == 1);
  CHECK(g->in_degree(0) == 0);
  CHECK(g->in_neighbors(2)[0] == 1);
  CHECK_FALSE(g->is_connected());
  auto c = Graph::directed(3, {{0, 1}, {1, 2}, {2, 0}});
  CHECK(c->is_connected());
}

TEST_CASE("bad edges are rejected with the edge named") {
  auto loop = Graph::undirected(3, {{0, 0}});
  REQUIRE_FALSE(loop.is_ok());
  CHECK(loop.status().message().find("edge 0 -- 0") != std::string::npos);
  auto dup = Graph::undirected(3, {{0, 1}, {1, 0}});
  REQUIRE_FALSE(dup.is_ok());
  CHECK(dup.status().message().find("duplicate edge") != std::string::npos);
  auto range = Graph::directed(3, {{0, 3}});
  REQUIRE_FALSE(range.is_ok());
  CHECK(range.status().message().find("arc 0 -> 3") != std::string::npos);
  CHECK(Graph::directed(3, {{0, 1}, {1, 0}}).is_ok());  // two arcs, not a duplicate
  CHECK_FALSE(Graph::undirected(0, {}).is_ok());
}

TEST_CASE("disconnected undirected graphs are detected") {
  auto g = Graph::undirected(4, {{0, 1}, {2, 3}});
  CHECK_FALSE(g->is_connected());
  CHECK(g->diameter() == -1);
}

}  // namespace
}  // namespace gossip::topology
