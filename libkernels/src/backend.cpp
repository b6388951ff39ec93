// The CPU backend: host memory and the built-in kernels.
#include "fusectl/kernels/backend.h"

#include <cstring>

#include "fusectl/graph/error.h"

namespace fusectl::kernels {

namespace {
[[noreturn]] void noRecording(const Backend& b) {
  throw Error(ErrorKind::Unsupported,
              "the " + deviceName(b.device()) + " backend does not record runs");
}
}  // namespace

void Backend::beginCapture() const { noRecording(*this); }
std::unique_ptr<Backend::RecordedRun> Backend::endCapture() const { noRecording(*this); }
void Backend::replay(const RecordedRun&) const { noRecording(*this); }
std::shared_ptr<void> Backend::allocatePinned(size_t) const { noRecording(*this); }
void Backend::copyFromPinnedAsync(void*, const void*, size_t) const { noRecording(*this); }
void Backend::copyToPinnedAsync(void*, const void*, size_t) const { noRecording(*this); }

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
