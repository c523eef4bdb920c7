// The cpu backend. The flat kernels (flat_kernels.cc, one copy per instruction-set level) are
// simple loops with std::fma, so that (a) GCC vectorises them for each level and (b) rounding
// matches the cuda kernels (__fmaf_rn) exactly. OpenMP splits long buffers into contiguous static
// chunks; results do not depend on the thread count because every element is computed
// independently.
#include "sgd/cpu/cpu_backend.h"

#include <malloc.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/check.h"
#include "common/cpus.h"
#include "common/isa.h"
#include "sgd/cpu/dense_net.h"
#include "sgd/cpu/flat_kernels.h"

namespace gossip::sgd::cpu {
namespace {

// Below this many floats a parallel region costs more than it saves.
constexpr std::size_t kParallelMin = std::size_t{1} << 16;

class CpuModel final : public Model {
 public:
  explicit CpuModel(ModelSpec spec) : spec_(std::move(spec)), linear_(is_linear(spec_)) {}
  const ModelSpec& spec() const override { return spec_; }

  double loss_and_grad(const float* params, const Batch& batch, float* grad) override {
    GOSSIP_CHECK_EQ(batch.dim, spec_.input_dim);
    const bool regression = spec_.kind == ModelKind::kLeastSquares;
    GOSSIP_CHECK_EQ(regression ? batch.targets.size() : batch.labels.size(),
                    static_cast<std::size_t>(batch.rows));
    if (linear_) {
      rows_.resize(batch.rows);
      for (int j = 0; j < batch.rows; ++j) {
        rows_[j] = batch.features.data() + static_cast<std::size_t>(j) * batch.dim;
      }
      return cpu::linear_loss_and_grad(
          spec_, params, rows_.data(), regression ? nullptr : batch.labels.data(),
          regression ? batch.targets.data() : nullptr, batch.rows, grad);
    }
    return cpu::loss_and_grad<float>(
        spec_, params, batch.features.data(), regression ? nullptr : batch.labels.data(),
        regression ? batch.targets.data() : nullptr, batch.rows, grad, ws_);
  }

  // The linear models read the rows in place (the same kernel as loss_and_grad, so the same
  // bits); the others gather (Model's default).
  double loss_and_grad_rows(const float* params, const Dataset& data, const AlignedRows* aligned,
                            std::span<const std::int64_t> indices, float* grad) override {
    if (!linear_) return Model::loss_and_grad_rows(params, data, aligned, indices, grad);
    GOSSIP_CHECK_EQ(data.dim, spec_.input_dim);
    if (aligned != nullptr) {
      GOSSIP_CHECK(aligned->num_rows() == data.num_examples && aligned->dim() == data.dim)
          << "aligned rows of another data set";
    }
    const bool regression = spec_.kind == ModelKind::kLeastSquares;
    const std::size_t b = indices.size();
    rows_.resize(b);
    labels_.resize(regression ? 0 : b);
    targets_.resize(regression ? b : 0);
    for (std::size_t j = 0; j < b; ++j) {
      const std::int64_t i = indices[j];
      GOSSIP_CHECK(i >= 0 && i < data.num_examples) << "example index " << i;
      rows_[j] = aligned != nullptr ? aligned->row(i) : data.features.data() + i * data.dim;
      if (regression) {
        targets_[j] = data.targets[i];
      } else {
        labels_[j] = data.labels[i];
      }
    }
    return cpu::linear_loss_and_grad(
        spec_, params, rows_.data(), regression ? nullptr : labels_.data(),
        regression ? targets_.data() : nullptr, static_cast<int>(b), grad);
  }

  EvalResult evaluate(const float* params, const Dataset& data) override {
    GOSSIP_CHECK_EQ(data.dim, spec_.input_dim);
    constexpr std::int64_t kChunk = 2048;
    const bool regression = spec_.kind == ModelKind::kLeastSquares;
    double loss = 0;
    std::int64_t correct = 0;
    for (std::int64_t begin = 0; begin < data.num_examples; begin += kChunk) {
      const int rows = static_cast<int>(std::min(kChunk, data.num_examples - begin));
      double chunk_loss = 0;
      std::int64_t chunk_correct = 0;
      loss_sum_and_correct<float>(spec_, params, data.features.data() + begin * data.dim,
                                  regression ? nullptr : data.labels.data() + begin,
                                  regression ? data.targets.data() + begin : nullptr, rows, ws_,
                                  &chunk_loss, &chunk_correct);
      loss += chunk_loss;
      correct += chunk_correct;
    }
    return EvalResult::from_sums(loss, correct, data.num_examples, regression);
  }

 private:
  ModelSpec spec_;
  bool linear_;  // least_squares / logistic: cpu::linear_loss_and_grad instead of Eigen GEMVs
  Workspace<float> ws_;
  std::vector<const float*> rows_;  // linear models: the batch's example rows
  std::vector<std::int32_t> labels_;
  std::vector<float> targets_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) { Eigen::setNbThreads(threads_); }

