// Device names and run-time backend selection. The cuda factory is linked in only when the build
// has it (GOSSIP_SGD_CUDA, set by sgd/CMakeLists.txt with the cuda library); otherwise asking for
// cuda is Unimplemented, never a crash.
#include "sgd/backend.h"

#include <algorithm>

#include "sgd/cpu/cpu_backend.h"
#if GOSSIP_SGD_CUDA
#include "sgd/cuda/cuda_backend.h"
#endif

namespace gossip::sgd {

double Model::loss_and_grad_rows(const float* params, const Dataset& data,
                                 const AlignedRows* /*aligned*/,
                                 std::span<const std::int64_t> indices, float* grad) {
  gather(data, indices, rows_scratch_);
  return loss_and_grad(params, rows_scratch_, grad);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ && release_) release_(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    release_ = std::move(other.release_);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ && release_) release_(data_);
}

DeviceBuffer Backend::alloc_host(std::size_t n) {
  float* p = new float[std::max<std::size_t>(n, 1)]();
  return DeviceBuffer(p, n, [](float* q) { delete[] q; });
}

bool cuda_built() {
#if GOSSIP_SGD_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if GOSSIP_SGD_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

Result<std::unique_ptr<Backend>> make_backend(Device device, int cpu_threads) {
  if (device == Device::kCpu) return cpu::make_cpu_backend(cpu_threads);
#if GOSSIP_SGD_CUDA
  if (device == Device::kAuto && cuda::device_count() == 0) {
    return cpu::make_cpu_backend(cpu_threads);
  }
  auto cuda_backend = cuda::make_cuda_backend(0);
  if (cuda_backend.is_ok() || device == Device::kCuda) return cuda_backend;
  return cpu::make_cpu_backend(cpu_threads);
#else
  if (device == Device::kCuda) {
    return unimplemented(
        "device cuda: this build has no CUDA backend (nvcc was not found or GOSSIP_CUDA=OFF); "
        "use --device cpu or auto");
  }
  return cpu::make_cpu_backend(cpu_threads);
#endif
}

}  // namespace gossip::sgd
