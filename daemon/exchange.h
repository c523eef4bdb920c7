// ParameterExchange: what the D-PSGD loop needs from the network, and nothing more (after gloo:
// the algorithm never sees a socket). One iteration's exchange sends x_t to the out-neighbours and
// fills one buffer per in-neighbour with that neighbour's x_j^t — iteration-tagged, so a buffer
// only ever receives iteration-t data — and reports, by neighbour id, what did not arrive in time.
//
// Two implementations: TransportExchange over net::Transport (TCP + TLS between processes, the
// product) and LocalExchangeHub (threads of one process, for unit tests of the loop).
//
// Buffers are borrowed: `x` and every inbox stay untouched by the caller until wait() returns,
// and untouched by the exchange afterwards. A PendingExchange is used from one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"

namespace gossip::net {
class Transport;
}

namespace gossip::daemon {

using SteadyTime = std::chrono::steady_clock::time_point;

struct Inbox {
  int peer = -1;
  std::span<float> buffer;  // exactly the model's parameter count
};

struct NeighbourFailure {
  int peer = -1;
  Status status;
};

class PendingExchange {
 public:
  virtual ~PendingExchange() = default;
  // Waits until every send and receive finished or failed, `deadline` passed, or `interrupted()`
  // returned true (polled every few milliseconds; may be empty). Returns the failures (an
  // unfinished receive is a DeadlineExceeded failure of its peer). Call once.
  virtual std::vector<NeighbourFailure> wait(SteadyTime deadline,
                                             const std::function<bool()>& interrupted) = 0;
};

class ParameterExchange {
 public:
  virtual ~ParameterExchange() = default;
  virtual std::unique_ptr<PendingExchange> begin(std::uint64_t iteration, std::span<const float> x,
                                                 std::span<const int> to,
                                                 std::span<const Inbox> from) = 0;
  // Blocks until links to all `peers` are up, or the deadline passes (false).
  virtual bool wait_connected(std::span<const int> peers, SteadyTime deadline) = 0;
  virtual std::uint64_t bytes_sent() const = 0;
  virtual std::uint64_t bytes_received() const = 0;
};

// Over net::Transport (borrowed; must outlive this object).
std::unique_ptr<ParameterExchange> make_transport_exchange(net::Transport& transport);

// n nodes as threads of one process: node(i) is node i's exchange. Messages are copied into a
// mailbox keyed by (sender, receiver, iteration). fail_node(i) makes every later wait for node
// i's data fail at once with Unavailable (a crashed peer). Thread-safe.
class LocalExchangeHub {
 public:
  explicit LocalExchangeHub(int num_nodes);
  ~LocalExchangeHub();
  ParameterExchange& node(int i);
  void fail_node(int i);

  class NodeExchange;

 private:
  friend class NodeExchange;
  std::mutex mutex_;  // guards mailbox_ and failed_
  std::condition_variable arrived_;
  std::map<std::tuple<int, int, std::uint64_t>, std::vector<float>> mailbox_;
  std::vector<bool> failed_;
  std::vector<std::unique_ptr<NodeExchange>> nodes_;
};

}  // namespace gossip::daemon
