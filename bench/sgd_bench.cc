// sgd_bench: figures for the local SGD engine, each next to its reference in the same run.
//
//   1. One training step (loss_and_grad + momentum SGD update) of the MLP 784-256-128-10 at batch
//      128 on the cpu backend, samples/s, at every instruction-set level this CPU has (--kernels),
//      beside PyTorch on the CPU (bench/sgd_reference.py under /usr/bin/python3) with the same
//      thread count.
//   2. The fused mixing kernel out = Σ_j w_j x_j − γ u in GB/s beside memcpy GB/s.
//   3. Where a CUDA device exists: the wide MLP 784-4096-4096-10 at batch 1024, samples/s, and the
//      share of step time spent outside cuBLAS GEMMs; mixing GB/s on the device.
//
// Wall-clock figures on a shared machine are noisy: each is the best of a few timed windows.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/isa.h"
#include "common/random.h"
#include "sgd/backend.h"
#include "sgd/cpu/cpu_backend.h"
#include "sgd/optimizer.h"
#if GOSSIP_SGD_CUDA
#include "sgd/cuda/cuda_backend.h"
#endif

namespace gossip::sgd {
namespace {

// Runs fn repeatedly for about `seconds` in `windows` windows; returns the best calls per second.
template <typename F>
double best_rate(F&& fn, double seconds, int windows = 3) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up: workspaces, caches, thread pools
  double best = 0;
  for (int w = 0; w < windows; ++w) {
    Stopwatch watch;
    std::int64_t calls = 0;
    while (watch.elapsed_seconds() < seconds / windows) {
      fn();
      ++calls;
    }
    best = std::max(best, calls / watch.elapsed_seconds());
  }
  return best;
}

// `rows` examples of normal features and uniform labels (seed 2).
Batch random_batch(const ModelSpec& spec, int rows) {
  Batch batch;
  batch.rows = rows;
  batch.dim = spec.input_dim;
  Rng rng(2);
  batch.features.resize(static_cast<std::size_t>(rows) * spec.input_dim);
  for (float& f : batch.features) f = static_cast<float>(rng.normal());
  for (int j = 0; j < rows; ++j) batch.labels.push_back(rng.uniform_int(spec.num_classes));
  return batch;
}

double cpu_step_samples_per_s(const ModelSpec& spec, int batch_size, int threads, double seconds) {
  auto backend = make_backend(Device::kCpu, threads);
  auto model = (*backend)->make_model(spec);
  std::vector<float> x = init_params(spec, 1), g(x.size()), u(x.size());
  OptimizerConfig oc;
  oc.schedule.lr = 0.01;
  oc.momentum = 0.9;
  Optimizer opt(oc, x.size());
  std::vector<float> v(opt.state_size());
  const Batch batch = random_batch(spec, batch_size);
  std::int64_t t = 0;
  const double steps_per_s = best_rate(
      [&] {
        (*model)->loss_and_grad(x.data(), batch, g.data());
        opt.step(**backend, t++, x.data(), g.data(), v.data(), u.data());
      },
      seconds);
  return steps_per_s * batch_size;
}

// PyTorch's figure, or a negative number when the reference could not run.
// `heap_tuned`: run PyTorch with the glibc heap settings the cpu backend applies to itself
// (mallopt in cpu_backend.cc), through GLIBC_TUNABLES, so that the comparison isolates the compute.
// `python`: the interpreter that holds PyTorch; `device`: "cpu" or "cuda".
double torch_samples_per_s(const std::string& script, int threads, const ModelSpec& spec,
                           int batch_size, double seconds, bool heap_tuned,
                           const std::string& python = "/usr/bin/python3",
                           const std::string& device = "cpu",
                           const std::string& blas_coretype = "") {
  std::string sizes;
  for (int s : spec.layer_sizes()) {
    if (!sizes.empty()) sizes += ',';
    sizes += std::to_string(s);
  }
  // Debian's OpenBLAS tuning variables are meant for our environment, not torch's: unset for the
  // reference command alone. Same thread count on both sides: torch.set_num_threads() does not
  // reach the OpenBLAS that Debian's torch calls through the BLAS alternative (BLAS_INFO=generic),
  // which otherwise starts one thread per core — measured: 2 threads in the "1 thread" run.
  const std::string tunables = heap_tuned ? "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:"
                                            "glibc.malloc.trim_threshold=268435456 "
                                          : "";
  // `blas_coretype` (e.g. Haswell) pins OpenBLAS's kernels to one instruction set instead.
  const std::string coretype =
      blas_coretype.empty() ? "" : "OPENBLAS_CORETYPE=" + blas_coretype + " ";
  const std::string cmd =
      "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " + coretype +
      "OPENBLAS_NUM_THREADS=" + std::to_string(threads) +
      " OMP_NUM_THREADS=" + std::to_string(threads) + " " + tunables + python + " " + script +
      " --device " + device + " --threads " + std::to_string(threads) + " --sizes " + sizes +
      " --batch " + std::to_string(batch_size) + " --seconds " + std::to_string(seconds) + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char line[512];
  double rate = -1;
  while (std::fgets(line, sizeof line, pipe)) {
    int torch_threads = -1, blas_threads = -1;
    if (std::sscanf(line, "samples_per_s %lf threads %d blas_threads %d", &rate, &torch_threads,
                    &blas_threads) < 1) {
      std::fputs(line, stderr);
    } else if (device == "cpu" &&
               (torch_threads != threads || (blas_threads != -1 && blas_threads != threads))) {
      std::fprintf(stderr, "warning: the reference ran with %d torch and %d BLAS threads, not %d\n",
                   torch_threads, blas_threads, threads);
    }
  }
  pclose(pipe);
  return rate;
}

// Every instruction-set level this CPU has (common/isa.h), best first; one row per level and
// thread count, each beside the same PyTorch figures (measured once per thread count).
std::vector<Isa> levels_to_measure(const std::string& which) {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kPortable}) {
    if (isa_supported(isa) && (which == "all" || which == isa_name(isa))) out.push_back(isa);
  }
  return out;
}

