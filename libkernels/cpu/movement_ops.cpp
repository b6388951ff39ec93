// Data-movement CPU kernels that copy: Transpose, Concat, Split, Slice, Gather, GatherElements,
// Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Trilu.
//
// They only move elements, so they dispatch on element size, not dtype (dispatchBySize). Most
// are a strided view of the input copied into the output by stridedCopy (broadcast.h): Slice is
// the view with start offsets and step strides, Expand a view with zero strides, Tile the view
// [r0,d0,r1,d1,...] with zero strides on the repeat dims, DepthToSpace a 6-D transposed view.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "broadcast.h"
#include "dtype_dispatch.h"
#include "fusectl/graph/slice_range.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {
namespace {

using namespace kutil;

// Copies the view (dims, element strides) of `src` starting at element `offset` into a new
// output of those dims.
void copyView(KernelContext& ctx, size_t out_index, const HostTensor& src,
              const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
              int64_t offset, std::vector<int64_t> out_dims) {
  HostTensor& out = ctx.allocateOutput(out_index, src.dtype(), out_dims);
  if (out.numel() == 0) return;
  dispatchBySize(ctx, src.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    stridedCopy<U>(dims, strides, src.data<U>() + offset, out.mutableData<U>());
  });
}

void transposeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const size_t rank = x.rank();
  std::vector<int64_t> perm = ctx.attrInts("perm");
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  if (perm.size() != rank)
    ctx.fail(fmt::format("perm {} does not match rank {}", formatDims(perm), rank));
  std::vector<bool> seen(rank, false);
  const std::vector<int64_t> in_strides = contiguousStrides(x.dims());
  std::vector<int64_t> dims(rank), strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    const size_t p =
        static_cast<size_t>(normalizeAxis(ctx, perm[i], static_cast<int64_t>(rank), "perm"));
    if (seen[p]) ctx.fail(fmt::format("perm {} is not a permutation", formatDims(perm)));
    seen[p] = true;
    dims[i] = x.dim(p);
    strides[i] = in_strides[p];
  }
  copyView(ctx, 0, x, dims, strides, 0, dims);
}

void concatKernel(KernelContext& ctx) {
  std::vector<const HostTensor*> ins;
  for (size_t i = 0; i < ctx.numInputs(); ++i) ins.push_back(&ctx.requireInput(i));
  if (ins.empty()) ctx.fail("expects at least one input");
  const HostTensor& first = *ins[0];
  const int64_t rank = static_cast<int64_t>(first.rank());
  if (rank == 0) ctx.fail("cannot concatenate scalars");
  const size_t axis = static_cast<size_t>(
      normalizeAxis(ctx, ctx.attrInt("axis", ctx.opset() < 4 ? 1 : 0), rank));
  std::vector<int64_t> dims = first.dims();
  dims[axis] = 0;
  for (const HostTensor* t : ins) {
    bool ok = t->dtype() == first.dtype() && t->rank() == first.rank();
    for (size_t d = 0; ok && d < first.rank(); ++d) ok = d == axis || t->dim(d) == first.dim(d);
    if (!ok)
      ctx.fail(fmt::format("inputs {} {} and {} {} cannot be concatenated on axis {}",
                           dtypeName(first.dtype()), formatDims(first.dims()),
                           dtypeName(t->dtype()), formatDims(t->dims()), axis));
    dims[axis] += t->dim(axis);
  }
  HostTensor& out = ctx.allocateOutput(0, first.dtype(), dims);
  const size_t esize = dtypeSize(first.dtype());
  if (first.dtype() == DType::String || esize == 0 ||
      dtypeStorageBytes(first.dtype(), 2) != 2 * esize)
    failDtype(ctx, first.dtype());
  const int64_t outer = product(dims, 0, axis);
  const size_t out_row = static_cast<size_t>(product(dims, axis)) * esize;
  auto* o = static_cast<uint8_t*>(out.mutableRaw());
  size_t col = 0;
  for (const HostTensor* t : ins) {
    const size_t row = static_cast<size_t>(product(t->dims(), axis)) * esize;
    const auto* s = static_cast<const uint8_t*>(t->raw());
    if (row != 0)
      for (int64_t b = 0; b < outer; ++b)
        std::memcpy(o + static_cast<size_t>(b) * out_row + col, s + static_cast<size_t>(b) * row,
                    row);
    col += row;
  }
}

void splitKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  const int64_t dim = x.dim(axis);
  std::vector<int64_t> split;
  // The sizes are an input from opset 13 (and optionally at opset 1), an attribute between.
  if (ctx.opset() < 13) split = ctx.attrInts("split");
  if (ctx.opset() >= 13 || (ctx.opset() == 1 && split.empty()))
    if (const HostTensor* s = ctx.input(1)) split = readInts(ctx, *s);
  const int64_t n = static_cast<int64_t>(ctx.numOutputs());
  if (split.empty()) {
    int64_t parts = n;
    if (ctx.opset() >= 18 && ctx.node().hasAttr("num_outputs")) {
      parts = ctx.attrInt("num_outputs", n);
      if (parts != n)
        ctx.fail(fmt::format("num_outputs {} but the node has {} outputs", parts, n));
    }
    if (parts <= 0) ctx.fail("has no outputs");
    // Equal chunks; from opset 18 the last may be smaller.
    const int64_t chunk = (dim + parts - 1) / parts;
    if (ctx.opset() < 18 && dim % parts != 0)
      ctx.fail(fmt::format("axis of size {} does not split into {} equal parts", dim, parts));
    for (int64_t i = 0; i < parts; ++i) split.push_back(std::min(chunk, dim - i * chunk));
    if (split.back() < 0)
      ctx.fail(fmt::format("axis of size {} cannot be split into {} chunks", dim, parts));
  }
  if (static_cast<int64_t>(split.size()) != n)
    ctx.fail(fmt::format("split {} does not match the {} outputs", formatDims(split), n));
  int64_t total = 0;
  for (int64_t s : split) {
    if (s < 0) ctx.fail(fmt::format("split {} has a negative size", formatDims(split)));
    if (__builtin_add_overflow(total, s, &total))
      ctx.fail(fmt::format("split {} does not sum to the axis size {}", formatDims(split), dim));
  }
  if (total != dim)
    ctx.fail(fmt::format("split {} does not sum to the axis size {}", formatDims(split), dim));
  const std::vector<int64_t> strides = contiguousStrides(x.dims());
  int64_t start = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    std::vector<int64_t> dims = x.dims();
    dims[axis] = split[i];
    if (ctx.outputWanted(i)) copyView(ctx, i, x, dims, strides, start * strides[axis], dims);
    start += split[i];
  }
}

void sliceKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = ctx.attrInts("starts");
    ends = ctx.attrInts("ends");
    axes = ctx.attrInts("axes");
  } else {
    starts = readInts(ctx, ctx.requireInput(1));
    ends = readInts(ctx, ctx.requireInput(2));
    if (const HostTensor* a = ctx.input(3)) axes = readInts(ctx, *a);
    if (const HostTensor* s = ctx.input(4)) steps = readInts(ctx, *s);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    ctx.fail("starts, ends, axes and steps must have the same length");
  const std::vector<int64_t> in_strides = contiguousStrides(x.dims());
  std::vector<int64_t> dims = x.dims(), strides = in_strides;
  std::vector<bool> seen(x.rank(), false);
  int64_t offset = 0;
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t a = static_cast<size_t>(normalizeAxis(ctx, axes[k], rank, "axes"));
    if (seen[a]) ctx.fail(fmt::format("axes {} repeat an axis", formatDims(axes)));
    seen[a] = true;
    const int64_t d = x.dim(a);
    const int64_t step = steps[k];
    if (step == 0) ctx.fail("steps must not be zero");
    const SliceRange range = sliceRange(d, starts[k], ends[k], step);
    dims[a] = range.count;
    // A stride is formed only when two elements are taken, and then |step| is below the axis
    // size: a file's step of INT64_MAX would overflow it.
    strides[a] = range.count > 1 ? in_strides[a] * step : in_strides[a];
    if (range.count > 0) offset += range.first * in_strides[a];
  }
  copyView(ctx, 0, x, dims, strides, offset, dims);
}

// Index values of `t` for an axis of size `dim`, negative ones wrapped; fails when out of range.
std::vector<int64_t> readIndices(const KernelContext& ctx, const HostTensor& t, int64_t dim) {
  std::vector<int64_t> idx = readInts(ctx, t);
  for (int64_t& i : idx) {
    if (i < -dim || i >= dim)
      ctx.fail(fmt::format("index {} is out of range for an axis of size {}", i, dim));
    if (i < 0) i += dim;
  }
  return idx;
}

void gatherKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& ind = ctx.requireInput(1);
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (rank == 0) ctx.fail("data must have rank >= 1");
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  const std::vector<int64_t> idx = readIndices(ctx, ind, x.dim(axis));
  std::vector<int64_t> dims(x.dims().begin(), x.dims().begin() + static_cast<std::ptrdiff_t>(axis));
  dims.insert(dims.end(), ind.dims().begin(), ind.dims().end());
  dims.insert(dims.end(), x.dims().begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.dims().end());
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  const int64_t outer = product(x.dims(), 0, axis);
  const int64_t inner = product(x.dims(), axis + 1);
  const int64_t d = x.dim(axis);
  const int64_t n = static_cast<int64_t>(idx.size());
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* s = x.data<U>();
    U* o = out.mutableData<U>();
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t j = 0; j < n; ++j) {
        const U* src = s + (b * d + idx[static_cast<size_t>(j)]) * inner;
        U* dst = o + (b * n + j) * inner;
        if (inner == 1) *dst = *src;
        else std::copy(src, src + inner, dst);
      }
  });
}

void gatherElementsKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& ind = ctx.requireInput(1);
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (rank == 0 || ind.rank() != x.rank())
    ctx.fail("data and indices must have the same rank >= 1");
  const size_t axis = static_cast<size_t>(normalizeAxis(ctx, ctx.attrInt("axis", 0), rank));
  // Off the axis, each index position reads data at the same position (as ONNX Runtime
  // requires, and take_along_axis without broadcasting): indices may not be longer there.
  for (size_t k = 0; k < x.rank(); ++k) {
    if (k != axis && ind.dim(k) > x.dim(k)) {
      ctx.fail(fmt::format("indices {} are longer than data {} on axis {}", formatDims(ind.dims()),
                           formatDims(x.dims()), k));
    }
  }
  const std::vector<int64_t> idx = readIndices(ctx, ind, x.dim(axis));
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), ind.dims());
  if (out.numel() == 0) return;
  const std::vector<int64_t> xs = contiguousStrides(x.dims());
  std::vector<int64_t> walk = xs;  // data offsets advance along every dim but the axis
  walk[axis] = 0;
  const std::vector<int64_t> is = contiguousStrides(ind.dims());
  std::vector<bool> skip(x.rank(), false);
  const size_t last = x.rank() - 1;
  skip[last] = true;
  const int64_t n = ind.dim(last);
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* s = x.data<U>();
    U* o = out.mutableData<U>();
    forEachOuter(ind.dims(), walk, is, skip, [&](int64_t so, int64_t io) {
      for (int64_t l = 0; l < n; ++l)
        o[io + l] = s[so + l * walk[last] + idx[static_cast<size_t>(io + l)] * xs[axis]];
    });
  });
}

void expandKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> shape = readInts(ctx, ctx.requireInput(1));
  const std::vector<int64_t> dims = broadcastDims(ctx, {&x.dims(), &shape});
  const std::vector<int64_t> xs = contiguousStrides(x.dims());
  std::vector<int64_t> strides(dims.size(), 0);
  const size_t lead = dims.size() - x.rank();
  for (size_t i = 0; i < x.rank(); ++i)
    strides[lead + i] = x.dim(i) == 1 ? 0 : xs[i];
  copyView(ctx, 0, x, dims, strides, 0, dims);
}

void tileKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  std::vector<int64_t> reps;
  if (ctx.opset() < 6) {  // Tile-1: a scalar count `tiles` along the scalar input `axis`
    const std::vector<int64_t> tiles = readInts(ctx, ctx.requireInput(1));
    const std::vector<int64_t> axis_v = readInts(ctx, ctx.requireInput(2));
    if (tiles.size() != 1 || axis_v.size() != 1) ctx.fail("tiles and axis must be scalars");
    const int64_t axis = normalizeAxis(ctx, axis_v[0], static_cast<int64_t>(x.rank()));
    reps.assign(x.rank(), 1);
    reps[static_cast<size_t>(axis)] = tiles[0];
  } else {
    reps = readInts(ctx, ctx.requireInput(1));
  }
  if (reps.size() != x.rank())
    ctx.fail(fmt::format("repeats {} do not match rank {}", formatDims(reps), x.rank()));
  const std::vector<int64_t> xs = contiguousStrides(x.dims());
  std::vector<int64_t> view_dims, view_strides, out_dims;
  for (size_t i = 0; i < x.rank(); ++i) {
    if (reps[i] < 0) ctx.fail(fmt::format("repeats {} has a negative value", formatDims(reps)));
    view_dims.insert(view_dims.end(), {reps[i], x.dim(i)});
    view_strides.insert(view_strides.end(), {0, xs[i]});
    int64_t extent = 0;
    if (__builtin_mul_overflow(reps[i], x.dim(i), &extent))
      ctx.fail(fmt::format("repeats {} overflow int64 on dim {}", formatDims(reps), i));
    out_dims.push_back(extent);
  }
  copyView(ctx, 0, x, view_dims, view_strides, 0, out_dims);
}

