// The cuda backend: cuBLAS SGEMMs for every matrix product of the dense networks, our kernels for
// the rest (bias + ReLU, the output losses, ReLU backward, mixing, SGD, AdamW), two streams.
//
// Numerics: cuBLAS runs in its default FP32 mode (no TF32), so gradients agree with the cpu backend
// to float rounding (the parity test states the tolerance). The flat kernels use __fmaf_rn in the
// order of the cpu loops (AdamW adds __fsqrt_rn and __fdiv_rn, IEEE-rounded like the cpu's) and the
// file is built with --fmad=false, so mix(), sgd_direction() and adamw_direction() are
// bit-identical to the cpu backend.
//
// Layout and shapes as in model_spec.h / cpu/dense_net.h: column-major W (out × in), activations
// width × B, which is cuBLAS's native order — no transposes are materialised.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/check.h"
#include "sgd/cuda/cuda_backend.h"

#define GOSSIP_CUDA_CHECK(expr)                                                                   \
  do {                                                                                            \
    cudaError_t gossip_err_ = (expr);                                                             \
    GOSSIP_CHECK(gossip_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(gossip_err_); \
  } while (0)
#define GOSSIP_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                            \
    cublasStatus_t gossip_st_ = (expr);                                                           \
    GOSSIP_CHECK(gossip_st_ == CUBLAS_STATUS_SUCCESS) << #expr << ": status " << int(gossip_st_); \
  } while (0)

namespace gossip::sgd::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxMixTerms = 24;  // per kernel launch; longer lists run in several passes

int blocks_for(std::size_t n) {
  return static_cast<int>(std::min<std::size_t>((n + kThreads - 1) / kThreads, 65535u * 16));
}

// ---- kernels (outputs first)

// z(i, j) += b(i); optionally z = max(z, 0). z is rows × cols column-major.
__global__ void bias_act_kernel(float* z, const float* b, int rows, long long total, bool relu) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
       k += (long long)gridDim.x * blockDim.x) {
    float v = z[k] + b[k % rows];
    z[k] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// delta = act > 0 ? delta : 0
__global__ void relu_backward_kernel(float* delta, const float* act, long long total) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
       k += (long long)gridDim.x * blockDim.x) {
    if (!(act[k] > 0.0f)) delta[k] = 0.0f;
  }
}

// One thread per example: loss_j, and (when dz != null) dLoss/dz scaled by inv_b; correct_j.
// kind: 0 squared, 1 binary logistic, 2 softmax cross-entropy (OutputLoss order).
__global__ void output_loss_kernel(float* dz, float* loss, int* correct, const float* z, int out,
                                   int batch, int kind, const int* labels, const float* targets,
                                   float inv_b) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= batch) return;
  const float* zj = z + (long long)j * out;
  float* dzj = dz ? dz + (long long)j * out : nullptr;
  float l = 0;
  int right = 0;
  if (kind == 0) {
    const float r = zj[0] - targets[j];
    if (dzj) dzj[0] = r * inv_b;
    l = 0.5f * r * r;
  } else if (kind == 1) {
    const float y = labels[j] ? 1.0f : 0.0f;
    if (dzj) dzj[0] = (1.0f / (1.0f + expf(-zj[0])) - y) * inv_b;
    l = fmaxf(zj[0], 0.0f) + log1pf(expf(-fabsf(zj[0]))) - y * zj[0];
    right = (zj[0] > 0.0f ? 1 : 0) == labels[j];
  } else {
    float m = zj[0];
    int arg = 0;
    for (int k = 1; k < out; ++k) {
      if (zj[k] > m) {
        m = zj[k];
        arg = k;
      }
    }
    float sum = 0;
    for (int k = 0; k < out; ++k) sum += expf(zj[k] - m);
    const int y = labels[j];
    if (dzj) {
      const float inv = 1.0f / sum;
      for (int k = 0; k < out; ++k) dzj[k] = expf(zj[k] - m) * inv * inv_b;
      dzj[y] -= inv_b;
    }
    l = logf(sum) + m - zj[y];
    right = arg == y;
  }
  loss[j] = l;
  correct[j] = right;
}

