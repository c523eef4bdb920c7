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
#include "config/train_config.h"
#include "daemon/algorithm.h"
#include "net/transport.h"
#include "sgd/backend.h"

namespace gossip::algorithms {

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

// The nodes agree, through the rendezvous store, on the iteration they start from: every node
// publishes its own; a mismatch is FailedPrecondition naming every node's (*exit_code
// kExitCannotResume), a store that fails Unavailable (kExitNeighbourFailed, or kExitStopped on a
// stop request).
Status agree_start(TransportStore& store, int self, int num_nodes, std::uint64_t start,
                   const daemon::RunServices& services, int* exit_code);

// ALLREDUCE as an algorithm of the node driver (daemon/algorithm.h), over a connected Gloo context
// (size = the topology's node count). Per iteration, what is averaged depends on the local step:
//  - gossipd's own step (LocalStep::gradient_buffer): the gradient, then the optimizer's
//    single-node step on the mean (C-PSGD, as above);
//  - an attached trainer in an update session: its update u_t, then x_{t+1} = x_t − γ_t·mean(u);
//  - an attached trainer in a plain session: its parameters, x_{t+1} = mean(x_t).
// The mean is Gloo's float32 ring sum divided by n in double and rounded once, the same on every
// node, so every node holds the same x_{t+1}.
//
// Start: the nodes agree on the iteration they start from through the rendezvous store (a run
// whose nodes resumed from different checkpoints would never meet in Gloo's tagged operations):
// a mismatch ends the run before the first iteration with kExitCannotResume, naming every node's
// iteration. A failed or timed-out allreduce abandons the iteration with kExitNeighbourFailed.
class Allreduce final : public daemon::Algorithm {
 public:
  // Node `node`; `context` connected, `store` its rendezvous store, `backend` the node's (for the
  // gradient's copy to host memory); all borrowed for the run.
  Allreduce(int node, const config::TrainConfig& config, std::shared_ptr<gloo::Context> context,
            TransportStore& store, sgd::Backend& backend, std::size_t num_params);

  std::string_view name() const override { return "allreduce"; }
  Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                              daemon::RunServices& services, int* exit_code) override;
  daemon::IterationOutcome iterate(std::uint64_t t, daemon::LocalStep& step,
                                   daemon::ParameterBuffers& buffers) override;

 private:
  // v ← mean over the nodes of v (host memory, num_params floats); false with `why` on failure.
  bool average(std::uint64_t t, float* v, std::string* why);

  const int self_;
  const int num_nodes_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  TransportStore& store_;
  sgd::Backend& backend_;
  const std::size_t num_params_;
  sgd::DeviceBuffer host_;  // what Gloo reduces in place: host memory (page-locked on a GPU node)
  daemon::RunServices* services_ = nullptr;
};

}  // namespace gossip::algorithms
