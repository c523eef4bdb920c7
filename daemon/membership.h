// Membership: the carry-on fault policy of one node as a state machine (docs/daemon.md "Fault
// tolerance", docs/design.md §7): which neighbours it mixes at each iteration, when an edge is
// dropped (leave), when it is used again (re-admission after a partition heals) and where a
// restarted node rejoins. Events go in — admission messages received, the verdicts of an
// iteration, the start of an iteration — and decisions come out: the messages to send, the edges
// dropped and admitted. It never touches a socket: the node's loop (daemon/node.cc) carries the
// messages over its ParameterExchange, and the unit tests (tests/daemon/membership_test.cc) wire
// two or more Memberships to each other in memory.
//
// The rules:
//  - Leave. At iteration t the edge (i, j) is used iff i has x_j^t (whole, finite), j's verdict
//    says it has x_i^t, and the verdict arrived; otherwise it is dropped from t on. A neighbour
//    whose link is down at the start of an iteration is dropped then ("no link").
//  - Weights. A used edge's weight is recomputed from both planned degrees (Metropolis–Hastings
//    topologies) or kept from W(t) with a dropped edge's weight moved onto W_ii (row_weights), so
//    W(t) stays symmetric and doubly stochastic on the surviving graph.
//  - Re-admission. Whenever a dropped neighbour's link is up, the lower id proposes Admit{t_a},
//    t_a = (newest iteration known of the neighbour) + margin · 2^misses; the other accepts iff it
//    has not started t_a. Both use the edge again from t_a on. A refusal, a late yes and a
//    proposal unanswered for a deadline are misses: withdrawn (Accept{t_a, false}) and proposed
//    again further ahead. Crossing proposals: the later t_a wins at both ends.
//  - Rejoin. A node resumed from a checkpoint while its neighbours are ahead proposes one t_a
//    past the newest iteration they announce to all of them and jumps to the earliest agreed one.
//  - Standby and join. A standby neighbour (fault.standby_nodes) is dropped from the start, as if
//    it had left before iteration 0; when it starts it joins as a rejoining node does (from
//    iteration 0, whatever its neighbours announce) and is admitted at the agreed t_a.
//  - Announced leave. A node that stops (SIGTERM) sends Leave{t_l}: it takes no part in t_l or
//    later. The receiver drops the edge from t_l on ("left", not a failure) without waiting for
//    data or a verdict that will not come, and proposes nothing to it until it asks to be
//    admitted again (its rejoin's Admit).
//
// Time comes from the injected Clock (a proposal unanswered for `deadline_ns` is withdrawn), so
// tests drive it with a ManualClock. Not thread-safe: used from the node's loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "daemon/exchange.h"
#include "topology/present_weights.h"
#include "topology/topology.h"

namespace gossip::daemon {

// The rows of W on the present subgraph (topology/present_weights.h), shared with gossip-sim.
using topology::mixing_is_symmetric;
using topology::row_weights;
using topology::RowWeights;
using topology::uses_metropolis_hastings;

// What Membership asks of the network: whether a link is up now and the iteration the peer last
// announced. The node answers from its ParameterExchange; tests from a table.
class PeerView {
 public:
  virtual ~PeerView() = default;
  virtual bool link_up(int peer) const = 0;
  virtual std::optional<std::uint64_t> peer_iteration(int peer) const = 0;
};

// The decisions of one event, to be carried out in this order: send the messages (each to its
// peer, in order), then use the admitted edges from this iteration on (nothing a neighbour sent
// for an earlier iteration may fill a receive) and stop using the dropped ones.
struct MembershipActions {
  std::vector<std::pair<int, Admission>> send;       // (to, message)
  std::vector<int> admitted;                         // used again from this iteration on
  std::vector<std::pair<int, std::string>> dropped;  // (neighbour, why), from this iteration on

  bool empty() const { return send.empty() && admitted.empty() && dropped.empty(); }
};

class Membership {
 public:
  struct Options {
    int self = 0;
    std::vector<int> neighbours;     // every node `self` ever exchanges with (all_neighbours)
    std::uint64_t admit_margin = 1;  // fault.admit_margin (0 counts as 1)
    std::int64_t deadline_ns = 0;    // a proposal unanswered this long is withdrawn
    std::vector<int> standby;        // fault.standby_nodes: dropped until they join
  };
  // `peers` and `clock` are borrowed and must outlive this object.
  Membership(Options options, const PeerView& peers, const Clock& clock);

  bool is_dropped(int peer) const { return dropped_.count(peer) != 0; }
  // Whether `peer` announced that it leaves at or before iteration t.
  bool has_left(int peer, std::uint64_t t) const {
    auto l = left_.find(peer);
    return l != left_.end() && l->second <= t;
  }
  // Every neighbour dropped: the node trains alone.
  bool partitioned() const { return dropped_.size() == neighbours_.size() && !neighbours_.empty(); }