// db(i) = Σ_j delta(i, j): one warp-strided block per row (rows are short: out ≤ a few thousand).
__global__ void row_sum_kernel(float* db, const float* delta, int rows, int cols) {
  const int i = blockIdx.x;
  float s = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += delta[i + (long long)j * rows];
  __shared__ float part[kThreads];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[i] = part[0];
}

// dw += l2 * w
__global__ void axpy_kernel(float* y, float a, const float* x, long long n) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x) {
    y[k] = __fmaf_rn(a, x[k], y[k]);
  }
}

struct MixArgs {
  int count;
  float weight[kMaxMixTerms];
  const float* x[kMaxMixTerms];
};

// out = [out +] Σ w_j x_j [− γ u], fma order as the cpu backend.
// w·x and acc + w·x rounded once (the cpu's order), for one float or four.
__device__ inline float scaled(float w, float x) { return w * x; }
__device__ inline float4 scaled(float w, float4 x) {
  return make_float4(w * x.x, w * x.y, w * x.z, w * x.w);
}
__device__ inline float fma_rn(float w, float x, float acc) { return __fmaf_rn(w, x, acc); }
__device__ inline float4 fma_rn(float w, float4 x, float4 acc) {
  return make_float4(__fmaf_rn(w, x.x, acc.x), __fmaf_rn(w, x.y, acc.y), __fmaf_rn(w, x.z, acc.z),
                     __fmaf_rn(w, x.w, acc.w));
}

// out = Σ_j w_j x_j (added to out when `accumulate`) − γ·update, over n elements of T. T = float4
// (every pointer 16-byte aligned, n counting float4s) takes 16-byte loads and stores, which bring
// mixing to the device's copy bandwidth (docs/sgd.md); each float gets the same operations in the
// same order either way, so the bits are the same.
template <typename T>
__global__ void mix_kernel(T* out, MixArgs terms, bool accumulate, float neg_gamma, const T* update,
                           long long n) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x) {
    T acc;
    int first;
    if (accumulate) {
      acc = out[k];
      first = 0;
    } else {
      acc = scaled(terms.weight[0], reinterpret_cast<const T*>(terms.x[0])[k]);
      first = 1;
    }
    for (int j = first; j < terms.count; ++j) {
      acc = fma_rn(terms.weight[j], reinterpret_cast<const T*>(terms.x[j])[k], acc);
    }
    if (update) acc = fma_rn(neg_gamma, update[k], acc);
    out[k] = acc;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

__global__ void sgd_direction_kernel(float* u, float* velocity, const float* x, const float* g,
                                     long long n, float momentum, float weight_decay,
                                     bool nesterov) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x) {
    const float gk = __fmaf_rn(weight_decay, x[k], g[k]);
    if (momentum == 0.0f) {
      u[k] = gk;
    } else {
      const float v = __fmaf_rn(momentum, velocity[k], gk);
      velocity[k] = v;
      u[k] = nesterov ? __fmaf_rn(momentum, v, gk) : v;
    }
  }
}

// Backend::adamw_direction in the cpu kernel's order, every operation with its IEEE rounding
// spelled out (the file is built with --fmad=false as well).
__global__ void adamw_direction_kernel(float* u, float* m, float* v, const float* x, const float* g,
                                       long long n, AdamWCoefficients c) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x) {
    const float gk = g[k];
    const float mk = __fmaf_rn(c.beta1, m[k], __fmul_rn(c.one_minus_beta1, gk));
    const float vk = __fmaf_rn(c.beta2, v[k], __fmul_rn(__fmul_rn(c.one_minus_beta2, gk), gk));
    m[k] = mk;
    v[k] = vk;
    const float den = __fmaf_rn(__fsqrt_rn(vk), c.inv_sqrt_bias2, c.eps);
    u[k] = __fmaf_rn(c.weight_decay, x[k], __fdiv_rn(__fmul_rn(mk, c.inv_bias1), den));
  }
}

