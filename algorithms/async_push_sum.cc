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
      acks_(std::move(acks)),
      carry_on_(config.fault().policy() == config::pb::Fault::CARRY_ON) {
  GOSSIP_CHECK(acks_ != nullptr);
  for (int j : Neighbourhood::senders(topology, node)) {
    inflows_.emplace_back().peer = j;
    if (carry_on_) links_[j];
  }
  for (int o : Neighbourhood::receivers(topology, node)) {
    out_seq_[o] = 0;
    sent_w_[o] = 0;
    if (carry_on_) links_[o];
  }
}

namespace {

// A double as two floats holding its 64 bits (a checkpoint's state is floats), and back.
void push_double(std::vector<float>& out, double v) {
  const auto bits = std::bit_cast<std::uint64_t>(v);
  out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits >> 32)));
}
double read_double(std::span<const float> in, std::size_t at) {
  return std::bit_cast<double>(
      static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(in[at])) |
      (static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(in[at + 1])) << 32));
}

// "%a" of a double: exact in text.
std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

}  // namespace

std::size_t AsyncPushSum::state_floats(const config::TrainConfig& config,
                                       const topology::Topology& topology, int node) {
  if (config.fault().policy() != config::pb::Fault::CARRY_ON) return 1;
  return 1 + 2 * (Neighbourhood::senders(topology, node).size() +
                  Neighbourhood::receivers(topology, node).size());
}

std::vector<float> AsyncPushSum::state() const {
  std::vector<float> out{weight_};
  if (!carry_on_) return out;
  for (const auto& [o, w] : sent_w_) push_double(out, w);
  for (const Inflow& in : inflows_) push_double(out, in.taken_w);
  return out;
}

Status AsyncPushSum::on_control(Acks& acks, int peer, std::string_view control) {
  const bool known = peer >= 0 && static_cast<std::size_t>(peer) < acks.taken.size();
  if (control.starts_with("psr ")) {
    // psr <restarted 0|1> <sent %a> <taken %a> <sent_last 0|1>
    const std::string text(control.substr(4));
    Report r;
    int restarted = 0, sent_last = 0, used = 0;
    char sent[64], taken[64];
    if (std::sscanf(text.c_str(), "%d %63s %63s %d%n", &restarted, sent, taken, &sent_last,
                    &used) != 4 ||
        static_cast<std::size_t>(used) != text.size()) {
      return invalid_argument("bad push-sum link report");
    }
    r.restarted = restarted != 0;
    r.sent = std::strtod(sent, nullptr);
    r.taken = std::strtod(taken, nullptr);
    r.sent_last = sent_last != 0;
    if (!std::isfinite(r.sent) || !std::isfinite(r.taken)) {
      return invalid_argument("bad push-sum link report");
    }
    if (!known) return Status::ok();
    std::lock_guard l(acks.mu);
    acks.reports[static_cast<std::size_t>(peer)] = r;
    return Status::ok();
  }
  if (control.starts_with("psb ")) {
    std::uint64_t base = 0;
    for (char c : control.substr(4)) {
      if (c < '0' || c > '9') return invalid_argument("bad push-sum message base");
      base = base * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!known) return Status::ok();
    // The messages behind this one on the link start at `base`: the floor moves before they are
    // read.
    if (acks.transport != nullptr) acks.transport->reset_floor(peer, base);
    std::lock_guard l(acks.mu);
    acks.bases[static_cast<std::size_t>(peer)] = base;
    return Status::ok();
  }
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
  if (!carry_on_) return load_push_sum_weight(state, weight_);
  if (state.size() != state_size()) {
    return invalid_argument("push-sum state of " + std::to_string(state.size()) +
                            " floats; carry-on expects " + std::to_string(state_size()) +
                            " (the weight, then each edge's ledger)");
  }
  GOSSIP_RETURN_IF_ERROR(load_push_sum_weight(state.subspan(0, 1), weight_));
  std::size_t at = 1;
  for (auto& [o, w] : sent_w_) {
    w = read_double(state, at);
    at += 2;
  }
  for (Inflow& in : inflows_) {
    in.taken_w = read_double(state, at);
    at += 2;
  }
  for (std::size_t k = 1; k < state.size(); k += 2) {
    const double v = read_double(state, k);
    if (!std::isfinite(v) || v < 0) {
      return invalid_argument("push-sum ledger " + std::to_string(v) + " is not finite and >= 0");
    }
  }
  return Status::ok();
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
    post(in);  // under carry-on, once the link is reconciled
  }
  for (auto& [peer, link] : links_) link.initial = start == 0;
  next_t_ = static_cast<std::int64_t>(start);
  if (!log_path_.empty()) {
    log_.open(log_path_, std::ios::trunc);
    if (!log_) {
      *exit_code = daemon::kExitError;
      return unavailable("cannot write the push-sum order log " + log_path_);
    }
    log_ << "# gossip-sgd push-sum order 2 node " << self_ << " nodes " << topology_.num_nodes()
         << " start " << start << " total " << total << " staleness " << tau_ << "\n";
  }
  if (carry_on_) {
    // Every link that is up is reconciled before the first iteration (within connect_ms), so
    // that a fresh job starts with its links carrying messages. A node restarted from a
    // checkpoint waits for every link, up or not yet, so that its weight is whole when it mixes.
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.timeouts().connect_ms());
    const auto all_live = [this, start] {
      return std::all_of(links_.begin(), links_.end(), [&](const auto& l) {
        return l.second.state == LinkState::kLive || (start == 0 && !exchange_.link_up(l.first));
      });
    };
    while (!all_live() && std::chrono::steady_clock::now() < until && !services.interrupted()) {
      if (std::optional<IterationEnd> end = watch_links(static_cast<std::int64_t>(start))) {
        *exit_code = end->exit_code;
        return end->status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::string missing;
    for (const auto& [peer, link] : links_) {
      if (link.state != LinkState::kLive) missing += " " + std::to_string(peer);
    }
    GOSSIP_LOG(kInfo) << "push-sum: " << (start > 0 ? "restarted" : "starting") << " at iteration "
                      << start << " with weight " << weight_
                      << (missing.empty() ? ", every link reconciled"
                                          : ", carrying on without the links to" + missing);
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
  if (!live(in.peer) || in.last_past) return;
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
      if (carry_on_) {
        lose(in.peer);  // carried on without it until the link is reconciled
        return std::nullopt;
      }
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
    if (in.last_past && in.posted.empty()) in.finished = true;  // the rest was settled
    if (empty) {
      spare_.push_back(std::move(p.buffer));
      taken_.push_back({in.peer, s, 0.0f, {}, true});  // logged, not mixed
    } else {
      if (!p.counted) in.taken_w += share(in, p);
      taken_.push_back({in.peer, s, w, std::move(p.buffer), false});
    }
  }
  return std::nullopt;
}

