// fusectl::RotaryEmbedding, InterleavedRotaryEmbedding and QKNormRotaryEmbedding (docs/ops.md):
// the rotate_half (or neighbouring-pair) rotation of each head row, with the QK-norm variant
// normalising the row first.
//
// One row of D values at a time: the QK-norm row is normalised into a small buffer (it stays in
// L1), then both halves are rotated from it and Y's row is stored once. The exported graph reads
// and writes five intermediates of X's shape (two Slices, Neg, Concat, two Muls) per rotation,
// and the norm's output once more.
//
// The arithmetic is the exported nodes' own, in float32 and in their order, so that the fused
// node gives the graph's numbers: the norm is x * (1 / sqrt(mean(x^2) + eps)) * scale as
// fusectl::RMSNorm computes it (vec::rmsNormRow, the mean in double), and the rotation
// x * cos + (-x2) * sin, which is x * cos - x2 * sin exactly. float16/bfloat16 nodes compute
// the same on float32 copies of their inputs and round Y once: the normalised row is never
// rounded to half.
#include <fmt/format.h>

#include <vector>

#include "compute_common.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// Neighbouring pairs (x[2k], x[2k + 1]): GPT-J's rotate_every_two. rotate_half is
// vec::rotateHalfRow, which AttentionPackedRotary calls too, so that both rotate to the same bits.
void rotatePairs(const float* x, float* y, int64_t half, const float* c, const float* s) {
  for (int64_t k = 0; k < half; ++k) {
    const float x1 = x[2 * k], x2 = x[2 * k + 1];
    y[2 * k] = x1 * c[2 * k] + (-x2) * s[2 * k];
    y[2 * k + 1] = x2 * c[2 * k + 1] + x1 * s[2 * k + 1];
  }
}

void runRotary(KernelContext& ctx, bool qk_norm, bool interleaved = false) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloatOrHalf(ctx, x, "X");
  if (x.rank() == 0) ctx.fail("X must have at least one dim");
  const int64_t rank = static_cast<int64_t>(x.rank());
  const int64_t d = x.dim(rank - 1);
  if (d % 2 != 0) ctx.fail(fmt::format("X's last dim {} is odd; rotate_half needs it even", d));
  const int64_t half = d / 2;
  size_t next = 1;
  std::vector<float> scale;
  float eps = 0.f;
  if (qk_norm) {
    if (!ctx.node().hasAttr("epsilon"))
      ctx.fail("needs 'epsilon' (its function body cannot default it)");
    eps = ctx.attrFloat("epsilon", 1e-5f);
    const HostTensor& scale_t = ctx.requireInput(next++);
    requireSameDType(ctx, x, "X", &scale_t, "Scale");
    FloatView sv(scale_t);
    if (sv.size() == d) {
      scale.assign(sv.data(), sv.data() + d);
    } else if (sv.size() == 1) {
      scale.assign(static_cast<size_t>(d), sv[0]);
    } else {
      ctx.fail(fmt::format("Scale has {} elements; X's last dim is {}", sv.size(), d));
    }
  }
  const HostTensor& cos_t = ctx.requireInput(next);
  const HostTensor& sin_t = ctx.requireInput(next + 1);
  requireSameDType(ctx, x, "X", &cos_t, "Cos");
  requireSameDType(ctx, x, "X", &sin_t, "Sin");
  if (cos_t.dims() != sin_t.dims()) ctx.fail("Cos and Sin differ in shape");
  const std::vector<int64_t> strides = rotaryTableStrides(ctx, x, cos_t, "Cos");
  FloatView cf(cos_t), sf(sin_t);

  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  if (x.numel() == 0) return;
  const FloatView xv(x);
  FloatSink ys(y);
  const float* xd = xv.data();
  float* yd = ys.data();
  const int64_t rows = x.numel() / d;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(d, 1));
  parallelFor(rows, ctx.numThreads(), grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> normed(qk_norm ? static_cast<size_t>(d) : 0);
    for (int64_t r = r0; r < r1; ++r) {
      // The table row of X's row r: its leading indices, innermost first.
      int64_t table_offset = 0;
      for (int64_t i = rank - 2, rest = r; i >= 0; --i) {
        const int64_t extent = x.dim(i);
        table_offset += (rest % extent) * strides[static_cast<size_t>(i)];
        rest /= extent;
      }
      const float* src = xd + r * d;
      if (qk_norm) {
        vec::rmsNormRow(src, nullptr, nullptr, normed.data(), d, scale.data(), eps);
        src = normed.data();
      }
      (interleaved ? rotatePairs : vec::rotateHalfRow)(src, yd + r * d, half,
                                                       cf.data() + table_offset,
                                                       sf.data() + table_offset);
    }
  });
  ys.commit();
}

}  // namespace

std::vector<int64_t> rotaryTableStrides(const KernelContext& ctx, const HostTensor& x,
                                        const HostTensor& table, const char* what) {
  return rotaryTableStrides(ctx, x.dims(), table, what);
}

std::vector<int64_t> rotaryTableStrides(const KernelContext& ctx,
                                        const std::vector<int64_t>& x_dims,
                                        const HostTensor& table, const char* what) {
  const size_t rank = x_dims.size(), trank = table.rank();
  const int64_t d = rank == 0 ? 0 : x_dims.back();
  if (trank == 0 || trank > rank || table.dims().back() != d) {
    ctx.fail(fmt::format("{} {} does not broadcast into X {} along its last dim {}", what,
                         formatDims(table.dims()), formatDims(x_dims), d));
  }
  std::vector<int64_t> strides(rank - 1, 0);
  int64_t stride = d;
  for (size_t i = trank - 1; i-- > 0;) {
    const int64_t td = table.dims()[i];
    const size_t xi = rank - trank + i;
    if (td != 1 && td != x_dims[xi]) {
      ctx.fail(fmt::format("{} {} does not broadcast into X {}", what, formatDims(table.dims()),
                           formatDims(x_dims)));
    }
    if (td != 1) strides[xi] = stride;
    stride *= td;
  }
  return strides;
}

}  // namespace cpu

void registerFusedRotaryKernels(KernelRegistry& r) {
  r.add({"fusectl", "RotaryEmbedding", 1, 1000,
         [](KernelContext& c) { cpu::runRotary(c, /*qk_norm=*/false); }});
  r.add({"fusectl", "InterleavedRotaryEmbedding", 1, 1000,
         [](KernelContext& c) { cpu::runRotary(c, /*qk_norm=*/false, /*interleaved=*/true); }});
  r.add({"fusectl", "QKNormInterleavedRotaryEmbedding", 1, 1000,
         [](KernelContext& c) { cpu::runRotary(c, /*qk_norm=*/true, /*interleaved=*/true); }});
  r.add({"fusectl", "QKNormRotaryEmbedding", 1, 1000,
         [](KernelContext& c) { cpu::runRotary(c, /*qk_norm=*/true); }});
}

}  // namespace fusectl::kernels
