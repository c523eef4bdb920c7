// Network cost model: the simulated wall time of each iteration of C-PSGD (parameter server or
// ring allreduce) and D-PSGD, from the message size, link latency and bandwidth, and the per-step
// compute time. The communication terms are topology/comm_cost.h's (Lian et al., NeurIPS 2017,
// Table 1; docs/design.md §1), the same that gossip-topo analyze prints:
//
//   C-PSGD, parameter server:  compute + 2(α + n·M/B)                 (the server's link moves n·M)
//   C-PSGD, ring allreduce:    compute + 2(n−1)α + 2((n−1)/n)·M/B
//   D-PSGD:                    max(compute, α + Δ·M/B)                 (exchange overlaps compute)
//
// Measured terms beyond Table 1 (all 0 or 1 by default, which gives the Table 1 form; B is the
// payload bandwidth, Link::payload_fraction). Nodes sharing a host's cores get s of a core each
// (cpu_share), every payload byte a node sends or receives costs κ of CPU (cpu_s_per_byte), and
// every message o (message_overhead_s). With V a node's payload bytes sent + received and k its
// messages sent + received in the iteration:
//   C-PSGD:  c/s + max(comm, κ·V/s + k·o)         (k = 2n at the server, 4(n−1) in the ring: the
//                                                  allreduce pipelines its steps with the wire)
//   D-PSGD:  max((c + κ·V)/s, α + Δ·M/B) + k·o     (V = k·M; o is paid once the data is there)
//
// The ring allreduce is Table 1's by default. `allreduce: kGloo` prices Gloo's instead
// (gloo::allreduce with Algorithm::RING, what gossipd's ALLREDUCE runs): the buffer is cut into k
// segments (k the multiple of n at or above max(⌈M / 1 MiB⌉, 2n), m = k/n per rank, S = M/k bytes
// each), two segments are in flight, and a segment's send waits for the receiver's ready message
// (a rendezvous: α there, α + S/B back). Each of the 2(n−1)·m segment hops then takes
//   max(S/B, (2α + S/B) / 2)
// so bandwidth-bound it is Table 1 without the latency term (the window hides it) and
// latency-bound it is 2(n−1)·m·α = 4(n−1)α for m = 2, twice Table 1's. Its k = 2(n−1)·m messages
// per node (4(n−1) for m = 2) pay o.
//
// `allreduce: kGlooHops` prices the ring of rounds (DiLoCo: algorithms/gloo_ring.h), which sends
// one chunk of ⌈M/n⌉ bytes per step over Gloo's unbound buffers: a step's send waits for the
// receiver's ready message, posted when the receiver starts the step, and the next step needs
// this step's chunk, so nothing overlaps. Each of its 2(n−1) steps takes 2α + ⌈M/n⌉/B.
//
// M is the message (model) size in bytes, B the link bandwidth in bytes/s (flags take bits/s), α
// the one-way latency in seconds, Δ the largest in- or out-degree of the iteration's graph (a node
// sends to all its out-neighbours and receives from all its in-neighbours over one full-duplex
// link).
//
// Stragglers: each node's compute time at each iteration is multiplied by a slowdown factor drawn
// from a seeded distribution (the same draws for every algorithm, so comparisons are paired). A
// synchronous round waits for the slowest participant it depends on: C-PSGD waits for all n
// nodes; a D-PSGD node waits for its own gradient and for the models of its in-neighbours. The
// D-PSGD clock therefore keeps one start time per node and advances by the recurrence
//
//   S_i^{t+1} = max( S_i^t + (c_i^t + κ·V_i)/s ,  max_{j ∈ N_in(i)} S_j^t + α + Δ·M/B ) + k_i·o
//
// (node j sends x_j^t the moment it starts iteration t), and reports max_i S_i^t — the moment
// every node has finished iteration t. Without stragglers this is t·max(compute, α + ΔM/B).
//
// Asynchronous gossip (push-sum with staleness, CostInputs::asynchronous): no node waits for
// another. Node j pushes to out-neighbour i at the start of its iteration t unless its previous
// message to i is not yet taken — arrived (α + M/B after it left j's egress, one message at a time
// there) and the receiver at its iteration t (S_i^t) — in which case it skips (a skip notice). So
// S_j^{t+1} = S_j^t + (c_j^t + κ·V_j)/s_j + k_j·o with V_j the bytes it sent and took. A node
// whose in-neighbours have ended ends (it is alone), so the clock reports
// max_i min(S_i^t, max_{j ∈ in-neighbours of i so far} S_j^t); under a slow host (kNode) the others
// share the CPU the slow one leaves: s = (n·cpu_share − cpu_share/factor)/(n − 1), at most 1.
//
// All times in seconds, sizes in bytes, bandwidths in bits per second at the interface. Classes
// here are values; not thread-safe to mutate concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "topology/comm_cost.h"

namespace gossip::sim {

// The link and the per-iteration communication closed forms are topology/comm_cost.h's, shared with
// gossip-topo's advisor.
using Network = topology::Link;
using topology::gossip_comm_s;
using topology::parameter_server_comm_s;
using topology::ring_allreduce_comm_s;

// Per-node, per-iteration compute slowdown, or one slow host (its compute, or its link).
struct StragglerModel {
  enum class Kind { kNone, kBernoulli, kLognormal, kNode, kLink };
  Kind kind = Kind::kNone;
  double probability = 0;  // kBernoulli: chance that a node is slow at an iteration
  double factor = 1;       // kBernoulli, kNode, kLink: the slowdown (≥ 1)
  double sigma = 0;        // kLognormal: slowdown = exp(sigma·z), z ~ N(0, 1)
  int node = -1;           // kNode, kLink: the slow host
  std::uint64_t seed = 0;

