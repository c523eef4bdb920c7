// Optimizer: trajectories worked out by hand (in the comments) for plain SGD, heavy-ball, Nesterov
// and weight decay; the learning-rate schedules at chosen iterations; config validation.
#include "sgd/optimizer.h"

#include <doctest/doctest.h>

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
  opt.direction(*backend, x.data(), g.data(), v.data(), u.data());
  // g' = g + 0.1x = {0.6, 0.05, −0.6}; v = 0.5·v + g' = {1.1, 0.05, −1.1}; u = v.
  const float want[3] = {1.1f, 0.05f, -1.1f};
  for (int k = 0; k < 3; ++k) {
    CHECK(v[k] == doctest::Approx(want[k]).epsilon(1e-6));
    CHECK(u[k] == doctest::Approx(want[k]).epsilon(1e-6));
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

}  // namespace
}  // namespace gossip::sgd
