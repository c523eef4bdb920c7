// PUSH_SUM (Stochastic Gradient Push, algorithms/push_sum.h) in gossipd, as real processes on
// loopback:
//  - exactness: `gossipd launch` of n nodes equals `gossip-sim run --config` on the same files bit
//    for bit, node by node — on the star (not regular: the push-sum weights leave 1, so the
//    weight on the wire and the de-biasing are exercised, and the run ends away from D-PSGD's), the
//    directed exponential graph and the one-peer exponential graph (time-varying; both regular, so
//    every weight stays 1 and the run equals D-PSGD's to the bit, also checked);
//  - resume: a run resumed from a mid-run checkpoint (z and the weight w) ends bit for bit where
//    the run without the stop ends;
//  - staleness (asynchronous push-sum): 8 real nodes conserve mass and gossip-sim replays their
//    order logs bit for bit; a node slowed down (SIGSTOP 99% of the time) ends once the
//    nodes that send to it have ended, and the shorter logs replay bit for bit too;
//  - carry-on (asynchronous push-sum): one of 8 nodes on the one-peer exponential graph is
//    SIGKILLed and restarted from its checkpoint; the others carry on without it, every link is
//    reconciled when it is back, every node ends with exit 0 and the weights sum to n;
//  - bad input: PUSH_SUM with local steps, compression, standby nodes or fault.policy CARRY_ON in
//    lock step, and a topology
//    whose EXPLICIT weights are not column-stochastic, are exit code 2 naming the field; nodes of
//    one job with PUSH_SUM and DPSGD refuse each other at the handshake naming the algorithms.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/daemon/gossipd_harness.h"

