// Shape and creation CPU kernels: Reshape, Flatten, Squeeze, Unsqueeze (all aliasing their
// input, no copy), Shape, Size, Constant, ConstantOfShape, Range. registerTensorKernels also
// registers the copying data-movement kernels of movement_ops.cpp and Einsum (einsum.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtype_dispatch.h"
#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

void registerMovementKernels(KernelRegistry& r);  // movement_ops.cpp
void registerEinsumKernel(KernelRegistry& r);     // einsum.cpp

namespace {

using namespace kutil;

void reshapeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> shape =
      ctx.opset() < 5 ? ctx.attrInts("shape") : readInts(ctx, ctx.requireInput(1));
  const bool allowzero = ctx.attrInt("allowzero", 0) != 0;
  std::vector<int64_t> dims(shape.size());
  int64_t known = 1;
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (d == 0 && !allowzero) {
      if (i >= x.rank())
        ctx.fail(fmt::format("shape {} copies dim {} of a rank-{} input", formatDims(shape), i,
                             x.rank()));
      d = x.dim(i);
    }
    if (d == -1) {
      if (infer >= 0) ctx.fail(fmt::format("shape {} has more than one -1", formatDims(shape)));
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (d < 0) ctx.fail(fmt::format("shape {} has a negative dim", formatDims(shape)));
    dims[i] = d;
    if (__builtin_mul_overflow(known, d, &known))
      ctx.fail(fmt::format("shape {} has more elements than int64 can count", formatDims(shape)));
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      ctx.fail(fmt::format("cannot reshape {} to {}", formatDims(x.dims()), formatDims(shape)));
    dims[static_cast<size_t>(infer)] = x.numel() / known;
  } else if (known != x.numel()) {
    ctx.fail(fmt::format("cannot reshape {} ({} elements) to {}", formatDims(x.dims()), x.numel(),
                         formatDims(dims)));
  }
  ctx.setOutput(0, x.reshaped(std::move(dims)));
}

void flattenKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < -rank || axis > rank)
    ctx.fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  if (axis < 0) axis += rank;
  const int64_t outer = product(x.dims(), 0, static_cast<size_t>(axis));
  const int64_t inner = product(x.dims(), static_cast<size_t>(axis));
  ctx.setOutput(0, x.reshaped({outer, inner}));
}

std::vector<int64_t> axesArg(KernelContext& ctx, int64_t input_since) {
  if (ctx.opset() >= input_since) {
    const HostTensor* a = ctx.input(1);
    return a ? readInts(ctx, *a) : std::vector<int64_t>{};
  }
  return ctx.attrInts("axes");
}

void squeezeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const std::vector<int64_t> axes = axesArg(ctx, 13);
  std::vector<bool> drop(x.rank(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < x.rank(); ++i) drop[i] = x.dim(i) == 1;
  } else {
    for (int64_t a : axes) {
      const size_t i = static_cast<size_t>(normalizeAxis(ctx, a, rank, "axes"));
      if (x.dim(i) != 1)
        ctx.fail(fmt::format("cannot squeeze axis {} of size {}", a, x.dim(i)));
      drop[i] = true;
    }
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!drop[i]) dims.push_back(x.dim(i));
  ctx.setOutput(0, x.reshaped(std::move(dims)));
}

void unsqueezeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> axes = axesArg(ctx, 13);
  const int64_t out_rank = static_cast<int64_t>(x.rank() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) {
    const size_t i = static_cast<size_t>(normalizeAxis(ctx, a, out_rank, "axes"));
    if (inserted[i]) ctx.fail(fmt::format("axes {} repeat an axis", formatDims(axes)));
    inserted[i] = true;
  }
  std::vector<int64_t> dims;
  size_t src = 0;
  for (size_t i = 0; i < inserted.size(); ++i) dims.push_back(inserted[i] ? 1 : x.dim(src++));
  ctx.setOutput(0, x.reshaped(std::move(dims)));
}

void shapeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  auto clampIndex = [rank](int64_t v) {
    if (v < 0) v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  // start and end exist from opset 15 on; Shape-1 ignores them, as fold-shape-subgraphs does.
  const bool ranged = ctx.opset() >= 15;
  const int64_t start = ranged ? clampIndex(ctx.attrInt("start", 0)) : 0;
  const int64_t end =
      ranged && ctx.node().hasAttr("end") ? clampIndex(ctx.attrInt("end", rank)) : rank;
  const int64_t n = std::max<int64_t>(0, end - start);
  HostTensor& out = ctx.allocateOutput(0, DType::Int64, {n});
  for (int64_t i = 0; i < n; ++i)
    out.mutableData<int64_t>()[i] = x.dim(static_cast<size_t>(start + i));
}

void sizeKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  ctx.allocateOutput(0, DType::Int64, {}).mutableData<int64_t>()[0] = x.numel();
}

void constantKernel(KernelContext& ctx) {
  const Node& n = ctx.node();
  if (const Attribute* a = n.attr("value")) {
    if (a->kind != AttrKind::Tensor) ctx.fail("attribute 'value' is not a tensor");
    ctx.setOutput(0, HostTensor::fromTensor(a->t));
    return;
  }
  if (n.hasAttr("sparse_value"))
    throw Error(ErrorKind::Unsupported,
                fmt::format("node '{}' (Constant): sparse_value is not supported", n.label()));
  if (n.hasAttr("value_float")) {
    ctx.allocateOutput(0, DType::Float, {}).mutableData<float>()[0] =
        ctx.attrFloat("value_float", 0);
  } else if (n.hasAttr("value_int")) {
    ctx.allocateOutput(0, DType::Int64, {}).mutableData<int64_t>()[0] = ctx.attrInt("value_int", 0);
  } else if (n.hasAttr("value_floats")) {
    const std::vector<float> v = ctx.attrFloats("value_floats");
    HostTensor& out = ctx.allocateOutput(0, DType::Float, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), out.mutableData<float>());
  } else if (n.hasAttr("value_ints")) {
    const std::vector<int64_t> v = ctx.attrInts("value_ints");
    HostTensor& out = ctx.allocateOutput(0, DType::Int64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), out.mutableData<int64_t>());
  } else if (const Attribute* s = n.attr("value_string")) {
    HostTensor& out = ctx.allocateOutput(0, DType::String, {});
    out.strings() = {s->s};
  } else if (const Attribute* ss = n.attr("value_strings")) {
    HostTensor& out =
        ctx.allocateOutput(0, DType::String, {static_cast<int64_t>(ss->strings.size())});
    out.strings() = ss->strings;
  } else {
    ctx.fail("has no value attribute");
  }
}

void constantOfShapeKernel(KernelContext& ctx) {
  const std::vector<int64_t> dims = readInts(ctx, ctx.requireInput(0));
  for (int64_t d : dims)
    if (d < 0) ctx.fail(fmt::format("shape {} has a negative dim", formatDims(dims)));
  const Attribute* a = ctx.node().attr("value");
  if (!a) {
    ctx.allocateOutput(0, DType::Float, dims);
    float* p = ctx.outputs()[0].mutableData<float>();
    std::fill(p, p + product(dims), 0.0f);
    return;
  }
  if (a->kind != AttrKind::Tensor || a->t.numel() != 1)
    ctx.fail("attribute 'value' must be a one-element tensor");
  const Tensor& v = a->t;
  HostTensor& out = ctx.allocateOutput(0, v.dtype(), dims);
  dispatchBySize(ctx, v.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    U val;
    std::memcpy(&val, v.bytes(), sizeof(U));
    std::fill(out.mutableData<U>(), out.mutableData<U>() + out.numel(), val);
  });
}

// Range's element count from ceil((limit - start) / delta): none when negative; an infinite,
// NaN or unrepresentable count (start or delta from a file) is refused rather than converted.
int64_t rangeCount(const KernelContext& ctx, double count) {
  if (std::isnan(count)) ctx.fail("start, limit and delta must be finite");
  if (count <= 0) return 0;
  if (!(count < 9.2e18))
    ctx.fail("start, limit and delta give more elements than a tensor can hold");
  return static_cast<int64_t>(count);
}

