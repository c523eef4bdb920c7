// Joins and announced leaves of the carry-on policy (docs/daemon.md "Fault tolerance") with real
// gossipd processes over loopback TCP: a standby node (fault.standby_nodes) that the others start
// without, that joins mid-run and ends at the average the others kept; a node stopped by SIGTERM
// that its neighbours drop as "left" at once instead of detecting a failure; and the config errors
// of a standby list. Pure gossip (lr 0) from distinct x_0 makes the outcome a closed form: W(t)
// doubly stochastic on the present nodes preserves their average, the joiner takes its neighbours'
// (≈ that average after the path has mixed), so every node ends at the mean of the four x_0.
#include <doctest/doctest.h>
#include <signal.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "config/sgd_config.h"
#include "config/train_config.h"
#include "daemon/checkpoint.h"
#include "daemon/node.h"
#include "sgd/problem.h"
#include "tests/daemon/gossipd_harness.h"
#include "topology/topology_file.h"

namespace gossip::daemon::harness {
namespace {

using Line = std::map<std::string, JsonValue>;
using Row = std::vector<std::pair<int, double>>;

std::vector<Line> metrics_lines(const std::string& path) {
  std::vector<Line> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto m = parse_flat_json(line);
    REQUIRE_MESSAGE(m.is_ok(), line);
    out.push_back(*m);
  }
  return out;
}

// The job: a ring of 5 on loopback, logistic regression with lr 0 (pure gossip).
struct JoinJob {
  TempDir dir;
  std::string topo, cfg;
  int n = 5;
  std::uint64_t iterations = 0;

