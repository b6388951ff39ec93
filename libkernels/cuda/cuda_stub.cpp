// Built instead of the CUDA sources when the CUDA Toolkit is absent.
#include "fusectl/graph/error.h"
#include "fusectl/kernels/cuda_backend.h"
#include "fusectl/kernels/cuda_device.h"

namespace fusectl::cuda {

bool builtWithCuda() { return false; }
int deviceCount() { return 0; }
std::string describe() { return "fusectl was built without CUDA (no CUDA Toolkit found)"; }

}  // namespace fusectl::cuda

namespace fusectl::kernels {

const Backend& cudaBackend() {
  throw Error(ErrorKind::Unsupported, "no CUDA backend: " + cuda::describe());
}

const KernelRegistry& cudaKernelRegistry() {
  static const KernelRegistry empty;
  return empty;
}

}  // namespace fusectl::kernels
