// Index-driven data movement: ScatterND, ScatterElements (and its older name Scatter), GatherND,
// OneHot and Compress.
//
// Plain copies move elements by size (any dtype of 1-8 bytes); the scatter reductions (add, mul,
// max, min) compute in the element type, so they take the numeric dtypes. Negative indices count
// from the end of their axis; an index still outside the axis after that is an error naming the
// node, never a wild write. Duplicate indices apply in order, so "none" keeps the last update.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

enum class Reduction { None, Add, Mul, Max, Min };

Reduction readReduction(const KernelContext& ctx) {
  const std::string r = ctx.attrString("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  ctx.fail(fmt::format("unknown reduction '{}'", r));
}

template <typename T>
void combine(T& dst, T src, Reduction r) {
  switch (r) {
    case Reduction::None:
      dst = src;
      break;
    case Reduction::Add:
      dst = static_cast<T>(dst + src);
      break;
    case Reduction::Mul:
      dst = static_cast<T>(dst * src);
      break;
    case Reduction::Max:
      dst = std::max(dst, src);
      break;
    case Reduction::Min:
      dst = std::min(dst, src);
      break;
  }
}

// Calls fn(Tag<T>) with a type to copy and combine elements in: the element's own type when a
// reduction computes, else an unsigned integer of its size.
template <typename Fn>
void dispatchScatter(const KernelContext& ctx, DType t, Reduction r, Fn&& fn) {
  if (r == Reduction::None) return dispatchBySize(ctx, t, fn);
  if (isHalf(t)) ctx.fail("scatter reductions on float16/bfloat16 are not supported");
  dispatch<kNumeric>(ctx, t, fn);
}

int64_t wrapIndex(const KernelContext& ctx, int64_t idx, int64_t dim, size_t axis) {
  if (idx < -dim || idx >= dim)
    ctx.fail(fmt::format("index {} is out of range for axis {} of size {}", idx, axis, dim));
  return idx < 0 ? idx + dim : idx;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Offset into `data` of the index tuple idx[0..k), and the slice size that follows it.
int64_t tupleOffset(const KernelContext& ctx, const int64_t* idx, int64_t k,
                    const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                    size_t first_axis) {
  int64_t off = 0;
  for (int64_t j = 0; j < k; ++j) {
    const size_t a = first_axis + static_cast<size_t>(j);
    off += wrapIndex(ctx, idx[j], dims[a], a) * strides[a];
  }
  return off;
}

void scatterNDKernel(KernelContext& ctx) {
  const HostTensor& data = ctx.requireInput(0);
  const HostTensor& indices = ctx.requireInput(1);
  const HostTensor& updates = ctx.requireInput(2);
  const Reduction red = readReduction(ctx);
  if (indices.rank() < 1) ctx.fail("indices must have rank >= 1");
  const int64_t k = indices.dims().back();
  if (k > static_cast<int64_t>(data.rank()))
    ctx.fail(fmt::format("index tuples of length {} exceed data rank {}", k, data.rank()));
  std::vector<int64_t> want(indices.dims().begin(), indices.dims().end() - 1);
  want.insert(want.end(), data.dims().begin() + k, data.dims().end());
  if (updates.dims() != want)
    ctx.fail(fmt::format("updates have dims {}, expected {}", formatDims(updates.dims()),
                         formatDims(want)));
  if (updates.dtype() != data.dtype()) ctx.fail("updates and data must have the same dtype");
  const std::vector<int64_t> idx = readInts(ctx, indices);
  const std::vector<int64_t> strides = stridesOf(data.dims());
  const int64_t slice = product(data.dims(), static_cast<size_t>(k));
  const int64_t tuples = product(indices.dims(), 0, indices.rank() - 1);
  HostTensor& out = ctx.allocateOutput(0, data.dtype(), data.dims());
  std::memcpy(out.mutableRaw(), data.raw(), data.byteSize());
  dispatchScatter(ctx, data.dtype(), red, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.mutableData<T>();
    const T* u = updates.data<T>();
    for (int64_t t = 0; t < tuples; ++t) {
      const int64_t off = tupleOffset(ctx, idx.data() + t * k, k, data.dims(), strides, 0);
      for (int64_t e = 0; e < slice; ++e) combine(o[off + e], u[t * slice + e], red);
    }
  });
}

void scatterElementsKernel(KernelContext& ctx) {
  const HostTensor& data = ctx.requireInput(0);
  const HostTensor& indices = ctx.requireInput(1);
  const HostTensor& updates = ctx.requireInput(2);
  const Reduction red = readReduction(ctx);
  const int64_t rank = static_cast<int64_t>(data.rank());
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  if (indices.dims() != updates.dims()) ctx.fail("indices and updates must have the same dims");
  if (indices.rank() != data.rank()) ctx.fail("indices must have the rank of data");
  if (updates.dtype() != data.dtype()) ctx.fail("updates and data must have the same dtype");
  const std::vector<int64_t> idx = readInts(ctx, indices);
  const std::vector<int64_t> dstride = stridesOf(data.dims());
  const std::vector<int64_t>& idims = indices.dims();
  HostTensor& out = ctx.allocateOutput(0, data.dtype(), data.dims());
  std::memcpy(out.mutableRaw(), data.raw(), data.byteSize());
  dispatchScatter(ctx, data.dtype(), red, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.mutableData<T>();
    const T* u = updates.data<T>();
    std::vector<int64_t> pos(idims.size(), 0);
    for (size_t i = 0; i < idx.size(); ++i) {
      int64_t off = 0;
      for (size_t a = 0; a < pos.size(); ++a) {
        const int64_t p = a == axis ? wrapIndex(ctx, idx[i], data.dim(a), a) : pos[a];
        if (p >= data.dim(a)) ctx.fail("indices extend past data on a non-scatter axis");
        off += p * dstride[a];
      }
      combine(o[off], u[i], red);
      for (size_t a = pos.size(); a-- > 0;) {
        if (++pos[a] < idims[a]) break;
        pos[a] = 0;
      }
    }
  });
}

