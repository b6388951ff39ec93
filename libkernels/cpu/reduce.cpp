// Reduction CPU kernels: Reduce* (ten kinds), ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax,
// CumSum, CumProd and TopK.
//
// A reduction is described by (map, combine, post, init): ReduceL2 is map x*x, combine +, post
// sqrt, init 0. The input dims are merged into runs of reduced and kept dims; the common layouts
// [kept][reduced][kept] run as contiguous loops (a row sum with eight partial accumulators, or a
// column sum that accumulates whole rows), anything else walks precomputed offset tables, so
// every layout costs O(numel). Integer sums accumulate in 64 bits. Axes come from the "axes"
// attribute before opset 13 (ReduceSum) or 18 (the others) and from the optional second input
// after; empty axes mean all axes unless noop_with_empty_axes is set.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"
#include "fusectl/kernels/kernel.h"
#include "scalar_ops.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

// How to walk the input for one output element.
struct ReduceLayout {
  bool simple = true;  // [outer][red][inner] contiguous
  int64_t outer = 1, red = 1, inner = 1;
  std::vector<int64_t> kept_offsets, red_offsets;  // general case
};

ReduceLayout makeLayout(const std::vector<int64_t>& dims, const std::vector<bool>& reduced) {
  // Merge neighbouring dims with the same flag, dropping size-1 dims.
  std::vector<int64_t> gd;
  std::vector<bool> gr;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!gd.empty() && gr.back() == reduced[i]) {
      gd.back() *= dims[i];
    } else {
      gd.push_back(dims[i]);
      gr.push_back(reduced[i]);
    }
  }
  ReduceLayout L;
  const size_t n_red = static_cast<size_t>(std::count(gr.begin(), gr.end(), true));
  if (n_red <= 1) {
    bool seen = false;
    for (size_t g = 0; g < gd.size(); ++g) {
      if (gr[g]) {
        L.red = gd[g];
        seen = true;
      } else if (seen) {
        L.inner *= gd[g];
      } else {
        L.outer *= gd[g];
      }
    }
    return L;
  }
  L.simple = false;
  std::vector<int64_t> strides(gd.size());
  for (size_t g = gd.size(), s = 1; g-- > 0;) {
    strides[g] = static_cast<int64_t>(s);
    s *= static_cast<size_t>(gd[g]);
  }
  auto enumerate = [&](bool want, std::vector<int64_t>& offs) {
    offs.assign(1, 0);
    for (size_t g = 0; g < gd.size(); ++g) {
      if (gr[g] != want) continue;
      std::vector<int64_t> next;
      next.reserve(offs.size() * static_cast<size_t>(gd[g]));
      for (int64_t base : offs)
        for (int64_t k = 0; k < gd[g]; ++k) next.push_back(base + k * strides[g]);
      offs.swap(next);
    }
  };
  enumerate(false, L.kept_offsets);
  enumerate(true, L.red_offsets);
  return L;
}

