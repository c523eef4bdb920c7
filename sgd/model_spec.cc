// ModelSpec helpers and seeded initialisation. The layout arithmetic here is the single source of
// truth for offsets: both backends and the checkpoint code ask the spec, never recompute.
#include "sgd/model_spec.h"

#include <cmath>
#include <sstream>

#include "common/check.h"
#include "common/random.h"

namespace gossip::sgd {

Status ModelSpec::validate() const {
  if (input_dim <= 0) return invalid_argument("model: input_dim must be > 0");
  if (kind != ModelKind::kMlp && !hidden.empty()) {
    return invalid_argument("model: hidden layers are only allowed for kind mlp, not " +
                            std::string(kModelKinds.name(kind)));
  }
  if (kind == ModelKind::kMlp && hidden.empty()) {
    return invalid_argument("model: kind mlp needs at least one hidden layer");
  }
  for (int h : hidden) {
    if (h <= 0) return invalid_argument("model: hidden layer widths must be > 0");
  }
  switch (kind) {
    case ModelKind::kLeastSquares:
      if (num_classes != 0) return invalid_argument("model: least_squares has num_classes 0");
      break;
    case ModelKind::kLogistic:
      if (num_classes != 2) return invalid_argument("model: logistic has num_classes 2");
      break;
    default:
      if (num_classes < 2) return invalid_argument("model: num_classes must be >= 2");
  }
  if (!(l2 >= 0) || !std::isfinite(l2)) return invalid_argument("model: l2 must be >= 0");
  return Status::ok();
}

int ModelSpec::output_dim() const {
  return (kind == ModelKind::kLeastSquares || kind == ModelKind::kLogistic) ? 1 : num_classes;
}

OutputLoss ModelSpec::output_loss() const {
  switch (kind) {
    case ModelKind::kLeastSquares:
      return OutputLoss::kSquared;
    case ModelKind::kLogistic:
      return OutputLoss::kBinaryLogistic;
    default:
      return OutputLoss::kSoftmaxCrossEntropy;
  }
}

std::vector<int> ModelSpec::layer_sizes() const {
  std::vector<int> sizes{input_dim};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(output_dim());
  return sizes;
}

std::size_t ModelSpec::weight_offset(std::size_t layer) const {
  GOSSIP_CHECK_LT(layer, num_layers());
  std::vector<int> s = layer_sizes();
  std::size_t off = 0;
  for (std::size_t l = 0; l < layer; ++l) {
    off += static_cast<std::size_t>(s[l]) * s[l + 1] + s[l + 1];
  }
  return off;
}

std::size_t ModelSpec::bias_offset(std::size_t layer) const {
  std::vector<int> s = layer_sizes();
  return weight_offset(layer) + static_cast<std::size_t>(s[layer]) * s[layer + 1];
}

std::size_t ModelSpec::num_params() const {
  std::vector<int> s = layer_sizes();
  std::size_t n = 0;
  for (std::size_t l = 0; l + 1 < s.size(); ++l)
    n += static_cast<std::size_t>(s[l]) * s[l + 1] + s[l + 1];
  return n;
}

std::string ModelSpec::to_string() const {
  std::ostringstream os;
  os << kModelKinds.name(kind) << ' ';
  std::vector<int> s = layer_sizes();
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? "-" : "") << s[i];
  if (l2 > 0) os << " l2=" << l2;
  return os.str();
}

void init_params(const ModelSpec& spec, std::uint64_t seed, std::span<float> params) {
  GOSSIP_CHECK_EQ(params.size(), spec.num_params());
  std::vector<int> s = spec.layer_sizes();
  Rng rng(seed);
  std::size_t off = 0;
  for (std::size_t l = 0; l + 1 < s.size(); ++l) {
    const std::size_t fan_in = s[l], fan_out = s[l + 1];
    const bool last = l + 2 == s.size();
    double stddev = 0;
    if (!last) {
      stddev = std::sqrt(2.0 / fan_in);  // He: the next layer is a ReLU
    } else if (spec.kind == ModelKind::kMlp) {
      stddev = std::sqrt(1.0 / fan_in);  // output of an mlp: LeCun normal
    }
    for (std::size_t k = 0; k < fan_in * fan_out; ++k) {
      params[off + k] = stddev > 0 ? static_cast<float>(rng.normal() * stddev) : 0.0f;
    }
    off += fan_in * fan_out;
    for (std::size_t k = 0; k < fan_out; ++k) params[off + k] = 0.0f;
    off += fan_out;
  }
}

std::vector<float> init_params(const ModelSpec& spec, std::uint64_t seed) {
  std::vector<float> p(spec.num_params());
  init_params(spec, seed, p);
  return p;
}

}  // namespace gossip::sgd
