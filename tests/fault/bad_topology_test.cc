// Hostile and broken topology files (issue 8), through the public loader every program uses
// (topology::load_topology: read, parse, build, validate). Each case is either rejected with an
// InvalidArgument that names the file (and the line:column of the field where the text format
// has one), or accepted on purpose with the meaning stated in the test. Nothing may crash.
// The same files through the real `gossip-topo validate` are in bad_input_cli_test.cc.
#include <cmath>

#include "common/env.h"
#include "tests/fault/fault_test_util.h"
#include "topology/topology_file.h"

namespace gossip::fault_testing {
namespace {

using topology::load_topology;
using topology::Topology;

// Writes `text` to a fresh file `name` and loads it.
struct Loaded {
  TempDir dir;
  std::string path;
  Result<Topology> result = invalid_argument("not loaded");
  std::string message() const { return result.status().message(); }
};

std::unique_ptr<Loaded> load(const std::string& text, const std::string& name = "t.pbtxt") {
  auto l = std::make_unique<Loaded>();
  l->path = l->dir.write(name, text);
  l->result = load_topology(l->path);
  return l;
}

// A rejected file: InvalidArgument, the message names the file (and `where`, e.g. ":3:"), and
// says `what`.
void expect_rejected(const Loaded& l, const std::string& what, const std::string& where = "") {
  INFO("message: ", l.message());
  REQUIRE_FALSE(l.result.is_ok());
  CHECK(l.result.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(l.message(), l.path + where));
  CHECK(contains(l.message(), what));
}

const std::string kTriangle = "name: \"tri\"\n" + kTriangleTopology;

TEST_CASE("control: the well-formed triangle loads (so the cases below fail for their reason)") {
  auto l = load(kTriangle);
  REQUIRE_MESSAGE(l->result.is_ok(), l->message());
  CHECK(l->result->num_nodes() == 3);
}

TEST_CASE("an empty file or one with only comments is rejected: no nodes") {
  expect_rejected(*load(""), "no nodes");
  expect_rejected(*load("# just a comment\n\n   \n"), "no nodes");
  expect_rejected(*load("", "t.json"), "t.json");
}

TEST_CASE("a missing file is NotFound naming the path") {
  auto r = load_topology("/nonexistent/dir/ring.pbtxt");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK(contains(r.status().message(), "/nonexistent/dir/ring.pbtxt"));
}

TEST_CASE("one node is accepted on purpose: a job of one, W = [1], nothing to average") {
  auto l = load("node { id: 0 address: \"127.0.0.1:7000\" }\n");
  REQUIRE_MESSAGE(l->result.is_ok(), l->message());
  CHECK(l->result->num_nodes() == 1);
  CHECK(l->result->self_weight(0) == 1.0);
  CHECK(l->result->in_neighbors(0).empty());
}

TEST_CASE("self loops are rejected at the edge's line and column") {
  expect_rejected(*load(kTriangle + "edge { from: 1 to: 1 }\n"), "self loop", ":8:");
}

TEST_CASE("duplicate edges are rejected, also written the other way round") {
  expect_rejected(*load(kTriangle + "edge { from: 0 to: 1 }\n"), "repeated (first at", ":8:");
  expect_rejected(*load(kTriangle + "edge { from: 1 to: 0 }\n"), "edge 1 -- 0 repeated", ":8:");
}

TEST_CASE("duplicate node ids are rejected naming both places") {
  const std::string text =
      "node { id: 0 address: \"127.0.0.1:7000\" }\n"
      "node { id: 1 address: \"127.0.0.1:7001\" }\n"
      "node { id: 1 address: \"127.0.0.1:7002\" }\n"
      "edge { from: 0 to: 1 }\n";
  auto l = load(text);
  expect_rejected(*l, "node id 1 repeated", ":3:");
  CHECK(contains(l->message(), "first at " + l->path + ":2:"));
}

TEST_CASE("ids outside 0..n-1 and edges to missing nodes are rejected") {
  expect_rejected(*load("node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 5 address: \"127.0.0.1:7001\" }\n"),
                  "outside 0..1", ":2:");
  expect_rejected(*load(kTriangle + "edge { from: 0 to: 7 }\n"), "outside 0..2", ":8:");
}

TEST_CASE("duplicate addresses are rejected, also when the port is spelled differently") {
  expect_rejected(*load("node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 1 address: \"127.0.0.1:7000\" }\n"
                        "edge { from: 0 to: 1 }\n"),
                  "already used by node 0", ":2:");
  expect_rejected(*load("node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 1 address: \"127.0.0.1:07000\" }\n"
                        "edge { from: 0 to: 1 }\n"),
                  "already used by node 0", ":2:");
}

TEST_CASE("bad ports and malformed addresses are rejected at the address field") {
  for (const char* address : {"127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:",
                              "127.0.0.1", "127.0.0.1:7x00", ":7000", "127.0.0.1:99999999999999"}) {
    CAPTURE(address);
    const std::string text =
        "node { id: 0 address: \"127.0.0.1:6999\" }\n"
        "node { id: 1 address: \"" +
        std::string(address) +
        "\" }\n"
        "edge { from: 0 to: 1 }\n";
    expect_rejected(*load(text), "node 1", ":2:");
  }
}

TEST_CASE("a generator whose ports run past 65535 is rejected") {
  auto l = load("generator { kind: RING nodes: 8 base_port: 65530 }\n");
  REQUIRE_FALSE(l->result.is_ok());
  CHECK(contains(l->message(), l->path));
  CHECK(contains(l->message(), "65535"));
}

TEST_CASE("non-UTF-8 bytes outside strings are a syntax error with a position") {
  // A stray byte where a field name belongs.
  expect_rejected(*load(kTriangle + "\xff\xfe edge { from: 0 to: 1 }\n"), "non ascii", ":8:1:");
  expect_rejected(*load("node { id: 0 address: \"127.0.0.1:7000\" } \xe9\n"), "non ascii", ":1:");
}

// Non-UTF-8 bytes inside strings (proto3 strings must be UTF-8; a host "127.0.0.\xff" is neither
// an address nor a host name) are refused at the field's line and column, not at bind or dial.
TEST_CASE("non-UTF-8 bytes inside strings are rejected with a position") {
  expect_rejected(*load("name: \"caf\xe9\"\n" + kTriangle.substr(kTriangle.find('\n') + 1)),
                  "UTF-8", ":1:");
  expect_rejected(*load("node { id: 0 address: \"127.0.0.\xff:7000\" }\n"), "", ":1:");
}

TEST_CASE("non-UTF-8 bytes in a comment are accepted on purpose: comments are not read") {
  auto l = load("# r\xe9seau de test, \xff\xfe\n" + kTriangle);
  REQUIRE_MESSAGE(l->result.is_ok(), l->message());
  CHECK(l->result->num_nodes() == 3);
}

// A UTF-8 byte-order mark (what some Windows editors write first) is skipped: the file loads.
TEST_CASE("a UTF-8 byte-order mark at the start is skipped") {
  auto l = load("\xef\xbb\xbf" + kTriangle);
  REQUIRE_MESSAGE(l->result.is_ok(), l->message());
  CHECK(l->result->num_nodes() == 3);
}

std::string crlf(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

TEST_CASE("CRLF line endings are accepted on purpose: same topology, same line numbers") {
  auto lf = load(kTriangle);
  auto dos = load(crlf(kTriangle));
  REQUIRE_MESSAGE(dos->result.is_ok(), dos->message());
  CHECK(dos->result->fingerprint() == lf->result->fingerprint());
  // Errors in a CRLF file still point at the right line.
  expect_rejected(*load(crlf(kTriangle + "edge { from: 2 to: 2 }\n")), "self loop", ":8:");
  auto gen =
      load(crlf("# ring\ngenerator { kind: RING nodes: 8 }\nweights: METROPOLIS_HASTINGS\n"));
  REQUIRE_MESSAGE(gen->result.is_ok(), gen->message());
  CHECK(gen->result->num_nodes() == 8);
}

TEST_CASE("huge: a node count that does not fit an int is refused") {
  auto l = load("generator { kind: RING nodes: 4294967295 }\n");
  expect_rejected(*l, "nodes", ":1:");
  expect_rejected(*load("generator { kind: COMPLETE nodes: 1000000 }\n"),
                  "edges for nodes: 1000000", ":1:");
}

// A ring of 2^31 - 1 nodes is refused at its nodes field (limit kMaxGeneratorNodes = 10^7),
// before anything is allocated, rather than throwing std::bad_alloc out of load_topology.
TEST_CASE("huge: a ring of 2^31 - 1 nodes is refused, not attempted") {
  expect_rejected(*load("generator { kind: RING nodes: 2147483647 }\n"), "nodes", ":1:");
}

TEST_CASE("huge: a 3000-node explicit ring with a 1 MB name loads") {
  std::string text = "name: \"" + std::string(1 << 20, 'n') + "\"\n";
  const int n = 3000;
  for (int i = 0; i < n; ++i)
    text += "node { id: " + std::to_string(i) + " address: \"10.0." + std::to_string(i / 250) +
            "." + std::to_string(i % 250 + 1) + ":7000\" }\n";
  for (int i = 0; i < n; ++i)
    text += "edge { from: " + std::to_string(i) + " to: " + std::to_string((i + 1) % n) + " }\n";
  auto l = load(text);
  REQUIRE_MESSAGE(l->result.is_ok(), l->message().substr(0, 300));
  CHECK(l->result->num_nodes() == n);
}

TEST_CASE("explicit weights that are not doubly stochastic are rejected naming the row or column") {
  // Directed: every row sums to 1, but node 2's column gets 0.5 + 0.5 + 0.5 = 1.5.
  const std::string directed =
      "directed: true\n"
      "weights: EXPLICIT\n"
      "node { id: 0 address: \"127.0.0.1:7000\" }\n"
      "node { id: 1 address: \"127.0.0.1:7001\" }\n"
      "node { id: 2 address: \"127.0.0.1:7002\" }\n"
      "edge { from: 0 to: 1 weight: 0.5 }\n"
      "edge { from: 1 to: 2 weight: 0.5 }\n"
      "edge { from: 2 to: 0 weight: 0.25 }\n"
      "edge { from: 2 to: 1 weight: 0.25 }\n";
  auto l = load(directed);
  expect_rejected(*l, "not doubly stochastic");
  // Undirected: an explicit self weight that makes row 0 sum to 1.4.
  expect_rejected(*load("weights: EXPLICIT\n"
                        "node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 1 address: \"127.0.0.1:7001\" }\n"
                        "edge { from: 0 to: 1 weight: 0.5 }\n"
                        "edge { from: 0 to: 0 weight: 0.9 }\n"),
                  "row 0 of W sums to");
  // Neighbour weights above 1 leave a negative self weight.
  expect_rejected(*load("weights: EXPLICIT\n"
                        "node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 1 address: \"127.0.0.1:7001\" }\n"
                        "edge { from: 0 to: 1 weight: 1.5 }\n"),
                  "negative self weight");
}

TEST_CASE("NaN and infinite weights are rejected, in text format and in JSON") {
  for (const char* w : {"nan", "inf", "-inf"}) {
    CAPTURE(w);
    expect_rejected(*load(std::string("weights: EXPLICIT\n"
                                      "node { id: 0 address: \"127.0.0.1:7000\" }\n"
                                      "node { id: 1 address: \"127.0.0.1:7001\" }\n"
                                      "edge { from: 0 to: 1 weight: ") +
                          w + " }\n"),
                    "not finite");
  }
  expect_rejected(*load(R"({"weights": "EXPLICIT",
      "node": [{"id": 0, "address": "127.0.0.1:7000"}, {"id": 1, "address": "127.0.0.1:7001"}],
      "edge": [{"from": 0, "to": 1, "weight": "NaN"}]})",
                        "t.json"),
                  "not finite");
}

TEST_CASE("JSON: malformed documents and unknown fields are rejected naming the file") {
  expect_rejected(*load("{\"node\": [", "t.json"), "JSON");
  expect_rejected(*load("{\"nodes\": []}", "t.json"), "JSON");
}

TEST_CASE("a disconnected graph and an oscillating one are rejected") {
  expect_rejected(*load("node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 1 address: \"127.0.0.1:7001\" }\n"
                        "node { id: 2 address: \"127.0.0.1:7002\" }\n"
                        "edge { from: 0 to: 1 }\n"),
                  "not connected");
  // A 2-node path with zero self weights (W = [[0,1],[1,0]]) never converges.
  expect_rejected(*load("weights: EXPLICIT\n"
                        "node { id: 0 address: \"127.0.0.1:7000\" }\n"
                        "node { id: 1 address: \"127.0.0.1:7001\" }\n"
                        "edge { from: 0 to: 1 weight: 1 }\n"),
                  "oscillates");
}

}  // namespace
}  // namespace gossip::fault_testing
