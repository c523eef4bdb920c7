// Local-step gossip (see local_gossip.h). Why it is arranged as it is:
//  - a round's messages depend only on the anchor and the copies as they were at the round's start,
//    and the sender adds its message to its own copy only at the round's end, when both ends know
//    the edge was used: a checkpoint taken mid-round, resumed, posts the same bytes again;
//  - the optimizer state advances only in LocalStep::direction, after the round's wait, so an
//    abandoned last iteration leaves x_t and the step's state as they were (driver.h).
#include "algorithms/local_gossip.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/check.h"
#include "common/divergence.h"
#include "common/log.h"
#include "config/sgd_config.h"
#include "daemon/membership.h"
#include "sgd/choco.h"

namespace gossip::algorithms {

using daemon::IterationEnd;
using daemon::IterationStats;
using sgd::RoundTerm;

namespace {

// Every node `node` sends to at some time of the topology's period.
std::vector<int> receivers(const topology::Topology& topology, int node) {
  std::vector<int> out;
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : topology.out_neighbors(node, t)) out.push_back(nb.node);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::size_t LocalGossip::message_floats(const sgd::RoundConfig& round, std::size_t num_params) {
  if (!round.choco()) return num_params;
  return (sgd::compressed_bytes(round.compression, num_params) + 3) / 4;
}

std::size_t LocalGossip::state_floats(const sgd::RoundConfig& round,
                                      const topology::Topology& topology, int node,
                                      std::size_t num_params) {
  std::size_t edges = 0;
  if (round.choco()) {
    edges = Neighbourhood::senders(topology, node).size() + receivers(topology, node).size();
  }
  return num_params * (1 + edges) + round.outer.state_size(num_params);
}

LocalGossip::LocalGossip(int node, const config::TrainConfig& config,
                         const topology::Topology& topology, daemon::ParameterExchange& exchange,
                         std::size_t num_params, bool attached)
    : self_(node),
      cfg_(config),
      topology_(topology),
      round_(config::to_round_config(config)),
      d_(num_params),
      per_round_(attached ? 1 : static_cast<std::uint64_t>(round_.local_steps)),
      message_floats_(message_floats(round_, num_params)),
      neighbours_(node, config, topology, exchange, static_cast<int>(per_round_)),
      anchor_(num_params),
      momentum_(round_.outer.state_size(num_params)),
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
    for (int o : receivers(topology, node)) {
      copy_out_[o].assign(num_params, 0.0f);
      outbox_[o].assign(message_floats_, 0.0f);
    }
  }
}

std::size_t LocalGossip::state_size() const {
  return d_ * (1 + copy_in_.size() + copy_out_.size()) + momentum_.size();
}

std::vector<float> LocalGossip::state() const {
  std::vector<float> out(anchor_);
  out.insert(out.end(), momentum_.begin(), momentum_.end());
  for (const auto& [j, c] : copy_in_) out.insert(out.end(), c.begin(), c.end());
  for (const auto& [o, c] : copy_out_) out.insert(out.end(), c.begin(), c.end());
  return out;
}

Status LocalGossip::load_state(std::span<const float> state) {
  if (state.size() != state_size()) {
    return failed_precondition("the checkpoint holds " + std::to_string(state.size()) +
                               " floats of local-gossip state, this job " +
                               std::to_string(state_size()));
  }
  auto take = [&state](std::vector<float>& v) {
    std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(v.size()), v.begin());
    state = state.subspan(v.size());
  };
  take(anchor_);
  anchor_known_ = true;
  take(momentum_);
  for (auto& [j, c] : copy_in_) take(c);
  for (auto& [o, c] : copy_out_) take(c);
  return Status::ok();
}

