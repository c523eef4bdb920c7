// The ALLREDUCE algorithm of gossipd (training config `algorithm: ALLREDUCE`): centralized
// parallel SGD (C-PSGD), the baseline D-PSGD is measured against. Every iteration t at node i:
//   1. batch ← sampler (the same shard and batch stream as D-PSGD), g_i ← ∇F_i(x_t; batch);
//   2. s ← Σ_j g_j by Gloo's ring allreduce (float32, Gloo's summation order);
//   3. g ← s / n, then the optimizer's single-node step x_{t+1} = x_t − γ_t u(x_t, g)
// (gossip-sim's C-PSGD: sim/simulator.h). Every node holds the same x_t at every t.
//
// Rendezvous: Gloo's peers find each other through a key-value store (gloo::rendezvous::Store).
// TransportStore keeps one over the daemon's own authenticated links, a star around node 0:
// node i sends its keys to node 0, which sends every key to every node. Those links carry the
// handshake (job id, algorithm, topology and model fingerprints), so mismatched nodes are refused
// before Gloo opens any socket. Gloo's own TCP links are plaintext (Debian's Gloo has no TLS).
//
// Failure: a Gloo operation that fails or does not finish within timeouts.deadline_ms (a node
// died, hung or left) ends the run with a checkpoint and kExitNeighbourFailed.
#pragma once

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "daemon/node.h"
#include "net/transport.h"
#include "sgd/backend.h"
#include "sgd/problem.h"
#include "topology/topology.h"

namespace gossip::daemon {

// The peers node `self` of `num_nodes` links to for the rendezvous: node 0 to every other node,
// every other node to node 0.
std::vector<int> star_peers(int num_nodes, int self);

// A gloo::rendezvous::Store replicated over net::Transport control messages (see the file
// comment). Thread-safe: on_control() runs on the transport's io thread, the rest on Gloo's
// caller's. Lifetime: must outlive the transport whose control handler calls it.
class TransportStore : public gloo::rendezvous::Store {
 public:
  // `stop`: a set flag makes wait() give up (SIGTERM during the rendezvous). `timeout`: what
  // wait() without one allows (Gloo's own default is 30 s; gossipd passes timeouts.connect_ms).
  TransportStore(int self, const std::atomic<bool>& stop, std::chrono::milliseconds timeout)
      : self_(self), stop_(stop), timeout_(timeout) {}

  // The transport's control handler (net::Transport::set_control_handler): files StoreSet parts
  // (daemon/control.proto) and ignores other kinds; Corruption for bytes that do not parse.
  Status on_control(int peer, std::string_view control);
  // Links are up with `peers` (star_peers): from now on set() sends, and node 0 sends every key
  // it holds (and every later one) to every peer.
  void attach(net::Transport* transport, std::vector<int> peers);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;  // throws gloo::IoException if absent
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  // Throws gloo::IoException naming the missing keys after `timeout` (or on a stop request).
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  struct Entry {
    std::vector<char> data;
    std::uint64_t received = 0;  // bytes arrived so far (complete when == data.size())
  };
  void send_locked(int peer, const std::string& key, const std::vector<char>& data);
  void publish_locked(const std::string& key, int except);

  const int self_;
  const std::atomic<bool>& stop_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;            // guarded by mu_: a key became complete
  std::map<std::string, Entry> entries_;  // guarded by mu_
  net::Transport* transport_ = nullptr;   // guarded by mu_
  std::vector<int> peers_;                // guarded by mu_
};

// Opens Gloo's TCP device on `host` (this node's address in the topology, so peers on other hosts
// can reach it; the port is ephemeral) and connects every pair through `store`, within
// `connect_timeout`. Operations then time out after `op_timeout`.
Result<std::shared_ptr<gloo::Context>> connect_gloo(int rank, int size, const std::string& host,
                                                    gloo::rendezvous::Store& store,
                                                    std::chrono::milliseconds connect_timeout,
                                                    std::chrono::milliseconds op_timeout);

// The C-PSGD loop of one node over a connected Gloo context (size = the topology's node count).
// The same options, metrics, checkpoints and outputs as run_node (resume is not supported:
// kExitUsage). `stop` is honoured between iterations.
NodeResult run_allreduce(const NodeOptions& options, const topology::Topology& topology,
                         const sgd::Problem& problem, sgd::Backend& backend,
                         const std::shared_ptr<gloo::Context>& context,
                         const std::atomic<bool>& stop, Env& env = Env::system());

}  // namespace gossip::daemon
