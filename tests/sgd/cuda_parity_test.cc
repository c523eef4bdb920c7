// CPU/CUDA parity (ctest label gpu): the same parameters and the same batch give the same loss and
// gradient on both backends within float tolerance, and the flat kernels (mix, sgd_direction,
// adamw_direction) give bit-identical results. Exits 77 (ctest: skipped) where the build has no
// CUDA backend or the machine no device.
//
// Tolerances: GEMM summation order differs between Eigen and cuBLAS, so gradients agree to
// |Δg| ≤ 1e-4·max(1, ‖g‖∞) and losses to a relative 1e-5; mix, sgd_direction and adamw_direction
// use the same fused multiply-adds (and IEEE square root and division) in the same order on both
// sides, so they must agree exactly.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/dataset.h"
#include "sgd/optimizer.h"
#if GOSSIP_SGD_CUDA
#include "sgd/cuda/cuda_backend.h"
#endif
#include "tests/gpu_test_main.h"

namespace gossip::sgd {
namespace {

struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
};

Pair backends() {
  auto cpu = make_backend(Device::kCpu, 1);
  auto gpu = make_backend(Device::kCuda);
  REQUIRE(cpu.is_ok());
  REQUIRE_MESSAGE(gpu.is_ok(), gpu.status().to_string());
  return {std::move(cpu).value(), std::move(gpu).value()};
}

std::vector<float> randn(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// Uploads host data into a fresh device buffer.
DeviceBuffer to_device(Backend& b, const std::vector<float>& host) {
  DeviceBuffer d = b.alloc(host.size());
  b.copy_to_device(d.data(), host.data(), host.size());
  return d;
}

std::vector<float> to_host(Backend& b, const DeviceBuffer& d) {
  std::vector<float> h(d.size());
  b.copy_to_host(h.data(), d.data(), d.size());
  return h;
}

Batch random_batch(const ModelSpec& spec, int rows, std::uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.rows = rows;
  b.dim = spec.input_dim;
  b.features = randn(static_cast<std::size_t>(rows) * spec.input_dim, seed + 1);
  for (int j = 0; j < rows; ++j) {
    if (spec.kind == ModelKind::kLeastSquares) {
      b.targets.push_back(static_cast<float>(rng.normal()));
    } else {
      b.labels.push_back(static_cast<std::int32_t>(rng.uniform_int(std::max(2, spec.num_classes))));
    }
  }
  return b;
}

TEST_CASE("loss_and_grad: cpu and cuda agree for every model") {
  Pair p = backends();
  const ModelSpec specs[] = {
      {ModelKind::kLeastSquares, 50, {}, 0, 0.0f}, {ModelKind::kLogistic, 50, {}, 2, 0.01f},
      {ModelKind::kSoftmax, 784, {}, 10, 0.0f},    {ModelKind::kMlp, 784, {256, 128}, 10, 0.001f},
      {ModelKind::kMlp, 33, {300}, 7, 0.0f},
  };
  for (const ModelSpec& spec : specs) {
    CAPTURE(spec.to_string());
    auto cm = p.cpu->make_model(spec);
    auto gm = p.gpu->make_model(spec);
    REQUIRE(cm.is_ok());
    REQUIRE(gm.is_ok());
    std::vector<float> x = randn(spec.num_params(), 5, 0.05);
    const Batch batch = random_batch(spec, 129, 9);
    std::vector<float> g_cpu(x.size());
    const double l_cpu = (*cm)->loss_and_grad(x.data(), batch, g_cpu.data());
    DeviceBuffer dx = to_device(*p.gpu, x), dg = p.gpu->alloc(x.size());
    const double l_gpu = (*gm)->loss_and_grad(dx.data(), batch, dg.data());
    const std::vector<float> g_gpu = to_host(*p.gpu, dg);
    CHECK(l_gpu == doctest::Approx(l_cpu).epsilon(1e-5));
    double scale = 1, err = 0;
    for (float v : g_cpu) scale = std::max(scale, double(std::abs(v)));
    for (std::size_t k = 0; k < x.size(); ++k)
      err = std::max(err, double(std::abs(g_gpu[k] - g_cpu[k])));
    CAPTURE(err);
    CHECK(err <= 1e-4 * scale);
  }
}

TEST_CASE("evaluate: cpu and cuda agree on loss and accuracy") {
  Pair p = backends();
  const ModelSpec spec{ModelKind::kMlp, 20, {64}, 4, 0.0f};
  Dataset d;
  d.num_examples = 5000;
  d.dim = 20;
  d.num_classes = 4;
  d.features = randn(5000 * 20, 3);
  Rng rng(4);
  for (int i = 0; i < 5000; ++i) d.labels.push_back(static_cast<std::int32_t>(rng.uniform_int(4)));
  std::vector<float> x = randn(spec.num_params(), 6, 0.3);
  auto cm = p.cpu->make_model(spec);
  auto gm = p.gpu->make_model(spec);
  const EvalResult a = (*cm)->evaluate(x.data(), d);
  DeviceBuffer dx = to_device(*p.gpu, x);
  const EvalResult b = (*gm)->evaluate(dx.data(), d);
  CHECK(b.examples == a.examples);
  CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
  CHECK(std::abs(b.accuracy - a.accuracy) <= 2.0 / 5000);  // near-ties may flip
}

TEST_CASE("mix: bit-identical on cpu and cuda, short and long term lists, unaligned, in place") {
  Pair p = backends();
  const std::size_t n = 1000003;
  for (int terms : {1, 3, 30}) {
    CAPTURE(terms);
    std::vector<std::vector<float>> xs;
    std::vector<DeviceBuffer> dxs;
    std::vector<MixTerm> ht, dt;
    for (int j = 0; j < terms; ++j) {
      xs.push_back(randn(n, 100 + j));
      dxs.push_back(to_device(*p.gpu, xs.back()));
    }
    Rng rng(terms);
    for (int j = 0; j < terms; ++j) {
      const float w = static_cast<float>(rng.uniform());
      ht.push_back({w, xs[j].data()});
      dt.push_back({w, dxs[j].data()});
    }
    const std::vector<float> u = randn(n, 7);
    DeviceBuffer du = to_device(*p.gpu, u), dout = p.gpu->alloc(n);
    for (const bool with_update : {true, false}) {
      std::vector<float> out(n);
      p.cpu->mix(out.data(), ht, 0.125f, with_update ? u.data() : nullptr, n);
      p.gpu->mix(dout.data(), dt, 0.125f, with_update ? du.data() : nullptr, n);
      CHECK(std::memcmp(out.data(), to_host(*p.gpu, dout).data(), n * sizeof(float)) == 0);
    }
    // one float in, so no pointer is 16-byte aligned: the scalar kernel alone, the same bits
    {
      std::vector<MixTerm> ht1, dt1;
      for (int j = 0; j < terms; ++j) {
        ht1.push_back({ht[j].weight, xs[j].data() + 1});
        dt1.push_back({dt[j].weight, dxs[j].data() + 1});
      }
      std::vector<float> out(n - 1);
      p.cpu->mix(out.data(), ht1, 0.25f, u.data() + 1, n - 1);
      p.gpu->mix(dout.data() + 1, dt1, 0.25f, du.data() + 1, n - 1);
      CHECK(std::memcmp(out.data(), to_host(*p.gpu, dout).data() + 1, (n - 1) * sizeof(float)) ==
            0);
    }
    // in place over term 0
    std::vector<float> out(n);
    p.cpu->mix(out.data(), ht, 0.5f, u.data(), n);
    p.gpu->mix(dxs[0].data(), dt, 0.5f, du.data(), n);
    CHECK(std::memcmp(out.data(), to_host(*p.gpu, dxs[0]).data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("sgd_direction: bit-identical on cpu and cuda") {
  Pair p = backends();
  const std::size_t n = 100000;
  for (const bool nesterov : {false, true}) {
    std::vector<float> x = randn(n, 1), g = randn(n, 2), v = randn(n, 3), u(n);
    DeviceBuffer dx = to_device(*p.gpu, x), dg = to_device(*p.gpu, g), dv = to_device(*p.gpu, v),
                 du = p.gpu->alloc(n);
    p.cpu->sgd_direction(u.data(), v.data(), x.data(), g.data(), n, 0.9f, 1e-3f, nesterov);
    p.gpu->sgd_direction(du.data(), dv.data(), dx.data(), dg.data(), n, 0.9f, 1e-3f, nesterov);
    CHECK(std::memcmp(u.data(), to_host(*p.gpu, du).data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(v.data(), to_host(*p.gpu, dv).data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("adamw_direction: bit-identical on cpu and cuda over several steps") {
  Pair p = backends();
  const std::size_t n = 100003;
  OptimizerConfig oc;
  oc.kind = OptimizerKind::kAdamW;
  oc.weight_decay = 0.01;
  // Gradients over six orders of magnitude, so that ε, the square root and the division all
  // matter; m and v start at zero and are carried across steps on both sides.
  std::vector<float> x = randn(n, 31), m(n, 0.0f), v(n, 0.0f), u(n);
  for (std::size_t k = 0; k < n; k += 3) x[k] *= 1e-3f;
  DeviceBuffer dx = to_device(*p.gpu, x), dm = to_device(*p.gpu, m), dv = to_device(*p.gpu, v),
               du = p.gpu->alloc(n);
  for (std::int64_t t = 0; t < 5; ++t) {
    CAPTURE(t);
    std::vector<float> g = randn(n, 40 + t);
    for (std::size_t k = 0; k < n; ++k) g[k] *= std::pow(10.0f, static_cast<float>(k % 7) - 4);
    DeviceBuffer dg = to_device(*p.gpu, g);
    const AdamWCoefficients c = adamw_coefficients(oc, t);
    p.cpu->adamw_direction(u.data(), m.data(), v.data(), x.data(), g.data(), n, c);
    p.gpu->adamw_direction(du.data(), dm.data(), dv.data(), dx.data(), dg.data(), n, c);
    CHECK(std::memcmp(u.data(), to_host(*p.gpu, du).data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(m.data(), to_host(*p.gpu, dm).data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(v.data(), to_host(*p.gpu, dv).data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("copy_to_device is ordered before later compute without an explicit synchronize") {
  Pair p = backends();
  const std::size_t n = 1 << 22;
  std::vector<float> a = randn(n, 11), b = randn(n, 12);
  DeviceBuffer da = p.gpu->alloc(n), db = p.gpu->alloc(n), dout = p.gpu->alloc(n);
  p.gpu->copy_to_device(da.data(), a.data(), n);
  p.gpu->copy_to_device(db.data(), b.data(), n);
  const std::vector<MixTerm> dt{{0.5f, da.data()}, {0.5f, db.data()}};
  p.gpu->mix(dout.data(), dt, 0.0f, nullptr, n);
  std::vector<float> want(n);
  const std::vector<MixTerm> ht{{0.5f, a.data()}, {0.5f, b.data()}};
  p.cpu->mix(want.data(), ht, 0.0f, nullptr, n);
  CHECK(std::memcmp(want.data(), to_host(*p.gpu, dout).data(), n * sizeof(float)) == 0);
}

TEST_CASE("alloc_host: pinned zeroed staging memory that round-trips through the device") {
  Pair p = backends();
  const std::size_t n = (1 << 20) + 3;
  DeviceBuffer staged = p.gpu->alloc_host(n), back = p.gpu->alloc_host(n);
  REQUIRE(staged.size() == n);
#if GOSSIP_SGD_CUDA
  CHECK(cuda::is_pinned_host(staged.data()));
#endif
  std::vector<float> zeros(n, 0.0f);
  CHECK(std::memcmp(staged.data(), zeros.data(), n * sizeof(float)) == 0);
#if GOSSIP_SGD_CUDA
  CHECK_FALSE(cuda::is_pinned_host(zeros.data()));  // pageable memory is told apart
#endif
  const std::vector<float> a = randn(n, 21);
  std::memcpy(staged.data(), a.data(), n * sizeof(float));
  DeviceBuffer d = p.gpu->alloc(n);
  p.gpu->copy_to_device(d.data(), staged.data(), n);  // asynchronous DMA from pinned memory
  p.gpu->copy_to_host(back.data(), d.data(), n);      // ordered after it
  CHECK(std::memcmp(back.data(), a.data(), n * sizeof(float)) == 0);
  // The cpu backend's staging memory is ordinary zeroed memory.
  DeviceBuffer h = p.cpu->alloc_host(5);
  CHECK(h.size() == 5);
  CHECK(h.data()[4] == 0.0f);
}

TEST_CASE("cuda device selection works where a device exists") {
  CHECK(cuda_built());
  CHECK(cuda_device_count() > 0);
  auto a = make_backend(Device::kAuto);
  REQUIRE(a.is_ok());
  CHECK((*a)->device() == Device::kCuda);
  MESSAGE((*a)->description());
}

}  // namespace
}  // namespace gossip::sgd

int main(int argc, char** argv) {
  return gossip::testing::run_gpu_tests("cuda_parity_test", argc, argv);
}