Result<std::uint64_t> LocalGossip::start(std::uint64_t start, bool rejoining, std::uint64_t total,
                                         daemon::RunServices& services, int* /*exit_code*/) {
  services_ = &services;
  total_ = total;
  neighbours_.start(services);
  sent_before_ = neighbours_.bytes_sent();
  received_before_ = neighbours_.bytes_received();
  if (!rejoining) return start;
  const std::uint64_t rounds = (total + per_round_ - 1) / per_round_;
  const std::uint64_t from = start / per_round_;
  const std::uint64_t to = neighbours_.rejoin(from, rounds);
  return to == from ? start : to * per_round_;
}

std::span<std::byte> LocalGossip::bytes_of(std::vector<float>& words) {
  return {reinterpret_cast<std::byte*>(words.data()),
          sgd::compressed_bytes(round_.compression, d_)};
}

// Round r's neighbours, a rejoin when one is due, and the round's messages.
void LocalGossip::begin_round(std::uint64_t r, daemon::ParameterBuffers& buffers) {
  neighbours_.plan(r, static_cast<std::int64_t>(r));
  reset_changed_edges();
  received_.clear();
  if (neighbours_.rejoin_due(r)) rejoin_round(r, buffers);
  post_round(r);
}

void LocalGossip::post_round(std::uint64_t r) {
  std::vector<daemon::Inbox> from;
  for (const topology::Neighbor& nb : neighbours_.in()) {
    if (!received_[nb.node]) from.push_back({nb.node, inbox_.at(nb.node)});
  }
  if (!round_.choco()) {
    neighbours_.post(r, anchor_, from);
  } else {
    std::vector<Outgoing> to;
    for (const topology::Neighbor& nb : neighbours_.out()) {
      std::vector<float>& words = outbox_.at(nb.node);
      sgd::pseudo_gradient(scratch_, anchor_, copy_out_.at(nb.node));  // fl(a − ĉ_{i→o})
      sgd::compress(round_.compression, scratch_, bytes_of(words));
      to.push_back({nb.node, words});
    }
    neighbours_.post_each(r, to, from);
  }
  posted_ = r;
}

