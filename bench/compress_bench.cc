// compress_bench: the communication round's cpu arithmetic in GB/s of float32 input (4 bytes per
// element of the vector being sent or updated, per second), beside memcpy of the same vector in
// the same run, at every instruction-set level this CPU has (or --kernels):
//
//   compress / decompress / decompress_add for none, bf16 and int8 (sgd/compress.h)
//   compress_with_feedback (error feedback), choco_encode (CHOCO-SGD), ring_reduce_hop
//   outer_step (Nesterov), pseudo_gradient (sgd/outer_optimizer.h)
//   Backend::adamw_direction (the inner optimizer, per step)
//
// One thread (these run on a node's compute thread). Wall-clock figures on a shared machine are
// noisy: each is the best of a few timed windows.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/isa.h"
#include "common/random.h"
#include "sgd/choco.h"
#include "sgd/compress.h"
#include "sgd/cpu/cpu_backend.h"
#include "sgd/optimizer.h"
#include "sgd/outer_optimizer.h"
#include "sgd/ring_allreduce.h"

namespace gossip::sgd {
namespace {

// Calls per second of fn, the best of `windows` windows over about `seconds`.
template <typename F>
double best_rate(F&& fn, double seconds, int windows = 3) {
  fn();  // warm-up: page faults, caches
  double best = 0;
  for (int w = 0; w < windows; ++w) {
    Stopwatch watch;
    std::int64_t calls = 0;
    while (watch.elapsed_seconds() < seconds / windows || calls == 0) {
      fn();
      ++calls;
    }
    best = std::max(best, calls / watch.elapsed_seconds());
  }
  return best;
}

void print_row(const char* what, double calls_per_s, std::size_t n, double memcpy_gbs) {
  const double gbs = calls_per_s * 4.0 * static_cast<double>(n) / 1e9;
  std::printf("  %-34s %8.2f GB/s  %5.2fx memcpy\n", what, gbs, gbs / memcpy_gbs);
}

void bench_level(Isa isa, std::size_t n, double seconds) {
  if (Status s = set_active_isa(isa); !s.is_ok()) {
    std::printf("%s\n", s.to_string().c_str());
    return;
  }
  std::printf("\n== %s kernels, %zu floats (%.0f MiB), 1 thread\n",
              std::string(isa_name(isa)).c_str(), n, 4.0 * static_cast<double>(n) / (1 << 20));
  Rng rng(1);
  std::vector<float> x(n), y(n), z(n), state(n, 0.0f);
  for (std::size_t k = 0; k < n; ++k) {
    x[k] = static_cast<float>(rng.normal());
    y[k] = static_cast<float>(rng.normal());
  }
  const double copy = best_rate([&] { std::memcpy(z.data(), x.data(), 4 * n); }, seconds);
  const double memcpy_gbs = copy * 4.0 * static_cast<double>(n) / 1e9;
  std::printf("  %-34s %8.2f GB/s\n", "memcpy", memcpy_gbs);

  for (CompressionKind kind :
       {CompressionKind::kNone, CompressionKind::kBf16, CompressionKind::kInt8}) {
    const CompressionSpec spec{kind, 256};
    const std::string name(kCompressionKinds.name(kind));
    std::vector<std::byte> bytes(compressed_bytes(spec, n)), out(bytes.size());
    const auto row = [&](const char* op, auto&& fn) {
      print_row((name + " " + op).c_str(), best_rate(fn, seconds), n, memcpy_gbs);
    };
    row("compress", [&] { compress(spec, x, bytes); });
    row("decompress", [&] { decompress(spec, bytes, z); });
    row("decompress_add", [&] { decompress_add(spec, bytes, z); });
    std::fill(state.begin(), state.end(), 0.0f);
    row("compress_with_feedback", [&] { compress_with_feedback(spec, x, state, bytes); });
    std::fill(state.begin(), state.end(), 0.0f);
    row("choco_encode", [&] { choco_encode(spec, x, state, bytes); });
    compress(spec, y, bytes);
    row("ring_reduce_hop", [&] { ring_reduce_hop(spec, bytes, x, z, out); });
  }

  const OuterConfig nesterov{OuterKind::kNesterov, 0.7, 0.9};
  std::fill(state.begin(), state.end(), 0.0f);
  print_row("outer_step nesterov", best_rate([&] { outer_step(nesterov, z, x, state); }, seconds),
            n, memcpy_gbs);
  print_row("pseudo_gradient", best_rate([&] { pseudo_gradient(z, x, y); }, seconds), n,
            memcpy_gbs);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::kAdamW;
  const AdamWCoefficients c = adamw_coefficients(oc, 10);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  print_row(
      "adamw_direction",
      best_rate(
          [&] { cpu::adamw_direction(z.data(), m.data(), v.data(), x.data(), y.data(), n, c); },
          seconds),
      n, memcpy_gbs);
}

}  // namespace
}  // namespace gossip::sgd

int main(int argc, char** argv) {
  using namespace gossip;
  CLI::App app{"gossip_sgd compression, outer optimizer and AdamW throughput vs memcpy"};
  std::size_t n = std::size_t{1} << 24;
  double seconds = 1.0;
  std::string levels = "all";
  app.add_option("--floats", n, "vector length")->capture_default_str();
  app.add_option("--seconds", seconds, "time per measurement")->capture_default_str();
  app.add_option("--kernels", levels, "all, avx512, avx2 or portable")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (Status s = init_isa(); !s.is_ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 2;
  }
  std::printf("compress_bench: %s\n", isa_description().c_str());
  int measured = 0;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kPortable}) {
    if (!isa_supported(isa) || (levels != "all" && levels != isa_name(isa))) continue;
    sgd::bench_level(isa, n, seconds);
    ++measured;
  }
  if (measured == 0) {
    std::fprintf(stderr, "error: --kernels %s: not a level this CPU has\n", levels.c_str());
    return 2;
  }
  return 0;
}
