// QuantizeLinear and DequantizeLinear: per-tensor, per-axis (opset 13+) and blocked (opset 21).
//
//   QuantizeLinear:   y = saturate(round_half_to_even(x / scale) + zero_point)
//   DequantizeLinear: y = (x - zero_point) * scale
// The quantized type is the zero point's type, else output_dtype (opset 21), else uint8: 8- and
// 16-bit integers, the packed int4/uint4/int2/uint2 (rounded and clamped like the others), and
// float8/float4e2m1, where x / scale is rounded to nearest even and saturates unless the
// `saturate` attribute (opset 19+) is 0. Scales may be float16 or bfloat16 from opset 19, and
// DequantizeLinear then returns the scale's type.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cast_narrow.h"
#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

bool isQuantType(DType t) {
  return t == DType::UInt8 || t == DType::Int8 || t == DType::UInt16 || t == DType::Int16;
}

// Maps each element of x to the index of its scale / zero point.
struct ParamIndexer {
  int64_t mode = 0;  // 0 per-tensor, 1 per-axis, 2 blocked
  int64_t axis_len = 1, inner = 1, block = 1, blocks = 1;

  int64_t operator()(int64_t i) const {
    if (mode == 0) return 0;
    const int64_t a = (i / inner) % axis_len;
    if (mode == 1) return a;
    const int64_t outer = i / (inner * axis_len);
    return (outer * blocks + a / block) * inner + i % inner;
  }
};

ParamIndexer makeIndexer(const KernelContext& ctx, const HostTensor& x, const HostTensor& scale) {
  ParamIndexer p;
  if (scale.numel() == 1 && scale.rank() <= 1) return p;
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) ctx.fail("axis out of range");
  p.axis_len = x.dim(axis);
  p.inner = product(x.dims(), axis + 1);
  const int64_t block = ctx.attrInt("block_size", 0);
  if (block > 0) {
    if (scale.rank() != x.rank()) ctx.fail("blocked scale must have x's rank");
    p.mode = 2;
    p.block = block;
    p.blocks = p.axis_len / block + (p.axis_len % block != 0);  // no overflow for any block
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t want = d == axis ? p.blocks : x.dim(d);
      if (scale.dim(d) != want) ctx.fail("blocked scale has the wrong shape");
    }
    return p;
  }
  if (ctx.opset() < 13) ctx.fail("scale must be a scalar before opset 13");
  if (scale.rank() != 1 || scale.numel() != p.axis_len) {
    ctx.fail("per-axis scale must be 1-D with " + std::to_string(p.axis_len) + " values");
  }
  p.mode = 1;
  return p;
}

template <typename T>
void quantizeTo(const float* x, const FloatView& scale, const HostTensor* zp,
                const ParamIndexer& idx, T* y, int64_t n) {
  const float lo = static_cast<float>(std::numeric_limits<T>::lowest());
  const float hi = static_cast<float>(std::numeric_limits<T>::max());
  const T* z = zp ? zp->data<T>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = idx(i);
    // nearbyint rounds half to even in the default rounding mode.
    const float v = std::nearbyint(x[i] / scale[k]) + (z ? static_cast<float>(z[k]) : 0.f);
    y[i] = static_cast<T>(saturateQuantized(v, lo, hi));
  }
}

// The narrow targets, one element at a time: packed outputs are written nibble by nibble.
void quantizeNarrow(const KernelContext& ctx, const float* x, const FloatView& scale,
                    const HostTensor* zp, const ParamIndexer& idx, HostTensor& y, int64_t n) {
  const DType t = y.dtype();
  const bool saturate = ctx.attrInt("saturate", 1) != 0;
  auto* bytes = static_cast<uint8_t*>(y.mutableRaw());
  // storePacked keeps its neighbours' bits: clear the padding an odd count leaves.
  if (dtypeIsSubByte(t)) std::memset(bytes, 0, y.byteSize());
  const auto lo = static_cast<double>(packedIntMin(t));
  const auto hi = static_cast<double>(packedIntMax(t));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = idx(i);
    const double z = zp ? elementValue(ctx, *zp, k) : 0.0;
    const float q = x[i] / scale[k];
    if (dtypeIsNarrowFloat(t)) {
      const uint8_t code = doubleToNarrowFloat(static_cast<double>(q) + z, t, saturate);
      if (t == DType::Float4E2M1) storePacked(bytes, i, t, code);
      else bytes[i] = code;
    } else {
      const double v = saturateQuantized(static_cast<double>(std::nearbyint(q)) + z, lo, hi);
      storePacked(bytes, i, t, static_cast<uint32_t>(static_cast<int64_t>(v)));
    }
  }
}

