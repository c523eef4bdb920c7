// Algorithm: the seam between the node driver (daemon/driver.h) and a training algorithm
// (docs/design.md §8, "Adding an algorithm"). The driver owns what every algorithm shares — the
// start rules and resume, the local step and its attach session, metrics, evaluation, checkpoints,
// the divergence stop, stop requests and the injected clock — and calls the algorithm once per
// iteration. An algorithm owns how a node combines its work with the others': D-PSGD's gossip
// (algorithms/dpsgd.h) or ALLREDUCE's averaging over Gloo (algorithms/allreduce.h).
//
// One iteration t, as the driver runs it:
//   1. LocalStep::begin(t)             (an attached trainer posts x_t)
//   2. Algorithm::iterate(t, step, buffers): the algorithm calls the step's phases (gradient,
//      before_mix, direction) in the order it needs, communicates, and leaves x_{t+1} in the
//      buffers; it returns the iteration's loss and timings, or why the iteration could not
//      complete;
//   3. LocalStep::end(t), evaluation and checkpoint cadence (driver).
// An iteration that cannot complete is abandoned or failed: IterationEnd says which. An abandoned
// iteration must leave x_t in the buffers and the step's optimizer state untouched (the optimizer
// state advances in LocalStep::direction only, so an algorithm calls it after the point where the
// iteration can no longer be abandoned); the driver then rewinds the step's batch stream and
// writes a checkpoint of x_t.
//
// Lifetime: the factory (AlgorithmFactory) exists from before the transport starts — it says
// which links the algorithm needs and takes the transport's control messages — and builds the
// Algorithm once the links are up. Both are used from the driver's thread, except where a
// method says otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "daemon/local_step.h"
#include "daemon/metrics.h"
#include "daemon/param_buffers.h"
#include "daemon/prometheus.h"

namespace gossip::net {
class Transport;
}  // namespace gossip::net

namespace gossip::daemon {

// What the driver lends an algorithm for a whole run (borrowed; valid from Algorithm::start to the
// end of the run).
struct RunServices {
  MetricsWriter& metrics;
  Clock& clock;                   // every duration the algorithm measures
  const std::atomic<bool>& stop;  // set asynchronously by a signal handler
  // Whether the node publishes live metrics (--metrics-listen): then Algorithm::observe is called
  // after every iteration, and what it reports may cost a little extra work in iterate().
  bool live_metrics = false;
  bool interrupted() const { return stop.load(std::memory_order_relaxed); }
};

// A completed iteration: the step's training loss on its batch (when the step computes one) and
// the iteration's timings and bytes (daemon/metrics.h; the lr is γ_t).
struct IterationReport {
  std::optional<double> loss;
  IterationStats stats;
};

// Why iteration t could not complete.
struct IterationEnd {
  enum class Kind {
    // Iteration t is dropped: x_t and the optimizer state are as they were at its start; the run
    // ends with a checkpoint at t and `exit_code` (a stop request, a failed neighbour).
    kAbandon,
    // The local step could not go on (a LocalStep phase failed with `status`): handled as the
    // driver handles a failed begin() or end().
    kStepFailed,
  };
  Kind kind = Kind::kAbandon;
  int exit_code = 0;
  Status status;
};

// The outcome of Algorithm::iterate: a report, or an end.
class IterationOutcome {
 public:
  IterationOutcome(IterationReport report) : report_(std::move(report)) {}  // NOLINT: implicit
  IterationOutcome(IterationEnd end) : end_(std::move(end)) {}              // NOLINT: implicit

  bool ended() const { return end_.has_value(); }
  const IterationEnd& end() const { return *end_; }
  const IterationReport& report() const { return report_; }

 private:
  IterationReport report_;
  std::optional<IterationEnd> end_;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;

  // The name in logs and metrics ("dpsgd", "allreduce").
  virtual std::string_view name() const = 0;

  // Floats of state a checkpoint holds besides x and the local step's state (an outer
  // optimizer's momentum, error-feedback residuals, ...), and getting and setting it.
  virtual std::size_t state_size() const { return 0; }
  virtual std::vector<float> state() const { return {}; }
  virtual Status load_state(std::span<const float> /*state*/) { return Status::ok(); }
  // The floats of one message received into the driver's buffers (ParameterBuffers::message):
  // the parameters, then whatever the algorithm sends with them (PUSH_SUM: its weight).
  virtual std::size_t received_floats(std::size_t num_params) const { return num_params; }

