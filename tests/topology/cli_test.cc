// gossip-topo end to end: real processes on the example files; exit codes and messages.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/process.h"

namespace {

using Run = gossip::testing::ProcessResult;

// Paths come in as compile definitions (tests/topology/CMakeLists.txt), so the test also runs
// outside ctest.
Run run(const std::string& args) {
  return gossip::testing::run_shell_capture(std::string("cd ") + GOSSIP_TOPO_SOURCE_DIR + " && " +
                                            GOSSIP_TOPO_CLI + " " + args);
}

double json_field(const std::string& json, const std::string& key) {
  const auto pos = json.find("\"" + key + "\": ");
  REQUIRE_MESSAGE(pos != std::string::npos, key, " missing in ", json);
  return std::stod(json.substr(pos + key.size() + 4));
}

TEST_CASE("analyze the three example files") {
  for (const char* f :
       {"examples/ring8.pbtxt", "examples/torus4x4.pbtxt", "examples/exponential16.pbtxt",
        "examples/one_peer16.pbtxt", "examples/barbell10.pbtxt", "examples/square_explicit.json"}) {
    CAPTURE(f);
    const Run r = run(std::string("analyze ") + f);
    CHECK_MESSAGE(r.code == 0, r.out);
    CHECK(r.out.find("gap") != std::string::npos);
  }
  const Run j = run("analyze examples/ring8.pbtxt --json");
  REQUIRE(j.code == 0);
  const double s = std::sin(std::acos(-1.0) / 8);
  CHECK(std::abs(json_field(j.out, "gap") - 4.0 / 3.0 * s * s) < 1e-15);
  const Run e = run("analyze examples/exponential16.pbtxt --json");
  CHECK(std::abs(json_field(e.out, "gap") - 0.4) < 1e-14);
}

TEST_CASE("generate | validate round trip, and --kind on the command line") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path path = tmp.file("gossip_cli.pbtxt");
  const Run g = run("generate torus --rows 5 --cols 6 --base-port 9000 > " + path.string());
  REQUIRE_MESSAGE(g.code == 0, g.out);
  const Run v = run("validate " + path.string());
  CHECK_MESSAGE(v.code == 0, v.out);
  CHECK(v.out.find("OK") != std::string::npos);
  const Run k = run("analyze --kind torus --rows 5 --cols 6 --base-port 9000 --json");
  REQUIRE(k.code == 0);
  const Run f = run("analyze " + path.string() + " --json");
  // Same topology both ways: same fingerprint.
  const auto fp = [](const std::string& s) { return s.substr(s.find("\"fingerprint\"")); };
  CHECK(fp(k.out).substr(0, 80) == fp(f.out).substr(0, 80));
}

TEST_CASE("invalid files exit 1 with file:line:column") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path path = tmp.file("gossip_cli_bad.pbtxt");
  std::ofstream(path) << "name: \"bad\"\n\ngenerator { kind: RING nodes: 8 base_prot: 7000 }\n";
  const Run v = run("validate " + path.string());
  CHECK(v.code == 1);
  CHECK_MESSAGE(v.out.find(path.string() + ":3:") != std::string::npos, v.out);
  CHECK(v.out.find("base_prot") != std::string::npos);
  CHECK(run("analyze does/not/exist.pbtxt").code == 1);
}

TEST_CASE("a bad command line exits 2 (CLI11's errors included), --help 0") {
  for (const char* args :
       {"frobnicate", "", "validate", "analyze examples/ring8.pbtxt --bogus", "analyze --nodes abc",
        "analyze --kind ring --nodes 2", "analyze",
        "analyze examples/ring8.pbtxt --kind ring --nodes 8",
        "analyze examples/ring8.pbtxt --method foo", "analyze examples/ring8.pbtxt --bandwidth x",
        "export examples/ring8.pbtxt", "weights examples/ring8.pbtxt --format x",
        "compare --kinds torus --nodes 10", "compare", "generate ring --nodes 2",
        // An unsigned seed read from "-1" was 2^64 - 1; optimize ran 0 iterations and printed
        // rho 0 for Metropolis–Hastings, or took a NaN time limit.
        "generate ring --nodes 8 --seed -1",
        "analyze --kind random_regular --nodes 8 --degree 3 "
        "--seed -2",
        "optimize --kind ring --nodes 5 --iterations -5",
        "optimize --kind ring --nodes 5 --iterations 0",
        "optimize --kind ring --nodes 5 "
        "--time-limit nan",
        "optimize --kind ring --nodes 5 --time-limit -1"}) {
    CAPTURE(args);
    const Run r = run(args);
    CHECK_MESSAGE(r.code == 2, r.out);
    CHECK(!r.out.empty());  // a message, not a silent exit
  }
  const Run h = run("analyze --help");
  CHECK(h.code == 0);
  CHECK(h.out.find("--kind") != std::string::npos);
}

