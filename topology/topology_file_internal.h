// Topology file internals shared by its source files (not installed API): the JSON position tree,
// the Locator that turns a field into "file:line:col", the tables between our enums and the
// .proto's, and the two ways a parsed file becomes a Topology. The files of topology files, one
// job each:
//   topology_file.cc        parse_topology and load_topology: text format or JSON, errors at
//                           file:line:column (protobuf's positions, a JSON position scan), UTF-8
//   topology_file_build.cc  from the parsed message to a Topology: a generator block and its host
//                           placement, or explicit nodes and edges; the enum tables
//   topology_file_write.cc  the other way: generator_file, explicit_file, to_text, to_json
#pragma once

#include <google/protobuf/text_format.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "topology/topology.h"
#include "topology/topology.pb.h"

namespace gossip::topology::file_internal {

namespace gp = google::protobuf;

// Where the keys and values of a JSON topology file sit (topology_file.cc scans them).
struct JsonPlace {
  int line = 0;  // 1-based; 0: unknown
  int column = 0;
};
struct JsonValue;
// An object member: where its key sits, and its value (one) or an array's elements.
struct JsonMember {
  JsonPlace key;
  std::vector<JsonValue> values;
};
struct JsonValue {
  JsonPlace at;
  std::map<std::string, JsonMember> members;  // objects only, by json_key()
};

// Where a field sits in the file: "file:line:col" (1-based), or "file" when unknown. For a JSON
// file (`json_text` given) the positions are scanned on the first question, so a file that loads
// without an error never builds them (an explicit topology of a million nodes would hold a
// member map per node).
class Locator {
 public:
  Locator(std::string file, const gp::TextFormat::ParseInfoTree* tree,
          std::optional<std::string_view> json_text = std::nullopt)
      : file_(std::move(file)), tree_(tree), json_text_(json_text) {}
  std::string at(const gp::TextFormat::ParseInfoTree* tree, const gp::Message& m,
                 std::string_view field, int index = -1) const;
  std::string top(const gp::Message& m, std::string_view field, int index = -1) const;
  // Location of field `field` inside repeated/nested message `outer`[index].
  std::string nested(const gp::Message& m, std::string_view outer, int index,
                     std::string_view field) const;
  const std::string& file() const { return file_; }

 private:
  // A member of a JSON object: its key (index < 0) or element `index` of its array.
  std::string json_at(const JsonValue& object, std::string_view field, int index) const;

  // The JSON file's positions, scanned once; null when the scan fails.
  const JsonValue* json() const;

  std::string file_;
  const gp::TextFormat::ParseInfoTree* tree_;
  std::optional<std::string_view> json_text_;
  mutable bool json_scanned_ = false;
  mutable bool json_ok_ = false;
  mutable JsonValue json_root_;
};

// "where: what" as InvalidArgument.
Status err(const std::string& where, const std::string& what);

// Our enums and the .proto's, both directions (topology_file_build.cc).
Result<GeneratorKind> kind_from_pb(pb::GeneratorKind k);
pb::GeneratorKind kind_to_pb(GeneratorKind k);
// WEIGHTS_DEFAULT, and any value this build does not know, is the default scheme.
WeightScheme scheme_from_pb(pb::WeightScheme s);
pb::WeightScheme scheme_to_pb(WeightScheme s);

// A parsed file with a generator block (EDGE_LIST paths resolve against `filename`'s directory),
// or with explicit nodes and edges, built into a Topology (not validated); errors point at the
// field through `loc`.
Result<Topology> from_generator(const pb::TopologyFile& file, const Locator& loc,
                                const std::string& filename, Env& env);
Result<Topology> from_explicit(const pb::TopologyFile& file, const Locator& loc);

}  // namespace gossip::topology::file_internal
