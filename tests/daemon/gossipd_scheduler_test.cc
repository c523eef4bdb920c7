// gossipd run --from-env as real processes on loopback, with the environment srun would give four
// tasks on one host (SLURM_JOB_NODELIST=localhost, SLURM_TASKS_PER_NODE=4, SLURM_LOCALID 0..3):
//  - the four nodes generate the topology gossip-topo writes for that host list (the fingerprint
//    in their logs is the file's), train, and end bit for bit where `gossipd launch` of that file
//    ends, node by node;
//  - bad environments (a malformed node list, an id out of range, no scheduler) and a config
//    without a topology block exit 2 at once with the variable, position or field named.
// scripts/slurm-check.sh does the same under a real Slurm (srun -n 8).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/daemon/gossipd_harness.h"

namespace gossip::daemon::harness {
namespace {

// Variables of a surrounding Slurm job (the suite itself run under srun) that would take
// precedence over the fake ones.
const std::string kCleanEnv =
    "env -u SLURM_STEP_NODELIST -u SLURM_STEP_TASKS_PER_NODE -u SLURM_STEP_NUM_TASKS "
    "-u SLURMD_NODENAME -u GOSSIP_SERVICE ";

std::string slurm_env(int procid, int ntasks, const std::string& nodelist, int localid,
                      const std::string& tasks_per_node) {
  return kCleanEnv + "SLURM_PROCID=" + std::to_string(procid) +
         " SLURM_NTASKS=" + std::to_string(ntasks) + " SLURM_JOB_NODELIST='" + nodelist +
         "' SLURM_LOCALID=" + std::to_string(localid) + " SLURM_TASKS_PER_NODE='" + tasks_per_node +
         "' ";
}

std::string config_with_topology(const Job& job, int base_port) {
  return job.config_text() +
         "topology { generator: \"one_peer_exponential\" base_port: " + std::to_string(base_port) +
         " }\n";
}

// Starts n `gossipd run --from-env` tasks of one host and returns their exit codes.
std::vector<int> run_tasks(const std::string& dir, const std::string& cfg, int n) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pids.push_back(
        spawn_shell("cd " + dir + " && " + slurm_env(i, n, "localhost", i, std::to_string(n)) +
                    "timeout 120 " + bin("daemon/gossipd") + " run --from-env --config " + cfg +
                    " --insecure --set checkpoint.dir=" + dir + "/ckpt-env --dump-params " + dir +
                    "/env --metrics " + dir + "/env-" + std::to_string(i) + ".jsonl > " + dir +
                    "/env-" + std::to_string(i) + ".log 2>&1"));
  }
  std::vector<int> codes;
  for (pid_t p : pids) codes.push_back(wait_exit(p));
  return codes;
}

std::string logs(const std::string& dir, int n) {
  std::string all;
  for (int i = 0; i < n; ++i) {
    all += "--- task " + std::to_string(i) + "\n" +
           read_file(dir + "/env-" + std::to_string(i) + ".log");
  }
  return all;
}

}  // namespace

