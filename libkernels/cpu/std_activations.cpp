// The standard Swish (opset 24: Y = X * sigmoid(alpha * X)) and SwiGLU (opset 28: Y = Swish_alpha(A)
// * B, A and B of one shape, no broadcasting). Unlike fusectl::SwiGLU (swiglu.cpp: float32, no
// alpha) these take alpha and any float type: half, bfloat16 and double are computed in float32
// (FloatView) and stored back. Both are one vectorised pass (vec::swishRow).
#include <algorithm>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// y[i] = x[i] * sigmoid(alpha * x[i]) * (u ? u[i] : 1) over [0, n), threaded.
void swishTimes(const float* x, const float* u, float* y, int64_t n, float alpha, int threads) {
  parallelFor(n, threads, 1 << 15, [&](int64_t begin, int64_t end) {
    vec::swishRow(x + begin, u ? u + begin : nullptr, y + begin, end - begin, alpha);
  });
}

void requireFloatType(const KernelContext& ctx, const HostTensor& t, const char* what) {
  if (!isFloatComputeType(t.dtype())) {
    ctx.fail(std::string(what) + " must be float, float16, bfloat16 or double, it is " +
             std::string(dtypeName(t.dtype())));
  }
}

void runSwish(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloatType(ctx, x, "X");
  const float alpha = ctx.attrFloat("alpha", 1.f);
  HostTensor& y = ctx.allocateOutputOverInputs(0, x.dtype(), x.dims());
  FloatView xf(x);
  FloatSink ys(y);
  swishTimes(xf.data(), nullptr, ys.data(), x.numel(), alpha, ctx.numThreads());
  ys.commit();
}

void runStdSwiGLU(KernelContext& ctx) {
  const HostTensor& a = ctx.requireInput(0);
  const HostTensor& b = ctx.requireInput(1);
  requireFloatType(ctx, a, "A");
  if (b.dtype() != a.dtype()) {
    ctx.fail("A and B must have one element type, they are " + std::string(dtypeName(a.dtype())) +
             " and " + std::string(dtypeName(b.dtype())));
  }
  if (a.dims() != b.dims()) {
    ctx.fail("A " + formatDims(a.dims()) + " and B " + formatDims(b.dims()) +
             " must have the same shape (SwiGLU does not broadcast)");
  }
  const float alpha = ctx.attrFloat("alpha", 1.f);
  HostTensor& y = ctx.allocateOutputOverInputs(0, a.dtype(), a.dims());
  FloatView af(a), bf(b);
  FloatSink ys(y);
  swishTimes(af.data(), bf.data(), ys.data(), a.numel(), alpha, ctx.numThreads());
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerStdActivationKernels(KernelRegistry& r) {
  r.add({"", "Swish", 24, 1000, cpu::runSwish});
  r.add({"", "SwiGLU", 28, 1000, cpu::runStdSwiGLU});
}

}  // namespace fusectl::kernels
