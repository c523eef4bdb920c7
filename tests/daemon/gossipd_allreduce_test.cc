// gossipd with `algorithm: ALLREDUCE` (C-PSGD over Gloo) as real processes on loopback:
//  - 4 nodes finish a run with bit-identical parameters on every node, within kTolerance of
//    gossip-sim's cpsgd-allreduce on the same files (and D-PSGD on a ring is far outside it, so
//    the comparison can tell the algorithms apart);
//  - SIGKILL one node mid-run: the others checkpoint and exit 3 within the deadline + a margin;
//  - SIGSTOP one node mid-run (alive, silent): the others exit 3 once timeouts.deadline_ms passes
//    (Gloo's timeout), not later and not never;
//  - one node configured DPSGD beside ALLREDUCE nodes: refused at the handshake with a message
//    naming both algorithms; the DPSGD node exits 2 at once, the others 2 or 3, nobody trains;
//  - resume: 40 iterations then --resume (or --resume-or-start, which starts at 0 on an empty
//    directory) to 60 equals 60 in one go bit for bit; nodes resuming
//    from different iterations refuse to start (exit 6), naming them;
//  - attached trainers: an update session equals gossipd's own ALLREDUCE bit for bit (SGD).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "daemon/checkpoint.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "tests/daemon/gossipd_harness.h"

