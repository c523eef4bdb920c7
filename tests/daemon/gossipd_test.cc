// gossipd as real processes over real TCP on loopback (integration):
//  - exactness: `gossipd launch` of n nodes (ring n = 4 over TLS, exponential n = 8, one-peer
//    exponential n = 8) ends with every node's parameters equal to gossip-sim's D-PSGD per-node
//    parameters for the same topology file, data, shards, seeds and hyper-parameters;
//  - fail-stop (fault.policy FAIL_STOP): SIGKILL one node mid-run; every other node exits with
//    code 3 within the deadline plus a few seconds, each with a checkpoint;
//  - resume: a corrupt newest checkpoint is skipped; `launch --resume` restarts every node at a
//    common checkpoint and the run ends exactly where an uninterrupted one does;
//  - SIGTERM to the launcher: forwarded, every node checkpoints and exits with code 4;
//  - launch's progress line: "starting", then "every node is connected" before any metrics line;
//  - carry-on (the default fault policy): SIGKILL one of 8 nodes; the others finish every
//    iteration with exit 0, every logged W(t) is symmetric and doubly stochastic, pure gossip
//    reaches consensus;
//  - bad input: a bad config is exit code 2 with file:line:col.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "config/sgd_config.h"
#include "daemon/checkpoint.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "tests/daemon/gossipd_harness.h"
#include "topology/topology_file.h"

