// Shared internals of the compute kernels (conv, gemm, pool, norm, resize, quantize): float
// views of half/bfloat16/double tensors, windowed-op geometry (pads, auto_pad, ceil_mode) and a
// static parallel-for.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/kernels/half.h"
#include "fusectl/kernels/kernel.h"
#include "thread_pool.h"

namespace fusectl::kernels::cpu {

// Types the float kernels accept: computed in float32, stored back in the input's type.
inline bool isFloatComputeType(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Double;
}

// Converts n elements of a numeric dtype to float.
inline void toFloat(DType t, const void* src, float* dst, int64_t n) {
  if (n <= 0) return;  // an empty tensor may have no buffer at all; memcpy(null) is UB
  switch (t) {
    case DType::Float: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::Float16: halfToFloat(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::BFloat16: bfloat16ToFloat(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::Double: {
      const double* s = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
#define FUSECTL_TO_FLOAT(DT, CT)                                       \
  case DT: {                                                           \
    const CT* s = static_cast<const CT*>(src);                         \
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]); \
    return;                                                            \
  }
    FUSECTL_TO_FLOAT(DType::Int8, int8_t)
    FUSECTL_TO_FLOAT(DType::UInt8, uint8_t)
    FUSECTL_TO_FLOAT(DType::Int16, int16_t)
    FUSECTL_TO_FLOAT(DType::UInt16, uint16_t)
    FUSECTL_TO_FLOAT(DType::Int32, int32_t)
    FUSECTL_TO_FLOAT(DType::UInt32, uint32_t)
    FUSECTL_TO_FLOAT(DType::Int64, int64_t)
    FUSECTL_TO_FLOAT(DType::UInt64, uint64_t)
#undef FUSECTL_TO_FLOAT
    default:
      throwUnsupported("compute kernels: element type '" + std::string(dtypeName(t)) +
                       "' is not supported");
  }
}

// Converts n floats to dtype t. Integer targets truncate toward zero (numpy astype), saturating.
inline void fromFloat(const float* src, DType t, void* dst, int64_t n) {
  if (n <= 0) return;  // an empty tensor may have no buffer at all; memcpy(null) is UB
  switch (t) {
    case DType::Float: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::Float16: floatToHalf(src, static_cast<uint16_t*>(dst), n); return;
    case DType::BFloat16: floatToBFloat16(src, static_cast<uint16_t*>(dst), n); return;
    case DType::Double: {
      double* d = static_cast<double*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
#define FUSECTL_FROM_FLOAT(DT, CT)                                                        \
  case DT: {                                                                              \
    CT* d = static_cast<CT*>(dst);                                                        \
    const double lo = static_cast<double>(std::numeric_limits<CT>::lowest());             \
    const double hi = static_cast<double>(std::numeric_limits<CT>::max());                \
    for (int64_t i = 0; i < n; ++i) {                                                     \
      const double v = std::trunc(static_cast<double>(src[i]));                           \
      d[i] = v <= lo ? std::numeric_limits<CT>::lowest()                                  \
                     : v >= hi ? std::numeric_limits<CT>::max() : static_cast<CT>(v);     \
    }                                                                                     \
    return;                                                                               \
  }
    FUSECTL_FROM_FLOAT(DType::Int8, int8_t)
    FUSECTL_FROM_FLOAT(DType::UInt8, uint8_t)
    FUSECTL_FROM_FLOAT(DType::Int16, int16_t)
    FUSECTL_FROM_FLOAT(DType::UInt16, uint16_t)
    FUSECTL_FROM_FLOAT(DType::Int32, int32_t)
    FUSECTL_FROM_FLOAT(DType::UInt32, uint32_t)
    FUSECTL_FROM_FLOAT(DType::Int64, int64_t)
    FUSECTL_FROM_FLOAT(DType::UInt64, uint64_t)
#undef FUSECTL_FROM_FLOAT
    default:
      throwUnsupported("compute kernels: element type '" + std::string(dtypeName(t)) +
                       "' is not supported");
  }
}

// A float view of a tensor: borrows float32 data, converts anything else once.
class FloatView {
 public:
  FloatView() = default;
  explicit FloatView(const HostTensor& t) : n_(t.numel()), present_(true) {
    if (t.isReleased()) throwInternal("a kernel reads a released constant without restoring it");
    if (t.dtype() == DType::Float) {
      ptr_ = t.data<float>();
    } else {
      owned_.resize(static_cast<size_t>(n_));
      toFloat(t.dtype(), t.raw(), owned_.data(), n_);
      ptr_ = owned_.data();
    }
  }
  explicit FloatView(const HostTensor* t) {
    if (t) *this = FloatView(*t);
  }
  FloatView(FloatView&&) = default;
  FloatView& operator=(FloatView&& o) {
    n_ = o.n_;
    present_ = o.present_;
    const bool own = o.ptr_ == o.owned_.data() && !o.owned_.empty();
    owned_ = std::move(o.owned_);
    ptr_ = own ? owned_.data() : o.ptr_;
    return *this;
  }
  const float* data() const { return ptr_; }
  int64_t size() const { return n_; }
  explicit operator bool() const { return present_; }
  float operator[](int64_t i) const { return ptr_[i]; }

 private:
  const float* ptr_ = nullptr;
  std::vector<float> owned_;
  int64_t n_ = 0;
  bool present_ = false;
};

// A FloatView made on first use, for a GEMM's constant B: a float16/bfloat16 weight whose packed
// form is cached (gemm_packed_state.h) is then not converted again on every run, which on a
// float16 BERT-base (85M weights) cost more than the products themselves.
class LazyFloatView {
 public:
  explicit LazyFloatView(const HostTensor& t) : t_(t) {}
  // float32 data in place, without a copy; nullptr for another type (then call data()).
  const float* inPlace() const { return t_.dtype() == DType::Float ? t_.data<float>() : nullptr; }
  const float* data() {
    if (const float* p = inPlace()) return p;
    if (!view_) view_.emplace(t_);
    return view_->data();
  }

 private:
  const HostTensor& t_;
  std::optional<FloatView> view_;
};

// A float buffer for an output tensor: writes straight into float32 outputs; for other types
// fills a scratch buffer that commit() converts into the tensor.
class FloatSink {
 public:
  explicit FloatSink(HostTensor& t) : t_(t) {
    if (t.dtype() == DType::Float) {
      ptr_ = t.mutableData<float>();
    } else {
      scratch_.resize(static_cast<size_t>(t.numel()));
      ptr_ = scratch_.data();
    }
  }
  float* data() { return ptr_; }
  void commit() {
    if (t_.dtype() != DType::Float) {
      fromFloat(scratch_.data(), t_.dtype(), t_.mutableRaw(), t_.numel());
    }
  }

 private:
  HostTensor& t_;
  float* ptr_ = nullptr;
  std::vector<float> scratch_;
};

// The types of the fusectl ops written for float32 that also take float16/bfloat16: read through
// FloatView, computed by the float32 code, rounded once by FloatSink, so that a half node gives
// the float32 node's result rounded to half.
inline bool isFloatOrHalf(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16;
}

inline void requireFloatOrHalf(const KernelContext& ctx, const HostTensor& t, const char* what) {
  if (!isFloatOrHalf(t.dtype())) {
    ctx.fail(std::string(what) + " is " + std::string(dtypeName(t.dtype())) +
             "; the kernel takes float32, float16 or bfloat16");
  }
}

// A fusectl op's inputs share one type T (fused_ops.def), which is also its outputs' type. The
// float views would read a mixed node without complaint and pick one input's type for the
// output; a runtime running the op's function body rejects it, so the executor does too.
inline void requireSameDType(const KernelContext& ctx, const HostTensor& ref, const char* ref_what,
                             const HostTensor* t, const char* what) {
  if (t && t->dtype() != ref.dtype()) {
    ctx.fail(std::string(what) + " is " + std::string(dtypeName(t->dtype())) + " but " +
             ref_what + " is " + std::string(dtypeName(ref.dtype())) +
             "; the inputs must have one element type");
  }
}

// The rotary ops' Cos/Sin table broadcast into X (whose last dim the table's last dim must
// equal): per leading (non-last) dim of X, how far a step along it moves in the table (0 where
// the table has size 1 or no such dim); fails naming `what` otherwise. Shared by the CPU and CUDA
// kernels (rotary_fused.cpp, cuda/rotary.cu), so both check and word it alike.
std::vector<int64_t> rotaryTableStrides(const KernelContext& ctx, const HostTensor& x,
                                        const HostTensor& table, const char* what);
// The same for X's dims alone (AttentionPackedRotary's heads, which are no tensor of their own).
std::vector<int64_t> rotaryTableStrides(const KernelContext& ctx,
                                        const std::vector<int64_t>& x_dims,
                                        const HostTensor& table, const char* what);

// SwiGLUPacked's output dims: X's with the last (gate and up side by side) halved; fails when it
// is odd. Shared by the CPU and CUDA kernels (swiglu.cpp, cuda/elementwise.cu).
std::vector<int64_t> swigluPackedOutputDims(const KernelContext& ctx, const HostTensor& x);

// A quantized value before its integer store, saturated to [lo, hi]. NaN (a zero or NaN scale,
// a NaN input) becomes 0, as QuantizeLinear's reference maps it; converting NaN to an integer is
// undefined.
inline double saturateQuantized(double v, double lo, double hi) {
  return std::isnan(v) ? 0.0 : std::min(std::max(v, lo), hi);
}

// The 8-bit types of the quantized ops.
inline void checkInt8(const KernelContext& ctx, const HostTensor& t, const char* what) {
  if (t.dtype() != DType::UInt8 && t.dtype() != DType::Int8) {
    ctx.fail(std::string(what) + " must be uint8 or int8, got " +
             std::string(dtypeName(t.dtype())));
  }
}

// A kernel's scratch kept by the caller (usually thread_local) across calls: grown to at least
// `floats` and never shrunk; the contents are whatever the last user left.
inline float* growScratch(std::vector<float>& buffer, int64_t floats) {
  if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

inline int64_t product(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, v.size()); ++i) p *= v[i];
  return p;
}

// Runs fn(begin, end) over [0, n) split statically across up to `threads` threads of the
// persistent worker pool (thread_pool.h); `grain` is the least work per thread worth sharing.
template <typename Fn>
void parallelFor(int64_t n, int threads, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  int64_t t = std::max<int64_t>(1, std::min<int64_t>(threads, n / std::max<int64_t>(grain, 1)));
  if (t <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  runOnWorkers(static_cast<int>(t), [&](int i) { fn(n * i / t, n * (i + 1) / t); });
}

// Rows of `row_elements` per thread worth a parallel region: about 32K elements, so that a
// region's few microseconds stay small beside the work (a per-sample grain left ResNet's
// [1,64,112,112] BatchNormalization on one thread).
inline int64_t grainFor(int64_t row_elements) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(row_elements, 1));
}

// Geometry of a sliding-window op (Conv, pools) over the spatial dims.
struct Window {
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, pad_end, out;
  size_t rank() const { return in.size(); }
  int64_t span(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

// The taps j in [0, kernel) of a window starting at `start`, dilation d, whose positions
// start + j * d lie inside [lo, hi): [*j0, *j1), empty when none do. The pools visit only
// these, so padding costs nothing and a kernel far wider than the input costs what it covers.
inline void windowTapRange(int64_t start, int64_t d, int64_t kernel, int64_t lo, int64_t hi,
                           int64_t* j0, int64_t* j1) {
  const int64_t a = start >= lo ? 0 : (lo - start + d - 1) / d;
  const int64_t b = hi - start > 0 ? (hi - start + d - 1) / d : 0;
  *j0 = std::min(a, kernel);
  *j1 = std::max(std::min(b, kernel), *j0);
}

// Reads strides, dilations, pads and auto_pad (Conv and pool attributes) and computes the output
// size. ceil_mode follows the pools: a window that would start in the end padding is dropped.
inline Window resolveWindow(const KernelContext& ctx, std::vector<int64_t> in,
                            std::vector<int64_t> kernel, bool ceil_mode) {
  const size_t r = in.size();
  Window w;
  w.in = std::move(in);
  w.kernel = std::move(kernel);
  w.strides = ctx.attrInts("strides", std::vector<int64_t>(r, 1));
  w.dilations = ctx.attrInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (w.kernel.size() != r) ctx.fail("kernel_shape has " + std::to_string(w.kernel.size()) +
                                     " dims, the input has " + std::to_string(r) + " spatial dims");
  if (w.strides.size() != r) ctx.fail("strides must have one value per spatial dim");
  if (w.dilations.size() != r) ctx.fail("dilations must have one value per spatial dim");
  if (pads.size() != 2 * r) ctx.fail("pads must have two values per spatial dim");
  for (size_t i = 0; i < r; ++i) {
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0) {
      ctx.fail("strides, dilations and kernel dims must be positive");
    }
    // Negative pads would crop, which ONNX does not define for these ops (and which made the
    // pools index before their row buffers).
    if (pads[i] < 0 || pads[i + r] < 0) ctx.fail("pads must not be negative");
    // The window's span and the padded extent below must not overflow: a file can ask for a
    // kernel or dilation of 2^62.
    int64_t span = 0, extent = 0;
    if (__builtin_mul_overflow(w.kernel[i] - 1, w.dilations[i], &span) ||
        __builtin_add_overflow(span, int64_t{1}, &span) ||
        __builtin_add_overflow(w.in[i], pads[i], &extent) ||
        __builtin_add_overflow(extent, pads[i + r], &extent) ||
        __builtin_add_overflow(extent, w.strides[i], &extent) ||
        // Headroom for SAME padding's (out - 1) * stride + span below.
        span > (std::numeric_limits<int64_t>::max() >> 2) ||
        extent > (std::numeric_limits<int64_t>::max() >> 2)) {
      ctx.fail("kernel_shape, dilations, strides and pads overflow a window's extent");
    }
  }
  const std::string auto_pad = ctx.attrString("auto_pad", "NOTSET");
  w.pad_begin.assign(r, 0);
  w.pad_end.assign(r, 0);
  w.out.assign(r, 0);
  for (size_t i = 0; i < r; ++i) {
    const int64_t span = w.span(i), s = w.strides[i], n = w.in[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w.out[i] = (n + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * s + span - n);
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    } else if (auto_pad == "VALID") {
      w.out[i] = n >= span ? (n - span) / s + 1 : 0;
    } else if (auto_pad == "NOTSET" || auto_pad.empty()) {
      w.pad_begin[i] = pads[i];
      w.pad_end[i] = pads[i + r];
      const int64_t avail = n + w.pad_begin[i] + w.pad_end[i] - span;
      if (avail < 0) {
        w.out[i] = 0;
      } else if (ceil_mode) {
        w.out[i] = (avail + s - 1) / s + 1;
        if ((w.out[i] - 1) * s >= n + w.pad_begin[i]) --w.out[i];
      } else {
        w.out[i] = avail / s + 1;
      }
    } else {
      ctx.fail("unknown auto_pad '" + auto_pad + "'");
    }
  }
  return w;
}

}  // namespace fusectl::kernels::cpu
