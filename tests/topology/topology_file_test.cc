// Topology files: parsing (text format and JSON), errors with file:line:column, round trips.
#include "topology/topology_file.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/support/files.h"
#include "topology/spectral.h"
#include "topology/topology.pb.h"

namespace gossip::topology {
namespace {

Result<Topology> parse(const std::string& text, const std::string& name = "t.pbtxt") {
  return parse_topology(text, name);
}

void fails_at(const std::string& text, const std::string& where, const std::string& what = "",
              const std::string& name = "t.pbtxt") {
  auto t = parse(text, name);
  REQUIRE_FALSE(t.is_ok());
  const std::string& m = t.status().message();
  CHECK_MESSAGE(m.find(where) != std::string::npos, m);
  if (!what.empty()) CHECK_MESSAGE(m.find(what) != std::string::npos, m);
}

const char* kExplicitRing =
    "name: \"ring4\"\n"
    "node { id: 0 address: \"127.0.0.1:7000\" }\n"
    "node { id: 1 address: \"127.0.0.1:7001\" }\n"
    "node { id: 2 address: \"127.0.0.1:7002\" }\n"
    "node { id: 3 address: \"127.0.0.1:7003\" }\n"
    "edge { from: 0 to: 1 }\n"
    "edge { from: 1 to: 2 }\n"
    "edge { from: 2 to: 3 }\n"
    "edge { from: 3 to: 0 }\n";

TEST_CASE("an explicit file and the generator give the same fingerprint") {
  auto a = parse(kExplicitRing);
  REQUIRE_MESSAGE(a.is_ok(), a.status().to_string());
  auto b =
      parse("generator { kind: RING nodes: 4 base_port: 7000 }\nweights: METROPOLIS_HASTINGS\n");
  REQUIRE(b.is_ok());
  CHECK(a->name() == "ring4");
  CHECK(a->fingerprint() == b->fingerprint());
  CHECK(a->fingerprint().size() == 64);
  CHECK(validate(*a).is_ok());
}

// kExplicitRing with its first `from` replaced by `to`.
std::string ring_with(const std::string& from, const std::string& to) {
  std::string s = kExplicitRing;
  const std::size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

TEST_CASE("syntax errors report file:line:column") {
  fails_at("name: \"x\"\n\ngenerator { kind: RING nodes: 8 \n", "t.pbtxt:4:");  // unclosed brace
  fails_at("name: \"x\"\ngenerator {\n  kind: RINGG\n}\n", "t.pbtxt:3:9", "RINGG");
  fails_at("name: \"x\"\nnode { id: -1 }\n", "t.pbtxt:2:");
  fails_at("name: \"x\"\nnodez { id: 1 }\n", "t.pbtxt:2:", "nodez");
}

TEST_CASE("semantic errors point at the offending field") {
  fails_at(ring_with("id: 3", "id: 1"), "t.pbtxt:5:8", "node id 1 repeated (first at t.pbtxt:3:8)");
  fails_at(ring_with("to: 0 }", "to: 9 }"), "t.pbtxt:9:1", "outside 0..3");
  fails_at(ring_with("127.0.0.1:7002", "127.0.0.1:99999"), "t.pbtxt:4:14", "port");
  fails_at(ring_with("127.0.0.1:7002", "127.0.0.1:7000"), "t.pbtxt:4:14", "already used by node 0");
  fails_at(std::string(kExplicitRing) + "edge { from: 1 to: 0 }\n", "t.pbtxt:10:1",
           "repeated (first at t.pbtxt:6:1)");
  fails_at(ring_with("edge { from: 1 to: 2 }", "edge { from: 1 to: 2 weight: 0.3 }"),
           "t.pbtxt:7:22", "set weights: EXPLICIT");
  fails_at("generator { kind: RING nodes: 8 }\nnode { id: 0 address: \"h:1\" }\n", "t.pbtxt:2:1",
           "not both");
  fails_at("generator { nodes: 8 }\n", "t.pbtxt:1:1", "generator.kind is missing");
  fails_at("generator { kind: TORUS rows: 2 cols: 5 }\n", "t.pbtxt:1:1", "rows >= 3");
}

TEST_CASE("explicit weights: self loops set the diagonal, missing weights are an error") {
  auto t = parse(
      "weights: EXPLICIT\n"
      "node { id: 0 address: \"h:1\" }\nnode { id: 1 address: \"h:2\" }\n"
      "node { id: 2 address: \"h:3\" }\n"
      "edge { from: 0 to: 1 weight: 0.5 }\nedge { from: 1 to: 2 weight: 0.5 }\n"
      "edge { from: 2 to: 0 weight: 0.25 }\nedge { from: 2 to: 2 weight: 0.25 }\n");
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  CHECK(t->self_weight(2) == 0.25);
  CHECK(t->self_weight(0) == 0.25);  // 1 - 0.5 - 0.25
  CHECK(validate(*t).is_ok());       // symmetric, rows 0.25+0.5+0.25, 0.5+0+0.5, 0.25+0.5+0.25
  auto heavy = parse(
      "weights: EXPLICIT\n"
      "node { id: 0 address: \"h:1\" }\nnode { id: 1 address: \"h:2\" }\n"
      "node { id: 2 address: \"h:3\" }\n"
      "edge { from: 0 to: 1 weight: 0.5 }\nedge { from: 1 to: 2 weight: 0.5 }\n"
      "edge { from: 2 to: 0 weight: 0.25 }\nedge { from: 2 to: 2 weight: 0.5 }\n");
  REQUIRE(heavy.is_ok());
  const Status s = validate(*heavy);
  CHECK_MESSAGE(s.message().find("row 2 of W sums to 1.25") != std::string::npos, s.message());
  fails_at(
      "weights: EXPLICIT\nnode { id: 0 address: \"h:1\" }\nnode { id: 1 address: \"h:2\" }\n"
      "edge { from: 0 to: 1 }\n",
      "t.pbtxt:4:1", "has no weight");
}

TEST_CASE("JSON files (Protobuf JSON mapping) are accepted") {
  auto t =
      parse(R"({"name": "j", "generator": {"kind": "TORUS", "rows": 3, "cols": 4}})", "t.json");
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  CHECK(t->num_nodes() == 12);
  auto bad = parse(R"({"generator": {"kind": "TORUS", "rowz": 3}})", "t.json");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("t.json") != std::string::npos);
}

TEST_CASE("JSON errors point at the line and column, like text format's") {
  // Syntax (a missing comma), an unknown key at the top and inside an element, a value of the
  // wrong type, an unknown enum name (protobuf's own errors, which name a path), and the semantic
  // checks (a repeated id with its first place, an edge to a missing node, a bad address).
  const std::string head = "{\n  \"name\": \"x\",\n  \"node\": [\n";
  fails_at(head + "    {\"id\": 0 \"address\": \"a:1\"}\n  ]\n}\n", "t.json:4:14",
           "Expected , or }", "t.json");
  fails_at(head + "    {\"id\": 1, \"adress\": \"b:2\"}\n  ]\n}\n", "t.json:4:15",
           "adress: Cannot find field", "t.json");
  fails_at("{\n  \"name\": \"x\",\n  \"nodes\": []\n}\n", "t.json:3:3", "nodes", "t.json");
  fails_at("{\"node\": [{\"id\": \"x\"}]}", "t.json:1:12", "invalid value", "t.json");
  fails_at("{\n \"generator\": {\n  \"kind\": \"TORUSS\"\n }\n}", "t.json:3:3", "TORUSS", "t.json");
  fails_at(head +
               "    {\"id\": 0, \"address\": \"a:1\"},\n    {\"id\": 0, \"address\": \"a:2\"}\n"
               "  ]\n}\n",
           "t.json:5:6", "(first at t.json:4:6)", "t.json");
  fails_at(head +
               "    {\"id\": 0, \"address\": \"a:1\"},\n    {\"id\": 1, \"address\": \"a:2\"}\n"
               "  ],\n  \"edge\": [\n    {\"from\": 0, \"to\": 1},\n    {\"from\": 0, \"to\": 7}\n "
               " ]\n}\n",
           "t.json:9:5", "outside 0..1", "t.json");
  fails_at(head +
               "    {\"id\": 0, \"address\": \"a:1\"},\n    {\"id\": 1, \"address\": \"nohost\"}\n"
               "  ]\n}\n",
           "t.json:5:15", "", "t.json");
  // An error about the generator block points at its key, whichever name its fields go by.
  for (const char* port : {"base_port", "basePort"}) {
    fails_at(
        std::string("{\"generator\": {\"kind\": \"RING\", \"nodes\": 4, \"") + port + "\": 70000}}",
        "t.json:1:2", "port range", "t.json");
  }
}

TEST_CASE("explicit export reloads to the same fingerprint, for derived and explicit weights") {
  GeneratorSpec s;
  s.kind = GeneratorKind::kRandomRegular;
  s.nodes = 30;
  s.degree = 3;
  s.seed = 7;
  for (auto scheme : {WeightScheme::kMetropolisHastings, WeightScheme::kBestConstant,
                      WeightScheme::kLazyMetropolisHastings}) {
    auto t = Topology::generate(s, scheme, "127.0.0.1", 7000);
    REQUIRE(t.is_ok());
    auto text = explicit_text(*t);
    REQUIRE(text.is_ok());
    auto back = parse(*text);
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->fingerprint() == t->fingerprint());
    auto json = to_json(*explicit_file(*t));
    REQUIRE(json.is_ok());
    auto back_json = parse(*json, "x.json");
    REQUIRE(back_json.is_ok());
    CHECK(back_json->fingerprint() == t->fingerprint());
  }
}

// Where node k lives under a host list, walked slot by slot: an oracle for place_nodes().
std::vector<std::string> expected_addresses(int n, const Placement& p) {
  std::vector<std::string> out;
  for (const HostSlots& h : p.hosts)
    for (int s = 0; s < h.slots && static_cast<int>(out.size()) < n; ++s) {
      const std::string host = h.host.find(':') != std::string::npos ? "[" + h.host + "]" : h.host;
      out.push_back(host + ":" + std::to_string((h.base_port > 0 ? h.base_port : p.base_port) + s));
    }
  return out;
}

std::vector<std::string> address_strings(const Topology& t) {
  std::vector<std::string> out;
  for (const auto& a : t.addresses()) out.push_back(a.to_string());
  return out;
}

Placement three_hosts() {
  Placement p;
  p.base_port = 7100;
  p.hosts = {{.host = "10.0.0.1", .slots = 3, .base_port = 0},
             {.host = "node-b.example", .slots = 2, .base_port = 9000},
             {.host = "fd00::3", .slots = 40, .base_port = 0}};
  return p;
}

TEST_CASE("every generator with a host list round-trips: text and JSON, same fingerprint") {
  auto spec = [](GeneratorKind kind, int nodes) {
    GeneratorSpec s;
    s.kind = kind;
    s.nodes = nodes;
    return s;
  };
  std::vector<GeneratorSpec> specs = {spec(GeneratorKind::kRing, 7),
                                      spec(GeneratorKind::kKRing, 9),
                                      spec(GeneratorKind::kTorus, 0),
                                      spec(GeneratorKind::kGrid, 0),
                                      spec(GeneratorKind::kHypercube, 8),
                                      spec(GeneratorKind::kComplete, 6),
                                      spec(GeneratorKind::kStar, 6),
                                      spec(GeneratorKind::kExponential, 8),
                                      spec(GeneratorKind::kOnePeerExponential, 8),
                                      spec(GeneratorKind::kRandomRegular, 10),
                                      spec(GeneratorKind::kErdosRenyi, 12)};
  specs[1].k = 2;
  specs[2].rows = 3, specs[2].cols = 4;
  specs[3].rows = 3, specs[3].cols = 3;
  specs[9].degree = 3, specs[9].seed = 5;
  specs[10].p = 0.5, specs[10].seed = 3;
  const Placement p = three_hosts();
  for (const auto& s : specs) {
    CAPTURE(generator_kind_name(s.kind));
    auto t = Topology::generate(s, WeightScheme::kDefault, p);
    REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
    CHECK(address_strings(*t) == expected_addresses(t->num_nodes(), p));
    const auto file = generator_file("placed", s, WeightScheme::kDefault, p);
    const std::string text = to_text(file);
    CHECK(text.find("host {") != std::string::npos);
    auto back = parse(text);
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string(), "\n", text);
    CHECK(back->fingerprint() == t->fingerprint());
    CHECK(back->is_time_varying() == (s.kind == GeneratorKind::kOnePeerExponential));
    CHECK(address_strings(*back) == expected_addresses(t->num_nodes(), p));
    auto json = to_json(file);
    REQUIRE(json.is_ok());
    auto back_json = parse(*json, "x.json");
    REQUIRE_MESSAGE(back_json.is_ok(), back_json.status().to_string(), "\n", *json);
    CHECK(back_json->fingerprint() == t->fingerprint());
    CHECK(validate(*back).is_ok());
  }
  // The fingerprint covers the placement: another host list is another topology.
  Placement q = p;
  q.hosts[0].host = "10.0.0.9";
  CHECK(Topology::generate(specs[8], WeightScheme::kDefault, q)->fingerprint() !=
        Topology::generate(specs[8], WeightScheme::kDefault, p)->fingerprint());
}

