// ParameterExchange over net::Transport. The transport already enforces iteration
// tags and deadlines; what this adds is the polling of a stop request while waiting (so SIGTERM
// is honoured within milliseconds even when a neighbour is slow) without abandoning the exchange,
// and the membership messages (daemon/control.proto): encoded here into the opaque bytes the
// transport carries, and decoded by the control handler this exchange registers into its mailbox.
#include "daemon/exchange.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <thread>

#include "common/log.h"
#include "daemon/control.pb.h"
#include "net/transport.h"

namespace gossip::daemon {

// ---- ControlMailbox

void ControlMailbox::put_verdict(int peer, const Verdict& v) {
  {
    std::lock_guard l(mu_);
    // Nobody waits for an iteration already waited for: keeping its verdict would only grow.
    if (forgotten_through_ && v.iteration <= *forgotten_through_) return;
    verdicts_[{peer, v.iteration}] = v;
    const auto first = verdicts_.lower_bound({peer, 0});
    const auto last = verdicts_.upper_bound({peer, std::numeric_limits<std::uint64_t>::max()});
    if (static_cast<std::size_t>(std::distance(first, last)) > kMaxVerdictsPerPeer) {
      verdicts_.erase(first);
    }
  }
  cv_.notify_all();
}

void ControlMailbox::put_admission(const Admission& a) {
  {
    std::lock_guard l(mu_);
    if (admissions_.size() >= kMaxAdmissions) {
      if (admissions_dropped_++ == 0) {
        GOSSIP_LOG(kWarning) << kMaxAdmissions << " admission messages wait to be taken; "
                             << "dropping further ones (first from node " << a.peer << ")";
      }
      return;
    }
    admissions_.push_back(a);
  }
  cv_.notify_all();
}

std::size_t ControlMailbox::verdicts_held() const {
  std::lock_guard l(mu_);
  return verdicts_.size();
}

std::size_t ControlMailbox::admissions_held() const {
  std::lock_guard l(mu_);
  return admissions_.size();
}

std::uint64_t ControlMailbox::admissions_dropped() const {
  std::lock_guard l(mu_);
  return admissions_dropped_;
}

std::map<int, Verdict> ControlMailbox::wait_verdicts(std::uint64_t iteration,
                                                     std::span<const int> peers,
                                                     SteadyTime deadline,
                                                     const std::function<bool(int)>& gone,
                                                     const std::function<bool(int)>& still_coming,
                                                     const std::function<bool()>& interrupted) {
  std::map<int, Verdict> got;
  ExtendableDeadline until(deadline);
  std::vector<int> open(peers.begin(), peers.end());
  std::unique_lock l(mu_);
  while (true) {
    std::vector<int> still;
    for (int peer : open) {
      auto it = verdicts_.find({peer, iteration});
      if (it != verdicts_.end()) {
        got[peer] = it->second;
      } else if (withdrawn_locked(peer, iteration)) {
        GOSSIP_LOG(kWarning) << "no verdict of iteration " << iteration << " from node " << peer
                             << ": it withdrew its admission for that iteration";
      } else if (!gone || !gone(peer)) {
        still.push_back(peer);
      }
    }
    open.swap(still);
    if (open.empty()) break;
    const SteadyTime now = std::chrono::steady_clock::now();
    const bool over = until.passed(
        now, [&] { return still_coming && std::any_of(open.begin(), open.end(), still_coming); });
    if (over) break;
    if (interrupted) {
      l.unlock();
      const bool stop = interrupted();
      l.lock();
      if (stop) break;
    }
    // Short slices: link state (gone) and the stop flag are polled, not signalled.
    cv_.wait_until(l, std::min(until.at(), now + std::chrono::milliseconds(10)));
  }
  std::erase_if(verdicts_, [&](const auto& kv) { return kv.first.second <= iteration; });
  forgotten_through_ = std::max(forgotten_through_.value_or(0), iteration);
  return got;
}

std::vector<Admission> ControlMailbox::take_admissions() {
  std::lock_guard l(mu_);
  std::vector<Admission> out;
  out.swap(admissions_);
  return out;
}

bool ControlMailbox::withdrawn_locked(int peer, std::uint64_t iteration) const {
  for (auto a = admissions_.rbegin(); a != admissions_.rend(); ++a) {
    if (a->peer != peer || a->iteration != iteration || a->kind == Admission::kLeave) continue;
    return a->kind == Admission::kAccept && !a->accepted;
  }
  return false;
}

bool ControlMailbox::withdrawn(int peer, std::uint64_t iteration) const {
  std::lock_guard l(mu_);
  return withdrawn_locked(peer, iteration);
}

std::map<int, Verdict> ParameterExchange::wait_verdicts_in(
    ControlMailbox& mailbox, std::uint64_t iteration, std::span<const int> peers,
    SteadyTime deadline, const std::function<bool()>& interrupted) const {
  return mailbox.wait_verdicts(
      iteration, peers, deadline,
      [this, iteration](int peer) {
        if (!no_verdict_coming(peer, iteration)) return false;
        // Evaluated once per peer that leaves the wait this way (it is then no longer waited for).
        // Says which rule ended the wait, for the drop the caller logs next.
        const std::optional<std::uint64_t> at = peer_iteration(peer);
        GOSSIP_LOG(kWarning) << "no verdict of iteration " << iteration << " from node " << peer
                             << " and none coming: "
                             << (at ? "it announced iteration " + std::to_string(*at)
                                    : std::string("its link is down"));
        return true;
      },
      [this, iteration](int peer) {
        std::optional<std::uint64_t> at = peer_iteration(peer);
        return at && *at <= iteration;
      },
      interrupted);
}

namespace {

constexpr auto kPollSlice = std::chrono::milliseconds(50);

// Files a control message from `peer` (daemon/control.proto) into `mailbox`. Kinds that are not
// membership messages are ignored; bytes that do not parse are refused (the transport then treats
// the frame as bad).
Status file(ControlMailbox& mailbox, int peer, std::string_view bytes) {
  pb::Control c;
  if (!c.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return corruption("control message from node " + std::to_string(peer) + " does not parse");
  }
  switch (c.kind_case()) {
    case pb::Control::kVerdict:
      mailbox.put_verdict(
          peer, {c.verdict().iteration(), c.verdict().have_your_data(), c.verdict().degree()});
      break;
    case pb::Control::kAdmit:
      mailbox.put_admission(
          {Admission::kAdmit, peer, c.admit().iteration(), false, c.admit().current()});
      break;
    case pb::Control::kAccept:
      mailbox.put_admission({Admission::kAccept, peer, c.accept().iteration(),
                             c.accept().accepted(), c.accept().current()});
      break;
    case pb::Control::kLeave:
      mailbox.put_admission({Admission::kLeave, peer, c.leave().iteration(), false, 0});
      break;
    default:
      break;  // another consumer's kind, or an empty message: nothing to do
  }
  return Status::ok();
}

class TransportPending : public PendingExchange {
 public:
  TransportPending(std::shared_ptr<net::Exchange> exchange, std::span<const Inbox> from,
                   const net::Transport& transport, std::shared_ptr<const ControlMailbox> mailbox)
      : exchange_(std::move(exchange)), transport_(transport), mailbox_(std::move(mailbox)) {
    for (const Inbox& in : from) remaining_[in.peer] = in.buffer.size();
  }

