// Cast to and from the narrow types: every value passes through double, which holds each
// source value exactly (float32/float16/narrow types), so the narrow rounding is done once.
#include "cast_narrow.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "dtype_dispatch.h"

namespace fusectl::kernels::cpu {
namespace {

// A double tensor of the values of x (narrow types decoded, others converted).
HostTensor toDoubles(const KernelContext& ctx, const HostTensor& x) {
  HostTensor d(DType::Double, x.dims());
  double* out = d.mutableData<double>();
  if (!dtypeIsNarrow(x.dtype())) {
    kutil::convertTensor(ctx, x, d);
    return d;
  }
  const auto* bytes = static_cast<const uint8_t*>(x.raw());
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    if (x.dtype() == DType::Float4E2M1) {
      out[i] = narrowFloatToDouble(static_cast<uint8_t>(loadPacked(bytes, i, x.dtype())),
                                   x.dtype());
    } else if (dtypeIsSubByte(x.dtype())) {
      out[i] = static_cast<double>(loadPacked(bytes, i, x.dtype()));
    } else {
      out[i] = narrowFloatToDouble(bytes[i], x.dtype());
    }
  }
  return d;
}

// The C cast of a double to an integer, wrapped to `bits` bits: NaN and out-of-int64 values
// become 0, like the reference's numpy astype on the platforms it runs.
uint32_t wrappedCode(double v, int bits) {
  if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) return 0;
  const auto i = static_cast<int64_t>(v);
  return static_cast<uint32_t>(static_cast<uint64_t>(i) & ((1u << bits) - 1));
}

}  // namespace

void castNarrow(const KernelContext& ctx, const HostTensor& x, HostTensor& out, bool saturate,
                E8M0Rounding e8m0) {
  const HostTensor values = toDoubles(ctx, x);
  const DType to = out.dtype();
  if (!dtypeIsNarrow(to)) {
    kutil::convertTensor(ctx, values, out);
    return;
  }
  const double* v = values.data<double>();
  auto* bytes = static_cast<uint8_t*>(out.mutableRaw());
  const int64_t n = x.numel();
  // storePacked keeps the bits around the element it writes: the arena's old bytes would stay
  // in the padding of an odd count, and the output's bytes would differ from run to run.
  if (dtypeIsSubByte(to)) std::memset(bytes, 0, out.byteSize());
  if (to == DType::Float4E2M1) {
    for (int64_t i = 0; i < n; ++i)
      storePacked(bytes, i, to, doubleToNarrowFloat(v[i], to, saturate));
  } else if (dtypeIsSubByte(to)) {
    const int bits = dtypeBits(to);
    for (int64_t i = 0; i < n; ++i) storePacked(bytes, i, to, wrappedCode(v[i], bits));
  } else {
    for (int64_t i = 0; i < n; ++i) bytes[i] = doubleToNarrowFloat(v[i], to, saturate, e8m0);
  }
}

double elementValue(const KernelContext& ctx, const HostTensor& t, int64_t i) {
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  switch (t.dtype()) {
    case DType::UInt8: return bytes[i];
    case DType::Int8: return static_cast<int8_t>(bytes[i]);
    case DType::UInt16: return t.data<uint16_t>()[i];
    case DType::Int16: return t.data<int16_t>()[i];
    case DType::Int32: return t.data<int32_t>()[i];
    case DType::Float4E2M1:
      return narrowFloatToDouble(static_cast<uint8_t>(loadPacked(bytes, i, t.dtype())),
                                 t.dtype());
    case DType::Int4:
    case DType::UInt4:
    case DType::Int2:
    case DType::UInt2: return static_cast<double>(loadPacked(bytes, i, t.dtype()));
    default:
      if (dtypeIsNarrowFloat(t.dtype())) return narrowFloatToDouble(bytes[i], t.dtype());
      ctx.fail("cannot read " + std::string(dtypeName(t.dtype())) + " elements");
  }
}

E8M0Rounding e8m0Rounding(const KernelContext& ctx) {
  const Attribute* a = ctx.node().attr("round_mode");
  if (!a || a->kind != AttrKind::String || a->s == "up") return E8M0Rounding::Up;
  if (a->s == "down") return E8M0Rounding::Down;
  if (a->s == "nearest") return E8M0Rounding::Nearest;
  ctx.fail("round_mode '" + a->s + "' is not up, down or nearest");
}

}  // namespace fusectl::kernels::cpu