double AsyncPushSum::share(const Inflow& in, const Posted& p) const {
  const std::span<const float> header(p.buffer.data() + num_params_, kHeaderFloats);
  const auto s = static_cast<std::int64_t>(
      float_to_bits(header[1]) | (static_cast<std::uint64_t>(float_to_bits(header[2])) << 32));
  if ((float_to_bits(header[3]) & kEmpty) != 0 || s < 0) return 0.0;
  return topology::push_sum_entry(topology_, self_, in.peer, s) * static_cast<double>(header[0]);
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
  if (in.posted.empty()) return std::nullopt;  // carry-on: j's link is not reconciled
  const auto start = std::chrono::steady_clock::now();
  // Polled, so that a skip notice from j ends the wait: j is past an iteration that sends here
  // and kept its share, and waiting for its next message could wait on a cycle of skips.
  auto until = deadline();
  while (!in.posted.front().pending->done()) {
    if (carry_on_) {
      // A link lost or reset meanwhile (this or another) ends the wait for j if it is j's.
      if (std::optional<IterationEnd> end = watch_links(t)) return end;
      if (!live(in.peer) || in.posted.empty()) {
        waited_s_ +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return std::nullopt;
      }
    }
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
  if (!failures.empty() && carry_on_) {
    lose(in.peer);
    return std::nullopt;
  }
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
    sent.to.push_back(o);
  }
}