// A rejoining node: first the neighbours' messages of round r, then x := their mean (anchors, or
// on reset CHOCO edges the decoded C(a_j)) is what it starts the round from and sends.
void LocalGossip::rejoin_round(std::uint64_t r, daemon::ParameterBuffers& buffers) {
  std::vector<daemon::Inbox> from;
  for (const topology::Neighbor& nb : neighbours_.in())
    from.push_back({nb.node, inbox_.at(nb.node)});
  const std::map<int, std::string> failed = neighbours_.receive(r, from);
  std::vector<double> sum(d_, 0.0);
  int count = 0;
  for (const topology::Neighbor& nb : neighbours_.in()) {
    received_[nb.node] = true;  // taken (or failed) here, not received again this round
    if (failed.count(nb.node) || !check_message(nb.node, r).empty()) continue;
    const float* v = inbox_.at(nb.node).data();
    if (round_.choco()) {
      sgd::choco_decode_apply(round_.compression, bytes_of(inbox_.at(nb.node)),
                              copy_in_.at(nb.node));
      v = copy_in_.at(nb.node).data();
    }
    for (std::size_t k = 0; k < d_; ++k) sum[k] += v[k];
    ++count;
  }
  if (count == 0) return;  // nobody delivered: try again next round
  for (std::size_t k = 0; k < d_; ++k) anchor_[k] = static_cast<float>(sum[k] / count);
  buffers.set_x(anchor_);
  GOSSIP_LOG(kInfo) << "rejoined at iteration " << r * per_round_ << ": x := average of " << count
                    << " neighbours";
  services_->metrics.event(r * per_round_, "rejoined",
                           "x := average of " + std::to_string(count) + " neighbours' parameters");
  neighbours_.rejoined();
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
    if (auto c = copy_in_.find(j); c != copy_in_.end())
      std::fill(c->second.begin(), c->second.end(), 0.0f);
    if (auto c = copy_out_.find(j); c != copy_out_.end())
      std::fill(c->second.begin(), c->second.end(), 0.0f);
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

// Round r's combine and outer step (sgd/round.h): the anchor becomes the next round's start.
void LocalGossip::end_round(std::uint64_t r, std::span<const float> y) {
  const auto time = static_cast<std::int64_t>(r);
  const daemon::RowWeights w = neighbours_.weights(r, time);
  sgd::pseudo_gradient(delta_, anchor_, y);  // Δ = fl(a − y)
  terms_.clear();
  if (!round_.choco()) {
    std::vector<RoundTerm> row;
    for (const auto& [j, wj] : w.neighbours) row.push_back({j, wj, inbox_.at(j).data()});
    sgd::plain_gossip_terms(self_, w.self, anchor_.data(), row, terms_);
  } else {
    apply_copies();
    std::vector<RoundTerm> in, out;
    for (const auto& [j, wj] : w.neighbours) in.push_back({j, wj, copy_in_.at(j).data()});
    for (const topology::Neighbor& nb : neighbours_.out()) {
      if (neighbours_.carry_on()) {
        // Symmetric W: the edge's weight both ways is the row's.
        const auto it = std::find_if(w.neighbours.begin(), w.neighbours.end(),
                                     [&](const auto& e) { return e.first == nb.node; });
        if (it != w.neighbours.end())
          out.push_back({nb.node, it->second, copy_out_.at(nb.node).data()});
      } else {
        out.push_back({nb.node, nb.weight, copy_out_.at(nb.node).data()});
      }
    }
    sgd::choco_gossip_terms(anchor_.data(), round_.choco_step, in, out, terms_);
  }
  sgd::combine(*cpu_, z_, terms_, delta_);
  sgd::gossip_outer_step(round_.outer, anchor_, z_, scratch_, momentum_);
}

daemon::IterationOutcome LocalGossip::iterate(std::uint64_t t, daemon::LocalStep& step,
                                              daemon::ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const std::uint64_t r = t / per_round_;
  if (posted_ != r) {
    // The round's first iteration in this process: its start is x, unless a resumed run restored
    // the anchor of a round it had begun, or an attached trainer posted x after its own steps (its
    // anchor is what the last round gave it; its first post is its x_0, the first anchor).
    const bool own_steps = step.gradient_buffer() != nullptr;
    if ((own_steps && t % per_round_ == 0) || !anchor_known_) buffers.x_to_host(anchor_);
    anchor_known_ = true;
    begin_round(r, buffers);
  }
  IterationStats stats;
  const std::int64_t t0 = clock.monotonic_ns();
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  const std::int64_t t1 = clock.monotonic_ns();
  stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
  const bool last = last_of_round(t);
  if (last) {
    const std::optional<IterationEnd> end =
        neighbours_.wait(r, [&](int peer) { return check_message(peer, r); });
    if (end) return *end;
  }
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const std::int64_t t2 = clock.monotonic_ns();
  if (step.gradient_buffer() != nullptr) {
    // The inner step x ← x − γ_t u_t (the bits of Optimizer::step).
    stats.lr = step.direction(buffers.x(), buffers.update(), t);
    buffers.mix(self_, daemon::RowWeights{}, static_cast<float>(stats.lr), true);
  }
  if (last) {
    end_round(r, buffers.x_to_host());
    buffers.set_x(anchor_);
    if (t + 1 < total_) begin_round(r + 1, buffers);
  }
  const std::int64_t t3 = clock.monotonic_ns();
  stats.wait_s = static_cast<double>(t2 - t1) * 1e-9;
  stats.exchange_s = stats.wait_s;
  stats.mix_s = static_cast<double>(t3 - t2) * 1e-9;
  stats.iteration_s = static_cast<double>(t3 - t0) * 1e-9;
  stats.bytes_sent = neighbours_.bytes_sent() - sent_before_;
  stats.bytes_received = neighbours_.bytes_received() - received_before_;
  sent_before_ += stats.bytes_sent;
  received_before_ += stats.bytes_received;
  return daemon::IterationReport{loss, stats};
}

}  // namespace gossip::algorithms