  std::vector<NeighbourFailure> wait(SteadyTime deadline, const std::function<bool()>& interrupted,
                                     const std::function<bool(int)>& still_coming) override {
    bool aborted = false;
    const SteadyTime started = std::chrono::steady_clock::now();
    std::size_t open = 0;
    for (auto& [peer, left] : remaining_) open += left > 0 ? 1 : 0;
    ExtendableDeadline until(deadline);
    while (open > 0) {
      SteadyTime now = std::chrono::steady_clock::now();
      if (only_past_peers_open()) {
        // Their data will never come: stop waiting once our own sends are through.
        while (!exchange_->sends_done() && std::chrono::steady_clock::now() < until.at() &&
               !(interrupted && interrupted())) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        aborted = true;
        break;
      }
      const bool over = until.passed(now, [&] {
        return still_coming &&
               std::any_of(remaining_.begin(), remaining_.end(),
                           [&](const auto& r) { return r.second > 0 && still_coming(r.first); });
      });
      if (over) break;
      SteadyTime slice = std::min(until.at(), now + kPollSlice);
      std::optional<net::ChunkEvent> chunk = exchange_->next_chunk(slice);
      if (chunk) {
        auto it = remaining_.find(chunk->peer);
        if (it != remaining_.end() && it->second > 0) {
          it->second -= std::min(it->second, chunk->count);
          if (it->second == 0) {
            --open;
            waits_s_[chunk->peer] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          }
        }
        continue;
      }
      // No chunk: either the slice passed, or every receive completed or failed already.
      if (std::chrono::steady_clock::now() < slice) break;
      if (interrupted && interrupted()) {
        aborted = true;
        break;
      }
    }
    net::ExchangeResult result =
        exchange_->wait(aborted ? std::chrono::steady_clock::now() : until.at());
    std::vector<NeighbourFailure> failures;
    for (net::PeerFailure& f : result.failures) {
      const auto at = transport_.peer_iteration(f.peer);
      if (mailbox_->withdrawn(f.peer, exchange_->iteration())) {
        f.status = unavailable("node " + std::to_string(f.peer) +
                               " withdrew its admission for iteration " +
                               std::to_string(exchange_->iteration()));
      } else if (at && *at > exchange_->iteration() &&
                 f.status.code() == StatusCode::kDeadlineExceeded) {
        f.status = unavailable("node " + std::to_string(f.peer) + " went on to iteration " +
                               std::to_string(*at) + " without sending its iteration-" +
                               std::to_string(exchange_->iteration()) + " parameters to us");
      }
      failures.push_back({f.peer, std::move(f.status)});
    }
    return failures;
  }
  std::map<int, double> receive_waits_s() const override { return waits_s_; }
  bool done() const override { return exchange_->resolved(); }

