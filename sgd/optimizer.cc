// Learning-rate schedules, the momentum optimizer and AdamW; the element-wise arithmetic is the
// backend's (Backend::sgd_direction, Backend::adamw_direction), so the same code drives the cpu and
// cuda paths.
#include "sgd/optimizer.h"

#include <cmath>
#include <numbers>

#include "common/check.h"

namespace gossip::sgd {

Status LrSchedule::validate() const {
  // lr = 0 is pure gossip (no gradient step), what the consensus experiments run.
  if (!(lr >= 0) || !std::isfinite(lr)) return invalid_argument("lr: must be finite and >= 0");
  if (warmup_steps < 0) return invalid_argument("warmup_steps: must be >= 0");
  if (kind == ScheduleKind::kStep) {
    if (step_size <= 0) return invalid_argument("step_size: must be > 0 for the step schedule");
    if (!(step_factor > 0) || step_factor > 1) {
      return invalid_argument("step_factor: must be in (0, 1] for the step schedule");
    }
  }
  if (kind == ScheduleKind::kCosine) {
    if (total_steps <= 0) return invalid_argument("total_steps: must be > 0 for cosine");
    if (!(min_lr >= 0) || min_lr > lr) return invalid_argument("min_lr: must be in [0, lr]");
  }
  return Status::ok();
}

double LrSchedule::at(std::int64_t t) const {
  double g = lr;
  switch (kind) {
    case ScheduleKind::kConstant:
      break;
    case ScheduleKind::kStep:
      g = lr * std::pow(step_factor, static_cast<double>(t / step_size));
      break;
    case ScheduleKind::kCosine: {
      const double frac = static_cast<double>(std::min(t, total_steps)) / total_steps;
      g = min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * frac));
      break;
    }
  }
  if (t < warmup_steps) g *= static_cast<double>(t + 1) / warmup_steps;
  return g;
}

Status OptimizerConfig::validate() const {
  if (kind != OptimizerKind::kSgd && kind != OptimizerKind::kAdamW) {
    return invalid_argument("kind: expected " + kOptimizerKinds.choices());
  }
  GOSSIP_RETURN_IF_ERROR(schedule.validate());
  if (!(momentum >= 0) || momentum >= 1) return invalid_argument("momentum: must be in [0, 1)");
  if (nesterov && momentum == 0) return invalid_argument("nesterov: needs momentum > 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) {
    return invalid_argument("weight_decay: must be finite and >= 0");
  }
  if (kind != OptimizerKind::kAdamW) return Status::ok();
  if (momentum != 0) return invalid_argument("momentum: not used by adamw (its beta1 is)");
  if (!(beta1 >= 0) || beta1 >= 1) return invalid_argument("beta1: must be in [0, 1)");
  if (!(beta2 >= 0) || beta2 >= 1) return invalid_argument("beta2: must be in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps) || !std::isfinite(static_cast<float>(eps)) ||
      static_cast<float>(eps) == 0) {
    return invalid_argument("eps: must be finite and > 0 in float32");
  }
  return Status::ok();
}

AdamWCoefficients adamw_coefficients(const OptimizerConfig& config, std::int64_t iteration) {
  GOSSIP_CHECK(iteration >= 0) << "iteration " << iteration;
  const auto t = static_cast<double>(iteration) + 1;
  AdamWCoefficients c;
  c.beta1 = static_cast<float>(config.beta1);
  c.beta2 = static_cast<float>(config.beta2);
  c.one_minus_beta1 = static_cast<float>(1 - config.beta1);
  c.one_minus_beta2 = static_cast<float>(1 - config.beta2);
  c.inv_bias1 = static_cast<float>(1 / (1 - std::pow(config.beta1, t)));
  c.inv_sqrt_bias2 = static_cast<float>(1 / std::sqrt(1 - std::pow(config.beta2, t)));
  c.eps = static_cast<float>(config.eps);
  c.weight_decay = static_cast<float>(config.weight_decay);
  return c;
}

Optimizer::Optimizer(const OptimizerConfig& config, std::size_t num_params)
    : config_(config), num_params_(num_params) {
  Status s = config.validate();
  GOSSIP_CHECK(s.is_ok()) << s.to_string();
}

std::size_t Optimizer::state_size() const {
  if (config_.kind == OptimizerKind::kAdamW) return 2 * num_params_;
  return config_.momentum > 0 ? num_params_ : 0;
}

void Optimizer::direction(Backend& backend, std::int64_t iteration, const float* x, const float* g,
                          float* state, float* u) const {
  if (config_.kind == OptimizerKind::kAdamW) {
    backend.adamw_direction(u, state, state + num_params_, x, g, num_params_,
                            adamw_coefficients(config_, iteration));
    return;
  }
  backend.sgd_direction(u, state, x, g, num_params_, static_cast<float>(config_.momentum),
                        static_cast<float>(config_.weight_decay), config_.nesterov);
}

void Optimizer::step(Backend& backend, std::int64_t iteration, float* x, const float* g,
                     float* state, float* u) const {
  direction(backend, iteration, x, g, state, u);
  const MixTerm self{1.0f, x};
  backend.mix(x, std::span<const MixTerm>(&self, 1), static_cast<float>(learning_rate(iteration)),
              u, num_params_);
}

}  // namespace gossip::sgd
