// Index-producing and index-driven ops without a better home: NonZero, ReverseSequence,
// EyeLike and MaxUnpool.
//
// NonZero: [rank, count] int64 coordinates of the non-zero elements in row-major order.
// ReverseSequence: along time_axis, the first sequence_lens[b] elements of batch entry b
// reversed, the rest copied. EyeLike: a 2-D zero tensor with ones on diagonal k.
// MaxUnpool: zeros of the unpooled shape (output_shape, or (in - 1) * stride + kernel - pads)
// with each X placed at its flat index from I (MaxPool's Indices).
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

void nonZeroKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  std::vector<int64_t> hits;
  HostTensor staged;
  const HostTensor* in = stageIn(&x, staged);
  dispatch<kAll>(ctx, in->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = in->data<T>();
    for (int64_t i = 0; i < in->numel(); ++i)
      if (p[i] != T{}) hits.push_back(i);
  });
  const int64_t rank = static_cast<int64_t>(x.rank()), count = static_cast<int64_t>(hits.size());
  HostTensor& out = ctx.allocateOutput(0, DType::Int64, {rank, count});
  int64_t* o = out.mutableData<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    int64_t rest = hits[static_cast<size_t>(j)];
    for (int64_t a = rank; a-- > 0;) {
      o[a * count + j] = rest % x.dim(static_cast<size_t>(a));
      rest /= x.dim(static_cast<size_t>(a));
    }
  }
}

void reverseSequenceKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> lens = readInts(ctx, ctx.requireInput(1));
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (rank < 2) ctx.fail("input must have rank >= 2");
  const size_t batch_axis =
      static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("batch_axis", 1), rank));
  const size_t time_axis =
      static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("time_axis", 0), rank));
  if (batch_axis == time_axis) ctx.fail("batch_axis and time_axis must differ");
  if (static_cast<int64_t>(lens.size()) != x.dim(batch_axis))
    ctx.fail("sequence_lens must have one value per batch entry");
  for (int64_t l : lens)
    if (l < 0 || l > x.dim(time_axis))
      ctx.fail(fmt::format("sequence length {} is outside [0, {}]", l, x.dim(time_axis)));
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  std::vector<int64_t> strides(x.rank(), 1);
  for (size_t a = x.rank(); a-- > 1;) strides[a - 1] = strides[a] * x.dim(a);
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = out.mutableData<T>();
    std::vector<int64_t> pos(x.rank(), 0);
    for (int64_t e = 0; e < x.numel(); ++e) {
      const int64_t t = pos[time_axis], len = lens[static_cast<size_t>(pos[batch_axis])];
      const int64_t from = t < len ? e + (len - 1 - 2 * t) * strides[time_axis] : e;
      dst[e] = src[from];
      for (size_t a = x.rank(); a-- > 0;) {
        if (++pos[a] < x.dim(a)) break;
        pos[a] = 0;
      }
    }
  });
}

void eyeLikeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.rank() != 2) ctx.fail("input must be 2-D");
  const DType t = kutil::dtypeAttr(ctx, "dtype", x.dtype());
  const int64_t k = ctx.attrInt("k", 0), rows = x.dim(0), cols = x.dim(1);
  HostTensor& out = ctx.allocateOutput(0, t, x.dims());
  std::memset(out.mutableRaw(), 0, out.byteSize());
  HostTensor one_f(DType::Float, {1});
  one_f.mutableData<float>()[0] = 1.0f;
  HostTensor one(t, {1});
  convertTensor(ctx, one_f, one);
  const size_t size = dtypeSize(t);
  // A diagonal outside the matrix leaves it all zeros; inside, r + k cannot overflow.
  if (k >= cols || k <= -rows) return;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = r + k;
    if (c >= 0 && c < cols)
      std::memcpy(static_cast<char*>(out.mutableRaw()) + static_cast<size_t>(r * cols + c) * size,
                  one.raw(), size);
  }
}

void maxUnpoolKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> idx = readInts(ctx, ctx.requireInput(1));
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  if (static_cast<int64_t>(idx.size()) != x.numel()) ctx.fail("I must have the dims of X");
  const size_t r = x.rank() - 2;
  const std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  const std::vector<int64_t> strides = ctx.attrInts("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (ks.size() != r || strides.size() != r || pads.size() != 2 * r)
    ctx.fail("kernel_shape, strides and pads must match the spatial rank");
  // Indices address the default unpooled shape; a larger output_shape places each value at
  // the same coordinates there (the spec example: index 5 of a 4x4 plane lands at [1, 1]).
  std::vector<int64_t> natural = {x.dim(0), x.dim(1)};
  for (size_t i = 0; i < r; ++i) {
    // Checked: strides, kernel_shape and pads come from the file.
    int64_t len = 0;
    if (__builtin_mul_overflow(x.dim(i + 2) - 1, strides[i], &len) ||
        __builtin_add_overflow(len, ks[i], &len) || __builtin_sub_overflow(len, pads[i], &len) ||
        __builtin_sub_overflow(len, pads[i + r], &len) || len < 0) {
      ctx.fail("kernel_shape, strides and pads do not give an unpooled size");
    }
    natural.push_back(len);
  }
  // The indices address the natural shape: its element count must exist too.
  int64_t natural_count = 1;
  for (int64_t d : natural)
    if (__builtin_mul_overflow(natural_count, d, &natural_count))
      ctx.fail("the unpooled shape is too large");
  std::vector<int64_t> dims = natural;
  if (const HostTensor* shape = ctx.input(2); shape && shape->numel() > 0) {
    dims = readInts(ctx, *shape);
    if (dims.size() != x.rank()) ctx.fail("output_shape must have the rank of X");
  }
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  std::memset(out.mutableRaw(), 0, out.byteSize());
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] < 0 || idx[i] >= natural_count)
        ctx.fail(
            fmt::format("index {} is outside the unpooled shape {}", idx[i], formatDims(natural)));
      int64_t rest = idx[i], off = 0, scale = 1;
      bool inside = true;
      for (size_t a = natural.size(); a-- > 0;) {
        const int64_t c = rest % natural[a];
        rest /= natural[a];
        if (c >= dims[a]) inside = false;
        off += c * scale;
        scale *= dims[a];
      }
      if (inside) out.mutableData<T>()[off] = x.data<T>()[i];
    }
  });
}

void add(KernelRegistry& r, const char* op, int64_t since, KernelFn fn) {
  r.add({"", op, since, 1000, std::move(fn)});
}

}  // namespace

void registerIndexKernels(KernelRegistry& r) {
  add(r, "NonZero", 9, nonZeroKernel);
  add(r, "ReverseSequence", 10, reverseSequenceKernel);
  add(r, "EyeLike", 9, eyeLikeKernel);
  add(r, "MaxUnpool", 9, maxUnpoolKernel);
}

}  // namespace fusectl::kernels
