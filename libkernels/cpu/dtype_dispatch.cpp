// Dtype dispatch helpers: half staging, Cast conversions and integer-input readers.
#include "dtype_dispatch.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusectl/kernels/half.h"

namespace fusectl::kernels::kutil {

void failDtype(const KernelContext& ctx, DType t) {
  ctx.fail(fmt::format("dtype {} is not supported by this kernel", dtypeName(t)));
}

const HostTensor* stageIn(const HostTensor* t, HostTensor& holder) {
  if (!t || !isHalf(t->dtype())) return t;
  holder = HostTensor(DType::Float, t->dims());
  const auto* src = t->data<uint16_t>();
  float* dst = holder.mutableData<float>();
  if (t->dtype() == DType::Float16)
    halfToFloat(src, dst, t->numel());
  else
    bfloat16ToFloat(src, dst, t->numel());
  return &holder;
}

StagedOutput::StagedOutput(KernelContext& ctx, size_t index, DType dtype,
                           const std::vector<int64_t>& dims, Place place)
    : out_(place == Place::OverInputs ? &ctx.allocateOutputOverInputs(index, dtype, dims)
                                      : &ctx.allocateOutput(index, dtype, dims)),
      staged_(isHalf(dtype)) {
  if (staged_) tmp_ = HostTensor(DType::Float, dims);
}

void StagedOutput::finish() {
  if (!staged_) return;
  const float* src = tmp_.data<float>();
  auto* dst = out_->mutableData<uint16_t>();
  if (out_->dtype() == DType::Float16)
    floatToHalf(src, dst, out_->numel());
  else
    floatToBFloat16(src, dst, out_->numel());
}

namespace {

// One element with Cast semantics (float -> integer: floatToIntegral).
template <typename D, typename S>
inline D convertValue(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    return floatToIntegral<D>(static_cast<double>(v));
  } else {
    return static_cast<D>(v);
  }
}

// Element-by-element conversion between two non-half dtypes.
void convertElements(const KernelContext& ctx, const HostTensor& src, HostTensor& dst) {
  const int64_t n = src.numel();
  dispatch<kAll>(ctx, src.dtype(), [&](auto stag) {
    using S = typename decltype(stag)::type;
    const S* s = src.data<S>();
    dispatch<kAll>(ctx, dst.dtype(), [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      D* d = dst.template mutableData<D>();
      for (int64_t i = 0; i < n; ++i) d[i] = convertValue<D>(s[i]);
    });
  });
}

}  // namespace

void convertTensor(const KernelContext& ctx, const HostTensor& src, HostTensor& dst) {
  if (src.numel() != dst.numel()) ctx.fail("internal: convertTensor with different sizes");
  if (src.dtype() == dst.dtype()) {
    if (src.byteSize()) std::memcpy(dst.mutableRaw(), src.raw(), src.byteSize());
    return;
  }
  HostTensor holder;
  const HostTensor* in = stageIn(&src, holder);
  if (!isHalf(dst.dtype())) {
    convertElements(ctx, *in, dst);
    return;
  }
  // A half destination is rounded once, from float32.
  HostTensor f32;
  if (in->dtype() != DType::Float) {
    f32 = HostTensor(DType::Float, dst.dims());
    convertElements(ctx, *in, f32);
    in = &f32;
  }
  if (dst.dtype() == DType::Float16)
    floatToHalf(in->data<float>(), dst.mutableData<uint16_t>(), dst.numel());
  else
    floatToBFloat16(in->data<float>(), dst.mutableData<uint16_t>(), dst.numel());
}

std::vector<int64_t> readInts(const KernelContext& ctx, const HostTensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  dispatch<kInts | kBool>(ctx, t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(p[i]);
  });
  return out;
}

int64_t readIntScalar(const KernelContext& ctx, const HostTensor& t) {
  const std::vector<int64_t> v = readInts(ctx, t);
  if (v.size() != 1) ctx.fail(fmt::format("expected one element, got {}", v.size()));
  return v[0];
}

DType dtypeAttr(const KernelContext& ctx, const char* name, DType fallback) {
  if (!ctx.node().hasAttr(name)) return fallback;
  const int64_t v = ctx.attrInt(name, 0);
  if (v < 0 || v > INT32_MAX || !dtypeIsKnown(static_cast<int32_t>(v)))
    ctx.fail(fmt::format("attribute '{}' = {} is not an ONNX element type", name, v));
  return static_cast<DType>(v);
}

double readScalar(const KernelContext& ctx, const HostTensor& t) {
  if (t.numel() < 1) ctx.fail("expected a scalar, got an empty tensor");
  if (t.dtype() == DType::Float16) return halfToFloat(t.data<uint16_t>()[0]);
  if (t.dtype() == DType::BFloat16) return bfloat16ToFloat(t.data<uint16_t>()[0]);
  double v = 0;
  dispatch<kAll>(ctx, t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    v = static_cast<double>(t.data<T>()[0]);
  });
  return v;
}

int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    ctx.fail(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  return axis < 0 ? axis + rank : axis;
}

int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < dims.size() && i < end; ++i) p *= dims[i];
  return p;
}

}  // namespace fusectl::kernels::kutil
