// The cpu kernels on every instruction-set level this CPU has (common/isa.h), held against each
// other: a whole training step (loss, gradient, momentum direction, mixing with neighbours) of
// every model family gives the same bits on every level and on 1, 2 and 3 threads; so do the
// communication round's pieces (compressors, error feedback, CHOCO copies, the compressed ring's
// mean, the outer step) and AdamW's direction, on awkward inputs (zeros, subnormals, huge values,
// an inf).
//
// The tolerance between levels is zero: every level runs the same operations in the same order
// (sgemm.h, dense_net.h, flat kernels: fused multiply-add chains written out by the kernels, no
// reassociation), so any difference is a bug. What could differ across machines is the C
// library's exp/log in the loss; in one process they are the same function for every level.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/isa.h"
#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/choco.h"
#include "sgd/compress.h"
#include "sgd/cpu/cpu_backend.h"
#include "sgd/model_spec.h"
#include "sgd/optimizer.h"
#include "sgd/outer_optimizer.h"
#include "sgd/ring_allreduce.h"

namespace gossip::sgd {
namespace {

struct StepResult {
  double loss = 0;
  std::vector<float> grad, direction, velocity, mixed;
};

// One step of node 0 with two neighbours: loss and gradient at x, the momentum direction, then
// x' = Σ_j w_j x_j − γ u (the D-PSGD update).
StepResult training_step(const ModelSpec& spec, int batch_rows, int threads) {
  auto backend = make_backend(Device::kCpu, threads);
  REQUIRE(backend.is_ok());
  auto model = (*backend)->make_model(spec);
  REQUIRE(model.is_ok());
  const std::size_t d = spec.num_params();
  std::vector<float> x = init_params(spec, 5), x1(d), x2(d);
  Rng rng(9);
  for (std::size_t k = 0; k < d; ++k) {
    x[k] += 0.05f * static_cast<float>(rng.normal());
    x1[k] = x[k] + 0.01f * static_cast<float>(rng.normal());
    x2[k] = x[k] - 0.01f * static_cast<float>(rng.normal());
  }
  Batch b;
  b.rows = batch_rows;
  b.dim = spec.input_dim;
  b.features.resize(static_cast<std::size_t>(b.rows) * b.dim);
  for (float& f : b.features) f = static_cast<float>(rng.normal());
  for (int j = 0; j < b.rows; ++j) {
    if (spec.kind == ModelKind::kLeastSquares) {
      b.targets.push_back(static_cast<float>(rng.normal()));
    } else {
      b.labels.push_back(static_cast<std::int32_t>(rng.uniform_int(spec.num_classes)));
    }
  }
  StepResult r;
  r.grad.resize(d);
  r.loss = (*model)->loss_and_grad(x.data(), b, r.grad.data());
  r.direction.resize(d);
  r.velocity.assign(d, 0.01f);
  (*backend)->sgd_direction(r.direction.data(), r.velocity.data(), x.data(), r.grad.data(), d, 0.9f,
                            1e-4f, true);
  const MixTerm terms[] = {{0.5f, x.data()}, {0.25f, x1.data()}, {0.25f, x2.data()}};
  r.mixed.resize(d);
  (*backend)->mix(r.mixed.data(), terms, 0.05f, r.direction.data(), d);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ModelSpec spec_of(ModelKind kind, int input, std::vector<int> hidden, int classes, float l2) {
  ModelSpec s;
  s.kind = kind;
  s.input_dim = input;
  s.hidden = std::move(hidden);
  s.num_classes = classes;
  s.l2 = l2;
  REQUIRE(s.validate().is_ok());
  return s;
}

TEST_CASE("isa paths: a training step gives the same bits on every level and thread count") {
  const Isa saved = active_isa();
  struct Case {
    const char* name;
    ModelSpec spec;
    int batch;
  };
  const Case cases[] = {
      {"least squares", spec_of(ModelKind::kLeastSquares, 67, {}, 0, 0.0f), 13},
      {"logistic, l2", spec_of(ModelKind::kLogistic, 100, {}, 2, 1e-3f), 32},
      {"softmax", spec_of(ModelKind::kSoftmax, 50, {}, 10, 0.0f), 9},
      // The demo's shape, smaller batch: every GEMM path (m ≥ and < one tile, k > 384).
      {"mlp 784-256-128-10, l2", spec_of(ModelKind::kMlp, 784, {256, 128}, 10, 1e-4f), 40},
  };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    REQUIRE(set_active_isa(Isa::kPortable).is_ok());
    const StepResult ref = training_step(c.spec, c.batch, 1);
    int levels = 0;
    for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      ++levels;
      REQUIRE(set_active_isa(isa).is_ok());
      for (int threads : {1, 2, 3}) {
        CAPTURE(isa_name(isa));
        CAPTURE(threads);
        const StepResult r = training_step(c.spec, c.batch, threads);
        CHECK(r.loss == ref.loss);
        CHECK(same_bits(r.grad, ref.grad));
        CHECK(same_bits(r.direction, ref.direction));
        CHECK(same_bits(r.velocity, ref.velocity));
        CHECK(same_bits(r.mixed, ref.mixed));
      }
    }
    CHECK(levels >= 1);
  }
  REQUIRE(set_active_isa(saved).is_ok());
  // Leave the process's thread count where the other tests expect it.
  (void)make_backend(Device::kCpu, 1);
}

// Everything the communication round computes on the cpu (compress.h, choco.h, ring_allreduce.h,
// outer_optimizer.h) and AdamW's direction, as one byte string and one float vector per level.
struct RoundResult {
  std::vector<std::byte> bytes;
  std::vector<float> floats;
};

void append(RoundResult& r, const std::vector<std::byte>& b) {
  r.bytes.insert(r.bytes.end(), b.begin(), b.end());
}
void append(RoundResult& r, const std::vector<float>& f) {
  r.floats.insert(r.floats.end(), f.begin(), f.end());
}

// Values of every magnitude: normal, tiny (a block whose scale underflows), huge, zero runs, and
// one block holding an inf (int8's NaN scale).
std::vector<float> awkward_vector(std::size_t n, std::uint64_t seed, bool with_inf) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double v = rng.normal();
    x[k] = static_cast<float>(k % 97 < 3 ? 0.0 : v * std::pow(10.0, (k / 64) % 7 - 3.0));
  }
  for (std::size_t k = 64; k < 80 && k < n; ++k) x[k] = 1e-44f * static_cast<float>(k % 3);
  if (with_inf && n > 200) x[200] = std::numeric_limits<float>::infinity();
  return x;
}

