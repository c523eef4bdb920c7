// Membership (see membership.h for the rules). Why it is arranged as it is:
//  - every decision is returned, never carried out here, so the protocol can be tested as a state
//    machine and the node's loop decides how messages travel;
//  - a proposal's t_a lies margin · 2^misses past the newest iteration known of the neighbour, so
//    a neighbour that runs ahead of what we hear of it is caught within a few rounds;
//  - an answer that comes too late, and a proposal that was not answered in time, are withdrawn
//    (an Accept{t_a, false} from the proposer), so the other end does not wait at t_a for us; if
//    the withdrawal arrives after it started t_a, it stops waiting as soon as it hears that we are
//    past t_a (the exchange's give-up rule).
#include "daemon/membership.h"

#include <algorithm>

namespace gossip::daemon {

Membership::Membership(Options options, const PeerView& peers, const Clock& clock)
    : self_(options.self),
      neighbours_([&] {
        std::vector<int> n = std::move(options.neighbours);
        std::sort(n.begin(), n.end());
        n.erase(std::unique(n.begin(), n.end()), n.end());
        return n;
      }()),
      margin_(std::max<std::uint64_t>(options.admit_margin, 1)),
      deadline_ns_(options.deadline_ns),
      peers_(peers),
      clock_(clock) {
  for (int j : options.standby) {
    if (is_neighbour(j)) dropped_.insert(j);
  }
}

bool Membership::is_neighbour(int peer) const {
  return std::binary_search(neighbours_.begin(), neighbours_.end(), peer);
}

void Membership::propose(int peer, std::uint64_t t_a, std::uint64_t now_at,
                         MembershipActions& out) {
  proposed_[peer] = {t_a, clock_.monotonic_ns()};
  out.send.emplace_back(peer, Admission{Admission::kAdmit, self_, t_a, false, now_at});
}

void Membership::withdraw(int peer, std::uint64_t t_a, std::uint64_t now_at,
                          MembershipActions& out) {
  out.send.emplace_back(peer, Admission{Admission::kAccept, self_, t_a, false, now_at});
}

std::uint64_t Membership::next_t_a(int peer, std::uint64_t t) {
  const std::uint64_t base =
      std::max({t, floor_, peers_.peer_iteration(peer).value_or(0), reported_[peer]});
  return base + (margin_ << std::min(misses_[peer], 10));
}

// Crossing proposals: the later t_a wins at both ends (the same t_a is agreed by both; the end
// with the earlier one abandons it and accepts, the other refuses the earlier one).
void Membership::on_admit(const Admission& a, std::uint64_t now_at, MembershipActions& out) {
  left_.erase(a.peer);  // a node that left asks to be admitted again (its rejoin)
  bool ok = a.iteration >= std::max(now_at, floor_);  // we have not started t_a yet
  if (auto p = proposed_.find(a.peer); p != proposed_.end()) {
    if (p->second.t_a == a.iteration) {
      proposed_.erase(p);
    } else if (p->second.t_a > a.iteration) {
      ok = false;
    } else {
      withdraw(a.peer, p->second.t_a, now_at, out);
      proposed_.erase(p);
    }
  }
  if (ok) admit_at_[a.peer] = a.iteration;
  out.send.emplace_back(
      a.peer, Admission{Admission::kAccept, self_, a.iteration, ok, std::max(now_at, floor_)});
}

// The answer to our proposal, or a withdrawal of an agreement.
void Membership::on_accept(const Admission& a, std::uint64_t now_at, MembershipActions& out) {
  reported_[a.peer] = std::max(reported_[a.peer], a.current);
  auto p = proposed_.find(a.peer);
  if (p == proposed_.end() || p->second.t_a != a.iteration) {
    auto e = admit_at_.find(a.peer);
    const bool ours = e != admit_at_.end() && e->second == a.iteration;
    // Crossing proposals of the same t_a: the agreement was made on the neighbour's Admit, and
    // its yes to ours may come after t_a started. That yes confirms the edge in use.
    auto u = admitted_.find(a.peer);
    const bool in_use = u != admitted_.end() && u->second == a.iteration;
    if (!a.accepted && ours) {
      admit_at_.erase(e);  // the proposer withdrew it
    } else if (a.accepted && !ours && !in_use) {
      withdraw(a.peer, a.iteration, now_at, out);  // a late yes to a proposal we gave up
    }
    return;
  }
  proposed_.erase(p);
  if (a.accepted && a.iteration >= std::max(now_at, floor_)) {
    admit_at_[a.peer] = a.iteration;
    return;
  }
  ++misses_[a.peer];
  if (a.accepted) withdraw(a.peer, a.iteration, now_at, out);  // too late: we started t_a
}

// The neighbour takes no part in a.iteration or later: its open proposal and agreements are void.
void Membership::on_leave(const Admission& a) {
  left_[a.peer] = a.iteration;
  proposed_.erase(a.peer);
  admit_at_.erase(a.peer);
}

MembershipActions Membership::receive(std::span<const Admission> messages, std::uint64_t now_at) {
  MembershipActions out;
  for (const Admission& a : messages) {
    if (!is_neighbour(a.peer)) continue;
    if (a.kind == Admission::kAdmit) {
      on_admit(a, now_at, out);
    } else if (a.kind == Admission::kLeave) {
      on_leave(a);
    } else {
      on_accept(a, now_at, out);
    }
  }
  return out;
}

void Membership::note_leaves(std::span<const Admission> messages) {
  for (const Admission& a : messages) {
    if (a.kind == Admission::kLeave && is_neighbour(a.peer)) on_leave(a);
  }
}

MembershipActions Membership::leave(std::uint64_t t) const {
  MembershipActions out;
  for (int j : neighbours_) {
    if (peers_.link_up(j))
      out.send.emplace_back(j, Admission{Admission::kLeave, self_, t, false, t});
  }
  return out;
}

namespace {

std::string left_reason(std::uint64_t at) {
  return "left (it announced its leave from iteration " + std::to_string(at) + ")";
}

}  // namespace

MembershipActions Membership::start_iteration(std::uint64_t t,
                                              std::span<const Admission> messages) {
  current_ = t;
  MembershipActions out = receive(messages, t);
  // Announced leaves first: no wait for a node that said it will not be there.
  for (const auto& [j, at] : left_) {
    if (at > t || dropped_.count(j)) continue;
    dropped_.insert(j);
    out.dropped.emplace_back(j, left_reason(at));
  }
  for (auto e = admit_at_.begin(); e != admit_at_.end();) {
    if (e->second > t) {
      ++e;
      continue;
    }
    const int j = e->first;
    if (e->second == t && dropped_.count(j)) {
      dropped_.erase(j);
      misses_.erase(j);
      left_.erase(j);
      admitted_[j] = t;
      out.admitted.push_back(j);
    }
    e = admit_at_.erase(e);
  }
  // The lower id proposes; again (withdrawing the old one) when unanswered for a deadline or once
  // its t_a came.
  const std::int64_t now_ns = clock_.monotonic_ns();
  for (int j : neighbours_) {
    if (j < self_ || !dropped_.count(j) || admit_at_.count(j) || !peers_.link_up(j) ||
        left_.count(j)) {
      continue;
    }
    if (auto p = proposed_.find(j); p != proposed_.end()) {
      if (p->second.t_a > t && now_ns - p->second.sent_ns < deadline_ns_) continue;
      withdraw(j, p->second.t_a, t, out);
      ++misses_[j];
    }
    propose(j, next_t_a(j, t), t, out);
  }
  // A neighbour whose link is down cannot take part (and a send to it would only wait for the
  // deadline): drop it now; its end sees the same link down and drops us too.
  for (int j : neighbours_) {
    if (dropped_.count(j) || peers_.link_up(j)) continue;
    dropped_.insert(j);
    out.dropped.emplace_back(j, "no link");
  }
  return out;
}

std::map<int, std::uint32_t> Membership::decide(std::span<const int> planned,
                                                const std::map<int, std::string>& unusable,
                                                const std::map<int, Verdict>& verdicts,
                                                MembershipActions& out) {
  std::map<int, std::uint32_t> used;
  for (int j : planned) {
    auto v = verdicts.find(j);
    std::string reason;
    if (auto l = left_.find(j); l != left_.end() && l->second <= current_) {
      reason = left_reason(l->second);
    } else if (auto u = unusable.find(j); u != unusable.end()) {
      reason = "no usable parameters from it: " + u->second;
    } else if (v == verdicts.end()) {
      reason = "no verdict from it within the deadline";
    } else if (!v->second.have_your_data) {
      reason = "it did not get our parameters";
    }
    if (reason.empty()) {
      used[j] = v->second.degree;
      continue;
    }
    dropped_.insert(j);
    out.dropped.emplace_back(j, std::move(reason));
  }
  return used;
}

std::optional<std::uint64_t> Membership::begin_rejoin(std::uint64_t start, bool joining) {
  std::uint64_t ahead = 0;
  for (int j : neighbours_) ahead = std::max(ahead, peers_.peer_iteration(j).value_or(0));
  joining_ = joining;
  if (joining) ahead = std::max(ahead, start);
  if (ahead <= start && !joining) return std::nullopt;
  rejoin_t_a_ = ahead + margin_;
  for (int j : neighbours_) dropped_.insert(j);
  return ahead;
}

MembershipActions Membership::propose_rejoin(std::uint64_t start) {
  MembershipActions out;
  floor_ = rejoin_t_a_;
  for (int j : neighbours_) {
    if (peers_.link_up(j)) propose(j, rejoin_t_a_, start, out);
  }
  return out;
}

bool Membership::end_rejoin_round(int round, std::uint64_t start, MembershipActions& out) {
  // Agreed with someone (at t_a, or at a later t_a a neighbour proposed at the same time): rejoin
  // at the earliest agreed iteration; later agreements are kept for the loop.
  std::uint64_t first_agreed = 0, last_agreed = 0;
  for (const auto& [j, at] : admit_at_) {
    if (at < rejoin_t_a_) continue;
    if (first_agreed == 0 || at < first_agreed) first_agreed = at;
    last_agreed = std::max(last_agreed, at);
  }
  if (joining_ && first_agreed != 0 && first_agreed != last_agreed && round + 1 < kRejoinRounds) {
    // A join: a neighbour's own proposal crossed ours and won with a later t_a: move every
    // agreement to that one (withdrawn here, proposed again next round), so that the node takes
    // the state of all its neighbours at one iteration rather than of the earliest few. Not for a
    // restart: there the neighbours run at a checkpoint's distance ahead with the default margin,
    // an earlier agreement is often already under way at the neighbour, and a late withdrawal
    // holds it at t_a (the fault scenario `rejoin` failed with it).
    for (auto e = admit_at_.begin(); e != admit_at_.end();) {
      if (e->second >= last_agreed) {
        ++e;
        continue;
      }
      withdraw(e->first, e->second, start, out);
      e = admit_at_.erase(e);
    }
    for (const auto& [j, p] : proposed_) withdraw(j, p.t_a, start, out);
    proposed_.clear();
    rejoin_t_a_ = last_agreed;
    return false;
  }
  if (first_agreed != 0) {
    rejoin_t_a_ = first_agreed;
    return true;
  }
  // Nobody accepted: our view of the neighbours was stale. Withdraw and go further ahead.
  std::uint64_t newest = rejoin_t_a_;
  for (int j : neighbours_) {
    newest = std::max({newest, reported_[j], peers_.peer_iteration(j).value_or(0)});
    if (auto p = proposed_.find(j); p != proposed_.end()) withdraw(j, p->second.t_a, start, out);
  }
  proposed_.clear();
  rejoin_t_a_ = newest + (margin_ << (round + 1));
  return false;
}

std::uint64_t Membership::finish_rejoin(std::uint64_t start, MembershipActions& out) {
  floor_ = rejoin_t_a_;
  // An agreement below t_a (a lower id's proposal in an earlier round) would never be used:
  // cancel it at both ends (an Accept{t, false} for an agreed t cancels it).
  for (auto e = admit_at_.begin(); e != admit_at_.end();) {
    if (e->second >= rejoin_t_a_) {
      ++e;
      continue;
    }
    withdraw(e->first, e->second, start, out);
    e = admit_at_.erase(e);
  }
  return rejoin_t_a_;
}

}  // namespace gossip::daemon