std::optional<IterationEnd> AsyncPushSum::retire_sends(std::size_t keep) {
  // A finished message is retired wherever it is in the queue: one still reading (a slow
  // out-neighbour) must not hold up the others' buffers.
  const auto finished = [](const Sent& sent) {
    return std::all_of(sent.pending.begin(), sent.pending.end(),
                       [](const auto& p) { return p == nullptr || p->done(); });
  };
  for (auto it = sent_.begin(); it != sent_.end() || sent_.size() > keep;) {
    if (it == sent_.end()) it = sent_.begin();  // more than `keep` left: wait for the oldest
    const bool done = finished(*it);
    if (!done && sent_.size() <= keep) {
      ++it;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < it->pending.size(); ++k) {
      if (it->pending[k] == nullptr) continue;  // abandoned: its link was lost (carry-on)
      const std::vector<daemon::NeighbourFailure> failures = it->pending[k]->wait(
          deadline(), [this] { return services_->interrupted(); },
          [this](int peer) { return exchange_.link_up(peer); });
      if (!failures.empty() && carry_on_ && !services_->interrupted()) {
        lose(it->to[k]);  // σ counts it: the reconciliation settles whether it arrived
        continue;
      }
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
  next_t_ = time;
  const std::int64_t t0 = clock.monotonic_ns();
  if (std::optional<IterationEnd> end = watch_links(time)) return *end;
  if (!(weight_ >= std::numeric_limits<float>::min())) {
    return *fail("push-sum weight " + std::to_string(weight_) + " at iteration " +
                     std::to_string(t) +
                     " after reconciling its links: this node restarted from a checkpoint that "
                     "misses more weight than came back (a neighbour it had sent to was away when "
                     "it restarted)",
                 daemon::kExitError);
  }
  // 1. Our message to this iteration's out-neighbours, without waiting for the earlier ones:
  // skipping an out-neighbour still reading (below) leaves at most two unfinished messages to each,
  // so the queue stays short without a bound of its own.
  if (std::optional<IterationEnd> end = retire_sends(SIZE_MAX)) return *end;
  std::vector<int> to;
  for (const topology::Neighbor& nb : topology_.out_neighbors(self_, time)) to.push_back(nb.node);
  // An out-neighbour still reading our previous message (a slow node) is skipped: its share stays
  // here (column-stochastic still: the own entry takes it), so a slow reader neither holds up this
  // node's sends nor gets a backlog. Never its last message, which it waits for.
  // Under carry-on, so is one whose link is down or not yet reconciled, even for the last message
  // (it is told that this one is past when the link is reconciled).
  std::vector<int> kept;
  std::erase_if(to, [&](int o) {
    const bool unread = out_seq_.at(o) > acks_->taken[o].load();
    // Under carry-on a node that has pushed its weight down to kLowWeight keeps its shares until a
    // message brings weight back: a lost link can leave it with nothing coming in (the directed
    // ring cut once), and pushing on would only drain it to 0.
    const bool drained = carry_on_ && weight_ < kLowWeight;
    const bool busy = ((unread || drained) && time != last_out_.at(o)) || !live(o);
    if (busy) kept.push_back(o);
    if (!live(o) && time == last_out_.at(o)) links_.at(o).last_kept = true;
    return busy;
  });
  std::sort(kept.begin(), kept.end());
  for (int o : kept) {
    if (live(o)) transport_.send_control(o, "psk");  // so that o does not wait for it
  }
  for (int o : to) {
    sent_w_[o] +=
        topology::push_sum_entry(topology_, o, self_, time) * static_cast<double>(weight_);
  }
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
    // Carry-on: from a link that is lost or not yet reconciled, only what arrived before.
    if (std::optional<IterationEnd> end = take_arrived(in, time, sends_now ? 1 : 0)) return *end;
    if (!live(in.peer)) continue;
    noticed(in, time);
    if (!in.finished && live(in.peer) && time - in.heard >= static_cast<std::int64_t>(tau_)) {
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
  next_t_ = static_cast<std::int64_t>(total_);  // every message of this node is past
  for (const auto& [o, seq] : out_seq_) {
    const std::int64_t last = last_out_.at(o);
    if (last < 0 ||
        (last >= static_cast<std::int64_t>(start_) && last < static_cast<std::int64_t>(end))) {
      continue;
    }
    if (carry_on_ && (!live(o) || links_.at(o).told_last)) continue;  // no link, or it knows
    send_empty(o, last);
    if (carry_on_) links_.at(o).told_last = true;
  }
  for (const auto& [peer, link] : links_) {
    if (live(peer)) send_kept_last(peer);
  }
  const auto time = static_cast<std::int64_t>(end);
  // Everything still due to this node.
  taken_.clear();
  for (Inflow& in : inflows_) {
    if (std::optional<IterationEnd> why = take_arrived(in, time, SIZE_MAX)) return why;
    while (!in.finished) {
      if (carry_on_ && !live(in.peer)) {
        if (std::optional<IterationEnd> why = await_link(in, time)) return why;
        continue;
      }
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
    log_ << "weight\t" << hex(static_cast<double>(weight_)) << "\n";
    log_.close();
    if (!log_) return fail("cannot write the push-sum order log " + log_path_, daemon::kExitError);
  }
  GOSSIP_LOG(kInfo) << "push-sum: drained every message due to this node; weight " << weight_;
  if (carry_on_) {
    // Each edge's ledger at this end: with the other end's, equal once the edge is settled.
    std::string sent, taken;
    for (const auto& [o, w] : sent_w_) sent += " " + std::to_string(o) + ":" + hex(w);
    for (const Inflow& in : inflows_)
      taken += " " + std::to_string(in.peer) + ":" + hex(in.taken_w);
    GOSSIP_LOG(kInfo) << "push-sum ledgers: sent" << sent << " taken" << taken;
  }
  return std::nullopt;
}

}  // namespace gossip::algorithms

namespace gossip::algorithms {

bool AsyncPushSum::live(int peer) const {
  if (!carry_on_) return true;
  const auto it = links_.find(peer);
  return it != links_.end() && it->second.state == LinkState::kLive;
}

AsyncPushSum::Inflow* AsyncPushSum::inflow(int peer) {
  for (Inflow& in : inflows_) {
    if (in.peer == peer) return &in;
  }
  return nullptr;
}

void AsyncPushSum::lose(int peer, bool keep_report) {
  Link& link = links_.at(peer);
  const Inflow* from = inflow(peer);
  const bool matters = (from != nullptr && !from->finished) ||
                       (last_out_.count(peer) != 0 && last_out_.at(peer) >= next_t_);
  if (link.state == LinkState::kLive && matters) {  // not a neighbour that is done with this one
    GOSSIP_LOG(kWarning) << "push-sum: the link with node " << peer
                         << " is down or was reset: carrying on without it until it is back and "
                            "reconciled";
  }
  link.state = LinkState::kLost;
  if (Inflow* in = inflow(peer)) {
    // What arrived whole is kept, counted in ρ now, and taken as usual; the rest is settled by the
    // reconciliation (a neighbour that ends closes its link right after its last message).
    std::size_t whole = 0;
    for (Posted& p : in->posted) {
      if (p.counted) {
        ++whole;
        continue;
      }
      if (!p.pending->done() ||
          !p.pending->wait(std::chrono::steady_clock::now(), {}, {}).empty()) {
        break;
      }
      in->taken_w += share(*in, p);
      p.counted = true;
      ++whole;
    }
    while (in->posted.size() > whole) {
      in->posted.back().pending.reset();
      spare_.push_back(std::move(in->posted.back().buffer));
      in->posted.pop_back();
    }
  }
  for (Sent& sent : sent_) {
    for (std::size_t k = 0; k < sent.to.size(); ++k) {
      if (sent.to[k] == peer) sent.pending[k].reset();
    }
  }
  // Nothing it sent before the reconciliation is taken: its "psb" says where its messages start.
  transport_.skip_before(peer, UINT64_MAX);
  std::lock_guard l(acks_->mu);
  if (!keep_report) acks_->reports[static_cast<std::size_t>(peer)].reset();
  acks_->bases[static_cast<std::size_t>(peer)].reset();
}

void AsyncPushSum::send_report(int peer, std::int64_t t) {
  const Inflow* in = inflow(peer);
  const auto out = sent_w_.find(peer);
  const bool sends = out != sent_w_.end();
  const bool sent_last = sends && last_out_.at(peer) < t;
  transport_.send_control(peer, "psr " + std::string(links_.at(peer).restarted ? "1" : "0") + " " +
                                    hex(sends ? out->second : 0.0) + " " +
                                    hex(in != nullptr ? in->taken_w : 0.0) + " " +
                                    (sent_last ? "1" : "0"));
  links_.at(peer).told_last = sent_last;
}

std::optional<IterationEnd> AsyncPushSum::apply_report(int peer, const Report& report) {
  Link& link = links_.at(peer);
  double delta = 0;
  // Its edge to this node: the receiver corrects unless the sender restarted.
  if (Inflow* in = inflow(peer)) {
    if (!report.restarted) {
      delta += report.sent - in->taken_w;
      in->taken_w = report.sent;
    }
    if (report.sent_last && !in->finished) {
      // Its last message is past: what it carried is in the correction (or arrived before the
      // link was lost, and is taken as usual), and nothing more comes.
      in->last_past = true;
      if (in->posted.empty()) in->finished = true;
    }
  }
  // This node's edge to it: the sender corrects when it restarted.
  if (auto out = sent_w_.find(peer); out != sent_w_.end()) {
    if (link.restarted) {
      delta += out->second - report.taken;
      out->second = report.taken;
    }
    const std::uint64_t base = out_seq_.at(peer);
    acks_->taken[static_cast<std::size_t>(peer)].store(base);
    transport_.send_control(peer, "psb " + std::to_string(base));
  }
  link.restarted = false;
  const double weight = static_cast<double>(weight_) + delta;
  if (!link.initial || delta != 0) {
    GOSSIP_LOG(kInfo) << "push-sum: reconciled the link with node " << peer
                      << (report.restarted ? " (it restarted)" : "") << ": weight " << weight_
                      << (delta >= 0 ? " + " : " - ") << std::abs(delta) << " = " << weight;
    if (log_.is_open()) log_ << "reconcile\t" << peer << '\t' << hex(delta) << '\n';
  }
  // A restarted node may go below 0 for a while: it gives back on its out-edges what it sent
  // after its checkpoint before it gets what was sent to it (start() waits for every link).
  weight_ = static_cast<float>(weight);
  return std::nullopt;
}

void AsyncPushSum::send_kept_last(int peer) {
  // Our last message to it was kept while its link was down, and the report did not say it was
  // past (it came later): an empty last message in its place, so that it knows there is no more.
  Link& link = links_.at(peer);
  if (!link.last_kept || link.told_last) return;
  send_empty(peer, last_out_.at(peer));
  link.told_last = true;
}

void AsyncPushSum::send_empty(int peer, std::int64_t s) {
  Sent empty;
  empty.message.assign(message_floats(num_params_), 0.0f);
  float* header = empty.message.data() + num_params_;
  header[1] = bits_to_float(static_cast<std::uint32_t>(s));
  header[2] = bits_to_float(static_cast<std::uint32_t>(static_cast<std::uint64_t>(s) >> 32));
  header[3] = bits_to_float(kEmpty);
  sent_.push_back(std::move(empty));
  send(sent_.back(), std::span<const int>(&peer, 1));
}

std::optional<IterationEnd> AsyncPushSum::watch_links(std::int64_t t) {
  if (!carry_on_) return std::nullopt;
  for (auto& [peer, link] : links_) {
    const bool up = exchange_.link_up(peer);
    bool reported = false;
    {
      std::lock_guard l(acks_->mu);
      reported = acks_->reports[static_cast<std::size_t>(peer)].has_value();
    }
    if (link.state == LinkState::kLive && (!up || reported)) lose(peer, /*keep_report=*/up);
    if (link.state == LinkState::kReconciling && !up) lose(peer);
    if (link.state == LinkState::kLost && up) {
      send_report(peer, t);
      link.state = LinkState::kReconciling;
      link.got_report = false;
      link.got_base = inflow(peer) == nullptr;  // a base comes only on an edge to this node
    }
    if (link.state != LinkState::kReconciling) continue;
    std::optional<Report> report;
    std::optional<std::uint64_t> base;
    {
      std::lock_guard l(acks_->mu);
      if (!link.got_report) report = std::exchange(acks_->reports[peer], std::nullopt);
      if (!link.got_base) base = std::exchange(acks_->bases[peer], std::nullopt);
    }
    if (report) {
      if (std::optional<IterationEnd> end = apply_report(peer, *report)) return end;
      link.got_report = true;
    }
    if (base) {
      Inflow* in = inflow(peer);
      in->next_seq = *base;  // the transport's floor for it is there already
      link.got_base = true;
    }
    if (link.got_report && link.got_base) {
      link.state = LinkState::kLive;
      link.initial = false;
      send_kept_last(peer);
      if (Inflow* in = inflow(peer); in != nullptr && !in->finished) {
        in->heard = t;
        post(*in);
      }
    }
  }
  return std::nullopt;
}

std::optional<IterationEnd> AsyncPushSum::await_link(Inflow& in, std::int64_t t) {
  // Its last message is still due: wait for the link to come back and be reconciled, as long as
  // it is down for less than the deadline; then the node is taken to be gone with its mass.
  auto until = deadline();
  while (!live(in.peer) && !in.finished) {
    if (std::optional<IterationEnd> end = watch_links(t)) return end;
    if (services_->interrupted()) return fail("stop requested (signal)", daemon::kExitStopped);
    if (exchange_.link_up(in.peer)) until = deadline();
    if (std::chrono::steady_clock::now() > until) {
      GOSSIP_LOG(kWarning) << "push-sum: node " << in.peer << " has been gone for "
                           << cfg_.timeouts().deadline_ms()
                           << " ms with its last message to this node due: ending without it "
                              "(the weight it holds is not in this job's sum)";
      in.finished = true;
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

}  // namespace gossip::algorithms