namespace gossip::daemon::harness {
namespace {

std::string push_sum_config(const std::string& extra = "") {
  return Job{}.config_text() + "algorithm: PUSH_SUM\n" + extra;
}

// gossipd launch of `kind` with n nodes and gossip-sim --config on the same files: equal bit for
// bit, node by node. `regular`: every node has as many in- as out-neighbours and W(t) is uniform,
// so P(t) = W(t), every weight stays 1 and push-sum is D-PSGD to the bit (checked); otherwise the
// weights move and it ends elsewhere (checked).
void exact(const std::string& kind, int n, bool regular) {
  TempDir dir;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << push_sum_config();
  const std::string work = dir.path + "/run";
  std::string topo;
  const int rc = launch_retrying_ports(dir.path, kind, n, work, &topo, [&](const std::string& t) {
    return launch_command(dir.path, t, cfg, work, dir.path + "/ckpt") + " > " + dir.path +
           "/launch.out 2>&1";
  });
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(rc == kExitOk);
  const Run sim = run_shell_capture(bin("sim/gossip-sim") + " run --topology " + topo +
                                    " --nodes " + std::to_string(n) + " --config " + cfg +
                                    " --quiet --dump-params " + dir.path + "/sim");
  INFO(sim.out);
  REQUIRE(sim.code == 0);
  CHECK(sim.out.find("PUSH_SUM") != std::string::npos);
  check_equal_to_sim(work + "/final", dir.path + "/sim", n);
  // Not vacuous: the models moved and differ between nodes.
  CHECK(read_f32(work + "/final/node_0.f32") != read_f32(work + "/final/node_1.f32"));
  // Against D-PSGD on the same job.
  const std::string dcfg = dir.path + "/dpsgd.pbtxt";
  std::ofstream(dcfg) << Job{}.config_text();
  const Run dpsgd = run_shell_capture(bin("sim/gossip-sim") + " run --topology " + topo +
                                      " --nodes " + std::to_string(n) + " --config " + dcfg +
                                      " --quiet --dump-params " + dir.path + "/dsim");
  REQUIRE(dpsgd.code == 0);
  for (int i = 0; i < n; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    CHECK_MESSAGE(
        (read_f32(dir.path + "/dsim" + name) == read_f32(work + "/final" + name)) == regular,
        "node " << i);
  }
}

TEST_CASE("exactness: PUSH_SUM on the star of 5 (weights leave 1) equals gossip-sim") {
  exact("STAR", 5, /*regular=*/false);
}

TEST_CASE("exactness: PUSH_SUM on the directed exponential graph of 4 equals gossip-sim") {
  exact("EXPONENTIAL", 4, /*regular=*/true);
}

TEST_CASE("exactness: PUSH_SUM on the one-peer exponential graph of 4 (time-varying)") {
  exact("ONE_PEER_EXPONENTIAL", 4, /*regular=*/true);
}

TEST_CASE(
    "resume: PUSH_SUM on the star resumed from a checkpoint ends bit for bit where it would") {
  // The star's weights are far from 1 by iteration 18; a checkpoint without w (or a resume that
  // restarted it at 1) would end elsewhere.
  std::string text = push_sum_config();
  const std::string every = "checkpoint { every: 50 keep: 3 }";
  REQUIRE(text.find(every) != std::string::npos);
  text.replace(text.find(every), every.size(), "checkpoint { every: 6 keep: 10 }");
  text.replace(text.find("iterations: 60"), 14, "iterations: 40");
  check_resume_from_18(text, "STAR", 5);
}

// `gossipd run` of node 0 on `topo` with `config`: its exit code and output.
Run run_node0(const TempDir& dir, const std::string& topo, const std::string& config) {
  std::ofstream(dir.path + "/bad.pbtxt") << config;
  return run_shell_capture("cd " + dir.path + " && timeout 30 " + bin("daemon/gossipd") + " run " +
                           topo + " --node 0 --insecure --config bad.pbtxt " +
                           "--set timeouts.connect_ms=2000 --set checkpoint.dir=ck");
}

TEST_CASE("bad input: PUSH_SUM with settings it does not support is exit 2 naming the field") {
  TempDir dir;
  const std::string topo = write_topology(dir.path, "RING", 3);
  const std::pair<std::string, std::string> cases[] = {
      {"local_steps: 4\n", "local_steps"},
      {"compression { kind: INT8 }\n", "compression.kind"},
      {"fault { policy: CARRY_ON }\n", "fault.policy"},  // lock step (staleness 0)
      {"staleness: 3\nfault { policy: CARRY_ON standby_nodes: 2 }\n", "fault.standby_nodes"},
      {"local_steps: 2 outer { kind: NESTEROV }\n", "outer.kind"},
  };
  for (const auto& [extra, field] : cases) {
    const Run r = run_node0(dir, topo, push_sum_config(extra));
    INFO(extra << r.out);
    CHECK(r.code == kExitUsage);
    CHECK(r.out.find(field + ":") != std::string::npos);
    CHECK(r.out.find("PUSH_SUM") != std::string::npos);
  }
}

TEST_CASE(
    "bad input: EXPLICIT weights that are not column-stochastic are exit 2 naming the column") {
  TempDir dir;
  const int base = free_base_port(3);
  const std::string topo = dir.path + "/explicit.pbtxt";
  std::ofstream out(topo);
  out << "name: \"explicit3\"\ndirected: true\nweights: EXPLICIT\n";
  for (int i = 0; i < 3; ++i) {
    out << "node { id: " << i << " address: \"127.0.0.1:" << base + i << "\" }\n";
  }
  // Rows sum to 1 (W_ii = 1 − row sum), columns do not: node 0 gives 1/2 + 1/4 away.
  out << "edge { from: 0 to: 1 weight: 0.5 }\nedge { from: 0 to: 2 weight: 0.25 }\n"
         "edge { from: 1 to: 2 weight: 0.25 }\nedge { from: 2 to: 0 weight: 0.5 }\n";
  out.close();
  // The topology loader checks every W doubly stochastic, so P = W is column-stochastic: the
  // file is refused before any link, naming it and the column.
  const Run r = run_node0(dir, topo, push_sum_config());
  INFO(r.out);
  CHECK(r.code == kExitUsage);
  CHECK(r.out.find("explicit.pbtxt") != std::string::npos);
  CHECK(r.out.find("column 0 of W sums to 1.25") != std::string::npos);
}

TEST_CASE("a job mixing PUSH_SUM and DPSGD: refused at the handshake naming the algorithms") {
  const std::string log = handshake_refusal_log(
      push_sum_config(), Job{}.config_text() + "fault { policy: FAIL_STOP }\n");
  INFO(log);
  CHECK(log.find("algorithm mismatch") != std::string::npos);
  CHECK(log.find("'push_sum staleness=0'") != std::string::npos);
}

// ---- Bounded staleness (staleness: τ ≥ 1, algorithms/async_push_sum.h)

// The final push-sum weight in node i's order log, and the log's lines.
struct OrderLog {
  std::vector<std::string> lines;
  double weight = 0;
};
OrderLog read_order_log(const std::string& path) {
  OrderLog log;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("weight\t", 0) == 0) log.weight = std::strtod(line.c_str() + 7, nullptr);
    log.lines.push_back(line);
  }
  return log;
}

