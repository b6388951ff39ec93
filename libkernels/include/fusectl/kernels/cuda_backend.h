// The CUDA backend (backend.h): device memory from one arena, the CUDA kernels of
// libkernels/cuda, one stream, CUDA-event timing of profiled nodes and a count of kernel
// launches. Ops without a CUDA kernel (or of a dtype the CUDA kernels do not take) run on the
// CPU through the executor's fallback, with the copies counted in ExecutionStats.
#pragma once

#include "fusectl/kernels/backend.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

// The process's CUDA backend on device 0, created on first use and never destroyed. Throws
// fusectl::Error(Unsupported) with the reason (cuda::describe()) when fusectl was built without
// CUDA or no device is usable.
const Backend& cudaBackend();

// The CUDA kernels (Device::Cuda entries). Filled without touching a GPU, so which nodes of a
// model would run on the device and which would fall back can be listed anywhere; empty when
// fusectl was built without CUDA.
const KernelRegistry& cudaKernelRegistry();

}  // namespace fusectl::kernels