  JoinJob(std::uint64_t iters, const std::string& fault, const std::string& lr = "0")
      : iterations(iters) {
    topo = write_topology(dir.path, "RING", n);
    cfg = dir.path + "/train.pbtxt";
    std::ofstream(cfg) << "seed: 5\n"
                          "model { kind: LOGISTIC }\n"
                          "data { dataset: SYNTHETIC_LOGISTIC num_examples: 512 dim: 6 "
                          "test_examples: 64 noise: 1 }\n"
                          "batch_size: 8\n"
                          "optimizer { kind: SGD lr: "
                       << lr
                       << " }\n"
                          "iterations: "
                       << iterations
                       << "\n"
                          "checkpoint { dir: \""
                       << dir.path
                       << "/ckpt\" every: 0 keep: 2 }\n"
                          "timeouts { connect_ms: 30000 deadline_ms: 10000 heartbeat_ms: 200 }\n"
                       << fault << "\n";
  }
  std::string metrics(int i) const { return dir.path + "/m-" + std::to_string(i) + ".jsonl"; }
  std::string log(int i) const { return dir.path + "/log-" + std::to_string(i) + ".txt"; }
  // `gossipd run` of node i in the background (exec: the pid is gossipd's).
  pid_t start(int i, bool resume) const {
    return spawn_shell("exec timeout 120 " + bin("daemon/gossipd") + " run " + topo + " --node " +
                       std::to_string(i) + " --config " + cfg + " --insecure --metrics " +
                       metrics(i) + " --dump-params " + dir.path + "/final" +
                       (resume ? " --resume" : "") + " > " + log(i) + " 2>&1");
  }
  // Iteration-0 checkpoints with a random x_0 for each node in `nodes` (so that gossip has
  // something to average); returns their mean, coordinate by coordinate. `rounds`: the job has
  // local_steps, whose checkpoint also holds the round's anchor and start (both x_0; SGD itself
  // keeps no state).
  std::vector<double> distinct_starts(const std::vector<int>& nodes, bool rounds = false) const {
    Result<config::TrainConfig> c = config::load_train_config(cfg);
    REQUIRE_MESSAGE(c.is_ok(), c.status().to_string());
    Result<topology::Topology> t = topology::load_topology(topo);
    REQUIRE(t.is_ok());
    Result<sgd::Problem> problem = sgd::make_problem(config::to_problem_config(*c, n));
    REQUIRE(problem.is_ok());
    std::mt19937 rng(77);
    std::normal_distribution<float> normal(0, 1);
    std::vector<double> mean(problem->spec.num_params(), 0.0);
    for (int i : nodes) {
      Checkpoint k;
      k.node = static_cast<std::uint32_t>(i);
      k.topology_fingerprint = t->fingerprint();
      k.config_fingerprint = config_fingerprint(*c);
      const sgd::SamplerState ss = problem->sampler(i, static_cast<int>(c->batch_size())).state();
      k.sampler = {ss.epoch_rng_state, ss.epoch, ss.position, ss.batches};
      k.params.resize(mean.size());
      for (std::size_t p = 0; p < mean.size(); ++p) {
        k.params[p] = normal(rng);
        mean[p] += k.params[p] / static_cast<double>(nodes.size());
      }
      if (rounds) {
        k.optimizer_state = k.params;
        k.optimizer_state.insert(k.optimizer_state.end(), k.params.begin(), k.params.end());
      }
      auto w = write_checkpoint(Env::system(), dir.path + "/ckpt/node-" + std::to_string(i), k, 2);
      REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
    }
    return mean;
  }
  std::string logs() const {
    std::string all;
    for (int i = 0; i < n; ++i) all += "--- node " + std::to_string(i) + "\n" + read_file(log(i));
    return all;
  }
};

// Every node's row of W at every iteration in [0, end) (the last "weights" line at or before it)
// while the node is present (`from` <= t < `until`, per node): the rows present at t form a
// symmetric, doubly stochastic matrix on the present nodes. Returns the number of iterations
// checked.
std::uint64_t check_mixing(const std::vector<std::vector<Line>>& lines,
                           const std::map<int, std::pair<std::uint64_t, std::uint64_t>>& present,
                           std::uint64_t end) {
  std::map<int, std::map<std::uint64_t, Row>> rows;  // node -> iteration -> row
  for (const auto& [i, span] : present) {
    for (const Line& l : lines[i]) {
      if (l.at("type").text != "weights") continue;
      auto r = parse_row(l.at("row").text);
      REQUIRE(r.is_ok());
      rows[i][static_cast<std::uint64_t>(l.at("iteration").number)] = *r;
    }
  }
  std::uint64_t checked = 0;
  for (std::uint64_t t = 0; t < end; ++t) {
    std::map<std::pair<int, int>, double> w;
    std::set<int> here;
    for (const auto& [i, span] : present) {
      if (t >= span.first && t < span.second) here.insert(i);
    }
    for (int i : here) {
      auto at = rows[i].upper_bound(t);
      REQUIRE_MESSAGE(at != rows[i].begin(), "node " << i << " logged no row by iteration " << t);
      const Row& row = std::prev(at)->second;
      double sum = 0;
      for (const auto& [j, v] : row) {
        REQUIRE_MESSAGE(here.count(j), "iteration " << t << ": node " << i << " mixes " << j);
        w[{i, j}] = v;
        sum += v;
      }
      REQUIRE_MESSAGE(std::fabs(sum - 1) <= 1e-12,
                      "iteration " << t << ": row " << i << " sums to " << sum);
    }
    for (const auto& [ij, v] : w) {
      auto mirror = w.find({ij.second, ij.first});
      REQUIRE_MESSAGE((mirror != w.end() && mirror->second == v),
                      "iteration " << t << ": W(" << ij.first << "," << ij.second << ") = " << v
                                   << " has no equal mirror");
    }
    ++checked;
  }
  return checked;
}

// The first event line `event` of a node about `peer` (-1: any), or null.
const Line* find_event(const std::vector<Line>& lines, const std::string& event, int peer = -1) {
  for (const Line& l : lines) {
    if (l.at("type").text != "event" || l.at("event").text != event) continue;
    if (peer >= 0 && (!l.count("peer") || l.at("peer").number != peer)) continue;
    return &l;
  }
  return nullptr;
}

Row row_at(const std::vector<Line>& lines, std::uint64_t t) {
  Row row;
  for (const Line& l : lines) {
    if (l.at("type").text == "weights" && l.at("iteration").number <= static_cast<double>(t)) {
      row = *parse_row(l.at("row").text);
    }
  }
  return row;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The join scenario with `extra` config lines (rounds: local_steps): node 4 starts once node 0 is
// at iteration `joiner_after` (the path 3-2-1-0 has mixed to its mean by then).
void join_mid_run(const std::string& extra, std::uint64_t iterations, double joiner_after) {
  JoinJob job(iterations, "fault { standby_nodes: 4 admit_margin: 20 }\n" + extra);
  const std::vector<double> mean = job.distinct_starts({0, 1, 2, 3}, !extra.empty());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) pids.push_back(job.start(i, true));
  // Well under timeouts.connect_ms (30 s): nobody waits for node 4.
  const bool started =
      eventually([&] { return metrics_iteration(job.metrics(0)) >= joiner_after; }, 15000);
  const double start_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(started, job.logs());
  MESSAGE("nodes 0-3 at iteration " << joiner_after << " after " << start_s
                                    << " s (connect_ms 30 s)");
  CHECK(start_s < 15.0);
  pids.push_back(job.start(4, false));
  for (int i = 0; i < 5; ++i) CHECK_MESSAGE(wait_exit(pids[i]) == kExitOk, job.logs());

  std::vector<std::vector<Line>> lines;
  for (int i = 0; i < 5; ++i) lines.push_back(metrics_lines(job.metrics(i)));
  const Line* joined = find_event(lines[4], "joined");
  REQUIRE_MESSAGE(joined != nullptr, job.logs());
  const auto t_a = static_cast<std::uint64_t>(joined->at("iteration").number);
  MESSAGE("node 4 joined at iteration " << t_a << ": " << joined->at("detail").text);
  CHECK(joined->at("detail").text.find("average of 2 neighbours") != std::string::npos);
  CHECK(t_a > joiner_after);
  CHECK(t_a < job.iterations);
  // Its neighbours admitted it at the same iteration; nobody dropped an edge.
  for (int i : {0, 3}) {
    const Line* admitted = find_event(lines[i], "edge_admitted", 4);
    REQUIRE_MESSAGE(admitted != nullptr, "node " << i);
    CHECK(admitted->at("iteration").number == static_cast<double>(t_a));
  }
  for (int i = 0; i < 5; ++i) CHECK(find_event(lines[i], "edge_dropped") == nullptr);
  // Closed forms: Metropolis–Hastings on the path 3-2-1-0 before the join, on the ring after.
  CHECK(row_at(lines[0], 0) == Row{{0, 1 - 1.0 / 3}, {1, 1.0 / 3}});
  CHECK(row_at(lines[1], 0) == Row{{0, 1.0 / 3}, {1, 1 - 2.0 / 3}, {2, 1.0 / 3}});
  CHECK(row_at(lines[0], t_a) == Row{{0, 1 - 2.0 / 3}, {1, 1.0 / 3}, {4, 1.0 / 3}});
  CHECK(row_at(lines[4], t_a) == Row{{0, 1.0 / 3}, {3, 1.0 / 3}, {4, 1 - 2.0 / 3}});
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> present;
  for (int i = 0; i < 4; ++i) present[i] = {0, job.iterations};
  present[4] = {t_a, job.iterations};
  CHECK(check_mixing(lines, present, job.iterations) == job.iterations);
  // The average of the present nodes is kept, the joiner takes it: everyone ends at the mean.
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> x =
        read_f32(job.dir.path + "/final/node_" + std::to_string(i) + ".f32");
    REQUIRE(x.size() == mean.size());
    for (std::size_t p = 0; p < x.size(); ++p) {
      CHECK_MESSAGE(std::fabs(x[p] - mean[p]) <= 1e-5, "node " << i << " coordinate " << p);
    }
  }
}

