// The cuda backend's factory. Only sgd/backend.cc and the GPU tests and bench include this (under
// GOSSIP_SGD_CUDA); the implementation (cuBLAS GEMMs, our kernels, streams) is in cuda_backend.cu.
// No CUDA header here.
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

// The GPU part of bench/sgd_bench: wide MLP 784-4096-4096-10 at batch 1024 (samples/s and the
// share of step time outside cuBLAS GEMMs, from CUDA events around each GEMM), and mixing GB/s
// vs a device-to-device copy. Prints to stdout; needs a device.
void print_gpu_bench(double seconds);

}  // namespace gossip::sgd::cuda