TEST_CASE("analyze --kind needs no ports: more nodes than a port range holds") {
  // The generate subcommand's default base port (7000) once leaked into analyze, so a generated
  // topology of more than 58535 nodes was refused for running out of ports.
  const Run r = run("analyze --kind ring --nodes 70000 --json");
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(json_field(r.out, "nodes") == 70000);
  const Run g = run("generate ring --nodes 70000");  // a file for deployment: ports by default
  CHECK(g.code == 2);
  CHECK(g.out.find("port") != std::string::npos);
  // An explicit file needs an address per node: refused, not written with ports past 65535.
  const Run e = run("export --kind ring --nodes 70000 --pbtxt");
  CHECK(e.code == 1);
  CHECK_MESSAGE(e.out.find("65535") != std::string::npos, e.out.substr(0, 300));
}

TEST_CASE("weights, compare, optimize and export produce what they promise") {
  const Run w = run("weights examples/ring8.pbtxt --format triplets");
  REQUIRE(w.code == 0);
  CHECK(w.out.find("0 1 0.33333333333333331") != std::string::npos);
  const Run c =
      run("compare examples/ring8.pbtxt examples/torus4x4.pbtxt --kinds hypercube,exponential "
          "--nodes 16");
  CHECK_MESSAGE(c.code == 0, c.out);
  CHECK(c.out.find("hypercube") != std::string::npos);
  const Run o = run("optimize examples/barbell10.pbtxt --json");
  REQUIRE_MESSAGE(o.code == 0, o.out);
  CHECK(json_field(o.out, "rho_optimized") < json_field(o.out, "rho_metropolis_hastings"));
  const Run d = run("export examples/ring8.pbtxt --dot");
  CHECK(d.out.find("graph \"ring8\"") != std::string::npos);
  CHECK(d.out.find("0 -- 1") != std::string::npos);
  const Run j = run("export examples/exponential16.pbtxt --json");
  CHECK(j.code == 0);
  CHECK(j.out.find("\"directed\": true") != std::string::npos);
}

// The fingerprint in a JSON report, or in the comment `generate` writes above its file.
std::string fingerprint_of(const std::string& out) {
  for (const std::string key : {"\"fingerprint\": \"", "fingerprint "}) {
    const auto pos = out.find(key);
    if (pos != std::string::npos) return out.substr(pos + key.size(), 64);
  }
  FAIL("no fingerprint in " << out);
  return "";
}

