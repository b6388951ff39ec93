// Broadcast shape inference and the byte-level strided copy entry point.
#include "broadcast.h"

#include <string>

#include <fmt/format.h>

#include "dtype_dispatch.h"

namespace fusectl::kernels::kutil {

std::vector<int64_t> broadcastDims(const KernelContext& ctx,
                                   const std::vector<const std::vector<int64_t>*>& shapes) {
  size_t rank = 0;
  for (const auto* s : shapes) rank = std::max(rank, s->size());
  std::vector<int64_t> out(rank, 1);
  for (const auto* s : shapes) {
    const size_t lead = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      const int64_t d = (*s)[i];
      int64_t& o = out[lead + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string all;
      for (const auto* t : shapes) all += (all.empty() ? "" : " and ") + formatDims(*t);
      ctx.fail(fmt::format("shapes {} cannot be broadcast together", all));
    }
  }
  return out;
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    s[d] = acc;
    acc *= dims[d];
  }
  return s;
}

void stridedCopyBytes(const KernelContext& ctx, DType dtype, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& strides, const void* src, void* dst) {
  dispatchBySize(ctx, dtype, [&](auto tag) {
    using U = typename decltype(tag)::type;
    stridedCopy<U>(dims, strides, static_cast<const U*>(src), static_cast<U*>(dst));
  });
}

}  // namespace fusectl::kernels::kutil
