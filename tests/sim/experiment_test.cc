// Experiments: pricing against the cost model's closed forms, the two C-PSGD series sharing one
// run, targets, sweeps whose crossover agrees with the closed-form comparison, topology names.
#include "sim/experiment.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "sim/report.h"
#include "tests/sim/test_configs.h"

namespace gossip::sim {
namespace {

ExperimentConfig small_config() {
  ExperimentConfig c = least_squares_experiment(8, 2048, 512, 10, 200);
  c.problem.seed = 3;
  c.cost.net = {1e9, 1e-3};
  c.cost.compute_s = 0.01;
  c.cost.model_params = 25e6;
  return c;
}

const Series& find(const std::vector<Series>& series, const std::string& algorithm) {
  for (const Series& s : series) {
    if (s.algorithm == algorithm) return s;
  }
  FAIL("no series " << algorithm);
  return series.front();
}

TEST_CASE("priced series follow the closed forms and both C-PSGD series share one run") {
  auto r = run_experiment(small_config());
  REQUIRE(r.is_ok());
  REQUIRE(r->series.size() == 3);
  const Series& ps = find(r->series, "cpsgd-ps");
  const Series& ar = find(r->series, "cpsgd-allreduce");
  const Series& d = find(r->series, "dpsgd");
  const Network net{1e9, 1e-3};
  const double m = 4 * 25e6;
  CHECK(r->message_bytes == m);
  for (std::size_t k = 0; k < ps.points.size(); ++k) {
    const double t = static_cast<double>(ps.points[k].iteration);
    CHECK(ps.time_s[k] == doctest::Approx(t * (0.01 + parameter_server_comm_s(8, m, net))));
    CHECK(ar.time_s[k] == doctest::Approx(t * (0.01 + ring_allreduce_comm_s(8, m, net))));
    CHECK(d.time_s[k] == doctest::Approx(t * std::max(0.01, gossip_comm_s(2, m, net))));
    CHECK(ps.points[k].train_loss == ar.points[k].train_loss);
  }
  CHECK(d.rho > 0.5);
  CHECK(d.rho < 1.0);
  CHECK(d.points.back().train_loss < 0.1 * d.points.front().train_loss);
  CHECK(d.points.front().iteration == 0);
  CHECK(d.points.back().iteration == 200);
  CHECK(d.points.size() == 11);
}

TEST_CASE("targets: first evaluation point at or below the loss") {
  ExperimentConfig c = small_config();
  auto base = run_experiment(c);
  REQUIRE(base.is_ok());
  const Series& d0 = find(base->series, "dpsgd");
  c.target_loss = d0.points[3].train_loss;  // reached by iteration 60 at the latest
  auto r = run_experiment(c);
  REQUIRE(r.is_ok());
  const Series& d = find(r->series, "dpsgd");
  REQUIRE(d.iterations_to_target.has_value());
  CHECK(*d.iterations_to_target <= 60);
  for (const EvalPoint& p : d.points) {
    if (p.iteration < *d.iterations_to_target) CHECK(p.train_loss > c.target_loss);
  }
  c.target_loss = -1;  // unreachable
  auto never = run_experiment(c);
  REQUIRE(never.is_ok());
  CHECK(!find(never->series, "dpsgd").iterations_to_target.has_value());
  CHECK(std::isnan(speedup(find(never->series, "dpsgd"), find(never->series, "cpsgd-ps"))));
}

TEST_CASE("bandwidth sweep: winners agree with the closed forms, and the crossover is reported") {
  ExperimentConfig c = small_config();
  c.problem.shard.scheme = sgd::ShardScheme::kIid;
  auto base = run_experiment(c);
  REQUIRE(base.is_ok());
  // A target both reach; D-PSGD on a ring needs at least as many iterations as C-PSGD.
  c.target_loss = find(base->series, "dpsgd").points[5].train_loss;
  const std::vector<std::string> values = {"10Mbps",  "100Mbps", "1Gbps", "10Gbps",
                                           "100Gbps", "1Tbps",   "10Tbps"};
  auto sweep = run_sweep(c, SweepParam::kBandwidth, values);
  REQUIRE(sweep.is_ok());
  REQUIRE(sweep->points.size() == values.size());
  std::vector<bool> wins;
  for (const SweepPoint& p : sweep->points) {
    const Series& d = find(p.series, "dpsgd");
    const Series& ar = find(p.series, "cpsgd-allreduce");
    REQUIRE(d.iterations_to_target.has_value());
    REQUIRE(ar.iterations_to_target.has_value());
    const Network net{*parse_bandwidth_bps(p.value), 1e-3};
    const double m = 1e8;
    const double expect_d =
        static_cast<double>(*d.iterations_to_target) * std::max(0.01, gossip_comm_s(2, m, net));
    const double expect_ar =
        static_cast<double>(*ar.iterations_to_target) * (0.01 + ring_allreduce_comm_s(8, m, net));
    CHECK(*d.time_to_target_s == doctest::Approx(expect_d));
    CHECK(*ar.time_to_target_s == doctest::Approx(expect_ar));
    wins.push_back(expect_d < expect_ar);
  }
  std::ostringstream text;
  print_sweep(text, *sweep, c);
  bool changes = false;
  for (std::size_t k = 1; k < wins.size(); ++k) changes = changes || wins[k] != wins[k - 1];
  const std::string out = text.str();
  MESSAGE(out);
  bool reported = false;
  for (const std::string& line : sweep->crossovers) {
    if (line.find("cpsgd-allreduce") != std::string::npos) {
      reported = true;
      CHECK((line.find("no crossover") == std::string::npos) == changes);
    }
  }
  CHECK(reported);
}

TEST_CASE("make_topology: generators, torus shape, and errors") {
  auto torus = make_topology("torus", 12, topology::WeightScheme::kDefault);
  REQUIRE(torus.is_ok());
  CHECK(torus->num_nodes() == 12);
  CHECK(torus->graph().max_degree() == 4);  // 3 x 4 with wrap-around
  auto one_peer = make_topology("one_peer_exponential", 8, topology::WeightScheme::kDefault);
  REQUIRE(one_peer.is_ok());
  CHECK(one_peer->period() == 3);
  auto missing = make_topology("no-such-topology.pbtxt", 4, topology::WeightScheme::kDefault);
  CHECK(missing.status().message().find("neither a generator") != std::string::npos);
}

TEST_CASE("a bad topology fails before anything is simulated") {
  // compare with one bad topology among good ones, a topology sweep and a node sweep whose last
  // value is bad: the error comes before the first simulated iteration (no progress reported).
  ExperimentConfig c = small_config();
  std::int64_t reported = 0;
  const LabelledProgress count = [&](const std::string&, std::int64_t, std::int64_t) {
    ++reported;
  };
  c.topologies = {"ring", "no-such-topology"};
  auto compare = run_convergence(c, count);
  CHECK(compare.status().message().find("no-such-topology") != std::string::npos);
  c.topologies = {"ring"};
  auto by_topology = run_sweep(c, SweepParam::kTopology, {"ring", "exponential", "bogus"}, count);
  CHECK(by_topology.status().message().find("bogus") != std::string::npos);
  c.topologies = {"torus"};
  c.problem.synthetic_train = 4096;
  auto by_nodes = run_sweep(c, SweepParam::kNodes, {"9", "12", "8"}, count);
  CHECK(by_nodes.status().message().find("torus") != std::string::npos);  // 2 x 4 is refused
  CHECK(reported == 0);
  // The check does not refuse good values (and they do run).
  auto good = run_sweep(c, SweepParam::kNodes, {"9", "12"}, count);
  CHECK(good.is_ok());
  CHECK(reported > 0);
}

TEST_CASE("CSV and JSON carry every series and point") {
  ExperimentConfig c = small_config();
  c.run.iterations = 40;
  auto r = run_experiment(c);
  REQUIRE(r.is_ok());
  std::ostringstream csv;
  write_csv_header(csv);
  write_csv_rows(csv, r->series);
  std::istringstream lines(csv.str());
  std::string line;
  int rows = 0;
  std::getline(lines, line);
  CHECK(line.rfind("algorithm,topology,nodes,iteration,sim_time_s,train_loss", 0) == 0);
  CHECK(line.size() > 7);
  CHECK(line.substr(line.size() - 7) == ",rounds");
  while (std::getline(lines, line)) {
    ++rows;
    CHECK(std::count(line.begin(), line.end(), ',') == 13);  // 14 columns, rounds "" per step
  }
  CHECK(rows == 3 * 3);  // 3 series × points at 0, 20, 40
  const std::string json = summary_json(*r, c);
  CHECK(json.find("\"algorithm\":\"dpsgd\"") != std::string::npos);
  CHECK(json.find("\"speedups\":[{") != std::string::npos);
}

}  // namespace
}  // namespace gossip::sim