void bench_cpu_step(const std::string& script, const std::vector<int>& thread_counts,
                    const std::vector<Isa>& levels, double seconds, bool reference) {
  const ModelSpec spec{ModelKind::kMlp, 784, {256, 128}, 10, 0.0f};
  std::printf("\n== training step, %s, batch 128, cpu (samples/s, higher is better)\n",
              spec.to_string().c_str());
  std::printf("%8s %9s %12s %16s %16s %8s\n", "threads", "kernels", "gossip_sgd", "pytorch default",
              "pytorch tuned*", "ratio*");
  const Isa saved = active_isa();
  for (int threads : thread_counts) {
    const double plain =
        reference ? torch_samples_per_s(script, threads, spec, 128, seconds, false) : -1;
    const double tuned =
        reference ? torch_samples_per_s(script, threads, spec, 128, seconds, true) : -1;
    for (Isa isa : levels) {
      (void)set_active_isa(isa);
      const double ours = cpu_step_samples_per_s(spec, 128, threads, seconds);
      const std::string name(isa_name(isa));
      if (plain > 0 && tuned > 0) {
        std::printf("%8d %9s %12.0f %16.0f %16.0f %8.2f\n", threads, name.c_str(), ours, plain,
                    tuned, ours / tuned);
      } else {
        std::printf("%8d %9s %12.0f %16s %16s %8s\n", threads, name.c_str(), ours, "n/a", "n/a",
                    "");
      }
      // Where OpenBLAS would run AVX-512 kernels, the AVX2 level is also held against PyTorch on
      // OpenBLAS's AVX2 (Haswell) kernels: the same instruction set on both sides.
      if (isa == Isa::kAvx2 && isa_supported(Isa::kAvx512) && reference) {
        const double same_isa = torch_samples_per_s(script, threads, spec, 128, seconds, true,
                                                    "/usr/bin/python3", "cpu", "Haswell");
        if (same_isa > 0) {
          std::printf("%8d %9s %12.0f %16s %16.0f %8.2f  (PyTorch on OpenBLAS Haswell kernels)\n",
                      threads, name.c_str(), ours, "", same_isa, ours / same_isa);
        }
      }
      std::fflush(stdout);
    }
  }
  (void)set_active_isa(saved);
  std::printf(
      "* PyTorch with the same glibc heap settings as gossip_sgd (GLIBC_TUNABLES); ratio = "
      "gossip_sgd / tuned\n");
}