// Source index along one padded dim for each output position; -1 means "constant".
std::vector<int64_t> padMap(int64_t d, int64_t before, int64_t out, const std::string& mode) {
  std::vector<int64_t> m(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - before;
    if (i < 0 || i >= d) {
      if (mode == "constant") {
        i = -1;
      } else if (mode == "edge") {
        i = std::clamp<int64_t>(i, 0, d - 1);
      } else if (mode == "wrap") {
        i = ((i % d) + d) % d;
      } else {  // reflect, repeatedly for pads wider than the dim (as numpy.pad does)
        if (d == 1) {
          i = 0;
        } else {
          const int64_t period = 2 * (d - 1);
          i = ((i % period) + period) % period;
          if (i >= d) i = period - i;
        }
      }
    }
    m[static_cast<size_t>(o)] = i;
  }
  return m;
}

void padKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const size_t rank = x.rank();
  const std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail(fmt::format("unknown mode '{}'", mode));
  std::vector<int64_t> pads;
  std::vector<int64_t> axes;
  // The constant as a one-element tensor of x's dtype.
  HostTensor cval(x.dtype(), {});
  if (ctx.opset() < 11) {
    pads = ctx.attrInts(ctx.opset() < 2 ? "paddings" : "pads");
    HostTensor f(DType::Float, {});
    f.mutableData<float>()[0] = ctx.attrFloat("value", 0.0f);
    convertTensor(ctx, f, cval);
  } else {
    pads = readInts(ctx, ctx.requireInput(1));
    if (const HostTensor* c = ctx.input(2)) {
      if (c->numel() == 1) {
        if (c->dtype() != x.dtype()) ctx.fail("constant_value dtype differs from the input's");
        std::memcpy(cval.mutableRaw(), c->raw(), dtypeSize(x.dtype()));
      }
    }
    if (const HostTensor* a = ctx.input(3)) axes = readInts(ctx, *a);
  }
  if (axes.empty())
    for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int64_t>(i));
  if (pads.size() != 2 * axes.size())
    ctx.fail(fmt::format("pads {} must hold two values per padded axis ({})", formatDims(pads),
                         axes.size()));
  std::vector<int64_t> before(rank, 0), after(rank, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t a =
        static_cast<size_t>(normalizeAxis(ctx, axes[k], static_cast<int64_t>(rank), "axes"));
    before[a] = pads[k];
    after[a] = pads[k + axes.size()];
  }
  std::vector<int64_t> dims(rank);
  std::vector<std::vector<int64_t>> maps(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (__builtin_add_overflow(x.dim(i), before[i], &dims[i]) ||
        __builtin_add_overflow(dims[i], after[i], &dims[i])) {
      ctx.fail(fmt::format("pads {} overflow int64", formatDims(pads)));
    }
    if (dims[i] < 0) ctx.fail(fmt::format("pads {} remove more than the input has", formatDims(pads)));
    if (mode != "constant" && x.dim(i) == 0 && dims[i] > 0)
      ctx.fail(fmt::format("mode '{}' cannot pad an empty axis", mode));
  }
  // The output first: its size limit (ExecutorOptions::max_tensor_bytes) is checked there,
  // before the index maps, one entry per output position along each dim, are built.
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  if (out.numel() == 0) return;
  for (size_t i = 0; i < rank; ++i) maps[i] = padMap(x.dim(i), before[i], dims[i], mode);
  if (rank == 0) {
    std::memcpy(out.mutableRaw(), x.raw(), dtypeSize(x.dtype()));
    return;
  }
  const std::vector<int64_t> xs = contiguousStrides(x.dims());
  const int64_t n = dims[rank - 1];
  const std::vector<int64_t>& last = maps[rank - 1];
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U c = cval.data<U>()[0];
    const U* s = x.data<U>();
    U* o = out.mutableData<U>();
    std::vector<int64_t> idx(rank, 0);
    for (int64_t row = 0, rows = out.numel() / n; row < rows; ++row) {
      int64_t so = 0;
      bool inside = true;
      for (size_t d = 0; d + 1 < rank; ++d) {
        const int64_t m = maps[d][static_cast<size_t>(idx[d])];
        if (m < 0) inside = false;
        so += m * xs[d];
      }
      U* orow = o + row * n;
      if (!inside) {
        std::fill(orow, orow + n, c);
      } else {
        const U* srow = s + so;
        for (int64_t l = 0; l < n; ++l) {
          const int64_t m = last[static_cast<size_t>(l)];
          orow[l] = m < 0 ? c : srow[m];
        }
      }
      for (size_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < dims[d]) break;
        idx[d] = 0;
      }
    }
  });
}

void depthToSpaceKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.rank() != 4) ctx.fail("input must be 4-D");
  const int64_t b = ctx.attrInt("blocksize", 0);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  int64_t bb = 0;
  if (b <= 0 || __builtin_mul_overflow(b, b, &bb) || C % bb != 0)
    ctx.fail(fmt::format("blocksize {} does not divide {} channels", b, C));
  const int64_t c = C / (b * b);
  const bool crd = ctx.attrString("mode", "DCR") == "CRD";
  // Output viewed as [N, c, H, b1, W, b2]; the source channel is (b1*b+b2)*c + ci (DCR) or
  // ci*b*b + b1*b + b2 (CRD).
  const int64_t hw = H * W;
  const std::vector<int64_t> dims = {N, c, H, b, W, b};
  const std::vector<int64_t> strides =
      crd ? std::vector<int64_t>{C * hw, b * b * hw, W, b * hw, 1, hw}
          : std::vector<int64_t>{C * hw, hw, W, b * c * hw, 1, c * hw};
  copyView(ctx, 0, x, dims, strides, 0, {N, c, H * b, W * b});
}

void spaceToDepthKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.rank() != 4) ctx.fail("input must be 4-D");
  const int64_t b = ctx.attrInt("blocksize", 0);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (b <= 0 || H % b != 0 || W % b != 0)
    ctx.fail(fmt::format("blocksize {} does not divide the spatial dims {}x{}", b, H, W));
  // b divides H and W, so the product below is bounded by the input, except over empty planes.
  int64_t out_channels = 0;
  if (__builtin_mul_overflow(b, b, &out_channels) ||
      __builtin_mul_overflow(C, out_channels, &out_channels))
    ctx.fail(fmt::format("blocksize {} is too large", b));
  // Output viewed as [N, b1, b2, C, H/b, W/b]; channel (b1*b + b2)*C + c.
  const std::vector<int64_t> dims = {N, b, b, C, H / b, W / b};
  const std::vector<int64_t> strides = {C * H * W, W, 1, H * W, b * W, b};
  copyView(ctx, 0, x, dims, strides, 0, {N, C * b * b, H / b, W / b});
}

void triluKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.rank() < 2) ctx.fail("input must have rank >= 2");
  const bool upper = ctx.attrInt("upper", 1) != 0;
  int64_t k = 0;
  if (const HostTensor* kt = ctx.input(1)) {
    const std::vector<int64_t> kv = readInts(ctx, *kt);
    if (kv.size() != 1) ctx.fail("k must be a scalar");
    k = kv[0];
  }
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), x.dims());
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t batch = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  dispatchBySize(ctx, x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* s = x.data<U>();
    U* o = out.mutableData<U>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t base = (b * rows + i) * cols;
        // Kept columns: j >= i + k (upper) or j <= i + k (lower).
        const int64_t lo = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
        const int64_t hi = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
        std::fill(o + base, o + base + cols, U(0));
        if (hi > lo) std::copy(s + base + lo, s + base + hi, o + base + lo);
      }
  });
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({"", op, 1, 1000, std::move(fn)});
}

}  // namespace

void registerMovementKernels(KernelRegistry& r) {
  add(r, "Transpose", transposeKernel);
  add(r, "Concat", concatKernel);
  add(r, "Split", splitKernel);
  add(r, "Slice", sliceKernel);
  add(r, "Gather", gatherKernel);
  add(r, "GatherElements", gatherElementsKernel);
  add(r, "Expand", expandKernel);
  add(r, "Tile", tileKernel);
  add(r, "Pad", padKernel);
  add(r, "DepthToSpace", depthToSpaceKernel);
  add(r, "SpaceToDepth", spaceToDepthKernel);
  add(r, "Trilu", triluKernel);
}

}  // namespace fusectl::kernels