// ---- host side

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  std::size_t capacity = 0;
  void reserve(std::size_t n) {
    if (n <= capacity) return;
    if (ptr) GOSSIP_CUDA_CHECK(cudaFree(ptr));
    GOSSIP_CUDA_CHECK(cudaMalloc(&ptr, n * sizeof(T)));
    capacity = n;
  }
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
};

template <typename T>
struct PinnedArray {
  T* ptr = nullptr;
  std::size_t capacity = 0;
  void reserve(std::size_t n) {
    if (n <= capacity) return;
    if (ptr) GOSSIP_CUDA_CHECK(cudaFreeHost(ptr));
    GOSSIP_CUDA_CHECK(cudaMallocHost(&ptr, n * sizeof(T)));
    capacity = n;
  }
  ~PinnedArray() {
    if (ptr) cudaFreeHost(ptr);
  }
};

class CudaBackend;

class CudaModel final : public Model {
 public:
  CudaModel(CudaBackend& backend, ModelSpec spec);
  ~CudaModel() override {
    for (auto& [e0, e1] : gemm_events_) {
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
  }
  const ModelSpec& spec() const override { return spec_; }
  double loss_and_grad(const float* params, const Batch& batch, float* grad) override;
  EvalResult evaluate(const float* params, const Dataset& data) override;

  // Profiling (set_gemm_profiling): when on, every GEMM is bracketed by events; take_gemm_ms()
  // sums them.
  void set_profile(bool on) { profile_ = on; }
  double take_gemm_ms();

 private:
  // Uploads rows of host examples; leaves logits in act_.back().
  void upload(const float* x, const std::int32_t* labels, const float* targets, int rows);
  void forward(const float* params, int rows);
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a,
            int lda, const float* b, int ldb, float* c, int ldc);
  // Runs the output kernel; when `grad_mode`, writes delta_.back(). Returns host loss sum and
  // correct count of `rows` examples (synchronises).
  void output(int rows, bool grad_mode, double* loss_sum, std::int64_t* correct);

