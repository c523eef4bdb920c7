// The cpu backend: Eigen for the models (cpu/dense_net.h), plain loops the compiler vectorises for
// the flat kernels, OpenMP threads for both. Always built; the reference the cuda backend is held
// against.
//
// Threads: Eigen's thread count is process-global (Eigen::setNbThreads), so the last cpu backend
// created sets it for every Eigen GEMM in the process; the flat kernels use the backend's own
// count.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "sgd/backend.h"

namespace gossip::sgd::cpu {

// threads ≥ 1, or 0 for every core OpenMP reports.
std::unique_ptr<Backend> make_cpu_backend(int threads = 1);

// The flat kernels as free functions (what the cpu backend runs), for callers without a backend.
void mix(float* out, std::span<const MixTerm> terms, float gamma, const float* update,
         std::size_t n, int threads = 1);
void sgd_direction(float* u, float* velocity, const float* x, const float* g, std::size_t n,
                   float momentum, float weight_decay, bool nesterov);
void adamw_direction(float* u, float* m, float* v, const float* x, const float* g, std::size_t n,
                     const AdamWCoefficients& c);

}  // namespace gossip::sgd::cpu
