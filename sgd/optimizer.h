// Optimizer: turns (x_t, g_t, state, t) into the update direction u_t and the step size γ_t, so
// that a node's D-PSGD step is  x_{t+1} = Σ_j W_ij x_j^t − γ_t u_t  (Backend::mix) and a
// single-node step is  x_{t+1} = x_t − γ_t u_t. State is one flat float buffer of state_size()
// floats in the backend's memory, so it checkpoints like the parameters.
//
// Two kinds:
//   sgd    PyTorch's SGD: momentum as heavy-ball (Polyak 1964) or Nesterov (Sutskever et al. 2013),
//          see Backend::sgd_direction for the exact recurrence; weight decay is the coupled L2 form
//          (g + λx), as in torch.optim.SGD. State: the velocity (num_params) with momentum, else
//          none.
//   adamw  torch.optim.AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR
//          2019): u = m̂/(√v̂ + ε) + λx with bias corrections for step count t = iteration + 1, see
//          Backend::adamw_direction for the exact operations. With W = I, x − γ·u is torch's
//          AdamW step at lr γ (decoupled decay: γλx). State: m then v, 2·num_params floats.
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

enum class OptimizerKind { kSgd, kAdamW };
inline constexpr EnumTable<OptimizerKind, 2> kOptimizerKinds{
    "optimizer", {{OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdamW, "adamw"}}};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  LrSchedule schedule;
  double momentum = 0.0;      // sgd: in [0, 1); adamw: must stay 0
  bool nesterov = false;      // sgd: needs momentum > 0; adamw: must stay false
  double weight_decay = 0.0;  // ≥ 0: sgd's coupled L2, adamw's decoupled decay
  double beta1 = 0.9;         // adamw: in [0, 1)
  double beta2 = 0.999;       // adamw: in [0, 1)
  double eps = 1e-8;          // adamw: finite, > 0

  // InvalidArgument naming the field (lr, momentum, nesterov, weight_decay, beta1, beta2, eps,
  // ...).
  Status validate() const;
};

// AdamW's scalars at `iteration` (step count t = iteration + 1), computed in double and rounded
// once each: 1 − β1, 1 − β2, 1/(1 − β1^t), 1/√(1 − β2^t).
AdamWCoefficients adamw_coefficients(const OptimizerConfig& config, std::int64_t iteration);

class Optimizer {
 public:
  // The config must validate (GOSSIP_CHECK); call OptimizerConfig::validate() on user input first.
  Optimizer(const OptimizerConfig& config, std::size_t num_params);

  const OptimizerConfig& config() const { return config_; }
  std::size_t num_params() const { return num_params_; }
  // Floats of optimizer state: sgd num_params with momentum, 0 without; adamw 2·num_params (m,
  // then v). Start it at zero.
  std::size_t state_size() const;

  double learning_rate(std::int64_t iteration) const { return config_.schedule.at(iteration); }

  // u = direction(x, g) at `iteration` (t = 0, 1, ...; adamw's bias correction uses step count
  // t + 1; sgd ignores it), updating `state` in place (null when state_size() is 0). All pointers
  // in `backend`'s memory.
  void direction(Backend& backend, std::int64_t iteration, const float* x, const float* g,
                 float* state, float* u) const;

  // Single-node step: x ← x − γ_t·u with u from direction(); `u` is scratch of num_params floats.
  void step(Backend& backend, std::int64_t iteration, float* x, const float* g, float* state,
            float* u) const;

 private:
  OptimizerConfig config_;
  std::size_t num_params_;
};

}  // namespace gossip::sgd
