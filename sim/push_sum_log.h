// The logs of an asynchronous push-sum run (gossipd's PUSH_SUM with `staleness: τ`), read and
// checked for sim/push_sum_replay.h, which states the arithmetic. Every node runs on its own clock
// and writes <checkpoint.dir>/node-<i>/push_sum_order.tsv, which messages it mixed at
// each of its iterations (tab-separated text):
//
//   # gossip-sgd push-sum order 2 node <i> nodes <n> start <t0> total <T> staleness <τ>
//   <t>\t<j>:<s> <j>:<s> ...     t = 0 .. E−1, one line each, in order: L_t, the messages node i
//                                consumed at its iteration t ((j, s): node j's message of its
//                                iteration s; "j:se" an empty one), sorted by j then s; may be
//                                empty
//                                a third field "kept o o ...": the out-neighbours it skipped at t
//   end\t<j>:<s> ...             L_end, consumed after the last iteration (the drain)
//   weight\t<w_i^final, %a>
//
// E ≤ T: the node ran E iterations. It ends before T exactly when it is alone: every in-neighbour
// j over the topology's period that sends to it before T had its last message (j,
// topology::push_sum_last_send(j, i, T)) taken on a line before E. Its last message to each
// out-neighbour o whose last iteration that sends to o is E or later is then an empty one, (i,
// push_sum_last_send(i, o, T)), sent as it ends; no other message is empty.
//
// Header line 1, iteration t on line t + 2, `end` on line E + 2, `weight` on line E + 3.
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
  bool empty = false;  // "j:se": no mass (its sender had ended), taken but not mixed
  friend bool operator==(const PushSumMessage&, const PushSumMessage&) = default;
};

// One node's log.
struct PushSumOrder {
  std::string path;
  int node = 0;
  int staleness = 1;
  std::vector<std::vector<PushSumMessage>> consumed;  // L_t, t = 0 .. E−1
  std::vector<PushSumMessage> drained;                // L_end
  // kept[t]: the out-neighbours node i skipped at t ("<TAB>kept o ..."): their share p_oi(t) went
  // to its own entry, and no message (i, t) went to them.
  std::vector<std::vector<int>> kept;
  float weight = 1;  // w_i^final as the node ended
  // E: the iterations the node ran (its drain is step E).
  std::int64_t ran() const { return static_cast<std::int64_t>(consumed.size()); }
  // The file's line of iteration t (t = E: the end line; E + 1: the weight line).
  static int line_of(std::int64_t t) { return static_cast<int>(t + 2); }
};

// One step of a replay: node `node`'s iteration `iteration`, or its drain (iteration == its log's
// ran()).
struct PushSumStep {
  int node = 0;
  std::int64_t iteration = 0;
};

struct PushSumLogs {
  int num_nodes = 0;
  std::int64_t iterations = 0;     // T
  std::vector<PushSumOrder> logs;  // node i's at [i]
  // Every node's iterations and its drain in a causal order: each step comes after the step that
  // produced each message it takes (z_j^s is there once node j's iteration s − 1 is done; an
  // empty message once node j ran all its iterations).
  std::vector<PushSumStep> order;
};

// Node `node`'s log, `text` read from `path`, by itself: the header (format version 2, this node,
// n = `num_nodes`, start 0 — a resumed run cannot be replayed: the messages in flight when it
// stopped are in no checkpoint —, total = `iterations`, staleness ≥ 1), one line per iteration in
// order (at most T), the end and weight lines and nothing after them; each entry j:s with
// 0 ≤ j < n, j ≠ node, 0 ≤ s < T, each line's entries sorted by (j, s) without repeats.
// InvalidArgument "path:line: ..." otherwise.
Result<PushSumOrder> parse_push_sum_order(const std::string& text, const std::string& path,
                                          int node, int num_nodes, std::int64_t iterations);

// DIR/node-<i>/push_sum_order.tsv for i = 0 .. n − 1 (n the topology's), each parsed as above,
// then checked against the topology and each other: every entry (j, s) of node i's log is a
// message j sends to i at s (j in topology::push_sum_row(topology, i, s)), consumed once in all of
// node i's log; every message sent is consumed (mass conservation); a node's log ends before T
// exactly where it is alone, and a message is empty exactly when its sender had ended (the rules
// above); all logs have the same staleness, and the logs admit a causal order (no cycle of
// iterations waiting on each other). InvalidArgument naming the file (and line) otherwise; a
// missing file is named as such.
Result<PushSumLogs> read_push_sum_logs(const std::string& dir, const topology::Topology& topology,
                                       std::int64_t iterations, Env& env = Env::system());

}  // namespace gossip::sim
