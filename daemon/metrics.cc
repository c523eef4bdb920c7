// JSON-lines metrics. Each line is formatted completely and written with one fwrite + fflush, so
// a reader tailing the file sees whole lines (or nothing) and a crash loses at most the last one.
#include "daemon/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace gossip::daemon {

std::string json_number(double v) { return gossip::json_number(v, kMetricsDigits); }

Result<MetricsWriter> MetricsWriter::open(const std::string& path, int node, std::uint64_t every,
                                          bool append, Clock& clock) {
  if (path.empty()) return MetricsWriter(nullptr, false, node, every, clock);
  if (path == "-") {
    MetricsWriter w(stdout, false, node, every, clock);
    w.name_ = "standard output";
    return w;
  }
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    return io_error("opening metrics file " + path + ": " + std::strerror(errno));
  }
  MetricsWriter w(f, true, node, every, clock);
  w.name_ = path;
  return w;
}

MetricsWriter::MetricsWriter(std::FILE* file, bool owned, int node, std::uint64_t every,
                             Clock& clock)
    : file_(file), owned_(owned), node_(node), every_(every == 0 ? 1 : every), clock_(&clock) {}

MetricsWriter::MetricsWriter(MetricsWriter&& o) noexcept
    : file_(o.file_),
      owned_(o.owned_),
      node_(o.node_),
      every_(o.every_),
      clock_(o.clock_),
      name_(std::move(o.name_)),
      error_(std::move(o.error_)),
      sum_(o.sum_),
      count_(o.count_),
      last_iteration_(o.last_iteration_) {
  o.file_ = nullptr;
  o.owned_ = false;
}