// The ledgers a carry-on node logs at its end ("push-sum ledgers: sent o:σ ... taken j:ρ ..."):
// (from, to) -> weight, as the sender counts it (sent) and as the receiver does (taken).
void read_ledgers(int node, const std::string& log, std::map<std::pair<int, int>, double>& sent,
                  std::map<std::pair<int, int>, double>& taken) {
  const std::size_t at = log.rfind("push-sum ledgers: sent");
  REQUIRE_MESSAGE(at != std::string::npos, "node " << node << " logged no ledgers");
  std::istringstream words(log.substr(at + 22, log.find('\n', at) - at - 22));
  bool sending = true;
  for (std::string w; words >> w;) {
    if (w == "taken") {
      sending = false;
      continue;
    }
    const int peer = std::stoi(w.substr(0, w.find(':')));
    const double v = std::strtod(w.c_str() + w.find(':') + 1, nullptr);
    if (sending) {
      sent[{node, peer}] = v;
    } else {
      taken[{peer, node}] = v;
    }
  }
}

// Reads the ledgers node i logged in logs[i] and checks that every edge's two agree (the weight
// sent on it is the weight taken from it, in double). Returns the edges counted at the senders and
// at the receivers.
std::pair<std::size_t, std::size_t> check_ledgers(const std::vector<std::string>& logs) {
  std::map<std::pair<int, int>, double> sent, taken;
  for (std::size_t i = 0; i < logs.size(); ++i) {
    read_ledgers(static_cast<int>(i), logs[i], sent, taken);
  }
  const std::size_t received = taken.size();
  for (const auto& [edge, w] : sent) {
    CHECK_MESSAGE(taken[edge] == doctest::Approx(w).epsilon(1e-12),
                  "edge " << edge.first << " -> " << edge.second);
  }
  return {sent.size(), received};
}

// `gossip-sim run --replay-push-sum` of the order logs under `ckpt` (into dir/sim) gives the final
// parameters the n nodes of `work` wrote, node by node, bit for bit.
void check_replay(const std::string& dir, const std::string& topo, int n, const std::string& cfg,
                  const std::string& ckpt, const std::string& work) {
  const Run sim = run_shell_capture(
      bin("sim/gossip-sim") + " run --topology " + topo + " --nodes " + std::to_string(n) +
      " --config " + cfg + " --replay-push-sum " + ckpt + " --quiet --dump-params " + dir + "/sim");
  INFO(sim.out);
  REQUIRE(sim.code == 0);
  check_equal_to_sim(work + "/final", dir + "/sim", n);
}

