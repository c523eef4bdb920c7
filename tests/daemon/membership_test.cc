// Membership (daemon/membership.h) as a state machine: nodes wired to each other in memory, events
// in, decisions out, no sockets, time from a ManualClock. The tests check the protocol's rules at
// both ends of an edge — a leave is decided the same at both ends from the same iteration, a
// dropped edge's weight is carried by the node itself (W stays symmetric and doubly stochastic),
// a healed edge is used again from the same agreed iteration at both ends, a restarted node
// rejoins at an iteration its neighbours have not started — rather than the order of its calls.
#include "daemon/membership.h"

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gossip::daemon {
namespace {

constexpr std::int64_t kDeadlineNs = 1'000'000'000;  // 1 s

// n Memberships over an in-memory network: links that can be cut and healed, the iteration each
// node announced, and one inbox of admission messages per node (delivered in order; a message on
// a cut link is lost, as a fire-and-forget send on a dead link is).
class Cluster {
 public:
  // `edges`: undirected neighbour pairs.
  // `standby`: fault.standby_nodes, given to every node.
  Cluster(int n, const std::vector<std::pair<int, int>>& edges, std::uint64_t margin,
          const std::vector<int>& standby = {}) {
    std::vector<std::vector<int>> nb(n);
    for (auto [a, b] : edges) {
      nb[a].push_back(b);
      nb[b].push_back(a);
    }
    for (int i = 0; i < n; ++i) {
      views_.push_back(std::make_unique<View>(*this, i));
      nodes_.push_back(std::make_unique<Membership>(
          Membership::Options{i, nb[i], margin, kDeadlineNs, standby}, *views_[i], clock));
      inbox_.emplace_back();
    }
  }

  Membership& node(int i) { return *nodes_[i]; }
  void cut(int a, int b) { down_.insert(std::minmax(a, b)); }
  void heal(int a, int b) { down_.erase(std::minmax(a, b)); }
  bool linked(int a, int b) const { return !down_.count(std::minmax(a, b)); }
  // What node i announces (Hello, heartbeats, Params carry it).
  void announce(int i, std::uint64_t t) { announced_[i] = t; }

  // Node i's boundary before iteration t: its inbox in, its decisions carried out.
  MembershipActions start(int i, std::uint64_t t) {
    announce(i, t);
    std::vector<Admission> in = std::move(inbox_[i]);
    inbox_[i].clear();
    MembershipActions a = nodes_[i]->start_iteration(t, in);
    carry_out(i, t, a);
    return a;
  }
  // Node i handles its inbox while at `now_at` (the rejoin's polling).
  MembershipActions receive(int i, std::uint64_t now_at) {
    std::vector<Admission> in = std::move(inbox_[i]);
    inbox_[i].clear();
    MembershipActions a = nodes_[i]->receive(in, now_at);
    carry_out(i, now_at, a);
    return a;
  }
  void carry_out(int from, std::uint64_t t, const MembershipActions& a) {
    for (const auto& [to, message] : a.send) {
      if (linked(from, to)) inbox_[to].push_back(message);
    }
    for (int j : a.admitted) admitted_at[{from, j}].push_back(t);
    for (const auto& [j, why] : a.dropped) dropped_at[{from, j}].push_back(t);
  }
  // The link a–b is down at both ends' boundary at t (so both drop the edge there), then heals.
  void drop_edge_at(int a, int b, std::uint64_t t) {
    cut(a, b);
    start(a, t);
    start(b, t);
    heal(a, b);
  }
  // Nodes `ids`, in that order, start every iteration in [from, to).
  void run(std::initializer_list<int> ids, std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t t = from; t < to; ++t) {
      for (int i : ids) start(i, t);
    }
  }
  // Messages waiting for node i (not yet handled).
  const std::vector<Admission>& inbox(int i) const { return inbox_[i]; }
  void lose_inbox(int i) { inbox_[i].clear(); }

  ManualClock clock;
  std::map<std::pair<int, int>, std::vector<std::uint64_t>> admitted_at;  // (node, peer) -> t
  std::map<std::pair<int, int>, std::vector<std::uint64_t>> dropped_at;   // (node, peer) -> t

 private:
  class View final : public PeerView {
   public:
    View(const Cluster& c, int self) : c_(c), self_(self) {}
    bool link_up(int peer) const override { return c_.linked(self_, peer); }
    std::optional<std::uint64_t> peer_iteration(int peer) const override {
      auto it = c_.announced_.find(peer);
      if (it == c_.announced_.end()) return std::nullopt;
      return it->second;
    }

   private:
    const Cluster& c_;
    const int self_;
  };

  std::vector<std::unique_ptr<View>> views_;
  std::vector<std::unique_ptr<Membership>> nodes_;
  std::vector<std::vector<Admission>> inbox_;
  std::set<std::pair<int, int>> down_;
  std::map<int, std::uint64_t> announced_;
};

using Times = std::vector<std::uint64_t>;

// Both ends of the edge a–b took it back at exactly the iterations `times`.
void check_admitted_at(Cluster& c, int a, int b, const Times& times) {
  INFO("edge ", a, "-", b);
  CHECK(c.admitted_at[{a, b}] == times);
  CHECK(c.admitted_at[{b, a}] == times);
}

// The verdict node `from` sends `to` at t: whether it has to's x^t, and its planned degree.
Verdict verdict(std::uint64_t t, bool have, std::uint32_t degree) { return {t, have, degree}; }

TEST_CASE(
    "leave: an edge is used at t only if both ends have each other's x^t and both verdicts "
    "arrived, otherwise both ends drop it from t on") {
  // Star: 0 in the middle of 1, 2, 3, 4. At t = 7: x_1 missed 0's deadline; 2 did not get x_0;
  // 3's verdict never came; 4 is fine.
  Cluster c(5, {{0, 1}, {0, 2}, {0, 3}, {0, 4}}, 4);
  const std::uint64_t t = 7;
  for (int i = 0; i < 5; ++i) CHECK(c.start(i, t).empty());
  const std::vector<int> planned0 = {1, 2, 3, 4};
  const std::map<int, std::string> unusable0 = {{1, "deadline exceeded"}};
  MembershipActions a0;
  const std::map<int, std::uint32_t> used0 = c.node(0).decide(
      planned0, unusable0,
      {{1, verdict(t, true, 1)}, {2, verdict(t, false, 1)}, {4, verdict(t, true, 1)}}, a0);
  CHECK(used0 == std::map<int, std::uint32_t>{{4, 1}});  // with 4's announced degree
  REQUIRE(a0.dropped.size() == 3);
  CHECK(a0.dropped[0].first == 1);
  CHECK(a0.dropped[0].second.find("no usable parameters") != std::string::npos);
  CHECK(a0.dropped[1].first == 2);
  CHECK(a0.dropped[1].second.find("did not get our parameters") != std::string::npos);
  CHECK(a0.dropped[2].first == 3);
  CHECK(a0.dropped[2].second.find("no verdict") != std::string::npos);
  CHECK(a0.send.empty());

  // The other ends, from the verdicts 0 sent them ({t, have x_j, d_0(t) = 4}).
  MembershipActions a1, a2, a4;
  CHECK(c.node(1).decide(std::vector<int>{0}, {}, {{0, verdict(t, false, 4)}}, a1).empty());
  CHECK(c.node(2).decide(std::vector<int>{0}, {{0, "deadline exceeded"}}, {}, a2).empty());
  CHECK(c.node(4).decide(std::vector<int>{0}, {}, {{0, verdict(t, true, 4)}}, a4) ==
        std::map<int, std::uint32_t>{{0, 4}});
  CHECK(a1.dropped.size() == 1);
  CHECK(a2.dropped.size() == 1);
  CHECK(a4.dropped.empty());

  // Dropped from t on: not planned at t + 1, and the higher ids do not propose (1 and 2 are above
  // 0), while 0, the lower id, proposes to each dropped neighbour whose link is up.
  for (int j : {1, 2, 3}) CHECK(c.node(0).is_dropped(j));
  CHECK_FALSE(c.node(0).is_dropped(4));
  CHECK(c.node(1).is_dropped(0));
  CHECK(c.start(1, t + 1).send.empty());
  CHECK(c.start(2, t + 1).send.empty());
  const MembershipActions next = c.start(0, t + 1);
  std::set<int> proposed_to;
  for (const auto& [to, m] : next.send) {
    CHECK(m.kind == Admission::kAdmit);
    proposed_to.insert(to);
  }
  CHECK(proposed_to == std::set<int>{1, 2, 3});
  CHECK_FALSE(c.node(0).partitioned());
}

// The rows of W(t) at every node of `topo` when each node mixes `used[i]` (neighbour -> d_j(t)).
std::map<int, std::vector<std::pair<int, double>>> rows_of(
    const topology::Topology& topo, std::int64_t t,
    const std::map<int, std::pair<std::uint32_t, std::map<int, std::uint32_t>>>& used, bool mh) {
  std::map<int, std::vector<std::pair<int, double>>> rows;
  for (const auto& [i, planned_used] : used) {
    rows[i] = row_weights(topo, i, t, mh, planned_used.first, planned_used.second).row(i);
  }
  return rows;
}

void check_symmetric_doubly_stochastic(
    const std::map<int, std::vector<std::pair<int, double>>>& rows) {
  std::map<std::pair<int, int>, double> w;
  for (const auto& [i, row] : rows) {
    double sum = 0;
    for (const auto& [j, v] : row) {
      CHECK(v >= 0);
      w[{i, j}] = v;
      sum += v;
    }
    CHECK(std::fabs(sum - 1.0) <= 1e-15);
  }
  for (const auto& [ij, v] : w) {
    auto it = w.find({ij.second, ij.first});
    CHECK_MESSAGE((it != w.end() && it->second == v), "W(" << ij.first << "," << ij.second << ")");
  }
}

TEST_CASE(
    "leave: a neighbour that missed the deadline is carried on, its last weight moved onto the "
    "node's own, and W(t) stays symmetric and doubly stochastic") {
  // A 4-ring with max-degree weights (every W_ij = 1/3, W_ii = 1/3); at t = 3 node 1's x^3 misses
  // node 0's deadline, so both ends drop the edge 0-1 (0 from its own view, 1 from 0's verdict).
  topology::GeneratorSpec spec;
  spec.kind = topology::GeneratorKind::kRing;
  spec.nodes = 4;
  auto topo = topology::Topology::generate(spec, topology::WeightScheme::kMaxDegree);
  REQUIRE(topo.is_ok());
  REQUIRE(mixing_is_symmetric(*topo));
  REQUIRE_FALSE(uses_metropolis_hastings(*topo, 0));
  Cluster c(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 4);
  const std::uint64_t t = 3;
  MembershipActions a;
  const std::map<int, std::uint32_t> used0 =
      c.node(0).decide(std::vector<int>{1, 3}, {{1, "deadline exceeded"}},
                       {{1, verdict(t, true, 2)}, {3, verdict(t, true, 2)}}, a);
  const std::map<int, std::uint32_t> used1 = c.node(1).decide(
      std::vector<int>{0, 2}, {}, {{0, verdict(t, false, 2)}, {2, verdict(t, true, 2)}}, a);
  const std::map<int, std::uint32_t> used2 = {{1, 2}, {3, 2}};
  const std::map<int, std::uint32_t> used3 = {{0, 2}, {2, 2}};
  const auto rows = rows_of(
      *topo, t, {{0, {2, used0}}, {1, {2, used1}}, {2, {2, used2}}, {3, {2, used3}}}, false);
  // W(t) before the drop: W_ii and every W_ij the same (max-degree on a 2-regular graph).
  const double w_ii = topo->self_weight(0, t), w_ij = topo->in_neighbors(0, t)[0].weight;
  CHECK(std::fabs(w_ii - 1.0 / 3) < 1e-15);
  CHECK(std::fabs(w_ij - 1.0 / 3) < 1e-15);
  using Row = std::vector<std::pair<int, double>>;
  CHECK(rows.at(0) == Row{{0, w_ii + w_ij}, {3, w_ij}});
  CHECK(rows.at(1) == Row{{1, w_ii + w_ij}, {2, w_ij}});
  CHECK(rows.at(2) == Row{{1, w_ij}, {2, w_ii}, {3, w_ij}});
  check_symmetric_doubly_stochastic(rows);

  // Metropolis–Hastings on the same ring: rows recomputed from the planned degrees both ends
  // announce. At t + 1 nodes 0 and 1 plan one neighbour each.
  auto mh = topology::Topology::generate(spec, topology::WeightScheme::kMetropolisHastings);
  REQUIRE(mh.is_ok());
  REQUIRE(uses_metropolis_hastings(*mh, 0));
  const auto mh_rows = rows_of(*mh, t + 1,
                               {{0, {1, {{3, 2}}}},
                                {1, {1, {{2, 2}}}},
                                {2, {2, {{1, 1}, {3, 2}}}},
                                {3, {2, {{0, 1}, {2, 2}}}}},
                               true);
  CHECK(mh_rows.at(0) == Row{{0, 1.0 - 1.0 / 3}, {3, 1.0 / 3}});
  check_symmetric_doubly_stochastic(mh_rows);
}

TEST_CASE(
    "a neighbour whose link is down at an iteration boundary is dropped there at both ends, and "
    "when the link heals the lower id proposes t_a = t + margin and both ends use the edge again "
    "from exactly t_a") {
  Cluster c(2, {{0, 1}}, 4);
  for (std::uint64_t t = 0; t < 10; ++t) {
    CHECK(c.start(0, t).empty());
    CHECK(c.start(1, t).empty());
  }
  c.cut(0, 1);
  c.run({0, 1}, 10, 15);
  CHECK(c.dropped_at[{0, 1}] == Times{10});
  CHECK(c.dropped_at[{1, 0}] == Times{10});
  CHECK(c.inbox(0).empty());  // nobody proposes over a link that is down
  CHECK(c.inbox(1).empty());

  c.heal(0, 1);
  const MembershipActions p = c.start(0, 15);
  REQUIRE(p.send.size() == 1);
  CHECK(p.send[0].first == 1);
  CHECK(p.send[0].second.kind == Admission::kAdmit);
  CHECK(p.send[0].second.peer == 0);
  CHECK(p.send[0].second.iteration == 15 + 4);
  const MembershipActions answer = c.start(1, 15);
  REQUIRE(answer.send.size() == 1);  // the accept, and no proposal of its own (higher id)
  CHECK(answer.send[0].second.kind == Admission::kAccept);
  CHECK(answer.send[0].second.accepted);
  for (std::uint64_t t = 16; t < 24; ++t) {
    c.start(0, t);
    c.start(1, t);
    CHECK(c.node(0).is_dropped(1) == (t < 19));
    CHECK(c.node(1).is_dropped(0) == (t < 19));
  }
  check_admitted_at(c, 0, 1, Times{19});
}

// A doctest fixture: nodes 0 and 1, neighbours (margin 4), whose edge was dropped at iteration 5.
struct DroppedPair {
  Cluster c{2, {{0, 1}}, 4};
  DroppedPair() { c.drop_edge_at(0, 1, 5); }
};

TEST_CASE_FIXTURE(
    DroppedPair,
    "a refused proposal (the neighbour already passed t_a) is proposed again past the iteration it "
    "reported, with twice the margin, and then both ends agree") {
  c.announce(1, 15);  // what 0 last heard; node 1 is really at 30 by the time the Admit arrives
  const MembershipActions p = c.start(0, 15);
  REQUIRE(p.send.size() == 1);
  CHECK(p.send[0].second.iteration == 19);
  const MembershipActions refusal = c.start(1, 30);
  REQUIRE(refusal.send.size() == 1);
  CHECK_FALSE(refusal.send[0].second.accepted);
  CHECK(refusal.send[0].second.current == 30);
  const MembershipActions again = c.start(0, 16);
  REQUIRE(again.send.size() == 1);
  CHECK(again.send[0].second.kind == Admission::kAdmit);
  CHECK(again.send[0].second.iteration == 30 + (4 << 1));
  c.start(1, 31);
  for (std::uint64_t t = 17, u = 32; t < 45; ++t, ++u) {
    c.start(0, t);
    if (u <= 45) c.start(1, u);
  }
  check_admitted_at(c, 0, 1, Times{38});
}

TEST_CASE_FIXTURE(
    DroppedPair,
    "a proposal unanswered for a deadline is withdrawn and made again further ahead, not before "
    "the deadline has passed on the clock") {
  c.announce(1, 6);
  CHECK(c.start(0, 10).send.size() == 1);  // Admit{14}
  c.lose_inbox(1);                         // it never arrives
  c.clock.advance_ns(kDeadlineNs - 1);
  CHECK(c.start(0, 11).send.empty());
  CHECK(c.start(0, 12).send.empty());
  c.clock.advance_ns(1);
  const MembershipActions retry = c.start(0, 13);
  REQUIRE(retry.send.size() == 2);
  CHECK(retry.send[0].second.kind == Admission::kAccept);  // the withdrawal of 14
  CHECK_FALSE(retry.send[0].second.accepted);
  CHECK(retry.send[0].second.iteration == 14);
  CHECK(retry.send[1].second.kind == Admission::kAdmit);
  CHECK(retry.send[1].second.iteration == 13 + (4 << 1));  // one miss: twice the margin

  // Without an answer, a proposal is also renewed once its t_a has come.
  c.lose_inbox(1);
  for (std::uint64_t t = 14; t < 21; ++t) CHECK(c.start(0, t).send.empty());
  const MembershipActions late = c.start(0, 21);
  REQUIRE(late.send.size() == 2);
  CHECK(late.send[1].second.iteration == 21 + (4 << 2));
}

TEST_CASE(
    "a yes that arrives after the proposer gave its proposal up (its t_a came) is withdrawn: the "
    "other end cancels the agreement, and both use the edge from the renewed t_a") {
  Cluster c(2, {{0, 1}}, 2);
  c.drop_edge_at(0, 1, 5);
  c.announce(1, 5);
  CHECK(c.start(0, 10).send[0].second.iteration == 12);
  c.start(1, 6);  // accepts 12 (it is behind)
  const std::vector<Admission> slow_yes = c.inbox(0);
  REQUIRE(slow_yes.size() == 1);
  c.lose_inbox(0);  // delivered only at 13, below
  CHECK(c.start(0, 11).send.empty());
  const MembershipActions renew = c.start(0, 12);  // unanswered when its t_a came
  REQUIRE(renew.send.size() == 2);
  CHECK((renew.send[0].second.kind == Admission::kAccept && !renew.send[0].second.accepted &&
         renew.send[0].second.iteration == 12));
  CHECK(renew.send[1].second.iteration == 12 + (2 << 1));
  const MembershipActions late = c.node(0).receive(slow_yes, 13);
  c.carry_out(0, 13, late);
  REQUIRE(late.send.size() == 1);  // the late yes is withdrawn too
  CHECK((late.send[0].second.kind == Admission::kAccept && !late.send[0].second.accepted));
  // Node 1 gets the first withdrawal alone, then runs past 12: the agreement is gone.
  std::vector<Admission> to1 = c.inbox(1);
  REQUIRE(to1.size() == 3);
  c.lose_inbox(1);
  c.carry_out(1, 7, c.node(1).receive(std::vector{to1[0]}, 7));
  for (std::uint64_t t = 7; t <= 12; ++t) c.start(1, t);
  CHECK(c.admitted_at[{1, 0}].empty());
  CHECK(c.node(1).is_dropped(0));
  c.carry_out(1, 13, c.node(1).receive(std::span(to1).subspan(1), 13));  // Admit{16}: accepted
  c.run({1, 0}, 13, 30);
  check_admitted_at(c, 1, 0, Times{16});
}

TEST_CASE_FIXTURE(DroppedPair, "crossing proposals: the later t_a wins at both ends") {
  // 0 proposes 19 at its boundary while 1 (rejoining) proposes 25; both messages cross.
  c.announce(1, 15);
  c.start(0, 15);
  c.announce(0, 21);
  REQUIRE(c.node(1).begin_rejoin(2) == std::optional<std::uint64_t>(21));
  MembershipActions a1 = c.node(1).propose_rejoin(2);
  c.carry_out(1, 2, a1);
  REQUIRE(a1.send.size() == 1);
  CHECK(a1.send[0].second.iteration == 25);  // 21 + 4
  c.receive(0, 16);
  c.receive(1, 2);
  c.receive(0, 16);
  c.receive(1, 2);
  CHECK_FALSE(c.node(1).awaiting_answers());
  MembershipActions out;
  CHECK(c.node(1).end_rejoin_round(0, 2, out));
  CHECK(c.node(1).finish_rejoin(2, out) == 25);
  c.carry_out(1, 2, out);
  for (std::uint64_t t = 16; t < 30; ++t) {
    c.start(0, t);
    if (t >= 25) c.start(1, t);
  }
  check_admitted_at(c, 0, 1, Times{25});
}

TEST_CASE_FIXTURE(DroppedPair,
                  "crossing proposals of the same t_a: the yes that arrives after t_a started is "
                  "not withdrawn, and both ends use the edge from t_a") {
  // Node 1 restarts from its checkpoint at 2 while node 0 (the lower id) is at 21: both propose
  // 25 (21 + 4). Node 1 agrees on node 0's Admit and starts 25 before node 0's yes to its own
  // Admit arrives; withdrawing that yes would make node 0 stop waiting for node 1's verdict of 25
  // while node 1 mixes with it (W not symmetric at 25).
  c.announce(1, 2);
  const MembershipActions p0 = c.start(0, 21);
  REQUIRE(p0.send.size() == 1);
  CHECK(p0.send[0].second.iteration == 25);
  REQUIRE(c.node(1).begin_rejoin(2) == std::optional<std::uint64_t>(21));
  c.carry_out(1, 2, c.node(1).propose_rejoin(2));
  c.receive(1, 2);  // node 0's Admit{25}: agreed
  CHECK_FALSE(c.node(1).awaiting_answers());
  MembershipActions out;
  REQUIRE(c.node(1).end_rejoin_round(0, 2, out));
  REQUIRE(c.node(1).finish_rejoin(2, out) == 25);
  CHECK(out.send.empty());
  c.start(1, 25);
  c.run({0}, 22, 26);  // node 0 gets node 1's Admit{25} and yes, answers yes, admits at 25
  const MembershipActions late = c.start(1, 26);  // node 0's yes arrives
  CHECK(late.send.empty());
  c.start(0, 26);
  c.run({0, 1}, 27, 30);
  check_admitted_at(c, 0, 1, Times{25});
  CHECK(c.dropped_at[{0, 1}] == Times{5});
  CHECK(c.dropped_at[{1, 0}] == Times{5});
}

TEST_CASE(
    "rejoin: a node resumed behind its neighbours jumps to t_a past the newest iteration they "
    "announce, and every neighbour that accepted uses the edge again from t_a") {
  // Ring of 4; node 2 crashed at 20 and restarts from its checkpoint at 10 while the others are
  // at 50 (they dropped it at 20, "no link").
  Cluster c(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 4);
  c.run({0, 1, 2, 3}, 0, 20);
  c.cut(1, 2);
  c.cut(2, 3);
  c.run({0, 1, 3}, 20, 50);
  CHECK(c.dropped_at[{1, 2}] == Times{20});
  CHECK(c.dropped_at[{3, 2}] == Times{20});

  // Restarted: a fresh Membership at node 2 (the harness's node 2 stands for it; its links up).
  c.heal(1, 2);
  c.heal(2, 3);
  c.announce(2, 10);
  CHECK_FALSE(c.node(2).begin_rejoin(60).has_value());  // nobody ahead of 60: nothing to do
  REQUIRE(c.node(2).begin_rejoin(10) == std::optional<std::uint64_t>(49));
  c.carry_out(2, 10, c.node(2).propose_rejoin(10));
  CHECK(c.inbox(1).size() == 1);
  CHECK(c.inbox(3).size() == 1);
  // The neighbours get the proposal at their next boundary; 1 (lower id) would propose too, but
  // the agreement it just made stops it.
  const MembershipActions from1 = c.start(1, 50);
  REQUIRE(from1.send.size() == 1);
  CHECK(from1.send[0].second.kind == Admission::kAccept);
  c.start(3, 50);
  c.receive(2, 10);
  CHECK_FALSE(c.node(2).awaiting_answers());
  MembershipActions out;
  REQUIRE(c.node(2).end_rejoin_round(0, 10, out));
  const std::uint64_t t_a = c.node(2).finish_rejoin(10, out);
  CHECK(out.send.empty());
  CHECK(t_a == 49 + 4);
  CHECK(c.node(2).agreed() == 2);
  for (std::uint64_t t = 51; t < 60; ++t) {
    for (int i : {0, 1, 3}) c.start(i, t);
    if (t >= t_a) c.start(2, t);
  }
  CHECK(c.admitted_at[{2, 1}] == Times{t_a});
  CHECK(c.admitted_at[{2, 3}] == Times{t_a});
  CHECK(c.admitted_at[{1, 2}] == Times{t_a});
  CHECK(c.admitted_at[{3, 2}] == Times{t_a});
  CHECK_FALSE(c.node(2).is_dropped(1));
  CHECK_FALSE(c.node(2).is_dropped(3));
}

TEST_CASE(
    "rejoin: when every neighbour is already past t_a the node tries again past the iteration they "
    "reported, with twice the margin") {
  // Node 0 (the lowest id, so its neighbours never propose to it) restarts at 10; it heard its
  // neighbours at 40, but they are at 60 and 61 by the time its proposal arrives.
  Cluster c(3, {{0, 1}, {0, 2}}, 4);
  c.cut(0, 1);
  c.cut(0, 2);
  c.start(1, 30);
  c.start(2, 30);
  c.heal(0, 1);
  c.heal(0, 2);
  c.announce(1, 40);
  c.announce(2, 40);
  REQUIRE(c.node(0).begin_rejoin(10) == std::optional<std::uint64_t>(40));
  c.carry_out(0, 10, c.node(0).propose_rejoin(10));
  CHECK(c.inbox(1).at(0).iteration == 44);
  CHECK(c.start(1, 60).send.size() == 1);  // the refusal, and no proposal (higher id)
  CHECK(c.start(2, 61).send.size() == 1);
  c.receive(0, 10);
  CHECK_FALSE(c.node(0).awaiting_answers());
  MembershipActions out;
  CHECK_FALSE(c.node(0).end_rejoin_round(0, 10, out));
  CHECK(out.send.empty());  // both answered: nothing open to withdraw
  c.carry_out(0, 10, c.node(0).propose_rejoin(10));
  REQUIRE(c.inbox(1).size() == 1);
  CHECK(c.inbox(1)[0].iteration == 61 + (4 << 1));
  c.start(1, 62);
  c.start(2, 63);
  c.receive(0, 10);
  out = {};
  REQUIRE(c.node(0).end_rejoin_round(1, 10, out));
  CHECK(c.node(0).finish_rejoin(10, out) == 69);
  CHECK(out.send.empty());
  for (std::uint64_t t = 64; t < 75; ++t) {
    c.start(1, t);
    c.start(2, t);
    if (t >= 69) c.start(0, t);
  }
  CHECK(c.admitted_at[{0, 1}] == Times{69});
  CHECK(c.admitted_at[{0, 2}] == Times{69});
  CHECK(c.admitted_at[{1, 0}] == Times{69});
  CHECK(c.admitted_at[{2, 0}] == Times{69});
}

TEST_CASE(
    "standby: a standby neighbour is left out from iteration 0 without a drop or a proposal, and "
    "joins at an iteration both ends agree on") {
  // Ring of 4; node 3 is on standby (neighbours 0 and 2) and not running: its links are down.
  Cluster c(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 3, {3});
  c.cut(3, 0);
  c.cut(3, 2);
  for (std::uint64_t t = 0; t < 30; ++t) {
    for (int i : {0, 1, 2}) CHECK(c.start(i, t).send.empty());
  }
  CHECK(c.node(0).is_dropped(3));
  CHECK(c.node(2).is_dropped(3));
  CHECK_FALSE(c.node(0).is_dropped(1));
  CHECK(c.dropped_at.empty());  // never in W: nothing was dropped
  // Node 3 starts (a fresh process, iteration 0, its links up). Without `joining` a node at 0
  // whose neighbours are at 0 has nothing to rejoin; a joining one joins whatever they announce.
  c.heal(3, 0);
  c.heal(3, 2);
  c.announce(3, 0);
  Cluster early(2, {{0, 1}}, 3, {1});
  early.announce(0, 0);
  CHECK_FALSE(early.node(1).begin_rejoin(0).has_value());
  CHECK(early.node(1).begin_rejoin(0, true) == std::optional<std::uint64_t>(0));
  REQUIRE(c.node(3).begin_rejoin(0, true) == std::optional<std::uint64_t>(29));
  c.carry_out(3, 0, c.node(3).propose_rejoin(0));
  REQUIRE(c.inbox(0).size() == 1);
  CHECK(c.inbox(0)[0].iteration == 29 + 3);
  // Node 0 (lower id) would propose to the dropped 3 now that its link is up; the proposal it
  // just accepted stops it: one message, the Accept.
  const MembershipActions from0 = c.start(0, 30);
  REQUIRE(from0.send.size() == 1);
  CHECK((from0.send[0].second.kind == Admission::kAccept && from0.send[0].second.accepted));
  c.start(1, 30);
  c.start(2, 30);
  c.receive(3, 0);
  MembershipActions out;
  REQUIRE(c.node(3).end_rejoin_round(0, 0, out));
  const std::uint64_t t_a = c.node(3).finish_rejoin(0, out);
  CHECK(t_a == 32);
  for (std::uint64_t t = 31; t < 40; ++t) {
    for (int i : {0, 1, 2}) c.start(i, t);
    if (t >= t_a) c.start(3, t);
  }
  for (auto [i, j] : {std::pair{0, 3}, {3, 0}, {2, 3}, {3, 2}}) {
    CHECK(c.admitted_at[{i, j}] == Times{t_a});
  }
  CHECK(c.dropped_at.empty());
}

// The reason node i gave for dropping j in `a` ("" when it did not).
std::string drop_reason(const MembershipActions& a, int j) {
  for (const auto& [peer, why] : a.dropped) {
    if (peer == j) return why;
  }
  return "";
}

TEST_CASE(
    "leave: Leave{t} drops the edge from t on as 'left', at the boundary or in the verdict phase, "
    "and nobody proposes to the node that left until it asks") {
  // Ring of 3. Node 1 stops at 10: node 0 hears it before its boundary 10, node 2 while in 10.
  Cluster c(3, {{0, 1}, {1, 2}, {2, 0}}, 2);
  c.run({0, 1, 2}, 0, 10);
  c.start(2, 10);
  const MembershipActions bye = c.node(1).leave(10);
  c.carry_out(1, 10, bye);
  REQUIRE(bye.send.size() == 2);
  for (const auto& [to, m] : bye.send) CHECK((m.kind == Admission::kLeave && m.iteration == 10));
  const MembershipActions at0 = c.start(0, 10);
  CHECK(drop_reason(at0, 1).find("left") == 0);
  // Node 2's exchange 10: no data and no verdict from 1 (it stopped), 0's arrived.
  std::vector<Admission> in2 = c.inbox(2);
  c.lose_inbox(2);
  c.node(2).note_leaves(in2);
  MembershipActions at2;
  const std::vector<int> planned{0, 1};
  const std::map<int, std::uint32_t> used =
      c.node(2).decide(planned, {{1, "transport: link down"}}, {{0, Verdict{10, true, 1}}}, at2);
  CHECK(used == std::map<int, std::uint32_t>{{0, 1}});
  CHECK(drop_reason(at2, 1).find("left") == 0);
  // A Leave for a later iteration leaves the current one alone.
  Cluster later(2, {{0, 1}}, 2);
  later.start(0, 4);
  later.node(0).note_leaves(std::vector{Admission{Admission::kLeave, 1, 5, false, 5}});
  MembershipActions none;
  const std::vector<int> both{1};
  CHECK(later.node(0).decide(both, {}, {{1, Verdict{4, true, 1}}}, none).size() == 1);
  CHECK(none.dropped.empty());
  CHECK(drop_reason(later.start(0, 5), 1).find("left") == 0);
  // The leaver's links stay up a moment: node 0 (lower id) proposes nothing to it.
  for (std::uint64_t t = 11; t < 16; ++t) {
    CHECK(c.start(0, t).send.empty());
    CHECK(c.start(2, t).send.empty());
  }
  // It comes back (a rejoin: Admit from it) and is admitted at both ends again.
  c.announce(1, 10);
  REQUIRE(c.node(1).begin_rejoin(10).has_value());
  c.carry_out(1, 10, c.node(1).propose_rejoin(10));
  c.start(0, 16);
  c.start(2, 16);
  c.receive(1, 10);
  MembershipActions out;
  REQUIRE(c.node(1).end_rejoin_round(0, 10, out));
  const std::uint64_t t_a = c.node(1).finish_rejoin(10, out);
  for (std::uint64_t t = 17; t < t_a + 2; ++t) {
    for (int i : {0, 2}) c.start(i, t);
    if (t >= t_a) c.start(1, t);
  }
  CHECK(c.admitted_at[{0, 1}] == Times{t_a});
  CHECK(c.admitted_at[{2, 1}] == Times{t_a});
  CHECK_FALSE(c.node(0).is_dropped(1));
}

// The crossing of a join (node 2 of the path 0-2-1 starts from 0; both neighbours have lower ids
// and propose to it too): node 1 is past node 2's t_a (33) when it reads it, so it refuses and
// proposes 40 itself, which node 2 accepts; 33 is agreed with node 0. Runs the first round and
// returns node 2's end_rejoin_round (its messages in *out).
bool crossing_round(Cluster& c, std::uint64_t start, bool joining, MembershipActions* out) {
  c.cut(0, 2);
  c.cut(1, 2);
  c.start(0, 30);
  c.start(1, 30);
  c.heal(0, 2);
  c.heal(1, 2);
  c.announce(2, start);
  REQUIRE(c.node(2).begin_rejoin(start, joining) == std::optional<std::uint64_t>(30));
  c.carry_out(2, start, c.node(2).propose_rejoin(start));
  c.announce(1, 37);  // node 1 ran ahead of what node 2 heard
  const MembershipActions p1 = c.start(1, 37);
  REQUIRE(p1.send.size() == 2);
  CHECK((p1.send[0].second.kind == Admission::kAccept && !p1.send[0].second.accepted));
  CHECK((p1.send[1].second.kind == Admission::kAdmit && p1.send[1].second.iteration == 40));
  c.start(0, 31);  // node 0 accepts 33
  c.receive(2, start);
  return c.node(2).end_rejoin_round(0, start, *out);
}

TEST_CASE(
    "join: when a neighbour's own proposal wins with a later t_a, every agreement moves to that "
    "t_a, so the joiner takes all its neighbours' state at one iteration") {
  Cluster c(3, {{0, 2}, {1, 2}}, 3);
  MembershipActions out;
  CHECK_FALSE(crossing_round(c, 0, true, &out));  // 33 with 0, 40 with 1: not yet
  REQUIRE(out.send.size() == 1);
  CHECK((out.send[0].first == 0 && out.send[0].second.kind == Admission::kAccept &&
         !out.send[0].second.accepted && out.send[0].second.iteration == 33));
  c.carry_out(2, 0, out);
  c.carry_out(2, 0, c.node(2).propose_rejoin(0));
  c.start(0, 32);
  c.start(1, 38);
  c.receive(2, 0);
  out = {};
  REQUIRE(c.node(2).end_rejoin_round(1, 0, out));
  const std::uint64_t t_a = c.node(2).finish_rejoin(0, out);
  CHECK(t_a == 40);
  CHECK(out.send.empty());
  for (std::uint64_t t = 33; t < 45; ++t) {
    c.start(0, t);
    if (t > 38) c.start(1, t);
    if (t >= t_a) c.start(2, t);
  }
  for (auto [i, j] : {std::pair{0, 2}, {2, 0}, {1, 2}, {2, 1}}) {
    CHECK(c.admitted_at[{i, j}] == Times{t_a});
  }
}

TEST_CASE(
    "rejoin after a restart: the same crossing rejoins at the earliest agreement and keeps the "
    "later one for the loop (nothing withdrawn)") {
  Cluster c(3, {{0, 2}, {1, 2}}, 3);
  MembershipActions out;
  REQUIRE(crossing_round(c, 5, false, &out));
  CHECK(out.send.empty());
  CHECK(c.node(2).finish_rejoin(5, out) == 33);
  CHECK(out.send.empty());
  CHECK(c.node(2).agreed() == 2);
}

TEST_CASE("messages from a node that is not a neighbour change nothing") {
  Cluster c(3, {{0, 1}}, 4);
  c.cut(0, 1);
  c.start(0, 5);
  c.start(1, 5);
  const Admission stranger{Admission::kAdmit, 2, 9, false, 5};
  const MembershipActions a = c.node(0).receive(std::vector{stranger}, 6);
  CHECK(a.empty());
  CHECK(c.node(0).is_dropped(1));
  CHECK(c.node(0).partitioned());
}

}  // namespace
}  // namespace gossip::daemon
