// A ParameterExchange for n nodes as threads of one test process (test scaffolding, not part of
// gossipd): the unit tests of the D-PSGD loop and of the carry-on policy run over it, with fault
// injection that real sockets cannot give on demand.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "daemon/exchange.h"

namespace gossip::daemon {

// n nodes as threads of one process: node(i) is node i's exchange. Messages are copied into a
// mailbox keyed by (sender, receiver, iteration). fail_node(i) makes every later wait for node
// i's data or verdicts fail at once with Unavailable (a crashed peer); what it sent before stays
// deliverable. Fault injection for tests: poison(from, to, t, value) replaces element 0 of the
// iteration-t buffer from `from` to `to` with `value` (NaN, Inf) on delivery; lose(from, to, t)
// makes that buffer never arrive; lose_verdict(from, to, t) the same for the verdict.
// Thread-safe.
class LocalExchangeHub {
 public:
  explicit LocalExchangeHub(int num_nodes);
  ~LocalExchangeHub();
  ParameterExchange& node(int i);
  void fail_node(int i);
  void poison(int from, int to, std::uint64_t iteration, float value);
  void lose(int from, int to, std::uint64_t iteration);
  void lose_verdict(int from, int to, std::uint64_t iteration);

  class NodeExchange;

 private:
  friend class NodeExchange;
  std::mutex mutex_;  // guards mailbox_ and failed_
  std::condition_variable arrived_;
  std::map<std::tuple<int, int, std::uint64_t>, std::vector<float>> mailbox_;
  std::map<std::tuple<int, int, std::uint64_t>, float> poison_;
  std::set<std::tuple<int, int, std::uint64_t>> lost_, lost_verdicts_;
  std::vector<bool> failed_;
  std::vector<std::unique_ptr<NodeExchange>> nodes_;
};

}  // namespace gossip::daemon