template <typename T, typename A, typename Map, typename Comb, typename Post>
void runReduce(const ReduceLayout& L, int threads, const T* in, T* out, A init, Map map,
               Comb comb, Post post) {
  constexpr int64_t kGrain = 1 << 16;  // input elements per thread worth a thread
  if (!L.simple) {
    const int64_t kept = static_cast<int64_t>(L.kept_offsets.size());
    const int64_t red = static_cast<int64_t>(L.red_offsets.size());
    cpu::parallelFor(kept, threads, std::max<int64_t>(1, kGrain / std::max<int64_t>(red, 1)),
                     [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        A a = init;
        const T* p = in + L.kept_offsets[static_cast<size_t>(k)];
        for (int64_t r : L.red_offsets) a = comb(a, map(p[r]));
        out[k] = post(a);
      }
    });
    return;
  }
  if (L.inner == 1) {
    cpu::parallelFor(L.outer, threads, std::max<int64_t>(1, kGrain / std::max<int64_t>(L.red, 1)),
                     [&](int64_t ob, int64_t oe) {
      for (int64_t o = ob; o < oe; ++o) {
        const T* p = in + o * L.red;
        // Eight independent partial results let the compiler vectorize the row.
        A acc[8];
        std::fill(acc, acc + 8, init);
        int64_t r = 0;
        for (; r + 8 <= L.red; r += 8)
          for (int k = 0; k < 8; ++k) acc[k] = comb(acc[k], map(p[r + k]));
        for (; r < L.red; ++r) acc[0] = comb(acc[0], map(p[r]));
        A a = acc[0];
        for (int k = 1; k < 8; ++k) a = comb(a, acc[k]);
        out[o] = post(a);
      }
    });
    return;
  }
  // Whole rows accumulate into a row of partial results: columns [cb, ce) of outer slice o.
  auto columns = [&](int64_t o, int64_t cb, int64_t ce, std::vector<A>& acc) {
    acc.assign(static_cast<size_t>(ce - cb), init);
    for (int64_t r = 0; r < L.red; ++r) {
      const T* p = in + (o * L.red + r) * L.inner + cb;
      for (int64_t i = 0; i < ce - cb; ++i)
        acc[static_cast<size_t>(i)] = comb(acc[static_cast<size_t>(i)], map(p[i]));
    }
    T* po = out + o * L.inner + cb;
    for (int64_t i = 0; i < ce - cb; ++i) po[i] = post(acc[static_cast<size_t>(i)]);
  };
  const int64_t slice = L.red * L.inner;
  if (L.outer >= threads) {
    cpu::parallelFor(L.outer, threads, std::max<int64_t>(1, kGrain / std::max<int64_t>(slice, 1)),
                     [&](int64_t ob, int64_t oe) {
      std::vector<A> acc;
      for (int64_t o = ob; o < oe; ++o) columns(o, 0, L.inner, acc);
    });
  } else {
    for (int64_t o = 0; o < L.outer; ++o)
      cpu::parallelFor(L.inner, threads, std::max<int64_t>(1, kGrain / std::max<int64_t>(L.red, 1)),
                       [&](int64_t cb, int64_t ce) {
        std::vector<A> acc;
        columns(o, cb, ce, acc);
      });
  }
}

enum class ReduceKind { Sum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum, LogSumExp };

// Accumulator: float types accumulate in themselves, integers in 64 bits.
template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, T,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

// The float results of L2, LogSum and LogSumExp stored as T: into an integer type with Cast's
// conversion (log(0) = -inf and a NaN are not undefined behaviour there).
template <typename T>
T fromDouble(double v) {
  if constexpr (std::is_integral_v<T>) return floatToIntegral<T>(v);
  else return static_cast<T>(v);
}

