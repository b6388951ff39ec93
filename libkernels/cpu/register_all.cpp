// The one list of built-in CPU kernel groups; KernelRegistry::global() calls it once.
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

// Compute-heavy kernels (conv.cpp, gemm.cpp, pool.cpp, norm.cpp, resize.cpp, quantize.cpp).
void registerConvKernels(KernelRegistry& r);
void registerGemmKernels(KernelRegistry& r);
void registerPoolKernels(KernelRegistry& r);
void registerNormKernels(KernelRegistry& r);
void registerResizeKernels(KernelRegistry& r);
void registerQuantizeKernels(KernelRegistry& r);
// Elementwise, reductions and data movement (elementwise.cpp, reduce.cpp, tensor_ops.cpp).
void registerElementwiseKernels(KernelRegistry& r);
void registerReduceKernels(KernelRegistry& r);
void registerTensorKernels(KernelRegistry& r);
// Issue 12's transformer ops, one file each.
void registerSwiGLUKernels(KernelRegistry& r);             // swiglu.cpp
void registerGeluApproximationKernels(KernelRegistry& r);  // gelu_approximations.cpp

void registerAllKernels(KernelRegistry& r) {
  registerConvKernels(r);
  registerGemmKernels(r);
  registerPoolKernels(r);
  registerNormKernels(r);
  registerResizeKernels(r);
  registerQuantizeKernels(r);
  registerElementwiseKernels(r);
  registerReduceKernels(r);
  registerTensorKernels(r);
  registerSwiGLUKernels(r);
  registerGeluApproximationKernels(r);
}

}  // namespace fusectl::kernels