  // Once, before the first iteration: the run starts at `start` (0, or the iteration of the
  // checkpoint it resumed from; `rejoining`: the node resumed and may find its neighbours ahead).
  // Returns the iteration to run from (a rejoining D-PSGD node jumps to its neighbours'), or a
  // Status that ends the run with `*exit_code` before any iteration.
  virtual Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                                      RunServices& services, int* exit_code) = 0;

  // Iteration t: x_t is in `buffers` (LocalStep::begin ran); leaves x_{t+1} there.
  virtual IterationOutcome iterate(std::uint64_t t, LocalStep& step, ParameterBuffers& buffers) = 0;

  // With RunServices::live_metrics, after every completed iteration: fills the algorithm's part of
  // the live snapshot (daemon/prometheus.h: neighbours, lag, rejoins, the consensus-distance
  // estimate). Must be cheap: it runs on the training thread.
  virtual void observe(MetricsSnapshot& /*snapshot*/) const {}

  // Before iteration t (start ≤ t < total): whether this node's part of the job is over, so the
  // run ends after t iterations (asynchronous push-sum: every node that sends to this one has
  // ended, so whatever it computed from now on would reach nobody). conclude(t) and the final
  // evaluation, checkpoint and parameter files follow. Default: never.
  virtual bool ends_at(std::uint64_t /*t*/) const { return false; }

  // After the last iteration (`end`: `total`, or the t at which ends_at said so), before the final
  // evaluation, checkpoint and parameter files: an algorithm whose messages may still be in flight
  // to this node folds them into the buffers (asynchronous push-sum). An end stops the run as an
  // abandoned iteration `end` would. Default: nothing.
  virtual std::optional<IterationEnd> conclude(std::uint64_t /*end*/,
                                               ParameterBuffers& /*buffers*/) {
    return std::nullopt;
  }

  // A stop request ends the run at iteration t (the checkpoint of x_t follows): the algorithm may
  // tell the other nodes that this one takes no part in t or later (carry-on gossip: Leave, so its
  // neighbours drop the edge at once instead of detecting a failure). Default: nothing.
  virtual void leave(std::uint64_t /*t*/) {}
};

// Builds an algorithm in the order a gossipd process needs it (daemon/run.cc): before the
// transport starts it says which nodes to link to and what to announce; right after, it takes
// the transport's control messages; once the links are up (or the connect wait ended) it builds
// the Algorithm.
class AlgorithmFactory {
 public:
  virtual ~AlgorithmFactory() = default;

  // The nodes this node keeps transport links with.
  virtual std::vector<int> link_peers() const = 0;
  // The algorithm named in Hello ("" for D-PSGD): nodes running different ones refuse each other.
  virtual std::string hello_name() const = 0;
  // Whether the run may start with only some links up (D-PSGD's carry-on fault policy).
  virtual bool may_start_without_every_link() const = 0;
  // Whether the algorithm agrees with each neighbour where the link's message numbering starts
  // whenever the link comes up (asynchronous push-sum under carry-on): the transport then discards
  // every frame until told (net::TransportOptions::initial_floor, Transport::reset_floor).
  virtual bool renumbers_links() const { return false; }
  // Floats of Algorithm::state() (the checkpoint's shape is known before the links are up).
  virtual std::size_t state_size() const { return 0; }
  // The nodes whose parameter vectors this node receives into the driver's buffers (one receive
  // buffer each; an algorithm that keeps its own says none).
  virtual std::vector<int> senders() const { return {}; }
  // The floats (4-byte words) of one parameter message on the transport (Hello's param_count): the
  // model's parameter count unless the algorithm compresses its messages.
  virtual std::uint64_t message_floats(std::uint64_t num_params) const { return num_params; }

  // Right after the transport started (borrowed; outlives the algorithm): take its control
  // messages from now on.
  virtual void on_transport(net::Transport& transport) = 0;
  // The links are up: the algorithm for the run (Unavailable, with why, when it cannot connect;
  // `stop` lets a signal interrupt the wait).
  virtual Result<std::unique_ptr<Algorithm>> connect(const std::atomic<bool>& stop) = 0;
};

}  // namespace gossip::daemon