TEST_CASE(
    "generate --hosts / --hostfile for every generator: the file reloads to its fingerprint") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path dir = tmp.path;
  std::ofstream(dir / "hosts") << "# two racks\n10.0.0.1 slots=4\nnode-b slots=4 base_port=9000\n"
                                  "[fd00::3] slots=64\n";
  for (const char* gen :
       {"ring --nodes 8", "k_ring --nodes 9 --k 2", "torus --rows 3 --cols 4",
        "grid --rows 3 --cols 3", "hypercube --nodes 8", "complete --nodes 6", "star --nodes 6",
        "exponential --nodes 8", "one_peer_exponential --nodes 8",
        "random_regular --nodes 10 --degree 3 --seed 5",
        "erdos_renyi --nodes 12 -p 0.5 --seed 3"}) {
    for (const std::string& hosts :
         std::vector<std::string>{"--hosts '127.0.0.1:4,127.0.0.2:3,[::1]:20'",
                                  "--hostfile " + (dir / "hosts").string()}) {
      CAPTURE(gen);
      CAPTURE(hosts);
      const auto file = (dir / "t.pbtxt").string();
      const Run g = run(std::string("generate ") + gen + " " + hosts + " > " + file);
      REQUIRE_MESSAGE(g.code == 0, g.out);
      std::ifstream in(file);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      CHECK(text.find("host {") != std::string::npos);
      const Run a = run("analyze " + file + " --json");
      REQUIRE_MESSAGE(a.code == 0, a.out);
      CHECK(fingerprint_of(a.out) == fingerprint_of(text));
    }
  }
  // Node 4 is the first on the second host; --hostfile gives node-b its own ports.
  const Run d =
      run("generate ring --nodes 6 --hostfile " + (dir / "hosts").string() + " --explicit");
  REQUIRE_MESSAGE(d.code == 0, d.out);
  CHECK(d.out.find("address: \"10.0.0.1:7003\"") != std::string::npos);
  CHECK(d.out.find("address: \"node-b:9000\"") != std::string::npos);
  // A bad hostfile is bad input (exit 1) at file:line:column.
  std::ofstream(dir / "bad") << "n1 slots=2\nn2 slots=0\n";
  const Run b = run("generate ring --nodes 4 --hostfile " + (dir / "bad").string());
  CHECK(b.code == 1);
  CHECK_MESSAGE(b.out.find((dir / "bad").string() + ":2:4: slots '0'") != std::string::npos, b.out);
  const Run s = run("generate ring --nodes 9 --hostfile " + (dir / "bad").string() + "x");
  CHECK(s.code == 1);
  // A hostfile without hosts is a usage error naming the flag: never every node on --host.
  std::ofstream(dir / "empty") << "# nobody yet\n\n";
  const Run e = run("generate ring --nodes 4 --hostfile " + (dir / "empty").string());
  CHECK(e.code == 2);
  CHECK_MESSAGE(e.out.find("--hostfile " + (dir / "empty").string() + ": no hosts in the file") !=
                    std::string::npos,
                e.out);
}

TEST_CASE("generate --base-port 0 writes base_port: 0 and reloads without addresses") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path path = tmp.file("gossip_cli_p0.pbtxt");
  const Run g = run("generate one_peer_exponential --nodes 16 --base-port 0 > " + path.string());
  REQUIRE_MESSAGE(g.code == 0, g.out);
  const Run a = run("analyze " + path.string() + " --json");
  REQUIRE_MESSAGE(a.code == 0, a.out);
  // analyze --kind builds no addresses: the same topology.
  const Run k = run("analyze --kind one_peer_exponential --nodes 16 --json");
  REQUIRE(k.code == 0);
  CHECK(fingerprint_of(a.out) == fingerprint_of(k.out));
  const Run d = run("export " + path.string() + " --dot");
  CHECK(d.out.find("127.0.0.1") == std::string::npos);  // no addresses to label
}

TEST_CASE("analyze prints every time, size and bandwidth of the cost model with its unit") {
  const Run t =
      run("analyze --kind ring --nodes 8 --model-bytes 4MB --bandwidth 1Gbps "
          "--latency 1ms");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  for (const char* line : {"cost model   M = 4 MB, B = 1 Gbit/s, alpha = 1 ms",
                           "D-PSGD         8 MB sent per node, 65 ms per iteration",
                           "C-PSGD (PS)    32 MB through the server, 514 ms per iteration",
                           "C-PSGD (ring)  7 MB per node, 70 ms per iteration"}) {
    CHECK_MESSAGE(t.out.find(line) != std::string::npos, line, "\n", t.out);
  }
  CHECK(t.out.find("e+0") == std::string::npos);  // was "M = 4e+06 B, B = 1.25e+08 B/s"
  // JSON: the model's inputs and every output, each named with its unit.
  const Run j = run("analyze --kind ring --nodes 8 --model-bytes 4MB --json");
  REQUIRE(j.code == 0);
  for (const char* member :
       {"\"model_bytes\": 4000000", "\"bandwidth_bps\": 1000000000", "\"latency_s\": 0.001",
        "\"ps_server_bytes\": 32000000", "\"allreduce_bytes_per_node\": 7000000"}) {
    CHECK_MESSAGE(j.out.find(member) != std::string::npos, member, "\n", j.out);
  }
}

