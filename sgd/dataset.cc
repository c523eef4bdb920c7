// Batches, preprocessing and the synthetic problems with a planted optimum.
#include "sgd/dataset.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/check.h"
#include "common/random.h"

namespace gossip::sgd {

Status Dataset::validate(const std::string& name) const {
  if (num_examples < 0 || dim <= 0) return invalid_argument(name + ": empty or dimensionless");
  if (features.size() != static_cast<std::size_t>(num_examples) * dim) {
    return invalid_argument(name + ": features hold " + std::to_string(features.size()) +
                            " values, expected " + std::to_string(num_examples) + " x " +
                            std::to_string(dim));
  }
  if (is_classification()) {
    if (labels.size() != static_cast<std::size_t>(num_examples)) {
      return invalid_argument(name + ": " + std::to_string(labels.size()) + " labels for " +
                              std::to_string(num_examples) + " examples");
    }
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] < 0 || labels[i] >= num_classes) {
        return invalid_argument(name + ": label " + std::to_string(labels[i]) + " of example " +
                                std::to_string(i) + " is outside [0, " +
                                std::to_string(num_classes) + ")");
      }
    }
  } else if (targets.size() != static_cast<std::size_t>(num_examples)) {
    return invalid_argument(name + ": " + std::to_string(targets.size()) + " targets for " +
                            std::to_string(num_examples) + " examples");
  }
  return Status::ok();
}

void gather(const Dataset& data, std::span<const std::int64_t> indices, Batch& out) {
  out.rows = static_cast<int>(indices.size());
  out.dim = data.dim;
  out.features.resize(indices.size() * data.dim);
  out.labels.resize(data.is_classification() ? indices.size() : 0);
  out.targets.resize(data.is_classification() ? 0 : indices.size());
  for (std::size_t r = 0; r < indices.size(); ++r) {
    const std::int64_t i = indices[r];
    GOSSIP_CHECK(i >= 0 && i < data.num_examples) << "example index " << i;
    std::memcpy(out.features.data() + r * data.dim, data.features.data() + i * data.dim,
                data.dim * sizeof(float));
    if (data.is_classification()) {
      out.labels[r] = data.labels[i];
    } else {
      out.targets[r] = data.targets[i];
    }
  }
}

AlignedRows::AlignedRows(const Dataset& data)
    : stride_((static_cast<std::size_t>(data.dim) + 15) / 16 * 16),
      num_rows_(data.num_examples),
      dim_(data.dim) {
  constexpr std::size_t kLineFloats = 64 / sizeof(float);
  storage_.assign(static_cast<std::size_t>(num_rows_) * stride_ + kLineFloats, 0.0f);
  const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
  offset_ = ((64 - address % 64) % 64) / sizeof(float);
  for (std::int64_t i = 0; i < num_rows_; ++i) {
    std::memcpy(storage_.data() + offset_ + i * stride_, data.features.data() + i * data.dim,
                static_cast<std::size_t>(data.dim) * sizeof(float));
  }
}

Batch slice(const Dataset& data, std::int64_t begin, std::int64_t end) {
  GOSSIP_CHECK(0 <= begin && begin <= end && end <= data.num_examples);
  Batch b;
  b.rows = static_cast<int>(end - begin);
  b.dim = data.dim;
  b.features.assign(data.features.begin() + begin * data.dim,
                    data.features.begin() + end * data.dim);
  if (data.is_classification()) {
    b.labels.assign(data.labels.begin() + begin, data.labels.begin() + end);
  } else {
    b.targets.assign(data.targets.begin() + begin, data.targets.begin() + end);
  }
  return b;
}

Standardizer Standardizer::fit(const Dataset& train) {
  const int d = train.dim;
  std::vector<double> sum(d, 0.0), sq(d, 0.0);
  for (std::int64_t i = 0; i < train.num_examples; ++i) {
    const float* x = train.features.data() + i * d;
    for (int k = 0; k < d; ++k) {
      sum[k] += x[k];
      sq[k] += static_cast<double>(x[k]) * x[k];
    }
  }
  Standardizer s;
  s.mean.resize(d);
  s.stddev.resize(d);
  const double n = std::max<std::int64_t>(train.num_examples, 1);
  for (int k = 0; k < d; ++k) {
    const double m = sum[k] / n;
    const double var = std::max(0.0, sq[k] / n - m * m);
    s.mean[k] = static_cast<float>(m);
    s.stddev[k] = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  }
  return s;
}