  // Admission messages received (in arrival order) while this node is at iteration `now_at`;
  // messages from nodes that are not neighbours are ignored.
  MembershipActions receive(std::span<const Admission> messages, std::uint64_t now_at);

  // Only the Leave messages of `messages`, during an iteration (the others wait for the next
  // start_iteration, which may be given them again): decide() then drops a node that left.
  void note_leaves(std::span<const Admission> messages);

  // The boundary before iteration t: the messages received since the last event, then the edges
  // agreed for t are admitted, the lower id (re)proposes to each dropped neighbour whose link is
  // up, and every neighbour whose link is down is dropped.
  MembershipActions start_iteration(std::uint64_t t, std::span<const Admission> messages);

  // The verdict phase of iteration t. `planned`: the neighbours this node mixes at t (not
  // dropped); `unusable`: why a neighbour's x_j^t cannot be mixed; `verdicts`: those that
  // arrived. Returns the edges used at t (neighbour -> its planned degree d_j(t)); the others are
  // dropped (into `out`, with the reason).
  std::map<int, std::uint32_t> decide(std::span<const int> planned,
                                      const std::map<int, std::string>& unusable,
                                      const std::map<int, Verdict>& verdicts,
                                      MembershipActions& out);

  // ---- rejoin after a restart, in rounds: begin_rejoin, then per round propose_rejoin,
  // receive() until !awaiting_answers() or a deadline passed, end_rejoin_round; finish_rejoin.
  // Returns the newest iteration a neighbour announced when it is past `start` (every neighbour
  // is then dropped until re-admitted), or nullopt when there is nothing to rejoin. `joining`: a
  // standby node's first start — it joins even when nobody is past `start` yet (it returns the
  // newest iteration announced, or `start`).
  std::optional<std::uint64_t> begin_rejoin(std::uint64_t start, bool joining = false);
  // Admit{t_a} to every neighbour whose link is up; the node is at `start` (its checkpoint).
  MembershipActions propose_rejoin(std::uint64_t start);
  bool awaiting_answers() const { return !proposed_.empty(); }
  // After round `round` (0-based, at most kRejoinRounds): true when someone agreed
  // (rejoin_iteration() is the earliest agreed iteration). In a join (begin_rejoin(…, true)),
  // agreements at different iterations (a neighbour's crossing proposal won with a later t_a) are
  // moved to the latest one before the last round: those below it are withdrawn (into `out`), the
  // next round proposes it, and this returns false. With no agreement the open proposals are
  // withdrawn and the next round's t_a lies further ahead (margin · 2^(round+1) past the newest
  // iteration heard of).
  static constexpr int kRejoinRounds = 5;
  bool end_rejoin_round(int round, std::uint64_t start, MembershipActions& out);
  // Cancels the agreements below the rejoin iteration (they would never be used) and returns it.
  std::uint64_t finish_rejoin(std::uint64_t start, MembershipActions& out);
  std::uint64_t rejoin_iteration() const { return rejoin_t_a_; }
  // The number of agreed future admissions (for the rejoin log line).
  std::size_t agreed() const { return admit_at_.size(); }

  // ---- leave: this node stops at iteration t (takes no part in t): Leave{t} to every neighbour
  // whose link is up.
  MembershipActions leave(std::uint64_t t) const;

 private:
  struct Proposal {
    std::uint64_t t_a = 0;
    std::int64_t sent_ns = 0;
  };
  bool is_neighbour(int peer) const;
  void propose(int peer, std::uint64_t t_a, std::uint64_t now_at, MembershipActions& out);
  void withdraw(int peer, std::uint64_t t_a, std::uint64_t now_at, MembershipActions& out);
  std::uint64_t next_t_a(int peer, std::uint64_t t);
  void on_admit(const Admission& a, std::uint64_t now_at, MembershipActions& out);
  void on_accept(const Admission& a, std::uint64_t now_at, MembershipActions& out);
  void on_leave(const Admission& a);

  const int self_;
  const std::vector<int> neighbours_;  // sorted
  const std::uint64_t margin_;
  const std::int64_t deadline_ns_;
  const PeerView& peers_;
  const Clock& clock_;

  std::set<int> dropped_;                  // not exchanged with (until re-admitted)
  std::map<int, std::uint64_t> admit_at_;  // neighbour -> agreed first iteration of the edge
  std::map<int, std::uint64_t> admitted_;  // neighbour -> the iteration its edge was last admitted
  std::map<int, Proposal> proposed_;       // our open proposal to a neighbour
  std::map<int, std::uint64_t> reported_;  // newest iteration a neighbour told us in an answer
  std::map<int, int> misses_;              // failed proposals since its last admission
  std::map<int, std::uint64_t> left_;      // neighbour -> the iteration its Leave named
  std::uint64_t current_ = 0;              // the iteration start_iteration last began
  std::uint64_t floor_ = 0;                // no agreement below it (a rejoin's t_a)
  std::uint64_t rejoin_t_a_ = 0;
  bool joining_ = false;  // begin_rejoin's `joining`
};

}  // namespace gossip::daemon
