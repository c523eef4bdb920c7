// Optimizer: turns (x_t, g_t, state) into the update direction u_t and the step size γ_t, so that a
// node's D-PSGD step is  x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t  (Backend::mix) and a single-node step
// is  x_{t+1} = x_t − γ_t u_t. State (the momentum buffer) is one flat float buffer of
// state_size() floats in the backend's memory, so it checkpoints like the parameters.
//
// Momentum follows PyTorch's SGD (heavy-ball: Polyak 1964; Nesterov as in Sutskever et al. 2013):
// see Backend::sgd_direction for the exact recurrence. Weight decay is the coupled L2 form
// (g + λx), as in torch.optim.SGD.
//
// Learning-rate schedules, t = 0, 1, ... (iteration):
//   constant  γ_t = lr
//   step      γ_t = lr · factor^⌊t / step_size⌋
//   cosine    γ_t = min_lr + (lr − min_lr)·(1 + cos(π·min(t, T)/T))/2,  T = total_steps
// with an optional linear warm-up over the first W steps: γ_t ← γ_t · (t + 1)/W for t < W.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/enum_names.h"
#include "common/status.h"
#include "sgd/backend.h"

namespace gossip::sgd {

enum class ScheduleKind { kConstant, kStep, kCosine };
inline constexpr EnumTable<ScheduleKind, 3> kScheduleKinds{"lr schedule",
                                                           {{ScheduleKind::kConstant, "constant"},
                                                            {ScheduleKind::kStep, "step"},
                                                            {ScheduleKind::kCosine, "cosine"}}};

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::kConstant;
  double lr = 0.1;
  std::int64_t warmup_steps = 0;
  std::int64_t step_size = 1000;  // step
  double step_factor = 0.1;       // step
  std::int64_t total_steps = 0;   // cosine: T > 0
  double min_lr = 0.0;            // cosine

  Status validate() const;
  double at(std::int64_t iteration) const;
};

struct OptimizerConfig {
  LrSchedule schedule;
  double momentum = 0.0;  // in [0, 1)
  bool nesterov = false;  // needs momentum > 0
  double weight_decay = 0.0;

  Status validate() const;
};

class Optimizer {
 public:
  // The config must validate (GOSSIP_CHECK); call OptimizerConfig::validate() on user input first.
  Optimizer(const OptimizerConfig& config, std::size_t num_params);

  const OptimizerConfig& config() const { return config_; }
  std::size_t num_params() const { return num_params_; }
  // Floats of optimizer state: num_params with momentum, 0 without. Start it at zero.
  std::size_t state_size() const { return config_.momentum > 0 ? num_params_ : 0; }

  double learning_rate(std::int64_t iteration) const { return config_.schedule.at(iteration); }

  // u = direction(x, g), updating `state` in place. All pointers in `backend`'s memory.
  void direction(Backend& backend, const float* x, const float* g, float* state, float* u) const;

  // Single-node step: x ← x − γ_t·u with u from direction(); `u` is scratch of num_params floats.
  void step(Backend& backend, std::int64_t iteration, float* x, const float* g, float* state,
            float* u) const;

 private:
  OptimizerConfig config_;
  std::size_t num_params_;
};

}  // namespace gossip::sgd
