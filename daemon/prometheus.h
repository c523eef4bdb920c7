// What a gossipd node shows an operator while it trains (`--metrics-listen`, docs/daemon.md
// "Prometheus metrics"): a snapshot of its progress that the training thread publishes once per
// iteration (LiveMetrics), and its rendering in the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), which daemon/metrics_server.h
// serves over HTTP.
//
// The exposition format, as written here: each metric family is a `# HELP name text` line, a
// `# TYPE name counter|gauge` line and its samples `name{label="value",...} value`, one per line,
// '\n'-terminated. HELP text escapes '\' and newline as `\\` and `\n`; label values escape '\',
// '"' and newline as `\\`, `\"` and `\n`; values are written as Prometheus (Go's strconv) reads
// them: integers in decimal, other numbers with 17 significant digits, and "NaN", "+Inf", "-Inf".
// Counters end in `_total`.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gossip::daemon {

// One neighbour's counters since this process started (those of D-PSGD and local-step gossip,
// algorithms/neighbourhood.h): payload bytes on the link (net::TransportStats::peer_bytes), the
// seconds this node waited for its messages, and how often the carry-on policy dropped and
// re-admitted the edge; `in_use`: the edge was used in the last exchange.
struct NeighbourSample {
  int peer = -1;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  double wait_s = 0;
  std::uint64_t drops = 0;
  std::uint64_t admissions = 0;
  bool in_use = false;
};

// A node's state after `iteration` completed iterations. Totals count from this process's start.
struct MetricsSnapshot {
  int node = -1;
  std::string algorithm;             // "dpsgd", ... ("" before the algorithm is built)
  std::uint64_t iteration = 0;       // completed iterations (a resumed run counts the resumed ones)
  double loss = 0;                   // the last iteration's training loss (NaN when none)
  double lr = 0;                     // its learning rate γ_t
  double iteration_s = 0;            // its duration
  std::uint64_t iterations_run = 0;  // iterations this process completed
  double compute_s_total = 0;
  double wait_s_total = 0;
  double iteration_s_total = 0;
  std::uint64_t bytes_sent_total = 0;
  std::uint64_t bytes_received_total = 0;
  std::uint64_t rejoins_total = 0;
  std::uint64_t joins_total = 0;  // a standby node's join (fault.standby_nodes): 0 or 1
  // Iterations the most advanced neighbour has started beyond the one this node starts next
  // (0 when it is not behind); none for an algorithm without neighbours.
  std::optional<std::uint64_t> lag_iterations;
  // The consensus-distance estimate (docs/daemon.md) and the iteration it was computed at.
  std::optional<double> consensus_distance_sq;
  std::uint64_t consensus_iteration = 0;
  std::vector<NeighbourSample> neighbours;  // increasing peer id
};

// The snapshot shared between the training thread (publish, once per iteration) and the metrics
// server's thread (get). Thread-safe: both hold `mu_` only to copy.
class LiveMetrics {
 public:
  void publish(const MetricsSnapshot& snapshot) {
    std::lock_guard l(mu_);
    current_ = snapshot;  // copy-assignment keeps the vector's capacity: no allocation per call
  }
  MetricsSnapshot get() const {
    std::lock_guard l(mu_);
    return current_;
  }

 private:
  mutable std::mutex mu_;
  MetricsSnapshot current_;  // guarded by mu_
};

// ---- the exposition format

// A sample value as Prometheus reads it: "NaN", "+Inf", "-Inf", or %.17g.
std::string prometheus_number(double v);
// A label value with '\', '"' and newline escaped (without the quotes).
std::string prometheus_label_value(std::string_view v);

// Builds one exposition: family() opens a metric family, sample() adds a line of the family opened
// last. Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]*
// (programmer errors otherwise: GOSSIP_CHECK).
class ExpositionWriter {
 public:
  enum class Type { kCounter, kGauge };
  void family(std::string_view name, Type type, std::string_view help);
  void sample(double value, const std::vector<std::pair<std::string, std::string>>& labels = {});
  void sample(std::uint64_t value,
              const std::vector<std::pair<std::string, std::string>>& labels = {});
  const std::string& text() const { return text_; }

 private:
  void line(const std::string& value, const std::vector<std::pair<std::string, std::string>>& l);
  std::string text_;
  std::string name_;
};

// The snapshot's exposition (the metric names and their meaning: docs/daemon.md).
std::string format_exposition(const MetricsSnapshot& snapshot);

}  // namespace gossip::daemon
