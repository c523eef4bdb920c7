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
// Faults. Under fault.policy FAIL_STOP a failed send or receive, or a deadline passed, ends the
// run; a checkpoint holds z_i and w_i, so a resumed job goes on with the mass it has. Under
// CARRY_ON a node carries on without a neighbour whose link is down (it keeps the shares it would
// send there and does not wait for it), and a link that comes back up — the neighbour restarted
// from its checkpoint (`gossipd run --resume`), or the link itself was lost — is reconciled
// before it carries messages again (docs/design.md §1, "Push-sum under carry-on"):
//   - each end keeps, per edge and in double precision, the weight it has sent on it (σ) and the
//     weight it has taken from it (ρ), and checkpoints them with z_i and w_i;
//   - each end sends a report ("psr": whether this process started since the link was last
//     reconciled, σ and ρ of both edges with the neighbour, and whether its last message to the
//     neighbour is past) and, once it has the other's, for an edge on which it sends, where its
//     messages start ("psb <number>": the receiver's transport discards everything before it);
//   - per edge, one end corrects its weight by the difference of the two ledgers and takes the
//     other's: the sender if it restarted (it gives back what its checkpoint holds but the
//     receiver already took), else the receiver (it takes what was sent but never arrived).
// So every message is counted once, and Σ_i w_i = n once every link is reconciled and drained,
// whoever was killed and restarted in between; a neighbour that never comes back keeps what it
// held. Each correction is logged ("reconcile<TAB>j<TAB>Δw"); a log with one is not replayed.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  // Under carry-on, the weight below which a node keeps its shares (2^-20).
  static constexpr float kLowWeight = 1.0f / (1 << 20);
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
  // one), how many skip notices each in-neighbour sent ("psk": it kept its share at an iteration
  // that sends here), and under carry-on each neighbour's latest link report ("psr") and where its
  // messages start ("psb": the transport's floor for it is reset there as the message is read).
  // on_control writes them; other control messages are ignored.
  struct Report {            // a neighbour's "psr", from its side of the link
    bool restarted = false;  // its process started since it last reconciled this link
    double sent = 0;         // σ: the weight it has sent to this node
    double taken = 0;        // ρ: the weight it has taken from this node
    bool sent_last = false;  // its last message to this node is past (sent, or kept)
  };
  struct Acks {
    explicit Acks(int n)
        : taken(static_cast<std::size_t>(n)),
          skipped(static_cast<std::size_t>(n)),
          reports(static_cast<std::size_t>(n)),
          bases(static_cast<std::size_t>(n)) {}
    std::vector<std::atomic<std::uint64_t>> taken;
    std::vector<std::atomic<std::uint64_t>> skipped;  // skip notices from each in-neighbour
    net::Transport* transport = nullptr;              // for "psb": reset_floor
    std::mutex mu;                                    // guards reports and bases
    std::vector<std::optional<Report>> reports;
    std::vector<std::optional<std::uint64_t>> bases;
  };
  static Status on_control(Acks& acks, int peer, std::string_view control);

  AsyncPushSum(int node, const config::TrainConfig& config, const topology::Topology& topology,
               daemon::ParameterExchange& exchange, std::size_t num_params, std::string log_dir,
               net::Transport& transport, std::shared_ptr<Acks> acks);

  std::string_view name() const override { return "push_sum"; }
  // The checkpoint's algorithm state: w_i (as PushSum's) and, under carry-on, the ledgers: σ of
  // each out-neighbour, then ρ of each in-neighbour, by increasing id, each a double in two floats.
  static std::size_t state_floats(const config::TrainConfig& config,
                                  const topology::Topology& topology, int node);
  std::size_t state_size() const override { return state_floats(cfg_, topology_, self_); }
  std::vector<float> state() const override;
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
    bool counted = false;  // arrived whole before its link was lost: in ρ already, still to take
  };
  struct Inflow {  // what node j sends to this node
    int peer = -1;
    std::deque<Posted> posted;    // consecutive seqs, oldest first
    std::uint64_t next_seq = 0;   // the next seq to post
    std::int64_t last_send = -1;  // j's last iteration that sends here (-1: none)
    std::int64_t heard = 0;       // this node's iteration when it last took a message from j
    bool finished = false;        // j's last message (perhaps an empty one) is taken
    std::uint64_t notices = 0;    // skip notices from j seen
    double taken_w = 0;           // ρ: the weight taken from j (carry-on's ledger)
    bool last_past = false;       // j reported its last message to this node past: once what
                                  // arrived before is taken, nothing more comes
  };
  enum class LinkState { kLive, kLost, kReconciling };
  struct Link {                                 // carry-on: the link with one neighbour
    LinkState state = LinkState::kLost;         // every link is reconciled when it first comes up
    bool restarted = true;                      // this process has not reconciled it yet
    bool got_report = false, got_base = false;  // of the reconciliation under way
    bool told_last = false;  // our last message to it is past, and it was told so
    bool last_kept = false;  // our last message to it was kept: its link was down
    bool initial = true;     // the first reconciliation of a fresh start (nothing to correct)
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
    std::vector<int> to;  // pending[k] goes to to[k]
  };

  // The end of the run for `why` (a stop request, if one came meanwhile).
  std::optional<daemon::IterationEnd> fail(const std::string& why,
                                           int code = daemon::kExitNeighbourFailed) const;
  // Posts receives for `in` up to `window` outstanding.
  void post(Inflow& in);
  // Takes every message of `in` that has arrived (in order); a failed receive ends the run.
  std::optional<daemon::IterationEnd> take_arrived(Inflow& in, std::int64_t t, std::size_t limit);
  // The weight a whole message in `p` brings (p_ij(s) w_j^s; 0 for an empty one).
  double share(const Inflow& in, const Posted& p) const;
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
  // Carry-on: notices links lost and back, exchanges the reports and applies the neighbour's;
  // an end when a correction leaves no weight.
  std::optional<daemon::IterationEnd> watch_links(std::int64_t t);
  bool live(int peer) const;  // always, under FAIL_STOP
  // The link is down, or the neighbour reset it (its report came while it was live, kept then).
  void lose(int peer, bool keep_report = false);
  // Sends `peer` an empty last message labelled `s` (no mass: there is no more).
  void send_empty(int peer, std::int64_t s);
  // A last message kept while the link was down is replaced by an empty one once it is back.
  void send_kept_last(int peer);
  // At the end: waits for a lost in-neighbour with its last message due to come back.
  std::optional<daemon::IterationEnd> await_link(Inflow& in, std::int64_t t);
  void send_report(int peer, std::int64_t t);
  std::optional<daemon::IterationEnd> apply_report(int peer, const Report& report);
  Inflow* inflow(int peer);

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
  const bool carry_on_;
  std::map<int, Link> links_;     // carry-on: every neighbour's
  std::map<int, double> sent_w_;  // σ: the weight sent to each out-neighbour
  std::int64_t next_t_ = 0;       // the iteration about to run
  double waited_s_ = 0;           // this iteration's waits for neighbours
  std::uint64_t counted_sent_ = 0, counted_received_ = 0;
};

}  // namespace gossip::algorithms
