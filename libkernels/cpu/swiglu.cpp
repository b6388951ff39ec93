// fusectl::SwiGLU: Y = G * sigmoid(G) * U, the gated unit of LLaMA-style MLPs, in one pass over
// memory (vec::swishRow: the sigmoid and both products in the vector ISA). G and U must have the
// same shape, Y has it. float16/bfloat16 run the float32 loop on float32 copies of the inputs
// and round Y once.
#include <algorithm>
#include <string>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {


void runSwiGLU(KernelContext& ctx) {
  const HostTensor& g = ctx.requireInput(0);
  const HostTensor& u = ctx.requireInput(1);
  requireFloatOrHalf(ctx, g, "G");
  requireSameDType(ctx, g, "G", &u, "U");
  if (g.dims() != u.dims()) {
    ctx.fail("G and U must have the same shape (SwiGLU does not broadcast)");
  }
  const FloatView gv(g), uv(u);
  FloatSink ys(ctx.allocateOutput(0, g.dtype(), g.dims()));
  const float* gp = gv.data();
  const float* up = uv.data();
  float* yp = ys.data();
  parallelFor(g.numel(), ctx.numThreads(), 1 << 15, [&](int64_t begin, int64_t end) {
    vec::swishRow(gp + begin, up + begin, yp + begin, end - begin, 1.f);
  });
  ys.commit();
}

// X = [rows, 2I]: each row's gate is its first half, its up projection the second.
void runSwiGLUPacked(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloatOrHalf(ctx, x, "X");
  const std::vector<int64_t> dims = swigluPackedOutputDims(ctx, x);
  const int64_t inter = dims.back();
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), dims);
  if (y.numel() == 0) return;
  const int64_t rows = y.numel() / inter;
  const FloatView xv(x);
  FloatSink ys(y);
  const float* xp = xv.data();
  float* yp = ys.data();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / inter);
  parallelFor(rows, ctx.numThreads(), grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = xp + r * 2 * inter;
      vec::swishRow(g, g + inter, yp + r * inter, inter, 1.f);
    }
  });
  ys.commit();
}

}  // namespace

std::vector<int64_t> swigluPackedOutputDims(const KernelContext& ctx, const HostTensor& x) {
  if (x.rank() == 0 || x.dims().back() % 2 != 0)
    ctx.fail("X's last dim must be even (gate and up side by side), X is " + formatDims(x.dims()));
  std::vector<int64_t> dims = x.dims();
  dims.back() /= 2;
  return dims;
}

}  // namespace cpu

void registerSwiGLUKernels(KernelRegistry& r) {
  r.add({"fusectl", "SwiGLU", 1, 1000, cpu::runSwiGLU});
  r.add({"fusectl", "SwiGLUPacked", 1, 1000, cpu::runSwiGLUPacked});
}

}  // namespace fusectl::kernels
