// The one list of CUDA kernel groups; cudaKernelRegistry() calls it once. Each group lives in
// its own file and registers Device::Cuda entries (cuda_common.h's addCudaKernel).
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

namespace cuda {
void registerElementwiseKernels(KernelRegistry& r);  // elementwise.cu: unary, binary, Where, Cast, SwiGLU
void registerMovementKernels(KernelRegistry& r);     // movement.cu: Reshape..., Transpose, Concat, Slice, Gather
void registerNormKernels(KernelRegistry& r);         // norms.cu: Softmax, LayerNorm, RMSNorm, skips, BatchNorm
void registerGemmKernels(KernelRegistry& r);         // gemm_cublaslt.cpp: MatMul, Gemm, FusedGemm, FusedMatMul
void registerConvKernels(KernelRegistry& r);         // conv_cudnn.cpp: Conv, FusedConv, pooling
void registerElementwiseProgramKernels(KernelRegistry& r);  // elementwise_program_cuda.cpp (NVRTC)
void registerAttentionKernels(KernelRegistry& r);    // attention.cu
void registerRotaryKernels(KernelRegistry& r);       // rotary.cu: the rotary embeddings, QK-norm
}  // namespace cuda

void registerCudaKernels(KernelRegistry& r) {
  cuda::registerElementwiseKernels(r);
  cuda::registerMovementKernels(r);
  cuda::registerNormKernels(r);
  cuda::registerGemmKernels(r);
  cuda::registerConvKernels(r);
  cuda::registerElementwiseProgramKernels(r);
  cuda::registerAttentionKernels(r);
  cuda::registerRotaryKernels(r);
}

}  // namespace fusectl::kernels
