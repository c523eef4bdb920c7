// The exposition format (see prometheus.h). The families are written in a fixed order and every
// family of the snapshot is always present (a neighbour family without neighbours has no sample),
// so a scrape's HELP/TYPE lines are the same throughout a run; an absent estimate (no
// consensus-distance computed yet) leaves its family out.
#include "daemon/prometheus.h"

#include <cmath>
#include <cstdio>
#include <type_traits>

#include "common/check.h"

namespace gossip::daemon {
namespace {

bool name_char(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (colon && c == ':') return true;
  return first ? alpha : alpha || (c >= '0' && c <= '9');
}

bool valid_name(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (std::size_t k = 0; k < name.size(); ++k) {
    if (!name_char(name[k], k == 0, colon)) return false;
  }
  return true;
}

// `text` with backslash and line feed escaped, and '"' too when `quote` (a label value; a HELP
// text escapes no quotes).
std::string escape(std::string_view text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || (quote && c == '"')) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// One family of per-neighbour samples: field `value` of every neighbour (a flag as 1 or 0),
// labelled with the neighbour's id.
template <typename V>
void neighbour_family(ExpositionWriter& w, const MetricsSnapshot& s, std::string_view name,
                      ExpositionWriter::Type type, std::string_view help,
                      V NeighbourSample::*value) {
  w.family(name, type, help);
  for (const NeighbourSample& n : s.neighbours) {
    const Labels labels = {{"neighbour", std::to_string(n.peer)}};
    if constexpr (std::is_same_v<V, bool>) {
      w.sample(std::uint64_t{n.*value ? 1u : 0u}, labels);
    } else {
      w.sample(n.*value, labels);
    }
  }
}

void write_neighbours(ExpositionWriter& w, const MetricsSnapshot& s) {
  using T = ExpositionWriter::Type;
  using N = NeighbourSample;
  neighbour_family(w, s, "gossip_neighbour_bytes_sent_total", T::kCounter,
                   "Payload bytes sent to the neighbour since the process started.",
                   &N::bytes_sent);
  neighbour_family(w, s, "gossip_neighbour_bytes_received_total", T::kCounter,
                   "Payload bytes received from the neighbour since the process started.",
                   &N::bytes_received);
  neighbour_family(
      w, s, "gossip_neighbour_wait_seconds_total", T::kCounter,
      "Seconds this node waited for the neighbour's messages after its own work was done.",
      &N::wait_s);
  neighbour_family(w, s, "gossip_neighbour_drops_total", T::kCounter,
                   "Times the edge to the neighbour was dropped (fault.policy CARRY_ON).",
                   &N::drops);
  neighbour_family(w, s, "gossip_neighbour_admissions_total", T::kCounter,
                   "Times the dropped edge to the neighbour was re-admitted.", &N::admissions);
  neighbour_family(w, s, "gossip_neighbour_in_use", T::kGauge,
                   "1 when the edge to the neighbour was used in the last exchange, else 0.",
                   &N::in_use);
}

}  // namespace

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string prometheus_label_value(std::string_view v) { return escape(v, true); }

void ExpositionWriter::family(std::string_view name, Type type, std::string_view help) {
  GOSSIP_CHECK(valid_name(name, true)) << "metric name " << name;
  name_ = std::string(name);
  text_ += "# HELP " + name_ + " " + escape(help, false) + "\n";
  text_ += "# TYPE " + name_ + (type == Type::kCounter ? " counter\n" : " gauge\n");
}

void ExpositionWriter::sample(double value, const Labels& labels) {
  line(prometheus_number(value), labels);
}

void ExpositionWriter::sample(std::uint64_t value, const Labels& labels) {
  line(std::to_string(value), labels);
}

void ExpositionWriter::line(const std::string& value, const Labels& labels) {
  GOSSIP_CHECK(!name_.empty()) << "a sample before its family";
  text_ += name_;
  if (!labels.empty()) {
    text_ += '{';
    for (std::size_t k = 0; k < labels.size(); ++k) {
      GOSSIP_CHECK(valid_name(labels[k].first, false)) << "label name " << labels[k].first;
      text_ += (k ? "," : "") + labels[k].first + "=\"" + prometheus_label_value(labels[k].second) +
               "\"";
    }
    text_ += '}';
  }
  text_ += ' ' + value + '\n';
}

std::string format_exposition(const MetricsSnapshot& s) {
  using T = ExpositionWriter::Type;
  ExpositionWriter w;
  // A family of one sample without labels.
  const auto single = [&w](std::string_view name, T type, std::string_view help, auto value) {
    w.family(name, type, help);
    w.sample(value);
  };
  w.family("gossip_node_info", T::kGauge, "Constant 1, labelled with the node id and algorithm.");
  w.sample(std::uint64_t{1}, {{"node", std::to_string(s.node)}, {"algorithm", s.algorithm}});
  single("gossip_iteration", T::kGauge, "Completed training iterations.", s.iteration);
  single("gossip_loss", T::kGauge, "Training loss of the last iteration (NaN when none).", s.loss);
  single("gossip_learning_rate", T::kGauge, "Learning rate of the last iteration.", s.lr);
  single("gossip_iteration_seconds", T::kGauge, "Duration of the last iteration.", s.iteration_s);
  single("gossip_iterations_total", T::kCounter, "Iterations this process completed.",
         s.iterations_run);
  single("gossip_iteration_seconds_total", T::kCounter, "Seconds of the completed iterations.",
         s.iteration_s_total);
  single("gossip_compute_seconds_total", T::kCounter, "Seconds of loss and gradient.",
         s.compute_s_total);
  single("gossip_wait_seconds_total", T::kCounter,
         "Seconds idle after the gradient was ready, waiting for neighbours.", s.wait_s_total);
  single("gossip_bytes_sent_total", T::kCounter, "Payload bytes sent.", s.bytes_sent_total);
  single("gossip_bytes_received_total", T::kCounter, "Payload bytes received.",
         s.bytes_received_total);
  single("gossip_rejoins_total", T::kCounter,
         "Times this node rejoined its neighbours after resuming behind them.", s.rejoins_total);
  single("gossip_joins_total", T::kCounter,
         "Times this node joined the running job as a standby node (fault.standby_nodes).",
         s.joins_total);
  if (s.lag_iterations) {
    single("gossip_iteration_lag", T::kGauge,
           "Iterations the most advanced neighbour is ahead of this node (0: not behind).",
           *s.lag_iterations);
  }
  if (s.consensus_distance_sq) {
    single("gossip_consensus_distance_squared", T::kGauge,
           "||x_i - mean of the neighbours' x_j||^2 at gossip_consensus_iteration "
           "(docs/daemon.md).",
           *s.consensus_distance_sq);
    single("gossip_consensus_iteration", T::kGauge,
           "The iteration gossip_consensus_distance_squared was computed at.",
           s.consensus_iteration);
  }
  write_neighbours(w, s);
  return w.text();
}

}  // namespace gossip::daemon
