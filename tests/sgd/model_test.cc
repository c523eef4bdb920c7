// Models: gradients against central finite differences in double precision (the oracle), the
// float path against the double path, the flat layout, seeded initialisation, spec validation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/cpu/dense_net.h"
#include "sgd/model_spec.h"

namespace gossip::sgd {
namespace {

struct Fixture {
  ModelSpec spec;
  std::vector<double> params, x, targets;
  std::vector<std::int32_t> labels;
  int batch = 0;
};

Fixture make_fixture(ModelKind kind, std::vector<int> hidden, int classes, float l2) {
  Fixture f;
  f.spec.kind = kind;
  f.spec.input_dim = 7;
  f.spec.hidden = std::move(hidden);
  f.spec.num_classes = classes;
  f.spec.l2 = l2;
  REQUIRE(f.spec.validate().is_ok());
  f.batch = 5;
  Rng rng(42);
  f.params.resize(f.spec.num_params());
  // Random (not init_params) so biases and the output layer are non-zero and ReLUs are mixed.
  for (double& v : f.params) v = 0.5 * rng.normal();
  f.x.resize(static_cast<std::size_t>(f.spec.input_dim) * f.batch);
  for (double& v : f.x) v = rng.normal();
  for (int j = 0; j < f.batch; ++j) {
    f.targets.push_back(rng.normal());
    f.labels.push_back(classes ? static_cast<std::int32_t>(rng.uniform_int(classes)) : 0);
  }
  return f;
}

double loss_at(const Fixture& f, const std::vector<double>& p, std::vector<double>* grad) {
  cpu::Workspace<double> ws;
  std::vector<double> g(p.size());
  const bool reg = f.spec.kind == ModelKind::kLeastSquares;
  double loss =
      cpu::loss_and_grad<double>(f.spec, p.data(), f.x.data(), reg ? nullptr : f.labels.data(),
                                 reg ? f.targets.data() : nullptr, f.batch, g.data(), ws);
  if (grad) *grad = g;
  return loss;
}

// Central finite differences (step 1e-6) of f's loss at p, one coordinate at a time.
std::vector<double> central_differences(const Fixture& f, const std::vector<double>& at) {
  const double h = 1e-6;
  std::vector<double> fd(at.size());
  for (std::size_t k = 0; k < at.size(); ++k) {
    std::vector<double> p = at;
    p[k] += h;
    const double up = loss_at(f, p, nullptr);
    p[k] -= 2 * h;
    const double down = loss_at(f, p, nullptr);
    fd[k] = (up - down) / (2 * h);
  }
  return fd;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double max_err = 0;
  for (std::size_t k = 0; k < a.size(); ++k) max_err = std::max(max_err, std::abs(a[k] - b[k]));
  return max_err;
}

// max_k |g_k − fd_k| / max(1, ‖fd‖_∞): relative to the gradient's scale, per the 1e-6.
double gradient_check(const Fixture& f) {
  std::vector<double> g;
  loss_at(f, f.params, &g);
  const std::vector<double> fd = central_differences(f, f.params);
  double scale = 0;
  for (double v : fd) scale = std::max(scale, std::abs(v));
  return max_abs_difference(g, fd) / std::max(scale, 1e-12);
}

TEST_CASE("gradient check: every model against central finite differences (double)") {
  struct Case {
    const char* name;
    ModelKind kind;
    std::vector<int> hidden;
    int classes;
    float l2;
  };
  const Case cases[] = {
      {"least_squares", ModelKind::kLeastSquares, {}, 0, 0.0f},
      {"least_squares l2", ModelKind::kLeastSquares, {}, 0, 0.1f},
      {"logistic", ModelKind::kLogistic, {}, 2, 0.0f},
      {"logistic l2", ModelKind::kLogistic, {}, 2, 0.05f},
      {"softmax", ModelKind::kSoftmax, {}, 4, 0.0f},
      {"softmax l2", ModelKind::kSoftmax, {}, 4, 0.01f},
      {"mlp 7-6-10-3", ModelKind::kMlp, {6, 10}, 3, 0.0f},
      {"mlp 7-5-3 l2", ModelKind::kMlp, {5}, 3, 0.02f},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Fixture f = make_fixture(c.kind, c.hidden, c.classes, c.l2);
    const double err = gradient_check(f);
    CAPTURE(err);
    CHECK(err <= 1e-6);
  }
}

TEST_CASE("gradient check detects a wrong gradient (the check can fail)") {
  Fixture f = make_fixture(ModelKind::kSoftmax, {}, 3, 0.0f);
  // Loss with l2 but gradient computed without it: a deliberate mismatch of size l2·‖W‖.
  Fixture wrong = f;
  wrong.spec.l2 = 0.01f;
  std::vector<double> g;
  loss_at(f, f.params, &g);  // gradient without the penalty
  CHECK(max_abs_difference(g, central_differences(wrong, f.params)) > 1e-4);
}

TEST_CASE("closed forms: softmax loss at zero parameters is log C / least squares is mean r^2/2") {
  Fixture f = make_fixture(ModelKind::kSoftmax, {}, 4, 0.0f);
  std::vector<double> zero(f.params.size(), 0.0);
  CHECK(loss_at(f, zero, nullptr) == doctest::Approx(std::log(4.0)).epsilon(1e-12));
  Fixture ls = make_fixture(ModelKind::kLeastSquares, {}, 0, 0.0f);
  std::vector<double> z(ls.params.size(), 0.0);
  double want = 0;
  for (double t : ls.targets) want += 0.5 * t * t;
  CHECK(loss_at(ls, z, nullptr) == doctest::Approx(want / ls.batch).epsilon(1e-12));
}

TEST_CASE("float Model on the cpu backend matches the double reference") {
  for (ModelKind kind : {ModelKind::kLeastSquares, ModelKind::kLogistic, ModelKind::kMlp}) {
    Fixture f =
        make_fixture(kind, kind == ModelKind::kMlp ? std::vector<int>{8, 6} : std::vector<int>{},
                     kind == ModelKind::kLeastSquares ? 0
                     : kind == ModelKind::kLogistic   ? 2
                                                      : 5,
                     0.01f);
    std::vector<double> g_ref;
    const double loss_ref = loss_at(f, f.params, &g_ref);
    auto backend = make_backend(Device::kCpu, 1);
    REQUIRE(backend.is_ok());
    auto model = (*backend)->make_model(f.spec);
    REQUIRE(model.is_ok());
    Batch b;
    b.rows = f.batch;
    b.dim = f.spec.input_dim;
    b.features.assign(f.x.begin(), f.x.end());
    if (kind == ModelKind::kLeastSquares) {
      b.targets.assign(f.targets.begin(), f.targets.end());
    } else {
      b.labels = f.labels;
    }
    std::vector<float> p(f.params.begin(), f.params.end()), g(p.size());
    const double loss = (*model)->loss_and_grad(p.data(), b, g.data());
    CHECK(loss == doctest::Approx(loss_ref).epsilon(1e-5));
    for (std::size_t k = 0; k < g.size(); ++k)
      CHECK(g[k] == doctest::Approx(g_ref[k]).epsilon(1e-4).scale(1));
  }
}

TEST_CASE("the float gradient's bits do not depend on where params and grad lie in memory") {
  // Eigen vectorizes a reduction over the part of its destination that is 64-byte aligned and
  // sums that part in another order than the peeled rest; db = δ·1 computed that way gave the MLP
  // gradient bits that depended on the address of `grad` (found through gossip-sim, whose C-PSGD
  // run changed when only its heap layout did). Every model, params and grad at each of the 16
  // float offsets in a 64-byte line, against offset 0.
  struct Case {
    ModelKind kind;
    std::vector<int> hidden;
    int classes;
  };
  for (const Case& c : {Case{ModelKind::kLeastSquares, {}, 0}, Case{ModelKind::kLogistic, {}, 2},
                        Case{ModelKind::kSoftmax, {}, 40}, Case{ModelKind::kMlp, {48, 33}, 10}}) {
    CAPTURE(static_cast<int>(c.kind));
    ModelSpec spec;
    spec.kind = c.kind;
    spec.input_dim = 37;
    spec.hidden = c.hidden;
    spec.num_classes = c.classes;
    spec.l2 = 0.01f;
    REQUIRE(spec.validate().is_ok());
    Batch b;
    b.rows = 11;
    b.dim = spec.input_dim;
    Rng rng(7);
    for (int k = 0; k < b.rows * b.dim; ++k) b.features.push_back(static_cast<float>(rng.normal()));
    for (int j = 0; j < b.rows; ++j) {
      b.targets.push_back(static_cast<float>(rng.normal()));
      b.labels.push_back(c.classes ? static_cast<std::int32_t>(rng.uniform_int(c.classes)) : 0);
    }
    if (c.kind == ModelKind::kLeastSquares)
      b.labels.clear();
    else
      b.targets.clear();
    const std::size_t n = spec.num_params();
    std::vector<float> values(n);
    for (float& v : values) v = static_cast<float>(0.3 * rng.normal());
    auto backend = make_backend(Device::kCpu, 1);
    REQUIRE(backend.is_ok());
    auto model = (*backend)->make_model(spec);
    REQUIRE(model.is_ok());
    // One 64-byte-aligned block per buffer, with room for 15 floats of offset.
    std::vector<float> params_store(n + 32), grad_store(n + 32);
    const auto aligned = [](std::vector<float>& v) {
      const auto addr = reinterpret_cast<std::uintptr_t>(v.data());
      return v.data() + ((64 - addr % 64) % 64) / sizeof(float);
    };
    std::vector<float> g0;
    double loss0 = 0;
    for (int offset = 0; offset < 16; ++offset) {
      CAPTURE(offset);
      float* params = aligned(params_store) + offset;
      float* grad = aligned(grad_store) + (offset * 7) % 16;  // another offset than params'
      std::copy(values.begin(), values.end(), params);
      std::fill(grad, grad + n, 0.0f);
      const double loss = (*model)->loss_and_grad(params, b, grad);
      if (offset == 0) {
        g0.assign(grad, grad + n);
        loss0 = loss;
        continue;
      }
      CHECK(loss == loss0);
      CHECK(std::memcmp(grad, g0.data(), n * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("layout: offsets + sizes and the W(r + c) = r + c*out convention") {
  ModelSpec spec{ModelKind::kMlp, 784, {256, 128}, 10, 0.0f};
  REQUIRE(spec.validate().is_ok());
  CHECK(spec.num_params() == 784u * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  CHECK(spec.weight_offset(0) == 0);
  CHECK(spec.bias_offset(0) == 784u * 256);
  CHECK(spec.weight_offset(1) == 784u * 256 + 256);
  CHECK(spec.bias_offset(2) == spec.num_params() - 10);
  CHECK(spec.to_string() == "mlp 784-256-128-10");

  // One-layer softmax with W = e_r e_cᵀ placed at offset r + c·out must give logit r = x_c.
  ModelSpec sm{ModelKind::kSoftmax, 3, {}, 2, 0.0f};
  std::vector<double> p(sm.num_params(), 0.0);
  p[1 + 2 * 2] = 1.0;  // W(1, 2)
  double x[3] = {0, 0, 5.0};
  std::int32_t label = 0;
  std::vector<double> g(p.size());
  cpu::Workspace<double> ws;
  const double loss = cpu::loss_and_grad<double>(sm, p.data(), x, &label, nullptr, 1, g.data(), ws);
  CHECK(loss == doctest::Approx(std::log(1 + std::exp(5.0))).epsilon(1e-12));
}

TEST_CASE("init_params: same seed same x0 + He scale on hidden layers + zero biases") {
  ModelSpec spec{ModelKind::kMlp, 400, {300}, 10, 0.0f};
  auto a = init_params(spec, 7), b = init_params(spec, 7), c = init_params(spec, 8);
  CHECK(a == b);
  CHECK(a != c);
  double sq = 0;
  for (std::size_t k = 0; k < 400 * 300; ++k) sq += a[k] * a[k];
  const double var = sq / (400 * 300);
  CHECK(var == doctest::Approx(2.0 / 400).epsilon(0.02));  // N(0, 2/fan_in)
  for (std::size_t k = spec.bias_offset(0); k < spec.weight_offset(1); ++k) CHECK(a[k] == 0.0f);
  ModelSpec soft{ModelKind::kSoftmax, 5, {}, 3, 0.0f};
  for (float v : init_params(soft, 1)) CHECK(v == 0.0f);
}

TEST_CASE("spec validation names the problem") {
  ModelSpec s{ModelKind::kSoftmax, 10, {5}, 3, 0.0f};
  Status st = s.validate();
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("hidden") != std::string::npos);
  CHECK(!ModelSpec{ModelKind::kMlp, 10, {}, 3, 0.0f}.validate().is_ok());
  CHECK(!ModelSpec{ModelKind::kLogistic, 10, {}, 3, 0.0f}.validate().is_ok());
  CHECK(!ModelSpec{ModelKind::kSoftmax, 0, {}, 3, 0.0f}.validate().is_ok());
  CHECK(!kModelKinds.parse("resnet").is_ok());
  CHECK(*kModelKinds.parse("mlp") == ModelKind::kMlp);
}

}  // namespace
}  // namespace gossip::sgd