template <typename T>
void reduceTyped(ReduceKind kind, const ReduceLayout& L, int threads, int64_t count, const T* in,
                 T* out) {
  using A = AccOf<T>;
  // Integer sums and products wrap (modulo 2^64, then the cast to T), as numpy's do.
  auto id = [](T x) { return static_cast<A>(x); };
  auto sq = [](T x) { return scalar::wrapMul(static_cast<A>(x), static_cast<A>(x)); };
  auto plus = [](A a, A b) { return scalar::wrapAdd(a, b); };
  auto cast = [](A a) { return static_cast<T>(a); };
  switch (kind) {
    case ReduceKind::Sum:
      return runReduce(L, threads, in, out, A(0), id, plus, cast);
    case ReduceKind::Mean:
      return runReduce(L, threads, in, out, A(0), id, plus, [count](A a) {
        if constexpr (std::is_integral_v<A>) {
          return static_cast<T>(count ? a / static_cast<A>(count) : 0);
        } else {
          return static_cast<T>(a / static_cast<A>(count));
        }
      });
    case ReduceKind::Max: {
      A init = std::numeric_limits<A>::lowest();
      if constexpr (std::is_floating_point_v<T>) init = -std::numeric_limits<T>::infinity();
      else init = static_cast<A>(std::numeric_limits<T>::lowest());
      return runReduce(L, threads, in, out, init, id, [](A a, A b) {
        if constexpr (std::is_floating_point_v<A>) {
          if (std::isnan(b)) return b;
        }
        return a < b ? b : a;
      }, cast);
    }
    case ReduceKind::Min: {
      A init = std::numeric_limits<A>::max();
      if constexpr (std::is_floating_point_v<T>) init = std::numeric_limits<T>::infinity();
      else init = static_cast<A>(std::numeric_limits<T>::max());
      return runReduce(L, threads, in, out, init, id, [](A a, A b) {
        if constexpr (std::is_floating_point_v<A>) {
          if (std::isnan(b)) return b;
        }
        return b < a ? b : a;
      }, cast);
    }
    case ReduceKind::Prod:
      return runReduce(
          L, threads, in, out, A(1), id, [](A a, A b) { return scalar::wrapMul(a, b); }, cast);
    case ReduceKind::L1:
      return runReduce(L, threads, in, out, A(0), [](T x) {
        if constexpr (std::is_unsigned_v<T>) return static_cast<A>(x);
        else return x < 0 ? scalar::wrapNeg(static_cast<A>(x)) : static_cast<A>(x);
      }, plus, cast);
    case ReduceKind::L2:
      return runReduce(L, threads, in, out, A(0), sq, plus, [](A a) {
        return fromDouble<T>(std::sqrt(static_cast<double>(a)));
      });
    case ReduceKind::SumSquare:
      return runReduce(L, threads, in, out, A(0), sq, plus, cast);
    case ReduceKind::LogSum:
      return runReduce(L, threads, in, out, A(0), id, plus, [](A a) {
        return fromDouble<T>(std::log(static_cast<double>(a)));
      });
    case ReduceKind::LogSumExp:
      // Summed in double: exp overflows there only past 709, far beyond float's range.
      return runReduce(
          L, threads, in, out, 0.0, [](T x) { return std::exp(static_cast<double>(x)); },
          [](double a, double b) { return a + b; },
          [](double a) { return fromDouble<T>(std::log(a)); });
  }
}

std::vector<bool> axesMask(const KernelContext& ctx, const std::vector<int64_t>& axes,
                           int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) mask[static_cast<size_t>(normalizeAxis(ctx, a, rank, "axes"))] = true;
  return mask;
}

void reduceKernel(KernelContext& ctx, ReduceKind kind) {
  const HostTensor& x0 = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x0.rank());
  // The opset at which axes moved from an attribute to an input.
  const int64_t axes_input_since = kind == ReduceKind::Sum ? 13 : 18;
  std::vector<int64_t> axes;
  bool noop = false;
  if (ctx.opset() >= axes_input_since) {
    if (const HostTensor* a = ctx.input(1)) axes = readInts(ctx, *a);
    noop = ctx.attrInt("noop_with_empty_axes", 0) != 0;
  } else {
    axes = ctx.attrInts("axes");
  }
  if (axes.empty() && noop) {
    ctx.setOutput(0, x0.reshaped(x0.dims()));
    return;
  }
  const bool keepdims = ctx.attrInt("keepdims", 1) != 0;
  const std::vector<bool> mask = axesMask(ctx, axes, rank);
  std::vector<int64_t> out_dims;
  int64_t count = 1;
  for (size_t i = 0; i < x0.rank(); ++i) {
    if (mask[i]) {
      count *= x0.dim(i);
      if (keepdims) out_dims.push_back(1);
    } else {
      out_dims.push_back(x0.dim(i));
    }
  }
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  StagedOutput out(ctx, 0, x0.dtype(), out_dims);
  const ReduceLayout L = makeLayout(x0.dims(), mask);
  dispatch<kNumeric>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduceTyped<T>(kind, L, ctx.numThreads(), count, x->data<T>(),
                   out.compute().template mutableData<T>());
  });
  out.finish();
}

// [outer][n][inner] around one axis.
struct AxisLayout {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisLayout axisLayout(const std::vector<int64_t>& dims, size_t axis) {
  AxisLayout l;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < axis) l.outer *= dims[i];
    else if (i == axis) l.n = dims[i];
    else l.inner *= dims[i];
  }
  return l;
}

