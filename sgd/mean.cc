#include "sgd/mean.h"

#include <vector>

#include "common/check.h"

namespace gossip::sgd {

void mean_rounded_once(std::span<const float* const> vectors, std::size_t d, float* out) {
  GOSSIP_CHECK(!vectors.empty()) << "the mean of no vectors";
  std::vector<double> sum(d, 0.0);
  for (const float* v : vectors) {
    for (std::size_t k = 0; k < d; ++k) sum[k] += v[k];
  }
  const auto n = static_cast<double>(vectors.size());
  for (std::size_t k = 0; k < d; ++k) out[k] = static_cast<float>(sum[k] / n);
}

}  // namespace gossip::sgd
