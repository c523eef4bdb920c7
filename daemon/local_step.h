// LocalStep: the part of an iteration that is not communication — the node's own step — behind
// one small interface, so that the driver and the algorithms (daemon/algorithm.h) do not care who
// computes it. SgdStep is the built-in one (gossip_sgd's model, optimizer and batch sampler on a
// Backend); AttachStep (daemon/attach_step.h) hands the step to an external trainer.
//
// The algorithm calls it in phases per iteration t, because the built-in update is fused with the
// mixing (x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t in one pass, the arithmetic gossip-sim uses):
//   start(t_0, x) once before the first iteration, then
//   0. begin(t, buffers): may set x_t (an external trainer posts it here) before it is sent;
//   1. gradient(x_t, t) while x_t is being sent (x_t must not change): draw the batch, compute and
//      keep what the step needs; returns the training loss on the batch, when the step knows it;
//   2. before_mix(t, buffers) once the neighbours' x_j^t arrived: may set u_t in the buffers (an
//      external trainer's update arrives here); then
//      direction(x_t, u, t): write u_t (unless before_mix set it) and return γ_t. The
//      optimizer state advances here only, so an iteration abandoned between the phases leaves it
//      untouched; rewind() returns the batch position to where it was before phase 1;
//   3. end(t, buffers) after the mix, with x_{t+1} in the buffers.
// A non-OK Status from begin, before_mix or end means the step cannot go on: the loop stops
// (kAborted: the parameters are not finite, the run diverged; any other code: the step's owner is
// gone, the node leaves the group). What a checkpoint holds besides x (daemon/checkpoint.h) comes
// from position() and state().
//
// Pointers are in the backend's memory (Backend::alloc). Used from the loop's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "daemon/param_buffers.h"
#include "sgd/backend.h"
#include "sgd/optimizer.h"
#include "sgd/problem.h"
#include "sgd/sampler.h"

namespace gossip::daemon {

class LocalStep {
 public:
  virtual ~LocalStep() = default;

  // Before the first iteration: training starts at `iteration` from x (host memory; empty when
  // the step brings its own x_0, as an external trainer does).
  virtual Status start(std::uint64_t /*iteration*/, std::span<const float> /*x*/) {
    return Status::ok();
  }
  virtual Status begin(std::uint64_t /*iteration*/, ParameterBuffers& /*buffers*/) {
    return Status::ok();
  }
  // Phase 1 at x_t (read only): the loss on this iteration's batch, if the step computes one.
  virtual std::optional<double> gradient(const float* x, std::uint64_t iteration) = 0;
  // The gradient g_t that gradient() computed and direction() reads (num_params floats in the
  // backend's memory), or null when the step keeps none (an external trainer). An algorithm may
  // replace it between the two (ALLREDUCE averages it over the nodes).
  virtual float* gradient_buffer() { return nullptr; }
  // Whether the step has an update u_t of its own (false: pure gossip, direction() returns 0).
  virtual bool has_update() const { return true; }
  // Phase 2, first half: a non-OK Status stops the loop as one from begin() does.
  virtual Status before_mix(std::uint64_t /*iteration*/, ParameterBuffers& /*buffers*/) {
    return Status::ok();
  }
  // Phase 2: u_t into `update` (num_params floats); returns γ_t.
  virtual float direction(const float* x, float* update, std::uint64_t iteration) = 0;
  virtual Status end(std::uint64_t /*iteration*/, ParameterBuffers& /*buffers*/) {
    return Status::ok();
  }
  // The run is over (`why` empty: it finished; otherwise why it stopped).
  virtual void finish(const std::string& /*why*/) {}

  // Test loss and accuracy of x on `data`, if the step has the model to evaluate it.
  virtual std::optional<sgd::EvalResult> evaluate(const float* x, const sgd::Dataset& data) = 0;

  // Where the batch stream stands (before the next gradient()), and going back there.
  virtual sgd::SamplerState position() const = 0;
  virtual Status rewind(const sgd::SamplerState& position) = 0;
  // The optimizer state a checkpoint holds (state_size() floats, host memory), and loading it.
  virtual std::size_t state_size() const = 0;
  virtual std::vector<float> state() const = 0;
  virtual void load_state(std::span<const float> state) = 0;
};

// The built-in local step: minibatch gradient of gossip_sgd's model on this node's shard, then
// the optimizer's direction (momentum, weight decay) and learning-rate schedule.
class SgdStep final : public LocalStep {
 public:
  // Node `node` of `problem` on `backend` (both borrowed; must outlive the step). Fails when the
  // backend cannot build the model or the optimizer config is invalid.
  static Result<std::unique_ptr<SgdStep>> create(sgd::Backend& backend, const sgd::Problem& problem,
                                                 const sgd::OptimizerConfig& optimizer, int node,
                                                 int batch_size);

  std::optional<double> gradient(const float* x, std::uint64_t iteration) override;
  float* gradient_buffer() override { return grad_.data(); }
  float direction(const float* x, float* update, std::uint64_t iteration) override;
  std::optional<sgd::EvalResult> evaluate(const float* x, const sgd::Dataset& data) override;
  sgd::SamplerState position() const override { return sampler_.state(); }
  Status rewind(const sgd::SamplerState& position) override { return sampler_.restore(position); }
  std::size_t state_size() const override { return optimizer_.state_size(); }
  std::vector<float> state() const override;
  void load_state(std::span<const float> state) override;

 private:
  SgdStep(sgd::Backend& backend, const sgd::Problem& problem, std::unique_ptr<sgd::Model> model,
          const sgd::OptimizerConfig& optimizer, sgd::BatchSampler sampler);

  sgd::Backend& backend_;
  std::shared_ptr<const sgd::Dataset> train_;
  std::unique_ptr<sgd::Model> model_;
  sgd::Optimizer optimizer_;
  sgd::BatchSampler sampler_;
  sgd::Batch batch_;
  sgd::DeviceBuffer grad_;   // g_t, from gradient() to direction()
  sgd::DeviceBuffer state_;  // the optimizer state (at least one float)
};

}  // namespace gossip::daemon
