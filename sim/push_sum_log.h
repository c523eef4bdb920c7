// The logs of an asynchronous push-sum run (gossipd's PUSH_SUM with `staleness: τ`), read and
// checked for sim/push_sum_replay.h, which states the arithmetic. Every node runs on its own clock
// and writes <checkpoint.dir>/node-<i>/push_sum_order.tsv, which messages it mixed at
// each of its iterations (tab-separated text):
//
//   # gossip-sgd push-sum order 1 node <i> nodes <n> start <t0> total <T> staleness <τ>
//   <t>\t<j>:<s> <j>:<s> ...     t = 0 .. T−1, one line each, in order: L_t, the messages node i
//                                consumed at its iteration t ((j, s): node j's message of its
//                                iteration s; "j:se" an empty one), sorted by j then s; may be
//                                empty
//                                a third field "kept o o ...": the out-neighbours it skipped at t
//   end\t<j>:<s> ...             L_end, consumed after the last iteration (the drain)
//   weight\t<w_i^final, %a>
//
// Header line 1, iteration t on line t + 2, `end` on line T + 2, `weight` on line T + 3.
//
// Reading checks everything a replay relies on, so that a replay of logs read here cannot fail
// half-way: each error names the file and line. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "topology/topology.h"

namespace gossip::sim {

// (j, s): node j's message of its iteration s, (z_j^s, w_j^s).
struct PushSumMessage {
  int node = 0;
  std::int64_t iteration = 0;
  bool empty = false;  // "j:se": no mass (its sender was alone), taken but not mixed
  friend bool operator==(const PushSumMessage&, const PushSumMessage&) = default;
};

// One node's log.
struct PushSumOrder {
  std::string path;
  int node = 0;
  int staleness = 1;
  std::vector<std::vector<PushSumMessage>> consumed;  // L_t, t = 0 .. T−1
  std::vector<PushSumMessage> drained;                // L_end
  // kept[t]: the out-neighbours node i skipped at t ("<TAB>kept o ..."): their share p_oi(t) went
  // to its own entry, and no message (i, t) went to them.
  std::vector<std::vector<int>> kept;
  float weight = 1;  // w_i^final as the node ended
  // The first iteration at which the node is alone (it took every in-neighbour's last message, or
  // an empty one, on an earlier line): its own entry is 1 and its messages are empty from there;
  // T if never.
  std::int64_t alone_from = 0;
  // The file's line of iteration t (t = T: the end line) and of the weight.
  static int line_of(std::int64_t t) { return static_cast<int>(t + 2); }
};

// One step of a replay: node `node`'s iteration `iteration`, or its drain (iteration == T).
struct PushSumStep {
  int node = 0;
  std::int64_t iteration = 0;
};

struct PushSumLogs {
  int num_nodes = 0;
  std::int64_t iterations = 0;     // T
  std::vector<PushSumOrder> logs;  // node i's at [i]
  // Every node's T iterations and its drain in a causal order: each step comes after the step
  // that produced each state it reads (z_j^s is there once node j's iteration s − 1 is done).
  std::vector<PushSumStep> order;
};

// Node `node`'s log, `text` read from `path`, alone: the header (format version 1, this node, n =
// `num_nodes`, start 0 — a resumed run cannot be replayed: the messages in flight when it stopped
// are in no checkpoint —, total = `iterations`, staleness ≥ 1), one line per iteration in order,
// the end and weight lines and nothing after them; each entry j:s with 0 ≤ j < n, j ≠ node,
// 0 ≤ s < T, each line's entries sorted by (j, s) without repeats. InvalidArgument "path:line: ..."
// otherwise.
Result<PushSumOrder> parse_push_sum_order(const std::string& text, const std::string& path,
                                          int node, int num_nodes, std::int64_t iterations);

// DIR/node-<i>/push_sum_order.tsv for i = 0 .. n − 1 (n the topology's), each parsed as above,
// then checked against the topology and each other: every entry (j, s) of node i's log is a
// message j sends to i at s (j in topology::push_sum_row(topology, i, s)), consumed once in all of
// node i's log, every message sent is consumed (mass conservation), a message is empty exactly
// when its sender was alone (PushSumOrder::alone_from), all logs have the same staleness, and the
// logs admit a causal order (no cycle of iterations waiting on each other).
// InvalidArgument naming the file (and line) otherwise; a missing file is named as such.
Result<PushSumLogs> read_push_sum_logs(const std::string& dir, const topology::Topology& topology,
                                       std::int64_t iterations, Env& env = Env::system());

}  // namespace gossip::sim
