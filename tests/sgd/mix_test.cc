// The fused mixing kernel and backend selection: out = Σ w_j x_j − γ u against a double-precision
// reference and against the stated fma order bit for bit; aliasing; thread-count independence;
// pure gossip with a doubly-stochastic W preserves the average (docs/design.md §1).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/cpu/cpu_backend.h"

namespace gossip::sgd {
namespace {

std::vector<float> randn(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

TEST_CASE("mix equals the fma-ordered formula bit for bit and the double sum closely") {
  const std::size_t n = 100003;  // not a multiple of any vector width
  const auto u = randn(n, 4);
  const float gamma = 0.05f;
  for (int count : {1, 2, 3, 4, 5, 9}) {  // 5 and 9 take the multi-pass path
    std::vector<std::vector<float>> xs;
    std::vector<MixTerm> terms;
    Rng rng(count);
    for (int j = 0; j < count; ++j) xs.push_back(randn(n, 10 + j));
    for (int j = 0; j < count; ++j)
      terms.push_back({static_cast<float>(rng.uniform()), xs[j].data()});
    for (int threads : {1, 2, 3}) {
      CAPTURE(count);
      CAPTURE(threads);
      std::vector<float> out(n);
      cpu::mix(out.data(), terms, gamma, u.data(), n, threads);
      for (std::size_t k = 0; k < n; ++k) {
        float acc = terms[0].weight * xs[0][k];
        double ref = double(terms[0].weight) * xs[0][k];
        for (int j = 1; j < count; ++j) {
          acc = std::fma(terms[j].weight, xs[j][k], acc);
          ref += double(terms[j].weight) * xs[j][k];
        }
        const float want = std::fma(-gamma, u[k], acc);
        ref -= double(gamma) * u[k];
        if (out[k] != want) {
          FAIL_CHECK("element " << k << ": " << out[k] << " != " << want);
          break;
        }
        if (std::abs(out[k] - ref) > 1e-5 * (1 + std::abs(ref))) {
          FAIL_CHECK("element " << k << " far from the double sum");
          break;
        }
      }
    }
  }
}

TEST_CASE("mix may write over one of its inputs and null update is pure gossip") {
  const std::size_t n = 5000;
  for (int count : {2, 6}) {
    CAPTURE(count);
    std::vector<std::vector<float>> xs;
    for (int j = 0; j < count; ++j) xs.push_back(randn(n, 50 + j));
    std::vector<MixTerm> terms;
    for (int j = 0; j < count; ++j) terms.push_back({1.0f / count, xs[j].data()});
    std::vector<float> expect(n);
    cpu::mix(expect.data(), terms, 0.0f, nullptr, n);
    // out aliases the last term (read in the last pass of a multi-pass mix)
    cpu::mix(xs.back().data(), terms, 0.0f, nullptr, n);
    CHECK(xs.back() == expect);
  }
}

TEST_CASE("pure gossip with a doubly-stochastic W preserves the average of the nodes") {
  // Ring of 5 with Metropolis–Hastings weights 1/3: row i mixes i−1, i, i+1.
  const int nodes = 5;
  const std::size_t n = 777;
  std::vector<std::vector<float>> x(nodes), next(nodes, std::vector<float>(n));
  for (int i = 0; i < nodes; ++i) x[i] = randn(n, 10 + i);
  auto average = [&](const std::vector<std::vector<float>>& v) {
    std::vector<double> a(n, 0.0);
    for (const auto& xi : v)
      for (std::size_t k = 0; k < n; ++k) a[k] += xi[k] / nodes;
    return a;
  };
  const auto before = average(x);
  double spread_before = 0, spread_after = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < nodes; ++i) {
      const std::vector<MixTerm> terms{{1.0f / 3, x[(i + nodes - 1) % nodes].data()},
                                       {1.0f / 3, x[i].data()},
                                       {1.0f / 3, x[(i + 1) % nodes].data()}};
      cpu::mix(next[i].data(), terms, 0.0f, nullptr, n);
    }
    x.swap(next);
  }
  const auto after = average(x);
  for (std::size_t k = 0; k < n; ++k) {
    CHECK(after[k] == doctest::Approx(before[k]).epsilon(1e-5).scale(1));
    spread_after = std::max(spread_after, std::abs(double(x[0][k]) - after[k]));
    spread_before = std::max(spread_before, 1.0);
  }
  // ρ = (1 + 2cos(2π/5))/3 ≈ 0.539; after 20 rounds disagreement shrinks by ρ^20 ≈ 4e-6.
  CHECK(spread_after < 1e-3 * spread_before);
}

TEST_CASE("backend selection: cpu always + cuda a clear error without a build or a device") {
  auto cpu = make_backend(Device::kCpu, 2);
  REQUIRE(cpu.is_ok());
  CHECK((*cpu)->device() == Device::kCpu);
  CHECK((*cpu)->description().find("2 threads") != std::string::npos);
  auto autob = make_backend(Device::kAuto);
  REQUIRE(autob.is_ok());
  auto cuda = make_backend(Device::kCuda);
  if (!cuda_built()) {
    REQUIRE(!cuda.is_ok());
    CHECK(cuda.status().code() == StatusCode::kUnimplemented);
    CHECK((*autob)->device() == Device::kCpu);
  } else if (cuda_device_count() == 0) {
    REQUIRE(!cuda.is_ok());
    CHECK(cuda.status().code() == StatusCode::kUnavailable);
    CHECK(cuda.status().message().find("cuda") != std::string::npos);
    CHECK((*autob)->device() == Device::kCpu);
  } else {
    CHECK(cuda.is_ok());
    CHECK((*autob)->device() == Device::kCuda);
  }
  CHECK(*kDevices.parse("cuda") == Device::kCuda);
  auto bad = kDevices.parse("tpu");
  REQUIRE(!bad.is_ok());
  CHECK(bad.status().message().find("auto, cpu or cuda") != std::string::npos);
}

TEST_CASE("backend memory: alloc is zeroed + copies round-trip") {
  auto b = make_backend(Device::kCpu, 1);
  REQUIRE(b.is_ok());
  DeviceBuffer buf = (*b)->alloc(10);
  CHECK(buf.size() == 10);
  for (std::size_t k = 0; k < 10; ++k) CHECK(buf.data()[k] == 0.0f);
  std::vector<float> src = randn(10, 3), back(10);
  (*b)->copy_to_device(buf.data(), src.data(), 10);
  (*b)->synchronize();
  (*b)->copy_to_host(back.data(), buf.data(), 10);
  CHECK(back == src);
  DeviceBuffer moved = std::move(buf);
  CHECK(moved.size() == 10);
  CHECK(buf.data() == nullptr);
}

}  // namespace
}  // namespace gossip::sgd
