// Topology files (docs/design.md §3): Protobuf text format (schema topology/topology.proto), or the
// Protobuf JSON mapping (files ending in .json, or starting with '{'). Parse errors and validation
// errors name file:line:column (1-based) of the offending field, or the node/edge.
#pragma once

#include <string>
#include <string_view>

#include "common/env.h"
#include "common/status.h"
#include "topology/topology.h"
#include "topology/validate.h"

namespace gossip::topology {

namespace pb {
class TopologyFile;
}

// Reads, parses, builds and validates (validate.h). `validation` may switch off the spectral
// check (e.g. for huge files where the caller runs analyze() itself anyway).
Result<Topology> load_topology(const std::string& path, Env& env = Env::system(),
                               const ValidationOptions& validation = {});

// Parses `text` (named `filename` in messages; EDGE_LIST paths resolve against its directory) and
// builds the topology, without validation.
Result<Topology> parse_topology(std::string_view text, const std::string& filename,
                                Env& env = Env::system());

// The file message for a generator (what `gossip-topo generate` prints): every node on `host`, or
// on the placement's host list (`host { name slots base_port }` entries). It reloads to the same
// fingerprint; base_port is always written (0, no addresses, included).
pb::TopologyFile generator_file(const std::string& name, const GeneratorSpec& spec,
                                WeightScheme scheme, const std::string& host, int base_port);
pb::TopologyFile generator_file(const std::string& name, const GeneratorSpec& spec,
                                WeightScheme scheme, const Placement& placement);

// Text-format renderings: the generator form above, or an explicit one (nodes, edges/arcs and,
// for schemes other than MH/uniform, explicit weights) that reloads to the same fingerprint
// whenever W is static.
std::string to_text(const pb::TopologyFile& file);
Result<pb::TopologyFile> explicit_file(const Topology& topology);
Result<std::string> explicit_text(const Topology& topology);
Result<std::string> to_json(const pb::TopologyFile& file);

}  // namespace gossip::topology