TEST_CASE(
    "join: the others start without the standby node, it joins mid-run at an agreed iteration, W "
    "stays symmetric and doubly stochastic, and every node ends at the mean of the four x_0") {
  join_mid_run("", 6000, 100);
}

TEST_CASE("join in rounds (local_steps 5): the same, with one exchange every 5 iterations") {
  join_mid_run("local_steps: 5", 20000, 1000);
}

TEST_CASE(
    "leave: a node stopped by SIGTERM announces it, its neighbours drop the edge as 'left' within "
    "far less than a deadline, and the others finish with W doubly stochastic throughout") {
  JoinJob job(6000, "");
  const std::vector<double> mean = job.distinct_starts({0, 1, 2, 3, 4});
  std::vector<pid_t> pids;
  for (int i = 0; i < 5; ++i) pids.push_back(job.start(i, true));
  REQUIRE_MESSAGE(eventually([&] { return metrics_iteration(job.metrics(0)) >= 200; }, 15000),
                  job.logs());
  const std::int64_t sent_ms = now_ms();
  ::kill(pids[2], SIGTERM);
  CHECK_MESSAGE(wait_exit(pids[2]) == kExitStopped, job.logs());
  for (int i : {0, 1, 3, 4}) CHECK_MESSAGE(wait_exit(pids[i]) == kExitOk, job.logs());

  std::vector<std::vector<Line>> lines;
  for (int i = 0; i < 5; ++i) lines.push_back(metrics_lines(job.metrics(i)));
  const Line* stopped = find_event(lines[2], "stopped");
  REQUIRE(stopped != nullptr);
  const auto t_l = static_cast<std::uint64_t>(stopped->at("iteration").number);
  for (int i : {1, 3}) {
    const Line* drop = find_event(lines[i], "edge_dropped", 2);
    REQUIRE_MESSAGE(drop != nullptr, "node " << i);
    INFO("node " << i << ": " << drop->at("detail").text);
    CHECK(drop->at("detail").text.find("left") != std::string::npos);
    CHECK(drop->at("iteration").number == static_cast<double>(t_l));
    const double after_ms = drop->at("unix_ms").number - static_cast<double>(sent_ms);
    MESSAGE("node " << i << " dropped node 2 " << after_ms << " ms after the SIGTERM");
    CHECK(after_ms < 2000);  // deadline_ms 10000
  }
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> present;
  for (int i : {0, 1, 3, 4}) present[i] = {0, job.iterations};
  present[2] = {0, t_l};
  CHECK(check_mixing(lines, present, job.iterations) == job.iterations);
  // Node 2's x_{t_l} left with it; the others agree on one value (consensus of the rest).
  const std::vector<float> x0 = read_f32(job.dir.path + "/final/node_0.f32");
  for (int i : {1, 3, 4}) {
    const std::vector<float> x =
        read_f32(job.dir.path + "/final/node_" + std::to_string(i) + ".f32");
    REQUIRE(x.size() == x0.size());
    for (std::size_t p = 0; p < x.size(); ++p) CHECK(std::fabs(x[p] - x0[p]) <= 1e-5);
  }
  (void)mean;
}