namespace gossip::daemon {
namespace {

using namespace harness;

// Max |gossipd − gossip-sim| allowed. The runs differ only in how the n gradients are summed:
// gossip-sim adds them in node order in double and rounds once; Gloo's ring adds float32
// partial sums in its own order, each addition rounding to float (relative error ≤ 2^-24 per
// addition, so ≤ (n − 1)·2^-24·Σ|g_i| per element and step). That perturbation enters x through
// γ·g and momentum (factor ≤ 1/(1 − β) = 10): over T = 60 steps at γ = 0.05 and n = 4 it is at
// most 60 · 0.05 · 10 · 3 · 2^-24 · max Σ|g_i| ≈ 5.4e-6 · max Σ|g_i|, i.e. a few 1e-6 for
// gradients of order one, as here. 1e-5 keeps a margin for the MLP's (mild, over 60 steps)
// amplification; the measured difference is about one float ulp of |x| ≈ 1 (1.2e-7).
constexpr double kTolerance = 1e-5;

std::string allreduce_config(const Job& job, int deadline_ms, int iterations) {
  Job j = job;
  j.deadline_ms = deadline_ms;
  j.iterations = iterations;
  return j.config_text() + "algorithm: ALLREDUCE\n";
}

TEST_CASE(
    "ALLREDUCE: 4 gossipd processes agree bit for bit and equal gossip-sim's C-PSGD within "
    "the float summation tolerance") {
  const int n = 4;
  TempDir dir;
  Job job;
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << allreduce_config(job, 20000, job.iterations);
  std::string work = dir.path + "/run", topo;
  const int rc = launch_retrying_ports(dir.path, "RING", n, work, &topo, [&](const std::string& t) {
    return launch_command(dir.path, t, cfg, work, dir.path + "/ckpt") + " > " + dir.path +
           "/launch.out 2>&1";
  });
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(rc == kExitOk);
  CHECK(read_file(work + "/node-0/log.txt").find("Gloo connected 4 nodes") != std::string::npos);

  // Every node holds the one model.
  const std::vector<float> x0 = read_f32(work + "/final/node_0.f32");
  for (int i = 1; i < n; ++i)
    CHECK(read_f32(work + "/final/node_" + std::to_string(i) + ".f32") == x0);

  for (const char* algorithm : {"cpsgd-allreduce", "dpsgd"}) {
    REQUIRE(run_shell(bin("sim/gossip-sim") + " run --algorithm " + algorithm + " --topology " +
                      topo + " " + job.sim_flags(n) + " --dump-params " + dir.path + "/" +
                      algorithm + " > " + dir.path + "/sim.out 2>&1") == 0);
  }
  const double diff = compare_with_sim(work + "/final", dir.path + "/cpsgd-allreduce", n);
  const double dpsgd_diff = compare_with_sim(work + "/final", dir.path + "/dpsgd", n);
  MESSAGE("max |gossipd ALLREDUCE - gossip-sim cpsgd-allreduce| = "
          << diff << "; against gossip-sim dpsgd (ring): " << dpsgd_diff);
  CHECK(diff <= kTolerance);
  // The tolerance separates C-PSGD from D-PSGD on the same files by a wide margin.
  CHECK(dpsgd_diff > 100 * kTolerance);
  // Metrics as D-PSGD's: iteration lines up to the last iteration and a final evaluation.
  CHECK(metrics_iteration(work + "/node-2/metrics.jsonl") == job.iterations);
  CHECK(read_file(work + "/node-2/metrics.jsonl").find("\"type\":\"eval\"") != std::string::npos);
}

// Starts a long ALLREDUCE launch, waits until every node is past iteration 50, and returns the
// launcher's pid.
pid_t start_long_run(const TempDir& dir, const std::string& work, int n, int deadline_ms) {
  std::string topo = write_topology(dir.path, "RING", n);
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << allreduce_config(Job{}, deadline_ms, 100000000);
  pid_t launcher = spawn_shell(launch_command(dir.path, topo, cfg, work, dir.path + "/ckpt") +
                               " > " + dir.path + "/launch.out 2>&1");
  wait_all_reach(work, n, 50, dir.path + "/launch.out");
  return launcher;
}

void check_failed_nodes(const std::string& work, const std::string& ckpt,
                        std::initializer_list<int> nodes) {
  std::string summary = read_file(work + "/summary.json");
  for (int i : nodes) {
    CHECK_MESSAGE(
        summary.find("{\"node\":" + std::to_string(i) + ",\"exit_code\":3,") != std::string::npos,
        summary);
    CHECK(read_file(work + "/node-" + std::to_string(i) + "/log.txt")
              .find("allreduce of iteration") != std::string::npos);
    auto c = load_latest_checkpoint(Env::system(), ckpt + "/node-" + std::to_string(i),
                                    {static_cast<std::uint32_t>(i), 0, 0, "", ""});
    CHECK_MESSAGE(c.is_ok(), c.status().to_string());
  }
}

TEST_CASE(
    "ALLREDUCE: kill -9 one node mid-run: the others checkpoint and exit 3 within the deadline") {
  const int n = 4, deadline_ms = 3000;
  TempDir dir;
  std::string work = dir.path + "/run";
  pid_t launcher = start_long_run(dir, work, n, deadline_ms);
  REQUIRE(::kill(std::stoi(read_file(work + "/node-1/pid")), SIGKILL) == 0);
  auto killed_at = std::chrono::steady_clock::now();
  const int rc = wait_exit(launcher);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  INFO(read_file(dir.path + "/launch.out"));
  MESSAGE("every node exited " << s << " s after SIGKILL (deadline " << deadline_ms / 1000.0
                               << " s)");
  CHECK(rc != kExitOk);
  CHECK(s < deadline_ms / 1000.0 + 5.0);
  check_failed_nodes(work, dir.path + "/ckpt", {0, 2, 3});
}

TEST_CASE("ALLREDUCE: a hung node (SIGSTOP): the others exit 3 once timeouts.deadline_ms passes") {
  const int n = 4, deadline_ms = 2000;
  TempDir dir;
  std::string work = dir.path + "/run";
  pid_t launcher = start_long_run(dir, work, n, deadline_ms);
  const pid_t victim = std::stoi(read_file(work + "/node-2/pid"));
  REQUIRE(::kill(victim, SIGSTOP) == 0);
  auto stopped_at = std::chrono::steady_clock::now();
  // The others' logs report the failed allreduce; then the stopped node is killed so the
  // launcher can finish.
  auto failed = [&](int i) {
    return read_file(work + "/node-" + std::to_string(i) + "/log.txt")
               .find("allreduce of iteration") != std::string::npos;
  };
  while (!(failed(0) && failed(1) && failed(3)) &&
         std::chrono::steady_clock::now() - stopped_at < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  ::kill(victim, SIGKILL);
  ::kill(victim, SIGCONT);
  wait_exit(launcher);
  INFO(read_file(dir.path + "/launch.out"));
  MESSAGE("the others gave up " << s << " s after SIGSTOP (deadline " << deadline_ms / 1000.0
                                << " s)");
  // Not before the deadline (the node is alive, only silent), and not much after it.
  CHECK(s >= deadline_ms / 1000.0 - 0.5);
  CHECK(s < deadline_ms / 1000.0 + 5.0);
  check_failed_nodes(work, dir.path + "/ckpt", {0, 1, 3});
}

TEST_CASE("ALLREDUCE beside DPSGD: refused at the handshake, every node exits non-zero") {
  const int n = 4;
  TempDir dir;
  std::string topo = write_topology(dir.path, "RING", n);
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << allreduce_config(Job{}, 3000, 60);
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pids.push_back(spawn_shell(
        "exec timeout 60 " + bin("daemon/gossipd") + " run " + topo + " --node " +
        std::to_string(i) + " --config " + cfg + " --insecure --set checkpoint.dir=" + dir.path +
        "/ckpt --set timeouts.connect_ms=4000" + (i == 1 ? " --set algorithm=DPSGD" : "") + " > " +
        dir.path + "/node" + std::to_string(i) + ".log 2>&1"));
  }
  std::vector<int> codes;
  for (pid_t p : pids) codes.push_back(wait_exit(p));
  std::string logs;
  for (int i = 0; i < n; ++i) logs += read_file(dir.path + "/node" + std::to_string(i) + ".log");
  INFO(logs);
  // The DPSGD node refuses node 0's Hello and stops at once with a usage error.
  CHECK(codes[1] == kExitUsage);
  CHECK(read_file(dir.path + "/node1.log")
            .find("algorithm mismatch: peer runs 'allreduce', ours default (dpsgd)") !=
        std::string::npos);
  // The ALLREDUCE nodes never train. Node 0 exits 2 when it learns the mismatch from node 1's
  // refusal, or 3 after connect_ms when node 1 had already stopped (it may first learn the
  // mismatch from node 2, which refuses it as a non-neighbour); nodes 2 and 3 reach node 0 but
  // never complete the rendezvous.
  CHECK((codes[0] == kExitUsage || codes[0] == kExitNeighbourFailed));
  if (codes[0] == kExitUsage) {
    CHECK(read_file(dir.path + "/node0.log")
              .find("algorithm mismatch: peer runs default (dpsgd), ours 'allreduce'") !=
          std::string::npos);
  }
  for (int i : {2, 3}) CHECK(codes[i] == kExitNeighbourFailed);
  for (int i = 0; i < n; ++i) {
    CHECK(read_file(dir.path + "/node" + std::to_string(i) + ".log").find("finished") ==
          std::string::npos);
  }
}

}  // namespace
}  // namespace gossip::daemon