void argKernel(KernelContext& ctx, bool is_max) {
  const HostTensor& x0 = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x0.rank());
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  const bool keepdims = ctx.attrInt("keepdims", 1) != 0;
  const bool last = ctx.attrInt("select_last_index", 0) != 0;
  std::vector<int64_t> out_dims = x0.dims();
  if (out_dims[axis] == 0) ctx.fail("cannot take ArgMax/ArgMin over an empty axis");
  if (keepdims) out_dims[axis] = 1;
  else out_dims.erase(out_dims.begin() + static_cast<std::ptrdiff_t>(axis));
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  HostTensor& out = ctx.allocateOutput(0, DType::Int64, out_dims);
  const AxisLayout l = axisLayout(x0.dims(), axis);
  dispatch<kNumeric>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    int64_t* o = out.mutableData<int64_t>();
    std::vector<T> best(static_cast<size_t>(l.inner));
    for (int64_t b = 0; b < l.outer; ++b) {
      const T* p = in + b * l.n * l.inner;
      int64_t* po = o + b * l.inner;
      std::copy(p, p + l.inner, best.begin());
      std::fill(po, po + l.inner, 0);
      for (int64_t j = 1; j < l.n; ++j) {
        const T* row = p + j * l.inner;
        for (int64_t i = 0; i < l.inner; ++i) {
          const T v = row[i];
          const bool better = is_max ? v > best[i] : v < best[i];
          if (better || (last && v == best[i])) {
            best[i] = v;
            po[i] = j;
          }
        }
      }
    }
  });
}

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

// Normalises one [n][inner] slice along n; mx/sum/arg are per-column scratch of size inner.
template <typename T>
void softmaxSlice(SoftmaxKind kind, const T* p, T* po, int64_t n, int64_t inner,
                  std::vector<T>& mx, std::vector<T>& sum, std::vector<int64_t>& arg) {
  if constexpr (std::is_same_v<T, float>) {
    if (kind != SoftmaxKind::Hardmax) {
      const bool log = kind == SoftmaxKind::LogSoftmax;
      if (inner == 1) vec::softmaxRow(p, po, n, log);
      else vec::softmaxColumns(p, po, n, inner, log, mx.data(), sum.data());
      return;
    }
  }
  if (inner == 1 && kind != SoftmaxKind::Hardmax) {  // one contiguous row
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) m = p[j] > m ? p[j] : m;
    T s = 0;
    if (kind == SoftmaxKind::Softmax) {
      for (int64_t j = 0; j < n; ++j) {
        po[j] = std::exp(p[j] - m);
        s += po[j];
      }
      const T scale = T(1) / s;
      for (int64_t j = 0; j < n; ++j) po[j] *= scale;
    } else {
      for (int64_t j = 0; j < n; ++j) s += std::exp(p[j] - m);
      const T shift = m + std::log(s);
      for (int64_t j = 0; j < n; ++j) po[j] = p[j] - shift;
    }
    return;
  }
  std::fill(mx.begin(), mx.end(), -std::numeric_limits<T>::infinity());
  std::fill(arg.begin(), arg.end(), 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < inner; ++i) {
      const T v = p[j * inner + i];
      if (v > mx[static_cast<size_t>(i)]) {
        mx[static_cast<size_t>(i)] = v;
        arg[static_cast<size_t>(i)] = j;
      }
    }
  if (kind == SoftmaxKind::Hardmax) {  // one-hot of the first maximum
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i)
        po[j * inner + i] = arg[static_cast<size_t>(i)] == j ? T(1) : T(0);
    return;
  }
  std::fill(sum.begin(), sum.end(), T(0));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < inner; ++i) {
      const T e = std::exp(p[j * inner + i] - mx[static_cast<size_t>(i)]);
      if (kind == SoftmaxKind::Softmax) po[j * inner + i] = e;
      sum[static_cast<size_t>(i)] += e;
    }
  if (kind == SoftmaxKind::Softmax) {
    for (T& v : sum) v = T(1) / v;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) po[j * inner + i] *= sum[static_cast<size_t>(i)];
  } else {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = mx[i] + std::log(sum[i]);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i)
        po[j * inner + i] = p[j * inner + i] - sum[static_cast<size_t>(i)];
  }
}

