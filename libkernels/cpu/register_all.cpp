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
// The fused norms of domain fusectl (norms_fused.cpp).
void registerFusedNormKernels(KernelRegistry& r);

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
  registerFusedNormKernels(r);
}

}  // namespace fusectl::kernels
