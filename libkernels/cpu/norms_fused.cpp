// The fused norm ops of domain "fusectl" (docs/ops.md): LayerNorm, RMSNorm, SkipLayerNorm and
// SkipRMSNorm, each normalising over the axes from `axis` on, row by row.
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
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(cols, 1));
  parallelFor(rows, ctx.numThreads(), grain, [&](int64_t r0, int64_t r1) {
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

}  // namespace
}  // namespace cpu

void registerFusedNormKernels(KernelRegistry& r) {
  r.add({"fusectl", "LayerNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {false, false}); }});
  r.add({"fusectl", "RMSNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {false, true}); }});
  r.add({"fusectl", "SkipLayerNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {true, false}); }});
  r.add({"fusectl", "SkipRMSNorm", 1, 1000, [](KernelContext& c) { cpu::runFusedNorm(c, {true, true}); }});
}

}  // namespace fusectl::kernels
