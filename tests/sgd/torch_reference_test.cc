// An independent reference for every model: PyTorch autograd in float64
// (tests/sgd/torch_grad_reference.py under /usr/bin/python3) must give the same loss and gradient
// as the double-precision cpu path, from the flat parameter layout alone — which also pins the
// layout (column-major W, then b) against a second implementation. Skipped with a message where
// /usr/bin/python3 with torch is missing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "common/random.h"
#include "sgd/cpu/dense_net.h"
#include "sgd/model_spec.h"
#include "tests/support/files.h"
#include "tests/support/process.h"

namespace gossip::sgd {
namespace {

void write_f64(const std::filesystem::path& p, const std::vector<double>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 8));
  REQUIRE(f.good());
}

std::vector<double> read_f64(const std::filesystem::path& p, std::size_t n) {
  std::vector<double> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 8));
  REQUIRE(f.gcount() == static_cast<std::streamsize>(n * 8));
  return v;
}

// All 17 significant digits: the float l2 of the spec must reach Python unrounded.
std::string exact(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

bool have_torch() {
  return gossip::testing::run_shell("/usr/bin/python3 -c 'import torch, numpy'") == 0;
}

TEST_CASE("loss and gradient equal PyTorch autograd (float64) for every model") {
  if (!have_torch()) {
    MESSAGE("/usr/bin/python3 with torch and numpy not found; skipped");
    return;
  }
  const char* src = std::getenv("GOSSIP_SOURCE_DIR");
  REQUIRE_MESSAGE(src != nullptr, "GOSSIP_SOURCE_DIR is set by ctest");
  const std::string script = std::string(src) + "/tests/sgd/torch_grad_reference.py";
  const gossip::testing::TempDir tmp;
  const std::filesystem::path dir = tmp.path;

  const ModelSpec specs[] = {
      {ModelKind::kLeastSquares, 9, {}, 0, 0.05f},
      {ModelKind::kLogistic, 9, {}, 2, 0.0f},
      {ModelKind::kSoftmax, 9, {}, 5, 0.01f},
      {ModelKind::kMlp, 9, {12, 7}, 4, 0.02f},
  };
  for (const ModelSpec& spec : specs) {
    CAPTURE(spec.to_string());
    const int batch = 11;
    Rng rng(spec.num_params());
    std::vector<double> params(spec.num_params()), x(static_cast<std::size_t>(batch) * 9), y(batch);
    for (double& v : params) v = 0.4 * rng.normal();
    for (double& v : x) v = rng.normal();
    std::vector<std::int32_t> labels(batch);
    for (int j = 0; j < batch; ++j) {
      if (spec.kind == ModelKind::kLeastSquares) {
        y[j] = rng.normal();
      } else {
        labels[j] = static_cast<std::int32_t>(rng.uniform_int(std::max(2, spec.num_classes)));
        y[j] = labels[j];
      }
    }
    write_f64(dir / "params.f64", params);
    write_f64(dir / "x.f64", x);
    write_f64(dir / "y.f64", y);
    std::string sizes;
    for (int s : spec.layer_sizes()) {
      if (!sizes.empty()) sizes += ',';
      sizes += std::to_string(s);
    }
    const std::string cmd = "/usr/bin/python3 " + script + " " + dir.string() + " " +
                            std::string(kModelKinds.name(spec.kind)) + " " +
                            exact(static_cast<double>(spec.l2)) + " " + sizes;
    REQUIRE(gossip::testing::run_shell(cmd) == 0);
    const std::vector<double> ref_grad = read_f64(dir / "grad.f64", params.size());
    std::ifstream lf(dir / "loss.txt");
    double ref_loss = 0;
    lf >> ref_loss;

    cpu::Workspace<double> ws;
    std::vector<double> grad(params.size());
    const bool reg = spec.kind == ModelKind::kLeastSquares;
    const double loss =
        cpu::loss_and_grad<double>(spec, params.data(), x.data(), reg ? nullptr : labels.data(),
                                   reg ? y.data() : nullptr, batch, grad.data(), ws);
    CHECK(loss == doctest::Approx(ref_loss).epsilon(1e-9));
    double err = 0, scale = 1e-12;
    for (std::size_t k = 0; k < grad.size(); ++k) {
      err = std::max(err, std::abs(grad[k] - ref_grad[k]));
      scale = std::max(scale, std::abs(ref_grad[k]));
    }
    CAPTURE(err);
    CHECK(err <= 1e-9 * scale);
  }
}

}  // namespace
}  // namespace gossip::sgd