namespace gossip::daemon {
namespace {

using namespace harness;

TEST_CASE("exactness: 4 gossipd processes on a ring (TLS) equal gossip-sim's D-PSGD") {
  exactness("RING", 4, /*tls=*/true);
}

TEST_CASE("exactness: 8 gossipd processes on the exponential graph equal gossip-sim's D-PSGD") {
  exactness("EXPONENTIAL", 8, /*tls=*/false);
}

TEST_CASE("exactness: 8 gossipd processes on the one-peer exponential graph (time-varying W)") {
  exactness("ONE_PEER_EXPONENTIAL", 8, /*tls=*/false);
}

TEST_CASE(
    "kill -9 one node under fault.policy FAIL_STOP: the others fail-stop with code 3 and a "
    "checkpoint, then --resume "
    "skips a corrupt checkpoint and finishes exactly like an uninterrupted run") {
  const int n = 4;
  TempDir dir;
  Job job;
  job.iterations = 1000000;  // long enough to be killed mid-run
  job.deadline_ms = 3000;
  std::string topo = write_topology(dir.path, "RING", n);
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text();
  std::string work = dir.path + "/run", ckpt = dir.path + "/ckpt";
  std::string launch =
      launch_command(dir.path, topo, cfg, work, ckpt) + " --set fault.policy=FAIL_STOP";
  pid_t launcher = spawn_shell(launch + " > " + dir.path + "/launch1.out 2>&1");

  // Wait until every node is past iteration 150, then SIGKILL node 1.
  wait_all_reach(work, n, 150, dir.path + "/launch1.out");
  pid_t victim = std::stoi(read_file(work + "/node-1/pid"));
  REQUIRE(::kill(victim, SIGKILL) == 0);
  auto killed_at = std::chrono::steady_clock::now();
  int launch_rc = wait_exit(launcher);
  double fail_stop_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::string out1 = read_file(dir.path + "/launch1.out");
  INFO(out1);
  MESSAGE("all nodes exited " << fail_stop_s << " s after SIGKILL (deadline 3 s)");
  CHECK(fail_stop_s < 3.0 + 5.0);
  CHECK(launch_rc != kExitOk);
  std::string summary = read_file(work + "/summary.json");
  for (int i : {0, 2, 3}) {
    CHECK_MESSAGE(
        summary.find("{\"node\":" + std::to_string(i) + ",\"exit_code\":3,") != std::string::npos,
        summary);
    // A fail-stop checkpoint exists and is valid.
    auto c = load_latest_checkpoint(Env::system(), ckpt + "/node-" + std::to_string(i),
                                    {static_cast<std::uint32_t>(i), 0, 0, "", ""});
    CHECK_MESSAGE(c.is_ok(), c.status().to_string());
    CHECK(read_file(work + "/node-" + std::to_string(i) + "/log.txt").find("neighbour") !=
          std::string::npos);
  }
  CHECK(summary.find("{\"node\":1,\"exit_code\":137,") != std::string::npos);

  // Corrupt node 2's newest periodic checkpoint (a flipped byte): it must be skipped.
  std::vector<std::string> periodic;
  for (const auto& e : fs::directory_iterator(ckpt + "/node-2")) {
    std::string name = e.path().filename();
    if (name.rfind("ckpt-", 0) == 0 && std::stoull(name.substr(5, 12)) % 50 == 0)
      periodic.push_back(name);
  }
  std::sort(periodic.begin(), periodic.end());
  REQUIRE(periodic.size() >= 2);
  {
    std::string path = ckpt + "/node-2/" + periodic.back();
    std::string bytes = read_file(path);
    bytes[bytes.size() / 2] ^= 0x40;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::uint64_t expected_resume = std::stoull(periodic[periodic.size() - 2].substr(5, 12));

  // Resume with a finite length and compare with an uninterrupted simulation of that length.
  const int total = static_cast<int>(expected_resume) + 100;
  int rc = run_shell(launch + " --resume --iterations " + std::to_string(total) + " > " + dir.path +
                     "/launch2.out 2>&1");
  std::string out2 = read_file(dir.path + "/launch2.out");
  INFO(out2);
  REQUIRE(rc == kExitOk);
  CHECK(out2.find("from its checkpoint at iteration " + std::to_string(expected_resume)) !=
        std::string::npos);
  CHECK(read_file(work + "/node-2/log.txt")
            .find("resumed from checkpoint at iteration " + std::to_string(expected_resume)) !=
        std::string::npos);
  REQUIRE(run_shell(bin("sim/gossip-sim") + " run --algorithm dpsgd --topology " + topo + " " +
                    job.sim_flags(n, total) + " --dump-params " + dir.path + "/sim > " + dir.path +
                    "/sim.out 2>&1") == 0);
  double diff = compare_with_sim(work + "/final", dir.path + "/sim", n);
  MESSAGE("resumed run: max |gossipd - gossip-sim| = " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE(
    "launch --resume without a common checkpoint exits 6 and starts nothing, while "
    "--resume-or-start moves the checkpoints aside (kept) and runs from iteration 0") {
  const int n = 4;
  TempDir dir;
  Job job;  // 60 iterations, a checkpoint at 50 and at the end
  std::string topo = write_topology(dir.path, "RING", n);
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text();
  std::string work = dir.path + "/run", ckpt = dir.path + "/ckpt";
  std::string launch = launch_command(dir.path, topo, cfg, work, ckpt);
  Run first = run_shell_capture(launch);
  INFO(first.out);
  REQUIRE(first.code == kExitOk);
  std::vector<std::vector<float>> fresh;
  for (int i = 0; i < n; ++i)
    fresh.push_back(read_f32(work + "/final/node_" + std::to_string(i) + ".f32"));
  auto checkpoint_files = [&](const std::string& d) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.is_regular_file() && e.path().filename().string().rfind("ckpt-", 0) == 0) {
        names.push_back(e.path().filename());
      }
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> node0_before = checkpoint_files(ckpt + "/node-0");
  REQUIRE(node0_before.size() >= 2);
  for (const std::string& name : checkpoint_files(ckpt + "/node-1"))
    fs::remove(ckpt + "/node-1/" + name);

  Run resume = run_shell_capture(launch + " --resume");
  INFO(resume.out);
  CHECK(resume.code == kExitCannotResume);
  CHECK(resume.out.find("--resume-or-start") != std::string::npos);
  CHECK(checkpoint_files(ckpt + "/node-0") == node0_before);  // nothing started, nothing moved

  Run start = run_shell_capture(launch + " --resume-or-start");
  INFO(start.out);
  REQUIRE(start.code == kExitOk);
  CHECK(start.out.find("starting from iteration 0") != std::string::npos);
  // Node 0's earlier checkpoints are kept, moved into one set-aside-* subdirectory.
  int aside_dirs = 0;
  for (const auto& e : fs::directory_iterator(ckpt + "/node-0")) {
    if (e.is_directory() && e.path().filename().string().rfind("set-aside-", 0) == 0) {
      ++aside_dirs;
      CHECK(checkpoint_files(e.path()) == node0_before);
    }
  }
  CHECK(aside_dirs == 1);
  // A run from iteration 0 with the same config ends on the first run's bits.
  for (int i = 0; i < n; ++i) {
    CHECK(read_f32(work + "/final/node_" + std::to_string(i) + ".f32") == fresh[i]);
  }
}

// The rows of W in force at every iteration from each node's "weights" lines.
std::map<int, std::vector<std::pair<std::uint64_t, std::vector<std::pair<int, double>>>>>
logged_rows(const std::string& work, int n) {
  std::map<int, std::vector<std::pair<std::uint64_t, std::vector<std::pair<int, double>>>>> rows;
  for (int i = 0; i < n; ++i) {
    std::ifstream in(work + "/node-" + std::to_string(i) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto m = parse_flat_json(line);
      if (!m.is_ok() || (*m)["type"].text != "weights") continue;
      auto row = parse_row((*m)["row"].text);
      REQUIRE_MESSAGE(row.is_ok(), line);
      rows[i].emplace_back(static_cast<std::uint64_t>((*m)["iteration"].number), *row);
    }
  }
  return rows;
}

TEST_CASE(
    "kill -9 one of 8 gossipd processes: the others carry on, finish with exit 0, every "
    "logged W is symmetric and doubly stochastic, and pure gossip reaches consensus") {
  const int n = 8, victim_id = 3;
  const std::uint64_t iterations = 1500;
  TempDir dir;
  std::string topo_path = dir.path + "/kring.pbtxt";
  std::ofstream(topo_path)
      << "name: \"kring8\"\ngenerator { kind: K_RING nodes: 8 k: 2 host: \"127.0.0.1\" "
         "base_port: "
      << free_base_port(n) << " }\n";
  // Pure gossip: lr 1e-30 (sgd refuses 0), so x_{t+1} = W(t) x_t in float32.
  std::string cfg_text =
      "seed: 3\nmodel { kind: LOGISTIC }\n"
      "data { dataset: SYNTHETIC_LOGISTIC num_examples: 512 dim: 10 test_examples: 64 }\n"
      "batch_size: 4\noptimizer { kind: SGD lr: 1e-30 }\niterations: " +
      std::to_string(iterations) +
      "\nmetrics_every: 50\ncheckpoint { every: 0 }\n"
      "timeouts { connect_ms: 20000 deadline_ms: 3000 heartbeat_ms: 100 }\n";
  std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << cfg_text;
  std::string work = dir.path + "/run", ckpt = dir.path + "/ckpt";
  // Distinct random x_0 per node through iteration-0 checkpoints (then `launch --resume`).
  auto config = config::parse_train_config(cfg_text, "train.pbtxt");
  REQUIRE(config.is_ok());
  config::fill_defaults(*config);
  auto topo = topology::load_topology(topo_path);
  REQUIRE_MESSAGE(topo.is_ok(), topo.status().to_string());
  auto problem = sgd::make_problem(config::to_problem_config(*config, n));
  REQUIRE(problem.is_ok());
  std::vector<std::vector<float>> x0;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  for (int i = 0; i < n; ++i) {
    Checkpoint c;
    c.node = static_cast<std::uint32_t>(i);
    c.topology_fingerprint = topo->fingerprint();
    c.config_fingerprint = config_fingerprint(*config);
    sgd::SamplerState ss = problem->sampler(i, 4).state();
    c.sampler.rng_state = ss.epoch_rng_state;
    c.sampler.epoch = ss.epoch;
    c.sampler.position = ss.position;
    c.sampler.batches = ss.batches;
    c.params.resize(problem->spec.num_params());
    for (float& v : c.params) v = normal(rng);
    x0.push_back(c.params);
    REQUIRE(write_checkpoint(Env::system(), ckpt + "/node-" + std::to_string(i), c, 2).is_ok());
  }
  pid_t launcher = spawn_shell("cd " + dir.path + " && exec timeout 60 " + bin("daemon/gossipd") +
                               " launch " + topo_path + " --config " + cfg + " --workdir " + work +
                               " --insecure --resume --set checkpoint.dir=" + ckpt + " > " +
                               dir.path + "/launch.out 2>&1");
  auto t0 = std::chrono::steady_clock::now();
  while (metrics_iteration(work + "/node-0/metrics.jsonl") < 200) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30),
                    read_file(dir.path + "/launch.out"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_t victim = std::stoi(read_file(work + "/node-" + std::to_string(victim_id) + "/pid"));
  REQUIRE(::kill(victim, SIGKILL) == 0);
  auto killed_at = std::chrono::steady_clock::now();
  wait_exit(launcher);
  MESSAGE("survivors finished "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count()
          << " s after the SIGKILL");
  std::string out = read_file(dir.path + "/launch.out");
  INFO(out);
  std::string summary = read_file(work + "/summary.json");
  std::vector<int> alive;
  for (int i = 0; i < n; ++i) {
    if (i == victim_id) continue;
    alive.push_back(i);
    CHECK_MESSAGE(
        summary.find("{\"node\":" + std::to_string(i) + ",\"exit_code\":0,") != std::string::npos,
        summary);
  }
  // Every iteration's W, over the survivors and the victim while anyone still mixes it, is
  // symmetric and doubly stochastic; the victim's neighbours dropped it.
  auto rows = logged_rows(work, n);
  std::uint64_t drop_at = iterations;
  for (int i : alive) {
    REQUIRE(!rows[i].empty());
    CHECK(rows[i].front().first == 0);
    if (topo->graph().has_arc(victim_id, i)) {
      bool dropped = false;
      for (const auto& [t, row] : rows[i]) {
        bool has = std::any_of(row.begin(), row.end(),
                               [&](const auto& e) { return e.first == victim_id; });
        if (!has && !dropped) {
          dropped = true;
          drop_at = std::min(drop_at, t);
        }
        CHECK_MESSAGE(!(dropped && has), "node " << i << " mixes the victim again at " << t);
      }
      CHECK(dropped);
    }
  }
  MESSAGE("the victim's edges dropped from iteration " << drop_at);
  for (std::uint64_t t = 0; t < iterations; ++t) {
    std::map<int, const std::vector<std::pair<int, double>>*> w;
    bool victim_mixed = false;
    for (int i : alive) {
      for (const auto& [it, row] : rows[i]) {
        if (it <= t) w[i] = &row;
      }
      for (const auto& e : *w[i]) victim_mixed |= e.first == victim_id;
    }
    if (victim_mixed) {
      for (const auto& [it, row] : rows[victim_id]) {
        if (it <= t) w[victim_id] = &row;
      }
      REQUIRE(w.count(victim_id));
    }
    std::map<std::pair<int, int>, double> entries;
    for (const auto& [i, row] : w) {
      double sum = 0;
      for (const auto& [j, v] : *row) {
        REQUIRE_MESSAGE(w.count(j), "iteration " << t << ": node " << i << " mixes node " << j);
        entries[{i, j}] = v;
        sum += v;
      }
      REQUIRE_MESSAGE(std::fabs(sum - 1) < 1e-12, "iteration " << t << " row " << i);
    }
    for (const auto& [ij, v] : entries) {
      // From the iteration the victim died in, its row in force is only its last *logged* one:
      // it died before logging the row it would have used (a neighbour that had its data and
      // verdict mixes it once more, pairwise agreed, while another has dropped it already). The
      // survivors' rows among themselves stay exact; "never mixed again" is checked above.
      if (t >= drop_at && (ij.first == victim_id || ij.second == victim_id)) continue;
      auto m = entries.find({ij.second, ij.first});
      REQUIRE_MESSAGE((m != entries.end() && m->second == v),
                      "iteration " << t << ": W not symmetric at " << ij.first << "," << ij.second);
    }
  }
  // Consensus: every survivor ends at the same point, inside the hull of the starting points.
  std::vector<std::vector<float>> fin;
  for (int i : alive) fin.push_back(read_f32(work + "/final/node_" + std::to_string(i) + ".f32"));
  double spread0 = 0, spread = 0;
  for (std::size_t k = 0; k < x0[0].size(); ++k) {
    float lo = x0[0][k], hi = x0[0][k], flo = fin[0][k], fhi = fin[0][k];
    for (int i = 0; i < n; ++i) lo = std::min(lo, x0[i][k]), hi = std::max(hi, x0[i][k]);
    for (const auto& f : fin) flo = std::min(flo, f[k]), fhi = std::max(fhi, f[k]);
    spread0 = std::max(spread0, static_cast<double>(hi - lo));
    spread = std::max(spread, static_cast<double>(fhi - flo));
    CHECK(flo >= lo - 1e-5f);
    CHECK(fhi <= hi + 1e-5f);
  }
  MESSAGE("max spread between nodes: " << spread0 << " at the start, " << spread << " at the end");
  CHECK(spread0 > 1.0);
  CHECK(spread < 1e-4);
}

// Starts `gossipd launch` of a ring of n nodes on Job with 10^6 iterations in dir (workdir
// dir/run, checkpoints dir/ckpt, output dir/launch.out), `extra` appended to its flags; returns
// the launcher's pid.
pid_t spawn_long_launch(const std::string& dir, int n, const std::string& extra) {
  Job job;
  job.iterations = 1000000;
  std::string topo = write_topology(dir, "RING", n);
  std::string cfg = dir + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text();
  return spawn_shell("cd " + dir + " && exec " + bin("daemon/gossipd") + " launch " + topo +
                     " --config " + cfg + " --workdir " + dir +
                     "/run --insecure --set checkpoint.dir=" + dir + "/ckpt " + extra + " > " +
                     dir + "/launch.out 2>&1");
}

TEST_CASE("SIGTERM to the launcher is forwarded: every node checkpoints and exits with code 4") {
  const int n = 4;
  TempDir dir;
  std::string work = dir.path + "/run", ckpt = dir.path + "/ckpt";
  pid_t launcher = spawn_long_launch(dir.path, n, "");
  auto t0 = std::chrono::steady_clock::now();
  while (metrics_iteration(work + "/node-3/metrics.jsonl") < 30) {
    REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(::kill(launcher, SIGTERM) == 0);
  int rc = wait_exit(launcher);
  INFO(read_file(dir.path + "/launch.out"));
  CHECK(rc == kExitStopped);
  std::string summary = read_file(work + "/summary.json");
  for (int i = 0; i < n; ++i) {
    CHECK_MESSAGE(
        summary.find("{\"node\":" + std::to_string(i) + ",\"exit_code\":4,") != std::string::npos,
        summary);
    auto c = load_latest_checkpoint(Env::system(), ckpt + "/node-" + std::to_string(i),
                                    {static_cast<std::uint32_t>(i), 0, 0, "", ""});
    CHECK(c.is_ok());
  }
}

TEST_CASE(
    "launch's progress line says when every node is connected, before the first metrics line") {
  // Long iterations (rounds of many local steps) write their first metrics line late: until then
  // the line must not keep saying "starting".
  TempDir dir;
  const std::string out = dir.path + "/launch.out";
  pid_t launcher =
      spawn_long_launch(dir.path, 4, "--progress-interval 0.1 --set metrics_every=1000000");
  const std::string training =
      "training: every node is connected; the first progress comes after metrics_every=1000000 "
      "iterations";
  auto t0 = std::chrono::steady_clock::now();
  while (read_file(out).find(training) == std::string::npos) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60),
                    read_file(out));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(::kill(launcher, SIGTERM) == 0);
  CHECK(wait_exit(launcher) == kExitStopped);
  const std::string text = read_file(out);
  INFO(text);
  // The first line (at once, before any node is up) says it is starting; no iteration line came
  // before (the nodes flush theirs when stopped).
  CHECK(text.find("starting: nodes are loading data") < text.find(training));
  const std::size_t first_iteration = text.find("] iteration ");
  CHECK((first_iteration == std::string::npos || first_iteration > text.find(training)));
}

TEST_CASE(
    "gossipd evaluate: one node's final parameters score what that node measured, all of them "
    "what the launcher printed, and a file of the wrong size is exit 2 naming it") {
  const int n = 4;
  TempDir dir;
  const std::string topo = write_topology(dir.path, "RING", n);
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << Job{}.config_text();
  const std::string work = dir.path + "/run";
  REQUIRE(run_shell(launch_command(dir.path, topo, cfg, work, dir.path + "/ckpt") + " > " +
                    dir.path + "/launch.out 2>&1") == kExitOk);
  const std::string evaluate = bin("daemon/gossipd") + " evaluate --config " + cfg + " ";
  // Node 0's own final evaluation (its metrics' last eval line) against its final parameters.
  std::string last_eval;
  std::istringstream metrics(read_file(work + "/node-0/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"type\":\"eval\"") != std::string::npos) last_eval = line;
  }
  REQUIRE(!last_eval.empty());
  const std::size_t at = last_eval.find("\"test_accuracy\":") + 16;
  const double node0 = std::strtod(last_eval.c_str() + at, nullptr);
  Run one = run_shell_capture(evaluate + work + "/final/node_0.f32");
  INFO(one.out);
  REQUIRE(one.code == 0);
  char expected[64];
  std::snprintf(expected, sizeof expected, "test accuracy %.4f", node0);
  CHECK(one.out.find(expected) != std::string::npos);
  // Every node's: the launcher's averaged-model line.
  std::string files;
  for (int i = 0; i < n; ++i) files += work + "/final/node_" + std::to_string(i) + ".f32 ";
  Run all = run_shell_capture(evaluate + files);
  INFO(all.out);
  REQUIRE(all.code == 0);
  const std::string launched = read_file(dir.path + "/launch.out");
  const std::size_t acc = all.out.find("test accuracy ");
  REQUIRE(acc != std::string::npos);
  CHECK(launched.find(all.out.substr(acc, 40)) != std::string::npos);
  // Bad input.
  std::ofstream(dir.path + "/short.f32") << "abcd";
  Run bad = run_shell_capture(evaluate + dir.path + "/short.f32");
  INFO(bad.out);
  CHECK(bad.code == kExitUsage);
  CHECK(bad.out.find("short.f32: 4 bytes") != std::string::npos);
  bad = run_shell_capture(evaluate + dir.path + "/missing.f32");
  CHECK(bad.code == kExitUsage);
  CHECK(bad.out.find("missing.f32") != std::string::npos);
}

TEST_CASE("bad input: exit code 2 and a message naming file, line and field") {
  TempDir dir;
  std::string topo = write_topology(dir.path, "RING", 4);
  std::string cfg = dir.path + "/bad.pbtxt";
  std::ofstream(cfg) << "model { kind: MLP hidden: 8 }\ndata { dataset: FASHION_MNIST }\n"
                        "batch_size: 0\niterations: 5\noptimizer { lr: 0.1 }\n";
  std::string out = dir.path + "/out.txt";
  CHECK(run_shell(bin("daemon/gossipd") + " run " + topo + " --node 0 --config " + cfg +
                  " --insecure 2> " + out) == kExitUsage);
  CHECK(read_file(out).find("bad.pbtxt:3:1: batch_size: must be > 0") != std::string::npos);
  CHECK(run_shell(bin("daemon/gossipd") + " run " + topo + " --node 9 --config " + cfg +
                  " --insecure --set batch_size=4 2> " + out) == kExitUsage);
  CHECK(read_file(out).find("--node 9") != std::string::npos);
  CHECK(run_shell(bin("daemon/gossipd") + " run " + topo + " --node 0 --config " + cfg + " 2> " +
                  out) == kExitUsage);  // neither --certs nor --insecure
  CHECK(run_shell(bin("daemon/gossipd") + " launch " + topo + " --config " + cfg +
                  " --set optimizer.lr=nan --set batch_size=4 2> " + out) == kExitUsage);
  CHECK(read_file(out).find("optimizer.lr") != std::string::npos);
  // A TCP congestion control this process may not use: refused before any link, naming the field
  // and the ones it may use.
  CHECK(run_shell(bin("daemon/gossipd") + " run " + topo + " --node 0 --config " + cfg +
                  " --insecure --set batch_size=4 --set link.congestion_control=no_such_cc 2> " +
                  out) == kExitUsage);
  CHECK(read_file(out).find("link.congestion_control") != std::string::npos);
  CHECK(read_file(out).find("may choose: ") != std::string::npos);
  CHECK(run_shell(bin("daemon/gossipd") + " --help > " + out) == 0);
  CHECK(read_file(out).find("Exit codes") != std::string::npos);
}

}  // namespace
}  // namespace gossip::daemon
