// DeformConv (opset 19, 2-D): a convolution whose kernel taps sample the input at learned
// fractional offsets (deformable convolution v1; v2 with the optional mask).
//
//   Y[n, o, i, j] = B[o] + sum_{c in o's group, kh, kw}
//       W[o, c, kh, kw] * mask[n, g, kh, kw, i, j] * bilinear(X[n, c], p)
//   p = (i * stride_h - pad_top + kh * dilation_h + offset[n, g, kh, kw, 0, i, j],
//        j * stride_w - pad_left + kw * dilation_w + offset[n, g, kh, kw, 1, i, j])
//
// g = c / (C / offset_group). bilinear() reads zero outside the image, corner by corner, as
// GridSample with align_corners and zero padding does (the operator is defined through it).
// The sampled columns of one (n, i, j) are gathered once per offset group and reused by every
// output channel.
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// x[h, w] bilinearly interpolated; taps outside [0, H) x [0, W) contribute zero.
float bilinearZeroPadded(const float* x, int64_t H, int64_t W, float h, float w) {
  // Wholly outside (or NaN): every tap is padding; also keeps floor() within int64_t.
  if (!(h > -1 && h < static_cast<float>(H) && w > -1 && w < static_cast<float>(W))) return 0.0f;
  const float fh = std::floor(h), fw = std::floor(w);
  const int64_t h0 = static_cast<int64_t>(fh), w0 = static_cast<int64_t>(fw);
  const float dh = h - fh, dw = w - fw;
  const auto at = [&](int64_t y, int64_t z) {
    return y >= 0 && y < H && z >= 0 && z < W ? x[y * W + z] : 0.0f;
  };
  return (1 - dh) * ((1 - dw) * at(h0, w0) + dw * at(h0, w0 + 1)) +
         dh * ((1 - dw) * at(h0 + 1, w0) + dw * at(h0 + 1, w0 + 1));
}

void deformConvKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  const HostTensor& off = ctx.requireInput(2);
  const HostTensor* bias = ctx.input(3);
  const HostTensor* mask = ctx.input(4);
  if (!isFloatComputeType(x.dtype())) ctx.fail("X must be a float tensor");
  if (x.rank() != 4 || w.rank() != 4)
    ctx.fail(fmt::format("only 2-D DeformConv is supported: X {} and W {} must be rank 4",
                         formatDims(x.dims()), formatDims(w.dims())));
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), Wd = x.dim(3);
  const int64_t O = w.dim(0), Cg = w.dim(1);
  const int64_t group = ctx.attrInt("group", 1), og = ctx.attrInt("offset_group", 1);
  if (group <= 0 || og <= 0) ctx.fail("group and offset_group must be positive");
  if (Cg * group != C || O % group != 0)
    ctx.fail(fmt::format("W {} does not fit X {} with group = {}", formatDims(w.dims()),
                         formatDims(x.dims()), group));
  if (C % og != 0) ctx.fail(fmt::format("channels ({}) must divide by offset_group ({})", C, og));
  const std::vector<int64_t> kshape = ctx.attrInts("kernel_shape", {w.dim(2), w.dim(3)});
  if (kshape != std::vector<int64_t>{w.dim(2), w.dim(3)})
    ctx.fail("kernel_shape disagrees with W's spatial dims");
  const Window win = resolveWindow(ctx, {H, Wd}, kshape, false);
  const int64_t KH = kshape[0], KW = kshape[1], K = KH * KW;
  const int64_t OH = win.out[0], OW = win.out[1];
  if (off.dims() != std::vector<int64_t>{N, og * 2 * K, OH, OW})
    ctx.fail(fmt::format("offset dims {} must be [{}, {}, {}, {}]", formatDims(off.dims()), N,
                         og * 2 * K, OH, OW));
  if (mask && mask->dims() != std::vector<int64_t>{N, og * K, OH, OW})
    ctx.fail(fmt::format("mask dims {} must be [{}, {}, {}, {}]", formatDims(mask->dims()), N,
                         og * K, OH, OW));
  if (bias && (bias->rank() != 1 || bias->dim(0) != O))
    ctx.fail(fmt::format("B dims {} must be [{}]", formatDims(bias->dims()), O));

  FloatView xv(x), wv(w), ov(off), mv(mask), bv(bias);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), {N, O, OH, OW});
  FloatSink yv(out);
  const int64_t c_per_og = C / og, o_per_g = O / group;
  const int64_t positions = OH * OW;
  parallelFor(N * positions, ctx.numThreads(), 16, [&](int64_t begin, int64_t end) {
    std::vector<float> cols(static_cast<size_t>(C * K));  // sampled input, [C, K]
    for (int64_t np = begin; np < end; ++np) {
      const int64_t n = np / positions, pos = np % positions, i = pos / OW, j = pos % OW;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t g = c / c_per_og;
        const float* img = xv.data() + (n * C + c) * H * Wd;
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t k = kh * KW + kw;
            const int64_t oc = ((n * og + g) * K + k) * 2;
            const float dy = ov[oc * positions + pos], dx = ov[(oc + 1) * positions + pos];
            const float h =
                static_cast<float>(i * win.strides[0] - win.pad_begin[0] + kh * win.dilations[0]) +
                dy;
            const float wc =
                static_cast<float>(j * win.strides[1] - win.pad_begin[1] + kw * win.dilations[1]) +
                dx;
            float v = bilinearZeroPadded(img, H, Wd, h, wc);
            if (mv) v *= mv[((n * og + g) * K + k) * positions + pos];
            cols[static_cast<size_t>(c * K + k)] = v;
          }
      }
      for (int64_t o = 0; o < O; ++o) {
        const int64_t c0 = (o / o_per_g) * Cg;
        const float* wo = wv.data() + o * Cg * K;
        const float* col = cols.data() + c0 * K;
        float acc = bv ? bv[o] : 0.0f;
        for (int64_t t = 0; t < Cg * K; ++t) acc += wo[t] * col[t];
        yv.data()[(n * O + o) * positions + pos] = acc;
      }
    }
  });
  yv.commit();
}

}  // namespace
}  // namespace cpu

void registerDeformConvKernels(KernelRegistry& r) {
  r.add({"", "DeformConv", 19, 1000, cpu::deformConvKernel});
}

}  // namespace fusectl::kernels
