// gossip-topo end to end: real processes on the example files; exit codes and messages.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace {

struct Run {
  int code;
  std::string out;
};

// Paths come in as compile definitions (tests/topology/CMakeLists.txt), so the test also runs
// outside ctest.
Run run(const std::string& args) {
  const std::string cmd = std::string("cd ") + GOSSIP_TOPO_SOURCE_DIR + " && " + GOSSIP_TOPO_CLI +
                          " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  std::size_t k;
  while ((k = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), k);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

double json_field(const std::string& json, const std::string& key) {
  const auto pos = json.find("\"" + key + "\": ");
  REQUIRE_MESSAGE(pos != std::string::npos, key, " missing in ", json);
  return std::stod(json.substr(pos + key.size() + 4));
}

TEST_CASE("analyze the three example files") {
  for (const char* f : {"examples/ring8.pbtxt", "examples/torus4x4.pbtxt",
                        "examples/exponential16.pbtxt", "examples/one_peer16.pbtxt",
                        "examples/barbell10.pbtxt", "examples/square_explicit.json"}) {
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
  const auto path = std::filesystem::temp_directory_path() /
                    ("gossip_cli_" + std::to_string(::getpid()) + ".pbtxt");
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
  std::filesystem::remove(path);
}

TEST_CASE("invalid files exit 1 with file:line:column") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("gossip_cli_bad_" + std::to_string(::getpid()) + ".pbtxt");
  std::ofstream(path) << "name: \"bad\"\n\ngenerator { kind: RING nodes: 8 base_prot: 7000 }\n";
  const Run v = run("validate " + path.string());
  CHECK(v.code == 1);
  CHECK_MESSAGE(v.out.find(path.string() + ":3:") != std::string::npos, v.out);
  CHECK(v.out.find("base_prot") != std::string::npos);
  std::filesystem::remove(path);
  CHECK(run("analyze does/not/exist.pbtxt").code == 1);
}

TEST_CASE("a bad command line exits 2 (CLI11's errors included), --help 0") {
  for (const char* args :
       {"frobnicate", "", "validate", "analyze examples/ring8.pbtxt --bogus",
        "analyze --nodes abc", "analyze --kind ring --nodes 2", "analyze",
        "analyze examples/ring8.pbtxt --kind ring --nodes 8",
        "analyze examples/ring8.pbtxt --method foo", "analyze examples/ring8.pbtxt --bandwidth x",
        "export examples/ring8.pbtxt", "weights examples/ring8.pbtxt --format x",
        "compare --kinds torus --nodes 10", "compare", "generate ring --nodes 2"}) {
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
  const Run c = run("compare examples/ring8.pbtxt examples/torus4x4.pbtxt --kinds hypercube,exponential --nodes 16");
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

}  // namespace
