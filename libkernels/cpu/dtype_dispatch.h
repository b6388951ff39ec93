// Dtype plumbing shared by the elementwise, reduction and data-movement kernels.
//
// Kernels are written once as templates over a C++ element type and instantiated for the
// dtypes an op allows through dispatch<Set>(). float16 and bfloat16 are never computed in
// directly: stageIn() hands the kernel a float32 copy of such an input and StagedOutput lets
// it write float32 that finish() rounds back, so every half kernel is the float32 kernel.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels::kutil {

template <typename T>
struct Tag {
  using type = T;
};

// Dtype families a kernel accepts; or them together.
enum : unsigned {
  kFloats = 1,     // float32, double (float16/bfloat16 arrive staged as float32)
  kSigned = 2,     // int8..int64
  kUnsigned = 4,   // uint8..uint64
  kBool = 8,
  kInts = kSigned | kUnsigned,
  kNumeric = kFloats | kInts,
  kAll = kNumeric | kBool,
};

[[noreturn]] void failDtype(const KernelContext& ctx, DType t);

// Calls fn(Tag<T>{}) with T the C++ element type of `t`; fails naming the node when `t` is not
// in Set. Only the types in Set are instantiated.
template <unsigned Set, typename Fn>
void dispatch(const KernelContext& ctx, DType t, Fn&& fn) {
  switch (t) {
    case DType::Float:
      if constexpr ((Set & kFloats) != 0) return fn(Tag<float>{});
      break;
    case DType::Double:
      if constexpr ((Set & kFloats) != 0) return fn(Tag<double>{});
      break;
    case DType::Int8:
      if constexpr ((Set & kSigned) != 0) return fn(Tag<int8_t>{});
      break;
    case DType::Int16:
      if constexpr ((Set & kSigned) != 0) return fn(Tag<int16_t>{});
      break;
    case DType::Int32:
      if constexpr ((Set & kSigned) != 0) return fn(Tag<int32_t>{});
      break;
    case DType::Int64:
      if constexpr ((Set & kSigned) != 0) return fn(Tag<int64_t>{});
      break;
    case DType::UInt8:
      if constexpr ((Set & kUnsigned) != 0) return fn(Tag<uint8_t>{});
      break;
    case DType::UInt16:
      if constexpr ((Set & kUnsigned) != 0) return fn(Tag<uint16_t>{});
      break;
    case DType::UInt32:
      if constexpr ((Set & kUnsigned) != 0) return fn(Tag<uint32_t>{});
      break;
    case DType::UInt64:
      if constexpr ((Set & kUnsigned) != 0) return fn(Tag<uint64_t>{});
      break;
    case DType::Bool:
      if constexpr ((Set & kBool) != 0) return fn(Tag<bool>{});
      break;
    default:
      break;
  }
  failDtype(ctx, t);
}

// Calls fn(Tag<U>{}) with U an unsigned integer of the element size (1, 2, 4 or 8 bytes): for
// kernels that only move elements. Fails for strings and sub-byte types.
template <typename Fn>
void dispatchBySize(const KernelContext& ctx, DType t, Fn&& fn) {
  switch (t == DType::String || dtypeIsSubByte(t) ? 0 : dtypeSize(t)) {
    case 1: return fn(Tag<uint8_t>{});
    case 2: return fn(Tag<uint16_t>{});
    case 4: return fn(Tag<uint32_t>{});
    case 8: return fn(Tag<uint64_t>{});
    default: failDtype(ctx, t);
  }
}

inline bool isHalf(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// `t` itself, or (float16/bfloat16) a float32 copy kept in `holder`.
const HostTensor* stageIn(const HostTensor* t, HostTensor& holder);

// An output written as float32 when its dtype is float16/bfloat16.
class StagedOutput {
 public:
  // Where the output goes: a buffer of its own, or (Elementwise: the kernel reads each element
  // of every input before it writes that element) over an input where the executor allows it
  // (KernelContext::allocateOutputOverInputs).
  enum class Place { Own, OverInputs };
  StagedOutput(KernelContext& ctx, size_t index, DType dtype, const std::vector<int64_t>& dims,
               Place place = Place::Own);
  // Where the kernel writes: the output itself, or a float32 buffer for half dtypes.
  HostTensor& compute() { return staged_ ? tmp_ : *out_; }
  DType computeDtype() const { return staged_ ? DType::Float : out_->dtype(); }
  void finish();  // rounds the float32 buffer into the half output

 private:
  HostTensor* out_;
  HostTensor tmp_;
  bool staged_ = false;
};

// A float value as integer type D with Cast's semantics: truncation toward zero through int64,
// so that out-of-range values (NaN and infinities among them) give what x86's conversion gives
// and numpy's astype reproduces (int64's minimum, narrowed), never undefined behaviour.
template <typename D>
inline D floatToIntegral(double d) {
  static_assert(std::is_integral_v<D> && !std::is_same_v<D, bool>);
  if (std::is_same_v<D, uint64_t> && d >= 9223372036854775808.0 && d < 18446744073709551616.0)
    return static_cast<D>(static_cast<uint64_t>(d));
  if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
    return static_cast<D>(std::numeric_limits<int64_t>::min());
  return static_cast<D>(static_cast<int64_t>(d));
}

// Converts between any two of float/float16/bfloat16/double/int8..int64/uint8..uint64/bool with
// ONNX Cast semantics (float -> int truncates toward zero, -> bool is "!= 0"). `dst` has the
// same element count.
void convertTensor(const KernelContext& ctx, const HostTensor& src, HostTensor& dst);

// Elements of an integer (or bool) tensor as int64: axes, shapes, pads, repeats, k...
std::vector<int64_t> readInts(const KernelContext& ctx, const HostTensor& t);
// The single element of a numeric tensor as double (float16/bfloat16 included).
double readScalar(const KernelContext& ctx, const HostTensor& t);
// The single element of an integer tensor (a size, a count, a length) as int64, not through a
// double, which holds 53 bits: torchvision's sys.maxsize (2^63 - 1) read through one became
// 2^63 and overflowed to a negative count. Fails naming the node unless it has one element.
int64_t readIntScalar(const KernelContext& ctx, const HostTensor& t);
// An element-type attribute (EyeLike's dtype, a window's output_datatype...): `fallback` when
// the node lacks it; fails naming the node when its value is no ONNX element type.
DType dtypeAttr(const KernelContext& ctx, const char* name, DType fallback);
// `axis` in [-rank, rank) mapped to [0, rank); fails naming the node otherwise.
int64_t normalizeAxis(const KernelContext& ctx, int64_t axis, int64_t rank,
                      const char* what = "axis");
int64_t product(const std::vector<int64_t>& dims, size_t begin = 0, size_t end = SIZE_MAX);

}  // namespace fusectl::kernels::kutil
