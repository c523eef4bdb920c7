// The Prometheus exposition writer (daemon/prometheus.h), read back by the independent reader of
// exposition_check.h: numbers as Prometheus reads them (NaN, ±Inf, round-trip doubles), label
// values escaped, every line valid, and each snapshot field under its name.
#include "daemon/prometheus.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "tests/daemon/exposition_check.h"

namespace gossip::daemon {
namespace {

TEST_CASE("numbers are written as Prometheus reads them") {
  CHECK(prometheus_number(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(prometheus_number(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(prometheus_number(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(prometheus_number(0) == "0");
  CHECK(prometheus_number(-2.5) == "-2.5");
  // 17 significant digits: every double reads back exactly.
  for (double v : {0.1, 1.0 / 3.0, 6.02214076e23, 5e-324, 1.7976931348623157e308}) {
    CHECK(std::strtod(prometheus_number(v).c_str(), nullptr) == v);
  }
}

TEST_CASE("label values escape backslash, double quote and newline, nothing else") {
  CHECK(prometheus_label_value("plain") == "plain");
  CHECK(prometheus_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(prometheus_label_value("tab\there, ünïcode") == "tab\there, ünïcode");

  ExpositionWriter w;
  w.family("x_total", ExpositionWriter::Type::kCounter, "help with \\ and\nnewline");
  w.sample(std::uint64_t{7}, {{"path", "C:\\dir \"q\"\nnext"}, {"k", ""}});
  w.sample(std::numeric_limits<double>::quiet_NaN(), {{"path", "}{,="}});
  const exposition::Parsed p = exposition::parse(w.text());
  REQUIRE_MESSAGE(p.error.empty(), p.error << "\n" << w.text());
  REQUIRE(p.samples.size() == 2);
  CHECK(p.samples[0].labels.at("path") == "C:\\dir \"q\"\nnext");
  CHECK(p.samples[0].labels.at("k").empty());
  CHECK(p.samples[0].value == 7);
  CHECK(p.samples[1].labels.at("path") == "}{,=");
  CHECK(std::isnan(p.samples[1].value));
  CHECK(p.helps.at("x_total") == "help with \\ and\nnewline");
  CHECK(p.types.at("x_total") == "counter");
}

TEST_CASE("the reader refuses what the format forbids (it can fail)") {
  CHECK_FALSE(exposition::parse("a 1").error.empty());                     // no newline
  CHECK_FALSE(exposition::parse("a{b=\"x\\t\"} 1\n").error.empty());       // bad escape
  CHECK_FALSE(exposition::parse("a{b=\"x\"} one\n").error.empty());        // bad value
  CHECK_FALSE(exposition::parse("1a 1\n").error.empty());                  // bad name
  CHECK_FALSE(exposition::parse("a 1\n# TYPE a gauge\n").error.empty());   // TYPE after samples
  CHECK_FALSE(exposition::parse("a{b=\"x\",b=\"y\"} 1\n").error.empty());  // label twice
  CHECK(exposition::parse("# any comment\na{b=\"x\",} -Inf 1700000000000\n").error.empty());
}

MetricsSnapshot example() {
  MetricsSnapshot s;
  s.node = 3;
  s.algorithm = "dpsgd";
  s.iteration = 1234;
  s.loss = 0.4142135623730951;
  s.lr = 0.05;
  s.iteration_s = 0.0026;
  s.iterations_run = 1000;
  s.compute_s_total = 1.25;
  s.wait_s_total = 0.5;
  s.iteration_s_total = 2.0;
  s.bytes_sent_total = 123456789012;
  s.bytes_received_total = 98765;
  s.rejoins_total = 2;
  s.joins_total = 1;
  s.lag_iterations = 4;
  s.consensus_distance_sq = 1e-3;
  s.consensus_iteration = 1200;
  s.neighbours = {{2, 10, 20, 0.25, 1, 1, true}, {7, 30, 40, 0.75, 0, 0, false}};
  return s;
}

TEST_CASE("a snapshot's exposition is valid and carries every field under its name") {
  const MetricsSnapshot s = example();
  const std::string text = format_exposition(s);
  const exposition::Parsed p = exposition::parse(text);
  REQUIRE_MESSAGE(p.error.empty(), p.error << "\n" << text);
  // Every family has HELP and TYPE, and counters (only they) end in _total.
  for (const exposition::Sample& x : p.samples) {
    REQUIRE_MESSAGE(p.types.count(x.name), x.name);
    CHECK(p.helps.count(x.name));
    const bool total = x.name.size() > 6 && x.name.substr(x.name.size() - 6) == "_total";
    CHECK_MESSAGE(total == (p.types.at(x.name) == "counter"), x.name);
  }
  CHECK(p.value("gossip_node_info", {{"node", "3"}, {"algorithm", "dpsgd"}}) == 1);
  CHECK(p.value("gossip_iteration") == 1234);
  CHECK(p.value("gossip_loss") == s.loss);
  CHECK(p.value("gossip_learning_rate") == 0.05);
  CHECK(p.value("gossip_iteration_seconds") == 0.0026);
  CHECK(p.value("gossip_iterations_total") == 1000);
  CHECK(p.value("gossip_compute_seconds_total") == 1.25);
  CHECK(p.value("gossip_wait_seconds_total") == 0.5);
  CHECK(p.value("gossip_iteration_seconds_total") == 2.0);
  CHECK(p.value("gossip_bytes_sent_total") == 123456789012.0);
  CHECK(p.value("gossip_bytes_received_total") == 98765);
  CHECK(p.value("gossip_rejoins_total") == 2);
  CHECK(p.value("gossip_joins_total") == 1);
  CHECK(p.value("gossip_iteration_lag") == 4);
  CHECK(p.value("gossip_consensus_distance_squared") == 1e-3);
  CHECK(p.value("gossip_consensus_iteration") == 1200);
  CHECK(p.value("gossip_neighbour_bytes_sent_total", {{"neighbour", "2"}}) == 10);
  CHECK(p.value("gossip_neighbour_bytes_received_total", {{"neighbour", "7"}}) == 40);
  CHECK(p.value("gossip_neighbour_wait_seconds_total", {{"neighbour", "7"}}) == 0.75);
  CHECK(p.value("gossip_neighbour_drops_total", {{"neighbour", "2"}}) == 1);
  CHECK(p.value("gossip_neighbour_admissions_total", {{"neighbour", "7"}}) == 0);
  CHECK(p.value("gossip_neighbour_in_use", {{"neighbour", "2"}}) == 1);
  CHECK(p.value("gossip_neighbour_in_use", {{"neighbour", "7"}}) == 0);
}

TEST_CASE("a NaN loss is NaN, and absent estimates leave their families out") {
  MetricsSnapshot s = example();
  s.loss = std::numeric_limits<double>::quiet_NaN();
  s.lag_iterations.reset();
  s.consensus_distance_sq.reset();
  s.neighbours.clear();
  const exposition::Parsed p = exposition::parse(format_exposition(s));
  REQUIRE(p.error.empty());
  CHECK(std::isnan(*p.value("gossip_loss")));
  CHECK_FALSE(p.value("gossip_iteration_lag"));
  CHECK_FALSE(p.value("gossip_consensus_distance_squared"));
  CHECK_FALSE(p.value("gossip_neighbour_bytes_sent_total"));
  CHECK(p.types.count("gossip_neighbour_bytes_sent_total"));  // the family is still announced
}

TEST_CASE("LiveMetrics hands the last published snapshot to another thread") {
  LiveMetrics live;
  CHECK(live.get().iteration == 0);
  MetricsSnapshot s = example();
  live.publish(s);
  s.iteration = 99;  // a copy was published
  CHECK(live.get().iteration == 1234);
  CHECK(live.get().neighbours.size() == 2);
}

}  // namespace
}  // namespace gossip::daemon
