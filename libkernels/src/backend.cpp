// The CPU backend: host memory and the built-in kernels.
#include "fusectl/kernels/backend.h"

#include <cstring>

namespace fusectl::kernels {

CpuBackend::CpuBackend(const KernelRegistry& kernels) : kernels_(kernels) {}

std::shared_ptr<DeviceAllocator> CpuBackend::allocator() const { return hostAllocator(); }

void CpuBackend::copyToHost(void* host_dst, const void* device_src, size_t bytes) const {
  if (bytes) std::memcpy(host_dst, device_src, bytes);
}

void CpuBackend::copyFromHost(void* device_dst, const void* host_src, size_t bytes) const {
  if (bytes) std::memcpy(device_dst, host_src, bytes);
}

const Backend& cpuBackend() {
  static const CpuBackend* backend = new CpuBackend();  // never destroyed, like the registry
  return *backend;
}

}  // namespace fusectl::kernels
