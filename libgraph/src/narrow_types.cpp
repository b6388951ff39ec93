// Narrow element types: the float formats described by their bit layout, so that decoding and
// rounding are one generic routine rather than a bit-twiddling copy per format.
#include "fusectl/graph/narrow_types.h"

#include <cmath>
#include <limits>

namespace fusectl {
namespace {

struct FloatFormat {
  int mant_bits;
  int exp_bits;
  int bias;
  uint8_t max_code;  // largest finite magnitude, sign bit clear
  uint8_t sign_bit;
  bool fnuz;     // no negative zero, NaN is the negative-zero code
  bool has_inf;  // exponent all ones: Inf (mantissa 0) or NaN
};

// E4M3FN has no Inf: only S.1111.111 is NaN, so S.1111.110 = 448 is the largest finite value.
constexpr FloatFormat kE4M3FN{3, 4, 7, 0x7e, 0x80, false, false};
constexpr FloatFormat kE4M3FNUZ{3, 4, 8, 0x7f, 0x80, true, false};
constexpr FloatFormat kE5M2{2, 5, 15, 0x7b, 0x80, false, true};
constexpr FloatFormat kE5M2FNUZ{2, 5, 16, 0x7f, 0x80, true, false};
constexpr FloatFormat kE2M1{1, 2, 1, 0x7, 0x8, false, false};

const FloatFormat* formatOf(DType t) {
  switch (t) {
    case DType::Float8E4M3FN: return &kE4M3FN;
    case DType::Float8E4M3FNUZ: return &kE4M3FNUZ;
    case DType::Float8E5M2: return &kE5M2;
    case DType::Float8E5M2FNUZ: return &kE5M2FNUZ;
    case DType::Float4E2M1: return &kE2M1;
    default: return nullptr;
  }
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double decode(uint8_t code, const FloatFormat& f) {
  const uint8_t magnitude = code & static_cast<uint8_t>(f.sign_bit - 1);
  const bool negative = (code & f.sign_bit) != 0;
  if (f.fnuz && code == f.sign_bit) return kNaN;
  const int exp_max = (1 << f.exp_bits) - 1;
  const int exponent = magnitude >> f.mant_bits;
  const int mantissa = magnitude & ((1 << f.mant_bits) - 1);
  if (f.has_inf && exponent == exp_max) {
    if (mantissa != 0) return kNaN;
    return negative ? -HUGE_VAL : HUGE_VAL;
  }
  if (!f.fnuz && !f.has_inf && f.sign_bit == 0x80 && magnitude == 0x7f) return kNaN;  // E4M3FN
  const double value = exponent == 0
                           ? std::ldexp(mantissa, 1 - f.bias - f.mant_bits)
                           : std::ldexp(mantissa + (1 << f.mant_bits),
                                        exponent - f.bias - f.mant_bits);
  return negative ? -value : value;
}

uint8_t nanCode(const FloatFormat& f, uint8_t sign) {
  if (f.fnuz) return 0x80;
  if (f.sign_bit == 0x8) return 0x8;  // E2M1 has no NaN; the reference writes 0x8
  return static_cast<uint8_t>(sign | 0x7f);
}

// What a value too large for the format becomes without saturation.
uint8_t overflowCode(const FloatFormat& f, uint8_t sign) {
  if (f.sign_bit == 0x8) return static_cast<uint8_t>(sign | f.max_code);  // E2M1 always saturates
  if (f.has_inf) return static_cast<uint8_t>(sign | (((1 << f.exp_bits) - 1) << f.mant_bits));
  return nanCode(f, sign);
}

uint8_t encode(double v, const FloatFormat& f, bool saturate) {
  const uint8_t sign = std::signbit(v) ? f.sign_bit : 0;
  if (std::isnan(v)) return nanCode(f, sign);
  const double a = std::fabs(v);
  if (std::isinf(a)) return saturate ? static_cast<uint8_t>(sign | f.max_code) : overflowCode(f, sign);
  const int emin = 1 - f.bias;  // exponent of the smallest normal value
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
  const int exponent = a == 0 ? emin : std::max(e - 1, emin);
  // Below emin the quantum stays 2^(emin - mant_bits): subnormals round on the same grid.
  const double quantum = std::ldexp(1.0, exponent - f.mant_bits);
  const double rounded = std::nearbyint(a / quantum) * quantum;  // ties to even
  if (rounded > decode(f.max_code, f))
    return saturate ? static_cast<uint8_t>(sign | f.max_code) : overflowCode(f, sign);
  if (rounded == 0) return f.fnuz ? 0 : sign;
  std::frexp(rounded, &e);
  const int re = e - 1;
  uint32_t code;
  if (re < emin) {
    code = static_cast<uint32_t>(rounded / std::ldexp(1.0, emin - f.mant_bits));
  } else {
    const auto mantissa =
        static_cast<uint32_t>(rounded / std::ldexp(1.0, re - f.mant_bits)) - (1u << f.mant_bits);
    code = (static_cast<uint32_t>(re + f.bias) << f.mant_bits) | mantissa;
  }
  return static_cast<uint8_t>(sign | code);
}

uint8_t encodeE8M0(double v, bool saturate, E8M0Rounding rounding) {
  if (std::isnan(v)) return 0xff;
  const double a = std::fabs(v);
  if (std::isinf(a)) return saturate ? 0xfe : 0xff;
  if (a == 0) return 0;
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int power = e - 1;
  switch (rounding) {
    case E8M0Rounding::Up: power += m > 0.5 ? 1 : 0; break;
    case E8M0Rounding::Down: break;
    case E8M0Rounding::Nearest: power += m >= 0.75 ? 1 : 0; break;  // ties (1.5 * 2^p) up
  }
  const int code = power + 127;
  if (code < 0) return 0;
  if (code > 0xfe) return saturate ? 0xfe : 0xff;
  return static_cast<uint8_t>(code);
}

}  // namespace

bool dtypeIsNarrowFloat(DType t) { return formatOf(t) != nullptr || t == DType::Float8E8M0; }

bool dtypeIsNarrow(DType t) { return dtypeIsNarrowFloat(t) || dtypeIsSubByte(t); }

double narrowFloatToDouble(uint8_t code, DType t) {
  if (t == DType::Float8E8M0) return code == 0xff ? kNaN : std::ldexp(1.0, code - 127);
  const FloatFormat* f = formatOf(t);
  return f ? decode(code, *f) : kNaN;
}

uint8_t doubleToNarrowFloat(double v, DType t, bool saturate, E8M0Rounding e8m0) {
  if (t == DType::Float8E8M0) return encodeE8M0(v, saturate, e8m0);
  const FloatFormat* f = formatOf(t);
  return f ? encode(v, *f, saturate) : 0;
}

int64_t loadPacked(const uint8_t* bytes, int64_t index, DType t) {
  const int bits = dtypeBits(t);
  const int64_t per_byte = 8 / bits;
  const int shift = static_cast<int>(index % per_byte) * bits;
  const int mask = (1 << bits) - 1;
  const int code = (bytes[index / per_byte] >> shift) & mask;
  if (t == DType::Int4 || t == DType::Int2) {
    const int half = 1 << (bits - 1);
    return code >= half ? code - (1 << bits) : code;
  }
  return code;
}

void storePacked(uint8_t* bytes, int64_t index, DType t, uint32_t code) {
  const int bits = dtypeBits(t);
  const int64_t per_byte = 8 / bits;
  const int shift = static_cast<int>(index % per_byte) * bits;
  const auto mask = static_cast<uint8_t>(((1u << bits) - 1) << shift);
  uint8_t& b = bytes[index / per_byte];
  b = static_cast<uint8_t>((b & ~mask) | ((code << shift) & mask));
}

int64_t packedIntMin(DType t) {
  switch (t) {
    case DType::Int4: return -8;
    case DType::Int2: return -2;
    default: return 0;
  }
}

int64_t packedIntMax(DType t) {
  switch (t) {
    case DType::Int4: return 7;
    case DType::UInt4: return 15;
    case DType::Int2: return 1;
    case DType::UInt2: return 3;
    default: return 0;
  }
}

}  // namespace fusectl
