// Device discovery through the CUDA runtime. A missing driver or GPU is a normal state here
// (CI has none), reported as zero devices with the runtime's reason.
#include <cuda_runtime.h>

#include <string>

#include "fusectl/kernels/cuda_device.h"

namespace fusectl::cuda {

bool builtWithCuda() { return true; }

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return count;
}

std::string describe() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string version = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return "CUDA " + version + ": no usable device (" + cudaGetErrorString(err) + ")";
  }
  std::string out = "CUDA " + version + ", " + std::to_string(count) + " device(s)";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) out += std::string(i ? ", " : ": ") + prop.name;
  }
  return out;
}

}  // namespace fusectl::cuda
