// float16 / bfloat16 <-> float32 conversion for kernels that store half types and compute in
// float32.
//
// floatToHalf and floatToBFloat16 round to nearest, ties to even; overflow becomes +-inf, NaN
// stays a (quiet) NaN with its sign, float16 subnormals are produced and read exactly.
// Everything is header-only and bit-exact across platforms (no reliance on hardware F16C).
#pragma once

#include <cstdint>
#include <cstring>

#include "fusectl/graph/dtype.h"

namespace fusectl::kernels {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // inf / nan: keep payload, make NaN quiet
    return bitsToFloat(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    if (mant == 0) return bitsToFloat(sign);
    // Subnormal: value = mant * 2^-24; normalise into a float32.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bitsToFloat(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13));
  }
  return bitsToFloat(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

inline uint16_t floatToHalf(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) {  // inf or nan
    if (absu == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
  }
  if (absu >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (absu < 0x38800000u) {                        // below 2^-14: half subnormal or zero
    if (absu < 0x33000000u) return sign;           // < 2^-25: rounds to zero (tie at 2^-25 -> 0)
    const uint32_t exp = absu >> 23;
    const uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14 + (113 - exp) - 1 ... yields mant >> (shift)
    // value = mant * 2^(exp-150); half subnormal unit = 2^-24 -> q = mant >> (126 - exp)
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t r = absu - ((127u - 15u) << 23);
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into exponent: fine
  return static_cast<uint16_t>(sign | r);
}

inline float bfloat16ToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t floatToBFloat16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // nan: keep sign, force quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// One value of the half type `t` (DType::Float16 or DType::BFloat16): its bits from a float,
// the float it holds, and a float rounded to it.
inline uint16_t floatToHalfBits(DType t, float f) {
  return t == DType::BFloat16 ? floatToBFloat16(f) : floatToHalf(f);
}
inline float halfBitsToFloat(DType t, uint16_t bits) {
  return t == DType::BFloat16 ? bfloat16ToFloat(bits) : halfToFloat(bits);
}
inline float roundToHalf(DType t, float f) { return halfBitsToFloat(t, floatToHalfBits(t, f)); }

// Bulk helpers for kernels that convert whole buffers (libkernels/src/half.cpp): bit for bit
// the scalar conversions above, 8 values an instruction with F16C where the CPU has it (the
// scalar float16 ones cost 2-5 ns a value: a float16 model's staging and Casts were bound by
// them, not by memory).
void halfToFloat(const uint16_t* src, float* dst, int64_t n);
void floatToHalf(const float* src, uint16_t* dst, int64_t n);
void bfloat16ToFloat(const uint16_t* src, float* dst, int64_t n);
void floatToBFloat16(const float* src, uint16_t* dst, int64_t n);
// Tests: whether the bulk float16 conversions run on F16C, and turning that off (true) or back
// to the CPU's answer (false), to hold both paths to the scalar ones.
bool bulkHalfUsesF16c();
void forcePortableHalfConversion(bool portable);

}  // namespace fusectl::kernels
