// Backend: where the numbers of one node are computed. One interface, two implementations side by
// side: `cpu` (Eigen, the reference, always built) and `cuda` (cuBLAS GEMMs plus our kernels, built
// when nvcc is found). This header includes no CUDA header.
//
// Memory contract: every `float*` passed to a Backend or to one of its Models points into that
// backend's memory — any host memory for cpu, memory from alloc() for cuda. Batches and data sets
// are always host memory (the backend moves them). Sizes are counts of floats.
//
// Thread safety: a Backend and its Models are used from one thread at a time (the compute thread of
// a node). Calls on the cuda backend are asynchronous and ordered on its compute stream, except
// copy_to_device(), which runs on a separate transfer stream so that neighbours' parameters move to
// the GPU while an already-queued gradient computation runs; every compute call issued after a
// copy_to_device() waits for that copy (so results never depend on timing). Calls that return a
// value to the host (loss_and_grad, evaluate, copy_to_host) wait for the work they read;
// synchronize() waits for everything.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/enum_names.h"
#include "common/status.h"
#include "sgd/dataset.h"
#include "sgd/model_spec.h"

namespace gossip::sgd {

enum class Device { kAuto, kCpu, kCuda };
inline constexpr EnumTable<Device, 3> kDevices{
    "device", {{Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}}};
// kDevices.parse, by the name callers outside sgd/ know it by.
inline Result<Device> parse_device(std::string_view name) { return kDevices.parse(name); }

// One term w_j · x_j of the mixing sum.
struct MixTerm {
  float weight;
  const float* x;
};

struct EvalResult {
  double loss = 0;      // mean data loss (without the l2 term)
  double accuracy = 0;  // fraction correct in [0, 1]; NaN for least_squares
  std::int64_t examples = 0;

  // From the sums over `examples` examples (every backend's evaluate() ends here): the means, and
  // NaN accuracy for `regression`. Zero examples: all zero.
  static EvalResult from_sums(double loss_sum, std::int64_t correct, std::int64_t examples,
                              bool regression) {
    EvalResult r;
    r.examples = examples;
    if (examples == 0) return r;
    r.loss = loss_sum / examples;
    r.accuracy = regression ? std::nan("") : static_cast<double>(correct) / examples;
    return r;
  }
};

// A model bound to a backend; owns that backend's scratch memory for activations. Create with
// Backend::make_model(). Not thread-safe.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelSpec& spec() const = 0;

  // Mean loss of `batch` at `params` (plus the l2 term); writes its gradient into `grad`
  // (spec().num_params() floats). Batch rows are the examples; batch.dim must equal input_dim.
  virtual double loss_and_grad(const float* params, const Batch& batch, float* grad) = 0;

  // Mean data loss and accuracy over all of `data` (in chunks; no gradient).
  virtual EvalResult evaluate(const float* params, const Dataset& data) = 0;

  // loss_and_grad over the examples `indices` of `data` (host memory), in that order, without the
  // caller gathering a Batch: bit for bit what gather(data, indices, b) followed by
  // loss_and_grad(params, b, grad) returns. The cpu backend reads the rows of the linear models
  // (least_squares, logistic) in place — from `aligned` when given (AlignedRows(data), the same
  // values with 64-byte-aligned rows; may be null) — and everything else gathers into a scratch
  // batch owned by the model (this default, which ignores `aligned`).
  virtual double loss_and_grad_rows(const float* params, const Dataset& data,
                                    const AlignedRows* aligned,
                                    std::span<const std::int64_t> indices, float* grad);

 private:
  Batch rows_scratch_;  // loss_and_grad_rows' default gather
};

// AdamW's scalars for one step (Optimizer computes them in double and rounds each once to float,
// so every backend gets the same bits): β1, β2, fl(1 − β1), fl(1 − β2), the bias corrections
// fl(1 / (1 − β1^t)) and fl(1 / √(1 − β2^t)) for step count t, ε, and the decoupled weight decay λ.
struct AdamWCoefficients {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  float inv_bias1 = 1.0f, inv_sqrt_bias2 = 1.0f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// A float buffer in a backend's memory (RAII, move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(float* data, std::size_t size, std::function<void(float*)> release)
      : data_(data), size_(size), release_(std::move(release)) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  std::size_t size_ = 0;
  std::function<void(float*)> release_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // "cpu (Eigen, 2 threads)", "cuda (NVIDIA H100, sm_90)".
  virtual std::string description() const = 0;

