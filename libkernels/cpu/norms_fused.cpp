// The fused norm ops of domain "fusectl" (docs/ops.md): LayerNorm, RMSNorm, SkipLayerNorm and
// SkipRMSNorm, each normalising over the axes from `axis` on, row by row; GroupNorm, over
// channel groups; and ChannelLayerNorm, over the channels of each position.
//
// One row at a time, so that the row stays in cache between its passes: the Skip ops write
// Sum = X + Skip (into the Sum output when it is wanted, else into Y's row) in the pass that
// sums it for the statistics, then the normalised row is written. A LayerNorm row is
// vec::skipLayerNormRow (mean, then the squared deviations from it: two passes, statistics
// in double, stable when the mean is large beside the spread); an RMSNorm row,
// vec::rmsNormRow, sums squares (as vec::sumSquaredDeviations from 0) and scales. Memory
// traffic per element: read X (and Skip), write Y (and Sum): the unfused chains read and write
// every intermediate.
//
// float16/bfloat16 nodes are the float32 kernel on float32 copies of the inputs, each output
// rounded once: Y is normalised from the float32 sum, not from the rounded Sum output.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "compute_common.h"
#include "fusectl/kernels/epilogue.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// A parameter of the normalised shape (`cols` elements) or a single value, as `cols` floats.
std::vector<float> rowParameter(const KernelContext& ctx, const HostTensor& t, int64_t cols,
                                const char* what) {
  FloatView v(t);
  if (v.size() == cols) return std::vector<float>(v.data(), v.data() + cols);
  if (v.size() == 1) return std::vector<float>(static_cast<size_t>(cols), v[0]);
  ctx.fail(fmt::format("{} has {} elements; the normalised shape has {}", what, v.size(), cols));
}

struct NormKind {
  bool skip;
  bool rms;
};

void runFusedNorm(KernelContext& ctx, NormKind kind) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloatOrHalf(ctx, x, "X");
  if (!ctx.node().hasAttr("axis") || !ctx.node().hasAttr("epsilon"))
    ctx.fail("needs both 'axis' and 'epsilon' (its function body cannot default them)");
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) ctx.fail(fmt::format("axis out of range for rank {}", rank));
  const float eps = ctx.attrFloat("epsilon", 1e-5f);
  const int64_t rows = product(x.dims(), 0, static_cast<size_t>(axis));
  const int64_t cols = product(x.dims(), static_cast<size_t>(axis));

  size_t next = 1;
  FloatView skip;
  bool skip_per_row = false;  // a [cols] bias broadcast over the rows
  if (kind.skip) {
    const HostTensor& s = ctx.requireInput(next++);
    requireSameDType(ctx, x, "X", &s, "Skip");
    skip = FloatView(s);
    if (skip.size() == cols && s.dims() != x.dims()) {
      skip_per_row = true;
    } else if (s.dims() != x.dims()) {
      ctx.fail("Skip must have X's shape or hold one row of the normalised shape");
    }
  }
  const HostTensor& scale_t = ctx.requireInput(next++);
  requireSameDType(ctx, x, "X", &scale_t, "Scale");
  const std::vector<float> scale = rowParameter(ctx, scale_t, cols, "Scale");
  std::vector<float> bias;
  if (!kind.rms) {
    const HostTensor& bias_t = ctx.requireInput(next++);
    requireSameDType(ctx, x, "X", &bias_t, "B");
    bias = rowParameter(ctx, bias_t, cols, "B");
  }

  FloatSink ys(ctx.allocateOutput(0, x.dtype(), x.dims()));
  float* yd = ys.data();
  std::optional<FloatSink> sum_sink;
  float* sum = nullptr;
  if (kind.skip && ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    sum_sink.emplace(ctx.allocateOutput(1, x.dtype(), x.dims()));
    sum = sum_sink->data();
  }
  const FloatView xv(x);
  const float* xd = xv.data();
  parallelFor(rows, ctx.numThreads(), grainFor(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* k = kind.skip ? skip.data() + (skip_per_row ? 0 : r * cols) : nullptr;
      float* dst = yd + r * cols;
      float* s = sum ? sum + r * cols : dst;
      if (kind.rms) {
        vec::rmsNormRow(xd + r * cols, k, s, dst, cols, scale.data(), eps);
      } else {
        vec::skipLayerNormRow(xd + r * cols, k, s, dst, cols, scale.data(), bias.data(), eps);
      }
    }
  });
  ys.commit();
  if (sum_sink) sum_sink->commit();
}

