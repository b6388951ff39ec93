// LpPool and LpNormalization: the p-norm over a sliding window and along one axis.
//
// LpPool: y = (sum over the window of |x|^p)^(1/p); padding contributes nothing, so a window
// partly in the padding is the norm of its valid taps. Its geometry (pads, auto_pad, strides,
// dilations, ceil_mode) is the pools' (resolveWindow). LpNormalization: y = x / ||x||_p along
// `axis` for p = 1 or 2; a zero norm gives 0 rather than NaN, as ONNX Runtime does.
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void lpPoolKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("X must be a float tensor");
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  const size_t r = x.rank() - 2;
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (ks.size() != r) ctx.fail("kernel_shape must have one value per spatial dim");
  const Window w = resolveWindow(ctx, std::vector<int64_t>(x.dims().begin() + 2, x.dims().end()),
                                 std::move(ks), ctx.attrInt("ceil_mode", 0) != 0);
  const double p = static_cast<double>(ctx.attrInt("p", 2));
  if (p <= 0) ctx.fail("p must be positive");
  std::vector<int64_t> out_dims = {x.dim(0), x.dim(1)};
  out_dims.insert(out_dims.end(), w.out.begin(), w.out.end());
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t in_plane = product(x.dims(), 2), out_plane = product(out_dims, 2);
  FloatView xv(x);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), out_dims);
  FloatSink sink(out);
  // Only the taps inside the input are visited, axis by axis (windowTapRange): a file may ask
  // for 1000 x 1000 over 32 x 32 with SAME padding.
  std::vector<int64_t> opos(r), start(r), j0(r), j1(r), j(r), in_stride(r);
  for (size_t i = 0; i < r; ++i) in_stride[i] = product(w.in, i + 1);
  for (int64_t o = 0; o < out_plane; ++o) {
    int64_t rest = o;
    bool empty = false;
    for (size_t i = r; i-- > 0;) {
      opos[i] = rest % w.out[i];
      rest /= w.out[i];
      start[i] = opos[i] * w.strides[i] - w.pad_begin[i];
      windowTapRange(start[i], w.dilations[i], w.kernel[i], 0, w.in[i], &j0[i], &j1[i]);
      empty = empty || j0[i] == j1[i];
    }
    for (int64_t pl = 0; pl < planes; ++pl) {
      const float* src = xv.data() + pl * in_plane;
      double acc = 0;
      if (!empty) {
        j = j0;
        while (true) {
          int64_t off = 0;
          for (size_t i = 0; i < r; ++i) off += (start[i] + j[i] * w.dilations[i]) * in_stride[i];
          acc += std::pow(std::fabs(static_cast<double>(src[off])), p);
          size_t i = r;
          while (i-- > 0 && ++j[i] == j1[i]) j[i] = j0[i];
          if (i == static_cast<size_t>(-1)) break;
        }
      }
      sink.data()[pl * out_plane + o] = static_cast<float>(std::pow(acc, 1.0 / p));
    }
  }
  sink.commit();
}

void lpNormalizationKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("input must be a float tensor");
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < -rank || axis >= rank)
    ctx.fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  if (axis < 0) axis += rank;
  const int64_t p = ctx.attrInt("p", 2);
  if (p != 1 && p != 2) ctx.fail(fmt::format("p must be 1 or 2, got {}", p));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t outer = product(x.dims(), 0, ax), len = x.dim(ax),
                inner = product(x.dims(), ax + 1);
  FloatView xv(x);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink sink(out);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * len * inner + i;
      double norm = 0;
      for (int64_t k = 0; k < len; ++k) {
        const double v = xv[base + k * inner];
        norm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2) norm = std::sqrt(norm);
      for (int64_t k = 0; k < len; ++k)
        sink.data()[base + k * inner] =
            norm == 0 ? 0.0f : static_cast<float>(xv[base + k * inner] / norm);
    }
  }
  sink.commit();
}

}  // namespace
}  // namespace cpu

void registerLpKernels(KernelRegistry& r) {
  r.add({"", "LpPool", 1, 1000, cpu::lpPoolKernel});
  r.add({"", "LpNormalization", 1, 1000, cpu::lpNormalizationKernel});
}

}  // namespace fusectl::kernels
