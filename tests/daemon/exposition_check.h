// An independent reader of the Prometheus text exposition format 0.0.4, for the tests of
// daemon/prometheus.h and of gossipd's /metrics: it checks every line against the format's grammar
// (https://prometheus.io/docs/instrumenting/exposition_formats/) and returns the samples with their
// labels unescaped and values parsed, or the first line that breaks a rule. Written from the
// format's description, not from the writer, so the two can disagree.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace gossip::daemon::exposition {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Parsed {
  std::string error;  // "" when the whole text is valid
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // metric name -> TYPE
  std::map<std::string, std::string> helps;  // metric name -> HELP text, unescaped
  // The first sample of `name` with every label of `labels`, if any.
  std::optional<double> value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const {
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) match &= s.labels.count(k) && s.labels.at(k) == v;
      if (match) return s.value;
    }
    return std::nullopt;
  }
};

inline bool is_name(std::string_view n, bool metric) {
  if (n.empty()) return false;
  for (std::size_t k = 0; k < n.size(); ++k) {
    const char c = n[k];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (metric && c == ':') || (k > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// A sample value as Go's strconv.ParseFloat (which Prometheus uses) takes it.
inline std::optional<double> parse_value(const std::string& v) {
  if (v == "NaN") return std::nan("");
  if (v == "+Inf" || v == "Inf") return HUGE_VAL;
  if (v == "-Inf") return -HUGE_VAL;
  if (v.empty() || v.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size()) return std::nullopt;
  return d;
}

// Reads `{a="x",b="y"}` from text[*at] on; advances *at past '}'. "" or what is wrong.
inline std::string parse_labels(std::string_view text, std::size_t* at,
                                std::map<std::string, std::string>* out) {
  std::size_t k = *at + 1;  // past '{'
  while (k < text.size() && text[k] != '}') {
    const std::size_t eq = text.find('=', k);
    if (eq == std::string_view::npos) return "label without '='";
    const std::string name(text.substr(k, eq - k));
    if (!is_name(name, false)) return "bad label name '" + name + "'";
    if (eq + 1 >= text.size() || text[eq + 1] != '"') return "label value not quoted";
    std::string value;
    std::size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] != '\\') {
        value += text[j];
        continue;
      }
      if (++j >= text.size()) return "label value ends in '\\'";
      if (text[j] == 'n') {
        value += '\n';
      } else if (text[j] == '\\' || text[j] == '"') {
        value += text[j];
      } else {
        return std::string("bad escape \\") + text[j] + " in a label value";
      }
    }
    if (j >= text.size()) return "unterminated label value";
    if (!out->emplace(name, value).second) return "label '" + name + "' twice";
    k = j + 1;
    if (k < text.size() && text[k] == ',') ++k;
  }
  if (k >= text.size()) return "unterminated label set";
  *at = k + 1;
  return "";
}

inline std::string unescape_help(std::string_view h, bool* ok) {
  std::string out;
  for (std::size_t k = 0; k < h.size(); ++k) {
    if (h[k] != '\\') {
      out += h[k];
    } else if (k + 1 < h.size() && (h[k + 1] == '\\' || h[k + 1] == 'n')) {
      out += h[++k] == 'n' ? '\n' : '\\';
    } else {
      *ok = false;
    }
  }
  return out;
}

// One `# ...` line: HELP and TYPE are checked, other comments pass.
inline std::string parse_comment(const std::string& line, const std::set<std::string>& sampled,
                                 Parsed* p) {
  const bool help = line.rfind("# HELP ", 0) == 0, type = line.rfind("# TYPE ", 0) == 0;
  if (!help && !type) return "";
  const std::string rest = line.substr(7);
  const std::size_t sp = rest.find(' ');
  const std::string name = rest.substr(0, sp);
  if (!is_name(name, true)) return "bad metric name in '" + line + "'";
  if (sp == std::string::npos) return help ? "" : "TYPE without a type";
  const std::string text = rest.substr(sp + 1);
  if (help) {
    bool ok = true;
    p->helps[name] = unescape_help(text, &ok);
    return ok && p->helps.count(name) ? "" : "bad escape in HELP";
  }
  static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                               "untyped"};
  if (!kTypes.count(text)) return "unknown type '" + text + "'";
  if (p->types.count(name)) return "second TYPE line for " + name;
  if (sampled.count(name)) return "TYPE of " + name + " after its samples";
  p->types[name] = text;
  return "";
}

inline std::string parse_sample(const std::string& line, Parsed* p) {
  Sample s;
  std::size_t k = 0;
  while (k < line.size() && line[k] != '{' && line[k] != ' ') ++k;
  s.name = line.substr(0, k);
  if (!is_name(s.name, true)) return "bad metric name '" + s.name + "'";
  if (k < line.size() && line[k] == '{') {
    if (std::string e = parse_labels(line, &k, &s.labels); !e.empty()) return e;
  }
  if (k >= line.size() || line[k] != ' ') return "no space before the value";
  std::string value = line.substr(k + 1);
  const std::size_t sp = value.find(' ');
  if (sp != std::string::npos) {  // an optional integer timestamp (ms)
    const std::string ts = value.substr(sp + 1);
    if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string::npos) {
      return "bad timestamp '" + ts + "'";
    }
    value = value.substr(0, sp);
  }
  std::optional<double> v = parse_value(value);
  if (!v) return "bad value '" + value + "'";
  s.value = *v;
  p->samples.push_back(std::move(s));
  return "";
}

inline Parsed parse(std::string_view text) {
  Parsed p;
  if (!text.empty() && text.back() != '\n') p.error = "the text does not end with a newline";
  std::set<std::string> sampled;
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size() && p.error.empty();) {
    const std::size_t nl = text.find('\n', at);
    const std::string line(text.substr(at, nl - at));
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    std::string e;
    if (line.empty()) continue;
    if (line[0] == '#') {
      e = parse_comment(line, sampled, &p);
    } else {
      e = parse_sample(line, &p);
      if (e.empty()) sampled.insert(p.samples.back().name);
    }
    if (!e.empty()) p.error = "line " + std::to_string(line_no) + " '" + line + "': " + e;
  }
  return p;
}

}  // namespace gossip::daemon::exposition
