// PUSH_SUM with bounded staleness (see async_push_sum.h). The order of an iteration is PushSum's
// where it can be: the gradient runs while the messages travel, and the step's direction (which
// advances the optimizer state) only once the neighbours' messages are taken, so an iteration
// that ends on a failure leaves z_t, w_t and the optimizer state as they were.
#include "algorithms/async_push_sum.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

#include "algorithms/neighbourhood.h"
#include "algorithms/push_sum.h"
#include "common/check.h"
#include "common/divergence.h"
#include "common/log.h"
#include "daemon/exit_codes.h"
#include "topology/push_sum.h"

namespace gossip::algorithms {

using daemon::IterationEnd;

namespace {

float bits_to_float(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t float_to_bits(float f) { return std::bit_cast<std::uint32_t>(f); }

}  // namespace

std::uint64_t AsyncPushSum::buffer_bytes(std::uint64_t tau, std::uint64_t senders,
                                         std::uint64_t receivers, std::uint64_t num_params) {
  // Saturating: a τ near 2^32 with a large model must not wrap to a small figure.
  const long double messages =
      static_cast<long double>(tau + 1) * static_cast<long double>(senders) + 2.0L * receivers;
  const long double bytes =
      messages * static_cast<long double>(message_floats(num_params)) * sizeof(float);
  return bytes >= 1.8e19L ? UINT64_MAX : static_cast<std::uint64_t>(bytes);
}

AsyncPushSum::AsyncPushSum(int node, const config::TrainConfig& config,
                           const topology::Topology& topology, daemon::ParameterExchange& exchange,
                           std::size_t num_params, std::string log_dir, net::Transport& transport,
                           std::shared_ptr<Acks> acks)
    : self_(node),
      cfg_(config),
      topology_(topology),
      exchange_(exchange),
      num_params_(num_params),
      tau_(config.staleness()),
      log_path_(log_dir.empty() ? std::string() : log_dir + "/push_sum_order.tsv"),
      transport_(transport),
      acks_(std::move(acks)) {
  GOSSIP_CHECK(acks_ != nullptr);
  for (int j : Neighbourhood::senders(topology, node)) {
    inflows_.emplace_back().peer = j;
  }
  for (int o : Neighbourhood::receivers(topology, node)) out_seq_[o] = 0;
}

Status AsyncPushSum::on_control(Acks& acks, int peer, std::string_view control) {
  if (control == "psk") {
    if (peer >= 0 && static_cast<std::size_t>(peer) < acks.skipped.size()) acks.skipped[peer]++;
    return Status::ok();
  }
  if (!control.starts_with("psa ")) return Status::ok();
  std::uint64_t n = 0;
  for (char c : control.substr(4)) {
    if (c < '0' || c > '9') return invalid_argument("bad push-sum acknowledgement");
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (peer < 0 || static_cast<std::size_t>(peer) >= acks.taken.size()) return Status::ok();
  std::uint64_t old = acks.taken[peer].load();
  while (old < n && !acks.taken[peer].compare_exchange_weak(old, n)) {
  }
  return Status::ok();
}

Status AsyncPushSum::load_state(std::span<const float> state) {
  return load_push_sum_weight(state, weight_);
}

Result<std::uint64_t> AsyncPushSum::start(std::uint64_t start, bool /*rejoining*/,
                                          std::uint64_t total, daemon::RunServices& services,
                                          int* exit_code) {
  services_ = &services;
  start_ = start;
  total_ = total;
  for (const auto& [o, seq] : out_seq_) {
    last_out_[o] =
        topology::push_sum_last_send(topology_, self_, o, static_cast<std::int64_t>(total));
  }
  for (Inflow& in : inflows_) {
    in.last_send =
        topology::push_sum_last_send(topology_, in.peer, self_, static_cast<std::int64_t>(total));
    in.finished = in.last_send < 0;
    in.heard = static_cast<std::int64_t>(start);
    post(in);
  }
  if (!log_path_.empty()) {
    log_.open(log_path_, std::ios::trunc);
    if (!log_) {
      *exit_code = daemon::kExitError;
      return unavailable("cannot write the push-sum order log " + log_path_);
    }
    log_ << "# gossip-sgd push-sum order 2 node " << self_ << " nodes " << topology_.num_nodes()
         << " start " << start << " total " << total << " staleness " << tau_ << "\n";
  }
  counted_sent_ = exchange_.bytes_sent();
  counted_received_ = exchange_.bytes_received();
  return start;
}

std::optional<IterationEnd> AsyncPushSum::fail(const std::string& why, int code) const {
  if (services_->interrupted()) {
    return IterationEnd{IterationEnd::Kind::kAbandon, daemon::kExitStopped,
                        aborted("stop requested (signal)")};
  }
  GOSSIP_LOG(kError) << why;
  return IterationEnd{IterationEnd::Kind::kAbandon, code, aborted(why)};
}

daemon::SteadyTime AsyncPushSum::deadline() const {
  return std::chrono::steady_clock::now() +
         std::chrono::milliseconds(cfg_.timeouts().deadline_ms());
}

void AsyncPushSum::post(Inflow& in) {
  const std::size_t floats = message_floats(num_params_);
  while (in.posted.size() < tau_ + 1) {
    Posted p;
    p.seq = in.next_seq++;
    if (spare_.empty()) {
      p.buffer.assign(floats, 0.0f);
    } else {
      p.buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    const daemon::Inbox inbox{in.peer, std::span<float>(p.buffer)};
    p.pending = exchange_.begin(p.seq, {}, {}, std::span<const daemon::Inbox>(&inbox, 1));
    in.posted.push_back(std::move(p));
  }
}

std::optional<IterationEnd> AsyncPushSum::take_arrived(Inflow& in, std::int64_t t,
                                                       std::size_t limit) {
  const std::string from = "node " + std::to_string(in.peer);
  for (std::size_t k = 0;
       k < limit && !in.finished && !in.posted.empty() && in.posted.front().pending->done(); ++k) {
    Posted p = std::move(in.posted.front());
    in.posted.pop_front();
    const std::vector<daemon::NeighbourFailure> failures =
        p.pending->wait(std::chrono::steady_clock::now(), {}, {});
    if (!failures.empty()) {
      return fail("message " + std::to_string(p.seq) + " from " + from +
                  " failed: " + failures.front().status.to_string());
    }
    const std::span<const float> header(p.buffer.data() + num_params_, kHeaderFloats);
    const float w = header[0];
    const auto s = static_cast<std::int64_t>(
        float_to_bits(header[1]) | (static_cast<std::uint64_t>(float_to_bits(header[2])) << 32));
    const std::uint32_t flags = float_to_bits(header[3]);
    const bool empty = (flags & kEmpty) != 0;
    std::string bad;
    if (s < 0 || s > in.last_send ||
        topology::push_sum_entry(topology_, self_, in.peer, s) == 0.0) {
      bad = "its iteration " + std::to_string(s) + " is not one at which " + from +
            " sends to this node";
    } else if (empty && s != in.last_send) {
      bad = "it is empty, but only " + from + "'s last message to this node (its iteration " +
            std::to_string(in.last_send) + ") may be";
    } else if (!empty && (!all_finite(p.buffer) || !(w > 0.0f))) {
      bad = "it contains NaN or Inf, or its push-sum weight is not > 0";
    }
    if (!bad.empty()) {
      return fail("message " + std::to_string(p.seq) + " from " + from + " is unusable: " + bad);
    }
    in.heard = t;
    transport_.send_control(in.peer, "psa " + std::to_string(p.seq + 1));  // taken: acknowledged
    if (s == in.last_send) {
      // Nothing more comes from j: the receives posted past its last message are abandoned (they
      // would fail when j ends and closes the link).
      in.finished = true;
      for (Posted& rest : in.posted) rest.pending.reset();
      in.posted.clear();
    }
    if (empty) {
      spare_.push_back(std::move(p.buffer));
      taken_.push_back({in.peer, s, 0.0f, {}, true});  // logged, not mixed
    } else {
      taken_.push_back({in.peer, s, w, std::move(p.buffer), false});
    }
  }
  return std::nullopt;
}

bool AsyncPushSum::noticed(Inflow& in, std::int64_t t) {
  const std::uint64_t notices = acks_->skipped[in.peer].load();
  if (notices <= in.notices) return false;
  in.notices = notices;
  in.heard = t;
  return true;
}

std::optional<IterationEnd> AsyncPushSum::wait_next(Inflow& in, std::int64_t t) {
  post(in);
  const auto start = std::chrono::steady_clock::now();
  // Polled, so that a skip notice from j ends the wait: j is past an iteration that sends here
  // and kept its share, and waiting for its next message could wait on a cycle of skips.
  auto until = deadline();
  while (!in.posted.front().pending->done()) {
    if (noticed(in, t)) {
      waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return std::nullopt;
    }
    if (services_->interrupted()) return fail("stop requested (signal)", daemon::kExitStopped);
    if (std::chrono::steady_clock::now() > until) {
      if (!exchange_.link_up(in.peer)) {
        return fail("waiting for node " + std::to_string(in.peer) + " at iteration " +
                    std::to_string(t) + ": the deadline passed and its link is down");
      }
      until = deadline();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const std::vector<daemon::NeighbourFailure> failures = in.posted.front().pending->wait(
      deadline(), [this] { return services_->interrupted(); },
      [this](int peer) { return exchange_.link_up(peer); });
  waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!failures.empty()) {
    return fail("waiting for node " + std::to_string(in.peer) + " at iteration " +
                std::to_string(t) + " (staleness " + std::to_string(tau_) +
                "): " + failures.front().status.to_string());
  }
  return take_arrived(in, t, 1);
}

void AsyncPushSum::send(Sent& sent, std::span<const int> to) {
  for (int o : to) {
    const std::uint64_t seq = out_seq_[o]++;
    sent.pending.push_back(exchange_.begin(seq, sent.message, std::span<const int>(&o, 1), {}));
  }
}

std::optional<IterationEnd> AsyncPushSum::retire_sends(std::size_t keep) {
  // A finished message is retired wherever it is in the queue: one still reading (a slow
  // out-neighbour) must not hold up the others' buffers.
  const auto finished = [](const Sent& sent) {
    return std::all_of(sent.pending.begin(), sent.pending.end(),
                       [](const auto& p) { return p->done(); });
  };
  for (auto it = sent_.begin(); it != sent_.end() || sent_.size() > keep;) {
    if (it == sent_.end()) it = sent_.begin();  // more than `keep` left: wait for the oldest
    const bool done = finished(*it);
    if (!done && sent_.size() <= keep) {
      ++it;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    for (const auto& p : it->pending) {
      const std::vector<daemon::NeighbourFailure> failures = p->wait(
          deadline(), [this] { return services_->interrupted(); },
          [this](int peer) { return exchange_.link_up(peer); });
      if (!failures.empty()) {
        return fail("sending to node " + std::to_string(failures.front().peer) +
                    " failed: " + failures.front().status.to_string());
      }
    }
    if (!done) {
      waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    spare_.push_back(std::move(it->message));
    it = sent_.erase(it);
  }
  return std::nullopt;
}

void AsyncPushSum::mix(double self_p, std::optional<float> gamma, bool with_update,
                       daemon::ParameterBuffers& buffers) {
  sort_taken();
  std::vector<std::pair<int, double>> row;
  std::vector<float> weights;
  std::vector<const float*> xs;
  bool self_added = false;
  auto add_self = [&] {
    row.emplace_back(self_, self_p);
    weights.push_back(weight_);
    xs.push_back(nullptr);
    self_added = true;
  };
  for (const Taken& m : taken_) {
    if (m.empty) continue;
    if (!self_added && m.peer > self_) add_self();
    row.emplace_back(m.peer, topology::push_sum_entry(topology_, self_, m.peer, m.iteration));
    weights.push_back(m.weight);
    xs.push_back(m.buffer.data());
  }
  if (!self_added) add_self();
  const topology::PushSumMix mix = topology::push_sum_mix(self_, row, weights);
  std::vector<sgd::MixTerm> terms;
  std::size_t k = 0;
  for (const float* x : xs) {
    const double c = x == nullptr ? mix.self : mix.neighbours[k++].second;
    terms.push_back({static_cast<float>(c), x});
  }
  // The step is applied to the de-biased parameters as it is (not γ / w_i^{t+1}): a node that
  // pushed for a few iterations without taking a message holds a small weight, and a step scaled
  // by its inverse would throw it off (docs/design.md §1, "Bounded staleness").
  buffers.mix_terms(terms, gamma.value_or(0.0f), with_update);
  weight_ = mix.weight;
}

void AsyncPushSum::sort_taken() {
  std::sort(taken_.begin(), taken_.end(), [](const Taken& a, const Taken& b) {
    return a.peer != b.peer ? a.peer < b.peer : a.iteration < b.iteration;
  });
}

void AsyncPushSum::log_taken(const std::string& label, std::span<const int> kept) {
  if (!log_.is_open()) return;
  log_ << label << '\t';
  for (std::size_t k = 0; k < taken_.size(); ++k) {
    log_ << (k ? " " : "") << taken_[k].peer << ':' << taken_[k].iteration
         << (taken_[k].empty ? "e" : "");
  }
  if (!kept.empty()) {
    log_ << "\tkept";
    for (int o : kept) log_ << ' ' << o;
  }
  log_ << '\n';
}

daemon::IterationOutcome AsyncPushSum::iterate(std::uint64_t t, daemon::LocalStep& step,
                                               daemon::ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const auto time = static_cast<std::int64_t>(t);
  waited_s_ = 0;
  const std::int64_t t0 = clock.monotonic_ns();
  // 1. Our message to this iteration's out-neighbours, without waiting for the earlier ones:
  // skipping an out-neighbour still reading (below) leaves at most two unfinished messages to each,
  // so the queue stays short without a bound of its own.
  if (std::optional<IterationEnd> end = retire_sends(SIZE_MAX)) return *end;
  std::vector<int> to;
  for (const topology::Neighbor& nb : topology_.out_neighbors(self_, time)) to.push_back(nb.node);
  // An out-neighbour still reading our previous message (a slow node) is skipped: its share stays
  // here (column-stochastic still: the own entry takes it), so a slow reader neither holds up this
  // node's sends nor gets a backlog. Never its last message, which it waits for.
  std::vector<int> kept;
  std::erase_if(to, [&](int o) {
    const bool unread = out_seq_.at(o) > acks_->taken[o].load();
    const bool busy = unread && time != last_out_.at(o);
    if (busy) kept.push_back(o);
    return busy;
  });
  std::sort(kept.begin(), kept.end());
  for (int o : kept) transport_.send_control(o, "psk");  // so that o does not wait for it
  if (!to.empty()) {
    Sent sent;
    if (spare_.empty()) {
      sent.message.resize(message_floats(num_params_));
    } else {
      sent.message = std::move(spare_.back());
      spare_.pop_back();
    }
    const std::span<const float> z = buffers.outgoing();
    std::copy(z.begin(), z.end(), sent.message.begin());
    float* header = sent.message.data() + num_params_;
    header[0] = weight_;
    header[1] = bits_to_float(static_cast<std::uint32_t>(t));
    header[2] = bits_to_float(static_cast<std::uint32_t>(t >> 32));
    header[3] = bits_to_float(0);
    sent_.push_back(std::move(sent));
    send(sent_.back(), to);
  }
  // 2. The gradient while they travel.
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  const std::int64_t t1 = clock.monotonic_ns();
  // 3. What has arrived; a neighbour not heard from for τ iterations is waited for.
  taken_.clear();
  const std::vector<topology::Neighbor> due = topology_.in_neighbors(self_, time);
  for (Inflow& in : inflows_) {
    const bool sends_now = std::any_of(
        due.begin(), due.end(), [&](const topology::Neighbor& nb) { return nb.node == in.peer; });
    if (std::optional<IterationEnd> end = take_arrived(in, time, sends_now ? 1 : 0)) return *end;
    noticed(in, time);
    if (!in.finished && time - in.heard >= static_cast<std::int64_t>(tau_)) {
      if (std::optional<IterationEnd> end = wait_next(in, time)) return *end;
    }
  }
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const std::int64_t t2 = clock.monotonic_ns();
  // 4. The mix with the step.
  daemon::IterationStats stats;
  stats.lr = step.direction(buffers.x(), buffers.update(), t);
  double self_p = topology::push_sum_entry(topology_, self_, self_, time);
  for (int o : kept) self_p += topology::push_sum_entry(topology_, o, self_, time);
  mix(self_p, static_cast<float>(stats.lr), step.has_update(), buffers);
  log_taken(std::to_string(t), kept);
  if (!(weight_ >= std::numeric_limits<float>::min())) {
    // Cannot happen while every in-neighbour keeps sending within τ iterations (each message
    // brings mass back); a clear end instead of a weight that rounds to 0 at the next mix.
    return *fail("push-sum weight " + std::to_string(weight_) + " at iteration " +
                     std::to_string(t) + ": this node pushed its mass away without taking any back",
                 daemon::kExitError);
  }
  for (Taken& m : taken_) {
    if (!m.empty) spare_.push_back(std::move(m.buffer));
  }
  taken_.clear();
  for (Inflow& in : inflows_) {
    if (!in.finished) post(in);
  }
  const std::int64_t now = clock.monotonic_ns();
  stats.mix_s = static_cast<double>(now - t2) * 1e-9;
  stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
  stats.wait_s = waited_s_;
  stats.exchange_s = static_cast<double>(t2 - t0) * 1e-9;
  stats.iteration_s = static_cast<double>(now - t0) * 1e-9;
  const std::uint64_t sent = exchange_.bytes_sent(), received = exchange_.bytes_received();
  stats.bytes_sent = sent - counted_sent_;
  stats.bytes_received = received - counted_received_;
  counted_sent_ = sent;
  counted_received_ = received;
  return daemon::IterationReport{loss, stats};
}

bool AsyncPushSum::ends_at(std::uint64_t /*t*/) const {
  // Alone: every in-neighbour has sent its last message to this node, so no mass comes back.
  return !inflows_.empty() && std::all_of(inflows_.begin(), inflows_.end(),
                                          [](const Inflow& in) { return in.finished; });
}

std::optional<IterationEnd> AsyncPushSum::conclude(std::uint64_t end,
                                                   daemon::ParameterBuffers& buffers) {
  // An out-neighbour whose last message from us is not among the iterations this process ran
  // (start_ .. end − 1: it falls after an early end, or before a resume) gets an empty one in its
  // place, so that it knows there is no more.
  for (const auto& [o, seq] : out_seq_) {
    const std::int64_t last = last_out_.at(o);
    if (last < 0 ||
        (last >= static_cast<std::int64_t>(start_) && last < static_cast<std::int64_t>(end))) {
      continue;
    }
    Sent empty;
    empty.message.assign(message_floats(num_params_), 0.0f);
    float* header = empty.message.data() + num_params_;
    header[1] = bits_to_float(static_cast<std::uint32_t>(last));
    header[2] = bits_to_float(static_cast<std::uint32_t>(static_cast<std::uint64_t>(last) >> 32));
    header[3] = bits_to_float(kEmpty);
    sent_.push_back(std::move(empty));
    send(sent_.back(), std::span<const int>(&o, 1));
  }
  const auto time = static_cast<std::int64_t>(end);
  // Everything still due to this node.
  taken_.clear();
  for (Inflow& in : inflows_) {
    if (std::optional<IterationEnd> why = take_arrived(in, time, SIZE_MAX)) return why;
    while (!in.finished) {
      if (std::optional<IterationEnd> why = wait_next(in, time)) return why;
    }
  }
  if (std::optional<IterationEnd> why = retire_sends(0)) return why;
  if (std::any_of(taken_.begin(), taken_.end(), [](const Taken& m) { return !m.empty; })) {
    mix(1.0, std::nullopt, false, buffers);
  }
  sort_taken();
  log_taken("end");
  taken_.clear();
  for (Inflow& in : inflows_) in.posted.clear();  // receives past the last message: abandoned
  if (log_.is_open()) {
    char w[64];
    std::snprintf(w, sizeof w, "%a", static_cast<double>(weight_));
    log_ << "weight\t" << w << "\n";
    log_.close();
    if (!log_) return fail("cannot write the push-sum order log " + log_path_, daemon::kExitError);
  }
  GOSSIP_LOG(kInfo) << "push-sum: drained every message due to this node; weight " << weight_;
  return std::nullopt;
}

}  // namespace gossip::algorithms