TEST_CASE("--from-env: 4 Slurm tasks on one host train bit for bit as gossipd launch") {
  TempDir dir;
  Job job;
  constexpr int n = 4;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::vector<int> codes;
  // Ports are probed free, but another test may take one first: then (a log says "in use") the
  // whole comparison is repeated on other ports, at most three times.
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::remove_all(dir.path + "/run");
    fs::remove_all(dir.path + "/ckpt");
    fs::remove_all(dir.path + "/ckpt-env");
    const int base = free_base_port(n);
    std::ofstream(cfg) << config_with_topology(job, base);
    const std::string topo = dir.path + "/topo.pbtxt";
    REQUIRE(run_shell(bin("topology/gossip-topo") +
                      " generate one_peer_exponential --nodes 4 --hosts localhost:4 --base-port " +
                      std::to_string(base) + " > " + topo) == 0);
    const int rc =
        run_shell(launch_command(dir.path, topo, cfg, dir.path + "/run", dir.path + "/ckpt") +
                  " > " + dir.path + "/launch.out 2>&1");
    if (rc != kExitOk && read_file(dir.path + "/launch.out").find("in use") == std::string::npos) {
      FAIL(read_file(dir.path + "/launch.out"));
    }
    if (rc != kExitOk) continue;
    codes = run_tasks(dir.path, cfg, n);
    if (logs(dir.path, n).find("in use") == std::string::npos) break;
  }
  INFO(logs(dir.path, n));
  REQUIRE(codes == std::vector<int>(n, kExitOk));
  // Every task generated the file gossip-topo wrote: the same fingerprint.
  const std::string topo_text = read_file(dir.path + "/topo.pbtxt");
  const std::size_t at = topo_text.find("fingerprint ");
  REQUIRE(at != std::string::npos);
  const std::string fingerprint = topo_text.substr(at + 12, topo_text.find('\n', at) - at - 12);
  for (int i = 0; i < n; ++i) {
    const std::string log = read_file(dir.path + "/env-" + std::to_string(i) + ".log");
    CHECK_MESSAGE(log.find("Slurm task " + std::to_string(i) + " of 4") != std::string::npos, log);
    CHECK_MESSAGE(log.find("fingerprint " + fingerprint) != std::string::npos, log);
  }
  for (int i = 0; i < n; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    const std::vector<float> mine = read_f32(dir.path + "/env" + name);
    REQUIRE(!mine.empty());
    CHECK_MESSAGE(mine == read_f32(dir.path + "/run/final" + name), "node " << i);
  }
  // Not vacuous: the nodes' models differ (gossip, not one shared model).
  CHECK(read_f32(dir.path + "/env/node_0.f32") != read_f32(dir.path + "/env/node_1.f32"));
}

TEST_CASE("--from-env: bad environments and configs exit 2 naming the cause") {
  TempDir dir;
  Job job;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << config_with_topology(job, 7100);
  auto run = [&](const std::string& env, const std::string& args) {
    return run_shell_capture("cd " + dir.path + " && " + env + "timeout 20 " +
                             bin("daemon/gossipd") + " run --from-env --config " + args +
                             " --insecure 2>&1");
  };
  Run r = run(slurm_env(0, 4, "node[01-x3]", 0, "4"), cfg);
  CHECK(r.code == kExitUsage);
  CHECK_MESSAGE(r.out.find("SLURM_JOB_NODELIST=\"node[01-x3]\": position 9") != std::string::npos,
                r.out);
  r = run(slurm_env(4, 4, "localhost", 0, "4"), cfg);
  CHECK(r.code == kExitUsage);
  CHECK_MESSAGE(r.out.find("SLURM_PROCID=\"4\": expected an integer in 0..3") != std::string::npos,
                r.out);
  r = run(kCleanEnv + "-u SLURM_PROCID ", cfg);
  CHECK(r.code == kExitUsage);
  CHECK_MESSAGE(r.out.find("no scheduler in the environment") != std::string::npos, r.out);
  const std::string plain = dir.path + "/plain.pbtxt";
  std::ofstream(plain) << job.config_text();
  r = run(slurm_env(0, 4, "localhost", 0, "4"), plain);
  CHECK(r.code == kExitUsage);
  CHECK_MESSAGE(
      r.out.find("--from-env needs the training config's topology block") != std::string::npos,
      r.out);
  // --from-env replaces TOPOLOGY and --node.
  r = run_shell_capture(bin("daemon/gossipd") + " run x.pbtxt --from-env --config " + cfg +
                        " --insecure 2>&1");
  CHECK(r.code == kExitUsage);
  r = run_shell_capture(bin("daemon/gossipd") + " run --config " + cfg + " --insecure 2>&1");
  CHECK(r.code == kExitUsage);
  CHECK_MESSAGE(r.out.find("give TOPOLOGY and --node ID, or --from-env") != std::string::npos,
                r.out);
}

}  // namespace gossip::daemon::harness
