// Model::loss_and_grad_rows (the batch view the simulator trains with): bit for bit what
// gather + loss_and_grad computes, for every model kind (the linear ones read the data set in
// place, the others gather), across input widths that exercise every tail of the 16-lane dot
// products and the 64-entry gradient tiles, batches below and above the kernel's stack buffer, and
// with an l2 term. The linear kernel is also held against an independent scalar transcription of
// its documented summation order (gradient bit for bit, so the order cannot drift silently), and
// against double precision.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/cpu/dense_net.h"
#include "sgd/dataset.h"
#include "sgd/model_spec.h"

namespace gossip::sgd {
namespace {

Dataset random_dataset(std::int64_t examples, int dim, int classes, std::uint64_t seed) {
  Rng rng(seed);
  Dataset d;
  d.num_examples = examples;
  d.dim = dim;
  d.num_classes = classes;
  d.features.resize(static_cast<std::size_t>(examples) * dim);
  for (float& v : d.features) v = static_cast<float>(rng.normal());
  for (std::int64_t i = 0; i < examples; ++i) {
    if (classes > 0) {
      d.labels.push_back(static_cast<std::int32_t>(rng.uniform_int(classes)));
    } else {
      d.targets.push_back(static_cast<float>(rng.normal()));
    }
  }
  return d;
}

std::vector<std::int64_t> random_indices(int batch, std::int64_t examples, Rng& rng) {
  std::vector<std::int64_t> idx(batch);
  for (auto& i : idx) i = static_cast<std::int64_t>(rng.uniform_int(examples));
  return idx;
}

std::vector<float> random_params(const ModelSpec& spec, Rng& rng) {
  std::vector<float> p(spec.num_params());
  for (float& v : p) v = static_cast<float>(0.3 * rng.normal());
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

float bits_equal_loss(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The linear kernel's documented order, written out scalar by scalar: dot products in 16 lanes
// (lane = k mod 16 over full groups, then the tail k into lane k − m16), reduced pairwise 8, 4, 2,
// 1; the gradient sums rows in order with fused multiply-adds; loss, δ and bias as documented.
float linear_reference(const ModelSpec& spec, const float* p, const std::vector<const float*>& rows,
                       const std::vector<std::int32_t>& labels, const std::vector<float>& targets,
                       std::vector<float>& grad) {
  const int m = spec.input_dim;
  const int b = static_cast<int>(rows.size());
  const bool regression = spec.kind == ModelKind::kLeastSquares;
  auto dot = [&](const float* x, const float* w) {
    float lane[16] = {};
    const int m16 = m / 16 * 16;
    for (int k = 0; k < m16; ++k) lane[k % 16] = std::fma(x[k], w[k], lane[k % 16]);
    for (int k = m16; k < m; ++k) lane[k - m16] = std::fma(x[k], w[k], lane[k - m16]);
    for (int s = 8; s > 0; s /= 2) {
      for (int l = 0; l < s; ++l) lane[l] = lane[l] + lane[l + s];
    }
    return lane[0];
  };
  std::vector<float> delta(b);
  float loss = 0;
  for (int j = 0; j < b; ++j) {
    const float z = dot(rows[j], p) + p[m];
    if (regression) {
      const float r = z - targets[j];
      delta[j] = r;
      loss += 0.5f * r * r;
    } else {
      const float y = labels[j] ? 1.0f : 0.0f;
      delta[j] = 1.0f / (1.0f + std::exp(-z)) - y;
      loss += std::max(z, 0.0f) + std::log1p(std::exp(-std::abs(z))) - y * z;
    }
  }
  const float inv_b = 1.0f / static_cast<float>(b);
  loss *= inv_b;
  for (float& v : delta) v *= inv_b;
  grad.assign(spec.num_params(), 0.0f);
  for (int k = 0; k < m; ++k) {
    float acc = delta[0] * rows[0][k];
    for (int j = 1; j < b; ++j) acc = std::fma(delta[j], rows[j][k], acc);
    grad[k] = acc;
  }
  float db = delta[0];
  for (int j = 1; j < b; ++j) db += delta[j];
  grad[m] = db;
  if (spec.l2 > 0) {
    const float sq = dot(p, p);
    for (int k = 0; k < m; ++k) grad[k] = std::fma(spec.l2, p[k], grad[k]);
    loss += 0.5f * spec.l2 * sq;
  }
  return loss;
}

TEST_CASE("AlignedRows: every row on a 64-byte boundary, the features' values, zeros between") {
  for (int dim : {1, 15, 16, 17, 999}) {
    const Dataset data = random_dataset(9, dim, 0, 500 + dim);
    AlignedRows rows(data);
    INFO("dim " << dim);
    CHECK(rows.num_rows() == 9);
    CHECK(rows.dim() == dim);
    CHECK(rows.stride() % 16 == 0);
    CHECK(rows.stride() >= static_cast<std::size_t>(dim));
    CHECK(rows.stride() < static_cast<std::size_t>(dim) + 16);
    for (std::int64_t i = 0; i < 9; ++i) {
      CHECK(reinterpret_cast<std::uintptr_t>(rows.row(i)) % 64 == 0);
      CHECK(std::memcmp(rows.row(i), data.features.data() + i * dim, dim * sizeof(float)) == 0);
      for (std::size_t k = dim; k < rows.stride(); ++k) CHECK(rows.row(i)[k] == 0.0f);
    }
    // A move keeps the buffer, so the rows stay aligned and in place.
    const float* first = rows.row(0);
    AlignedRows moved = std::move(rows);
    CHECK(moved.row(0) == first);
  }
}

TEST_CASE("loss_and_grad_rows is bit-identical to gather + loss_and_grad for every model") {
  auto backend = make_backend(Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  Rng rng(7);
  struct Case {
    ModelKind kind;
    std::vector<int> hidden;
    int classes;
  };
  const std::vector<Case> cases = {{ModelKind::kLeastSquares, {}, 0},
                                   {ModelKind::kLogistic, {}, 2},
                                   {ModelKind::kSoftmax, {}, 4},
                                   {ModelKind::kMlp, {5}, 3}};
  int compared = 0;
  for (const Case& c : cases) {
    for (int dim : {1, 7, 15, 16, 17, 63, 64, 65, 130, 999}) {
      for (float l2 : {0.0f, 0.01f}) {
        ModelSpec spec{c.kind, dim, c.hidden, c.classes, l2};
        REQUIRE(spec.validate().is_ok());
        const Dataset data = random_dataset(40, dim, c.classes, 100 + dim);
        const AlignedRows aligned(data);
        auto model = (*backend)->make_model(spec);
        REQUIRE(model.is_ok());
        for (int batch : {1, 3, 4, 5, 8, 300}) {
          const std::vector<float> p = random_params(spec, rng);
          const std::vector<std::int64_t> idx = random_indices(batch, data.num_examples, rng);
          Batch gathered;
          gather(data, idx, gathered);
          std::vector<float> g_gather(spec.num_params()), g_rows(spec.num_params(), -1.0f),
              g_aligned(spec.num_params(), -2.0f);
          const double l_gather = (*model)->loss_and_grad(p.data(), gathered, g_gather.data());
          const double l_rows =
              (*model)->loss_and_grad_rows(p.data(), data, nullptr, idx, g_rows.data());
          const double l_aligned =
              (*model)->loss_and_grad_rows(p.data(), data, &aligned, idx, g_aligned.data());
          INFO("model " << spec.to_string() << " l2 " << l2 << " batch " << batch);
          CHECK(bits_equal_loss(l_gather, l_rows));
          CHECK(same_bits(g_gather, g_rows));
          CHECK(bits_equal_loss(l_gather, l_aligned));
          CHECK(same_bits(g_gather, g_aligned));
          ++compared;
        }
      }
    }
  }
  CHECK(compared == 4 * 10 * 2 * 6);
}

TEST_CASE("linear models follow the documented summation order and agree with double precision") {
  auto backend = make_backend(Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  Rng rng(11);
  for (ModelKind kind : {ModelKind::kLeastSquares, ModelKind::kLogistic}) {
    const int classes = kind == ModelKind::kLogistic ? 2 : 0;
    for (int dim : {1, 16, 33, 999}) {
      for (float l2 : {0.0f, 0.05f}) {
        ModelSpec spec{kind, dim, {}, classes, l2};
        REQUIRE(spec.validate().is_ok());
        REQUIRE(cpu::is_linear(spec));
        const Dataset data = random_dataset(50, dim, classes, 300 + dim);
        auto model = (*backend)->make_model(spec);
        REQUIRE(model.is_ok());
        for (int batch : {1, 6, 9}) {
          const std::vector<float> p = random_params(spec, rng);
          const std::vector<std::int64_t> idx = random_indices(batch, data.num_examples, rng);
          std::vector<float> g(spec.num_params()), g_ref;
          const double loss = (*model)->loss_and_grad_rows(p.data(), data, nullptr, idx, g.data());
          std::vector<const float*> rows;
          std::vector<std::int32_t> labels;
          std::vector<float> targets;
          for (std::int64_t i : idx) {
            rows.push_back(data.features.data() + i * dim);
            if (classes)
              labels.push_back(data.labels[i]);
            else
              targets.push_back(data.targets[i]);
          }
          const float loss_ref = linear_reference(spec, p.data(), rows, labels, targets, g_ref);
          INFO("model " << spec.to_string() << " l2 " << l2 << " batch " << batch);
          // The loss may differ in its last bit (the compiler may fuse 0.5·r·r into the sum).
          CHECK(loss == doctest::Approx(loss_ref).epsilon(1e-6));
          CHECK(same_bits(g, g_ref));

          // Double precision through the generic dense_net path (an independent formulation).
          std::vector<double> pd(p.begin(), p.end()), xd, td, gd(spec.num_params());
          for (const float* r : rows) xd.insert(xd.end(), r, r + dim);
          for (float t : targets) td.push_back(t);
          cpu::Workspace<double> ws;
          const double loss_d = cpu::loss_and_grad<double>(
              spec, pd.data(), xd.data(), classes ? labels.data() : nullptr,
              classes ? nullptr : td.data(), batch, gd.data(), ws);
          double scale = 1;
          for (double v : gd) scale = std::max(scale, std::abs(v));
          CHECK(loss == doctest::Approx(loss_d).epsilon(1e-5));
          for (std::size_t k = 0; k < gd.size(); ++k) {
            CHECK(std::abs(g[k] - gd[k]) <= 1e-5 * scale);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gossip::sgd
