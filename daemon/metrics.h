// Metrics of one gossipd node as JSON lines (one object per line, flushed as written), so that a
// run can be followed with `tail -f`, aggregated by `gossipd launch`, and plotted with any tool.
//
//   {"type":"iter","node":3,"iteration":100,"wall_ms":...,"loss":0.41,"lr":0.05,
//    "compute_s":0.0021,"exchange_s":0.0009,"wait_s":0.0001,"mix_s":0.0003,"iteration_s":0.0026,
//    "bytes_sent":1626112,"bytes_received":1626112,"iterations_in_line":10}
//   {"type":"eval","node":3,"iteration":500,"wall_ms":...,"test_loss":0.38,"test_accuracy":0.861}
//   {"type":"event","node":3,"iteration":812,"wall_ms":...,"unix_ms":...,"event":"edge_dropped",
//    "detail":"...","peer":5}
//   {"type":"weights","node":3,"iteration":812,"wall_ms":...,"unix_ms":...,"row":"2:0.25,3:0.5,4:0.25"}
//
// "event" and "weights" lines carry unix_ms (the clock's Unix time in ms; the same clock as
// wall_ms) so that lines of different nodes can be ordered. "peer" is present where an event
// concerns one neighbour. A "weights" line gives node i's row of W(t) from `iteration` on (until
// the next weights line): every nonzero entry including the diagonal, ids increasing, "%.17g".
//
// An "iter" line covers `iterations_in_line` iterations ending at `iteration` (the number of
// completed iterations): loss and lr are means over them, times are per-iteration means (seconds),
// bytes are totals. compute_s: loss and gradient; exchange_s: from the start of sending x_t until
// the last neighbour's x_j^t arrived; wait_s: time the node sat idle after its gradient was ready,
// waiting for neighbours (the part of the exchange that overlap did NOT hide); mix_s: the fused
// mixing pass. MetricsWriter is not thread-safe: one thread (the training loop) owns it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/status.h"

namespace gossip::daemon {

struct IterationStats {
  double loss = 0;
  double lr = 0;
  double compute_s = 0;
  double exchange_s = 0;
  double wait_s = 0;
  double mix_s = 0;
  double iteration_s = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

class MetricsWriter {
 public:
  // path "-" writes to stdout, "" writes nothing. `every`: iterations per "iter" line.
  static Result<MetricsWriter> open(const std::string& path, int node, std::uint64_t every,
                                    bool append, Clock& clock = Clock::system());
  MetricsWriter(MetricsWriter&& other) noexcept;
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  ~MetricsWriter();

  // Adds iteration `iteration` (0-based) and writes a line when `every` have accumulated.
  void add_iteration(std::uint64_t iteration, const IterationStats& stats);
  // Writes whatever has accumulated (end of run).
  void flush_iterations();
  void eval(std::uint64_t completed_iterations, double test_loss, double test_accuracy);
  void event(std::uint64_t iteration, std::string_view event, std::string_view detail,
             int peer = -1);
  // Node i's row of W(iteration) as (column, weight) pairs in increasing column order.
  void weights(std::uint64_t iteration, const std::vector<std::pair<int, double>>& row);

  // The first failed write or flush (a full disk, a closed pipe), naming the file; OK until then.
  // Writing goes on after a failure (a line may still fit later), but a run must not end with
  // exit 0 over a metrics file that lost lines: run_node checks this at the end.
  Status status() const;
  // Flushes and closes the file (not stdout) and returns status(), a failed close included.
  Status close();

 private:
  MetricsWriter(std::FILE* file, bool owned, int node, std::uint64_t every, Clock& clock);
  void write_line(const std::string& line);
  std::string head(std::string_view type, std::uint64_t iteration) const;

  std::FILE* file_ = nullptr;
  bool owned_ = false;
  std::string name_;   // the path, or "standard output"
  std::string error_;  // the first write failure, "" while none
  int node_ = 0;
  std::uint64_t every_ = 1;
  Clock* clock_;
  IterationStats sum_;
  std::uint64_t count_ = 0;
  std::uint64_t last_iteration_ = 0;
};

// JSON strings: gossip::json_quote (common/json.h), the project's one string writer.
using gossip::json_quote;
// Metrics numbers carry 9 significant digits (enough for a float32 to read back exactly).
inline constexpr int kMetricsDigits = 9;
// A number of a metrics line as JSON: gossip::json_number(v, kMetricsDigits) (non-finite: null).
std::string json_number(double v);
// "j:w,j:w,..." with %.17g weights (the "row" member of a weights line).
std::string format_row(const std::vector<std::pair<int, double>>& row);
// The inverse of format_row; InvalidArgument on anything malformed.
Result<std::vector<std::pair<int, double>>> parse_row(std::string_view text);

// A flat JSON object's members (numbers, strings, booleans, null) — enough to read metrics lines
// back. InvalidArgument for anything else.
struct JsonValue {
  bool is_string = false;
  bool is_null = false;
  double number = 0;
  std::string text;
};
Result<std::map<std::string, JsonValue>> parse_flat_json(std::string_view line);

}  // namespace gossip::daemon
