// The bad-input suite through the real programs (integration): `gossip-topo validate` and
// `gossipd run` on hostile topology files, training configs and certificate directories. Each
// must exit non-zero (gossip-topo: 1, gossipd: 2 = usage, see daemon/exit_codes.h) within
// seconds, never crash (a signal would show as 128 + n), and say on stderr which file, line and
// field is wrong. The in-process cases with every detail are in bad_{topology,config,
// checkpoint,certs}_test.cc.
#include <sys/stat.h>

#include "tests/fault/fault_test_util.h"
#include "tests/support/ports.h"

namespace gossip::fault_testing {
namespace {

std::string topo_bin() { return binary("topology/gossip-topo"); }
std::string gossipd_bin() { return binary("daemon/gossipd"); }

ProcessResult validate(const TempDir& d, const std::string& name, const std::string& text,
                       int timeout_s = 20) {
  return run_process({topo_bin(), "validate", d.write(name, text)}, timeout_s);
}

TEST_CASE("gossip-topo validate: every hostile topology file exits 1 naming file and line") {
  TempDir d;
  struct Case {
    const char* name;
    std::string text;
    std::string where;  // appended to the path in the message
    const char* what;
  };
  const std::vector<Case> cases = {
      {"empty.pbtxt", "", "", "no nodes"},
      {"selfloop.pbtxt", kTriangleTopology + "edge { from: 1 to: 1 }\n", ":7:", "self loop"},
      {"dupedge.pbtxt", kTriangleTopology + "edge { from: 1 to: 0 }\n", ":7:", "repeated"},
      {"dupid.pbtxt",
       "node { id: 0 address: \"127.0.0.1:7000\" }\nnode { id: 0 address: \"127.0.0.1:7001\" }\n",
       ":2:", "repeated"},
      {"dupaddr.pbtxt",
       "node { id: 0 address: \"127.0.0.1:7000\" }\nnode { id: 1 address: \"127.0.0.1:7000\" }\n"
       "edge { from: 0 to: 1 }\n",
       ":2:", "already used"},
      {"port.pbtxt",
       "node { id: 0 address: \"127.0.0.1:7000\" }\nnode { id: 1 address: \"127.0.0.1:70000\" }\n"
       "edge { from: 0 to: 1 }\n",
       ":2:", "65535"},
      {"bytes.pbtxt", kTriangleTopology + "\xff\xfe\n", ":7:", ""},
      {"nan.pbtxt",
       "weights: EXPLICIT\nnode { id: 0 address: \"127.0.0.1:7000\" }\n"
       "node { id: 1 address: \"127.0.0.1:7001\" }\nedge { from: 0 to: 1 weight: nan }\n",
       "", "not finite"},
      {"notds.pbtxt",
       "directed: true\nweights: EXPLICIT\nnode { id: 0 address: \"127.0.0.1:7000\" }\n"
       "node { id: 1 address: \"127.0.0.1:7001\" }\nnode { id: 2 address: \"127.0.0.1:7002\" }\n"
       "edge { from: 0 to: 1 weight: 0.5 }\nedge { from: 1 to: 2 weight: 0.5 }\n"
       "edge { from: 2 to: 0 weight: 0.25 }\nedge { from: 2 to: 1 weight: 0.25 }\n",
       "", "not doubly stochastic"},
      {"huge.pbtxt", "generator { kind: COMPLETE nodes: 1000000 }\n", ":1:", "nodes"},
      {"hugeint.pbtxt", "generator { kind: RING nodes: 4294967295 }\n", ":1:", "nodes"},
      {"bad.json", "{\"node\": [", "", "JSON"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const ProcessResult r = validate(d, c.name, c.text);
    INFO("stderr: ", r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.err, d.file(c.name) + c.where));
    CHECK(contains(r.err, c.what));
  }
}

TEST_CASE("gossip-topo validate: CRLF files and one node are accepted on purpose") {
  TempDir d;
  std::string dos;
  for (char c : kTriangleTopology) {
    if (c == '\n') dos += '\r';
    dos += c;
  }
  const ProcessResult crlf = validate(d, "crlf.pbtxt", dos);
  CHECK_MESSAGE(crlf.code == 0, crlf.err);
  CHECK(contains(crlf.out, "3 nodes"));
  const ProcessResult one =
      validate(d, "one.pbtxt", "node { id: 0 address: \"127.0.0.1:7000\" }\n");
  CHECK_MESSAGE(one.code == 0, one.err);
  CHECK(contains(one.out, "1 nodes"));
}

// `gossip-topo validate` runs the spectral check itself after load_topology(check_spectrum =
// false); an oscillating W (rho = 1) is still reported with its file name and exit code 1.
TEST_CASE("gossip-topo validate: an oscillating W is reported with its file name") {
  TempDir d;
  const ProcessResult r = validate(d, "osc.pbtxt",
                                   "weights: EXPLICIT\nnode { id: 0 address: \"127.0.0.1:7000\" }\n"
                                   "node { id: 1 address: \"127.0.0.1:7001\" }\n"
                                   "edge { from: 0 to: 1 weight: 1 }\n");
  CHECK(r.code == 1);
  CHECK(contains(r.err, d.file("osc.pbtxt")));
}

// A ring generator with nodes: 2147483647 is refused by the node limit within seconds (exit 1,
// the file named), not attempted.
TEST_CASE("gossip-topo validate: an absurd ring size is refused within seconds") {
  TempDir d;
  const ProcessResult r =
      validate(d, "hugering.pbtxt", "generator { kind: RING nodes: 2147483647 }\n", 20);
  CHECK(r.code == 1);
  CHECK(contains(r.err, d.file("hugering.pbtxt")));
}

// Non-UTF-8 bytes inside a string (an address "127.0.0.\xff:7000") are refused with exit 1 and
// the file:line: of the field, not left to fail later when the node binds or dials.
TEST_CASE("gossip-topo validate: non-UTF-8 bytes inside strings are refused with a position") {
  TempDir d;
  const ProcessResult r =
      validate(d, "utf8.pbtxt", "node { id: 0 address: \"127.0.0.\xff:7000\" }\n");
  CHECK(r.code == 1);
  CHECK(contains(r.err, d.file("utf8.pbtxt") + ":1:"));
}

// ---- gossipd run

const std::string kConfig = small_train_config(5);

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

// Ports nobody will dial: gossipd must fail before it listens.
const std::string kRing = "generator { kind: RING nodes: 3 base_port: 39170 }\n";

ProcessResult gossipd(const TempDir& d, const std::string& topology, const std::string& config,
                      std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      gossipd_bin(), "run",      d.write("topo.pbtxt", topology), "--node",
      "0",           "--config", d.write("train.pbtxt", config)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_process(argv, 30, d.path);
}

TEST_CASE("gossipd run: hostile configs exit 2 naming file, line and field (or the command line)") {
  struct Case {
    std::string config;
    std::vector<std::string> extra;
    std::string where, what;
  };
  const std::vector<Case> cases = {
      {kConfig + "learning_rate: 0.1\n", {}, ":8:", "learning_rate"},
      {replace(kConfig, "batch_size: 16", "batch_size: 0"), {}, ":5:1", "batch_size: must be > 0"},
      {kConfig, {"--set", "batch_size=0"}, "command line (batch_size=0)", "batch_size"},
      {replace(kConfig, "lr: 0.1", "lr: nan"), {}, ":4:", "optimizer.lr"},
      {kConfig, {"--set", "optimizer.lr=nan"}, "command line (optimizer.lr=nan)", "optimizer.lr"},
      {kConfig, {"--lr", "-1"}, "command line (optimizer.lr=-1)", "optimizer.lr: must be finite"},
      {replace(kConfig, " lr: 0.1", ""), {}, "", "optimizer.lr: required"},
      {replace(kConfig, "connect_ms: 2000 deadline_ms: 1000", "deadline_ms: 0"),
       {},
       ":7:",
       "timeouts.deadline_ms: must be > 0"},
      {replace(kConfig, "connect_ms: 2000", "connect_ms: -1"), {}, ":7:", "Expected integer"},
      {kConfig,
       {"--set", "timeouts.heartbeat_ms=0"},
       "command line (timeouts.heartbeat_ms=0)",
       "timeouts.heartbeat_ms"},
  };
  for (const Case& c : cases) {
    TempDir d;
    CAPTURE(c.config);
    CAPTURE(c.what);
    std::vector<std::string> extra = c.extra;
    extra.push_back("--insecure");
    const ProcessResult r = gossipd(d, kRing, c.config, extra);
    INFO("stderr: ", r.err);
    CHECK(r.code == 2);
    // A value from the file is blamed on file:line:column, one from the command line on that.
    if (c.where.rfind("command line", 0) == 0) {
      CHECK(contains(r.err, c.where));
      CHECK_FALSE(contains(r.err, d.file("train.pbtxt")));
    } else {
      CHECK(contains(r.err, d.file("train.pbtxt") + c.where));
    }
    CHECK(contains(r.err, c.what));
  }
}

TEST_CASE("gossipd run: a hostile topology file exits 2 naming it") {
  TempDir d;
  const ProcessResult r =
      gossipd(d, kTriangleTopology + "edge { from: 2 to: 2 }\n", kConfig, {"--insecure"});
  INFO("stderr: ", r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, d.file("topo.pbtxt") + ":7:"));
  CHECK(contains(r.err, "self loop"));
}

TEST_CASE("gossipd run: missing certificates and a world-readable key exit 2 naming the file") {
  TempDir d;
  const ProcessResult missing = gossipd(d, kRing, kConfig, {"--certs", d.path + "/no-such-dir"});
  INFO("stderr: ", missing.err);
  CHECK(missing.code == 2);
  CHECK(contains(missing.err, d.path + "/no-such-dir/node-0"));

  const std::string certs = d.path + "/certs";
  REQUIRE(gossip::testing::run_shell(source("scripts/gen-certs.sh") + " " + certs + " 3 job") == 0);
  REQUIRE(::chmod((certs + "/node-0.key").c_str(), 0644) == 0);
  const ProcessResult open_key = gossipd(d, kRing, kConfig, {"--certs", certs});
  INFO("stderr: ", open_key.err);
  CHECK(open_key.code == 2);
  CHECK(contains(open_key.err, certs + "/node-0.key"));
  CHECK(contains(open_key.err, "chmod 600"));
}

TEST_CASE("gossipd run: a neighbour whose host does not resolve is named with host:port and why") {
  TempDir d;
  const int port = free_loopback_ports(1, 31000 + static_cast<int>(::getpid() % 20000));
  REQUIRE(port > 0);
  std::string at = ":";  // then +=: `":" + std::to_string(port)` trips GCC 12's -Wrestrict
  at += std::to_string(port);
  // RFC 2606 reserves .invalid: the name never resolves, on any network.
  const std::string topology = "node { id: 0 address: \"127.0.0.1" + at +
                               "\" }\nnode { id: 1 address: \"nonexistent.invalid" + at +
                               "\" }\nedge { from: 0 to: 1 }\n";
  const ProcessResult r = gossipd(d, topology, kConfig, {"--insecure"});
  INFO("stderr: ", r.err);
  CHECK(r.code == 0);  // CARRY_ON: it trains alone, but says why
  const std::string line = "cannot reach neighbour node 1 at nonexistent.invalid" + at +
                           ": cannot resolve nonexistent.invalid";
  const auto first = r.err.find(line);
  CHECK(first != std::string::npos);
  CHECK(r.err.find(line, first + 1) == std::string::npos);  // once, not per retry
}

TEST_CASE("scripts: cluster-bench.sh and soak.sh refuse a bad command line with exit 2") {
  const struct {
    const char* script;
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {"cluster-bench.sh", {"--bogus"}, "unknown argument '--bogus'"},
      {"cluster-bench.sh", {"--build"}, "--build needs a value"},
      {"cluster-bench.sh", {"--out", ""}, "--out: empty value"},
      {"cluster-bench.sh", {"--delays", "5,x"}, "--delays: 'x' is not a whole number of ms"},
      {"cluster-bench.sh", {"--delays", " , "}, "--delays: no delay given"},
      {"cluster-bench.sh", {"--delays", "99999"}, "more than 10 s"},
      {"cluster-bench.sh", {"--sysctl", "foo"}, "--sysctl: 'foo' is not KEY=VALUE"},
      {"cluster-bench.sh", {"--set", "x"}, "--set: 'x' is not FIELD=VALUE"},
      {"cluster-bench.sh", {"--only", "["}, "--only: '[' is not an extended regular expression"},
      {"cluster-bench.sh", {"--quick", "extra"}, "unknown argument 'extra'"},
      {"soak.sh", {"--one-iterations"}, "--one-iterations needs a value"},
      {"soak.sh", {"--one-iterations", "0"}, "--one-iterations: must be at least 1"},
      {"soak.sh", {"--pair-iterations", "1e6"}, "'1e6' is not a whole number"},
      {"soak.sh", {"--max-growth-mb", "-1"}, "'-1' is not a positive number"},
      {"soak.sh", {"--interval", "0"}, "'0' is not a positive number"},
      {"soak.sh", {"--base-port", "70000"}, "--base-port: 70000 is not in 0..65533"},
      {"soak.sh", {"--frobnicate"}, "unknown argument '--frobnicate'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {"/bin/bash", source(std::string("scripts/") + c.script)};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const ProcessResult r = run_process(argv, 20);
    INFO(c.script, " ", c.says, "\nstderr: ", r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, c.says));
  }
  for (const char* script : {"cluster-bench.sh", "soak.sh"}) {
    const ProcessResult help =
        run_process({"/bin/bash", source(std::string("scripts/") + script), "--help"});
    CHECK(help.code == 0);
    CHECK(contains(help.out, "--"));
  }
}

}  // namespace
}  // namespace gossip::fault_testing
