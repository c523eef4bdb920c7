// PUSH_SUM with bounded staleness (training config `staleness: τ` ≥ 1): asynchronous Stochastic
// Gradient Push, as an algorithm of the node driver (daemon/algorithm.h). Every node runs on its
// own clock: it pushes its share to its out-neighbours, mixes the messages that have arrived, and
// waits for an in-neighbour only once it has run τ iterations without hearing from it. A slow
// node then slows nobody who does not wait for it, and push-sum's weights keep the average exact
// whatever arrives when (docs/design.md §1, "Bounded staleness").
//
// Node i, its iteration t (state z_i^t, the driver's buffers, and the weight w_i^t):
//   1. send (z_i^t, w_i^t, t) to each o ∈ N_out(i, t), without waiting. An out-neighbour that has
//      not yet taken the previous message to it (its acknowledgement has not come) is skipped: its
//      share p_oi(t) is added to the own entry (logged as "kept o") and o gets a skip notice,
//      except at the last iteration that sends to it. So at most one message with mass is on an
//      edge, and a slow reader gains weight at its own rate, not at its senders';
//   2. the local step's gradient at z_i^t;
//   3. from each j ∈ N_in(i, t), take the oldest message that has arrived, if any (lock step
//      takes one; every message is acknowledged as it is taken); if i has run τ iterations
//      without a message or a skip notice from j (and j has more to send), wait for either;
//   4. row: the own entry (i, p_ii(t)) and one entry (j, p_ij(s)) per message (j, s), sorted by j
//      then s; topology::push_sum_mix of the row and the terms' weights; u_t ← the direction at
//      z_i^t; z_i^{t+1} = Σ_k c_k z_k − γ_t u_t in one fused pass (the step on the de-biased
//      parameters, not scaled by 1 / w_i^{t+1} as in lock step: a node that pushed for several
//      iterations without taking a message holds a small weight).
// A node alone — every in-neighbour has sent it its last message — ends its run there
// (Algorithm::ends_at): no mass comes back to it, so whatever it computed from then on would reach
// nobody. Its last message to each out-neighbour that still expects one is an empty one (flag
// kEmpty: no mass). A slow node thus ends with the job instead of training on alone. After its
// last iteration the node drains: it takes every message still due to it and mixes it in (own
// weight 1, no step), so no mass is in flight when the run ends and Σ_i w_i = n.
//
// Messages on one edge are numbered 0, 1, 2, ... in the order sent (the transport's tag), so a
// receiver posts its next receives without knowing the sender's clock. A message is the
// parameters, then the weight, the sender's iteration s (two floats holding its 64 bits) and flags
// (kEmpty: no mass, the sender's last message to this node, labelled with the iteration s it would
// have been sent at; sent by a node that ended early, and by a sender resumed past its last
// iteration that sends to this node). A receiver knows j's last message to it: the last s < T at
// which j sends to it (topology::push_sum_last_send).
//
// Each iteration's messages, as mixed, are logged to <node checkpoint dir>/push_sum_order.tsv
// ("t<TAB>j:s j:s ...[<TAB>kept o ...]", an empty message as "j:se", one line per iteration run,
// then "end<TAB>..." and "weight<TAB>%a"), which `gossip-sim run --replay-push-sum` replays bit
// for bit.
//
// Faults: fail-stop (a failed send or receive, or a deadline passed, ends the run). A checkpoint
// holds z_i and w_i; messages in flight at a stop are in no checkpoint, so a resumed job goes on
// with the mass it has (its models still agree in the limit; the average is of what remains).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "daemon/algorithm.h"
#include "daemon/exchange.h"
#include "daemon/exit_codes.h"
#include "net/transport.h"
#include "topology/topology.h"

namespace gossip::algorithms {

class AsyncPushSum final : public daemon::Algorithm {
 public:
  // The floats after the parameters: weight, iteration (low, high 32 bits), flags.
  static constexpr std::size_t kHeaderFloats = 4;
  static constexpr std::uint32_t kEmpty = 1;  // flags: no mass, the sender's last message
  static std::uint64_t message_floats(std::uint64_t num_params) {
    return num_params + kHeaderFloats;
  }
  // Bytes of message buffers a node holds at staleness τ with `senders` in-neighbours and
  // `receivers` out-neighbours over the topology's period: τ + 1 posted receives per in-neighbour,
  // at most two unfinished sends per out-neighbour.
  static std::uint64_t buffer_bytes(std::uint64_t tau, std::uint64_t senders,
                                    std::uint64_t receivers, std::uint64_t num_params);

  // Node `node` of `topology` under `config` (staleness ≥ 1), over `exchange`; the order log goes
  // to `log_dir`/push_sum_order.tsv ("" for none). All borrowed for the run.
  // What the neighbours' control messages say, by node id, written by the transport's thread:
  // how many of this node's messages each out-neighbour has taken ("psa <count>", sent as it takes
  // one), and how many skip notices each in-neighbour sent ("psk": it kept its share at an
  // iteration that sends here). on_control reads them; other control messages are ignored.
  struct Acks {
    explicit Acks(int n)
        : taken(static_cast<std::size_t>(n)), skipped(static_cast<std::size_t>(n)) {}
    std::vector<std::atomic<std::uint64_t>> taken;
    std::vector<std::atomic<std::uint64_t>> skipped;  // skip notices from each in-neighbour
  };
  static Status on_control(Acks& acks, int peer, std::string_view control);

