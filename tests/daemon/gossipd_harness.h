// Helpers of the gossipd process tests (gossipd_test.cc, gossipd_allreduce_test.cc,
// gossipd_gpu_test.cc): built executables, free loopback ports, topology and training files, a
// launch of n gossipd processes (retried on other ports when one was taken) compared with
// gossip-sim's D-PSGD on the same files, and progress read from the nodes' metrics files.
#pragma once

#include <doctest/doctest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "tests/support/eventually.h"
#include "tests/support/files.h"
#include "tests/support/ports.h"
#include "tests/support/process.h"

namespace gossip::daemon::harness {

using gossip::testing::eventually;
using gossip::testing::read_f32;
using gossip::testing::read_file;
using gossip::testing::run_shell;
using gossip::testing::run_shell_capture;
using gossip::testing::spawn_shell;
using gossip::testing::TempDir;
using gossip::testing::wait_exit;
// A shell command's exit code and its stdout and stderr together (run_shell_capture).
using Run = gossip::testing::ProcessResult;
namespace fs = std::filesystem;

// Built executables: under GOSSIP_BINARY_DIR, or else relative to this test binary
// (<build>/tests/daemon/daemon_integration_tests).
inline std::string bin(const std::string& rel) {
  if (const char* dir = std::getenv("GOSSIP_BINARY_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/" + rel;
  }
  return (fs::canonical("/proc/self/exe").parent_path().parent_path().parent_path() / rel).string();
}

// A base port with n free consecutive ports (spread by pid so parallel tests rarely collide).
inline int free_base_port(int n) {
  static int next = 20000 + (::getpid() * 37) % 30000;
  const int base = free_loopback_ports(n, next);
  REQUIRE_MESSAGE(base > 0, "no free ports");
  next = base + n + 3;
  return base;
}

inline std::string write_topology(const std::string& dir, const std::string& kind, int n) {
  std::string path = dir + "/" + kind + std::to_string(n) + ".pbtxt";
  std::ofstream(path) << "name: \"" << kind << n << "\"\ngenerator { kind: " << kind
                      << " nodes: " << n << " host: \"127.0.0.1\" base_port: " << free_base_port(n)
                      << " }\n";
  return path;
}

// The training config of these tests and the matching gossip-sim flags.
struct Job {
  int iterations = 60;
  int deadline_ms = 20000;  // generous: a loaded CI machine must not turn into a fail-stop
  std::string config_text() const {
    return "seed: 21\n"
           "model { kind: MLP hidden: 16 }\n"
           "data { dataset: SYNTHETIC_LOGISTIC num_examples: 1024 dim: 10 test_examples: 256 "
           "noise: 3 }\n"
           "batch_size: 8\n"
           "optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 weight_decay: 0.0001 }\n"
           "iterations: " +
           std::to_string(iterations) +
           "\n"
           "eval_every: 20\nmetrics_every: 10\n"
           "checkpoint { every: 50 keep: 3 }\n"
           "timeouts { connect_ms: 20000 deadline_ms: " +
           std::to_string(deadline_ms) + " heartbeat_ms: 300 }\n";
  }
  std::string sim_flags(int n, int iterations_override = 0) const {
    return "--problem logistic --model mlp --data logistic --hidden 16 --train-examples 1024 "
           "--dim 10 --test-examples 256 --noise 3 --shard iid --nodes " +
           std::to_string(n) +
           " --lr 0.05 --momentum 0.9 --weight-decay 0.0001 --lr-schedule constant --batch 8 "
           "--iterations " +
           std::to_string(iterations_override ? iterations_override : iterations) +
           " --eval-every 1000000 --seed 21 --quiet";
  }
};

// `gossipd launch` of the job in dir (insecure, checkpoints in ckpt), as a shell command.
inline std::string launch_command(const std::string& dir, const std::string& topo,
                                  const std::string& cfg, const std::string& work,
                                  const std::string& ckpt) {
  return "cd " + dir + " && exec timeout 120 " + bin("daemon/gossipd") + " launch " + topo +
         " --config " + cfg + " --workdir " + work + " --insecure --set checkpoint.dir=" + ckpt;
}

// Runs the launch `command(topo)` of n nodes (workdir `work`, checkpoints in dir/ckpt) on a fresh
// `kind` topology file in dir, whose path it leaves in *topo; returns the launch's exit code.
// Ports are probed free, but another test may take one before the nodes bind it: then (and only
// then, a node's log says "in use") the launch is repeated on other ports, at most three times.
inline int launch_retrying_ports(const std::string& dir, const std::string& kind, int n,
                                 const std::string& work, std::string* topo,
                                 const std::function<std::string(const std::string&)>& command) {
  int rc = -1;
  for (int attempt = 0; attempt < 3; ++attempt) {
    *topo = write_topology(dir, kind, n);
    rc = run_shell(command(*topo));
    bool port_taken = false;
    for (int i = 0; i < n; ++i) {
      port_taken |= read_file(work + "/node-" + std::to_string(i) + "/log.txt").find("in use") !=
                    std::string::npos;
    }
    if (rc == kExitOk || !port_taken) break;
    fs::remove_all(work);
    fs::remove_all(dir + "/ckpt");
  }
  return rc;
}

// The newest iteration in a node's metrics file (0 before the first iteration line).
inline double metrics_iteration(const std::string& path) {
  std::ifstream in(path);
  double it = 0;
  for (std::string line; std::getline(in, line);) {
    auto m = parse_flat_json(line);
    if (m.is_ok() && (*m)["type"].text == "iter") it = (*m)["iteration"].number;
  }
  return it;
}

// Waits until each of the n nodes under `work` has reached `iteration` in its metrics file; fails
// the test (with the launcher's output, `launch_out`) after 60 s.
inline void wait_all_reach(const std::string& work, int n, double iteration,
                           const std::string& launch_out) {
  const bool reached = eventually(
      [&] {
        for (int i = 0; i < n; ++i) {
          const std::string node = work + "/node-" + std::to_string(i);
          if (metrics_iteration(node + "/metrics.jsonl") < iteration) return false;
        }
        return true;
      },
      60000);
  REQUIRE_MESSAGE(reached, read_file(launch_out));
}

// Every node's final parameters (final_dir/node_<i>.f32) equal the simulator's (sim_dir), bit for
// bit, and are not empty.
inline void check_equal_to_sim(const std::string& final_dir, const std::string& sim_dir, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    const std::vector<float> mine = read_f32(final_dir + name);
    REQUIRE(!mine.empty());
    CHECK_MESSAGE(mine == read_f32(sim_dir + name), "node " << i);
  }
}

// Max |daemon − sim| over every node and coordinate.
inline double compare_with_sim(const std::string& final_dir, const std::string& sim_dir, int n) {
  double max_diff = 0;
  for (int i = 0; i < n; ++i) {
    std::string name = "/node_" + std::to_string(i) + ".f32";
    std::vector<float> a = read_f32(final_dir + name), b = read_f32(sim_dir + name);
    REQUIRE(a.size() == b.size());
    REQUIRE(!a.empty());
    for (std::size_t k = 0; k < a.size(); ++k) {
      REQUIRE(std::isfinite(a[k]));
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[k] - b[k])));
    }
  }
  return max_diff;
}