  Device device() const override { return Device::kCpu; }
  std::string description() const override {
    std::ostringstream os;
    os << "cpu (" << isa_name(active_isa()) << " kernels, Eigen " << EIGEN_WORLD_VERSION << '.'
       << EIGEN_MAJOR_VERSION << '.' << EIGEN_MINOR_VERSION << ", " << threads_
       << (threads_ == 1 ? " thread)" : " threads)");
    return os.str();
  }

  Result<std::unique_ptr<Model>> make_model(const ModelSpec& spec) override {
    GOSSIP_RETURN_IF_ERROR(spec.validate());
    return std::unique_ptr<Model>(new CpuModel(spec));
  }

  DeviceBuffer alloc(std::size_t n) override {
    float* p = new float[n]();
    return DeviceBuffer(p, n, [](float* q) { delete[] q; });
  }
  void copy_to_device(float* dst, const float* src, std::size_t n) override {
    if (n) std::memcpy(dst, src, n * sizeof(float));
  }
  void copy_to_host(float* dst, const float* src, std::size_t n) override {
    if (n) std::memcpy(dst, src, n * sizeof(float));
  }
  void copy(float* dst, const float* src, std::size_t n) override {
    if (n && dst != src) std::memmove(dst, src, n * sizeof(float));
  }
  void synchronize() override {}

  void mix(float* out, std::span<const MixTerm> terms, float gamma, const float* update,
           std::size_t n) override {
    cpu::mix(out, terms, gamma, update, n, threads_);
  }
  void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n,
                     float momentum, float weight_decay, bool nesterov) override {
    cpu::sgd_direction(u, velocity, x, g, n, momentum, weight_decay, nesterov);
  }
  void adamw_direction(float* u, float* m, float* v, const float* x, const float* g, std::size_t n,
                       const AdamWCoefficients& c) override {
    cpu::adamw_direction(u, m, v, x, g, n, c);
  }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  // Eigen allocates its GEMM packing buffers (hundreds of KiB) on every product and frees them
  // after. With glibc's defaults those land above the mmap or trim threshold, so every training
  // step gave its memory back to the kernel and faulted it in again: a quarter of the step time in
  // page faults (perf, MLP 784-256-128-10). Keeping freed memory in the heap costs at most a few
  // MiB. Process-wide, idempotent, and harmless for the rest of the program.
  static const bool heap_tuned = [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)heap_tuned;
  if (threads <= 0) {
#ifdef _OPENMP
    // OMP_NUM_THREADS is the user's explicit choice; without it OpenMP would count every core of
    // the affinity mask, oversubscribing a container's CPU quota.
    threads = std::getenv("OMP_NUM_THREADS") != nullptr ? omp_get_max_threads() : usable_cpus();
#else
    threads = 1;
#endif
  }
  return std::make_unique<CpuBackend>(threads);
}

void mix(float* out, std::span<const MixTerm> terms, float gamma, const float* update,
         std::size_t n, int threads) {
  GOSSIP_CHECK(!terms.empty()) << "mix needs at least one term";
  if (terms.size() > 4) {
    // A multi-pass mix would read an aliased input after the first pass overwrote it.
    for (const MixTerm& t : terms) {
      if (t.x == out) {
        std::vector<float> copy(out, out + n);
        std::vector<MixTerm> fixed(terms.begin(), terms.end());
        for (MixTerm& f : fixed) {
          if (f.x == out) f.x = copy.data();
        }
        mix(out, fixed, gamma, update, n, threads);
        return;
      }
    }
  }
  const auto range = GOSSIP_ISA_PICK(gossip::sgd::cpu, mix_range);
  if (threads <= 1 || n < kParallelMin) {
    range(out, terms.data(), terms.size(), gamma, update, 0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const std::size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const std::size_t t = 0, nt = 1;
#endif
    // Chunk boundaries on 16-float (64-byte) lines so no two threads share a cache line of out.
    const std::size_t lines = (n + 15) / 16;
    const std::size_t begin = std::min(n, lines * t / nt * 16);
    const std::size_t end = std::min(n, lines * (t + 1) / nt * 16);
    range(out, terms.data(), terms.size(), gamma, update, begin, end);
  }
}

void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n,
                   float momentum, float weight_decay, bool nesterov) {
  GOSSIP_CHECK(momentum == 0.0f || velocity != nullptr) << "momentum needs a velocity buffer";
  GOSSIP_ISA_PICK(gossip::sgd::cpu, sgd_direction)
  (u, velocity, x, g, n, momentum, weight_decay, nesterov);
}

void adamw_direction(float* u, float* m, float* v, const float* x, const float* g, std::size_t n,
                     const AdamWCoefficients& c) {
  GOSSIP_CHECK(n == 0 || (m != nullptr && v != nullptr)) << "adamw needs its m and v buffers";
  GOSSIP_ISA_PICK(gossip::sgd::cpu, adamw_direction)(u, m, v, x, g, n, c);
}

}  // namespace gossip::sgd::cpu
