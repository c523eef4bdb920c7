// Reading the push-sum order logs (see push_sum_log.h). Strict: the file is machine-written, so a
// line that is not exactly what gossipd writes means another format, a damaged file or a different
// run, and replaying it anyway would produce numbers that look right and are not.
#include "sim/push_sum_log.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "topology/push_sum.h"

namespace gossip::sim {

namespace {

constexpr std::string_view kHeader =
    "# gossip-sgd push-sum order 2 node <i> nodes <n> start <t0> total <T> staleness <tau>";

Status at(const std::string& path, int line, const std::string& what) {
  return invalid_argument(path + ":" + std::to_string(line) + ": " + what);
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// A whole non-negative decimal number (no sign, no spaces).
bool whole(std::string_view text, std::int64_t& out) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string quoted(std::string_view text) {
  std::string q = "'";
  q.append(text).append("'");
  return q;
}

std::string name(const PushSumMessage& m) {
  return std::to_string(m.node) + ":" + std::to_string(m.iteration);
}

// One line's entries "j:s j:s ..." (possibly none) of node `node`'s log.
Result<std::vector<PushSumMessage>> parse_entries(std::string_view text, const std::string& path,
                                                  int line, int node, int num_nodes,
                                                  std::int64_t iterations) {
  std::vector<PushSumMessage> out;
  if (text.empty()) return out;
  for (const std::string_view entry : split(text, ' ')) {
    const std::size_t colon = entry.find(':');
    const bool empty = !entry.empty() && entry.back() == 'e';
    const std::string_view number =
        colon == std::string_view::npos
            ? std::string_view()
            : entry.substr(colon + 1, entry.size() - colon - 1 - (empty ? 1 : 0));
    std::int64_t j = -1, s = -1;
    if (colon == std::string_view::npos || !whole(entry.substr(0, colon), j) || !whole(number, s)) {
      return at(path, line,
                quoted(entry) +
                    ": expected <node>:<iteration>, or <node>:<iteration>e for an empty message "
                    "(entries separated by one space)");
    }
    if (j >= num_nodes) {
      return at(path, line,
                std::string(entry) + ": node " + std::to_string(j) + " is out of range (nodes 0.." +
                    std::to_string(num_nodes - 1) + ")");
    }
    if (s >= iterations) {
      return at(path, line,
                std::string(entry) + ": iteration " + std::to_string(s) +
                    " is out of range (the run has iterations 0.." +
                    std::to_string(iterations - 1) + ")");
    }
    if (j == node) {
      return at(path, line,
                std::string(entry) + ": node " + std::to_string(node) +
                    "'s own message (a node mixes its own state, it does not send it to itself)");
    }
    const PushSumMessage m{static_cast<int>(j), s, empty};
    if (!out.empty()) {
      const PushSumMessage& prev = out.back();
      if (prev.node == m.node && prev.iteration == m.iteration)
        return at(path, line, name(m) + ": the message is consumed twice");
      if (std::pair(prev.node, prev.iteration) > std::pair(m.node, m.iteration)) {
        return at(
            path, line,
            "entries must be sorted by node, then iteration: " + name(prev) + " before " + name(m));
      }
    }
    out.push_back(m);
  }
  return out;
}

Status parse_header(std::string_view text, const std::string& path, int node, int num_nodes,
                    std::int64_t iterations, PushSumOrder& log) {
  const std::vector<std::string_view> f = split(text, ' ');
  std::int64_t v[5] = {};  // node, nodes, start, total, staleness
  bool ok = f.size() == 15 && f[0] == "#" && f[1] == "gossip-sgd" && f[2] == "push-sum" &&
            f[3] == "order" && f[5] == "node" && f[7] == "nodes" && f[9] == "start" &&
            f[11] == "total" && f[13] == "staleness";
  for (int k = 0; ok && k < 5; ++k) ok = whole(f[6 + 2 * k], v[k]);
  if (!ok) return at(path, 1, "not a push-sum order header; expected " + quoted(kHeader));
  if (f[4] != "2") {
    return at(path, 1, "format version " + std::string(f[4]) + "; this gossip-sim reads version 2");
  }
  if (v[0] != node) {
    return at(path, 1,
              "the header says node " + std::to_string(v[0]) + ", but this is node " +
                  std::to_string(node) + "'s log");
  }
  if (v[1] != num_nodes) {
    return at(path, 1,
              "the header says nodes " + std::to_string(v[1]) + ", but the replay has " +
                  std::to_string(num_nodes) + " (--nodes, the topology)");
  }
  if (v[2] != 0) {
    return at(path, 1,
              "start " + std::to_string(v[2]) +
                  ": a resumed run cannot be replayed (the messages in flight when it stopped "
                  "are in no checkpoint); replay a run that started at iteration 0");
  }
  if (v[3] != iterations) {
    return at(path, 1,
              "the header says total " + std::to_string(v[3]) + ", but the config runs " +
                  std::to_string(iterations) + " iterations");
  }
  if (v[4] < 1 || v[4] > (std::int64_t{1} << 30)) {
    return at(path, 1, "staleness " + std::to_string(v[4]) + ": must be >= 1");
  }
  log.staleness = static_cast<int>(v[4]);
  return Status::ok();
}

// "<key>\t<rest>" of line `line` (1-based) of `lines`, or an error naming what was expected.
Result<std::string_view> keyed(const std::vector<std::string_view>& lines, int line,
                               std::string_view key, const std::string& path) {
  const auto k = static_cast<std::size_t>(line - 1);
  if (k >= lines.size()) {
    return at(path, line,
              "the log ends here; expected the line '" + std::string(key) +
                  "<tab>...' (one line per iteration of the header's total, then end and weight)");
  }
  const std::string_view text = lines[k];
  if (text.starts_with("reconcile\t")) {
    return at(path, line,
              "a reconciliation: the node corrected its weight when a link came back (a neighbour "
              "restarted, or the link was lost, under carry-on); a run with a fault is not "
              "replayed");
  }
  const std::size_t tab = text.find('\t');
  if (tab == std::string_view::npos || text.substr(0, tab) != key) {
    return at(path, line,
              quoted(text.substr(0, 40)) + ": expected '" + std::string(key) + "<tab>...'");
  }
  return text.substr(tab + 1);
}

// The iteration (or drain, t == E) and line a message consumed by node i sits on, for errors.
std::string where(const PushSumOrder& log, std::int64_t t) {
  return log.path + ":" + std::to_string(PushSumOrder::line_of(t)) +
         (t < log.ran() ? ": iteration " + std::to_string(t) : std::string(": the end line"));
}

// The messages node i takes at its step t (t == E: the drain).
const std::vector<PushSumMessage>& taken_at(const PushSumOrder& log, std::int64_t t) {
  return t < log.ran() ? log.consumed[static_cast<std::size_t>(t)] : log.drained;
}

// The steps of every node in a causal order (PushSumLogs::order), or the cycle that prevents one.
Result<std::vector<PushSumStep>> causal_order(const std::vector<PushSumOrder>& logs) {
  const int n = static_cast<int>(logs.size());
  // next[i]: node i's next step (E_i: its drain, E_i + 1: done); z_j^s exists once next[j] >= s,
  // an empty message of j once next[j] >= E_j.
  std::vector<std::int64_t> next(static_cast<std::size_t>(n), 0);
  std::vector<std::vector<int>> waiters(static_cast<std::size_t>(n));  // nodes waiting on node j
  const auto blocking = [&](int i) -> const PushSumMessage* {
    for (const PushSumMessage& m : taken_at(logs[i], next[i])) {
      const std::int64_t needs = m.empty ? logs[m.node].ran() : m.iteration;
      if (next[m.node] < needs) return &m;
    }
    return nullptr;
  };
  std::vector<PushSumStep> order;
  std::size_t steps = 0;
  for (const PushSumOrder& log : logs) steps += static_cast<std::size_t>(log.ran()) + 1;
  order.reserve(steps);
  std::deque<int> queue;
  for (int i = 0; i < n; ++i) queue.push_back(i);
  while (!queue.empty()) {
    const int i = queue.front();
    queue.pop_front();
    while (next[i] <= logs[i].ran()) {
      if (const PushSumMessage* m = blocking(i)) {
        waiters[m->node].push_back(i);
        break;
      }
      order.push_back({i, next[i]});
      ++next[i];
      for (const int w : waiters[i]) queue.push_back(w);
      waiters[i].clear();
    }
  }
  for (int i = 0; i < n; ++i) {
    if (next[i] > logs[i].ran()) continue;
    const PushSumMessage& m = *blocking(i);
    return invalid_argument(where(logs[i], next[i]) + ": causally impossible: it consumes " +
                            name(m) + (m.empty ? "e" : "") + ", which node " +
                            std::to_string(m.node) + " sends only after " +
                            where(logs[m.node], next[m.node]) +
                            ", which waits in turn: the logs wait on each other in a cycle");
  }
  return order;
}

// Every entry of node i's log is a message j sends to i at s (j in push_sum_row(i, s)), none is
// consumed twice, and the log ends before T exactly where node i is alone.
Status check_against_topology(const PushSumOrder& log, const topology::Topology& topology,
                              std::int64_t iterations) {
  const int i = log.node;
  const std::int64_t T = iterations, E = log.ran();
  struct Hash {
    std::size_t operator()(const std::pair<int, std::int64_t>& k) const {
      return std::hash<std::int64_t>()(k.second * 1000003 + k.first);
    }
  };
  std::unordered_map<std::pair<int, std::int64_t>, std::int64_t, Hash> seen;  // (j, s) -> t
  for (std::int64_t t = 0; t <= E; ++t) {
    for (const PushSumMessage& m : taken_at(log, t)) {
      const auto row = topology::push_sum_row(topology, i, m.iteration);
      if (std::none_of(row.begin(), row.end(), [&](const auto& e) { return e.first == m.node; })) {
        return invalid_argument(where(log, t) + ": " + name(m) + ": node " +
                                std::to_string(m.node) + " does not send to node " +
                                std::to_string(i) + " at iteration " + std::to_string(m.iteration) +
                                " (topology '" + topology.name() + "')");
      }
      const auto [it, fresh] = seen.emplace(std::pair(m.node, m.iteration), t);
      if (!fresh) {
        return invalid_argument(where(log, t) + ": " + name(m) +
                                ": the message is consumed twice (also on line " +
                                std::to_string(PushSumOrder::line_of(it->second)) + ")");
      }
    }
  }
  // Alone from the line after the one that took the last in-neighbour's last message (at once when
  // no in-neighbour sends within T; never for a node without in-neighbours).
  std::set<int> senders;
  for (std::int64_t p = 0; p < topology.period(); ++p) {
    for (const auto& [j, w] : topology::push_sum_row(topology, i, p)) {
      if (j != i) senders.insert(j);
    }
  }
  std::int64_t alone = senders.empty() ? T : 0;
  int waiting = -1;  // an in-neighbour whose last message is not taken before E
  for (const int j : senders) {
    const std::int64_t last = topology::push_sum_last_send(topology, j, i, T);
    if (last < 0) continue;
    const auto it = seen.find(std::pair(j, last));
    if (it == seen.end() || it->second >= E) {
      alone = T;
      waiting = j;
      continue;
    }
    alone = std::max(alone, std::min(T, it->second + 1));
  }
  if (E < std::min(alone, T)) {
    return invalid_argument(where(log, E) + ": the log ends after iteration " +
                            std::to_string(E - 1) + " of " + std::to_string(T) + ", but node " +
                            std::to_string(i) + " is not alone there: node " +
                            std::to_string(waiting) + "'s last message to it (iteration " +
                            std::to_string(topology::push_sum_last_send(topology, waiting, i, T)) +
                            ") is not taken before (a node ends early only when alone)");
  }
  if (E > alone) {
    return invalid_argument(where(log, alone) + ": node " + std::to_string(i) +
                            " is alone here (every in-neighbour's last message is taken on an "
                            "earlier line), so its log ends here; it has " +
                            std::to_string(E - alone) + " more iteration line(s)");
  }
  return Status::ok();
}

}  // namespace

Result<PushSumOrder> parse_push_sum_order(const std::string& text, const std::string& path,
                                          int node, int num_nodes, std::int64_t iterations) {
  PushSumOrder log;
  log.path = path;
  log.node = node;
  std::vector<std::string_view> lines = split(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the last line's newline
  if (lines.empty()) return at(path, 1, "empty; expected " + quoted(kHeader));
  GOSSIP_RETURN_IF_ERROR(parse_header(lines[0], path, node, num_nodes, iterations, log));
  const std::int64_t T = iterations;
  for (std::int64_t t = 0;; ++t) {
    const int line = PushSumOrder::line_of(t);
    // The end line after any number of iteration lines up to T (a node alone ends early).
    const bool last = t == T || (static_cast<std::size_t>(line) <= lines.size() &&
                                 lines[static_cast<std::size_t>(line - 1)].starts_with("end\t"));
    GOSSIP_ASSIGN_OR_RETURN(std::string_view rest,
                            keyed(lines, line, last ? "end" : std::to_string(t), path));
    std::vector<int> kept;
    if (const std::size_t tab = rest.find('\t'); tab != std::string_view::npos) {
      const std::string_view field = rest.substr(tab + 1);
      rest = rest.substr(0, tab);
      const std::vector<std::string_view> words = split(field, ' ');
      if (last || words.size() < 2 || words[0] != "kept") {
        return at(path, line, quoted(field) + ": expected 'kept <node> ...' after the entries");
      }
      for (std::size_t k = 1; k < words.size(); ++k) {
        std::int64_t o = -1;
        if (!whole(words[k], o) || o >= num_nodes || o == node ||
            (!kept.empty() && o <= kept.back())) {
          return at(path, line,
                    quoted(words[k]) + ": expected a node id other than this node's, increasing");
        }
        kept.push_back(static_cast<int>(o));
      }
    }
    GOSSIP_ASSIGN_OR_RETURN(auto entries,
                            parse_entries(rest, path, line, node, num_nodes, iterations));
    if (last) {
      log.drained = std::move(entries);
      break;
    }
    log.kept.push_back(std::move(kept));
    log.consumed.push_back(std::move(entries));
  }
  const int weight_line = PushSumOrder::line_of(log.ran() + 1);
  GOSSIP_ASSIGN_OR_RETURN(const std::string_view w, keyed(lines, weight_line, "weight", path));
  const std::string w_text(w);
  char* end = nullptr;
  const double value = std::strtod(w_text.c_str(), &end);
  if (w_text.empty() || end != w_text.c_str() + w_text.size() || !std::isfinite(value) ||
      !(value > 0) || static_cast<double>(static_cast<float>(value)) != value) {
    return at(path, weight_line,
              "weight '" + w_text + "': expected w_i^final, a positive float32 printed with %a");
  }
  log.weight = static_cast<float>(value);
  if (lines.size() > static_cast<std::size_t>(weight_line)) {
    return at(path, weight_line + 1, "unexpected line after the weight line");
  }
  return log;
}

Result<PushSumLogs> read_push_sum_logs(const std::string& dir, const topology::Topology& topology,
                                       std::int64_t iterations, Env& env) {
  PushSumLogs out;
  out.num_nodes = topology.num_nodes();
  out.iterations = iterations;
  for (int i = 0; i < out.num_nodes; ++i) {
    const std::string path = dir + "/node-" + std::to_string(i) + "/push_sum_order.tsv";
    Result<std::string> text = env.read_file(path);
    if (!text.is_ok()) {
      if (text.status().code() == StatusCode::kNotFound) {
        return invalid_argument(path + ": missing: node " + std::to_string(i) +
                                "'s push-sum order log (gossipd writes it under checkpoint.dir; "
                                "the replay needs one for every node 0.." +
                                std::to_string(out.num_nodes - 1) + ")");
      }
      return invalid_argument(path + ": " + std::string(text.status().message()));
    }
    GOSSIP_ASSIGN_OR_RETURN(PushSumOrder log,
                            parse_push_sum_order(*text, path, i, out.num_nodes, iterations));
    if (i > 0 && log.staleness != out.logs[0].staleness) {
      return invalid_argument(path + ":1: staleness " + std::to_string(log.staleness) + ", but " +
                              out.logs[0].path + " says " + std::to_string(out.logs[0].staleness) +
                              ": not logs of one run");
    }
    GOSSIP_RETURN_IF_ERROR(check_against_topology(log, topology, iterations));
    out.logs.push_back(std::move(log));
  }
  // Kept out-neighbours are out-neighbours at t, never at the sender's last iteration to them;
  // every message sent is consumed once, and none that was kept or never sent; a message is empty
  // exactly when its sender had ended (it is the sender's last to this node, sent as it ended).
  for (const PushSumOrder& log : out.logs) {
    const int i = log.node;
    std::map<std::pair<int, std::int64_t>, std::pair<std::int64_t, bool>> taken;  // -> (t, empty)
    for (std::int64_t t = 0; t <= log.ran(); ++t) {
      for (const PushSumMessage& m : taken_at(log, t)) {
        taken.emplace(std::pair(m.node, m.iteration), std::pair(t, m.empty));
      }
    }
    for (std::int64_t t = 0; t < log.ran(); ++t) {
      for (const int o : log.kept[static_cast<std::size_t>(t)]) {
        const auto row = topology::push_sum_row(topology, o, t);
        if (std::none_of(row.begin(), row.end(), [&](const auto& e) { return e.first == i; }) ||
            t == topology::push_sum_last_send(topology, i, o, iterations)) {
          return invalid_argument(where(log, t) + ": kept " + std::to_string(o) +
                                  ": not an out-neighbour at this iteration, or the last "
                                  "iteration that sends to it (never kept)");
        }
      }
    }
    for (std::int64_t s = 0; s < iterations; ++s) {
      for (const auto& [j, p] : topology::push_sum_row(topology, i, s)) {
        if (j == i) continue;
        const PushSumOrder& sender = out.logs[static_cast<std::size_t>(j)];
        const bool ended = s >= sender.ran();
        const bool kept =
            !ended && std::binary_search(sender.kept[static_cast<std::size_t>(s)].begin(),
                                         sender.kept[static_cast<std::size_t>(s)].end(), i);
        const bool sent =
            ended ? s == topology::push_sum_last_send(topology, j, i, iterations) : !kept;
        const auto it = taken.find(std::pair(j, s));
        if (it != taken.end() && !sent) {
          return invalid_argument(
              where(log, it->second.first) + ": " + name({j, s}) + ": node " + std::to_string(j) +
              (kept ? " kept that share (" + sender.path + ")"
                    : " ran " + std::to_string(sender.ran()) + " iterations (" + sender.path +
                          ") and sent no such message; only its last to this node, empty"));
        }
        if (it == taken.end() && sent) {
          return invalid_argument(where(log, log.ran()) + ": node " + std::to_string(j) +
                                  "'s message " + name({j, s}) + (ended ? "e" : "") + " to node " +
                                  std::to_string(i) +
                                  " is consumed nowhere; every message sent is consumed once (at "
                                  "the latest on the end line), or the weights lose mass");
        }
        if (it != taken.end() && it->second.second != ended) {
          return invalid_argument(where(log, it->second.first) + ": " + name({j, s}) +
                                  (ended ? "" : "e") + ": node " + std::to_string(j) + " ran " +
                                  std::to_string(sender.ran()) + " iterations (" + sender.path +
                                  "), so the message is " +
                                  (ended ? "empty (j:se): its last to this node, sent as it ended"
                                         : "not empty (j:s)"));
        }
      }
    }
  }
  GOSSIP_ASSIGN_OR_RETURN(out.order, causal_order(out.logs));
  return out;
}

}  // namespace gossip::sim
