// Scalar element functions shared by the standard elementwise kernels (elementwise.cpp) and
// fusectl::Elementwise's program (elementwise_program.cpp), so that both compute an op the same
// way: NaN-propagating Max/Min, and a Softplus that never overflows exp.
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

}  // namespace fusectl::kernels::scalar