RoundResult communication_round() {
  RoundResult r;
  const std::size_t n = 16 * 37 + 9;
  const std::vector<float> x = awkward_vector(n, 1, true), y = awkward_vector(n, 2, false);
  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    CompressionSpec spec;
    spec.kind = kind;
    spec.block_floats = 16;
    std::vector<std::byte> bytes(compressed_bytes(spec, n));
    compress(spec, x, bytes);
    append(r, bytes);
    std::vector<float> out(n);
    decompress(spec, bytes, out);
    append(r, out);
    out = y;
    decompress_add(spec, bytes, out);
    append(r, out);
    std::vector<float> residual(n, 0.0f), copy(n, 0.0f), receiver(n, 0.0f);
    for (int round = 0; round < 3; ++round) {
      compress_with_feedback(spec, y, residual, bytes);
      append(r, bytes);
      choco_encode(spec, y, copy, bytes);
      choco_decode_apply(spec, bytes, receiver);
      append(r, bytes);
    }
    append(r, residual);
    append(r, copy);
    append(r, receiver);
    const std::vector<float> z = awkward_vector(n, 3, false);
    const std::vector<std::span<const float>> inputs{x, y, z};
    std::vector<float> mean(n);
    ring_allreduce_mean_reference(spec, inputs, mean);
    append(r, mean);
  }
  for (OuterKind kind : {OuterKind::kNone, OuterKind::kSgd, OuterKind::kNesterov}) {
    for (double momentum : {0.0, 0.9}) {
      OuterConfig c{kind, 0.7, momentum};
      if (!c.validate().is_ok()) continue;
      std::vector<float> anchor = y, d(n), m(c.state_size(n), 0.0f);
      for (int round = 0; round < 3; ++round) {
        pseudo_gradient(d, anchor, awkward_vector(n, 10 + round, false));
        outer_step(c, anchor, d, m);
      }
      append(r, anchor);
      append(r, m);
    }
  }
  OptimizerConfig oc;
  oc.kind = OptimizerKind::kAdamW;
  oc.weight_decay = 0.01;
  Optimizer adamw(oc, n);
  auto backend = make_backend(Device::kCpu, 1);
  REQUIRE(backend.is_ok());
  std::vector<float> params = y, state(adamw.state_size(), 0.0f), u(n);
  for (std::int64_t t = 0; t < 3; ++t) {
    const std::vector<float> g = awkward_vector(n, 20 + t, false);
    adamw.direction(**backend, t, params.data(), g.data(), state.data(), u.data());
    append(r, u);
  }
  append(r, state);
  return r;
}

TEST_CASE(
    "isa paths: compressors, CHOCO, the ring, the outer step and AdamW agree on every level") {
  const Isa saved = active_isa();
  REQUIRE(set_active_isa(Isa::kPortable).is_ok());
  const RoundResult ref = communication_round();
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    CAPTURE(isa_name(isa));
    REQUIRE(set_active_isa(isa).is_ok());
    const RoundResult r = communication_round();
    CHECK(r.bytes == ref.bytes);
    CHECK(same_bits(r.floats, ref.floats));
  }
  REQUIRE(set_active_isa(saved).is_ok());
}

}  // namespace
}  // namespace gossip::sgd