  CudaBackend& backend_;
  ModelSpec spec_;
  std::vector<int> sizes_;
  int capacity_rows_ = 0;
  std::vector<DeviceArray<float>> act_, delta_;
  DeviceArray<float> x_, targets_, loss_;
  DeviceArray<int> labels_, correct_;
  PinnedArray<float> host_x_, host_targets_, host_loss_;
  PinnedArray<int> host_labels_, host_correct_;
  bool profile_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> gemm_events_;
  std::size_t gemm_events_used_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    GOSSIP_CUDA_CHECK(cudaSetDevice(device_));
    GOSSIP_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    GOSSIP_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_, cudaStreamNonBlocking));
    GOSSIP_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    GOSSIP_CUBLAS_CHECK(cublasCreate(&cublas_));
    GOSSIP_CUBLAS_CHECK(cublasSetStream(cublas_, compute_));
    GOSSIP_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    cudaDeviceProp prop{};
    GOSSIP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ =
        std::string(prop.name) + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(compute_);
    cudaStreamSynchronize(transfer_);
    cublasDestroy(cublas_);
    cudaEventDestroy(copied_);
    cudaStreamDestroy(compute_);
    cudaStreamDestroy(transfer_);
  }

  Device device() const override { return Device::kCuda; }
  std::string description() const override { return "cuda (" + name_ + ", cuBLAS FP32)"; }

  Result<std::unique_ptr<Model>> make_model(const ModelSpec& spec) override {
    GOSSIP_RETURN_IF_ERROR(spec.validate());
    return std::unique_ptr<Model>(new CudaModel(*this, spec));
  }

  DeviceBuffer alloc(std::size_t n) override {
    float* p = nullptr;
    GOSSIP_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(float)));
    GOSSIP_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), compute_));
    GOSSIP_CUDA_CHECK(cudaStreamSynchronize(compute_));
    return DeviceBuffer(p, n, [](float* q) { cudaFree(q); });
  }
  DeviceBuffer alloc_host(std::size_t n) override {
    float* p = nullptr;
    GOSSIP_CUDA_CHECK(cudaMallocHost(&p, std::max<std::size_t>(n, 1) * sizeof(float)));
    std::memset(p, 0, std::max<std::size_t>(n, 1) * sizeof(float));
    return DeviceBuffer(p, n, [](float* q) { cudaFreeHost(q); });
  }
  void copy_to_device(float* dst, const float* src, std::size_t n) override {
    if (n == 0) return;
    GOSSIP_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, transfer_));
    GOSSIP_CUDA_CHECK(cudaEventRecord(copied_, transfer_));
    pending_copy_ = true;
  }
  void copy_to_host(float* dst, const float* src, std::size_t n) override {
    begin_compute();
    if (n)
      GOSSIP_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    GOSSIP_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }
  void copy(float* dst, const float* src, std::size_t n) override {
    begin_compute();
    if (n && dst != src) {
      GOSSIP_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, compute_));
    }
  }
  void synchronize() override {
    GOSSIP_CUDA_CHECK(cudaStreamSynchronize(transfer_));
    GOSSIP_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  void mix(float* out, std::span<const MixTerm> terms, float gamma, const float* update,
           std::size_t n) override {
    GOSSIP_CHECK(!terms.empty()) << "mix needs at least one term";
    begin_compute();
    if (n == 0) return;
    if (terms.size() > kMaxMixTerms) {
      // Several passes: a later pass would read an aliased input the first pass overwrote.
      for (const MixTerm& t : terms) {
        if (t.x != out) continue;
        DeviceBuffer copy_of_out = alloc(n);
        copy(copy_of_out.data(), out, n);
        std::vector<MixTerm> fixed(terms.begin(), terms.end());
        for (MixTerm& f : fixed) {
          if (f.x == out) f.x = copy_of_out.data();
        }
        mix(out, fixed, gamma, update, n);
        GOSSIP_CUDA_CHECK(cudaStreamSynchronize(compute_));  // before copy_of_out is freed
        return;
      }
    }
    for (std::size_t first = 0; first < terms.size(); first += kMaxMixTerms) {
      MixArgs args{};
      const std::size_t count = std::min<std::size_t>(kMaxMixTerms, terms.size() - first);
      args.count = static_cast<int>(count);
      for (std::size_t j = 0; j < count; ++j) {
        args.weight[j] = terms[first + j].weight;
        args.x[j] = terms[first + j].x;
      }
      const bool last = first + count == terms.size();
      const float* u = last ? update : nullptr;
      bool wide = aligned16(out) && (u == nullptr || aligned16(u));
      for (std::size_t j = 0; j < count; ++j) wide = wide && aligned16(args.x[j]);
      const std::size_t n4 = wide ? n / 4 : 0;
      if (n4 > 0) {
        mix_kernel<float4><<<blocks_for(n4), kThreads, 0, compute_>>>(
            reinterpret_cast<float4*>(out), args, first > 0, -gamma,
            reinterpret_cast<const float4*>(u), static_cast<long long>(n4));
      }
      const std::size_t done = 4 * n4;  // the rest (all of it when a pointer is not aligned)
      if (done < n) {
        MixArgs tail = args;
        for (std::size_t j = 0; j < count; ++j) tail.x[j] = args.x[j] + done;
        mix_kernel<float><<<blocks_for(n - done), kThreads, 0, compute_>>>(
            out + done, tail, first > 0, -gamma, u ? u + done : nullptr,
            static_cast<long long>(n - done));
      }
    }
    GOSSIP_CUDA_CHECK(cudaGetLastError());
  }

  void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n,
                     float momentum, float weight_decay, bool nesterov) override {
    GOSSIP_CHECK(momentum == 0.0f || velocity != nullptr) << "momentum needs a velocity buffer";
    begin_compute();
    if (n == 0) return;
    sgd_direction_kernel<<<blocks_for(n), kThreads, 0, compute_>>>(
        u, velocity, x, g, static_cast<long long>(n), momentum, weight_decay, nesterov);
    GOSSIP_CUDA_CHECK(cudaGetLastError());
  }

  void adamw_direction(float* u, float* m, float* v, const float* x, const float* g, std::size_t n,
                       const AdamWCoefficients& c) override {
    GOSSIP_CHECK(n == 0 || (m != nullptr && v != nullptr)) << "adamw needs its m and v buffers";
    begin_compute();
    if (n == 0) return;
    adamw_direction_kernel<<<blocks_for(n), kThreads, 0, compute_>>>(u, m, v, x, g,
                                                                     static_cast<long long>(n), c);
    GOSSIP_CUDA_CHECK(cudaGetLastError());
  }

  // Makes the compute stream wait for host->device copies issued so far.
  void begin_compute() {
    GOSSIP_CUDA_CHECK(cudaSetDevice(device_));
    if (pending_copy_) {
      GOSSIP_CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_, 0));
      pending_copy_ = false;
    }
  }
  cudaStream_t compute_stream() const { return compute_; }
  cublasHandle_t cublas() const { return cublas_; }

 private:
  int device_;
  std::string name_;
  cudaStream_t compute_ = nullptr, transfer_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  bool pending_copy_ = false;
  cublasHandle_t cublas_ = nullptr;
};