TEST_CASE(
    "join against gossip-sim: with SGD steps (lr 0.05, fresh starts), the 5 gossipd models equal "
    "gossip-sim run --join 4@t_a on the same files, t_a read from the joiner's `joined` event") {
  JoinJob job(3000, "fault { standby_nodes: 4 admit_margin: 20 }", "0.05");
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) pids.push_back(job.start(i, false));
  REQUIRE_MESSAGE(eventually([&] { return metrics_iteration(job.metrics(0)) >= 100; }, 15000),
                  job.logs());
  pids.push_back(job.start(4, false));
  for (int i = 0; i < 5; ++i) CHECK_MESSAGE(wait_exit(pids[i]) == kExitOk, job.logs());
  const std::vector<Line> lines = metrics_lines(job.metrics(4));
  const Line* joined = find_event(lines, "joined");
  REQUIRE_MESSAGE(joined != nullptr, job.logs());
  const auto t_a = static_cast<std::uint64_t>(joined->at("iteration").number);
  REQUIRE(joined->at("detail").text.find("average of 2 neighbours") != std::string::npos);
  const std::string sim = job.dir.path + "/sim";
  const std::string sim_cmd = bin("sim/gossip-sim") + " run --algorithm dpsgd --topology " +
                              job.topo + " --nodes 5 --config " + job.cfg + " --quiet --join 4@" +
                              std::to_string(t_a) + " --dump-params " + sim + " > " + job.dir.path +
                              "/sim.out 2>&1";
  REQUIRE_MESSAGE(run_shell(sim_cmd) == 0, read_file(job.dir.path + "/sim.out"));
  for (int i = 0; i < 5; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    INFO("node " << i << ", t_a " << t_a);
    CHECK(read_f32(job.dir.path + "/final" + name) == read_f32(sim + name));
  }
  // Not vacuous: the nodes moved and differ; without the join the simulation differs.
  CHECK(read_f32(job.dir.path + "/final/node_0.f32") !=
        read_f32(job.dir.path + "/final/node_1.f32"));
  REQUIRE(run_shell(bin("sim/gossip-sim") + " run --algorithm dpsgd --topology " + job.topo +
                    " --nodes 5 --config " + job.cfg + " --quiet --dump-params " + sim +
                    "-all > /dev/null 2>&1") == 0);
  CHECK(read_f32(job.dir.path + "/final/node_4.f32") != read_f32(sim + "-all/node_4.f32"));
}

TEST_CASE("standby: an id outside the topology or a standby node without CARRY_ON exits 2") {
  {
    JoinJob job(10, "fault {\n  standby_nodes: 1\n  standby_nodes: 7\n}");
    const Run r = run_shell_capture(bin("daemon/gossipd") + " run " + job.topo +
                                    " --node 0 --insecure --config " + job.cfg + " 2>&1");
    CHECK(r.code == kExitUsage);
    CHECK_MESSAGE(r.out.find(job.cfg + ":11:3: fault.standby_nodes[1]: node 7 is not in the "
                                       "topology (nodes 0..4)") != std::string::npos,
                  r.out);
  }
  {
    JoinJob job(10, "fault { policy: FAIL_STOP standby_nodes: 4 }");
    const Run r = run_shell_capture(bin("daemon/gossipd") + " run " + job.topo +
                                    " --node 0 --insecure --config " + job.cfg + " 2>&1");
    CHECK(r.code == kExitUsage);
    CHECK_MESSAGE(
        r.out.find("fault.standby_nodes: needs fault.policy CARRY_ON") != std::string::npos, r.out);
  }
}

}  // namespace
}  // namespace gossip::daemon::harness