void runQuantize(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& scale_t = ctx.requireInput(1);
  const HostTensor* zp = ctx.input(2);
  if (zp && zp->numel() == 0) zp = nullptr;
  DType yt = DType::UInt8;
  if (zp) {
    yt = zp->dtype();
  } else if (const int64_t od = ctx.attrInt("output_dtype", 0); od != 0) {
    yt = static_cast<DType>(od);
  }
  if (!isQuantType(yt) && !dtypeIsNarrow(yt)) {
    ctx.fail("quantized type " + std::string(dtypeName(yt)) + " is not supported");
  }
  if (!isFloatComputeType(x.dtype()) && x.dtype() != DType::Int32) {
    ctx.fail("x must be float, float16, bfloat16 or int32");
  }
  const ParamIndexer idx = makeIndexer(ctx, x, scale_t);
  if (zp && zp->numel() != scale_t.numel()) ctx.fail("y_zero_point must have y_scale's shape");
  FloatView xf(x), scale(scale_t);
  HostTensor& y = ctx.allocateOutput(0, yt, x.dims());
  const int64_t n = x.numel();
  if (dtypeIsNarrow(yt)) return quantizeNarrow(ctx, xf.data(), scale, zp, idx, y, n);
  switch (yt) {
    case DType::UInt8: quantizeTo(xf.data(), scale, zp, idx, y.mutableData<uint8_t>(), n); break;
    case DType::Int8: quantizeTo(xf.data(), scale, zp, idx, y.mutableData<int8_t>(), n); break;
    case DType::UInt16: quantizeTo(xf.data(), scale, zp, idx, y.mutableData<uint16_t>(), n); break;
    case DType::Int16: quantizeTo(xf.data(), scale, zp, idx, y.mutableData<int16_t>(), n); break;
    default: break;
  }
}

template <typename T>
void dequantizeFrom(const T* x, const FloatView& scale, const HostTensor* zp,
                    const ParamIndexer& idx, float* y, int64_t n) {
  const T* z = zp ? zp->data<T>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = idx(i);
    const float zv = z ? static_cast<float>(z[k]) : 0.f;
    y[i] = (static_cast<float>(x[i]) - zv) * scale[k];
  }
}

void runDequantize(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& scale_t = ctx.requireInput(1);
  const HostTensor* zp = ctx.input(2);
  if (zp && zp->numel() == 0) zp = nullptr;
  if (zp && zp->dtype() != x.dtype()) ctx.fail("x_zero_point must have x's type");
  if (!isQuantType(x.dtype()) && x.dtype() != DType::Int32 && !dtypeIsNarrow(x.dtype())) {
    ctx.fail("x type " + std::string(dtypeName(x.dtype())) + " is not supported");
  }
  if (x.dtype() == DType::Int32 && zp) {
    for (int64_t i = 0; i < zp->numel(); ++i) {
      if (zp->data<int32_t>()[i] != 0) ctx.fail("an int32 x requires a zero x_zero_point");
    }
  }
  const ParamIndexer idx = makeIndexer(ctx, x, scale_t);
  if (zp && zp->numel() != scale_t.numel()) ctx.fail("x_zero_point must have x_scale's shape");
  const DType yt = isFloatComputeType(scale_t.dtype()) ? scale_t.dtype() : DType::Float;
  FloatView scale(scale_t);
  HostTensor& y = ctx.allocateOutput(0, yt, x.dims());
  FloatSink ys(y);
  const int64_t n = x.numel();
  if (dtypeIsNarrow(x.dtype())) {
    float* out = ys.data();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = idx(i);
      const double z = zp ? elementValue(ctx, *zp, k) : 0.0;
      out[i] = static_cast<float>(elementValue(ctx, x, i) - z) * scale[k];
    }
    ys.commit();
    return;
  }
  switch (x.dtype()) {
    case DType::UInt8: dequantizeFrom(x.data<uint8_t>(), scale, zp, idx, ys.data(), n); break;
    case DType::Int8: dequantizeFrom(x.data<int8_t>(), scale, zp, idx, ys.data(), n); break;
    case DType::UInt16: dequantizeFrom(x.data<uint16_t>(), scale, zp, idx, ys.data(), n); break;
    case DType::Int16: dequantizeFrom(x.data<int16_t>(), scale, zp, idx, ys.data(), n); break;
    case DType::Int32: dequantizeFrom(x.data<int32_t>(), scale, zp, idx, ys.data(), n); break;
    default: break;
  }
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerQuantizeKernels(KernelRegistry& r) {
  r.add({"", "QuantizeLinear", 10, 1000, cpu::runQuantize});
  r.add({"", "DequantizeLinear", 10, 1000, cpu::runDequantize});
}

}  // namespace fusectl::kernels
