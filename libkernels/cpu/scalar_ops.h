// Scalar element functions shared by the standard elementwise kernels (elementwise.cpp) and
// fusectl::Elementwise's program (elementwise_program.cpp), so that both compute an op the same
// way: NaN-propagating Max/Min, a Softplus that never overflows exp, and integer arithmetic
// that wraps (the reductions and CumSum use it too).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace fusectl::kernels::scalar {

template <typename T>
inline T softplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

template <typename T>
inline T maxOp(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? b : a;
}

template <typename T>
inline T minOp(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return b < a ? b : a;
}

// Integer Add, Sub, Mul and Neg wrap around (two's complement), as numpy's and ONNX Runtime's
// do. Signed overflow is undefined in C++, so signed integers compute in an unsigned
// type at least as wide as unsigned int (uint16 * uint16 would promote to a signed int).
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
inline T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(WrapType<T>(a) + WrapType<T>(b));
  else return a + b;
}
template <typename T>
inline T wrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(WrapType<T>(a) - WrapType<T>(b));
  else return a - b;
}
template <typename T>
inline T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(WrapType<T>(a) * WrapType<T>(b));
  else return a * b;
}
template <typename T>
inline T wrapNeg(T x) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(WrapType<T>(0) - WrapType<T>(x));
  else return -x;
}

}  // namespace fusectl::kernels::scalar