CudaModel::CudaModel(CudaBackend& backend, ModelSpec spec)
    : backend_(backend), spec_(std::move(spec)), sizes_(spec_.layer_sizes()) {
  act_.resize(spec_.num_layers());
  delta_.resize(spec_.num_layers());
}

void CudaModel::upload(const float* x, const std::int32_t* labels, const float* targets, int rows) {
  const std::size_t in = sizes_[0];
  if (rows > capacity_rows_) {
    for (std::size_t l = 0; l < act_.size(); ++l) {
      act_[l].reserve(static_cast<std::size_t>(sizes_[l + 1]) * rows);
      delta_[l].reserve(static_cast<std::size_t>(sizes_[l + 1]) * rows);
    }
    x_.reserve(in * rows);
    targets_.reserve(rows);
    loss_.reserve(rows);
    labels_.reserve(rows);
    correct_.reserve(rows);
    host_x_.reserve(in * rows);
    host_targets_.reserve(rows);
    host_loss_.reserve(rows);
    host_labels_.reserve(rows);
    host_correct_.reserve(rows);
    capacity_rows_ = rows;
  }
  cudaStream_t s = backend_.compute_stream();
  // The pinned staging buffers may still feed a previous asynchronous copy: wait for it.
  GOSSIP_CUDA_CHECK(cudaStreamSynchronize(s));
  std::copy(x, x + in * rows, host_x_.ptr);
  GOSSIP_CUDA_CHECK(
      cudaMemcpyAsync(x_.ptr, host_x_.ptr, in * rows * sizeof(float), cudaMemcpyHostToDevice, s));
  if (labels) {
    std::copy(labels, labels + rows, host_labels_.ptr);
    GOSSIP_CUDA_CHECK(cudaMemcpyAsync(labels_.ptr, host_labels_.ptr, rows * sizeof(int),
                                      cudaMemcpyHostToDevice, s));
  }
  if (targets) {
    std::copy(targets, targets + rows, host_targets_.ptr);
    GOSSIP_CUDA_CHECK(cudaMemcpyAsync(targets_.ptr, host_targets_.ptr, rows * sizeof(float),
                                      cudaMemcpyHostToDevice, s));
  }
}

void CudaModel::gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  cudaStream_t s = backend_.compute_stream();
  if (profile_) {
    if (gemm_events_used_ == gemm_events_.size()) {
      cudaEvent_t e0, e1;
      GOSSIP_CUDA_CHECK(cudaEventCreate(&e0));
      GOSSIP_CUDA_CHECK(cudaEventCreate(&e1));
      gemm_events_.emplace_back(e0, e1);
    }
    GOSSIP_CUDA_CHECK(cudaEventRecord(gemm_events_[gemm_events_used_].first, s));
  }
  GOSSIP_CUBLAS_CHECK(
      cublasSgemm(backend_.cublas(), ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc));
  if (profile_) GOSSIP_CUDA_CHECK(cudaEventRecord(gemm_events_[gemm_events_used_++].second, s));
}

