// Optimizer: trajectories worked out by hand (in the comments) for plain SGD, heavy-ball, Nesterov
// and weight decay; AdamW on a constant gradient against its closed form (m̂ = g, v̂ = g², so
// u = g/(|g| + ε) + λx at every step) and its stated operations bit for bit; the learning-rate
// schedules at chosen iterations; config validation. (AdamW against torch.optim.AdamW:
// torch_optim_test.cc.)
#include "sgd/optimizer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "sgd/backend.h"

namespace gossip::sgd {
namespace {

std::unique_ptr<Backend> cpu_backend() {
  auto b = make_backend(Device::kCpu, 1);
  REQUIRE(b.is_ok());
  return std::move(b).value();
}

// Runs `steps` steps on f(x) = x²/2 (gradient g = x) from x0, one coordinate.
std::vector<float> run(const OptimizerConfig& cfg, float x0, int steps) {
  auto backend = cpu_backend();
  Optimizer opt(cfg, 1);
  float x = x0, g = 0, u = 0;
  std::vector<float> state(opt.state_size(), 0.0f);
  std::vector<float> traj{x};
  for (int t = 0; t < steps; ++t) {
    g = x;
    opt.step(*backend, t, &x, &g, state.empty() ? nullptr : state.data(), &u);
    traj.push_back(x);
  }
  return traj;
}

// run() from x0 for as many steps as `expected` holds: x_1, x_2, ... equal `expected` (relative
// 1e-6; the hand computations are in double, the optimizer in float).
void check_trajectory(const OptimizerConfig& cfg, float x0, const std::vector<double>& expected) {
  const std::vector<float> traj = run(cfg, x0, static_cast<int>(expected.size()));
  for (std::size_t t = 0; t < expected.size(); ++t) {
    CAPTURE(t + 1);
    CHECK(traj[t + 1] == doctest::Approx(expected[t]).epsilon(1e-6));
  }
}

TEST_CASE("plain SGD on x^2/2: x_{t+1} = (1 - lr) x_t") {
  OptimizerConfig cfg;
  cfg.schedule.lr = 0.5;
  // 1 -> 0.5 -> 0.25 -> 0.125
  auto traj = run(cfg, 1.0f, 3);
  CHECK(traj == std::vector<float>{1.0f, 0.5f, 0.25f, 0.125f});
}

TEST_CASE("heavy-ball momentum trajectory") {
  OptimizerConfig cfg;
  cfg.schedule.lr = 0.1;
  cfg.momentum = 0.9;
  // g0 = 1,     v1 = 1,              x1 = 1 − 0.1·1 = 0.9
  // g1 = 0.9,   v2 = 0.9·1 + 0.9 = 1.8,    x2 = 0.9 − 0.18 = 0.72
  // g2 = 0.72,  v3 = 0.9·1.8 + 0.72 = 2.34, x3 = 0.72 − 0.234 = 0.486
  check_trajectory(cfg, 1.0f, {0.9, 0.72, 0.486});
}

TEST_CASE("Nesterov momentum trajectory") {
  OptimizerConfig cfg;
  cfg.schedule.lr = 0.1;
  cfg.momentum = 0.9;
  cfg.nesterov = true;
  // g0 = 1,    v1 = 1,    u = 1 + 0.9·1 = 1.9,       x1 = 1 − 0.19 = 0.81
  // g1 = 0.81, v2 = 0.9 + 0.81 = 1.71, u = 0.81 + 0.9·1.71 = 2.349, x2 = 0.81 − 0.2349 = 0.5751
  check_trajectory(cfg, 1.0f, {0.81, 0.5751});
}

TEST_CASE("weight decay adds lambda x to the gradient") {
  OptimizerConfig cfg;
  cfg.schedule.lr = 0.1;
  cfg.weight_decay = 0.5;
  // g' = x + 0.5x = 1.5x: x1 = 2 − 0.1·3 = 1.7; x2 = 1.7·0.85 = 1.445
  check_trajectory(cfg, 2.0f, {1.7, 1.445});
}

TEST_CASE("direction() with momentum over a vector matches the recurrence element-wise") {
  auto backend = cpu_backend();
  OptimizerConfig cfg;
  cfg.momentum = 0.5;
  cfg.weight_decay = 0.1;
  Optimizer opt(cfg, 3);
  std::vector<float> x{1, -2, 4}, g{0.5f, 0.25f, -1}, v{1, 0, -1}, u(3);
  opt.direction(*backend, 0, x.data(), g.data(), v.data(), u.data());
  // g' = g + 0.1x = {0.6, 0.05, −0.6}; v = 0.5·v + g' = {1.1, 0.05, −1.1}; u = v.
  const float want[3] = {1.1f, 0.05f, -1.1f};
  for (int k = 0; k < 3; ++k) {
    CHECK(v[k] == doctest::Approx(want[k]).epsilon(1e-6));
    CHECK(u[k] == doctest::Approx(want[k]).epsilon(1e-6));
  }
}

TEST_CASE("AdamW on a constant gradient: u = g/(|g| + eps) + lambda x at every step") {
  auto backend = cpu_backend();
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdamW;
  cfg.schedule.lr = 0.01;
  cfg.eps = 1e-8;
  // g ≈ ε: the bias-corrected ratio is g/(g + ε) = 1/2; g ≫ ε: ±1.
  const std::vector<float> g{1e-8f, 1e-3f, -1.0f, 250.0f};
  const std::size_t n = g.size();
  Optimizer opt(cfg, n);
  REQUIRE(opt.state_size() == 2 * n);
  std::vector<float> x(n, 1.0f), state(opt.state_size(), 0.0f), u(n);
  for (std::int64_t t = 0; t < 40; ++t) {
    CAPTURE(t);
    opt.direction(*backend, t, x.data(), g.data(), state.data(), u.data());
    for (std::size_t k = 0; k < n; ++k) {
      const double want = g[k] / (std::fabs(double{g[k]}) + cfg.eps);
      CHECK(u[k] == doctest::Approx(want).epsilon(1e-6));
    }
  }
  // With decoupled weight decay λ and the constant c = g/(|g| + ε):
  // x_{t+1} = (1 − γλ)·x_t − γc, so x_T = (1 − γλ)^T (x_0 + c/λ) − c/λ.
  cfg.weight_decay = 0.5;
  Optimizer decayed(cfg, n);
  std::fill(x.begin(), x.end(), 1.0f);
  std::fill(state.begin(), state.end(), 0.0f);
  const int steps = 60;
  for (int t = 0; t < steps; ++t)
    decayed.step(*backend, t, x.data(), g.data(), state.data(), u.data());
  for (std::size_t k = 0; k < n; ++k) {
    const double c = g[k] / (std::fabs(double{g[k]}) + cfg.eps), lam = 0.5, gamma = 0.01;
    const double want = std::pow(1 - gamma * lam, steps) * (1 + c / lam) - c / lam;
    CHECK(x[k] == doctest::Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("AdamW: the direction is the stated operations, with bias correction for t + 1") {
  auto backend = cpu_backend();
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdamW;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.99;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  const std::size_t n = 5;
  Optimizer opt(cfg, n);
  std::vector<float> x{1, -2, 0.5f, 3, 0}, g{0.3f, -0.01f, 2, 0, 1e-7f};
  std::vector<float> m{0.1f, 0, -0.2f, 0.05f, 0}, v{0.01f, 1e-4f, 0.5f, 0, 0};
  std::vector<float> state = m;
  state.insert(state.end(), v.begin(), v.end());
  std::vector<float> u(n);
  const std::int64_t iteration = 6;  // step count t = 7
  opt.direction(*backend, iteration, x.data(), g.data(), state.data(), u.data());
  const float b1 = 0.8f, b2 = 0.99f, c1 = static_cast<float>(1 - 0.8),
              c2 = static_cast<float>(1 - 0.99);
  const auto a1 = static_cast<float>(1 / (1 - std::pow(0.8, 7)));
  const auto a2 = static_cast<float>(1 / std::sqrt(1 - std::pow(0.99, 7)));
  for (std::size_t k = 0; k < n; ++k) {
    CAPTURE(k);
    const float mk = std::fma(b1, m[k], c1 * g[k]);
    const float vk = std::fma(b2, v[k], (c2 * g[k]) * g[k]);
    const float den = std::fma(std::sqrt(vk), a2, 1e-6f);
    CHECK(state[k] == mk);
    CHECK(state[n + k] == vk);
    CHECK(u[k] == std::fma(0.1f, x[k], (mk * a1) / den));
  }
}

TEST_CASE("schedules") {
  LrSchedule s;
  s.lr = 0.4;
  CHECK(s.at(0) == 0.4);
  CHECK(s.at(123456) == 0.4);

  s.kind = ScheduleKind::kStep;
  s.step_size = 10;
  s.step_factor = 0.5;
  CHECK(s.at(9) == doctest::Approx(0.4));
  CHECK(s.at(10) == doctest::Approx(0.2));
  CHECK(s.at(25) == doctest::Approx(0.1));

  s.kind = ScheduleKind::kCosine;
  s.total_steps = 100;
  s.min_lr = 0.0;
  CHECK(s.at(0) == doctest::Approx(0.4));
  CHECK(s.at(50) == doctest::Approx(0.2));
  CHECK(s.at(25) == doctest::Approx(0.2 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(s.at(100) == doctest::Approx(0.0));
  CHECK(s.at(1000) == doctest::Approx(0.0));

  s.kind = ScheduleKind::kConstant;
  s.warmup_steps = 4;
  CHECK(s.at(0) == doctest::Approx(0.1));
  CHECK(s.at(1) == doctest::Approx(0.2));
  CHECK(s.at(3) == doctest::Approx(0.4));
  CHECK(s.at(4) == doctest::Approx(0.4));
}

TEST_CASE("invalid optimizer configs are rejected with the field named") {
  OptimizerConfig cfg;
  cfg.momentum = 1.0;
  CHECK(cfg.validate().message().find("momentum") != std::string::npos);
  cfg.momentum = 0;
  cfg.nesterov = true;
  CHECK(cfg.validate().message().find("nesterov") != std::string::npos);
  cfg.nesterov = false;
  cfg.schedule.lr = -1;
  CHECK(cfg.validate().message().find("lr") != std::string::npos);
  cfg.schedule.lr = std::nan("");
  CHECK(cfg.validate().message().find("lr") != std::string::npos);
  cfg.schedule.lr = 0;  // pure gossip: accepted, and every step is zero
  CHECK(cfg.validate().is_ok());
  CHECK(cfg.schedule.at(0) == 0.0);
  CHECK(cfg.schedule.at(1000) == 0.0);
  cfg.schedule.lr = 0.1;
  cfg.schedule.kind = ScheduleKind::kCosine;
  CHECK(!cfg.validate().is_ok());  // total_steps missing
  CHECK(!kScheduleKinds.parse("exp").is_ok());
}

TEST_CASE("invalid AdamW configs are rejected with the field named") {
  OptimizerConfig cfg;
  cfg.kind = OptimizerKind::kAdamW;
  CHECK(cfg.validate().is_ok());
  CHECK(Optimizer(cfg, 7).state_size() == 14);
  for (double b : {1.0, -0.1, std::nan(""), 1.5}) {
    CAPTURE(b);
    cfg.beta1 = b;
    CHECK(cfg.validate().message().find("beta1") != std::string::npos);
    cfg.beta1 = 0.9;
    cfg.beta2 = b;
    CHECK(cfg.validate().message().find("beta2") != std::string::npos);
    cfg.beta2 = 0.999;
  }
  cfg.beta1 = 0;  // no first moment (RMSprop-like): allowed
  CHECK(cfg.validate().is_ok());
  for (double eps : {0.0, -1e-8, std::nan(""), HUGE_VAL, 1e-60}) {
    CAPTURE(eps);
    cfg.eps = eps;
    CHECK(cfg.validate().message().find("eps") != std::string::npos);
  }
  cfg.eps = 1e-8;
  cfg.momentum = 0.9;
  CHECK(cfg.validate().message().find("momentum") != std::string::npos);
  cfg.momentum = 0;
  cfg.weight_decay = -1;
  CHECK(cfg.validate().message().find("weight_decay") != std::string::npos);
  CHECK(kOptimizerKinds.parse("adamw").value() == OptimizerKind::kAdamW);
  CHECK(kOptimizerKinds.parse("adam").status().message() ==
        "optimizer 'adam': expected sgd or adamw");
}

}  // namespace
}  // namespace gossip::sgd