namespace gossip::daemon {
namespace {

using namespace harness;

// A 4-node ALLREDUCE launch of `iterations` on the ring file `topo` (written once by the caller),
// checkpoints every 20 in dir/ckpt; `extra`: more launch flags. Returns the launch's exit code.
int allreduce_launch(const TempDir& dir, const std::string& topo, const std::string& cfg_text,
                     const std::string& work, const std::string& extra) {
  const std::string cfg = dir.path + "/train-" + std::to_string(std::hash<std::string>{}(extra)) +
                          "-" + std::to_string(std::hash<std::string>{}(cfg_text)) + ".pbtxt";
  std::ofstream(cfg) << cfg_text;
  return run_shell(launch_command(dir.path, topo, cfg, work, dir.path + "/ckpt") + " " + extra +
                   " >> " + dir.path + "/launch.out 2>&1");
}

std::string resumable_config(int iterations) {
  Job job;
  job.iterations = iterations;
  std::string text = job.config_text() + "algorithm: ALLREDUCE\n";
  const std::string every = "checkpoint { every: 50 keep: 3 }";
  REQUIRE(text.find(every) != std::string::npos);
  return text.replace(text.find(every), every.size(), "checkpoint { every: 20 keep: 5 }");
}

// The 4 nodes run in `two`/run restarted from their checkpoint at iteration 40 and ended where the
// straight 60 iterations in `one`/run did, bit for bit; they appended to their metrics, up to 60.
void check_resumed_like_straight(const TempDir& one, const TempDir& two) {
  CHECK(read_file(two.path + "/launch.out").find("restarts from its checkpoint at iteration 40") !=
        std::string::npos);
  for (int i = 0; i < 4; ++i) {
    const std::string name = "/run/final/node_" + std::to_string(i) + ".f32";
    const std::vector<float> straight = read_f32(one.path + name);
    REQUIRE(!straight.empty());
    CHECK_MESSAGE(read_f32(two.path + name) == straight, "node " << i);
  }
  CHECK(metrics_iteration(two.path + "/run/node-1/metrics.jsonl") == 60);
}

TEST_CASE(
    "ALLREDUCE resumes: 40 iterations, then --resume to 60, equals 60 in one go bit for bit") {
  TempDir one, two;
  const std::string topo_one = write_topology(one.path, "RING", 4);
  REQUIRE(allreduce_launch(one, topo_one, resumable_config(60), one.path + "/run", "") == kExitOk);
  const std::string topo_two = write_topology(two.path, "RING", 4);
  REQUIRE(allreduce_launch(two, topo_two, resumable_config(40), two.path + "/run", "") == kExitOk);
  INFO(read_file(two.path + "/launch.out"));
  REQUIRE(allreduce_launch(two, topo_two, resumable_config(60), two.path + "/run", "--resume") ==
          kExitOk);
  check_resumed_like_straight(one, two);
}

TEST_CASE(
    "ALLREDUCE --resume-or-start: starts at 0 on an empty directory, then resumes at 40, and "
    "equals 60 "
    "in one go") {
  TempDir one, two;
  const std::string topo_one = write_topology(one.path, "RING", 4);
  REQUIRE(allreduce_launch(one, topo_one, resumable_config(60), one.path + "/run", "") == kExitOk);
  const std::string topo_two = write_topology(two.path, "RING", 4);
  INFO(read_file(two.path + "/launch.out"));
  REQUIRE(allreduce_launch(two, topo_two, resumable_config(40), two.path + "/run",
                           "--resume-or-start") == kExitOk);
  CHECK(read_file(two.path + "/launch.out").find("restarts from its checkpoint") ==
        std::string::npos);
  REQUIRE(allreduce_launch(two, topo_two, resumable_config(60), two.path + "/run",
                           "--resume-or-start") == kExitOk);
  check_resumed_like_straight(one, two);
}

TEST_CASE(
    "ALLREDUCE: nodes that resume from different iterations refuse to start, naming every "
    "node's iteration (exit 6)") {
  TempDir dir;
  const std::string topo = write_topology(dir.path, "COMPLETE", 2);
  REQUIRE(allreduce_launch(dir, topo, resumable_config(40), dir.path + "/run", "") == kExitOk);
  // Node 1 loses its newest checkpoint: it would resume at 20, node 0 at 40.
  fs::remove(dir.path + "/ckpt/node-1/ckpt-000000000040.bin");
  const std::string cfg = dir.path + "/resume.pbtxt";
  std::ofstream(cfg) << resumable_config(60);
  std::vector<pid_t> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(spawn_shell(
        "cd " + dir.path + " && exec timeout 60 " + bin("daemon/gossipd") + " run " + topo +
        " --node " + std::to_string(i) + " --config " + cfg + " --insecure --set checkpoint.dir=" +
        dir.path + "/ckpt --resume > " + dir.path + "/node" + std::to_string(i) + ".log 2>&1"));
  }
  for (pid_t p : nodes) CHECK(wait_exit(p) == kExitCannotResume);
  const std::string log = read_file(dir.path + "/node0.log");
  INFO(log);
  CHECK(log.find("node 0 at 40, node 1 at 20") != std::string::npos);
  CHECK(log.find("--resume-at N") != std::string::npos);
}

TEST_CASE(
    "ALLREDUCE serves attached trainers: an update session averages their updates and equals "
    "gossipd's own ALLREDUCE bit for bit (SGD), and a plain session averages their parameters") {
  Job job;
  job.iterations = 40;
  std::string text = job.config_text();
  // u_t = g_t exactly (no momentum, no weight decay), so the mean of the updates is the mean of
  // the gradients.
  const std::string momentum =
      "optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 weight_decay: "
      "0.0001 }";
  REQUIRE(text.find(momentum) != std::string::npos);
  text.replace(text.find(momentum), momentum.size(), "optimizer { kind: SGD lr: 0.05 }");
  text += "algorithm: ALLREDUCE\n";
  TempDir dir;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << text;
  const std::string topo = write_topology(dir.path, "RING", 4);
  REQUIRE(run_shell(launch_command(dir.path, topo, cfg, dir.path + "/own", dir.path + "/ck-own") +
                    " > " + dir.path + "/own.out 2>&1") == kExitOk);
  for (const bool plain : {false, true}) {
    CAPTURE(plain);
    const std::string work = dir.path + (plain ? "/plain" : "/update");
    const std::string trainer = bin("tests/daemon/attach_trainer") + " --config " + cfg +
                                " --node $GOSSIP_NODE_ID --nodes $GOSSIP_NUM_NODES --out " + work +
                                "-trainer_$GOSSIP_NODE_ID.f32" + (plain ? " --plain" : "");
    const int rc =
        run_shell(launch_command(dir.path, topo, cfg, work, work + "-ck") + " --attach-dir " +
                  work + "-sock --trainer '" + trainer + "' > " + work + ".out 2>&1");
    INFO(read_file(work + ".out"));
    REQUIRE(rc == kExitOk);
    std::vector<std::vector<float>> finals;
    for (int i = 0; i < 4; ++i) {
      finals.push_back(read_f32(work + "-trainer_" + std::to_string(i) + ".f32"));
      REQUIRE(!finals.back().empty());
    }
    if (!plain) {
      for (int i = 0; i < 4; ++i) {
        CHECK_MESSAGE(
            finals[i] == read_f32(dir.path + "/own/final/node_" + std::to_string(i) + ".f32"),
            "node " << i);
      }
    } else {
      // x_{t+1} = mean(x_t) − γ u_i: the nodes differ by their own last update only.
      double spread = 0;
      for (std::size_t k = 0; k < finals[0].size(); ++k) {
        spread = std::max(spread, static_cast<double>(std::fabs(finals[0][k] - finals[3][k])));
      }
      CHECK(spread > 0);
      CHECK(spread < 0.5);
    }
  }
}

}  // namespace
}  // namespace gossip::daemon