  AsyncPushSum(int node, const config::TrainConfig& config, const topology::Topology& topology,
               daemon::ParameterExchange& exchange, std::size_t num_params, std::string log_dir,
               net::Transport& transport, std::shared_ptr<Acks> acks);

  std::string_view name() const override { return "push_sum"; }
  static constexpr std::size_t kStateFloats = 1;  // w_i, as PushSum's
  std::size_t state_size() const override { return kStateFloats; }
  std::vector<float> state() const override { return {weight_}; }
  Status load_state(std::span<const float> state) override;
  Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                              daemon::RunServices& services, int* exit_code) override;
  daemon::IterationOutcome iterate(std::uint64_t t, daemon::LocalStep& step,
                                   daemon::ParameterBuffers& buffers) override;
  bool ends_at(std::uint64_t t) const override;
  std::optional<daemon::IterationEnd> conclude(std::uint64_t end,
                                               daemon::ParameterBuffers& buffers) override;

 private:
  struct Posted {  // a receive posted for message `seq` of an in-neighbour
    std::uint64_t seq = 0;
    std::vector<float> buffer;
    std::unique_ptr<daemon::PendingExchange> pending;
  };
  struct Inflow {  // what node j sends to this node
    int peer = -1;
    std::deque<Posted> posted;    // consecutive seqs, oldest first
    std::uint64_t next_seq = 0;   // the next seq to post
    std::int64_t last_send = -1;  // j's last iteration that sends here (-1: none)
    std::int64_t heard = 0;       // this node's iteration when it last took a message from j
    bool finished = false;        // j's last message (perhaps an empty one) is taken
    std::uint64_t notices = 0;    // skip notices from j seen
  };
  struct Taken {  // a message taken for the next mix
    int peer = -1;
    std::int64_t iteration = 0;
    float weight = 0;
    std::vector<float> buffer;
    bool empty = false;  // no mass: logged, not mixed
  };
  struct Sent {  // one iteration's message, in flight to its out-neighbours
    std::vector<float> message;
    std::vector<std::unique_ptr<daemon::PendingExchange>> pending;
  };

  // The end of the run for `why` (a stop request, if one came meanwhile).
  std::optional<daemon::IterationEnd> fail(const std::string& why,
                                           int code = daemon::kExitNeighbourFailed) const;
  // Posts receives for `in` up to `window` outstanding.
  void post(Inflow& in);
  // Takes every message of `in` that has arrived (in order); a failed receive ends the run.
  std::optional<daemon::IterationEnd> take_arrived(Inflow& in, std::int64_t t, std::size_t limit);
  // Waits for `in`'s next message (the deadline extended while j is connected), then takes it.
  // A skip notice from j since the last look counts as hearing from it at t (in.heard).
  bool noticed(Inflow& in, std::int64_t t);
  std::optional<daemon::IterationEnd> wait_next(Inflow& in, std::int64_t t);
  // Sends `message` (already filled) to `to`, one tag per edge.
  void send(Sent& sent, std::span<const int> to);
  // Retires finished sends (anywhere in the queue), then waits for the oldest until at most `keep`
  // remain.
  std::optional<daemon::IterationEnd> retire_sends(std::size_t keep);
  // Mixes the taken messages with the own term `self_p` (and the step when `gamma` is set).
  void mix(double self_p, std::optional<float> gamma, bool with_update,
           daemon::ParameterBuffers& buffers);
  void sort_taken();  // by (peer, iteration): the row's order
  // One line of the order log: the messages taken, and the out-neighbours skipped (kept).
  void log_taken(const std::string& label, std::span<const int> kept = {});
  daemon::SteadyTime deadline() const;

  const int self_;
  const config::TrainConfig& cfg_;
  const topology::Topology& topology_;
  daemon::ParameterExchange& exchange_;
  const std::size_t num_params_;
  const std::uint64_t tau_;
  const std::string log_path_;
  daemon::RunServices* services_ = nullptr;
  std::uint64_t start_ = 0, total_ = 0;
  float weight_ = 1.0f;
  std::deque<Inflow> inflows_;             // by increasing peer id (a deque: Inflow is move-only)
  std::map<int, std::uint64_t> out_seq_;   // the next seq to each out-neighbour
  std::deque<Sent> sent_;                  // oldest first
  std::map<int, std::int64_t> last_out_;   // our last iteration that sends to each out-neighbour
  std::vector<Taken> taken_;               // sorted by (peer, iteration) before a mix
  std::vector<std::vector<float>> spare_;  // buffers to reuse
  std::ofstream log_;
  net::Transport& transport_;
  std::shared_ptr<Acks> acks_;
  double waited_s_ = 0;  // this iteration's waits for neighbours
  std::uint64_t counted_sent_ = 0, counted_received_ = 0;
};

}  // namespace gossip::algorithms