void softmaxKernel(KernelContext& ctx, SoftmaxKind kind) {
  const HostTensor& x0 = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x0.rank());
  AxisLayout l;
  if (ctx.opset() < 13) {
    // Opsets 1-12 flatten to 2D at `axis` and normalise over the whole trailing block.
    const int64_t axis = ctx.attrInt("axis", 1);
    const size_t a = static_cast<size_t>(rank == 0 ? 0 : normalizeAxis(ctx, axis, rank));
    l.outer = product(x0.dims(), 0, a);
    l.n = product(x0.dims(), a);
  } else {
    if (rank == 0) ctx.fail("input must have rank >= 1");
    const int64_t axis = normalizeAxis(ctx, ctx.attrInt("axis", -1), rank);
    l = axisLayout(x0.dims(), static_cast<size_t>(axis));
  }
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  StagedOutput out(ctx, 0, x0.dtype(), x0.dims());
  const int64_t slice = l.n * l.inner;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(slice, 1));
  dispatch<kFloats>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    T* o = out.compute().template mutableData<T>();
    cpu::parallelFor(l.outer, ctx.numThreads(), grain, [&](int64_t ob, int64_t oe) {
      std::vector<T> mx(static_cast<size_t>(l.inner)), sum(mx.size());
      std::vector<int64_t> arg(mx.size());
      for (int64_t b = ob; b < oe; ++b)
        softmaxSlice(kind, in + b * slice, o + b * slice, l.n, l.inner, mx, sum, arg);
    });
  });
  out.finish();
}

// CumSum and CumProd share one scan; `product` picks the operation and its identity.
void cumulativeKernel(KernelContext& ctx, bool product) {
  const HostTensor& x0 = ctx.requireInput(0);
  const HostTensor& axis_t = ctx.requireInput(1);
  if (axis_t.numel() != 1) ctx.fail("axis must be a scalar");
  const int64_t rank = static_cast<int64_t>(x0.rank());
  if (rank == 0) ctx.fail("input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, readInts(ctx, axis_t)[0], rank));
  const bool exclusive = ctx.attrInt("exclusive", 0) != 0;
  const bool reverse = ctx.attrInt("reverse", 0) != 0;
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  StagedOutput out(ctx, 0, x0.dtype(), x0.dims());
  const AxisLayout l = axisLayout(x0.dims(), axis);
  dispatch<kNumeric>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    T* o = out.compute().template mutableData<T>();
    std::vector<T> acc(static_cast<size_t>(l.inner));
    for (int64_t b = 0; b < l.outer; ++b) {
      std::fill(acc.begin(), acc.end(), product ? T(1) : T(0));
      for (int64_t s = 0; s < l.n; ++s) {
        const int64_t j = reverse ? l.n - 1 - s : s;
        const int64_t base = (b * l.n + j) * l.inner;
        for (int64_t i = 0; i < l.inner; ++i) {
          T next;
          if constexpr (std::is_integral_v<T>) {
            // Wraps like the reference's fixed-width integers, without signed overflow.
            next = product ? scalar::wrapMul(acc[i], in[base + i])
                           : scalar::wrapAdd(acc[i], in[base + i]);
          } else {
            next = product ? static_cast<T>(acc[i] * in[base + i])
                           : static_cast<T>(acc[i] + in[base + i]);
          }
          o[base + i] = exclusive ? acc[i] : next;
          acc[i] = next;
        }
      }
    }
  });
  out.finish();
}

