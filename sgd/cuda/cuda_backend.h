// The cuda backend's factory. Only sgd/backend.cc and the GPU tests and bench include this (under
// GOSSIP_SGD_CUDA); the implementation (cuBLAS GEMMs, our kernels, streams) is in cuda_backend.cu,
// compiled into gossip_sgd (sgd/cuda/CMakeLists.txt). No CUDA header here.
#pragma once

#include <memory>

#include "common/status.h"
#include "sgd/backend.h"

namespace gossip::sgd::cuda {

// Devices the CUDA runtime reports; 0 when there is no driver or no device.
int device_count();
// Unavailable (with the CUDA runtime's message) when no device can be used.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index = 0);

// Whether `p` points into page-locked host memory registered with the CUDA runtime (tests).
bool is_pinned_host(const void* p);

// GEMM timing (bench/sgd_bench's share of a step outside cuBLAS): while on, every cuBLAS GEMM of
// `model` is bracketed by CUDA events; take_gemm_ms() waits for the compute stream and returns the
// milliseconds those GEMMs took since its last call. `model` must come from a cuda backend's
// make_model (a check fails otherwise). Not thread-safe with the model's own calls.
void set_gemm_profiling(Model& model, bool on);
double take_gemm_ms(Model& model);

}  // namespace gossip::sgd::cuda