TEST_CASE(
    "staleness: asynchronous PUSH_SUM on the one-peer exponential graph conserves mass and "
    "gossip-sim replays its order log bit for bit, under fail-stop and under carry-on") {
  // Under carry-on every link is reconciled as it first comes up (nothing to correct on a fresh
  // start), and the run without a fault is replayed as any other.
  for (const std::string policy : {"FAIL_STOP", "CARRY_ON"}) {
    CAPTURE(policy);
    const int n = 8;
    TempDir dir;
    const std::string cfg = dir.path + "/train.pbtxt";
    std::ofstream(cfg) << push_sum_config("staleness: 3\nfault { policy: " + policy + " }\n");
    const std::string work = dir.path + "/run", ckpt = dir.path + "/ckpt";
    std::string topo;
    const int rc = launch_retrying_ports(dir.path, "ONE_PEER_EXPONENTIAL", n, work, &topo,
                                         [&](const std::string& t) {
                                           return launch_command(dir.path, t, cfg, work, ckpt) +
                                                  " > " + dir.path + "/launch.out 2>&1";
                                         });
    INFO(read_file(dir.path + "/launch.out"));
    REQUIRE(rc == kExitOk);
    // Mass: every message is mixed in before a node ends (the drain), so the weights sum to n.
    double sum = 0;
    bool off_step = false;  // some node mixed a message of another iteration than its own
    for (int i = 0; i < n; ++i) {
      const OrderLog log =
          read_order_log(ckpt + "/node-" + std::to_string(i) + "/push_sum_order.tsv");
      REQUIRE(log.weight > 0);
      sum += log.weight;
      for (const std::string& line : log.lines) {
        const std::size_t tab = line.find('\t');
        if (line.empty() || line[0] == '#' || tab == std::string::npos) continue;
        const std::string t = line.substr(0, tab);
        std::istringstream entries(line.substr(tab + 1));
        for (std::string e; entries >> e;) off_step |= e.substr(e.find(':') + 1) != t;
      }
    }
    CHECK(sum == doctest::Approx(n).epsilon(1e-5));
    CHECK(off_step);
    // The replay: the same models, node by node, bit for bit.
    check_replay(dir.path, topo, n, cfg, ckpt, work);
    CHECK(read_f32(work + "/final/node_0.f32") != read_f32(work + "/final/node_1.f32"));
  }
}

