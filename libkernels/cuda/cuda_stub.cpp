// Built instead of the .cu sources when the CUDA Toolkit is absent.
#include "fusectl/kernels/cuda_device.h"

namespace fusectl::cuda {

bool builtWithCuda() { return false; }
int deviceCount() { return 0; }
std::string describe() { return "fusectl was built without CUDA (no CUDA Toolkit found)"; }

}  // namespace fusectl::cuda
