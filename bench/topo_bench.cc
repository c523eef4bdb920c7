// topo_bench: spectral gap of the benchmark topologies, ours next to scipy's eigsh.
//
// For each case: build time, analysis time, method, rho, gap, relative error of the gap against
// the closed form (docs/design.md §1) where one exists, and the same matrix handed to
// bench/topo_reference.py (scipy.sparse.linalg.eigsh, /usr/bin/python3, single thread, capped at
// --reference-timeout seconds). Prints one table. Figures, not assertions.
//
//   build/bench/topo_bench                      # everything (scipy cases can take 180 s each)
//   build/bench/topo_bench --no-reference       # ours only
//   build/bench/topo_bench --only ring --reference-timeout 30
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numbers>
#include <optional>
#include <sstream>

#include "common/clock.h"
#include "topology/spectral.h"
#include "topology/topology.h"

namespace {

using namespace gossip;
using namespace gossip::topology;

struct Case {
  std::string label;
  GeneratorSpec spec;
  std::optional<double> closed_form_gap;
};

struct Reference {
  std::string status;  // "ok", "timeout", "error: ..."
  double rho = NAN, seconds = NAN;
};

double sin2(double x) { return std::sin(x) * std::sin(x); }

std::vector<Case> cases() {
  const double pi = std::numbers::pi;
  std::vector<Case> c;
  for (int n : {1000, 10000, 1000000})
    c.push_back({"ring n=" + std::to_string(n),
                 {.kind = GeneratorKind::kRing, .nodes = n},
                 4.0 / 3.0 * sin2(pi / n)});
  for (int s : {100, 1000})
    c.push_back({"torus " + std::to_string(s) + "x" + std::to_string(s),
                 {.kind = GeneratorKind::kTorus, .rows = s, .cols = s},
                 0.8 * sin2(pi / s)});
  for (int n : {10000, 100000})
    c.push_back({"random 4-regular n=" + std::to_string(n),
                 {.kind = GeneratorKind::kRandomRegular, .nodes = n, .degree = 4, .seed = 1},
                 std::nullopt});
  c.push_back(
      {"hypercube 2^16", {.kind = GeneratorKind::kHypercube, .nodes = 1 << 16}, 2.0 / 17.0});
  return c;
}

std::string json_value(const std::string& s, const std::string& key) {
  const auto p = s.find("\"" + key + "\": ");
  if (p == std::string::npos) return "";
  auto v = s.substr(p + key.size() + 4);
  return v.substr(0, v.find_first_of(",}"));
}

Reference run_reference(const Topology& t, const std::string& script, int timeout_s) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("topo_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto& w = t.mixing_matrix();
  std::vector<std::int32_t> is, js;
  std::vector<double> ws;
  for (int j = 0; j < w.outerSize(); ++j)
    for (SparseMatrix::InnerIterator it(w, j); it; ++it) {
      is.push_back(static_cast<std::int32_t>(it.row()));
      js.push_back(j);
      ws.push_back(it.value());
    }
  std::ofstream(dir / "n.txt") << t.num_nodes();
  std::ofstream(dir / "i.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(is.data()), is.size() * sizeof(std::int32_t));
  std::ofstream(dir / "j.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(js.data()), js.size() * sizeof(std::int32_t));
  std::ofstream(dir / "w.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ws.data()), ws.size() * sizeof(double));
  // Same thread count as ours (one); OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset for this command
  // only (they are tuned for other programs on this machine and crash or slow numpy here).
  const std::string cmd =
      "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 "
      "OPENBLAS_NUM_THREADS=1 timeout " +
      std::to_string(timeout_s) + " /usr/bin/python3 " + script + " " + dir.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  std::size_t k;
  while (p && (k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  const int status = p ? pclose(p) : -1;
  fs::remove_all(dir);
  Reference r;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 124) {
    r.status = "timeout";
    r.seconds = timeout_s;
    return r;
  }
  if (json_value(out, "status") != "\"ok\"") {
    r.status = "error";
    auto e = json_value(out, "error");
    if (!e.empty())
      r.status += ": " + e;
    else if (!out.empty())
      r.status += ": " + out.substr(0, 60);
    return r;
  }
  r.status = "ok";
  r.rho = std::stod(json_value(out, "rho"));
  r.seconds = std::stod(json_value(out, "seconds"));
  return r;
}

std::string sci(double v, int p = 3) {
  if (std::isnan(v)) return "-";
  std::ostringstream s;
  s << std::scientific << std::setprecision(p) << v;
  return s.str();
}

std::string ratio(double r) {
  std::ostringstream s;
  s << std::setprecision(r < 10 ? 2 : 0) << std::fixed << r << "x";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"topo_bench: spectral gap of the benchmark topologies, ours vs scipy eigsh"};
  bool no_reference = false;
  int timeout_s = 180;
  std::string only;
  std::string script = GOSSIP_TOPO_REFERENCE_SCRIPT;
  app.add_flag("--no-reference", no_reference, "skip scipy");
  app.add_option("--reference-timeout", timeout_s, "seconds per scipy case")->capture_default_str();
  app.add_option("--only", only, "run cases whose label contains this text");
  app.add_option("--reference-script", script, "path of topo_reference.py")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::cout
      << "| case | build s | ours s | method | rho (ours) | gap (ours) | rel. err vs closed form "
         "| scipy s | rho (scipy) | speed-up | speed-up incl. build |\n"
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& c : cases()) {
    if (!only.empty() && c.label.find(only) == std::string::npos) continue;
    Stopwatch build;
    auto t = Topology::generate(c.spec, WeightScheme::kMetropolisHastings);
    if (!t.is_ok()) {
      std::cerr << c.label << ": " << t.status().to_string() << "\n";
      return 1;
    }
    const double build_s = build.elapsed_seconds();
    Stopwatch watch;
    auto r = analyze(*t);
    const double ours_s = watch.elapsed_seconds();
    if (!r.is_ok()) {
      std::cerr << c.label << ": " << r.status().to_string() << "\n";
      return 1;
    }
    const std::string err = c.closed_form_gap
                                ? sci(std::abs(r->gap - *c.closed_form_gap) / *c.closed_form_gap, 1)
                                : "(no closed form)";
    Reference ref;
    if (!no_reference) ref = run_reference(*t, script, timeout_s);
    // speed-up: scipy's eigsh time (on the prebuilt matrix) over our analysis time; "incl. build"
    // charges ours with building the topology (graph + weights) too, scipy with nothing extra.
    std::string scipy_s = "-", scipy_rho = "-", speedup = "-", speedup_build = "-";
    if (!no_reference) {
      if (ref.status == "ok") {
        scipy_s = sci(ref.seconds, 2);
        std::ostringstream s;
        s << std::setprecision(15) << ref.rho;
        scipy_rho = s.str();
        speedup = ratio(ref.seconds / ours_s);
        speedup_build = ratio(ref.seconds / (ours_s + build_s));
      } else if (ref.status == "timeout") {
        scipy_s = "> " + std::to_string(timeout_s);
        scipy_rho = "(timeout)";
        speedup = "> " + ratio(timeout_s / ours_s);
        speedup_build = "> " + ratio(timeout_s / (ours_s + build_s));
      } else {
        scipy_rho = ref.status;
      }
    }
    std::ostringstream rho;
    rho << std::setprecision(15) << r->rho;
    std::cout << "| " << c.label << " | " << sci(build_s, 2) << " | " << sci(ours_s, 2) << " | "
              << spectral_method_name(r->method) << " | " << rho.str() << " | " << sci(r->gap, 6)
              << " | " << err << " | " << scipy_s << " | " << scipy_rho << " | " << speedup << " | "
              << speedup_build << " |\n"
              << std::flush;
  }
  return 0;
}
