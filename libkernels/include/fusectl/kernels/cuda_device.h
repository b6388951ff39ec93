// What CUDA can do in this process: whether fusectl was built with CUDA, and whether a device
// is usable now. CUDA tests and `profile --device cuda` ask this before touching the GPU.
#pragma once

#include <string>

namespace fusectl::cuda {

bool builtWithCuda();
// Number of usable devices; 0 when not built with CUDA, no driver, or no GPU.
int deviceCount();
// One line for users: "CUDA 13.0, 1 device: NVIDIA H200" or why CUDA is unavailable.
std::string describe();

}  // namespace fusectl::cuda
