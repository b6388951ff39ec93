// The fused norm ops of domain "fusectl" (docs/ops.md): LayerNorm, RMSNorm, SkipLayerNorm and
// SkipRMSNorm, each normalising over the axes from `axis` on, row by row.
//
// One row at a time, so that the row stays in cache between its passes: the Skip ops first
// write Sum = X + Skip (into the Sum output when it is wanted, else into Y's row), then the
// statistics are read from that row and the normalised row written. A LayerNorm row is
// vec::layerNormRow (mean, then the squared deviations from it: two passes, statistics in
// double, stable when the mean is large beside the spread); an RMSNorm row sums squares
// (vec::sumSquaredDeviations from 0, in double) and scales. Memory traffic per element: read X
// (and Skip), write Y (and Sum): the unfused chains read and write every intermediate.
//
// float16/bfloat16 nodes are the float32 kernel on float32 copies of the inputs, each output
// rounded once: Y is normalised from the float32 sum, not from the rounded Sum output.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "compute_common.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// GCC's generic vectors: 8 lanes, lowered to the registers of the build's target (two SSE
// registers on the x86-64 baseline). The loops below are streaming multiplies and adds, bound by
// memory, so the widest ISA buys them little; the reductions go through vec_kernels.h.
typedef float v8 __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;
// Loads and stores through memcpy: unaligned, and no function takes or returns a vector (whose
// ABI would depend on the target).

// s[i] = x[i] + k[i]
void addRow(const float* x, const float* k, float* s, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    v8 a, b;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&b, k + i, sizeof b);
    a += b;
    std::memcpy(s + i, &a, sizeof a);
  }
  for (; i < n; ++i) s[i] = x[i] + k[i];
}

// y[i] = x[i] * inv * scale[i]; y may equal x.
void scaleRow(const float* x, float* y, int64_t n, float inv, const float* scale) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    v8 a, g;
    std::memcpy(&a, x + i, sizeof a);
    std::memcpy(&g, scale + i, sizeof g);
    a = a * inv * g;
    std::memcpy(y + i, &a, sizeof a);
  }
  for (; i < n; ++i) y[i] = x[i] * inv * scale[i];
}

void rmsNormRow(const float* x, float* y, int64_t n, const float* scale, float eps) {
  const double mean_square =
      n > 0 ? vec::sumSquaredDeviations(x, n, 0.0f) / static_cast<double>(n) : 0.0;
  scaleRow(x, y, n, static_cast<float>(1.0 / std::sqrt(mean_square + eps)), scale);
}

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
      const float* src = xd + r * cols;
      float* dst = yd + r * cols;
      if (kind.skip) {
        float* s = sum ? sum + r * cols : dst;
        addRow(src, skip.data() + (skip_per_row ? 0 : r * cols), s, cols);
        src = s;
      }
      if (kind.rms) {
        rmsNormRow(src, dst, cols, scale.data(), eps);
      } else {
        float mean, inv_std;
        vec::layerNormRow(src, dst, cols, scale.data(), bias.data(), eps, &mean, &inv_std);
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