void bench_mix(int threads, double seconds) {
  const std::size_t n = std::size_t{1} << 24;  // 64 MiB per buffer: far beyond the caches
  std::printf(
      "\n== mixing out = sum_j w_j x_j - gamma u, %zu floats per buffer, cpu, %d thread%s\n", n,
      threads, threads == 1 ? "" : "s");
  std::vector<std::vector<float>> x(8, std::vector<float>(n, 1.0f));
  std::vector<float> u(n, 0.5f), out(n);
  const double copy_rate =
      best_rate([&] { std::memcpy(out.data(), x[0].data(), n * sizeof(float)); }, seconds);
  // memcpy moves 2 buffers (read + write).
  std::printf("%-34s %8.1f GB/s\n", "memcpy (read + write)", copy_rate * 2 * n * 4 / 1e9);
  for (int terms : {1, 3, 4, 8}) {
    std::vector<MixTerm> t;
    for (int j = 0; j < terms; ++j) t.push_back({1.0f / terms, x[j].data()});
    const double rate =
        best_rate([&] { cpu::mix(out.data(), t, 0.1f, u.data(), n, threads); }, seconds);
    // terms + update read, out written.
    std::printf("mix, %d term%s + update %16s %8.1f GB/s\n", terms, terms == 1 ? " " : "s", "",
                rate * (terms + 2) * n * 4 / 1e9);
  }
}

#if GOSSIP_SGD_CUDA
// Mixing on the device vs a device-to-device copy, 256 MiB per buffer.
void bench_gpu_mix(Backend& backend, double seconds) {
  const std::size_t m = std::size_t{1} << 26;
  std::vector<DeviceBuffer> bufs;
  for (int j = 0; j < 5; ++j) bufs.push_back(backend.alloc(m));
  auto time_it = [&](auto&& fn) {
    fn();
    backend.synchronize();
    Stopwatch w;
    int reps = 0;
    while (w.elapsed_seconds() < seconds / 4 || reps < 3) {
      fn();
      ++reps;
      backend.synchronize();
    }
    return w.elapsed_seconds() / reps;
  };
  const double copy_s = time_it([&] { backend.copy(bufs[0].data(), bufs[1].data(), m); });
  std::printf("%-34s %8.1f GB/s\n", "cudaMemcpy D2D (read + write)", 2.0 * m * 4 / copy_s / 1e9);
  for (int terms : {1, 3}) {
    std::vector<MixTerm> t;
    for (int j = 0; j < terms; ++j) t.push_back({1.0f / terms, bufs[1 + j].data()});
    const double s = time_it([&] { backend.mix(bufs[0].data(), t, 0.1f, bufs[4].data(), m); });
    std::printf("mix, %d term%s + update %16s %8.1f GB/s\n", terms, terms == 1 ? " " : "s", "",
                (terms + 2.0) * m * 4 / s / 1e9);
  }
}
#endif

#if GOSSIP_SGD_CUDA
// The wide MLP 784-4096-4096-10 at batch 1024 on the cuda backend: samples/s and the share of step
// time outside cuBLAS GEMMs (CUDA events around each GEMM, cuda::set_gemm_profiling); then mixing
// GB/s on the device beside a device-to-device copy. Needs a device.
void bench_gpu(double seconds) {
  auto made = cuda::make_cuda_backend(0);
  if (!made.is_ok()) {
    std::printf("\n== gpu: %s\n", made.status().to_string().c_str());
    return;
  }
  Backend& backend = **made;
  const ModelSpec spec{ModelKind::kMlp, 784, {4096, 4096}, 10, 0.0f};
  constexpr int kBatch = 1024;
  std::printf("\n== gpu: %s\n", backend.description().c_str());
  auto model_or = backend.make_model(spec);
  if (!model_or.is_ok()) {
    std::printf("gpu model: %s\n", model_or.status().to_string().c_str());
    return;
  }
  Model& model = **model_or;
  const std::size_t n = spec.num_params();
  std::vector<float> host = init_params(spec, 1);
  DeviceBuffer x = backend.alloc(n), g = backend.alloc(n), u = backend.alloc(n),
               v = backend.alloc(n);
  backend.copy_to_device(x.data(), host.data(), n);
  backend.synchronize();
  const Batch batch = random_batch(spec, kBatch);
  OptimizerConfig oc;
  oc.schedule.lr = 0.01;
  oc.momentum = 0.9;
  Optimizer opt(oc, n);
  auto step = [&](std::int64_t t) {
    model.loss_and_grad(x.data(), batch, g.data());
    opt.step(backend, t, x.data(), g.data(), v.data(), u.data());
  };
  for (int t = 0; t < 5; ++t) step(t);
  backend.synchronize();
  Stopwatch watch;
  std::int64_t steps = 0;
  while (watch.elapsed_seconds() < seconds) step(steps++);
  backend.synchronize();
  const double step_ms = watch.elapsed_seconds() * 1e3 / steps;
  cuda::set_gemm_profiling(model, true);
  constexpr int kProfiled = 20;
  double gemm_ms = 0;
  for (int t = 0; t < kProfiled; ++t) {
    step(t);
    gemm_ms += cuda::take_gemm_ms(model);
  }
  cuda::set_gemm_profiling(model, false);
  gemm_ms /= kProfiled;
  std::printf(
      "training step, %s, batch %d: %.0f samples/s (%.3f ms/step); cuBLAS GEMMs %.3f ms, "
      "outside GEMMs %.1f%% of the step\n",
      spec.to_string().c_str(), kBatch, kBatch / step_ms * 1e3, step_ms, gemm_ms,
      100.0 * std::max(0.0, 1.0 - gemm_ms / step_ms));
  bench_gpu_mix(backend, seconds);
}
#endif

}  // namespace
}  // namespace gossip::sgd