void topKKernel(KernelContext& ctx) {
  const HostTensor& x0 = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x0.rank());
  if (rank == 0) ctx.fail("input must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", -1), rank));
  int64_t k = 0;
  if (ctx.opset() >= 10) {
    const std::vector<int64_t> kv = readInts(ctx, ctx.requireInput(1));
    if (kv.size() != 1) ctx.fail("K must hold exactly one value");
    k = kv[0];
  } else {
    k = ctx.attrInt("k", -1);
  }
  const bool largest = ctx.attrInt("largest", 1) != 0;
  const AxisLayout l = axisLayout(x0.dims(), axis);
  if (k < 0 || k > l.n)
    ctx.fail(fmt::format("K = {} is out of range for axis of size {}", k, l.n));
  std::vector<int64_t> out_dims = x0.dims();
  out_dims[axis] = k;
  HostTensor hx;
  const HostTensor* x = stageIn(&x0, hx);
  StagedOutput values(ctx, 0, x0.dtype(), out_dims);
  HostTensor& indices = ctx.allocateOutput(1, DType::Int64, out_dims);
  dispatch<kNumeric>(ctx, x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    T* ov = values.compute().template mutableData<T>();
    int64_t* oi = indices.mutableData<int64_t>();
    std::vector<int64_t> idx(static_cast<size_t>(l.n));
    std::vector<T> col(static_cast<size_t>(l.n));
    // Ties go to the lower index, as in the ONNX reference; the output is always sorted.
    auto before = [&](int64_t a, int64_t b) {
      const T va = col[static_cast<size_t>(a)], vb = col[static_cast<size_t>(b)];
      if (va != vb) return largest ? va > vb : va < vb;
      return a < b;
    };
    for (int64_t b = 0; b < l.outer; ++b) {
      for (int64_t i = 0; i < l.inner; ++i) {
        const T* p = in + b * l.n * l.inner + i;
        for (int64_t j = 0; j < l.n; ++j) col[static_cast<size_t>(j)] = p[j * l.inner];
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
        const int64_t ob = b * k * l.inner + i;
        for (int64_t j = 0; j < k; ++j) {
          ov[ob + j * l.inner] = col[static_cast<size_t>(idx[static_cast<size_t>(j)])];
          oi[ob + j * l.inner] = idx[static_cast<size_t>(j)];
        }
      }
    }
  });
  values.finish();
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({"", op, 1, 1000, std::move(fn)});
}

}  // namespace

void registerReduceKernels(KernelRegistry& r) {
  const std::pair<const char*, ReduceKind> reductions[] = {
      {"ReduceSum", ReduceKind::Sum},         {"ReduceMean", ReduceKind::Mean},
      {"ReduceMax", ReduceKind::Max},         {"ReduceMin", ReduceKind::Min},
      {"ReduceProd", ReduceKind::Prod},       {"ReduceL1", ReduceKind::L1},
      {"ReduceL2", ReduceKind::L2},           {"ReduceSumSquare", ReduceKind::SumSquare},
      {"ReduceLogSum", ReduceKind::LogSum},   {"ReduceLogSumExp", ReduceKind::LogSumExp},
  };
  for (const auto& [name, kind] : reductions) {
    const ReduceKind k = kind;
    add(r, name, [k](KernelContext& ctx) { reduceKernel(ctx, k); });
  }
  add(r, "ArgMax", [](KernelContext& ctx) { argKernel(ctx, true); });
  add(r, "ArgMin", [](KernelContext& ctx) { argKernel(ctx, false); });
  add(r, "Softmax", [](KernelContext& ctx) { softmaxKernel(ctx, SoftmaxKind::Softmax); });
  add(r, "LogSoftmax", [](KernelContext& ctx) { softmaxKernel(ctx, SoftmaxKind::LogSoftmax); });
  add(r, "Hardmax", [](KernelContext& ctx) { softmaxKernel(ctx, SoftmaxKind::Hardmax); });
  add(r, "CumSum", [](KernelContext& ctx) { cumulativeKernel(ctx, false); });
  add(r, "CumProd", [](KernelContext& ctx) { cumulativeKernel(ctx, true); });
  add(r, "TopK", topKKernel);
}

}  // namespace fusectl::kernels