// `extra`: more gossipd flags (e.g. "--set device=CUDA"); `tol`: the allowed max |gossipd − sim|.
inline void exactness(const std::string& kind, int n, bool tls, const std::string& extra = "",
                      double tol = 1e-5) {
  TempDir dir;
  Job job;
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text();
  std::string work = dir.path + "/run";
  std::string topo;
  const int rc = launch_retrying_ports(dir.path, kind, n, work, &topo, [&](const std::string& t) {
    return "cd " + dir.path + " && timeout 120 " + bin("daemon/gossipd") + " launch " + t +
           " --config " + cfg + " --workdir " + work + " --set checkpoint.dir=" + dir.path +
           "/ckpt --set final_params_path=" + dir.path + "/fp/x-{node}.bin" +
           (tls ? "" : " --insecure") + " " + extra + " > " + dir.path + "/launch.out 2>&1";
  });
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(rc == kExitOk);
  if (tls) CHECK(read_file(dir.path + "/launch.out").find("TLS 1.3") != std::string::npos);
  REQUIRE(run_shell(bin("sim/gossip-sim") + " run --algorithm dpsgd --topology " + topo + " " +
                    job.sim_flags(n) + " --dump-params " + dir.path + "/sim > " + dir.path +
                    "/sim.out 2>&1") == 0);
  double diff = compare_with_sim(work + "/final", dir.path + "/sim", n);
  MESSAGE(kind << " n=" << n << ": max |gossipd - gossip-sim| = " << diff);
  CHECK(diff <= tol);
  // gossip-sim --config on gossipd's own config file runs the simulation the flags describe, to
  // the bit: the user simulates exactly what they run (config/sgd_config.h, one mapping).
  REQUIRE(run_shell(bin("sim/gossip-sim") + " run --algorithm dpsgd --topology " + topo +
                    " --nodes " + std::to_string(n) + " --config " + cfg +
                    " --quiet --dump-params " + dir.path + "/sim_config > " + dir.path +
                    "/sim_config.out 2>&1") == 0);
  for (int i = 0; i < n; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    CHECK(read_f32(dir.path + "/sim_config" + name) == read_f32(dir.path + "/sim" + name));
  }
  // The parameters moved away from x_0 and differ between nodes (so equality is not vacuous).
  CHECK(read_f32(work + "/final/node_0.f32") != read_f32(work + "/final/node_1.f32"));
  // final_params_path ({node} -> id, directory created) holds the same final parameters.
  for (int i = 0; i < n; ++i) {
    CHECK(read_f32(dir.path + "/fp/x-" + std::to_string(i) + ".bin") ==
          read_f32(work + "/final/node_" + std::to_string(i) + ".f32"));
  }
}