void gatherNDKernel(KernelContext& ctx) {
  const HostTensor& data = ctx.requireInput(0);
  const HostTensor& indices = ctx.requireInput(1);
  const int64_t b = ctx.attrInt("batch_dims", 0);
  if (indices.rank() < 1) ctx.fail("indices must have rank >= 1");
  if (b < 0 || b >= static_cast<int64_t>(std::min(data.rank(), indices.rank())))
    ctx.fail(fmt::format("batch_dims {} is out of range", b));
  const size_t bd = static_cast<size_t>(b);
  for (size_t i = 0; i < bd; ++i)
    if (data.dim(i) != indices.dim(i)) ctx.fail("data and indices disagree on a batch dim");
  const int64_t k = indices.dims().back();
  if (k < 1 || b + k > static_cast<int64_t>(data.rank()))
    ctx.fail(fmt::format("index tuples of length {} do not fit data rank {} with batch_dims {}", k,
                         data.rank(), b));
  std::vector<int64_t> out_dims(indices.dims().begin(), indices.dims().end() - 1);
  out_dims.insert(out_dims.end(), data.dims().begin() + b + k, data.dims().end());
  const std::vector<int64_t> idx = readInts(ctx, indices);
  const std::vector<int64_t> strides = stridesOf(data.dims());
  const int64_t batches = product(data.dims(), 0, bd);
  const int64_t batch_stride = product(data.dims(), bd);
  const int64_t slice = product(data.dims(), bd + static_cast<size_t>(k));
  const int64_t per_batch = static_cast<int64_t>(idx.size()) / k / std::max<int64_t>(batches, 1);
  HostTensor& out = ctx.allocateOutput(0, data.dtype(), out_dims);
  dispatchBySize(ctx, data.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = data.data<T>();
    T* dst = out.mutableData<T>();
    for (int64_t bi = 0; bi < batches; ++bi) {
      for (int64_t t = 0; t < per_batch; ++t) {
        const int64_t row = bi * per_batch + t;
        const int64_t off = tupleOffset(ctx, idx.data() + row * k, k, data.dims(), strides, bd);
        std::copy(src + bi * batch_stride + off, src + bi * batch_stride + off + slice,
                  dst + row * slice);
      }
    }
  });
}