  // The compute slowdown of `node` at `iteration`: a pure function of (seed, iteration, node), so
  // every algorithm and every sweep point sees the same draws.
  double slowdown(std::int64_t iteration, int node) const;
  // How many times longer `node`'s sends take (kLink: its egress at 1/factor of the rate).
  double link_slowdown(int node) const {
    return kind == Kind::kLink && node == this->node ? factor : 1.0;
  }
  std::string to_string() const;
};

// Parses "none", "bernoulli:P:F" (each node is F times slower with probability P at each
// iteration), "lognormal:SIGMA", "node:K:F" (node K's CPU work, its compute and its per-byte
// network processing, F times slower at every iteration: a host with 1/F of its share of a core) or
// "link:K:F" (node K's egress link at 1/F of the rate: its sends take F times as long on the wire).
Result<StragglerModel> parse_straggler_model(std::string_view spec, std::uint64_t seed);

// Bandwidths, durations and counts on the command line and in sweep values are parsed by
// common/units.h (parse_bandwidth_bps, parse_duration_s, parse_count), as in gossip-topo.

enum class Scheme { kParameterServer, kRingAllreduce, kGossip };
std::string_view scheme_name(Scheme scheme);

// How a ring allreduce is priced (see the top of this file).
enum class AllreduceModel { kTable1, kGloo, kGlooHops };
std::string_view allreduce_model_name(AllreduceModel model);
// "table1" | "gloo" | "gloo-hops"
Result<AllreduceModel> parse_allreduce_model(std::string_view name);

// Gloo's ring allreduce: segments per rank m and bytes per segment S for n nodes and M bytes.
struct GlooSegments {
  int per_rank = 0;
  double bytes = 0;
};
GlooSegments gloo_segments(int num_nodes, double message_bytes);
// Seconds of one Gloo ring allreduce of M bytes over n nodes (no compute, no per-message cost).
double gloo_ring_allreduce_comm_s(int num_nodes, double message_bytes, const Network& net);
// Seconds of the ring of rounds: 2(n−1)·(2α + ⌈M/n⌉/B) (no compute, no per-message cost).
double gloo_hops_allreduce_comm_s(int num_nodes, double message_bytes, const Network& net);
// Seconds of one ring allreduce as `model` prices it (Table 1's ring_allreduce_comm_s, Gloo's, or
// the ring of rounds).
double allreduce_comm_s(AllreduceModel model, int num_nodes, double message_bytes,
                        const Network& net);

struct CostInputs {
  Network net;
  double message_bytes = 0;  // bytes of one model (float32: 4 × parameters)
  double compute_s = 0;      // one local gradient step at an unslowed node on a core of its own
  StragglerModel straggler;
  // Nodes that share a host's cores: the share of a core each node gets (cores / nodes on the
  // host, at most 1), and the CPU seconds each payload byte a node sends or receives costs (the
  // kernel's TCP path and the receiver's copy). With the defaults (1, 0) CPU is never the limit.
  double cpu_share = 1.0;
  double cpu_s_per_byte = 0.0;
  // The fixed cost of one message (LogP's o: system calls, wake-ups, control messages), per
  // message a node sends or receives; 0: none.
  double message_overhead_s = 0.0;
  AllreduceModel allreduce = AllreduceModel::kTable1;
  // Gossip: whether a node's exchange runs during its compute (D-PSGD's order, sending x^t at the
  // start of iteration t) or only once its compute is done (local-step gossip without overlap sends
  // the message of its round's H steps). false: S_i^{t+1} = max(S_i^t + c_i, max_j S_j^t + c_j +
  // α + ΔM/B) + k_i·o, without stragglers t·(c + α + ΔM/B + k·o).
  bool gossip_overlaps_compute = true;
  // Gossip: asynchronous push-sum (training config staleness ≥ 1), priced as above.
  bool asynchronous = false;
};

// The simulated clock of one run. Feed it the iterations in order.
class SimClock {
 public:
  SimClock(Scheme scheme, int num_nodes, CostInputs inputs);

  // Advances past `iteration`. For kGossip, in_neighbours[i] lists the in-neighbours of node i
  // (without i) in this iteration's graph, and max_degree its largest in- or out-degree; the
  // centralised schemes ignore both.
  void advance(std::int64_t iteration, const std::vector<std::vector<int>>& in_neighbours,
               int max_degree);

  // Time at which every node has finished all iterations fed so far.
  double now_s() const { return now_s_; }
  Scheme scheme() const { return scheme_; }
  // Communication time of one iteration (for gossip, per link at the last advance()).
  double last_comm_s() const { return last_comm_s_; }

 private:
  Scheme scheme_;
  int num_nodes_;
  CostInputs in_;
  void advance_asynchronous(std::int64_t iteration,
                            const std::vector<std::vector<int>>& in_neighbours);

  std::vector<double> start_s_;  // gossip: when each node starts its next iteration
  std::vector<double> next_s_;
  // Asynchronous gossip: when each node's egress is free, when each edge's last message is taken
  // (key j·n + i for j → i), and each node's in-neighbours so far.
  std::vector<double> egress_free_s_;
  std::vector<double> taken_s_;
  std::vector<std::vector<bool>> ever_in_;
  double now_s_ = 0;
  double last_comm_s_ = 0;
};

}  // namespace gossip::sim