 private:
  // Whether every receive still open is from a peer that has announced a later iteration than
  // this exchange's (frames on a link arrive in order, so its data for this iteration never
  // will), or that withdrew its admission for this iteration (it does not take part in it).
  bool only_past_peers_open() const {
    bool any = false;
    for (const auto& [peer, left] : remaining_) {
      if (left == 0) continue;
      const auto at = transport_.peer_iteration(peer);
      if ((!at || *at <= exchange_->iteration()) &&
          !mailbox_->withdrawn(peer, exchange_->iteration())) {
        return false;
      }
      any = true;
    }
    return any;
  }

  std::shared_ptr<net::Exchange> exchange_;
  const net::Transport& transport_;
  std::shared_ptr<const ControlMailbox> mailbox_;
  std::map<int, std::size_t> remaining_;  // floats still to arrive, per peer
  std::map<int, double> waits_s_;         // receive_waits_s()
};

class TransportExchange : public ParameterExchange {
 public:
  TransportExchange(net::Transport& transport, bool take_control)
      : transport_(transport), mailbox_(std::make_shared<ControlMailbox>()) {
    if (!take_control) return;
    // The handler owns a reference to the mailbox: the transport may call it after this object
    // is gone (until it shuts down).
    transport_.set_control_handler([mailbox = mailbox_](int peer, std::string_view bytes) {
      return file(*mailbox, peer, bytes);
    });
  }

  void send_verdict(int peer, const Verdict& v) override {
    pb::Control c;
    c.mutable_verdict()->set_iteration(v.iteration);
    c.mutable_verdict()->set_have_your_data(v.have_your_data);
    c.mutable_verdict()->set_degree(v.degree);
    transport_.send_control(peer, c.SerializeAsString());
  }
  void send_admission(int peer, const Admission& a) override {
    pb::Control c;
    if (a.kind == Admission::kAdmit) {
      c.mutable_admit()->set_iteration(a.iteration);
      c.mutable_admit()->set_current(a.current);
    } else if (a.kind == Admission::kLeave) {
      c.mutable_leave()->set_iteration(a.iteration);
    } else {
      c.mutable_accept()->set_iteration(a.iteration);
      c.mutable_accept()->set_accepted(a.accepted);
      c.mutable_accept()->set_current(a.current);
    }
    transport_.send_control(peer, c.SerializeAsString());
  }
  std::map<int, Verdict> wait_verdicts(std::uint64_t iteration, std::span<const int> peers,
                                       SteadyTime deadline,
                                       const std::function<bool()>& interrupted) override {
    return wait_verdicts_in(*mailbox_, iteration, peers, deadline, interrupted);
  }
  std::vector<Admission> take_admissions() override { return mailbox_->take_admissions(); }
  bool link_up(int peer) const override { return transport_.peer_iteration(peer).has_value(); }
  std::optional<std::uint64_t> peer_iteration(int peer) const override {
    return transport_.peer_iteration(peer);
  }
  void set_iteration(std::uint64_t iteration, std::uint32_t degree) override {
    transport_.set_local_state(degree, iteration);
  }
  void skip_before(int peer, std::uint64_t iteration) override {
    transport_.skip_before(peer, iteration);
  }

  std::unique_ptr<PendingExchange> begin(std::uint64_t iteration, std::span<const float> x,
                                         std::span<const int> to,
                                         std::span<const Inbox> from) override {
    std::vector<net::RecvSpec> recvs;
    recvs.reserve(from.size());
    for (const Inbox& in : from) recvs.push_back({in.peer, in.buffer});
    return std::make_unique<TransportPending>(transport_.exchange(iteration, x, to, recvs), from,
                                              transport_, mailbox_);
  }
  std::uint64_t bytes_sent() const override { return transport_.stats().bytes_sent; }
  std::uint64_t bytes_received() const override { return transport_.stats().bytes_received; }
  std::map<int, PeerBytes> bytes_by_peer() const override {
    std::map<int, PeerBytes> out;
    for (const auto& [peer, b] : transport_.stats().peer_bytes) out[peer] = {b.sent, b.received};
    return out;
  }

 private:
  net::Transport& transport_;
  std::shared_ptr<ControlMailbox> mailbox_;
};

}  // namespace

std::unique_ptr<ParameterExchange> make_transport_exchange(net::Transport& transport,
                                                           bool take_control) {
  return std::make_unique<TransportExchange>(transport, take_control);
}

}  // namespace gossip::daemon
