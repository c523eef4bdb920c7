// DiLoCo (see diloco.h). Why it is arranged as it is:
//  - a round's end can fail (a node died): everything it changes — the error-feedback residual,
//    the anchor, the momentum, x and the local step's optimizer state — is changed only once the
//    mean arrived, or put back, so the driver's checkpoint of an abandoned iteration is the state
//    at its start;
//  - with overlap the mean of round r−1 runs on a worker thread during round r; Gloo's context is
//    used by one thread at a time: the worker owns it from start_mean to finish_mean.
#include "algorithms/diloco.h"

#include <algorithm>

#include "common/check.h"
#include "common/log.h"
#include "daemon/exit_codes.h"

namespace gossip::algorithms {

using daemon::IterationEnd;
using daemon::IterationStats;

std::size_t Diloco::state_floats(const sgd::RoundConfig& round, std::size_t num_params) {
  const bool compressed = round.compression.kind != sgd::CompressionKind::kNone;
  return 2 * num_params + round.outer.state_size(num_params) + (compressed ? num_params : 0) +
         (round.overlap ? num_params + 1 : 0);
}

Diloco::Diloco(int node, const config::TrainConfig& config, std::shared_ptr<gloo::Context> context,
               TransportStore& store, std::size_t num_params, bool attached)
    : RoundAlgorithm(node, config, num_params, attached),
      store_(store),
      num_nodes_(context->size),
      ring_(std::move(context), round_.compression, num_params,
            std::chrono::milliseconds(config.timeouts().deadline_ms())),
      residual_(round_.compression.kind != sgd::CompressionKind::kNone ? num_params : 0),
      delta_(num_params),
      input_(num_params),
      mean_(num_params),
      bytes_(sgd::compressed_bytes(round_.compression, num_params)),
      pending_input_(round_.overlap ? num_params : 0) {
  checkpoint_also(residual_);       // empty without compression
  checkpoint_also(pending_input_);  // empty without overlap
}

Diloco::~Diloco() {
  if (worker_.joinable()) worker_.join();
}

Result<std::uint64_t> Diloco::start_rounds(std::uint64_t start, bool /*rejoining*/,
                                           int* exit_code) {
  GOSSIP_RETURN_IF_ERROR(agree_start(store_, self_, num_nodes_, start, *services_, exit_code));
  return start;
}

void Diloco::start_mean(std::uint64_t r) {
  pending_ = r;
  worker_ = std::thread([this, r] { worker_status_ = ring_.mean(r, pending_input_, mean_); });
}

Status Diloco::finish_mean() {
  if (worker_.joinable()) worker_.join();
  pending_.reset();
  return worker_status_;
}

Status Diloco::end_round(std::uint64_t r, std::span<const float> y, bool final_round) {
  sgd::pseudo_gradient(delta_, start_, y);  // Δ = fl(s − y)
  // The residual changes only with a mean that arrives: work on a copy.
  std::vector<float> residual(residual_);
  sgd::allreduce_round_input(round_.compression, delta_, residual, bytes_, input_);
  if (!round_.overlap) {
    GOSSIP_RETURN_IF_ERROR(ring_.mean(r, input_, mean_));
    residual_.swap(residual);
    sgd::outer_step(round_.outer, anchor_, mean_, momentum_);
    start_ = anchor_;
    return Status::ok();
  }
  if (pending_) {
    GOSSIP_RETURN_IF_ERROR(finish_mean());
    sgd::outer_step(round_.outer, anchor_, mean_, momentum_);
  }
  residual_.swap(residual);
  pending_input_ = input_;
  start_mean(r);
  if (final_round) {
    // Every node ends at the same anchor: the last mean is applied, not left in flight.
    GOSSIP_RETURN_IF_ERROR(finish_mean());
    sgd::outer_step(round_.outer, anchor_, mean_, momentum_);
    start_ = anchor_;
    return Status::ok();
  }
  sgd::pseudo_gradient(start_, anchor_, delta_);  // the next start: fl(a − Δ_r)
  return Status::ok();
}

// An attached trainer's first POST follows its first H steps from its own x_0: the nodes share no
// start yet, so this round averages the posts themselves (through the same ring) and the mean is
// every node's anchor and start.
daemon::IterationOutcome Diloco::first_attached_round(std::uint64_t r,
                                                      daemon::ParameterBuffers& buffers,
                                                      std::int64_t t0) {
  if (Status s = ring_.mean(r, start_, anchor_); !s.is_ok()) {
    GOSSIP_LOG(kError) << s.message();
    return IterationEnd{IterationEnd::Kind::kAbandon, daemon::kExitNeighbourFailed,
                        aborted(s.message())};
  }
  start_ = anchor_;
  start_known_ = true;
  buffers.set_x(start_);
  IterationStats stats;
  stats.bytes_sent = ring_.bytes_sent();
  stats.bytes_received = ring_.bytes_received();
  stats.iteration_s = stats.exchange_s =
      static_cast<double>(services_->clock.monotonic_ns() - t0) * 1e-9;
  return daemon::IterationReport{std::nullopt, stats};
}

daemon::IterationOutcome Diloco::iterate(std::uint64_t t, daemon::LocalStep& step,
                                         daemon::ParameterBuffers& buffers) {
  Clock& clock = services_->clock;
  const std::uint64_t r = t / per_round_;
  if (resend_in_flight_) {
    resend_in_flight_ = false;
    start_mean(r - 1);  // resumed with round r−1's mean in flight (r ≥ 1)
  }
  IterationStats stats;
  const std::int64_t t0 = clock.monotonic_ns();
  if (!start_known_) {
    buffers.x_to_host(start_);
    if (step.gradient_buffer() == nullptr) return first_attached_round(r, buffers, t0);
    anchor_ = start_;  // the first round starts at x_0, which every node shares
    start_known_ = true;
  }
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  const bool own = step.gradient_buffer() != nullptr;
  const bool last = last_of_round(t);
  std::vector<float> x_before, state_before;
  if (last && own) {
    x_before = buffers.x_to_host();
    state_before = step.state();
  }
  if (own) {
    stats.lr = step.direction(buffers.x(), buffers.update(), t);
    buffers.mix(self_, daemon::RowWeights{}, static_cast<float>(stats.lr), true);
  }
  const std::int64_t t2 = clock.monotonic_ns();
  if (last) {
    if (Status s = end_round(r, buffers.x_to_host(), t + 1 == total_); !s.is_ok()) {
      GOSSIP_LOG(kError) << s.message();
      if (own) {
        buffers.set_x(x_before);
        step.load_state(state_before);
      }
      return IterationEnd{IterationEnd::Kind::kAbandon, daemon::kExitNeighbourFailed,
                          aborted(s.message())};
    }
    buffers.set_x(start_);
    stats.bytes_sent = ring_.bytes_sent();
    stats.bytes_received = ring_.bytes_received();
  }
  const std::int64_t t3 = clock.monotonic_ns();
  stats.compute_s = static_cast<double>(t2 - t0) * 1e-9;
  stats.exchange_s = static_cast<double>(t3 - t2) * 1e-9;
  stats.wait_s = stats.exchange_s;
  stats.mix_s = 0;
  stats.iteration_s = static_cast<double>(t3 - t0) * 1e-9;
  return daemon::IterationReport{loss, stats};
}

}  // namespace gossip::algorithms