MetricsWriter::~MetricsWriter() {
  if (owned_ && file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write_line(const std::string& line) {
  if (file_ == nullptr) return;
  std::string with_newline = line + "\n";
  errno = 0;
  const bool ok =
      std::fwrite(with_newline.data(), 1, with_newline.size(), file_) == with_newline.size() &&
      std::fflush(file_) == 0;
  if (!ok && error_.empty()) {
    error_ = "writing metrics to " + name_ + ": " + (errno ? std::strerror(errno) : "write failed");
  }
}

Status MetricsWriter::status() const { return error_.empty() ? Status::ok() : io_error(error_); }

Status MetricsWriter::close() {
  if (file_ != nullptr && owned_) {
    errno = 0;
    if (std::fclose(file_) != 0 && error_.empty()) {
      error_ = "closing metrics file " + name_ + ": " + (errno ? std::strerror(errno) : "failed");
    }
    file_ = nullptr;
    owned_ = false;
  }
  return status();
}

std::string MetricsWriter::head(std::string_view type, std::uint64_t iteration) const {
  return "{\"type\":" + json_quote(type) + ",\"node\":" + std::to_string(node_) +
         ",\"iteration\":" + std::to_string(iteration) +
         ",\"wall_ms\":" + std::to_string(clock_->wall_ms());
}

void MetricsWriter::add_iteration(std::uint64_t iteration, const IterationStats& s) {
  sum_.loss += s.loss;
  sum_.lr += s.lr;
  sum_.compute_s += s.compute_s;
  sum_.exchange_s += s.exchange_s;
  sum_.wait_s += s.wait_s;
  sum_.mix_s += s.mix_s;
  sum_.iteration_s += s.iteration_s;
  sum_.bytes_sent += s.bytes_sent;
  sum_.bytes_received += s.bytes_received;
  ++count_;
  last_iteration_ = iteration;
  if (count_ >= every_) flush_iterations();
}

void MetricsWriter::flush_iterations() {
  if (count_ == 0) return;
  double n = static_cast<double>(count_);
  std::string line =
      head("iter", last_iteration_ + 1) + ",\"loss\":" + json_number(sum_.loss / n) +
      ",\"lr\":" + json_number(sum_.lr / n) + ",\"compute_s\":" + json_number(sum_.compute_s / n) +
      ",\"exchange_s\":" + json_number(sum_.exchange_s / n) +
      ",\"wait_s\":" + json_number(sum_.wait_s / n) + ",\"mix_s\":" + json_number(sum_.mix_s / n) +
      ",\"iteration_s\":" + json_number(sum_.iteration_s / n) +
      ",\"bytes_sent\":" + std::to_string(sum_.bytes_sent) +
      ",\"bytes_received\":" + std::to_string(sum_.bytes_received) +
      ",\"iterations_in_line\":" + std::to_string(count_) + "}";
  write_line(line);
  sum_ = IterationStats{};
  count_ = 0;
}

void MetricsWriter::eval(std::uint64_t completed, double test_loss, double test_accuracy) {
  write_line(head("eval", completed) + ",\"test_loss\":" + json_number(test_loss) +
             ",\"test_accuracy\":" + json_number(test_accuracy) + "}");
}

void MetricsWriter::event(std::uint64_t iteration, std::string_view event, std::string_view detail,
                          int peer) {
  write_line(head("event", iteration) + ",\"unix_ms\":" + std::to_string(clock_->wall_ms()) +
             ",\"event\":" + json_quote(event) + ",\"detail\":" + json_quote(detail) +
             (peer >= 0 ? ",\"peer\":" + std::to_string(peer) : std::string()) + "}");
}

void MetricsWriter::weights(std::uint64_t iteration,
                            const std::vector<std::pair<int, double>>& row) {
  write_line(head("weights", iteration) + ",\"unix_ms\":" + std::to_string(clock_->wall_ms()) +
             ",\"row\":" + json_quote(format_row(row)) + "}");
}

std::string format_row(const std::vector<std::pair<int, double>>& row) {
  std::string out;
  char buf[40];
  for (const auto& [j, w] : row) {
    std::snprintf(buf, sizeof buf, "%.17g", w);
    if (!out.empty()) out += ',';
    out += std::to_string(j) + ':' + buf;
  }
  return out;
}

Result<std::vector<std::pair<int, double>>> parse_row(std::string_view text) {
  std::vector<std::pair<int, double>> row;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t comma = text.find(',', i);
    if (comma == std::string_view::npos) comma = text.size();
    std::string entry(text.substr(i, comma - i));
    std::size_t colon = entry.find(':');
    char* end = nullptr;
    if (colon == std::string::npos) return invalid_argument("row entry '" + entry + "' has no ':'");
    long j = std::strtol(entry.c_str(), &end, 10);
    if (end != entry.c_str() + colon || colon == 0 || j < 0) {
      return invalid_argument("row entry '" + entry + "': bad node id");
    }
    const char* w_text = entry.c_str() + colon + 1;
    double w = std::strtod(w_text, &end);
    if (*w_text == '\0' || *end != '\0')
      return invalid_argument("row entry '" + entry + "': bad weight");
    if (!row.empty() && row.back().first >= j) {
      return invalid_argument("row ids not increasing at '" + entry + "'");
    }
    row.emplace_back(static_cast<int>(j), w);
    i = comma + 1;
  }
  return row;
}

Result<std::map<std::string, JsonValue>> parse_flat_json(std::string_view s) {
  std::map<std::string, JsonValue> out;
  std::size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  auto bad = [&](const char* what) {
    return invalid_argument(std::string("JSON: ") + what + " at offset " + std::to_string(i));
  };
  auto string_lit = [&](std::string& dst) -> bool {
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\' && i + 1 < s.size()) {
        char e = s[++i];
        dst += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        ++i;
      } else {
        dst += s[i++];
      }
    }
    if (i >= s.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= s.size() || s[i] != '{') return bad("expected '{'");
  ++i;
  ws();
  if (i < s.size() && s[i] == '}') return out;
  while (true) {
    ws();
    std::string key;
    if (!string_lit(key)) return bad("expected a key");
    ws();
    if (i >= s.size() || s[i] != ':') return bad("expected ':'");
    ++i;
    ws();
    JsonValue v;
    if (i < s.size() && s[i] == '"') {
      v.is_string = true;
      if (!string_lit(v.text)) return bad("unterminated string");
    } else if (s.substr(i, 4) == "null") {
      v.is_null = true;
      i += 4;
    } else if (s.substr(i, 4) == "true") {
      v.number = 1;
      i += 4;
    } else if (s.substr(i, 5) == "false") {
      i += 5;
    } else {
      std::string num;
      while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '-' ||
                              s[i] == '+' || s[i] == '.' || s[i] == 'e' || s[i] == 'E')) {
        num += s[i++];
      }
      char* end = nullptr;
      v.number = std::strtod(num.c_str(), &end);
      if (num.empty() || end != num.c_str() + num.size()) return bad("expected a value");
    }
    out[key] = std::move(v);
    ws();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == '}') return out;
    return bad("expected ',' or '}'");
  }
}

}  // namespace gossip::daemon