// A job of `n` nodes on topology `kind` with `config_text` (40 iterations, a checkpoint every 6),
// launched straight through; then its checkpoints after iteration 18 are removed and
// `launch --resume` continues from 18 (mid-round for rounds of 4): every node must end bit for
// bit where the straight run ended.
inline void check_resume_from_18(const std::string& config_text, const std::string& kind, int n) {
  TempDir dir;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << config_text;
  const std::string work = dir.path + "/run";
  std::string topo;
  int rc = launch_retrying_ports(dir.path, kind, n, work, &topo, [&](const std::string& t) {
    return launch_command(dir.path, t, cfg, work, dir.path + "/ckpt") + " > " + dir.path +
           "/launch.out 2>&1";
  });
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(rc == kExitOk);
  std::vector<std::vector<float>> straight;
  for (int i = 0; i < n; ++i) {
    straight.push_back(read_f32(work + "/final/node_" + std::to_string(i) + ".f32"));
    for (int it : {24, 30, 36, 40}) {
      char name[64];
      std::snprintf(name, sizeof name, "/ckpt/node-%d/ckpt-%012d.bin", i, it);
      REQUIRE(fs::remove(dir.path + name));
    }
  }
  rc = run_shell(launch_command(dir.path, topo, cfg, work, dir.path + "/ckpt") + " --resume > " +
                 dir.path + "/resume.out 2>&1");
  INFO(read_file(dir.path + "/resume.out"));
  REQUIRE(rc == kExitOk);
  CHECK(read_file(dir.path + "/resume.out").find("checkpoint at iteration 18") !=
        std::string::npos);
  for (int i = 0; i < n; ++i) {
    CHECK_MESSAGE(read_f32(work + "/final/node_" + std::to_string(i) + ".f32") == straight[i],
                  "node " << i);
  }
}

// Two `gossipd run` nodes on the complete graph of 2, node 0 with `config_a`, node 1 with
// `config_b`: both must refuse each other at the handshake (exit 2); returns their logs.
inline std::string handshake_refusal_log(const std::string& config_a, const std::string& config_b) {
  TempDir dir;
  std::ofstream(dir.path + "/a.pbtxt") << config_a;
  std::ofstream(dir.path + "/b.pbtxt") << config_b;
  const std::string topo = write_topology(dir.path, "COMPLETE", 2);
  const std::string common = "cd " + dir.path + " && exec timeout 30 " + bin("daemon/gossipd") +
                             " run " + topo + " --insecure --set timeouts.connect_ms=3000 ";
  pid_t p0 =
      spawn_shell(common + "--node 0 --config a.pbtxt --set checkpoint.dir=ck0 > n0.log 2>&1");
  pid_t p1 =
      spawn_shell(common + "--node 1 --config b.pbtxt --set checkpoint.dir=ck1 > n1.log 2>&1");
  const int c0 = wait_exit(p0), c1 = wait_exit(p1);
  const std::string log = read_file(dir.path + "/n0.log") + read_file(dir.path + "/n1.log");
  INFO(log);
  CHECK(c0 == kExitUsage);
  CHECK(c1 == kExitUsage);
  return log;
}

}  // namespace gossip::daemon::harness
