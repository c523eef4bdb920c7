// `gossipd launch --metrics-listen` with 8 real gossipd processes on loopback, scraped twice: by
// this test, which reads every /metrics with an independent exposition reader and holds the values
// against the nodes' JSON-lines metrics files for the same iteration, and by a real Prometheus
// server (Debian's `prometheus`, started here with a generated config), queried with PromQL
// through its HTTP API. Skipped, with a message, where no prometheus binary is installed
// (scripts/setup.sh installs it).
#include <signal.h>

#include <fstream>
#include <map>

#include "tests/daemon/exposition_check.h"
#include "tests/daemon/gossipd_harness.h"
#include "tests/daemon/http_client.h"

namespace gossip::daemon::harness {
namespace {

using gossip::testing::http_get;
constexpr int kNodes = 8;

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The value of a one-sample instant-vector answer of /api/v1/query ({"status":"success","data":
// {"resultType":"vector","result":[{"metric":{},"value":[<time>,"<value>"]}]}}); none otherwise.
std::optional<double> query_scalar(int port, const std::string& promql, std::string* body) {
  const testing::HttpResponse r = http_get(port, "/api/v1/query?query=" + url_encode(promql));
  *body = r.body;
  if (r.status != 200 || r.body.find("\"status\":\"success\"") == std::string::npos) return {};
  const std::size_t value = r.body.find("\"value\":[");
  if (value == std::string::npos || r.body.find("\"value\":[", value + 1) != std::string::npos) {
    return {};  // no sample, or more than one
  }
  const std::size_t open = r.body.find(",\"", value);
  const std::size_t close = r.body.find('"', open + 2);
  if (open == std::string::npos || close == std::string::npos) return {};
  return std::strtod(r.body.substr(open + 2, close - open - 2).c_str(), nullptr);
}

// The "iter" lines of a node's metrics file by iteration.
std::map<std::uint64_t, std::map<std::string, JsonValue>> iter_lines(const std::string& path) {
  std::map<std::uint64_t, std::map<std::string, JsonValue>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto m = parse_flat_json(line);
    if (m.is_ok() && (*m)["type"].text == "iter") {
      out[static_cast<std::uint64_t>((*m)["iteration"].number)] = *m;
    }
  }
  return out;
}

// One scrape of node i, checked line by line; fails the test when a line is not valid.
exposition::Parsed scrape(int port, int i) {
  const testing::HttpResponse r = http_get(port, "/metrics");
  REQUIRE_MESSAGE(r.status == 200, "node " << i << " /metrics: " << r.head);
  exposition::Parsed p = exposition::parse(r.body);
  REQUIRE_MESSAGE(p.error.empty(), "node " << i << ": " << p.error);
  return p;
}

// What this test's scrape of node i said, to be held against its metrics file afterwards.
struct Seen {
  std::uint64_t iteration = 0;
  double loss = 0, bytes_sent = 0, iterations_run = 0;
};

Seen check_node_scrape(int port, int i) {
  const exposition::Parsed p = scrape(port, i);
  CHECK(p.value("gossip_node_info", {{"node", std::to_string(i)}, {"algorithm", "dpsgd"}}) == 1);
  Seen seen{static_cast<std::uint64_t>(*p.value("gossip_iteration")), *p.value("gossip_loss"),
            *p.value("gossip_bytes_sent_total"), *p.value("gossip_iterations_total")};
  // On the ring, node i's neighbours are i ± 1; the bytes sent to them add up to the total (the
  // transport counts both; no iteration is in flight between the two reads).
  double per_neighbour = 0;
  for (int j : {(i + kNodes - 1) % kNodes, (i + 1) % kNodes}) {
    const std::optional<double> b =
        p.value("gossip_neighbour_bytes_sent_total", {{"neighbour", std::to_string(j)}});
    REQUIRE_MESSAGE(b, "node " << i << " has no bytes for neighbour " << j);
    CHECK(*b > 0);
    per_neighbour += *b;
    CHECK(p.value("gossip_neighbour_in_use", {{"neighbour", std::to_string(j)}}) == 1);
    CHECK(p.value("gossip_neighbour_drops_total", {{"neighbour", std::to_string(j)}}) == 0);
  }
  CHECK(per_neighbour == seen.bytes_sent);
  CHECK(p.value("gossip_rejoins_total") == 0);
  CHECK(p.value("gossip_iteration_lag").has_value());
  const std::optional<double> consensus = p.value("gossip_consensus_distance_squared");
  REQUIRE(consensus);  // computed at the first iteration already
  CHECK(std::isfinite(*consensus));
  CHECK(*consensus >= 0);
  return seen;
}

// A Prometheus server scraping the nodes every 250 ms; the PromQL answers it must give.
void check_with_prometheus(const std::string& dir, int metrics_base) {
  const std::string prometheus = run_shell_capture("command -v prometheus").out;
  if (prometheus.empty()) {
    // Visible without doctest's -s: a skipped half must not pass for a tested one.
    std::fprintf(stderr,
                 "SKIPPED the Prometheus half: no prometheus binary on PATH "
                 "(scripts/setup.sh installs Debian's prometheus)\n");
    return;
  }
  const int port = free_base_port(1);
  std::ofstream yml(dir + "/prometheus.yml");
  yml << "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\n"
      << "scrape_configs:\n  - job_name: gossipd\n    static_configs:\n      - targets: [";
  for (int i = 0; i < kNodes; ++i)
    yml << (i ? ", " : "") << "'127.0.0.1:" << metrics_base + i << "'";
  yml << "]\n";
  yml.close();
  const pid_t server = spawn_shell("exec prometheus --config.file=" + dir +
                                   "/prometheus.yml --storage.tsdb.path=" + dir +
                                   "/tsdb --web.listen-address=127.0.0.1:" + std::to_string(port) +
                                   " > " + dir + "/prometheus.log 2>&1");
  std::string body;
  // Every target up and scraped, every node counted once, bytes flowing on all 16 directed edges.
  const bool answered = eventually(
      [&] {
        return query_scalar(port, "count(up{job=\"gossipd\"} == 1)", &body) == kNodes &&
               query_scalar(port, "count(gossip_iteration)", &body) == kNodes &&
               query_scalar(port, "min(gossip_iteration)", &body) > 0 &&
               query_scalar(port, "count(rate(gossip_neighbour_bytes_sent_total[2s]) > 0)",
                            &body) == 2 * kNodes;
      },
      60000, 250);
  const std::string log = read_file(dir + "/prometheus.log");
  ::kill(server, SIGTERM);
  wait_exit(server);
  CHECK_MESSAGE(answered, "last answer: " << body << "\nprometheus log:\n" << log);
}

TEST_CASE("a real Prometheus scrapes 8 gossipd nodes, and /metrics agrees with the metrics files") {
  TempDir dir;
  // Ended by SIGTERM once the checks are done; a line in the metrics file for every iteration.
  std::ofstream(dir.path + "/train.pbtxt")
      << "seed: 21\nmodel { kind: MLP hidden: 16 }\n"
         "data { dataset: SYNTHETIC_LOGISTIC num_examples: 1024 dim: 10 test_examples: 256 }\n"
         "batch_size: 8\noptimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 }\n"
         "iterations: 100000000\nmetrics_every: 1\neval_every: 0\n"
         "timeouts { connect_ms: 30000 deadline_ms: 30000 heartbeat_ms: 300 }\n";
  const std::string topo = write_topology(dir.path, "RING", kNodes);
  const int metrics_base = free_base_port(kNodes);
  const std::string work = dir.path + "/run";
  const pid_t launch = spawn_shell(
      "exec " + bin("daemon/gossipd") + " launch " + topo + " --config " + dir.path +
      "/train.pbtxt --workdir " + work + " --insecure --set checkpoint.dir=" + dir.path +
      "/ckpt --metrics-listen 127.0.0.1:" + std::to_string(metrics_base) + " > " + dir.path +
      "/launch.out 2>&1");
  // Every node serves and has trained a little.
  const bool training = eventually(
      [&] {
        for (int i = 0; i < kNodes; ++i) {
          const testing::HttpResponse r = http_get(metrics_base + i, "/metrics");
          const exposition::Parsed p = exposition::parse(r.body);
          if (r.status != 200 || p.value("gossip_iteration").value_or(0) < 20) return false;
        }
        return true;
      },
      90000, 100);
  if (!training) ::kill(launch, SIGKILL);
  REQUIRE_MESSAGE(training, read_file(dir.path + "/launch.out"));
  CHECK(http_get(metrics_base, "/healthz").body == "ok\n");
  std::vector<Seen> seen;
  for (int i = 0; i < kNodes; ++i) seen.push_back(check_node_scrape(metrics_base + i, i));
  check_with_prometheus(dir.path, metrics_base);

  ::kill(launch, SIGTERM);
  CHECK(wait_exit(launch) == kExitStopped);
  // The scraped values are those of the metrics file's line for the same iteration (every
  // iteration has a line: metrics_every 1), the counters the sums of the lines up to it.
  for (int i = 0; i < kNodes; ++i) {
    CAPTURE(i);
    const auto lines = iter_lines(work + "/node-" + std::to_string(i) + "/metrics.jsonl");
    REQUIRE(lines.count(seen[i].iteration));
    const auto& line = lines.at(seen[i].iteration);
    CHECK(line.at("loss").number == doctest::Approx(seen[i].loss).epsilon(1e-8));
    double bytes = 0, count = 0;
    for (const auto& [it, l] : lines) {
      if (it > seen[i].iteration) break;
      bytes += l.at("bytes_sent").number;
      count += l.at("iterations_in_line").number;
    }
    CHECK(bytes == seen[i].bytes_sent);
    CHECK(count == seen[i].iterations_run);
    CHECK(count == static_cast<double>(seen[i].iteration));
  }
}

}  // namespace
}  // namespace gossip::daemon::harness
