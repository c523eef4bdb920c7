// AttachStep: the local step of an external trainer attached over a Unix socket (gossipd run
// --attach SOCKET; docs/attach.md). The trainer does its own step; at iteration t it posts x_t
// into the shared buffer, the loop sends x_t and mixes what arrives, and the trainer gets
// x_{t+1} back:
//   - plain session: x_{t+1} = Σ_j W_ij x_j^t (γ_t = 0, no update of the daemon's own);
//   - update session (the trainer's HELLO asked for it): after POST(t) the trainer computes u_t
//     at x_t, writes it into the update region and sends UPDATE(t, γ_t); the loop mixes
//     x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t.
// Both use the same fused kernel and summation order as the built-in step, so an attached
// trainer that runs the built-in step gets the same bits as gossipd's own trainer.
//
// Copies (docs/attach.md "Cost"): on the cpu backend the loop sends and mixes x_t where the trainer
// posted it (ParameterBuffers::share). An update session mixes in place, so its parameters never
// leave the shared buffer; a plain session mixes into the daemon's own memory (the trainer may
// change the buffer after MIXED, and x_{t+1} must stay intact for a checkpoint) and copies the
// result back, one pass. MIXED(t) is sent when the loop is done with x_{t+1} — at the next begin()
// or at finish() — so that checkpoints and the final parameters are read before the trainer may
// touch the buffer again. A GPU node copies the buffer to and from the device.
//
// Failures (LocalStep::begin / before_mix / end): a trainer that disconnects, reports an error,
// says BYE before the end, or posts nothing within `post_timeout` → Unavailable (the node leaves
// the group, exit 7 with a checkpoint of the mixed state); non-finite parameters posted, or a
// non-finite γ → Aborted (diverged, exit 5, nothing checkpointed).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attach/server.h"
#include "daemon/local_step.h"

namespace gossip::daemon {

class AttachStep final : public LocalStep {
 public:
  // `server` has accepted the trainer's HELLO (AttachServer::accept_hello).
  AttachStep(std::unique_ptr<attach::AttachServer> server, std::chrono::milliseconds post_timeout);

  // WELCOME: training starts at `iteration`; `x` non-empty hands the trainer parameters to load
  // (a resumed run's mixed state).
  Status start(std::uint64_t iteration, std::span<const float> x) override;
  Status begin(std::uint64_t iteration, ParameterBuffers& buffers) override;
  std::optional<double> gradient(const float*, std::uint64_t) override { return std::nullopt; }
  bool has_update() const override { return server_->with_update(); }
  Status before_mix(std::uint64_t iteration, ParameterBuffers& buffers) override;
  float direction(const float*, float*, std::uint64_t) override { return gamma_; }
  Status end(std::uint64_t iteration, ParameterBuffers& buffers) override;
  void finish(const std::string& why) override;

  std::optional<sgd::EvalResult> evaluate(const float*, const sgd::Dataset&) override {
    return std::nullopt;
  }
  sgd::SamplerState position() const override { return {}; }
  Status rewind(const sgd::SamplerState&) override { return Status::ok(); }
  std::size_t state_size() const override { return 0; }
  std::vector<float> state() const override { return {}; }
  void load_state(std::span<const float>) override {}

 private:
  Status send_pending_mixed();

  std::unique_ptr<attach::AttachServer> server_;
  std::chrono::milliseconds post_timeout_;
  float gamma_ = 0.0f;                          // γ_t of the UPDATE (update sessions)
  std::optional<std::uint64_t> mixed_pending_;  // MIXED(t) not sent yet
};

}  // namespace gossip::daemon
