// LRN, GroupNormalization and MeanVarianceNormalization: normalizations over channel windows,
// channel groups and chosen axes.
//
// LRN: y = x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)/2, c + size/2])^beta.
// GroupNormalization: each sample's channels split into num_groups groups, each normalized to
// zero mean and unit variance (population, + epsilon), then y = x_hat * scale + bias with scale
// and bias per channel (opset 21) or per group (opset 18; told apart by their length).
// MeanVarianceNormalization: y = (x - mean) / (sqrt(var) + 1e-9) over `axes` (default N, H, W),
// as its ONNX function body computes it. Statistics in double.
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void lrnKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("X must be a float tensor");
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  const int64_t size = ctx.attrInt("size", 0);
  if (size < 1) ctx.fail("size must be positive");
  const double alpha = ctx.attrFloat("alpha", 1e-4f), beta = ctx.attrFloat("beta", 0.75f),
               bias = ctx.attrFloat("bias", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), inner = product(x.dims(), 2);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  FloatView xv(x);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink sink(out);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < inner; ++i) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, ch - before); k <= std::min(c - 1, ch + after); ++k) {
          const double v = xv[(b * c + k) * inner + i];
          sq += v * v;
        }
        const int64_t at = (b * c + ch) * inner + i;
        sink.data()[at] = static_cast<float>(xv[at] / std::pow(bias + alpha / size * sq, beta));
      }
  sink.commit();
}

void groupNormalizationKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& scale = ctx.requireInput(1);
  const HostTensor& bias = ctx.requireInput(2);
  if (!isFloatComputeType(x.dtype())) ctx.fail("X must be a float tensor");
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  const int64_t groups = ctx.attrInt("num_groups", 0);
  const int64_t n = x.dim(0), c = x.dim(1), inner = product(x.dims(), 2);
  if (groups < 1 || c % groups != 0)
    ctx.fail(fmt::format("num_groups {} does not divide {} channels", groups, c));
  const bool per_channel = scale.numel() == c;
  if ((!per_channel && scale.numel() != groups) || bias.numel() != scale.numel())
    ctx.fail("scale and bias must have one value per channel (or per group, opset 18)");
  const double eps = ctx.attrFloat("epsilon", 1e-5f);
  const int64_t per_group = c / groups;
  FloatView xv(x), sv(scale), bv(bias);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink sink(out);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (b * c + g * per_group) * inner, count = per_group * inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < count; ++i) mean += xv[base + i];
      mean /= static_cast<double>(count);
      for (int64_t i = 0; i < count; ++i) var += (xv[base + i] - mean) * (xv[base + i] - mean);
      var /= static_cast<double>(count);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t p = per_channel ? g * per_group + i / inner : g;
        sink.data()[base + i] = static_cast<float>((xv[base + i] - mean) * inv * sv[p] + bv[p]);
      }
    }
  sink.commit();
}

void meanVarianceNormalizationKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("X must be a float tensor");
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t a : ctx.attrInts("axes", {0, 2, 3})) {
    if (a < -rank || a >= rank)
      ctx.fail(fmt::format("axis {} is out of range for rank {}", a, rank));
    reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  }
  // Each output element's group: its index with the reduced axes zeroed.
  const int64_t total = x.numel();
  std::vector<int64_t> group(static_cast<size_t>(total));
  std::vector<int64_t> pos(x.rank(), 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t key = 0;
    for (size_t a = 0; a < x.rank(); ++a) key = key * x.dim(a) + (reduced[a] ? 0 : pos[a]);
    group[static_cast<size_t>(e)] = key;
    for (size_t a = x.rank(); a-- > 0;) {
      if (++pos[a] < x.dim(a)) break;
      pos[a] = 0;
    }
  }
  FloatView xv(x);
  std::vector<double> sum(static_cast<size_t>(total), 0.0), sq(sum.size(), 0.0),
      cnt(sum.size(), 0.0);
  for (int64_t e = 0; e < total; ++e) {
    const size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
    sum[g] += xv[e];
    sq[g] += static_cast<double>(xv[e]) * xv[e];
    cnt[g] += 1;
  }
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink sink(out);
  for (int64_t e = 0; e < total; ++e) {
    const size_t g = static_cast<size_t>(group[static_cast<size_t>(e)]);
    const double mean = sum[g] / cnt[g];
    const double var = std::max(0.0, sq[g] / cnt[g] - mean * mean);
    sink.data()[e] = static_cast<float>((xv[e] - mean) / (std::sqrt(var) + 1e-9));
  }
  sink.commit();
}

}  // namespace
}  // namespace cpu

void registerChannelNormKernels(KernelRegistry& r) {
  r.add({"", "LRN", 1, 1000, cpu::lrnKernel});
  r.add({"", "GroupNormalization", 18, 1000, cpu::groupNormalizationKernel});
  r.add({"", "MeanVarianceNormalization", 9, 1000, cpu::meanVarianceNormalizationKernel});
}

}  // namespace fusectl::kernels
