// Metrics JSON lines: aggregation over an interval, escaping, and reading lines back.
#include "daemon/metrics.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

namespace gossip::daemon {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST_CASE("iteration lines average over the interval, then eval and event lines follow") {
  std::string path = std::filesystem::temp_directory_path() /
                     ("gossip_metrics_" + std::to_string(::getpid()) + ".jsonl");
  ManualClock clock(5'000'000'000);
  {
    auto w = MetricsWriter::open(path, 2, 4, false, clock);
    REQUIRE(w.is_ok());
    for (std::uint64_t t = 0; t < 10; ++t) {
      IterationStats s;
      s.loss = static_cast<double>(t);
      s.lr = 0.1;
      s.compute_s = 0.002;
      s.exchange_s = 0.001;
      s.bytes_sent = 100;
      s.bytes_received = 200;
      w->add_iteration(t, s);
    }
    w->flush_iterations();
    w->eval(10, 0.5, 0.875);
    w->event(10, "neighbour_failed", "node \"5\"\nmissed");
  }
  auto lines = lines_of(path);
  REQUIRE(lines.size() == 5);
  auto first = parse_flat_json(lines[0]);
  REQUIRE(first.is_ok());
  CHECK((*first)["type"].text == "iter");
  CHECK((*first)["node"].number == 2);
  CHECK((*first)["iteration"].number == 4);
  CHECK((*first)["loss"].number == doctest::Approx(1.5));  // mean of 0..3
  CHECK((*first)["bytes_sent"].number == 400);
  CHECK((*first)["bytes_received"].number == 800);
  CHECK((*first)["wall_ms"].number == 5000);
  auto third = parse_flat_json(lines[2]);
  REQUIRE(third.is_ok());
  CHECK((*third)["iteration"].number == 10);
  CHECK((*third)["iterations_in_line"].number == 2);
  CHECK((*third)["loss"].number == doctest::Approx(8.5));
  auto eval = parse_flat_json(lines[3]);
  REQUIRE(eval.is_ok());
  CHECK((*eval)["test_accuracy"].number == doctest::Approx(0.875));
  auto event = parse_flat_json(lines[4]);
  REQUIRE(event.is_ok());
  CHECK((*event)["detail"].text == "node \"5\"\nmissed");
  std::filesystem::remove(path);
}

TEST_CASE("non-finite numbers become null and malformed JSON is rejected") {
  CHECK(json_number(std::nan("")) == "null");
  auto v = parse_flat_json(R"({"loss":null,"ok":true,"x":-1.5e-3})");
  REQUIRE(v.is_ok());
  CHECK((*v)["loss"].is_null);
  CHECK((*v)["x"].number == doctest::Approx(-1.5e-3));
  CHECK_FALSE(parse_flat_json(R"({"loss":)").is_ok());
  CHECK_FALSE(parse_flat_json(R"(["a"])").is_ok());
  CHECK_FALSE(parse_flat_json(R"({"a":1 "b":2})").is_ok());
}

TEST_CASE("an unwritable metrics path is an error naming it") {
  auto w = MetricsWriter::open("/nonexistent/dir/m.jsonl", 0, 1, false);
  REQUIRE_FALSE(w.is_ok());
  CHECK(w.status().message().find("/nonexistent/dir/m.jsonl") != std::string::npos);
}

}  // namespace
}  // namespace gossip::daemon