TEST_CASE("analyze and compare refuse a spectrum whose estimate is over --time-limit, at once") {
  // A grid has no translation symmetry: past 1500 nodes the spectrum is Lanczos's, whose time
  // grows like n x diameter (a 3000 x 3000 grid: over an hour).
  const Run r = run("analyze --kind grid --rows 300 --cols 300 --time-limit 0.01");
  CHECK(r.code == 2);
  CHECK_MESSAGE(r.out.find("the Lanczos method on 90000 nodes needs about") != std::string::npos,
                r.out);
  CHECK(r.out.find("hop diameter >= 598") != std::string::npos);
  CHECK(r.out.find("more than the time limit of 10 ms") != std::string::npos);
  const Run c = run("compare --kinds grid --nodes 90000 --time-limit 0.01");
  CHECK(c.code == 2);
  CHECK_MESSAGE(c.out.find("grid: the Lanczos method") != std::string::npos, c.out);
  for (const char* bad : {"-1", "nan", "inf"}) {
    const Run b = run(std::string("analyze --kind ring --nodes 8 --time-limit ") + bad);
    CHECK(b.code == 2);
    CHECK_MESSAGE(b.out.find("--time-limit") != std::string::npos, b.out);
  }
  // Within the limit (the default is 600 s) it runs as before.
  CHECK(run("analyze --kind grid --rows 50 --cols 50 --json").code == 0);
}

TEST_CASE("generate --hosts errors exit 2 and name the flag and the counts") {
  const struct {
    const char* args;
    const char* what;
  } cases[] = {
      {"ring --nodes 8 --hosts a:3,b:3",
       "--hosts: the host list has 6 slots (2 hosts) for 8 nodes"},
      {"ring --nodes 4 --hosts a:2,b,a", "would both listen on a:7000"},
      {"ring --nodes 4 --hosts a:0,b:4", "--hosts: host entry 'a:0': slots '0'"},
      {"ring --nodes 4 --hosts a:-1,b:4", "slots '-1'"},
      {"ring --nodes 4 --hosts a:4:5", "write IPv6 hosts in brackets"},
      {"ring --nodes 4 --hosts 'a b:4'", "' ' is not allowed"},
      {"ring --nodes 4 --hosts a,,b", "empty host entry"},
      {"ring --nodes 4 --hosts a:4 --base-port 0", "base_port 0 means no addresses"},
      {"ring --nodes 4 --hosts a:4 --base-port 65534", "runs past port 65535"},
      {"ring --nodes 4 --hosts a:4 --host b", "excludes"},
      // An empty or blank value (an unset shell variable) is never "no host list".
      {"ring --nodes 4 --hosts ''", "--hosts: empty host entry in '' (entry 1)"},
      {"ring --nodes 4 --hosts '  '", "--hosts: empty host entry"},
      {"ring --nodes 4 --hostfile ''", "--hostfile: empty file name"},
      {"ring --nodes 4 --hosts 999.1.1.1:4", "host '999.1.1.1' is not an IPv4 address"},
      {"ring --nodes 4 --hosts 1.2.3:4", "host '1.2.3' is not an IPv4 address"},
      {"ring --nodes 4 --hosts -a:4", "label '-a' starts or ends with '-'"},
      {"ring --nodes 4 --hosts a..b:4", "empty label"},
      {"ring --nodes 4 --hosts a:2,A:2", "would both listen on A:7000 (the same as a:7000)"},
      {"ring --nodes 4 --hosts '[::1]:2,[0::1]:2'", "(the same as [::1]:7000)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    const Run r = run(std::string("generate ") + c.args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.out.find(c.what) != std::string::npos, r.out);
  }
}

// The part of `json` after `"key": ` (a nested object's fields come first in it).
std::string after(const std::string& json, const std::string& key) {
  const auto pos = json.find("\"" + key + "\": ");
  REQUIRE_MESSAGE(pos != std::string::npos, key, " missing in ", json);
  return json.substr(pos + key.size() + 4);
}

TEST_CASE("advise: its rule on a 10 Mbit/s link and on an unshaped 10 Gbit/s one") {
  // The demo MLP (784-256-128-10: d = 235146) on 8 nodes. At 10 Mbit/s and 5 ms the float32
  // message takes 0.757 s against 0.45 ms of compute: the link binds, so int8 (d + 4 ceil(d/256)
  // bytes) with overlap and the smallest H of 1, 5, 10, 25, 50, 100, 250, 500, 1000 with
  // H c >= 5 ms + M_int8 / B = 196 ms: 500.
  const double d = 235146;
  const Run slow =
      run("advise --bandwidth 10Mbit/s --latency 5ms --model mlp --compute-time "
          "0.45ms --json");
  REQUIRE_MESSAGE(slow.code == 0, slow.out);
  CHECK(json_field(slow.out, "params") == d);
  CHECK(after(slow.out, "topology").rfind("\"one_peer_exponential\"", 0) == 0);
  const std::string rec = after(slow.out, "recommendation");
  const double wire = 5e-3 + (d + 4 * std::ceil(d / 256)) / 1.25e6;
  CHECK(json_field(rec, "local_steps") == 500);
  CHECK(250 * 0.45e-3 < wire);
  CHECK(500 * 0.45e-3 >= wire);
  CHECK(rec.rfind("{\"local_steps\": 500, \"compression\": \"int8\", \"overlap\": true", 0) == 0);
  CHECK(json_field(rec, "round_s") == doctest::Approx(500 * 0.45e-3));
  CHECK(json_field(rec, "wire_fraction") == 0);
  CHECK(json_field(after(slow.out, "per_step"), "round_s") ==
        doctest::Approx(5e-3 + 4 * d / 1.25e6));
  // At 10 Gbit/s and 50 us the float32 message (0.8 ms) hides behind a 10 ms step: per-step D-PSGD.
  const Run fast =
      run("advise --bandwidth 10Gbps --latency 50us --params 235146 --compute-time "
          "10ms --json");
  REQUIRE_MESSAGE(fast.code == 0, fast.out);
  const std::string per_step = after(fast.out, "recommendation");
  CHECK(per_step.rfind("{\"local_steps\": 1, \"compression\": \"none\", \"overlap\": false", 0) ==
        0);
  CHECK(json_field(per_step, "round_s") == doctest::Approx(10e-3));
  CHECK(fast.out.find("\"link_binds\": false") != std::string::npos);
  // The text report carries the numbers and a config to paste.
  const Run text =
      run("advise --bandwidth 10Mbit/s --latency 5ms --model mlp --compute-time 0.45ms");
  REQUIRE(text.code == 0);
  CHECK(text.out.find("local_steps: 500\ncompression { kind: INT8 }\noverlap: true") !=
        std::string::npos);
  CHECK(text.out.find("gossip-sim compare --nodes 8 --topology one_peer_exponential") !=
        std::string::npos);
  for (const char* bad :
       {"advise --bandwidth fast --model mlp", "advise --model cnn", "advise",
        "advise --model mlp --params 10", "advise --params 0", "advise --model mlp --nodes 1",
        "advise --model mlp --compute-time soon", "advise --model mlp --compute-time 0s"}) {
    CAPTURE(bad);
    const Run r = run(bad);
    CHECK_MESSAGE(r.code == 2, r.out);
    CHECK(r.out.find("gossip-topo:") != std::string::npos);
  }
}

}  // namespace

