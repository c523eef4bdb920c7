// The outer optimizer (outer_optimizer.h): validation and the choice of kernel; the arithmetic is
// cpu/flat_kernels.cc's outer_step, one copy per instruction-set level.
#include "sgd/outer_optimizer.h"

#include <cmath>
#include <string>

#include "common/check.h"
#include "sgd/cpu/flat_kernels.h"

namespace gossip::sgd {

Status OuterConfig::validate() const {
  if (kind == OuterKind::kNone) return Status::ok();
  if (kind != OuterKind::kSgd && kind != OuterKind::kNesterov) {
    return invalid_argument("outer.kind: expected " + kOuterKinds.choices());
  }
  if (!(lr > 0) || !std::isfinite(lr)) {
    return invalid_argument("outer.lr: must be finite and > 0, got " + std::to_string(lr));
  }
  if (!(momentum >= 0) || momentum >= 1) {
    return invalid_argument("outer.momentum: must be in [0, 1), got " + std::to_string(momentum));
  }
  if (kind == OuterKind::kNesterov && momentum == 0) {
    return invalid_argument("outer.momentum: nesterov needs momentum > 0");
  }
  return Status::ok();
}

std::size_t OuterConfig::state_size(std::size_t num_params) const {
  const bool has_momentum =
      kind == OuterKind::kNesterov || (kind == OuterKind::kSgd && momentum > 0);
  return has_momentum ? num_params : 0;
}

void pseudo_gradient(std::span<float> d, std::span<const float> anchor, std::span<const float> z) {
  GOSSIP_CHECK(anchor.size() == d.size() && z.size() == d.size())
      << d.size() << ", " << anchor.size() << ", " << z.size();
  for (std::size_t k = 0; k < d.size(); ++k) d[k] = anchor[k] - z[k];
}

void outer_step(const OuterConfig& config, std::span<float> anchor, std::span<const float> d,
                std::span<float> m) {
  const Status s = config.validate();
  GOSSIP_CHECK(s.is_ok()) << s.to_string();
  GOSSIP_CHECK_EQ(anchor.size(), d.size());
  const std::size_t state = config.state_size(d.size());
  GOSSIP_CHECK(state == 0 || m.size() == state)
      << "momentum buffer of " << m.size() << " floats, expected " << state;
  const bool none = config.kind == OuterKind::kNone;
  const float lr = none ? 1.0f : static_cast<float>(config.lr);
  const float momentum = state == 0 ? 0.0f : static_cast<float>(config.momentum);
  GOSSIP_ISA_PICK(gossip::sgd::cpu, outer_step)
  (anchor.data(), d.data(), state == 0 ? nullptr : m.data(), d.size(), lr, momentum,
   config.kind == OuterKind::kNesterov);
}

}  // namespace gossip::sgd