TEST_CASE("an edge list with a host list") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path dir = tmp.path;
  std::ofstream(dir / "g.edges") << "0 1\n1 2\n2 3\n3 4\n4 0\n0 2\n";
  GeneratorSpec s;
  s.kind = GeneratorKind::kEdgeList;
  s.edge_list_path = "g.edges";
  const Placement p = three_hosts();
  std::ofstream(dir / "t.pbtxt") << to_text(generator_file("", s, WeightScheme::kDefault, p));
  auto t = load_topology((dir / "t.pbtxt").string());
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  CHECK(t->num_nodes() == 5);
  CHECK(address_strings(*t) == expected_addresses(5, p));
}

TEST_CASE("base_port 0 (no addresses) is written and reloads as no addresses, unset as 7000") {
  GeneratorSpec s;
  s.kind = GeneratorKind::kOnePeerExponential;
  s.nodes = 16;
  auto t = Topology::generate(s, WeightScheme::kDefault, "127.0.0.1", 0);
  REQUIRE(t.is_ok());
  CHECK(t->addresses().empty());
  const auto file = generator_file("", s, WeightScheme::kDefault, "127.0.0.1", 0);
  const std::string text = to_text(file);
  CHECK_MESSAGE(text.find("base_port: 0") != std::string::npos, text);
  auto back = parse(text);
  REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
  CHECK(back->addresses().empty());
  CHECK(back->fingerprint() == t->fingerprint());
  auto json = parse(*to_json(file), "x.json");
  REQUIRE(json.is_ok());
  CHECK(json->addresses().empty());
  CHECK(json->fingerprint() == t->fingerprint());
  auto unset = parse("generator { kind: ONE_PEER_EXPONENTIAL nodes: 16 }\n");
  REQUIRE(unset.is_ok());
  REQUIRE(unset->addresses().size() == 16);
  CHECK(unset->addresses()[15].to_string() == "127.0.0.1:7015");
}