void oneHotKernel(KernelContext& ctx) {
  const HostTensor& indices = ctx.requireInput(0);
  const HostTensor& depth_t = ctx.requireInput(1);
  const HostTensor& values = ctx.requireInput(2);
  if (values.numel() != 2) ctx.fail("values must hold [off_value, on_value]");
  const double depth_v = readScalar(ctx, depth_t);
  // Checked before the conversion: a NaN or infinite depth from a file has no int64 value.
  if (!(depth_v >= 1 && depth_v < 9.2e18))
    ctx.fail(fmt::format("depth {} must be positive", depth_v));
  const int64_t depth = static_cast<int64_t>(depth_v);
  const int64_t out_rank = static_cast<int64_t>(indices.rank()) + 1;
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", -1), out_rank));
  std::vector<int64_t> dims = indices.dims();
  dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(axis), depth);
  // Float indices are truncated toward zero, as a cast to int64 would.
  std::vector<int64_t> idx(static_cast<size_t>(indices.numel()));
  if (indices.dtype() == DType::Float || indices.dtype() == DType::Double ||
      isHalf(indices.dtype())) {
    HostTensor staged;
    const HostTensor* f = stageIn(&indices, staged);
    dispatch<kFloats>(ctx, f->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(f->data<T>()[i]);
    });
  } else {
    idx = readInts(ctx, indices);
  }
  const int64_t outer = product(indices.dims(), 0, axis);
  const int64_t inner = product(indices.dims(), axis);
  HostTensor& out = ctx.allocateOutput(0, values.dtype(), dims);
  dispatchBySize(ctx, values.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T off = values.data<T>()[0], on = values.data<T>()[1];
    T* o = out.mutableData<T>();
    std::fill(o, o + out.numel(), off);
    for (int64_t a = 0; a < outer; ++a) {
      for (int64_t i = 0; i < inner; ++i) {
        int64_t v = idx[static_cast<size_t>(a * inner + i)];
        if (v < 0) v += depth;
        if (v >= 0 && v < depth) o[(a * depth + v) * inner + i] = on;
      }
    }
  });
}

void compressKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& cond_t = ctx.requireInput(1);
  if (cond_t.rank() != 1) ctx.fail("condition must be 1-D");
  const std::vector<int64_t> cond = readInts(ctx, cond_t);
  const bool has_axis = ctx.node().hasAttr("axis");
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t axis =
      has_axis ? static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank)) : 0;
  const int64_t outer = has_axis ? product(x.dims(), 0, axis) : 1;
  const int64_t len = has_axis ? x.dim(axis) : x.numel();
  const int64_t inner = has_axis ? product(x.dims(), axis + 1) : 1;
  if (static_cast<int64_t>(cond.size()) > len)
    ctx.fail(fmt::format("condition has {} entries, the axis only {}", cond.size(), len));
  std::vector<int64_t> keep;
  for (size_t i = 0; i < cond.size(); ++i)
    if (cond[i] != 0) keep.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> dims;
  if (has_axis) {
    dims = x.dims();
    dims[axis] = static_cast<int64_t>(keep.size());
  } else {
    dims = {static_cast<int64_t>(keep.size())};
  }
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = out.mutableData<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : keep) {
        const T* s = src + (o * len + k) * inner;
        dst = std::copy(s, s + inner, dst);
      }
  });
}

void add(KernelRegistry& r, const char* op, int64_t since, KernelFn fn) {
  r.add({"", op, since, 1000, std::move(fn)});
}

}  // namespace

void registerScatterGatherKernels(KernelRegistry& r) {
  add(r, "ScatterND", 11, scatterNDKernel);
  add(r, "ScatterElements", 11, scatterElementsKernel);
  add(r, "Scatter", 9, scatterElementsKernel);
  add(r, "GatherND", 11, gatherNDKernel);
  add(r, "OneHot", 9, oneHotKernel);
  add(r, "Compress", 9, compressKernel);
}

}  // namespace fusectl::kernels
