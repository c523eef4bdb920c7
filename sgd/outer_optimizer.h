// The outer optimizer of local-step training: after H inner steps from the anchor a (the model
// every node agreed on at the last round), a node's pseudo-gradient is d = a − z with z its model
// now; a round combines the d of the nodes (a mean, or a gossip mix) and applies the combined d to
// the anchor as if it were a gradient. DiLoCo (Douillard et al. 2023, arXiv 2311.08105, Alg. 1):
// outer Nesterov momentum, lr 0.7, momentum 0.9, the documented starting point here; SlowMo (Wang
// et al., ICLR 2020) is the same outer momentum over a decentralized base algorithm.
//
// Exact arithmetic, element-wise in float32 with lr and momentum (β) rounded once to float:
//   pseudo_gradient   d = fl(a − z)
//   none              a ← fl(a − d)                       (the combined model itself: lr 1, β 0)
//   sgd, β = 0        a ← fma(−lr, d, a)
//   sgd, β > 0        m ← fma(β, m, d);  a ← fma(−lr, m, a)                 (heavy-ball)
//   nesterov          m ← fma(β, m, d);  a ← fma(−lr, fma(β, m, d), a)      (m the updated one)
// which is torch.optim.SGD (dampening 0, nesterov as PyTorch's) with d as the gradient. Every
// instruction-set level computes these operations (the per-level kernel of cpu/flat_kernels.cc),
// so every level gives the same bits.
//
// Host memory; spans of one length (GOSSIP_CHECK); m is state_size() floats, zero at the start,
// part of a checkpoint. Thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <span>

#include "common/enum_names.h"
#include "common/status.h"

namespace gossip::sgd {

enum class OuterKind { kNone, kSgd, kNesterov };
inline constexpr EnumTable<OuterKind, 3> kOuterKinds{
    "outer optimizer",
    {{OuterKind::kNone, "none"}, {OuterKind::kSgd, "sgd"}, {OuterKind::kNesterov, "nesterov"}}};

struct OuterConfig {
  OuterKind kind = OuterKind::kNone;
  double lr = 0.7;        // sgd, nesterov: finite, > 0 (DiLoCo: 0.7)
  double momentum = 0.9;  // sgd: in [0, 1); nesterov: in (0, 1) (DiLoCo: 0.9)

  // InvalidArgument naming outer.kind, outer.lr or outer.momentum. `none` ignores lr and momentum.
  Status validate() const;
  // Floats of the momentum buffer m: num_params for nesterov and for sgd with momentum > 0, else 0.
  std::size_t state_size(std::size_t num_params) const;
};

// d = anchor − z.
void pseudo_gradient(std::span<float> d, std::span<const float> anchor, std::span<const float> z);

// One outer step on the anchor with the combined pseudo-gradient d (see the table above). The
// config must validate; m has config.state_size(d.size()) floats (may be empty when that is 0).
void outer_step(const OuterConfig& config, std::span<float> anchor, std::span<const float> d,
                std::span<float> m);

}  // namespace gossip::sgd
