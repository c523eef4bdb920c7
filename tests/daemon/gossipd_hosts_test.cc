// One generated topology file deployed across hosts (integration): `gossip-topo generate --hosts`
// places a one-peer exponential graph (time-varying W) on two loopback hosts, 127.0.0.1 and
// 127.0.0.2, each with the same ports; one `gossipd launch --host H` per host starts only that
// host's nodes from the one file, with certificates made once for all of them (TLS). The nodes
// find each other across the two launches and end with gossip-sim's D-PSGD parameters for the
// same file. Also: a launch that would make its own CA while other nodes run elsewhere is
// refused, and so is a --host the file does not name.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/daemon/gossipd_harness.h"

namespace gossip::daemon {
namespace {

using namespace harness;

TEST_CASE("two gossipd launches, one per loopback host, run one generated file with a host list") {
  TempDir dir;
  Job job;
  job.iterations = 40;
  const int n = 4;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text();
  const std::string topo = dir.path + "/ope4.pbtxt", certs = dir.path + "/certs";
  // The certificates every host shares (the job id is the topology's name).
  REQUIRE(run_shell("/bin/bash " GOSSIP_SOURCE_DIR "/scripts/gen-certs.sh " + certs + " " +
                    std::to_string(n) + " ope4 > " + dir.path + "/certs.out 2>&1") == 0);
  const std::string hosts[] = {"127.0.0.1", "127.0.0.2"};
  int rc[2] = {-1, -1};
  auto work = [&](int h) { return dir.path + "/run-" + std::to_string(h); };
  // Ports are probed free, but another test may take one before the nodes bind it: then (and
  // only then) the run is repeated on other ports.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int base = free_base_port(2);  // each host's two nodes: base, base + 1
    const Run g = run_shell_capture(
        bin("topology/gossip-topo") +
        " generate one_peer_exponential --nodes 4 --name ope4 --hosts " + hosts[0] + ":2," +
        hosts[1] + ":2 --base-port " + std::to_string(base) + " > " + topo);
    REQUIRE_MESSAGE(g.code == 0, g.out);
    pid_t launches[2];
    for (int h = 0; h < 2; ++h) {
      fs::remove_all(work(h));
      launches[h] = spawn_shell(
          "cd " + dir.path + " && exec timeout 120 " + bin("daemon/gossipd") + " launch " + topo +
          " --config " + cfg + " --host " + hosts[h] + " --certs " + certs + " --workdir " +
          work(h) + " --set checkpoint.dir=" + dir.path + "/ckpt > " + work(h) + ".out 2>&1");
    }
    for (int h = 0; h < 2; ++h) rc[h] = wait_exit(launches[h]);
    bool port_taken = false;
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < n; ++i)
        port_taken |=
            read_file(work(h) + "/node-" + std::to_string(i) + "/log.txt").find("in use") !=
            std::string::npos;
    if ((rc[0] == kExitOk && rc[1] == kExitOk) || !port_taken) break;
  }
  INFO(read_file(topo));
  INFO(read_file(work(0) + ".out"));
  INFO(read_file(work(1) + ".out"));
  REQUIRE(rc[0] == kExitOk);
  REQUIRE(rc[1] == kExitOk);
  CHECK(read_file(work(0) + ".out").find("launched 2 of 4 nodes") != std::string::npos);
  CHECK(read_file(work(0) + ".out").find("TLS 1.3") != std::string::npos);
  // Each launch ran its host's nodes (node k on slot k: 0, 1 on the first host), listening there.
  for (int i = 0; i < n; ++i) {
    const int h = i / 2;
    const std::string node = "/node-" + std::to_string(i);
    REQUIRE(fs::exists(work(h) + node + "/log.txt"));
    CHECK_FALSE(fs::exists(work(1 - h) + node));
    CHECK_MESSAGE(read_file(work(h) + node + "/log.txt").find("listening on " + hosts[h] + ":") !=
                      std::string::npos,
                  read_file(work(h) + node + "/log.txt"));
  }
  // Every node ends where gossip-sim's D-PSGD on the same file does.
  REQUIRE(run_shell(bin("sim/gossip-sim") + " run --algorithm dpsgd --topology " + topo + " " +
                    job.sim_flags(n) + " --dump-params " + dir.path + "/sim > " + dir.path +
                    "/sim.out 2>&1") == 0);
  double max_diff = 0;
  for (int i = 0; i < n; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    const std::vector<float> a = read_f32(work(i / 2) + "/final" + name);
    const std::vector<float> b = read_f32(dir.path + "/sim" + name);
    REQUIRE(!a.empty());
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[k] - b[k])));
  }
  MESSAGE("two hosts, one-peer exponential n=4: max |gossipd - gossip-sim| = " << max_diff);
  CHECK(max_diff <= 1e-5);
  CHECK(read_f32(work(0) + "/final/node_0.f32") != read_f32(work(1) + "/final/node_2.f32"));

  // Refusals, before anything starts: a throwaway CA while nodes run elsewhere, an unknown host.
  const Run ca = run_shell_capture(bin("daemon/gossipd") + " launch " + topo + " --config " + cfg +
                                   " --host 127.0.0.1 --workdir " + dir.path + "/ca");
  CHECK(ca.code == kExitUsage);
  CHECK_MESSAGE(ca.out.find("2 of the 4 nodes") != std::string::npos, ca.out);
  CHECK(ca.out.find("--certs") != std::string::npos);
  const Run other =
      run_shell_capture(bin("daemon/gossipd") + " launch " + topo + " --config " + cfg +
                        " --host 127.0.0.9 --insecure --workdir " + dir.path + "/other");
  CHECK(other.code == kExitUsage);
  CHECK_MESSAGE(other.out.find("--host 127.0.0.9: no node") != std::string::npos, other.out);
  CHECK(other.out.find("127.0.0.2") != std::string::npos);  // the hosts it does name
}

}  // namespace
}  // namespace gossip::daemon