  // InvalidArgument when the spec does not validate.
  virtual Result<std::unique_ptr<Model>> make_model(const ModelSpec& spec) = 0;

  // ---- memory
  virtual DeviceBuffer alloc(std::size_t n) = 0;  // zero-filled
  // Zero-filled HOST memory for staging transfers (the daemon's send buffer and neighbours'
  // inboxes). cuda: page-locked (cudaMallocHost), so copy_to_device from it is a true asynchronous
  // DMA that overlaps queued compute, and copy_to_host into it runs at full bus speed; cpu:
  // ordinary memory.
  virtual DeviceBuffer alloc_host(std::size_t n);
  // Host -> backend; asynchronous on the transfer stream for cuda (`src` must stay valid and
  // unchanged until synchronize()), a plain copy for cpu.
  virtual void copy_to_device(float* dst, const float* src, std::size_t n) = 0;
  // Backend -> host, synchronous (waits for pending compute that writes `src`).
  virtual void copy_to_host(float* dst, const float* src, std::size_t n) = 0;
  virtual void copy(float* dst, const float* src, std::size_t n) = 0;  // within the backend
  virtual void synchronize() = 0;

  // ---- kernels over flat buffers
  //
  // The fused D-PSGD update (Lian et al. 2017, Alg. 1): out = Σ_j w_j · x_j − gamma · update, in
  // one pass, summed in the order given:  acc = w_0·x_0;  acc = fma(w_j, x_j, acc) for j ≥ 1;
  // out = fma(−gamma, update, acc). Both backends round identically (fused multiply-adds in the
  // same order), so the same terms give bit-identical results on cpu and cuda. `update` may be
  // null (pure gossip); `out` may alias one of the x_j (element-wise, read before write).
  // terms must be non-empty.
  virtual void mix(float* out, std::span<const MixTerm> terms, float gamma, const float* update,
                   std::size_t n) = 0;

  // SGD-with-momentum direction (the PyTorch SGD convention, dampening 0):
  //   g' = g + weight_decay · x;  v = momentum · v + g';
  //   u  = nesterov ? g' + momentum · v : v          (momentum == 0: u = g', v untouched)
  // `velocity` may be null when momentum == 0.
  virtual void sgd_direction(float* u, float* velocity, const float* x, const float* g,
                             std::size_t n, float momentum, float weight_decay, bool nesterov) = 0;

  // AdamW's direction (Loshchilov and Hutter, ICLR 2019, Alg. 2, as torch.optim.AdamW), so that
  // x − γ·u is AdamW's step with learning rate γ: with c = coefficients, per element
  //   m = fma(β1, m, fl(c.one_minus_beta1 · g))
  //   v = fma(β2, v, fl(fl(c.one_minus_beta2 · g) · g))
  //   u = fma(λ, x, fl(fl(m · c.inv_bias1) / fma(√v, c.inv_sqrt_bias2, ε)))
  // i.e. u = m̂ / (√v̂ + ε) + λx with IEEE square root and division; every backend rounds each
  // operation alike (bit-identical). m and v are n floats each, starting at zero.
  virtual void adamw_direction(float* u, float* m, float* v, const float* x, const float* g,
                               std::size_t n, const AdamWCoefficients& c) = 0;
};

// Selects a backend: cpu always works; cuda is Unimplemented when this build has no CUDA backend
// and Unavailable when no device is present; auto picks cuda when it would work, else cpu.
// `cpu_threads` (≥ 1, or 0 for OMP_NUM_THREADS when set, else gossip::usable_cpus(): the
// affinity mask capped by the cgroup CPU quota) sets the Eigen/OpenMP thread count of the cpu
// backend.
// The default is 1: several nodes per machine are the common case (gossipd launch, gossip-sim), and
// OpenMP teams on oversubscribed cores spin at barriers (measured: 15x slower steps at load 12 on
// 2 cores). Give a node more threads only when it has the cores to itself.
Result<std::unique_ptr<Backend>> make_backend(Device device, int cpu_threads = 1);

// Whether this build has the CUDA backend, and how many devices the driver reports (0 when not
// built or no driver).
bool cuda_built();
int cuda_device_count();

}  // namespace gossip::sgd
