// ParameterExchange over net::Transport and in-process. The transport already enforces iteration
// tags and deadlines; what this adds is the polling of a stop request while waiting (so SIGTERM
// is honoured within milliseconds even when a neighbour is slow) without abandoning the exchange.
#include "daemon/exchange.h"

#include <algorithm>
#include <atomic>

#include "common/check.h"
#include "net/transport.h"

namespace gossip::daemon {
namespace {

constexpr auto kPollSlice = std::chrono::milliseconds(50);

class TransportPending : public PendingExchange {
 public:
  TransportPending(std::shared_ptr<net::Exchange> exchange, std::span<const Inbox> from)
      : exchange_(std::move(exchange)) {
    for (const Inbox& in : from) remaining_[in.peer] = in.buffer.size();
  }

  std::vector<NeighbourFailure> wait(SteadyTime deadline,
                                     const std::function<bool()>& interrupted) override {
    bool aborted = false;
    std::size_t open = 0;
    for (auto& [peer, left] : remaining_) open += left > 0 ? 1 : 0;
    while (open > 0) {
      SteadyTime now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      SteadyTime slice = std::min(deadline, now + kPollSlice);
      std::optional<net::ChunkEvent> chunk = exchange_->next_chunk(slice);
      if (chunk) {
        auto it = remaining_.find(chunk->peer);
        if (it != remaining_.end() && it->second > 0) {
          it->second -= std::min(it->second, chunk->count);
          if (it->second == 0) --open;
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
    net::ExchangeResult result = exchange_->wait(aborted ? std::chrono::steady_clock::now() : deadline);
    std::vector<NeighbourFailure> failures;
    for (net::PeerFailure& f : result.failures) failures.push_back({f.peer, std::move(f.status)});
    return failures;
  }

 private:
  std::shared_ptr<net::Exchange> exchange_;
  std::map<int, std::size_t> remaining_;  // floats still to arrive, per peer
};

class TransportExchange : public ParameterExchange {
 public:
  explicit TransportExchange(net::Transport& transport) : transport_(transport) {}

  std::unique_ptr<PendingExchange> begin(std::uint64_t iteration, std::span<const float> x,
                                         std::span<const int> to,
                                         std::span<const Inbox> from) override {
    std::vector<net::RecvSpec> recvs;
    recvs.reserve(from.size());
    for (const Inbox& in : from) recvs.push_back({in.peer, in.buffer});
    return std::make_unique<TransportPending>(transport_.exchange(iteration, x, to, recvs), from);
  }
  bool wait_connected(std::span<const int> peers, SteadyTime deadline) override {
    return transport_.wait_connected(peers, deadline);
  }
  std::uint64_t bytes_sent() const override { return transport_.stats().bytes_sent; }
  std::uint64_t bytes_received() const override { return transport_.stats().bytes_received; }

 private:
  net::Transport& transport_;
};

}  // namespace

std::unique_ptr<ParameterExchange> make_transport_exchange(net::Transport& transport) {
  return std::make_unique<TransportExchange>(transport);
}

// ---- In-process hub

class LocalExchangeHub::NodeExchange : public ParameterExchange {
 public:
  NodeExchange(LocalExchangeHub& hub, int self) : hub_(hub), self_(self) {}

  class Pending : public PendingExchange {
   public:
    Pending(NodeExchange& owner, std::uint64_t iteration, std::span<const Inbox> from)
        : owner_(owner), iteration_(iteration), from_(from.begin(), from.end()) {}

    std::vector<NeighbourFailure> wait(SteadyTime deadline,
                                       const std::function<bool()>& interrupted) override {
      LocalExchangeHub& hub = owner_.hub_;
      std::vector<NeighbourFailure> failures;
      std::vector<bool> done(from_.size(), false);
      std::unique_lock lock(hub.mutex_);
      while (true) {
        std::size_t open = 0;
        for (std::size_t k = 0; k < from_.size(); ++k) {
          if (done[k]) continue;
          auto key = std::make_tuple(from_[k].peer, owner_.self_, iteration_);
          auto it = hub.mailbox_.find(key);
          if (it != hub.mailbox_.end()) {
            GOSSIP_CHECK_EQ(it->second.size(), from_[k].buffer.size());
            std::copy(it->second.begin(), it->second.end(), from_[k].buffer.begin());
            owner_.received_ += it->second.size() * sizeof(float);
            hub.mailbox_.erase(it);
            done[k] = true;
          } else if (hub.failed_[from_[k].peer]) {
            failures.push_back({from_[k].peer, unavailable("node " + std::to_string(from_[k].peer) +
                                                           " is gone")});
            done[k] = true;
          } else {
            ++open;
          }
        }
        if (open == 0) break;
        SteadyTime now = std::chrono::steady_clock::now();
        bool stop = now >= deadline;
        if (!stop && interrupted) {
          lock.unlock();
          stop = interrupted();
          lock.lock();
        }
        if (stop) {
          for (std::size_t k = 0; k < from_.size(); ++k) {
            if (!done[k]) {
              failures.push_back({from_[k].peer, deadline_exceeded("no parameters from node " +
                                                                   std::to_string(from_[k].peer) +
                                                                   " for iteration " +
                                                                   std::to_string(iteration_))});
            }
          }
          break;
        }
        hub.arrived_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(10)));
      }
      return failures;
    }

   private:
    NodeExchange& owner_;
    std::uint64_t iteration_;
    std::vector<Inbox> from_;
  };

  std::unique_ptr<PendingExchange> begin(std::uint64_t iteration, std::span<const float> x,
                                         std::span<const int> to,
                                         std::span<const Inbox> from) override {
    {
      std::lock_guard lock(hub_.mutex_);
      if (!hub_.failed_[self_]) {
        for (int peer : to) {
          hub_.mailbox_[std::make_tuple(self_, peer, iteration)].assign(x.begin(), x.end());
          sent_ += x.size() * sizeof(float);
        }
      }
    }
    hub_.arrived_.notify_all();
    return std::make_unique<Pending>(*this, iteration, from);
  }
  bool wait_connected(std::span<const int>, SteadyTime) override { return true; }
  std::uint64_t bytes_sent() const override { return sent_; }
  std::uint64_t bytes_received() const override { return received_; }

 private:
  LocalExchangeHub& hub_;
  int self_;
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<std::uint64_t> received_{0};
};

LocalExchangeHub::LocalExchangeHub(int num_nodes) : failed_(num_nodes, false) {
  for (int i = 0; i < num_nodes; ++i) nodes_.push_back(std::make_unique<NodeExchange>(*this, i));
}
LocalExchangeHub::~LocalExchangeHub() = default;

ParameterExchange& LocalExchangeHub::node(int i) { return *nodes_.at(i); }

void LocalExchangeHub::fail_node(int i) {
  {
    std::lock_guard lock(mutex_);
    failed_.at(i) = true;
  }
  arrived_.notify_all();
}

}  // namespace gossip::daemon
