// CenterCropPad: each listed axis is cropped or zero-padded to its target length, centred. A
// crop starts at (dim - target) / 2, a pad puts (target - dim) / 2 zeros before the data (both
// rounded down, so the odd element goes to the end).
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

void centerCropPadKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> shape = readInts(ctx, ctx.requireInput(1));
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes = ctx.attrInts("axes");
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  if (shape.size() != axes.size())
    ctx.fail(fmt::format("shape has {} values for {} axes", shape.size(), axes.size()));
  std::vector<int64_t> dims = x.dims();
  std::vector<int64_t> in_start(x.rank(), 0), out_start(x.rank(), 0);
  for (size_t j = 0; j < axes.size(); ++j) {
    const size_t a = static_cast<size_t>(normalizeAxis(ctx, axes[j], rank, "axes"));
    const int64_t t = shape[j];
    if (t < 0) ctx.fail(fmt::format("target length {} is negative", t));
    if (t < x.dim(a))
      in_start[a] = (x.dim(a) - t) / 2;
    else
      out_start[a] = (t - x.dim(a)) / 2;
    dims[a] = t;
  }
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  std::memset(out.mutableRaw(), 0, out.byteSize());
  // The copied box: per axis min(in, out) elements.
  std::vector<int64_t> box(x.rank());
  for (size_t a = 0; a < x.rank(); ++a) box[a] = std::min(x.dim(a), dims[a]);
  const int64_t n = product(box);
  if (n == 0) return;
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = out.mutableData<T>();
    std::vector<int64_t> pos(x.rank(), 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t si = 0, di = 0;
      for (size_t a = 0; a < x.rank(); ++a) {
        si = si * x.dim(a) + in_start[a] + pos[a];
        di = di * dims[a] + out_start[a] + pos[a];
      }
      dst[di] = src[si];
      for (size_t a = x.rank(); a-- > 0;) {
        if (++pos[a] < box[a]) break;
        pos[a] = 0;
      }
    }
  });
}

}  // namespace

void registerCenterCropPadKernels(KernelRegistry& r) {
  r.add({"", "CenterCropPad", 18, 1000, centerCropPadKernel});
}

}  // namespace fusectl::kernels