double CudaModel::take_gemm_ms() {
  GOSSIP_CUDA_CHECK(cudaStreamSynchronize(backend_.compute_stream()));
  double total = 0;
  for (std::size_t i = 0; i < gemm_events_used_; ++i) {
    float ms = 0;
    GOSSIP_CUDA_CHECK(cudaEventElapsedTime(&ms, gemm_events_[i].first, gemm_events_[i].second));
    total += ms;
  }
  gemm_events_used_ = 0;
  return total;
}

void CudaModel::forward(const float* params, int rows) {
  cudaStream_t s = backend_.compute_stream();
  const std::size_t layers = act_.size();
  for (std::size_t l = 0; l < layers; ++l) {
    const int in = sizes_[l], out = sizes_[l + 1];
    const float* a_prev = l == 0 ? x_.ptr : act_[l - 1].ptr;
    // z (out × B) = W (out × in) · a_prev (in × B)
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, out, rows, in, params + spec_.weight_offset(l), out, a_prev, in,
         act_[l].ptr, out);
    const long long total = static_cast<long long>(out) * rows;
    bias_act_kernel<<<blocks_for(total), kThreads, 0, s>>>(
        act_[l].ptr, params + spec_.bias_offset(l), out, total, l + 1 < layers);
  }
  GOSSIP_CUDA_CHECK(cudaGetLastError());
}

void CudaModel::output(int rows, bool grad_mode, double* loss_sum, std::int64_t* correct) {
  cudaStream_t s = backend_.compute_stream();
  const int kind = static_cast<int>(spec_.output_loss());
  output_loss_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, s>>>(
      grad_mode ? delta_.back().ptr : nullptr, loss_.ptr, correct_.ptr, act_.back().ptr,
      sizes_.back(), rows, kind, labels_.ptr, targets_.ptr, 1.0f / rows);
  GOSSIP_CUDA_CHECK(cudaGetLastError());
  GOSSIP_CUDA_CHECK(
      cudaMemcpyAsync(host_loss_.ptr, loss_.ptr, rows * sizeof(float), cudaMemcpyDeviceToHost, s));
  GOSSIP_CUDA_CHECK(cudaMemcpyAsync(host_correct_.ptr, correct_.ptr, rows * sizeof(int),
                                    cudaMemcpyDeviceToHost, s));
  if (grad_mode) return;  // the caller syncs after queueing the backward pass
  GOSSIP_CUDA_CHECK(cudaStreamSynchronize(s));
  double sum = 0;
  std::int64_t right = 0;
  for (int j = 0; j < rows; ++j) {
    sum += host_loss_.ptr[j];
    right += host_correct_.ptr[j];
  }
  *loss_sum = sum;
  *correct = right;
}

