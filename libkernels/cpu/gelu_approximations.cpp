// fusectl::GeluTanh and fusectl::QuickGelu, the Gelu approximations fuse-gelu writes where no
// standard op computes them: one vectorised pass over memory each (vec_kernels.h). QuickGelu,
// x * sigmoid(1.702 x), scales a block into a small stack buffer (it stays in L1), runs the
// vectorised Sigmoid on it and multiplies x back in. float16/bfloat16 run the float32 loop on a
// float32 copy of X and round Y once.
#include <algorithm>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

constexpr int64_t kBlock = 1024;  // floats per block: 4 KiB
constexpr int64_t kGrain = 1 << 15;

const HostTensor& floatInput(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloatOrHalf(ctx, x, "X");
  return x;
}

void runGeluTanh(KernelContext& ctx) {
  const HostTensor& x = floatInput(ctx);
  const FloatView xv(x);
  FloatSink ys(ctx.allocateOutput(0, x.dtype(), x.dims()));
  const float* xp = xv.data();
  float* yp = ys.data();
  parallelFor(x.numel(), ctx.numThreads(), kGrain, [&](int64_t begin, int64_t end) {
    vec::unary(vec::Unary::GeluTanh, xp + begin, yp + begin, end - begin);
  });
  ys.commit();
}

void runQuickGelu(KernelContext& ctx) {
  const HostTensor& x = floatInput(ctx);
  const FloatView xv(x);
  FloatSink ys(ctx.allocateOutput(0, x.dtype(), x.dims()));
  const float* xp = xv.data();
  float* yp = ys.data();
  parallelFor(x.numel(), ctx.numThreads(), kGrain, [&](int64_t begin, int64_t end) {
    float gate[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      for (int64_t i = 0; i < n; ++i) gate[i] = 1.702f * xp[b + i];
      vec::unary(vec::Unary::Sigmoid, gate, gate, n);
      for (int64_t i = 0; i < n; ++i) yp[b + i] = xp[b + i] * gate[i];
    }
  });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerGeluApproximationKernels(KernelRegistry& r) {
  r.add({"fusectl", "GeluTanh", 1, 1000, cpu::runGeluTanh});
  r.add({"fusectl", "QuickGelu", 1, 1000, cpu::runQuickGelu});
}

}  // namespace fusectl::kernels
