// The standard RMSNormalization (opset 23): Y = X / sqrt(mean(X^2 over dims [axis, rank)) +
// epsilon) * scale, scale broadcast unidirectionally to X. Unlike fusectl::RMSNorm (a
// last-axis-only fused op) this takes any axis, a scale of any broadcastable shape and a scale
// type apart from X's (Y takes scale's type). The mean of squares is accumulated in double
// whatever stash_type says: float32 stage-one precision (stash_type 1) is the least it asks for.
#include <string>
#include <vector>

#include "compute_common.h"
#include "fusectl/kernels/kernel.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// `src` (dims `from`) broadcast right-aligned to `to`, materialised; empty when it does not
// broadcast.
std::vector<float> broadcastTo(const float* src, const std::vector<int64_t>& from,
                               const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return {};
  const size_t off = to.size() - from.size();
  std::vector<int64_t> strides(to.size(), 0);
  int64_t s = 1;
  for (size_t i = from.size(); i-- > 0;) {
    if (from[i] != 1 && from[i] != to[off + i]) return {};
    strides[off + i] = from[i] == 1 ? 0 : s;
    s *= from[i];
  }
  const int64_t n = product(to);
  std::vector<float> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(to.size(), 0);
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = src[at];
    for (size_t d = to.size(); d-- > 0;) {
      at += strides[d];
      if (++idx[d] < to[d]) break;
      at -= strides[d] * to[d];
      idx[d] = 0;
    }
  }
  return out;
}

void runRMSNormalization(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& scale = ctx.requireInput(1);
  for (const HostTensor* t : {&x, &scale}) {
    if (!isFloatComputeType(t->dtype()))
      ctx.fail("unsupported element type " + std::string(dtypeName(t->dtype())));
  }
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < -rank || axis >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is outside [-" + std::to_string(rank) + ", " +
             std::to_string(rank) + ")");
  if (axis < 0) axis += rank;
  const float epsilon = ctx.attrFloat("epsilon", 1e-5f);
  const int64_t inner = product(x.dims(), static_cast<size_t>(axis));
  const int64_t outer = product(x.dims(), 0, static_cast<size_t>(axis));

  // A scale whose dims before `axis` are all 1 is one vector of `inner` values shared by every
  // row; any other broadcastable scale is materialised to X's whole shape.
  const std::vector<int64_t>& sd = scale.dims();
  bool per_row = true;
  for (size_t i = 0; i + (x.rank() - static_cast<size_t>(axis)) < sd.size(); ++i)
    per_row = per_row && sd[i] == 1;
  std::vector<int64_t> row_dims(x.dims().begin() + axis, x.dims().end());
  std::vector<int64_t> scale_from = sd;
  if (per_row && sd.size() > row_dims.size())
    scale_from.erase(scale_from.begin(), scale_from.begin() + (sd.size() - row_dims.size()));
  FloatView sf(scale);
  const std::vector<float> gamma =
      broadcastTo(sf.data(), scale_from, per_row ? row_dims : x.dims());
  if (gamma.empty() && x.numel() > 0)
    ctx.fail("scale " + formatDims(sd) + " does not broadcast to X " + formatDims(x.dims()));

  HostTensor& y = ctx.allocateOutput(0, scale.dtype(), x.dims());
  FloatView xf(x);
  FloatSink ys(y);
  parallelFor(outer, ctx.numThreads(), std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(inner, 1)),
              [&](int64_t first, int64_t last) {
                for (int64_t r = first; r < last; ++r) {
                  const float* xr = xf.data() + r * inner;
                  float* yr = ys.data() + r * inner;
                  const float* g = gamma.data() + (per_row ? 0 : r * inner);
                  vec::rmsNormRow(xr, nullptr, nullptr, yr, inner, g, epsilon);
                }
              });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerStdNormKernels(KernelRegistry& r) {
  r.add({"", "RMSNormalization", 23, 1000, cpu::runRMSNormalization});
}

}  // namespace fusectl::kernels
