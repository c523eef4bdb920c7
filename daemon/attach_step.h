// AttachStep: the local step of an external trainer attached over a Unix socket (gossipd run
// --attach SOCKET; docs/attach.md). The trainer does its own step; at iteration t it posts x_t
// into the shared buffer, the loop sends x_t and mixes what arrives with no update of its own
// (γ_t = 0: x_{t+1} = Σ_j W_ij x_j^t, the same fused kernel and summation order as the built-in
// step), and the trainer gets x_{t+1} back. An attached trainer that runs the built-in step itself
// (u_t at x_t, then x_{t+1} = fma(−γ_t, u_t, mixed)) therefore gets the same bits as gossipd's own
// trainer.
//
// Failures (LocalStep::begin / end): a trainer that disconnects, reports an error, says BYE
// before the end, or posts nothing within `post_timeout` → Unavailable (the node leaves the
// group, exit 7 with a checkpoint of the mixed state); non-finite parameters posted → Aborted
// (diverged, exit 5, nothing checkpointed).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/attach.h"
#include "daemon/local_step.h"

namespace gossip::daemon {

class AttachStep final : public LocalStep {
 public:
  // `server` has accepted the trainer's HELLO (AttachServer::accept_hello).
  AttachStep(std::unique_ptr<AttachServer> server, std::chrono::milliseconds post_timeout);

  // WELCOME: training starts at `iteration`; `x` non-empty hands the trainer parameters to load
  // (a resumed run's mixed state).
  Status start(std::uint64_t iteration, std::span<const float> x) override;
  Status begin(std::uint64_t iteration, ParameterBuffers& buffers) override;
  std::optional<double> gradient(const float*, std::uint64_t) override { return std::nullopt; }
  bool has_update() const override { return false; }
  float direction(const float*, float*, std::uint64_t) override { return 0.0f; }
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
  std::unique_ptr<AttachServer> server_;
  std::chrono::milliseconds post_timeout_;
};

}  // namespace gossip::daemon