TEST_CASE(
    "staleness: a slow node ends once every node that sends to it has ended, mass is kept and "
    "gossip-sim replays the shorter log bit for bit") {
  const int n = 8, slow = 3;
  Job job;
  job.iterations = 400;
  TempDir dir;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text() << "algorithm: PUSH_SUM\nstaleness: 32\n";
  const std::string work = dir.path + "/run", ckpt = dir.path + "/ckpt";
  const std::string topo = write_topology(dir.path, "ONE_PEER_EXPONENTIAL", n);
  const pid_t launcher = spawn_shell(launch_command(dir.path, topo, cfg, work, ckpt) + " > " +
                                     dir.path + "/launch.out 2>&1");
  const std::string pid_file = work + "/node-" + std::to_string(slow) + "/pid";
  for (int k = 0; k < 3000 && read_file(pid_file).empty(); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(!read_file(pid_file).empty());
  const pid_t victim = std::stoi(read_file(pid_file));
  // Node 3 runs 1 ms in every 100 until the job ends.
  int status = 0;
  while (::waitpid(launcher, &status, WNOHANG) == 0) {
    ::kill(victim, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(99));
    ::kill(victim, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(victim, SIGCONT);
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(testing::exit_code_of(status) == kExitOk);
  // The slow node's log is short: it ended when its in-neighbours (2, 1, 7) had ended. (Any node
  // may end a few iterations early: when it is behind every node that sends to it.)
  double sum = 0;
  std::vector<int> ran(n, 0);
  for (int i = 0; i < n; ++i) {
    const OrderLog log =
        read_order_log(ckpt + "/node-" + std::to_string(i) + "/push_sum_order.tsv");
    REQUIRE(log.weight > 0);
    sum += log.weight;
    REQUIRE(log.lines.size() >= 3);
    ran[i] = static_cast<int>(log.lines.size()) - 3;  // header, end and weight lines
  }
  MESSAGE("iterations run: " << ran[0] << " " << ran[1] << " " << ran[2] << " " << ran[3] << " "
                             << ran[4] << " " << ran[5] << " " << ran[6] << " " << ran[7]);
  CHECK(ran[slow] < job.iterations * 9 / 10);
  CHECK(*std::min_element(ran.begin(), ran.end()) == ran[slow]);
  CHECK(*std::max_element(ran.begin(), ran.end()) == job.iterations);
  CHECK(read_file(work + "/node-" + std::to_string(slow) + "/log.txt")
            .find("every node that sends to this one has ended") != std::string::npos);
  // Its out-neighbours took its empty last messages ("3:<s>e").
  for (int o : {4, 5, 7}) {
    std::istringstream words(
        read_file(ckpt + "/node-" + std::to_string(o) + "/push_sum_order.tsv"));
    bool empty = false;
    for (std::string w; words >> w;) empty |= w.rfind("3:", 0) == 0 && w.back() == 'e';
    CHECK_MESSAGE(empty, "node " << o << " took no empty message from node 3");
  }
  CHECK(sum == doctest::Approx(n).epsilon(1e-5));
  check_replay(dir.path, topo, n, cfg, ckpt, work);
}

TEST_CASE(
    "carry-on: asynchronous PUSH_SUM on the one-peer exponential graph survives a SIGKILL and "
    "the node's restart from its checkpoint, the weights summing to n") {
  const int n = 8, victim = 3;
  Job job;
  job.iterations = 30000;  // the others run on for seconds after the restart, on a fast machine too
  TempDir dir;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text()
                     << "algorithm: PUSH_SUM\nstaleness: 8\nfault { policy: CARRY_ON }\n";
  const std::string topo = write_topology(dir.path, "ONE_PEER_EXPONENTIAL", n);
  const std::string ckpt = dir.path + "/ckpt";
  const auto metrics = [&](int i) { return dir.path + "/m-" + std::to_string(i) + ".jsonl"; };
  const auto log = [&](int i, int incarnation) {
    return dir.path + "/log-" + std::to_string(i) + "." + std::to_string(incarnation) + ".txt";
  };
  const auto start = [&](int i, bool resume) {
    // exec: the pid is gossipd's, so that SIGKILL kills it (the waits below have their own limit).
    return spawn_shell("exec " + bin("daemon/gossipd") + " run " + topo + " --node " +
                       std::to_string(i) + " --config " + cfg + " --insecure --metrics " +
                       metrics(i) + " --dump-params " + dir.path +
                       "/final --set checkpoint.dir=" + ckpt + (resume ? " --resume" : "") + " > " +
                       log(i, resume ? 1 : 0) + " 2>&1");
  };
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) pids.push_back(start(i, false));
  const auto logs = [&] {
    std::string all;
    for (int i = 0; i < n; ++i)
      all += "--- node " + std::to_string(i) + "\n" + read_file(log(i, 0));
    return all + "--- node " + std::to_string(victim) + " restarted\n" + read_file(log(victim, 1));
  };
  // Every node is ended by SIGKILL if the job is not over within two minutes (a hang).
  const auto t0 = std::chrono::steady_clock::now();
  const auto wait_for = [&](pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120)) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return testing::exit_code_of(status);
  };
  // Past its first checkpoints (every 50), the victim is killed.
  while (metrics_iteration(metrics(victim)) < 1000) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      FAIL(logs());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(::kill(pids[victim], SIGKILL) == 0);
  CHECK(wait_for(pids[victim]) != kExitOk);
  const double killed_at = metrics_iteration(metrics(victim));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // The others carried on meanwhile, and are still running when it comes back.
  int status = 0;
  for (int i = 0; i < n; ++i) {
    if (i != victim) CHECK_MESSAGE(::waitpid(pids[i], &status, WNOHANG) == 0, logs());
  }
  pids[victim] = start(victim, true);
  for (int i = 0; i < n; ++i) {
    const int code = wait_for(pids[i]);
    CHECK_MESSAGE(code == kExitOk, "node " << i << " exit " << code << "\n" << logs());
  }
  INFO(logs());
  // The survivors that link to it carried on without it, and reconciled the link when it was back.
  for (int i : {1, 2, 4, 5, 7}) {  // 3 sends to 4, 5, 7 and hears from 2, 1, 7
    const std::string text = read_file(log(i, 0));
    CHECK(text.find("link with node 3 is down") != std::string::npos);
    CHECK(text.find("reconciled the link with node 3") != std::string::npos);
  }
  // The restarted node corrected its weight by what its checkpoint missed, link by link.
  const OrderLog restarted =
      read_order_log(ckpt + "/node-" + std::to_string(victim) + "/push_sum_order.tsv");
  double corrected = 0;
  int reconciled = 0;
  for (const std::string& line : restarted.lines) {
    if (line.rfind("reconcile\t", 0) != 0) continue;
    ++reconciled;
    corrected += std::abs(std::strtod(line.c_str() + line.rfind('\t') + 1, nullptr));
  }
  CHECK(reconciled == 5);
  CHECK(corrected > 1e-3);  // without the corrections the sum below would be off by this much
  // Mass: every weight the killed process held or had in flight is accounted for.
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const OrderLog l = read_order_log(ckpt + "/node-" + std::to_string(i) + "/push_sum_order.tsv");
    REQUIRE(l.weight > 0);
    sum += l.weight;
  }
  MESSAGE("node 3 killed near iteration " << killed_at << "; corrections |dw| " << corrected
                                          << "; sum of weights " << sum);
  // Exactly: every edge's two ledgers agree at the end (the weight sent on it is the weight taken
  // from it, in double), so nothing is in flight or lost and the weights' identity sums to n. The
  // float32 weights themselves carry the rounding of 30 000 mixes each.
  std::vector<std::string> final_logs;
  for (int i = 0; i < n; ++i) final_logs.push_back(read_file(log(i, i == victim ? 1 : 0)));
  const auto [sent, taken] = check_ledgers(final_logs);
  CHECK(sent == 3 * n);
  CHECK(taken == 3 * n);
  CHECK(sum == doctest::Approx(n).epsilon(1e-4));
  // A log with a reconciliation is refused by the replay, naming the line.
  const Run sim = run_shell_capture(bin("sim/gossip-sim") + " run --topology " + topo +
                                    " --nodes " + std::to_string(n) + " --config " + cfg +
                                    " --replay-push-sum " + ckpt + " --quiet");
  INFO(sim.out);
  CHECK(sim.code == kExitUsage);
  CHECK(sim.out.find("a reconciliation") != std::string::npos);
}

