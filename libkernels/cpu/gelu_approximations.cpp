// fusectl::GeluTanh and fusectl::QuickGelu, the Gelu approximations fuse-gelu writes where no
// standard op computes them: one vectorised pass over memory each (vec_kernels.h). QuickGelu,
// x * sigmoid(1.702 x), is vec::swishRow. float16/bfloat16 run the float32 loop on a
// float32 copy of X and round Y once.
#include <algorithm>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

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
    vec::swishRow(xp + begin, nullptr, yp + begin, end - begin, 1.702f);
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
