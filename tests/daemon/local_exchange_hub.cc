// The in-process hub: mailboxes under one mutex; waits follow the product's deadline rule
// (ExtendableDeadline, daemon/exchange.h).
#include "tests/daemon/local_exchange_hub.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "common/check.h"

namespace gossip::daemon {

class LocalExchangeHub::NodeExchange : public ParameterExchange {
 public:
  NodeExchange(LocalExchangeHub& hub, int self) : hub_(hub), self_(self) {}

  class Pending : public PendingExchange {
   public:
    Pending(NodeExchange& owner, std::uint64_t iteration, std::span<const Inbox> from)
        : owner_(owner), iteration_(iteration), from_(from.begin(), from.end()) {}

    bool done() const override {
      LocalExchangeHub& hub = owner_.hub_;
      std::lock_guard lock(hub.mutex_);
      for (const Inbox& in : from_) {
        if (!hub.mailbox_.count(std::make_tuple(in.peer, owner_.self_, iteration_)) &&
            !hub.failed_[in.peer] && hub.nodes_[in.peer]->iteration_.load() <= iteration_) {
          return false;
        }
      }
      return true;
    }
    std::vector<NeighbourFailure> wait(SteadyTime deadline,
                                       const std::function<bool()>& interrupted,
                                       const std::function<bool(int)>& still_coming) override {
      LocalExchangeHub& hub = owner_.hub_;
      ExtendableDeadline until(deadline);
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
            if (auto p = hub.poison_.find(key);
                p != hub.poison_.end() && !from_[k].buffer.empty()) {
              from_[k].buffer[0] = p->second;
            }
            owner_.received_ += it->second.size() * sizeof(float);
            hub.mailbox_.erase(it);
            done[k] = true;
          } else if (hub.failed_[from_[k].peer]) {
            failures.push_back(
                {from_[k].peer, unavailable("node " + std::to_string(from_[k].peer) + " is gone")});
            done[k] = true;
          } else if (hub.nodes_[from_[k].peer]->iteration_.load() > iteration_) {
            // It went on without sending to us (a send is filed before the sender moves on).
            failures.push_back(
                {from_[k].peer, unavailable("node " + std::to_string(from_[k].peer) +
                                            " went on to a later iteration without "
                                            "sending its iteration-" +
                                            std::to_string(iteration_) + " parameters to us")});
            done[k] = true;
          } else {
            ++open;
          }
        }
        if (open == 0) break;
        SteadyTime now = std::chrono::steady_clock::now();
        bool stop = until.passed(now, [&] {
          if (!still_coming) return false;
          lock.unlock();  // still_coming may ask the hub (its own lock)
          bool extend = false;
          for (std::size_t k = 0; k < from_.size(); ++k) {
            extend = extend || (!done[k] && still_coming(from_[k].peer));
          }
          lock.lock();
          return extend;
        });
        if (!stop && interrupted) {
          lock.unlock();
          stop = interrupted();
          lock.lock();
        }
        if (stop) {
          for (std::size_t k = 0; k < from_.size(); ++k) {
            if (!done[k]) {
              failures.push_back(
                  {from_[k].peer,
                   deadline_exceeded("no parameters from node " + std::to_string(from_[k].peer) +
                                     " for iteration " + std::to_string(iteration_))});
            }
          }
          break;
        }
        hub.arrived_.wait_until(lock, std::min(until.at(), now + std::chrono::milliseconds(10)));
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
          auto key = std::make_tuple(self_, peer, iteration);
          if (hub_.lost_.count(key)) continue;
          hub_.mailbox_[key].assign(x.begin(), x.end());
          sent_ += x.size() * sizeof(float);
        }
      }
    }
    hub_.arrived_.notify_all();
    return std::make_unique<Pending>(*this, iteration, from);
  }
  std::uint64_t bytes_sent() const override { return sent_; }
  std::uint64_t bytes_received() const override { return received_; }

  // The hub's mutex is released before a mailbox is touched (wait_verdicts takes them in the
  // other order).
  void send_verdict(int peer, const Verdict& v) override {
    {
      std::lock_guard lock(hub_.mutex_);
      if (hub_.failed_[self_] || hub_.failed_[peer]) return;
      if (hub_.lost_verdicts_.count(std::make_tuple(self_, peer, v.iteration))) return;
    }
    hub_.nodes_[peer]->mailbox_.put_verdict(self_, v);
  }
  void send_admission(int peer, const Admission& a) override {
    {
      std::lock_guard lock(hub_.mutex_);
      if (hub_.failed_[self_] || hub_.failed_[peer]) return;
    }
    Admission copy = a;
    copy.peer = self_;
    hub_.nodes_[peer]->mailbox_.put_admission(copy);
  }
  std::map<int, Verdict> wait_verdicts(std::uint64_t iteration, std::span<const int> peers,
                                       SteadyTime deadline,
                                       const std::function<bool()>& interrupted) override {
    return wait_verdicts_in(mailbox_, iteration, peers, deadline, interrupted);
  }
  std::vector<Admission> take_admissions() override { return mailbox_.take_admissions(); }
  bool link_up(int peer) const override {
    std::lock_guard lock(hub_.mutex_);
    return !hub_.failed_[peer];
  }
  std::optional<std::uint64_t> peer_iteration(int peer) const override {
    std::lock_guard lock(hub_.mutex_);
    if (hub_.failed_[peer]) return std::nullopt;
    return hub_.nodes_[peer]->iteration_.load();
  }
  void set_iteration(std::uint64_t iteration, std::uint32_t) override { iteration_ = iteration; }
  void skip_before(int, std::uint64_t) override {}

  ControlMailbox mailbox_;
  std::atomic<std::uint64_t> iteration_{0};

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
  for (auto& n : nodes_) n->mailbox_.notify();
}

void LocalExchangeHub::poison(int from, int to, std::uint64_t iteration, float value) {
  std::lock_guard lock(mutex_);
  poison_[std::make_tuple(from, to, iteration)] = value;
}

void LocalExchangeHub::lose(int from, int to, std::uint64_t iteration) {
  std::lock_guard lock(mutex_);
  lost_.insert(std::make_tuple(from, to, iteration));
}

void LocalExchangeHub::lose_verdict(int from, int to, std::uint64_t iteration) {
  std::lock_guard lock(mutex_);
  lost_verdicts_.insert(std::make_tuple(from, to, iteration));
}

}  // namespace gossip::daemon
