// fusectl::SwiGLU: Y = G * sigmoid(G) * U, the gated unit of LLaMA-style MLPs, in one pass over
// memory: each block of G goes through the vectorised Sigmoid into a small stack buffer (it
// stays in L1), then one loop multiplies in G and U. float32 only (fuse-swiglu emits nothing
// else); G and U must have the same shape, Y has it.
#include <algorithm>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

constexpr int64_t kBlock = 1024;  // floats per Sigmoid block: 4 KiB, well inside L1

void runSwiGLU(KernelContext& ctx) {
  const HostTensor& g = ctx.requireInput(0);
  const HostTensor& u = ctx.requireInput(1);
  if (g.dtype() != DType::Float || u.dtype() != DType::Float) {
    ctx.fail("G and U must be float32, they are " + std::string(dtypeName(g.dtype())) + " and " +
             std::string(dtypeName(u.dtype())));
  }
  if (g.dims() != u.dims()) {
    ctx.fail("G and U must have the same shape (SwiGLU does not broadcast)");
  }
  HostTensor& y = ctx.allocateOutput(0, DType::Float, g.dims());
  const float* gp = g.data<float>();
  const float* up = u.data<float>();
  float* yp = y.mutableData<float>();
  parallelFor(g.numel(), ctx.numThreads(), 1 << 15, [&](int64_t begin, int64_t end) {
    float gate[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      vec::unary(vec::Unary::Sigmoid, gp + b, gate, n);
      for (int64_t i = 0; i < n; ++i) yp[b + i] = gp[b + i] * gate[i] * up[b + i];
    }
  });
}

}  // namespace
}  // namespace cpu

void registerSwiGLUKernels(KernelRegistry& r) {
  r.add({"fusectl", "SwiGLU", 1, 1000, cpu::runSwiGLU});
}

}  // namespace fusectl::kernels