TEST_CASE("host list errors point at the entry or field") {
  const std::string gen = "generator { kind: RING nodes: 8 }\n";
  fails_at(gen + "host { name: \"a\" slots: 3 }\nhost { name: \"b\" slots: 3 }\n", "t.pbtxt:2:1",
           "6 slots (2 hosts) for 8 nodes");
  fails_at(
      "generator { kind: RING nodes: 4 base_port: 7000 }\nhost { name: \"a\" slots: 2 }\n"
      "host { name: \"b\" }\nhost { name: \"a\" base_port: 7001 }\n",
      "t.pbtxt:4:1", "node 3 (host entry 3) and node 1 (host entry 1) would both listen on a:7001");
  fails_at(gen + "host { name: \"a:4\" }\n", "t.pbtxt:2:8", "host entry 1: host 'a:4'");
  fails_at(gen + "host { name: \"a\" slots: 8 }\nhost { name: \"b c\" }\n", "t.pbtxt:3:8",
           "host entry 2: host 'b c'");
  fails_at(gen + "host { slots: 8 }\n", "t.pbtxt:2:1", "host entry 1: empty host name");
  fails_at(gen + "host { name: \"a\" slots: 0 }\n", "t.pbtxt:2:18",
           "host entry 1 (a): slots 0 (must be >= 1)");
  fails_at(gen + "host { name: \"a\" slots: -3 }\n", "t.pbtxt:2:18", "slots -3");
  fails_at(gen + "host { name: \"a\" slots: 8 base_port: 0 }\n", "t.pbtxt:2:27",
           "base_port 0 is not in 1..65535");
  fails_at("generator { kind: RING nodes: 4 host: \"x\" }\nhost { name: \"a\" slots: 4 }\n",
           "t.pbtxt:1:33", "generator.host and host entries");
  fails_at("generator { kind: RING nodes: 4 base_port: 0 }\nhost { name: \"a\" slots: 4 }\n",
           "t.pbtxt:1:33", "base_port: 0 means no addresses");
  fails_at("generator { kind: RING nodes: 4 base_port: 65534 }\nhost { name: \"a\" slots: 4 }\n",
           "t.pbtxt:2:1", "host a: base_port 65534 + 4 nodes runs past port 65535");
  fails_at(std::string(kExplicitRing) + "host { name: \"a\" slots: 4 }\n", "t.pbtxt:10:1",
           "explicit nodes carry their own addresses");
  // JSON: the same checks, at the key.
  fails_at(
      "{\"generator\": {\"kind\": \"RING\", \"nodes\": 4},\n \"host\": [{\"name\": \"a\"},\n"
      "   {\"name\": \"b\", \"slots\": 0}]}",
      "t.json:3:18", "host entry 2 (b): slots 0", "t.json");
  fails_at(
      "{\"generator\": {\"kind\": \"RING\", \"nodes\": 4},\n \"host\": [{\"name\": \"a\"},\n"
      "   {\"name\": \"b\"}]}",
      "t.json:2:11", "2 slots (2 hosts) for 4 nodes", "t.json");
}