// The epsilon and the per-channel Scale and B (inputs 1 and 2) of a norm over [N, C, ...]
// (GroupNorm, ChannelLayerNorm), checked: the function bodies cannot default epsilon, and the
// parameters hold one value per channel, of X's dtype.
struct ChannelParameters {
  double epsilon = 0;
  FloatView scale, bias;
};

ChannelParameters channelParameters(const KernelContext& ctx, const HostTensor& x, int64_t c) {
  if (!ctx.node().hasAttr("epsilon"))
    ctx.fail("needs 'epsilon' (its function body cannot default it)");
  const HostTensor& scale = ctx.requireInput(1);
  const HostTensor& bias = ctx.requireInput(2);
  requireSameDType(ctx, x, "X", &scale, "Scale");
  requireSameDType(ctx, x, "X", &bias, "B");
  if (scale.numel() != c || bias.numel() != c)
    ctx.fail(fmt::format("Scale and B must hold one value per channel ({}); they hold {} and {}",
                         c, scale.numel(), bias.numel()));
  ChannelParameters p;
  p.epsilon = ctx.attrFloat("epsilon", 1e-5f);
  p.scale = FloatView(scale);
  p.bias = FloatView(bias);
  return p;
}

// Mean and sum of squared deviations of x[0..n), from memory in one pass: chunks small enough
// to stay in L1 take their two passes (sum, then squared deviations from the chunk's mean),
// and the chunks' moments are combined exactly (Chan et al.), all in double.
struct BlockMoments {
  double mean = 0;
  double m2 = 0;
};

BlockMoments blockMoments(const float* x, int64_t n) {
  constexpr int64_t kChunk = 4096;  // 16 KiB
  BlockMoments total;
  int64_t count = 0;
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t k = std::min(kChunk, n - at);
    const double mean = vec::sum(x + at, k) / static_cast<double>(k);
    // Deviations are summed from the float nearest the mean; the exact m2 about the mean is
    // that sum less k (mean - centre)^2.
    const float centre = static_cast<float>(mean);
    const double off = mean - centre;
    const double m2 = vec::sumSquaredDeviations(x + at, k, centre) - static_cast<double>(k) * off * off;
    const double delta = mean - total.mean;
    const double merged = static_cast<double>(count + k);
    total.mean += delta * static_cast<double>(k) / merged;
    total.m2 += m2 + delta * delta * static_cast<double>(count) * static_cast<double>(k) / merged;
    count += k;
  }
  return total;
}

// y = activation(y) over n values with the vector kernels the standalone activation ops run
// (the same bits as the separate op, or as fuse-elementwise's SiLU program); Epilogue::activate
// is the scalar loop meant for GEMM tiles already in registers.
void activateRow(const Epilogue& ep, float* y, int64_t n) {
  switch (ep.activation) {
    case Activation::None: return;
    case Activation::Relu: vec::unary(vec::Unary::Relu, y, y, n); return;
    case Activation::LeakyRelu: vec::unary(vec::Unary::LeakyRelu, y, y, n, ep.alpha); return;
    case Activation::Sigmoid: vec::unary(vec::Unary::Sigmoid, y, y, n); return;
    case Activation::Tanh: vec::unary(vec::Unary::Tanh, y, y, n); return;
    case Activation::Gelu: vec::unary(vec::Unary::Gelu, y, y, n); return;
    case Activation::GeluTanh: vec::unary(vec::Unary::GeluTanh, y, y, n); return;
    case Activation::HardSigmoid:
      vec::unary(vec::Unary::HardSigmoid, y, y, n, ep.alpha, ep.beta);
      return;
    case Activation::HardSwish: vec::unary(vec::Unary::HardSwish, y, y, n); return;
    case Activation::Silu: vec::swishRow(y, nullptr, y, n, 1.f); return;
    case Activation::Clip:
      vec::binary(vec::Binary::Max, y, 0.f, nullptr, ep.alpha, y, n);
      vec::binary(vec::Binary::Min, y, 0.f, nullptr, ep.beta, y, n);
      return;
  }
}

