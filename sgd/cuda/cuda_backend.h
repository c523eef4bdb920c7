// The cuda backend's factory. Only sgd/backend.cc includes this (under GOSSIP_HAVE_CUDA); the
// implementation (cuBLAS GEMMs, our kernels, streams) is in cuda_backend.cu. No CUDA header here.
#pragma once

#include <memory>

#include "common/status.h"
#include "sgd/backend.h"

namespace gossip::sgd::cuda {

// Devices the CUDA runtime reports; 0 when there is no driver or no device.
int device_count();
// Unavailable (with the CUDA runtime's message) when no device can be used.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index = 0);

}  // namespace gossip::sgd::cuda
