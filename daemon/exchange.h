// ParameterExchange: what the D-PSGD loop needs from the network, and nothing more (after gloo:
// the algorithm never sees a socket). One iteration's exchange sends x_t to the out-neighbours and
// fills one buffer per in-neighbour with that neighbour's x_j^t — iteration-tagged, so a buffer
// only ever receives iteration-t data — and reports, by neighbour id, what did not arrive in time.
//
// The product's implementation is TransportExchange over net::Transport (TCP + TLS between
// processes); the unit tests of the loop run n nodes as threads over tests/daemon/
// local_exchange_hub.h.
//
// Buffers are borrowed: `x` and every inbox stay untouched by the caller until wait() returns,
// and untouched by the exchange afterwards. A PendingExchange is used from one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace gossip::net {
class Transport;
}  // namespace gossip::net

namespace gossip::daemon {

using SteadyTime = std::chrono::steady_clock::time_point;

// How often a wait's deadline may be extended for a peer that is alive and behind (so that one
// node held up by a dead or silent neighbour does not make its own neighbours drop it too).
inline constexpr int kMaxExtensions = 8;

// The deadline of one wait, which moves on by its original span (deadline − construction time)
// while a peer is still coming, at most kMaxExtensions times: the rule every ParameterExchange
// wait follows. `still_coming()` is asked at every passed() call (each wake of the wait), so that
// a peer that was behind and caught up shortly before the deadline gets a whole span from the
// last moment it was seen behind, instead of none: it was held up, not late. Not thread-safe; one
// per wait.
class ExtendableDeadline {
 public:
  explicit ExtendableDeadline(SteadyTime deadline)
      : ExtendableDeadline(deadline, std::chrono::steady_clock::now()) {}
  ExtendableDeadline(SteadyTime deadline, SteadyTime now)
      : at_(deadline), window_(deadline - now) {}

  SteadyTime at() const { return at_; }
  // Whether the wait is over at `now`: false before the deadline; when it passes, false (and the
  // deadline moves) while extensions remain and `still_coming()` holds now or held less than a
  // span ago.
  bool passed(SteadyTime now, const std::function<bool()>& still_coming) {
    const bool coming = extensions_ < kMaxExtensions && still_coming && still_coming();
    if (coming) {
      last_coming_ = now;
      seen_coming_ = true;
    }
    if (now < at_) return false;
    if (extensions_ >= kMaxExtensions) return true;
    if (coming) {
      ++extensions_;
      at_ += window_;
      return false;
    }
    if (seen_coming_ && last_coming_ + window_ > now) {
      ++extensions_;
      at_ = last_coming_ + window_;
      return false;
    }
    return true;
  }

 private:
  SteadyTime at_;
  SteadyTime::duration window_;
  int extensions_ = 0;
  SteadyTime last_coming_{};  // when still_coming() last held, if seen_coming_
  bool seen_coming_ = false;
};

struct Inbox {
  int peer = -1;
  std::span<float> buffer;  // exactly the model's parameter count
};

struct NeighbourFailure {
  int peer = -1;
  Status status;
};

class PendingExchange {
 public:
  virtual ~PendingExchange() = default;
  // Waits until every send and receive finished or failed, `deadline` passed, or `interrupted()`
  // returned true (polled every few milliseconds; may be empty). When the deadline passes while
  // `still_coming(peer)` holds for a peer whose data is missing (its link is up and it is behind,
  // e.g. still finishing the previous iteration), the deadline moves on by the original span, at
  // most kMaxExtensions times. Returns the failures (an unfinished receive is a DeadlineExceeded
  // failure of its peer). Call once.
  virtual std::vector<NeighbourFailure> wait(SteadyTime deadline,
                                             const std::function<bool()>& interrupted,
                                             const std::function<bool(int)>& still_coming = {}) = 0;
  // After wait(): for each peer whose message arrived whole, the seconds from the start of wait()
  // until it did (0 when it was complete before). Empty where the exchange does not measure it.
  virtual std::map<int, double> receive_waits_s() const { return {}; }
  // Whether every send and receive has finished or failed, so that wait() returns at once. Does
  // not wait (an asynchronous algorithm polls its posted receives with it).
  virtual bool done() const = 0;
};

// Membership control messages (the carry-on fault policy, docs/daemon.md "Fault tolerance").
// Verdict: after the data phase of `iteration`, whether the sender has the receiver's x^iteration
// (whole, finite) and the sender's planned degree at that iteration.
struct Verdict {
  std::uint64_t iteration = 0;
  bool have_your_data = false;
  std::uint32_t degree = 0;
};

// Admit (proposal: use the edge from `iteration` on) or its answer Accept; or Leave (the sender
// takes no part in `iteration` or later: a stop request, SIGTERM).
struct Admission {
  enum Kind { kAdmit, kAccept, kLeave } kind = kAdmit;
  int peer = -1;
  std::uint64_t iteration = 0;
  bool accepted = false;      // Accept only
  std::uint64_t current = 0;  // the sender's current iteration
};

// Received control messages, filled by an exchange's delivery side (TransportExchange: the
// transport's control handler) and read by the loop. Bounded whatever the run's length and
// whatever the peers send: a verdict for an iteration already waited for is dropped at once, at
// most kMaxVerdictsPerPeer are kept per peer (the lowest iterations go first), and at most
// kMaxAdmissions admissions wait for take_admissions() (further ones are dropped and counted: a
// loop that never takes them, as under fault.policy FAIL_STOP, holds no more than that).
class ControlMailbox {
 public:
  static constexpr std::size_t kMaxVerdictsPerPeer = 64;
  static constexpr std::size_t kMaxAdmissions = 4096;