void rangeKernel(KernelContext& ctx) {
  const HostTensor& s = ctx.requireInput(0);
  const HostTensor& l = ctx.requireInput(1);
  const HostTensor& d = ctx.requireInput(2);
  if (s.dtype() != l.dtype() || s.dtype() != d.dtype())
    ctx.fail("start, limit and delta must have the same dtype");
  for (const HostTensor* t : {&s, &l, &d})
    if (t->numel() != 1) ctx.fail("start, limit and delta must be scalars");
  if (s.dtype() == DType::Float16 || s.dtype() == DType::BFloat16) {
    // Opset 25 allows the 16-bit floats: count and step in float, round each element once.
    const bool half = s.dtype() == DType::Float16;
    const auto read = [&](const HostTensor& t) {
      const uint16_t bits = t.data<uint16_t>()[0];
      return half ? halfToFloat(bits) : bfloat16ToFloat(bits);
    };
    const float start = read(s), limit = read(l), delta = read(d);
    if (delta == 0) ctx.fail("delta must not be zero");
    const int64_t n = rangeCount(ctx, std::ceil((static_cast<double>(limit) - start) / delta));
    HostTensor& out = ctx.allocateOutput(0, s.dtype(), {n});
    uint16_t* p = out.mutableData<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      const float v = start + static_cast<float>(i) * delta;
      p[i] = half ? floatToHalf(v) : floatToBFloat16(v);
    }
    return;
  }
  dispatch<kFloats | kSigned>(ctx, s.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T start = s.data<T>()[0], limit = l.data<T>()[0], delta = d.data<T>()[0];
    if (delta == 0) ctx.fail("delta must not be zero");
    if constexpr (std::is_floating_point_v<T>) {
      const int64_t n =
          rangeCount(ctx, std::ceil((static_cast<double>(limit) - start) / delta));
      HostTensor& out = ctx.allocateOutput(0, s.dtype(), {n});
      T* p = out.mutableData<T>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    } else {
      // In 128 bits: limit - start and start + i * delta overflow int64 for a file's extremes
      // (start INT64_MIN, limit 6); every element itself lies between start and limit.
      const __int128 span = static_cast<__int128>(limit) - start, step = delta;
      __int128 count = span / step + ((span % step != 0) && ((span < 0) == (step < 0)) ? 1 : 0);
      if (count < 0) count = 0;
      if (count > std::numeric_limits<int64_t>::max())
        ctx.fail("start, limit and delta give more elements than a tensor can hold");
      const int64_t n = static_cast<int64_t>(count);
      HostTensor& out = ctx.allocateOutput(0, s.dtype(), {n});
      T* p = out.mutableData<T>();
      for (int64_t i = 0; i < n; ++i)
        p[i] = static_cast<T>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
    }
  });
}

void add(KernelRegistry& r, const char* op, KernelFn fn) {
  r.add({"", op, 1, 1000, std::move(fn)});
}

}  // namespace

void registerAliasKernels(KernelRegistry& r, Device device, const std::vector<DType>& dtypes) {
  const std::pair<const char*, KernelFn> ops[] = {{"Reshape", reshapeKernel},
                                                   {"Flatten", flattenKernel},
                                                   {"Squeeze", squeezeKernel},
                                                   {"Unsqueeze", unsqueezeKernel}};
  for (const auto& [op, fn] : ops) {
    for (DType dtype : dtypes) {
      KernelInfo info{"", op, 1, 1000, fn, dtype, device};
      info.host_inputs = 0b10;  // the shape or axes
      r.add(std::move(info));
    }
  }
}

void registerTensorKernels(KernelRegistry& r) {
  add(r, "Reshape", reshapeKernel);
  add(r, "Flatten", flattenKernel);
  add(r, "Squeeze", squeezeKernel);
  add(r, "Unsqueeze", unsqueezeKernel);
  // They read only the input's dims: on another device, its bytes stay where they are.
  for (auto [op, fn] : {std::pair<const char*, KernelFn>{"Shape", shapeKernel}, {"Size", sizeKernel}}) {
    KernelInfo info{"", op, 1, 1000, fn};
    info.dims_only_inputs = 1;
    r.add(std::move(info));
  }
  add(r, "Constant", constantKernel);
  add(r, "ConstantOfShape", constantOfShapeKernel);
  add(r, "Range", rangeKernel);
  registerMovementKernels(r);
  registerEinsumKernel(r);
}

}  // namespace fusectl::kernels