// GroupNorm: in [N, C, ...] a group's channels are one contiguous block of C / G * inner
// elements. Its mean and variance take one pass over the block from memory (blockMoments:
// double, stable when the mean is large beside the spread), then each channel is written as
// (x - mean) * a + B[c], a = Scale[c] / sqrt(var + eps) (vec::centredAffine), while the block is
// still in cache: the exported chain (InstanceNormalization, then Mul and Add) makes a second
// read-and-write pass over the tensor for the affine. Blocks are shared among threads; when there are fewer blocks than threads (one group per
// sample, as ConvTasNet's global norm), the statistics are taken block by block and the
// channels written in parallel.
void runGroupNorm(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloatOrHalf(ctx, x, "X");
  if (x.rank() < 2) ctx.fail("X must have rank >= 2 ([N, C, ...])");
  const int64_t groups = ctx.attrInt("num_groups", 0);
  const int64_t n = x.dim(0), c = x.dim(1), inner = product(x.dims(), 2);
  if (groups < 1 || c % groups != 0)
    ctx.fail(fmt::format("num_groups {} does not divide {} channels", groups, c));
  const ChannelParameters params = channelParameters(ctx, x, c);
  const double eps = params.epsilon;
  const FloatView xv(x);
  const FloatView& scale = params.scale;
  const FloatView& bias = params.bias;
  FloatSink ys(ctx.allocateOutput(0, x.dtype(), x.dims()));
  const float* xd = xv.data();
  float* yd = ys.data();
  const int64_t per_group = c / groups, block = per_group * inner, blocks = n * groups;

  // The block's statistics as each of its channels' (centre, a, b) into coef[3 * channel]:
  // y = (x - centre) * a + b, where centre is the float nearest the mean and b takes the rest
  // of it. x * a + (B - mean * a) in one step would cancel two numbers of about mean * a where
  // the mean is large beside the spread; x - centre is exact there.
  auto statistics = [&](int64_t blk, float* coef) {
    const BlockMoments s = blockMoments(xd + blk * block, block);
    const double inv = 1.0 / std::sqrt(s.m2 / static_cast<double>(std::max<int64_t>(block, 1)) + eps);
    const float centre = static_cast<float>(s.mean);
    const int64_t c0 = (blk % groups) * per_group;
    for (int64_t k = 0; k < per_group; ++k) {
      const double a = scale[c0 + k] * inv;
      coef[3 * k] = centre;
      coef[3 * k + 1] = static_cast<float>(a);
      coef[3 * k + 2] = static_cast<float>(bias[c0 + k] - (s.mean - centre) * a);
    }
  };
  // The activation fuse-epilogue took in, applied to each channel while it is in L1.
  Epilogue activation;
  readNodeActivation(ctx, activation);
  auto writeChannel = [&](int64_t row, const float* k) {
    vec::centredAffine(xd + row * inner, yd + row * inner, inner, k[0], k[1], k[2]);
    activateRow(activation, yd + row * inner, inner);
  };
  if (blocks >= ctx.numThreads() || ctx.numThreads() == 1) {
    parallelFor(blocks, ctx.numThreads(), grainFor(block), [&](int64_t b0, int64_t b1) {
      std::vector<float> coef(static_cast<size_t>(3 * per_group));
      for (int64_t blk = b0; blk < b1; ++blk) {
        statistics(blk, coef.data());
        for (int64_t k = 0; k < per_group; ++k) writeChannel(blk * per_group + k, &coef[3 * k]);
      }
    });
  } else {
    std::vector<float> coef(static_cast<size_t>(3 * n * c));
    for (int64_t blk = 0; blk < blocks; ++blk) statistics(blk, coef.data() + 3 * blk * per_group);
    parallelFor(n * c, ctx.numThreads(), grainFor(inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) writeChannel(r, &coef[3 * r]);
    });
  }
  ys.commit();
}

