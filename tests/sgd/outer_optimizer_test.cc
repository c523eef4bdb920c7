// The outer optimizer (sgd/outer_optimizer.h): on a constant pseudo-gradient the anchor follows
// closed forms (SGD: linear; heavy-ball and Nesterov: geometric sums); on random pseudo-gradients
// it follows the same recursion carried out in double; `none` is a − d exactly; the operations
// are the stated fmas bit for bit; configs are refused naming outer.lr / outer.momentum.
#include "sgd/outer_optimizer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "common/random.h"

namespace gossip::sgd {
namespace {

OuterConfig config(OuterKind kind, double lr, double momentum) {
  OuterConfig c;
  c.kind = kind;
  c.lr = lr;
  c.momentum = momentum;
  REQUIRE(c.validate().is_ok());
  return c;
}

// T outer steps on the constant pseudo-gradient d from a0: the anchor (one coordinate).
float run_constant(const OuterConfig& c, float a0, float d, int rounds) {
  std::vector<float> a{a0}, m(c.state_size(1), 0.0f);
  const std::vector<float> dv{d};
  for (int t = 0; t < rounds; ++t) outer_step(c, a, dv, m);
  return a[0];
}

TEST_CASE("constant pseudo-gradient: the anchor follows the closed forms") {
  const double lr = 0.7, beta = 0.9, a0 = 2.0, d = 0.01;
  for (int T : {1, 2, 10, 50}) {
    CAPTURE(T);
    // sgd without momentum: a_T = a0 − T·lr·d.
    CHECK(run_constant(config(OuterKind::kSgd, lr, 0), a0, d, T) ==
          doctest::Approx(a0 - T * lr * d).epsilon(1e-5));
    // heavy-ball: m_t = d(1 − β^t)/(1 − β); a_T = a0 − lr·Σ_t m_t.
    const double geometric = (T - beta * (1 - std::pow(beta, T)) / (1 - beta)) / (1 - beta);
    CHECK(run_constant(config(OuterKind::kSgd, lr, beta), a0, d, T) ==
          doctest::Approx(a0 - lr * d * geometric).epsilon(1e-5));
    // Nesterov: the step is d + β·m_t, so a_T = a0 − lr·d·(T + β·Σ_t (1 − β^t)/(1 − β)).
    CHECK(run_constant(config(OuterKind::kNesterov, lr, beta), a0, d, T) ==
          doctest::Approx(a0 - lr * d * (T + beta * geometric)).epsilon(1e-5));
  }
}

TEST_CASE("random pseudo-gradients: the float recursion stays within rounding of double's") {
  const std::size_t n = 257;
  for (const OuterKind kind : {OuterKind::kSgd, OuterKind::kNesterov}) {
    CAPTURE(kOuterKinds.name(kind));
    const OuterConfig c = config(kind, 0.7, 0.9);
    Rng rng(5);
    std::vector<float> a(n), m(n, 0.0f), d(n);
    std::vector<double> a64(n), m64(n, 0.0);
    for (std::size_t k = 0; k < n; ++k) a64[k] = a[k] = static_cast<float>(rng.normal());
    for (int t = 0; t < 30; ++t) {
      for (std::size_t k = 0; k < n; ++k) d[k] = static_cast<float>(0.05 * rng.normal());
      outer_step(c, a, d, m);
      for (std::size_t k = 0; k < n; ++k) {
        m64[k] = 0.9 * m64[k] + d[k];
        const double step = kind == OuterKind::kNesterov ? d[k] + 0.9 * m64[k] : m64[k];
        a64[k] -= 0.7 * step;
      }
    }
    for (std::size_t k = 0; k < n; ++k) {
      CHECK(a[k] == doctest::Approx(a64[k]).epsilon(1e-5).scale(1.0));
      CHECK(m[k] == doctest::Approx(m64[k]).epsilon(1e-5).scale(1.0));
    }
  }
}

TEST_CASE("the stated operations bit for bit, none is a − d, pseudo_gradient is a − z") {
  Rng rng(6);
  const std::size_t n = 100;
  std::vector<float> a(n), z(n), d(n), m(n);
  for (std::size_t k = 0; k < n; ++k) {
    a[k] = static_cast<float>(rng.normal());
    z[k] = static_cast<float>(rng.normal());
    m[k] = static_cast<float>(rng.normal());
  }
  pseudo_gradient(d, a, z);
  for (std::size_t k = 0; k < n; ++k) CHECK(d[k] == a[k] - z[k]);

  std::vector<float> a_none = a;
  outer_step(OuterConfig{}, a_none, d, {});
  for (std::size_t k = 0; k < n; ++k) CHECK(a_none[k] == a[k] - d[k]);

  const OuterConfig nesterov = config(OuterKind::kNesterov, 0.7, 0.9);
  std::vector<float> a_n = a, m_n = m;
  outer_step(nesterov, a_n, d, m_n);
  const float lr = 0.7f, beta = 0.9f;
  for (std::size_t k = 0; k < n; ++k) {
    const float mk = std::fma(beta, m[k], d[k]);
    CHECK(m_n[k] == mk);
    CHECK(a_n[k] == std::fma(-lr, std::fma(beta, mk, d[k]), a[k]));
  }
}

TEST_CASE("outer configs: state sizes, names, and errors that name the field") {
  CHECK(config(OuterKind::kSgd, 0.7, 0).state_size(10) == 0);
  CHECK(config(OuterKind::kSgd, 0.7, 0.5).state_size(10) == 10);
  CHECK(config(OuterKind::kNesterov, 0.7, 0.9).state_size(10) == 10);
  CHECK(OuterConfig{}.state_size(10) == 0);
  CHECK(kOuterKinds.parse("nesterov").value() == OuterKind::kNesterov);
  CHECK(kOuterKinds.parse("adam").status().message() ==
        "outer optimizer 'adam': expected none, sgd or nesterov");

  OuterConfig c;
  c.kind = OuterKind::kNesterov;
  for (double lr : {0.0, -0.7, std::nan(""), HUGE_VAL}) {
    CAPTURE(lr);
    c.lr = lr;
    CHECK(c.validate().message().find("outer.lr") != std::string::npos);
  }
  c.lr = 0.7;
  for (double momentum : {1.0, 1.5, -0.1, std::nan(""), 0.0}) {
    CAPTURE(momentum);
    c.momentum = momentum;
    CHECK(c.validate().message().find("outer.momentum") != std::string::npos);
  }
  c.kind = OuterKind::kSgd;
  c.momentum = 0;
  CHECK(c.validate().is_ok());  // plain outer SGD
  c.kind = OuterKind::kNone;
  c.lr = std::nan("");
  CHECK(c.validate().is_ok());  // none ignores lr and momentum
  c.kind = static_cast<OuterKind>(9);
  CHECK(c.validate().message().find("outer.kind") != std::string::npos);
}

}  // namespace
}  // namespace gossip::sgd