TEST_CASE("edge lists import relative to the topology file, errors name file:line") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path dir = tmp.path;
  {
    std::ofstream(dir / "g.edges") << "# a square with a diagonal\n0 1\n1 2\n2 3\n3 0\n0 2\n";
    std::ofstream(dir / "bad.edges") << "0 1\n1 x\n";
    std::ofstream(dir / "t.pbtxt") << "generator { kind: EDGE_LIST edge_list: \"g.edges\" }\n";
    std::ofstream(dir / "u.pbtxt") << "generator { kind: EDGE_LIST edge_list: \"bad.edges\" }\n";
  }
  auto t = load_topology((dir / "t.pbtxt").string());
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  CHECK(t->num_nodes() == 4);
  CHECK(t->graph().num_edges() == 5);
  auto u = load_topology((dir / "u.pbtxt").string());
  REQUIRE_FALSE(u.is_ok());
  CHECK_MESSAGE(u.status().message().find("bad.edges:2:") != std::string::npos,
                u.status().message());
}

TEST_CASE("load_topology validates: an oscillating explicit ring is refused with the file name") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path path = tmp.file("gossip_topo_osc.pbtxt");
  {
    std::ofstream f(path);
    f << "weights: EXPLICIT\n";
    for (int i = 0; i < 6; ++i)
      f << "node { id: " << i << " address: \"127.0.0.1:" << 7000 + i << "\" }\n";
    for (int i = 0; i < 6; ++i)
      f << "edge { from: " << i << " to: " << (i + 1) % 6 << " weight: 0.5 }\n";
  }
  auto t = load_topology(path.string());
  REQUIRE_FALSE(t.is_ok());
  CHECK(t.status().message().find(path.string()) != std::string::npos);
  CHECK(t.status().message().find("oscillates") != std::string::npos);
}

}  // namespace
}  // namespace gossip::topology