TEST_CASE(
    "carry-on: a link cut between two live nodes and healed is reconciled, every node ends with "
    "exit 0 and the weights sum to n") {
  // The directed ring 0 -> 1 -> 2 -> 3 -> 0; node 0 dials node 1 through gossip-faultproxy
  // (node 1's address in the topology is the proxy's, on 127.0.0.2), which cuts the link and
  // refuses it for 300 ms mid-run.
  const int n = 4;
  const int base = free_base_port(n + 1), control = base + n;
  TempDir dir;
  const std::string topo = dir.path + "/dring4.pbtxt";
  {
    std::ofstream out(topo);
    out << "name: \"dring4\"\ndirected: true\n";
    for (int i = 0; i < n; ++i) {
      out << "node { id: " << i << " address: \"" << (i == 1 ? "127.0.0.2" : "127.0.0.1") << ":"
          << base + i << "\" }\n";
    }
    for (int i = 0; i < n; ++i) out << "edge { from: " << i << " to: " << (i + 1) % n << " }\n";
  }
  Job job;
  job.iterations = 60000;  // long enough to run on after the link is back (redial: <= 1 s)
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text()
                     << "algorithm: PUSH_SUM\nstaleness: 4\nfault { policy: CARRY_ON }\n";
  const std::string ckpt = dir.path + "/ckpt";
  const std::string proxy_bin = bin("tests/fault/gossip-faultproxy");
  const pid_t proxy =
      spawn_shell("exec " + proxy_bin + " --listen 127.0.0.2:" + std::to_string(base + 1) +
                  " --target 127.0.0.1:" + std::to_string(base + 1) + " --control 127.0.0.1:" +
                  std::to_string(control) + " > " + dir.path + "/proxy.txt 2>&1");
  const auto ctl = [&](const std::string& command) {
    return run_shell_capture(proxy_bin + " ctl 127.0.0.1:" + std::to_string(control) + " " +
                             command);
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (ctl("stats").code != 0) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10),
                    read_file(dir.path + "/proxy.txt"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto metrics = [&](int i) { return dir.path + "/m-" + std::to_string(i) + ".jsonl"; };
  const auto log = [&](int i) { return dir.path + "/log-" + std::to_string(i) + ".txt"; };
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pids.push_back(spawn_shell("exec " + bin("daemon/gossipd") + " run " + topo + " --node " +
                               std::to_string(i) + " --config " + cfg + " --insecure" +
                               (i == 1 ? " --listen 127.0.0.1" : "") + " --metrics " + metrics(i) +
                               " --dump-params " + dir.path +
                               "/final --set checkpoint.dir=" + ckpt + " > " + log(i) + " 2>&1"));
  }
  const auto logs = [&] {
    std::string all;
    for (int i = 0; i < n; ++i) all += "--- node " + std::to_string(i) + "\n" + read_file(log(i));
    return all;
  };
  const auto kill_all = [&] {
    for (pid_t p : pids) ::kill(p, SIGKILL);
    ::kill(proxy, SIGKILL);
  };
  while (metrics_iteration(metrics(1)) < 2000) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      kill_all();
      FAIL(logs());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(ctl("refuse on").code == 0);
  CHECK(ctl("cut").code == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(ctl("refuse off").code == 0);
  for (int i = 0; i < n; ++i) {
    int status = 0;
    while (::waitpid(pids[i], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120)) kill_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK_MESSAGE(testing::exit_code_of(status) == kExitOk, "node " << i << "\n" << logs());
  }
  ::kill(proxy, SIGTERM);
  ::waitpid(proxy, nullptr, 0);
  INFO(logs());
  // Both ends lost the link and reconciled it; nobody restarted.
  CHECK(read_file(log(0)).find("link with node 1 is down") != std::string::npos);
  CHECK(read_file(log(1)).find("link with node 0 is down") != std::string::npos);
  CHECK(read_file(log(0)).find("reconciled the link with node 1:") != std::string::npos);
  CHECK(read_file(log(1)).find("reconciled the link with node 0:") != std::string::npos);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const OrderLog l = read_order_log(ckpt + "/node-" + std::to_string(i) + "/push_sum_order.tsv");
    REQUIRE(l.weight > 0);
    sum += l.weight;
  }
  MESSAGE("sum of weights " << sum);
  std::vector<std::string> final_logs;
  for (int i = 0; i < n; ++i) final_logs.push_back(read_file(log(i)));
  CHECK(check_ledgers(final_logs).first == n);
  CHECK(sum == doctest::Approx(n).epsilon(1e-4));
}