// ChannelLayerNorm: X [N, C, P] normalised over C at every position p. The channels of one
// position lie P apart, so the statistics are taken a block of positions at a time, a
// channel's stretch of the block per vector call: the sums in float over 32 channels at a time,
// each partial added into double (a float sum over all of C could lose digits at C = 512 and
// more); then the squared deviations from the mean the same way (vec::addSquaredDeviations);
// then each channel's stretch written as (x - mean) * rstd * Scale[c] + B[c]
// (vec::normalizeColumns). A block of kBlock positions of every channel (C x 2 KiB) stays in L2
// across its three passes.
void runChannelLayerNorm(KernelContext& ctx) {
  constexpr int64_t kBlock = 512, kChunk = 32;
  const HostTensor& x = ctx.requireInput(0);
  requireFloatOrHalf(ctx, x, "X");
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 ([N, C, ...])");
  const int64_t n = x.dim(0), c = x.dim(1), p = product(x.dims(), 2);
  const ChannelParameters params = channelParameters(ctx, x, c);
  const double eps = params.epsilon;
  const FloatView xv(x);
  const FloatView& scale = params.scale;
  const FloatView& bias = params.bias;
  FloatSink ys(ctx.allocateOutput(0, x.dtype(), x.dims()));
  const float* xd = xv.data();
  float* yd = ys.data();
  const int64_t blocks = (p + kBlock - 1) / kBlock;
  parallelFor(n * blocks, ctx.numThreads(), 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> part(kBlock), mean(kBlock), rstd(kBlock);
    std::vector<double> total(kBlock);
    for (int64_t nb = b0; nb < b1; ++nb) {
      const int64_t img = nb / blocks, p0 = nb % blocks * kBlock;
      const int64_t len = std::min(kBlock, p - p0);
      const float* xb = xd + img * c * p + p0;
      float* yb = yd + img * c * p + p0;
      // Sum over the channels of each position of `add(channel's stretch, part)`, into `total`.
      auto channelSum = [&](auto&& add) {
        std::fill(total.begin(), total.begin() + len, 0.0);
        for (int64_t c0 = 0; c0 < c; c0 += kChunk) {
          std::fill(part.begin(), part.begin() + len, 0.f);
          for (int64_t k = c0; k < std::min(c, c0 + kChunk); ++k) add(xb + k * p, part.data());
          for (int64_t i = 0; i < len; ++i) total[static_cast<size_t>(i)] += part[static_cast<size_t>(i)];
        }
      };
      channelSum([&](const float* row, float* acc) {
        vec::binary(vec::Binary::Add, acc, 0.f, row, 0.f, acc, len);
      });
      for (int64_t i = 0; i < len; ++i)
        mean[static_cast<size_t>(i)] = static_cast<float>(total[static_cast<size_t>(i)] / static_cast<double>(c));
      channelSum([&](const float* row, float* acc) {
        vec::addSquaredDeviations(row, mean.data(), acc, len);
      });
      for (int64_t i = 0; i < len; ++i)
        rstd[static_cast<size_t>(i)] = static_cast<float>(
            1.0 / std::sqrt(total[static_cast<size_t>(i)] / static_cast<double>(c) + eps));
      for (int64_t k = 0; k < c; ++k)
        vec::normalizeColumns(xb + k * p, mean.data(), rstd.data(), yb + k * p, len, scale[k],
                              bias[k]);
    }
  });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerFusedNormKernels(KernelRegistry& r) {
  r.add({"fusectl", "LayerNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {false, false}); }});
  r.add({"fusectl", "RMSNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {false, true}); }});
  r.add({"fusectl", "SkipLayerNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {true, false}); }});
  r.add({"fusectl", "SkipRMSNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {true, true}); }});
  r.add({"fusectl", "GroupNorm", 1, 1000, cpu::runGroupNorm});
  r.add({"fusectl", "ChannelLayerNorm", 1, 1000, cpu::runChannelLayerNorm});
}

}  // namespace fusectl::kernels
