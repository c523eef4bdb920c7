// Output of gossip-sim: the CSV of every evaluation point, the terminal summary table, the JSON
// summary for scripts, and a progress bar that draws only on a terminal.
//
// CSV columns (one row per series × evaluation point; header on the first line):
//   algorithm, topology, nodes, iteration, sim_time_s, train_loss, test_loss, test_accuracy,
//   local_test_accuracy, consensus_distance, batch_loss, sweep_param, sweep_value
// NaN is written as "nan" (accuracy of regression problems; batch_loss at iteration 0).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "sim/experiment.h"

namespace gossip::sim {

void write_csv_header(std::ostream& out);
// `sweep_param`/`sweep_value` fill the last two columns (empty outside sweeps).
void write_csv_rows(std::ostream& out, const std::vector<Series>& series,
                    const std::string& sweep_param = "", const std::string& sweep_value = "");

// The summary table: per series, final metrics, iterations and simulated time to the target,
// seconds per iteration, and the speedup of each D-PSGD series over each C-PSGD scheme.
void print_summary(std::ostream& out, const ExperimentResult& result,
                   const ExperimentConfig& config);
void print_sweep(std::ostream& out, const SweepResult& sweep, const ExperimentConfig& config);

// JSON objects with the same content (no trailing newline).
std::string summary_json(const ExperimentResult& result, const ExperimentConfig& config);
std::string sweep_json(const SweepResult& sweep, const ExperimentConfig& config);

// Speedup of D-PSGD over C-PSGD: time to target of `c` over that of `d` (or, with no target, the
// ratio of their final simulated times). NaN when either never reaches the target.
double speedup(const Series& d, const Series& c);

// A one-line progress bar on stderr, redrawn at most every 100 ms; does nothing when stderr is
// not a terminal (or when disabled).
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled);
  ~ProgressBar();
  void update(const std::string& label, std::int64_t done, std::int64_t total);
  void finish();

 private:
  bool enabled_;
  bool drawn_ = false;
  std::int64_t last_draw_ns_ = 0;
};

}  // namespace gossip::sim