double CudaModel::loss_and_grad(const float* params, const Batch& batch, float* grad) {
  GOSSIP_CHECK_EQ(batch.dim, spec_.input_dim);
  GOSSIP_CHECK_GT(batch.rows, 0);
  const bool regression = spec_.kind == ModelKind::kLeastSquares;
  backend_.begin_compute();
  upload(batch.features.data(), regression ? nullptr : batch.labels.data(),
         regression ? batch.targets.data() : nullptr, batch.rows);
  const int rows = batch.rows;
  forward(params, rows);
  output(rows, true, nullptr, nullptr);

  cudaStream_t s = backend_.compute_stream();
  for (std::size_t l = act_.size(); l-- > 0;) {
    const int in = sizes_[l], out = sizes_[l + 1];
    const float* a_prev = l == 0 ? x_.ptr : act_[l - 1].ptr;
    // dW (out × in) = delta (out × B) · a_prevᵀ
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, out, in, rows, delta_[l].ptr, out, a_prev, in,
         grad + spec_.weight_offset(l), out);
    row_sum_kernel<<<out, kThreads, 0, s>>>(grad + spec_.bias_offset(l), delta_[l].ptr, out, rows);
    if (l > 0) {
      // delta_prev (in × B) = Wᵀ · delta, masked by relu'
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, in, rows, out, params + spec_.weight_offset(l), out,
           delta_[l].ptr, out, delta_[l - 1].ptr, in);
      const long long total = static_cast<long long>(in) * rows;
      relu_backward_kernel<<<blocks_for(total), kThreads, 0, s>>>(delta_[l - 1].ptr,
                                                                  act_[l - 1].ptr, total);
    }
  }
  double penalty = 0;
  if (spec_.l2 > 0) {
    for (std::size_t l = 0; l < act_.size(); ++l) {
      const long long n = static_cast<long long>(sizes_[l]) * sizes_[l + 1];
      axpy_kernel<<<blocks_for(n), kThreads, 0, s>>>(grad + spec_.weight_offset(l), spec_.l2,
                                                     params + spec_.weight_offset(l), n);
      float sq = 0;
      // cuBLAS returns the result to the host: this synchronises, acceptable for the l2 path.
      GOSSIP_CUBLAS_CHECK(cublasSdot(backend_.cublas(), static_cast<int>(n),
                                     params + spec_.weight_offset(l), 1,
                                     params + spec_.weight_offset(l), 1, &sq));
      penalty += sq;
    }
    penalty *= 0.5 * spec_.l2;
  }
  GOSSIP_CUDA_CHECK(cudaGetLastError());
  GOSSIP_CUDA_CHECK(cudaStreamSynchronize(s));
  double sum = 0;
  for (int j = 0; j < rows; ++j) sum += host_loss_.ptr[j];
  return sum / rows + penalty;
}

EvalResult CudaModel::evaluate(const float* params, const Dataset& data) {
  GOSSIP_CHECK_EQ(data.dim, spec_.input_dim);
  backend_.begin_compute();
  const bool regression = spec_.kind == ModelKind::kLeastSquares;
  constexpr std::int64_t kChunk = 4096;
  double loss = 0;
  std::int64_t correct = 0;
  for (std::int64_t begin = 0; begin < data.num_examples; begin += kChunk) {
    const int rows = static_cast<int>(std::min(kChunk, data.num_examples - begin));
    upload(data.features.data() + begin * data.dim,
           regression ? nullptr : data.labels.data() + begin,
           regression ? data.targets.data() + begin : nullptr, rows);
    forward(params, rows);
    double l = 0;
    std::int64_t c = 0;
    output(rows, false, &l, &c);
    loss += l;
    correct += c;
  }
  return EvalResult::from_sums(loss, correct, data.num_examples, regression);
}

}  // namespace

bool is_pinned_host(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    cudaGetLastError();
    return unavailable(std::string("device cuda: no usable CUDA device (") +
                       (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
                       "); use --device cpu or auto");
  }
  if (device_index < 0 || device_index >= n) {
    return invalid_argument("device cuda: index " + std::to_string(device_index) + " but only " +
                            std::to_string(n) + " devices");
  }
  return std::unique_ptr<Backend>(new CudaBackend(device_index));
}

void set_gemm_profiling(Model& model, bool on) {
  auto* cuda_model = dynamic_cast<CudaModel*>(&model);
  GOSSIP_CHECK(cuda_model != nullptr) << "set_gemm_profiling: not a model of the cuda backend";
  cuda_model->set_profile(on);
}

double take_gemm_ms(Model& model) {
  auto* cuda_model = dynamic_cast<CudaModel*>(&model);
  GOSSIP_CHECK(cuda_model != nullptr) << "take_gemm_ms: not a model of the cuda backend";
  return cuda_model->take_gemm_ms();
}

}  // namespace gossip::sgd::cuda