TEST_CASE("bad input: a staleness the topology or the memory cannot take is exit 2 naming it") {
  TempDir dir;
  // The one-peer exponential graph of 8 sends on each edge every 3 iterations.
  const std::string opx = write_topology(dir.path, "ONE_PEER_EXPONENTIAL", 8);
  Run r = run_node0(dir, opx, push_sum_config("staleness: 2\n"));
  INFO(r.out);
  CHECK(r.code == kExitUsage);
  CHECK(r.out.find("staleness: 2 is below 3") != std::string::npos);
  // τ + 1 receives per in-neighbour of a 4-billion τ: far beyond any machine's memory.
  r = run_node0(dir, opx, push_sum_config("staleness: 4000000000\n"));
  INFO(r.out);
  CHECK(r.code == kExitUsage);
  CHECK(r.out.find("staleness: 4000000000 needs") != std::string::npos);
  CHECK(r.out.find("of this machine's") != std::string::npos);
  // D-PSGD has no bounded staleness.
  r = run_node0(dir, opx, Job{}.config_text() + "staleness: 3\n");
  INFO(r.out);
  CHECK(r.code == kExitUsage);
  CHECK(r.out.find("staleness:") != std::string::npos);
  CHECK(r.out.find("needs algorithm: PUSH_SUM") != std::string::npos);
}

TEST_CASE("a job mixing staleness 0 and 3: refused at the handshake naming staleness") {
  const std::string log =
      handshake_refusal_log(push_sum_config(), push_sum_config("staleness: 3\n"));
  INFO(log);
  CHECK(log.find("training config mismatch: staleness") != std::string::npos);
}

}  // namespace
}  // namespace gossip::daemon::harness
