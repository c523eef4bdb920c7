// The mean of whole parameter vectors as gossipd and gossip-sim both form it when a node takes its
// neighbours' state (a rejoin, a join): summed in double in the order given, rounded once to
// float. One function, so a simulated join equals a real one bit for bit.
#pragma once

#include <cstddef>
#include <span>

namespace gossip::sgd {

// out[k] = float((Σ_v vectors[v][k]) / vectors.size()) for k < d; `vectors` must not be empty.
// `out` may alias none of the inputs.
void mean_rounded_once(std::span<const float* const> vectors, std::size_t d, float* out);

}  // namespace gossip::sgd