void Standardizer::apply(Dataset& data) const {
  GOSSIP_CHECK_EQ(static_cast<std::size_t>(data.dim), mean.size());
  const int d = data.dim;
  for (std::int64_t i = 0; i < data.num_examples; ++i) {
    float* x = data.features.data() + i * d;
    for (int k = 0; k < d; ++k) x[k] = (x[k] - mean[k]) / stddev[k];
  }
}

namespace {

// Features a ~ N(0, I_dim) and a planted (w*, b*) ~ N(0, 1), w* rescaled to norm `w_norm` when > 0.
void draw_planted(std::int64_t num_examples, int dim, double w_norm, Rng& rng, Dataset& data,
                  std::vector<float>& planted) {
  GOSSIP_CHECK_GT(dim, 0);
  GOSSIP_CHECK_GE(num_examples, 0);
  planted.resize(dim + 1);
  double norm = 0;
  for (int k = 0; k <= dim; ++k) {
    planted[k] = static_cast<float>(rng.normal());
    if (k < dim) norm += static_cast<double>(planted[k]) * planted[k];
  }
  if (w_norm > 0) {
    const double scale = w_norm / std::sqrt(std::max(norm, 1e-30));
    for (int k = 0; k < dim; ++k) planted[k] = static_cast<float>(planted[k] * scale);
  }
  data.num_examples = num_examples;
  data.dim = dim;
  data.features.resize(static_cast<std::size_t>(num_examples) * dim);
  for (float& v : data.features) v = static_cast<float>(rng.normal());
}

double planted_score(const Dataset& data, const std::vector<float>& planted, std::int64_t i) {
  double s = planted[data.dim];
  for (int k = 0; k < data.dim; ++k)
    s += static_cast<double>(planted[k]) * data.features[i * data.dim + k];
  return s;
}

}  // namespace

Dataset make_least_squares(std::int64_t num_examples, int dim, double noise, std::uint64_t seed,
                           std::vector<float>* planted) {
  Rng rng(seed);
  Dataset data;
  std::vector<float> x_star;
  draw_planted(num_examples, dim, 0.0, rng, data, x_star);
  data.targets.resize(num_examples);
  for (std::int64_t i = 0; i < num_examples; ++i) {
    data.targets[i] = static_cast<float>(planted_score(data, x_star, i) + noise * rng.normal());
  }
  if (planted) *planted = std::move(x_star);
  return data;
}

Dataset make_logistic(std::int64_t num_examples, int dim, double margin_scale, std::uint64_t seed,
                      std::vector<float>* planted) {
  Rng rng(seed);
  Dataset data;
  std::vector<float> w_star;
  draw_planted(num_examples, dim, margin_scale, rng, data, w_star);
  data.num_classes = 2;
  data.labels.resize(num_examples);
  for (std::int64_t i = 0; i < num_examples; ++i) {
    const double p = 1.0 / (1.0 + std::exp(-planted_score(data, w_star, i)));
    data.labels[i] = rng.uniform() < p ? 1 : 0;
  }
  if (planted) *planted = std::move(w_star);
  return data;
}

std::shared_ptr<const Dataset> first_examples(const std::shared_ptr<const Dataset>& data,
                                              std::int64_t limit) {
  if (limit <= 0 || limit >= data->num_examples) return data;
  auto out = std::make_shared<Dataset>();
  out->num_examples = limit;
  out->dim = data->dim;
  out->num_classes = data->num_classes;
  out->features.assign(data->features.begin(), data->features.begin() + limit * data->dim);
  if (!data->labels.empty()) out->labels.assign(data->labels.begin(), data->labels.begin() + limit);
  if (!data->targets.empty()) {
    out->targets.assign(data->targets.begin(), data->targets.begin() + limit);
  }
  return out;
}

}  // namespace gossip::sgd
