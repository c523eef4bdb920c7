// Generated topologies for the tests: a generator's topology with its default weights, or the test
// fails with the generator's message. Header-only; needs doctest and links gossip_topology.
#pragma once

#include <doctest/doctest.h>

#include "topology/topology.h"

namespace gossip::testing {

// `kind` on `nodes` nodes (`rows` × `cols` for a torus or a grid) with WeightScheme::kDefault.
inline topology::Topology generated_topology(topology::GeneratorKind kind, int nodes, int rows = 0,
                                             int cols = 0) {
  topology::GeneratorSpec spec;
  spec.kind = kind;
  spec.nodes = nodes;
  spec.rows = rows;
  spec.cols = cols;
  auto t = topology::Topology::generate(spec, topology::WeightScheme::kDefault);
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  return std::move(t).value();
}

}  // namespace gossip::testing
