// ReduceMax and ReduceMin on bool tensors (allowed since opset 20): "any" and "all" over the
// reduced axes. Registered for DType::Bool, so they win over the numeric reduce kernels for bool
// inputs only. Axes, keepdims and noop_with_empty_axes follow the numeric kernels (opset 18+:
// axes as an input).
#include <vector>

#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

void boolReduceKernel(KernelContext& ctx, bool is_max) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.dtype() != DType::Bool) ctx.fail("expected a bool input");
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes;
  bool noop = false;
  if (ctx.opset() >= 18) {
    if (const HostTensor* a = ctx.input(1)) axes = readInts(ctx, *a);
    noop = ctx.attrInt("noop_with_empty_axes", 0) != 0;
  } else {
    axes = ctx.attrInts("axes");
  }
  if (axes.empty() && noop) {
    ctx.setOutput(0, x.reshaped(x.dims()));
    return;
  }
  std::vector<bool> reduced(x.rank(), axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(normalizeAxis(ctx, a, rank, "axes"))] = true;
  const bool keepdims = ctx.attrInt("keepdims", 1) != 0;
  std::vector<int64_t> out_dims, kept_dims;
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!reduced[i])
      out_dims.push_back(x.dim(i));
    else if (keepdims)
      out_dims.push_back(1);
    kept_dims.push_back(reduced[i] ? 1 : x.dim(i));
  }
  HostTensor& out = ctx.allocateOutput(0, DType::Bool, out_dims);
  uint8_t* o = out.mutableData<uint8_t>();
  const int64_t n_out = out.numel();
  // max over bools is "any" (identity false), min is "all" (identity true).
  for (int64_t i = 0; i < n_out; ++i) o[i] = is_max ? 0 : 1;
  const uint8_t* p = x.data<uint8_t>();
  std::vector<int64_t> pos(x.rank(), 0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t oi = 0;
    for (size_t a = 0; a < x.rank(); ++a) oi = oi * kept_dims[a] + (reduced[a] ? 0 : pos[a]);
    if (is_max)
      o[oi] = o[oi] || p[e] != 0;
    else
      o[oi] = o[oi] && p[e] != 0;
    for (size_t a = x.rank(); a-- > 0;) {
      if (++pos[a] < x.dim(a)) break;
      pos[a] = 0;
    }
  }
}

}  // namespace

void registerBoolReductionKernels(KernelRegistry& r) {
  r.add({"", "ReduceMax", 20, 1000, [](KernelContext& c) { boolReduceKernel(c, true); },
         DType::Bool});
  r.add({"", "ReduceMin", 20, 1000, [](KernelContext& c) { boolReduceKernel(c, false); },
         DType::Bool});
}

}  // namespace fusectl::kernels
