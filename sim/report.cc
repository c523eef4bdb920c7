// CSV, tables, JSON and the progress bar. Numbers are printed with enough digits to round-trip
// the double in CSV/JSON (%.17g) and rounded for the table.
#include "sim/report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/clock.h"
#include "common/json.h"
#include "common/units.h"

namespace gossip::sim {

namespace {

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

std::string short_num(double v) {
  if (std::isnan(v)) return "-";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

std::string seconds(double s) {
  char buf[40];
  if (std::isnan(s)) return "-";
  if (s >= 100)
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  else if (s >= 1)
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.1f us", s * 1e6);
  return buf;
}

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string label(const Series& s) {
  std::string out = s.topology.empty() ? s.algorithm : s.algorithm + " (" + s.topology + ")";
  return s.rounds.empty() ? out : out + " [" + s.rounds + "]";
}

// Per-iteration time of a series, from its last point.
double seconds_per_iteration(const Series& s) {
  if (s.points.empty() || s.points.back().iteration == 0) return std::nan("");
  return s.time_s.back() / static_cast<double>(s.points.back().iteration);
}

std::string target_text(const ExperimentConfig& c) {
  std::ostringstream s;
  if (!std::isnan(c.target_loss)) s << "train loss <= " << c.target_loss;
  if (!std::isnan(c.target_accuracy)) {
    s << (std::isnan(c.target_loss) ? "" : " and ") << "test accuracy >= " << c.target_accuracy;
  }
  return s.str();
}

void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (std::size_t k = 0; k < rows.size(); ++k) {
    for (std::size_t c = 0; c < rows[k].size(); ++c) {
      out << (c == 0 ? "" : "  ") << std::setw(static_cast<int>(width[c]))
          << (c == 0 ? std::left : std::right) << rows[k][c];
    }
    out << std::right << "\n";
    if (k == 0) {
      std::size_t total = 0;
      for (std::size_t w : width) total += w + 2;
      out << std::string(total - 2, '-') << "\n";
    }
  }
}

}  // namespace

double speedup(const Series& d, const Series& c) {
  if (d.has_target) {
    if (!d.time_to_target_s || !c.time_to_target_s || *d.time_to_target_s <= 0) return std::nan("");
    return *c.time_to_target_s / *d.time_to_target_s;
  }
  if (d.time_s.empty() || c.time_s.empty() || d.time_s.back() <= 0) return std::nan("");
  return c.time_s.back() / d.time_s.back();
}

void write_csv_header(std::ostream& out) {
  out << "algorithm,topology,nodes,iteration,sim_time_s,train_loss,test_loss,test_accuracy,"
         "local_test_accuracy,consensus_distance,batch_loss,sweep_param,sweep_value,rounds\n";
}

void write_csv_rows(std::ostream& out, const std::vector<Series>& series,
                    const std::string& sweep_param, const std::string& sweep_value) {
  for (const Series& s : series) {
    for (std::size_t k = 0; k < s.points.size(); ++k) {
      const EvalPoint& p = s.points[k];
      out << s.algorithm << "," << s.topology << "," << s.nodes << "," << p.iteration << ","
          << num(s.time_s[k]) << "," << num(p.train_loss) << "," << num(p.test_loss) << ","
          << num(p.test_accuracy) << "," << num(p.local_test_accuracy) << ","
          << num(p.consensus_distance) << "," << num(p.batch_loss) << "," << sweep_param << ","
          << sweep_value << "," << s.rounds << "\n";
    }
  }
}

void print_summary(std::ostream& out, const ExperimentResult& result,
                   const ExperimentConfig& config) {
  const Network& net = config.cost.net;
  out << "network: " << format_bandwidth_bps(net.bandwidth_bps) << ", latency "
      << seconds(net.latency_s) << "; message " << format_size_bytes(result.message_bytes)
      << "; compute " << seconds(result.compute_s) << " per step"
      << (config.cost.compute_s ? "" : " (measured)") << "; stragglers "
      << config.cost.straggler.to_string();
  if (net.payload_fraction != 1.0)
    out << "; payload " << fixed(net.payload_fraction, 3) << " of the wire";
  if (config.cost.message_overhead_s != 0.0) {
    out << "; " << seconds(config.cost.message_overhead_s) << " per message";
  }
  if (config.cost.allreduce != AllreduceModel::kTable1) {
    out << "; allreduce priced as " << allreduce_model_name(config.cost.allreduce);
  }
  if (config.cost.cpu_share != 1.0 || config.cost.cpu_s_per_byte != 0.0) {
    out << "; cpu share " << fixed(config.cost.cpu_share, 3) << " of a core, "
        << fixed(config.cost.cpu_s_per_byte * 1e9, 3) << " ns per byte moved";
  }
  out << "\n";
  const std::string target = target_text(config);
  std::vector<std::vector<std::string>> rows = {{"series", "nodes", "rho", "s/iter", "final loss",
                                                 "final acc", "consensus", "sent/node",
                                                 "iters to target", "time to target"}};
  for (const Series& s : result.series) {
    const EvalPoint& last = s.points.back();
    rows.push_back({label(s), std::to_string(s.nodes), fixed(s.rho, 4),
                    seconds(seconds_per_iteration(s)), short_num(last.train_loss),
                    fixed(last.test_accuracy, 4), short_num(last.consensus_distance),
                    format_size_bytes(s.bytes_per_node),
                    s.iterations_to_target ? std::to_string(*s.iterations_to_target) : "-",
                    s.time_to_target_s ? seconds(*s.time_to_target_s) : "-"});
  }
  print_table(out, rows);
  if (!target.empty()) out << "target: " << target << "\n";
  for (const Series& d : result.series) {
    if (d.scheme != Scheme::kGossip) continue;
    for (const Series& c : result.series) {
      if (c.scheme == Scheme::kGossip) continue;
      const double x = speedup(d, c);
      out << "speedup of " << label(d) << " over " << label(c) << ": "
          << (std::isnan(x) ? std::string("n/a (target not reached by both)") : fixed(x, 2) + "x")
          << (target.empty() ? " (time for all iterations)" : " (time to target)") << "\n";
    }
  }
}

void print_sweep(std::ostream& out, const SweepResult& sweep, const ExperimentConfig& config) {
  const std::string param(sweep_param_name(sweep.param));
  std::vector<std::vector<std::string>> rows = {
      {param, "series", "s/iter", "iters to target", "time to target", "final time"}};
  for (const SweepPoint& p : sweep.points) {
    for (const Series& s : p.series) {
      rows.push_back({p.value, label(s), seconds(seconds_per_iteration(s)),
                      s.iterations_to_target ? std::to_string(*s.iterations_to_target) : "-",
                      s.time_to_target_s ? seconds(*s.time_to_target_s) : "-",
                      seconds(s.time_s.back())});
    }
  }
  print_table(out, rows);
  const std::string target = target_text(config);
  out << "compared by " << (target.empty() ? "time for all iterations" : "time to " + target)
      << "\n";
  for (const std::string& c : sweep.crossovers) out << "crossover: " << c << "\n";
}

namespace {

std::string series_json(const Series& s) {
  std::ostringstream o;
  const EvalPoint& last = s.points.back();
  o << "{\"algorithm\":" << json_quote(s.algorithm) << ",\"topology\":" << json_quote(s.topology)
    << ",\"rounds\":" << json_quote(s.rounds)
    << ",\"bytes_per_node\":" << json_num(s.bytes_per_node) << ",\"nodes\":" << s.nodes
    << ",\"rho\":" << json_num(s.rho)
    << ",\"seconds_per_iteration\":" << json_num(seconds_per_iteration(s))
    << ",\"comm_s\":" << json_num(s.comm_s) << ",\"iterations\":" << last.iteration
    << ",\"final_time_s\":" << json_num(s.time_s.back())
    << ",\"final_train_loss\":" << json_num(last.train_loss)
    << ",\"final_test_accuracy\":" << json_num(last.test_accuracy)
    << ",\"final_consensus_distance\":" << json_num(last.consensus_distance)
    << ",\"iterations_to_target\":"
    << (s.iterations_to_target ? std::to_string(*s.iterations_to_target) : "null")
    << ",\"time_to_target_s\":" << (s.time_to_target_s ? json_num(*s.time_to_target_s) : "null")
    << "}";
  return o.str();
}

std::string series_list_json(const std::vector<Series>& series) {
  std::string out = "[";
  for (std::size_t k = 0; k < series.size(); ++k) {
    if (k > 0) out += ',';
    out += series_json(series[k]);
  }
  return out + "]";
}

std::string speedups_json(const std::vector<Series>& series) {
  std::string out = "[";
  bool first = true;
  for (const Series& d : series) {
    if (d.scheme != Scheme::kGossip) continue;
    for (const Series& c : series) {
      if (c.scheme == Scheme::kGossip) continue;
      if (!first) out += ',';
      out += "{\"dpsgd_topology\":" + json_quote(d.topology) +
             ",\"over\":" + json_quote(c.algorithm) + ",\"speedup\":" + json_num(speedup(d, c)) +
             "}";
      first = false;
    }
  }
  return out + "]";
}

std::string config_json(const ExperimentConfig& c, double compute_s, double message_bytes) {
  std::ostringstream o;
  o << "{\"nodes\":" << c.nodes << ",\"bandwidth_bps\":" << json_num(c.cost.net.bandwidth_bps)
    << ",\"latency_s\":" << json_num(c.cost.net.latency_s)
    << ",\"payload_fraction\":" << json_num(c.cost.net.payload_fraction)
    << ",\"cpu_share\":" << json_num(c.cost.cpu_share)
    << ",\"cpu_s_per_byte\":" << json_num(c.cost.cpu_s_per_byte)
    << ",\"message_overhead_s\":" << json_num(c.cost.message_overhead_s)
    << ",\"allreduce_model\":" << json_quote(std::string(allreduce_model_name(c.cost.allreduce)))
    << ",\"compute_s\":" << json_num(compute_s) << ",\"message_bytes\":" << json_num(message_bytes)
    << ",\"straggler\":" << json_quote(c.cost.straggler.to_string())
    << ",\"target_loss\":" << json_num(c.target_loss)
    << ",\"target_accuracy\":" << json_num(c.target_accuracy) << "}";
  return o.str();
}

}  // namespace

std::string summary_json(const ExperimentResult& result, const ExperimentConfig& config) {
  return "{\"config\":" + config_json(config, result.compute_s, result.message_bytes) +
         ",\"series\":" + series_list_json(result.series) +
         ",\"speedups\":" + speedups_json(result.series) + "}";
}

std::string sweep_json(const SweepResult& sweep, const ExperimentConfig& config) {
  std::string out = "{\"param\":" + json_quote(std::string(sweep_param_name(sweep.param))) +
                    ",\"config\":" + config_json(config, std::nan(""), std::nan("")) +
                    ",\"points\":[";
  for (std::size_t k = 0; k < sweep.points.size(); ++k) {
    if (k > 0) out += ',';
    out += "{\"value\":" + json_quote(sweep.points[k].value);
    out += ",\"series\":" + series_list_json(sweep.points[k].series);
    out += ",\"speedups\":" + speedups_json(sweep.points[k].series) + "}";
  }
  out += "],\"crossovers\":[";
  for (std::size_t k = 0; k < sweep.crossovers.size(); ++k) {
    if (k > 0) out += ',';
    out += json_quote(sweep.crossovers[k]);
  }
  return out + "]}";
}

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO) == 1) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(const std::string& label, std::int64_t done, std::int64_t total) {
  if (!enabled_ || total <= 0) return;
  const std::int64_t now = Clock::system().monotonic_ns();
  if (done < total && now - last_draw_ns_ < 100'000'000) return;
  last_draw_ns_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  std::fprintf(stderr, "\r%-24.24s [%s%s] %3d%% (%lld/%lld)", label.c_str(),
               std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
               static_cast<int>(100 * done / total), static_cast<long long>(done),
               static_cast<long long>(total));
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r%*s\r", 80, "");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace gossip::sim