  void put_verdict(int peer, const Verdict& v);
  void put_admission(const Admission& a);
  // Messages held now, and admissions dropped at the bound so far (for tests and logs).
  std::size_t verdicts_held() const;
  std::size_t admissions_held() const;
  std::uint64_t admissions_dropped() const;
  // Waits until a verdict for `iteration` from each of `peers` arrived, or `gone(peer)` says that
  // peer's link is down, or the peer withdrew its admission for `iteration` (withdrawn()), or
  // `deadline` passes (extended as in PendingExchange::wait while `still_coming(peer)` holds for a
  // missing one), or `interrupted()`. Returns what arrived; forgets every verdict for iterations <=
  // `iteration`.
  std::map<int, Verdict> wait_verdicts(std::uint64_t iteration, std::span<const int> peers,
                                       SteadyTime deadline, const std::function<bool(int)>& gone,
                                       const std::function<bool(int)>& still_coming,
                                       const std::function<bool()>& interrupted);
  std::vector<Admission> take_admissions();
  // Whether `peer`'s last held (not yet taken) message about `iteration` is a withdrawal
  // (Accept{iteration, false}): it takes no part in an edge admitted for `iteration`. A node that
  // started `iteration` with that edge before the withdrawal came stops waiting for the peer's
  // parameters and verdict at once (wait_verdicts does so by itself) instead of for a deadline.
  bool withdrawn(int peer, std::uint64_t iteration) const;
  void notify() { cv_.notify_all(); }

 private:
  bool withdrawn_locked(int peer, std::uint64_t iteration) const;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::map<std::pair<int, std::uint64_t>, Verdict> verdicts_;  // (peer, iteration)
  std::optional<std::uint64_t> forgotten_through_;  // verdicts up to this iteration are dropped
  std::vector<Admission> admissions_;
  std::uint64_t admissions_dropped_ = 0;
};

class ParameterExchange {
 public:
  virtual ~ParameterExchange() = default;
  // ---- membership (carry-on fault policy)
  // Sends are fire-and-forget: dropped when the link to `peer` is down.
  virtual void send_verdict(int peer, const Verdict& v) = 0;
  virtual void send_admission(int peer, const Admission& a) = 0;
  // See ControlMailbox::wait_verdicts: a peer whose link is down is not waited for; the deadline
  // is extended while a missing peer is connected and has not passed `iteration`.
  virtual std::map<int, Verdict> wait_verdicts(std::uint64_t iteration, std::span<const int> peers,
                                               SteadyTime deadline,
                                               const std::function<bool()>& interrupted) = 0;
  virtual std::vector<Admission> take_admissions() = 0;
  // Whether there is a live link to `peer` now, and the iteration it last announced.
  virtual bool link_up(int peer) const = 0;
  virtual std::optional<std::uint64_t> peer_iteration(int peer) const = 0;
  // No verdict for `iteration` will come from `peer`: its link is down, or it announced a later
  // iteration (frames arrive in order, and a verdict is sent before the next iteration starts).
  bool no_verdict_coming(int peer, std::uint64_t iteration) const {
    const std::optional<std::uint64_t> at = peer_iteration(peer);
    return !at || *at > iteration;
  }
  // This node's current iteration (announced to neighbours); and: data of `peer` for iterations
  // below `iteration` is stale (re-admission after a gap).
  virtual void set_iteration(std::uint64_t iteration, std::uint32_t degree) = 0;
  virtual void skip_before(int peer, std::uint64_t iteration) = 0;

  virtual std::unique_ptr<PendingExchange> begin(std::uint64_t iteration, std::span<const float> x,
                                                 std::span<const int> to,
                                                 std::span<const Inbox> from) = 0;
  virtual std::uint64_t bytes_sent() const = 0;
  virtual std::uint64_t bytes_received() const = 0;
  // bytes_sent() and bytes_received() by peer (peers that carried a byte so far); empty where the
  // exchange does not count them.
  struct PeerBytes {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
  };
  virtual std::map<int, PeerBytes> bytes_by_peer() const { return {}; }

 protected:
  // wait_verdicts on `mailbox` by the rules above (no_verdict_coming and peer_iteration), for an
  // exchange whose received verdicts land in a ControlMailbox.
  std::map<int, Verdict> wait_verdicts_in(ControlMailbox& mailbox, std::uint64_t iteration,
                                          std::span<const int> peers, SteadyTime deadline,
                                          const std::function<bool()>& interrupted) const;
};

// Over net::Transport (borrowed; must outlive this object). With `take_control`, registers itself
// as the transport's control handler (net::Transport::set_control_handler): the membership
// messages of daemon/control.proto go to a mailbox of its own (messages of other kinds are
// ignored), and those that arrived before are handed over at once; make it right after the
// transport starts. Without, an algorithm with a control protocol of its own (asynchronous
// push-sum) sets the handler itself, and the exchange's membership calls see no messages.
std::unique_ptr<ParameterExchange> make_transport_exchange(net::Transport& transport,
                                                           bool take_control = true);

}  // namespace gossip::daemon