TEST_CASE(
    "export --dot: a name with quotes, backslashes, braces and control bytes stays one DOT "
    "string") {
  const gossip::testing::TempDir tmp;
  const std::filesystem::path path = tmp.file("gossip_cli_dot.pbtxt");
  // The name as Protobuf text escapes it: " \ newline ESC, then a would-be DOT statement.
  std::ofstream(path) << "name: \"a\\\"; x -> y; \\\\ \\n\\033 \\\" {\"\n"
                         "generator { kind: RING nodes: 3 }\n";
  const Run d = run("export " + path.string() + " --dot");
  REQUIRE_MESSAGE(d.code == 0, d.out);
  const std::string first = d.out.substr(0, d.out.find('\n'));
  CHECK(first == "graph \"a\\\"; x -> y; \\\\ \\n\\x1b \\\" {\" {");
  // Every other line is a node or an edge statement, and the graph closes once.
  std::size_t lines = 0, closing = 0;
  for (std::size_t pos = 0; pos < d.out.size();) {
    const std::size_t end = d.out.find('\n', pos);
    const std::string line = d.out.substr(pos, end - pos);
    pos = end + 1;
    ++lines;
    if (line == "}") ++closing;
    CHECK(line.find('\x1b') == std::string::npos);
  }
  CHECK(lines == 1 + 3 + 3 + 1);  // header, 3 nodes, 3 ring edges, "}"
  CHECK(closing == 1);
}