int main(int argc, char** argv) {
  using namespace gossip::sgd;
  CLI::App app{"gossip_sgd benchmarks: cpu step vs PyTorch, mixing vs memcpy, and the GPU"};
  std::vector<int> threads{1, 2};
  double seconds = 3.0;
  bool no_reference = false;
  bool skip_mix = false;
  std::string script = std::string(GOSSIP_SOURCE_DIR) + "/bench/sgd_reference.py";
  app.add_option("--threads", threads, "cpu thread counts to measure (ours and PyTorch's)");
  app.add_option("--seconds", seconds, "time per measurement");
  app.add_option("--reference", script, "the PyTorch reference script");
  app.add_flag("--no-reference", no_reference, "skip PyTorch");
  app.add_flag("--skip-mix", skip_mix, "skip the mixing figures");
  std::string levels = "all";
  app.add_option("--kernels", levels,
                 "instruction-set levels of the training step: all (every level this CPU has), "
                 "avx512, avx2 or portable")
      ->capture_default_str();
  std::string gpu_python = "python3";
  app.add_option("--gpu-torch-python", gpu_python,
                 "the python that holds a CUDA build of PyTorch, for the GPU reference");
  CLI11_PARSE(app, argc, argv);

  auto cpu = make_backend(Device::kCpu, threads.back());
  std::printf("gossip_sgd bench: %s; cuda built: %s, devices: %d\n", (*cpu)->description().c_str(),
              cuda_built() ? "yes" : "no", cuda_device_count());
  const std::vector<gossip::Isa> measured = levels_to_measure(levels);
  if (measured.empty()) {
    std::fprintf(stderr, "error: --kernels %s: not a level this CPU has\n", levels.c_str());
    return 2;
  }
  bench_cpu_step(script, threads, measured, seconds, !no_reference);
  if (!skip_mix) {
    for (int t : threads) bench_mix(t, seconds);
  }
#if GOSSIP_SGD_CUDA
  if (cuda_device_count() > 0) {
    bench_gpu(seconds);
    if (!no_reference) {
      // The same wide MLP step in PyTorch on the same device (its batch already on the device;
      // ours is uploaded from host memory every step, as in training).
      const ModelSpec wide{ModelKind::kMlp, 784, {4096, 4096}, 10, 0.0f};
      const double ref =
          torch_samples_per_s(script, 1, wide, 1024, seconds, false, gpu_python, "cuda");
      if (ref > 0) {
        std::printf("pytorch, same step on the same GPU:  %.0f samples/s\n", ref);
      } else {
        std::printf("pytorch on the GPU: the reference did not run (%s)\n", gpu_python.c_str());
      }
    }
  } else {
    std::printf("\n== gpu: no CUDA device here; GPU figures skipped\n");
  }
#else
  std::printf("\n== gpu: this build has no CUDA backend; GPU figures skipped\n");
#endif
  return 0;
}
