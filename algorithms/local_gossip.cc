// Local-step gossip (see local_gossip.h). Why it is arranged as it is:
//  - a round's end can fail (fail-stop, a stop request): its state (anchor, start, momentum,
//    copies, the message in flight), x and the local step's optimizer state are snapshot before
//    the round's last inner step and put back, so the driver's checkpoint of the abandoned
//    iteration is the state at its start;
//  - a message depends only on the state when it is posted, and the sender adds it to its own
//    copy only when both ends know the edge was used: a run resumed with a round in flight posts
//    the same bytes again.
#include "algorithms/local_gossip.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "common/divergence.h"
#include "common/log.h"
#include "daemon/membership.h"
#include "sgd/choco.h"
#include "sgd/mean.h"

namespace gossip::algorithms {

using daemon::IterationEnd;
using daemon::IterationStats;
using sgd::RoundTerm;

std::size_t LocalGossip::message_floats(const sgd::RoundConfig& round, std::size_t num_params) {
  if (!round.choco()) return num_params;
  return sgd::gossip_message_bytes(round.compression, num_params) / 4;
}

std::size_t LocalGossip::state_floats(const sgd::RoundConfig& round,
                                      const topology::Topology& topology, int node,
                                      std::size_t num_params) {
  std::size_t edges = 0;
  if (round.choco()) {
    edges = Neighbourhood::senders(topology, node).size() +
            Neighbourhood::receivers(topology, node).size();
  }
  return num_params * (2 + edges) + round.outer.state_size(num_params) +
         (round.overlap ? num_params + 1 : 0);
}

LocalGossip::LocalGossip(int node, const config::TrainConfig& config,
                         const topology::Topology& topology, daemon::ParameterExchange& exchange,
                         std::size_t num_params, bool attached)
    : RoundAlgorithm(node, config, num_params, attached),
      cfg_(config),
      topology_(topology),
      message_floats_(message_floats(round_, num_params)),
      neighbours_(node, config, topology, exchange, static_cast<int>(per_round_)),
      message_(num_params),
      delta_(num_params),
      z_(num_params),
      scratch_(num_params) {
  Result<std::unique_ptr<sgd::Backend>> cpu = sgd::make_backend(sgd::Device::kCpu, 1);
  GOSSIP_CHECK(cpu.is_ok()) << cpu.status().to_string();
  cpu_ = std::move(*cpu);
  for (int j : Neighbourhood::senders(topology, node)) {
    inbox_[j].assign(message_floats_, 0.0f);
    if (round_.choco()) copy_in_[j].assign(num_params, 0.0f);
  }
  if (round_.choco()) {
    for (int o : Neighbourhood::receivers(topology, node)) {
      copy_out_[o].assign(num_params, 0.0f);
      outbox_[o].assign(message_floats_, 0.0f);
    }
  }
  // The checkpoint's own vectors (round_algorithm.h): the copies, then the message in flight.
  for (auto* copies : {&copy_in_, &copy_out_}) {
    for (auto& [peer, c] : *copies) checkpoint_also(c);
  }
  if (round_.overlap) checkpoint_also(message_);
}

Result<std::uint64_t> LocalGossip::start_rounds(std::uint64_t start, bool rejoining,
                                                int* /*exit_code*/) {
  neighbours_.start(*services_);
  neighbours_.reset_byte_counts();
  const bool joining = neighbours_.joins(rejoining);
  if (!rejoining && !joining) return start;
  const std::uint64_t rounds = (total_ + per_round_ - 1) / per_round_;
  const std::uint64_t from = start / per_round_;
  const std::uint64_t to = joining ? neighbours_.join(rounds) : neighbours_.rejoin(from, rounds);
  if (to == from) return start;
  // The agreed round's last iteration: there the node takes its neighbours' messages.
  resend_in_flight_ = false;
  return std::min(total_ - 1, to * per_round_ + per_round_ - 1);
}

std::span<std::byte> LocalGossip::bytes_of(std::vector<float>& words) {
  return {reinterpret_cast<std::byte*>(words.data()),
          sgd::compressed_bytes(round_.compression, d_)};
}

// Round r's messages from message_: plan the neighbours of W(r), forget the copies of changed
// edges, and post (to each out-neighbour its own with CHOCO).
void LocalGossip::post(std::uint64_t r) {
  neighbours_.plan(r, static_cast<std::int64_t>(r));
  reset_changed_edges();
  std::vector<daemon::Inbox> from;
  for (const topology::Neighbor& nb : neighbours_.in()) {
    if (!received_[nb.node]) from.push_back({nb.node, inbox_.at(nb.node)});
  }
  if (!round_.choco()) {
    neighbours_.post(r, message_, from);
  } else {
    std::vector<Outgoing> to;
    for (const topology::Neighbor& nb : neighbours_.out()) {
      std::vector<float>& words = outbox_.at(nb.node);
      sgd::pseudo_gradient(scratch_, message_, copy_out_.at(nb.node));  // fl(m − ĉ_{i→o})
      sgd::compress(round_.compression, scratch_, bytes_of(words));
      to.push_back({nb.node, words});
    }
    neighbours_.post_each(r, to, from);
  }
  in_flight_ = r;
}

// Why a neighbour's round-r message cannot be used ("" if it can): it must decode to finite values.
std::string LocalGossip::check_message(int peer, std::uint64_t r) {
  std::vector<float>& words = inbox_.at(peer);
  bool finite = true;
  if (!round_.choco()) {
    finite = all_finite(words);
  } else {
    sgd::decompress(round_.compression, bytes_of(words), scratch_);
    finite = all_finite(scratch_);
  }
  return finite ? std::string()
                : "its round-" + std::to_string(r) + " message (iteration " +
                      std::to_string(r * per_round_) + ") holds NaN or Inf";
}

// Both ends of every edge dropped or re-admitted forget its copies (local_gossip.h).
void LocalGossip::reset_changed_edges() {
  for (int j : neighbours_.take_changed_edges()) {
    for (auto* copies : {&copy_in_, &copy_out_}) {
      if (auto c = copies->find(j); c != copies->end()) {
        std::fill(c->second.begin(), c->second.end(), 0.0f);
      }
    }
  }
}

// The used edges' copies take the round's messages, the sender's and the receiver's alike.
void LocalGossip::apply_copies() {
  const std::map<int, std::uint32_t>& used = neighbours_.used();
  for (const topology::Neighbor& nb : neighbours_.in()) {
    if (!used.count(nb.node) || received_[nb.node]) continue;
    sgd::choco_decode_apply(round_.compression, bytes_of(inbox_.at(nb.node)), copy_in_.at(nb.node));
  }
  for (const topology::Neighbor& nb : neighbours_.out()) {
    if (neighbours_.carry_on() && !used.count(nb.node)) continue;
    sgd::choco_decode_apply(round_.compression, bytes_of(outbox_.at(nb.node)),
                            copy_out_.at(nb.node));
  }
}

// Waits for round r's messages and combines them (sgd/round.h): the anchor takes the outer step.
std::optional<IterationEnd> LocalGossip::wait_and_combine(std::uint64_t r) {
  if (std::optional<IterationEnd> end =
          neighbours_.wait(r, [&](int peer) { return check_message(peer, r); })) {
    return end;
  }
  in_flight_.reset();
  const daemon::RowWeights w = neighbours_.weights(r, static_cast<std::int64_t>(r));
  terms_.clear();
  if (!round_.choco()) {
    std::vector<RoundTerm> row;
    for (const auto& [j, wj] : w.neighbours) row.push_back({j, wj, inbox_.at(j).data()});
    sgd::plain_gossip_terms(self_, w.self, message_.data(), row, terms_);
  } else {
    apply_copies();
    std::vector<RoundTerm> in, out;
    for (const auto& [j, wj] : w.neighbours) in.push_back({j, wj, copy_in_.at(j).data()});
    for (const topology::Neighbor& nb : neighbours_.out()) {
      if (neighbours_.carry_on()) {
        // Symmetric W: the edge's weight both ways is the row's.
        const auto it = std::find_if(w.neighbours.begin(), w.neighbours.end(),
                                     [&](const auto& e) { return e.first == nb.node; });
        if (it != w.neighbours.end()) {
          out.push_back({nb.node, it->second, copy_out_.at(nb.node).data()});
        }
      } else {
        out.push_back({nb.node, nb.weight, copy_out_.at(nb.node).data()});
      }
    }
    sgd::choco_gossip_terms(message_.data(), round_.choco_step, in, out, terms_);
  }
  sgd::combine(*cpu_, z_, terms_);
  sgd::gossip_outer_step(round_.outer, anchor_, z_, scratch_, momentum_);
  received_.clear();
  return std::nullopt;
}

// A rejoining node: first the neighbours' messages of round r, then x := their mean (messages, or
// on reset CHOCO edges the decoded C(m_j)) is its start, anchor and own message.
std::optional<IterationEnd> LocalGossip::rejoin_round(std::uint64_t r,
                                                      daemon::ParameterBuffers& buffers) {
  neighbours_.plan(r, static_cast<std::int64_t>(r));
  reset_changed_edges();
  std::vector<daemon::Inbox> from;
  for (const topology::Neighbor& nb : neighbours_.in())
    from.push_back({nb.node, inbox_.at(nb.node)});
  const std::map<int, std::string> failed = neighbours_.receive(r, from);
  std::vector<const float*> usable;
  received_.clear();
  for (const topology::Neighbor& nb : neighbours_.in()) {
    received_[nb.node] = true;  // taken (or failed) here, not received again this round
    if (failed.count(nb.node) || !check_message(nb.node, r).empty()) continue;
    const float* v = inbox_.at(nb.node).data();
    if (round_.choco()) {
      sgd::choco_decode_apply(round_.compression, bytes_of(inbox_.at(nb.node)),
                              copy_in_.at(nb.node));
      v = copy_in_.at(nb.node).data();
    }
    usable.push_back(v);
  }
  const std::size_t count = usable.size();
  if (count > 0) {
    sgd::mean_rounded_once(usable, d_, message_.data());
    anchor_ = start_ = message_;
    buffers.set_x(message_);
    GOSSIP_LOG(kInfo) << neighbours_.rejoin_event() << " at iteration " << r * per_round_
                      << ": x := average of " << count << " neighbours";
    services_->metrics.event(
        r * per_round_, neighbours_.rejoin_event(),
        "x := average of " + std::to_string(count) + " neighbours' parameters");
    neighbours_.rejoined();
  }
  // Its own message for round r: x itself, combined as every round's (with overlap, one round on).
  post(r);
  if (!round_.overlap) {
    if (std::optional<IterationEnd> end = wait_and_combine(r)) return end;
    start_ = anchor_;
  }
  buffers.set_x(start_);
  return std::nullopt;
}

// The end of round r with y: Δ, the message, the exchange, the combine and the outer step.
std::optional<IterationEnd> LocalGossip::end_round(std::uint64_t r, std::span<const float> y,
                                                   daemon::ParameterBuffers& buffers) {
  sgd::pseudo_gradient(delta_, start_, y);  // Δ = fl(s − y)
  if (!round_.overlap) {
    sgd::pseudo_gradient(message_, anchor_, delta_);  // m = fl(a − Δ)
    post(r);
    if (std::optional<IterationEnd> end = wait_and_combine(r)) return end;
    start_ = anchor_;
  } else {
    // Round r−1's messages, in flight during this round, arrive now; round r's go out, and the
    // next round starts at the message itself.
    if (in_flight_) {
      if (std::optional<IterationEnd> end = wait_and_combine(*in_flight_)) return end;
    }
    sgd::pseudo_gradient(message_, anchor_, delta_);
    post(r);
    start_ = message_;
    if (r + 1 >= (total_ + per_round_ - 1) / per_round_) {
      // The run's last round: its messages are combined now, so the run ends at the anchor.
      if (std::optional<IterationEnd> end = wait_and_combine(r)) return end;
      start_ = anchor_;
    }
  }
  buffers.set_x(start_);
  return std::nullopt;
}

daemon::IterationOutcome LocalGossip::iterate(std::uint64_t t, daemon::LocalStep& step,
                                              daemon::ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const std::uint64_t r = t / per_round_;
  if (!start_known_) {
    // The first round starts at x (an attached trainer's first post: every node its own, which
    // the first round averages since Δ is then 0).
    buffers.x_to_host(start_);
    anchor_ = start_;
    start_known_ = true;
  }
  if (resend_in_flight_) {
    resend_in_flight_ = false;
    if (r > 0) post(r - 1);  // resumed with round r−1 in flight: the same bytes again
  }
  IterationStats stats;
  const std::int64_t t0 = clock.monotonic_ns();
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const bool own = step.gradient_buffer() != nullptr;
  const bool last = last_of_round(t);
  std::vector<float> x_before, step_before, state_before;
  if (last) {
    x_before = buffers.x_to_host();
    step_before = step.state();
    state_before = state();
  }
  if (own) {
    // The inner step x ← x − γ_t u_t (the bits of Optimizer::step).
    stats.lr = step.direction(buffers.x(), buffers.update(), t);
    buffers.mix(self_, daemon::RowWeights{}, static_cast<float>(stats.lr), true);
  }
  const std::int64_t t1 = clock.monotonic_ns();
  if (last) {
    const std::optional<IterationEnd> end = neighbours_.rejoin_due(r)
                                                ? rejoin_round(r, buffers)
                                                : end_round(r, buffers.x_to_host(), buffers);
    if (end) {
      buffers.set_x(x_before);
      step.load_state(step_before);
      (void)load_state(state_before);
      return *end;
    }
  }
  const std::int64_t t2 = clock.monotonic_ns();
  stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
  stats.exchange_s = stats.wait_s = static_cast<double>(t2 - t1) * 1e-9;
  stats.iteration_s = static_cast<double>(t2 - t0) * 1e-9;
  neighbours_.take_byte_counts(stats);
  return daemon::IterationReport{loss, stats};
}

}  // namespace gossip::algorithms
