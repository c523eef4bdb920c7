// The arithmetic of a round (see round.h).
#include "sgd/round.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace gossip::sgd {

Status RoundConfig::validate() const {
  if (local_steps < 1) return invalid_argument("local_steps: must be >= 1");
  GOSSIP_RETURN_IF_ERROR(outer.validate());
  GOSSIP_RETURN_IF_ERROR(compression.validate());
  if (!(choco_step > 0 && choco_step <= 1)) {
    return invalid_argument("compression.choco_step: must be in (0, 1]");
  }
  return Status::ok();
}

void plain_gossip_terms(int self, double self_weight, const float* own_message,
                        std::span<const RoundTerm> neighbours, std::vector<MixTerm>& out) {
  const auto w_self = static_cast<float>(self_weight);
  bool self_added = w_self == 0.0f;
  for (const RoundTerm& t : neighbours) {
    if (!self_added && t.node > self) {
      out.push_back({w_self, own_message});
      self_added = true;
    }
    out.push_back({static_cast<float>(t.weight), t.values});
  }
  if (!self_added) out.push_back({w_self, own_message});
}

void choco_gossip_terms(const float* own_message, double choco_step,
                        std::span<const RoundTerm> in_edges, std::span<const RoundTerm> out_edges,
                        std::vector<MixTerm>& out) {
  out.push_back({1.0f, own_message});
  for (const RoundTerm& t : in_edges) {
    out.push_back({static_cast<float>(choco_step * t.weight), t.values});
  }
  for (const RoundTerm& t : out_edges) {
    out.push_back({-static_cast<float>(choco_step * t.weight), t.values});
  }
}

void combine(Backend& cpu, std::span<float> z, std::span<const MixTerm> terms) {
  GOSSIP_CHECK(!terms.empty());
  cpu.mix(z.data(), terms, 0.0f, nullptr, z.size());
}

void gossip_outer_step(const OuterConfig& outer, std::span<float> anchor, std::span<const float> z,
                       std::span<float> d, std::span<float> m) {
  if (outer.kind == OuterKind::kNone) {
    std::copy(z.begin(), z.end(), anchor.begin());
    return;
  }
  pseudo_gradient(d, anchor, z);
  outer_step(outer, anchor, d, m);
}

void allreduce_round_input(const CompressionSpec& spec, std::span<const float> delta,
                           std::span<float> residual, std::span<std::byte> bytes,
                           std::span<float> input) {
  GOSSIP_CHECK_EQ(input.size(), delta.size());
  if (spec.kind == CompressionKind::kNone) {
    std::copy(delta.begin(), delta.end(), input.begin());
    return;
  }
  compress_with_feedback(spec, delta, residual, bytes);
  decompress(spec, bytes, input);
}

}  // namespace gossip::sgd
