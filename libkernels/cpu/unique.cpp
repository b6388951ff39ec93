// Unique: the distinct elements (no axis) or distinct slices along `axis`, with the index of
// each one's first occurrence, each input element's (slice's) position in the result, and the
// counts. sorted=1 (default) orders them ascending, slices lexicographically over their
// elements in row-major order (as numpy.unique does); sorted=0 keeps first-occurrence order.
#include <algorithm>
#include <numeric>
#include <vector>

#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

void uniqueKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const bool has_axis = ctx.node().hasAttr("axis");
  const bool sorted = ctx.attrInt("sorted", 1) != 0;
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t axis =
      has_axis ? static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank)) : 0;
  // View x as [outer, len, inner]; slice k is x[:, k, :].
  const int64_t outer = has_axis ? product(x.dims(), 0, axis) : 1;
  const int64_t len = has_axis ? x.dim(axis) : x.numel();
  const int64_t inner = has_axis ? product(x.dims(), axis + 1) : 1;
  dispatch<kNumeric | kBool>(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    auto at = [&](int64_t k, int64_t e) { return src[(e / inner * len + k) * inner + e % inner]; };
    const int64_t slice = outer * inner;
    auto less = [&](int64_t a, int64_t b) {
      for (int64_t e = 0; e < slice; ++e) {
        const T va = at(a, e), vb = at(b, e);
        if (va < vb) return true;
        if (vb < va) return false;
      }
      return false;
    };
    auto equal = [&](int64_t a, int64_t b) { return !less(a, b) && !less(b, a); };
    // First occurrences in input order, and each slice's representative.
    std::vector<int64_t> order(static_cast<size_t>(len));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), less);
    std::vector<int64_t> first_of(static_cast<size_t>(len));
    for (size_t i = 0; i < order.size(); ++i) {
      const bool starts = i == 0 || !equal(order[i - 1], order[i]);
      first_of[static_cast<size_t>(order[i])] =
          starts ? order[i] : first_of[static_cast<size_t>(order[i - 1])];
    }
    std::vector<int64_t> uniques;  // first-occurrence indices, in output order
    if (sorted) {
      for (size_t i = 0; i < order.size(); ++i)
        if (i == 0 || !equal(order[i - 1], order[i])) uniques.push_back(order[i]);
    } else {
      for (int64_t k = 0; k < len; ++k)
        if (first_of[static_cast<size_t>(k)] == k) uniques.push_back(k);
    }
    std::vector<int64_t> slot(static_cast<size_t>(len), 0);
    for (size_t u = 0; u < uniques.size(); ++u)
      slot[static_cast<size_t>(uniques[u])] = static_cast<int64_t>(u);
    const int64_t count = static_cast<int64_t>(uniques.size());
    std::vector<int64_t> dims = has_axis ? x.dims() : std::vector<int64_t>{count};
    if (has_axis) dims[axis] = count;
    HostTensor& y = ctx.allocateOutput(0, x.dtype(), dims);
    T* dst = y.mutableData<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t u = 0; u < count; ++u)
        for (int64_t i = 0; i < inner; ++i)
          dst[(o * count + u) * inner + i] =
              src[(o * len + uniques[static_cast<size_t>(u)]) * inner + i];
    std::vector<int64_t> counts(static_cast<size_t>(count), 0);
    for (int64_t k = 0; k < len; ++k)
      ++counts[static_cast<size_t>(slot[static_cast<size_t>(first_of[static_cast<size_t>(k)])])];
    auto write = [&](size_t i, const std::vector<int64_t>& v) {
      if (ctx.numOutputs() <= i || !ctx.outputWanted(i)) return;
      HostTensor& t = ctx.allocateOutput(i, DType::Int64, {static_cast<int64_t>(v.size())});
      std::copy(v.begin(), v.end(), t.mutableData<int64_t>());
    };
    write(1, uniques);
    std::vector<int64_t> inverse(static_cast<size_t>(len));
    for (int64_t k = 0; k < len; ++k)
      inverse[static_cast<size_t>(k)] = slot[static_cast<size_t>(first_of[static_cast<size_t>(k)])];
    write(2, inverse);
    write(3, counts);
  });
}

}  // namespace

void registerUniqueKernels(KernelRegistry& r) { r.add({"", "Unique", 11, 1000, uniqueKernel}); }

}  // namespace fusectl::kernels
