// Vector forms of the epilogue's activations (Epilogue::activate) for the AVX-512 kernels
// (GEMM tiles, depthwise conv rows). x86-64 only; functions carry target attributes so that a
// file including this one is still built for the baseline CPU.
#pragma once

// The kernels' helpers are force-inlined so that a register tile stays in registers across
// them. Not under AddressSanitizer: there the giant functions forced inlining builds take clang's
// instrumentation and backend minutes (conv_depthwise_x86.cpp alone 134 s against 32 s with
// ordinary inlining, the longest file of CI's sanitizer build), and that build looks for
// memory errors, not speed.
#include "fusectl/support/sanitizers.h"
#if defined(FUSECTL_ASAN)
#define FUSECTL_FORCE_INLINE inline
#else
#define FUSECTL_FORCE_INLINE inline __attribute__((always_inline))
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps/_mm512_min_ps (and inside the
// unpack and shuffle intrinsics) as uninitialised; clang has no such warning group.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "fusectl/kernels/epilogue.h"

#define FUSECTL_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define FUSECTL_AVX2 __attribute__((target("avx2,fma")))

namespace fusectl::kernels::cpu {

// p(r) by Horner's rule, one FMA a degree; c from the highest degree's coefficient down.
template <size_t N>
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 horner512(__m512 r, const float (&c)[N]) {
  __m512 p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
  for (size_t i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[i]));
  return p;
}

// e^r for |r| <= ln2/2 by a degree-6 polynomial in Horner form (c0 = c1 = 1): a weighted
// least-squares fit to the relative error on Chebyshev points of that interval, 1.9e-9 in exact
// arithmetic and 7e-8 (about 1 ulp) evaluated in float (scripts/fit_exp_polynomial.py derives
// and checks them). Seven FMAs where the Cephes form 1 + r + r^2 P(r) took eight operations:
// the activations are op-bound (Tanh's and Gelu's exponentials; Sigmoid, Silu and GeluTanh take
// the cheaper expOfNegated512).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 expReduced512(__m512 r) {
  static constexpr float kCoefficients[] = {0.001383684459142387f, 0.008374815806746483f,
                                            0.04166822507977486f,  0.16666419804096222f,
                                            0.49999991059303284f,  1.f, 1.f};
  return horner512(r, kCoefficients);
}

// exp(x) for x already in [-104, 88.8]: x = n ln2 + r (ln2 in two parts, so r is exact enough),
// then 2^n e^r by scalef, which also gives the subnormals and, from n = -150 down, 0.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 expClamped512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  return _mm512_scalef_ps(expReduced512(r), n);
}

// exp(x) to about 2 ulp, 0 below ln(2^-150) where expf rounds to 0, +inf above 88.8.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 exp512(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.972f), _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(88.8f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), expClamped512(x));
}

// e^-x, x clamped above at 104 first (e^-104 rounds to 0; +inf would give inf - inf in r), +inf
// where it overflows (x below -88.72), NaN for NaN (the clamp's operand order keeps it) and for
// -inf. The exponential of the one-form Sigmoid, Silu and GeluTanh below,
// which divide by 1 + e^-x: their epilogues are bound by vector operations (one 512-bit
// operation a cycle on Zen 4), and Silu is most of an EfficientNet's. So it is cheaper than
// exp512: ln2 in one part (r is off by at most n * 1.9e-9, 2.9e-7 at the clamp) and e^r by a
// degree-5 polynomial (scripts/fit_exp_polynomial.py 5: 1.9e-7 relative in float, against the
// degree-6 one's 7e-8). A quotient by 1 + e damps e's relative error by e / (1 + e).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 expOfNegated512(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(104.f), x);
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693147182464599609f), x);
  static constexpr float kCoefficients[] = {0.008297653868794441f, 0.04191538318991661f,
                                            0.16667574644088745f,  0.49998894333839417f,
                                            0.9999997019767761f,   1.0000001192092896f};
  return _mm512_scalef_ps(horner512(r, kCoefficients), n);
}

// 1 / (1 + e^-x) in one form for every x, x clamped below at -104 first (so that -inf gives 0,
// not NaN; the operand order keeps NaN): below x = -88.72, where e^-x overflows, 0 against
// values under 3e-39; +-inf give 0 and 1. Within a few ulp elsewhere (the form split by sign,
// e^x / (1 + e^x) below 0, took 5 more operations).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 sigmoid512(__m512 x) {
  const __m512 e = expOfNegated512(_mm512_max_ps(_mm512_set1_ps(-104.f), x));
  return _mm512_div_ps(_mm512_set1_ps(1.f), _mm512_add_ps(_mm512_set1_ps(1.f), e));
}

// y * sigmoid(z) = y / (1 + e^-z) in one form for every z. Below z = -88.72, where e^-z
// overflows, the quotient is +-0, against values under 4e-37 in magnitude for |y| up to 100; a
// z of -inf or NaN gives NaN, as y * 0 with y infinite does (z is -inf or NaN only where y is).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 mulSigmoid512(__m512 y, __m512 z) {
  return _mm512_div_ps(y, _mm512_add_ps(_mm512_set1_ps(1.f), expOfNegated512(z)));
}

// x * sigmoid(x) = x / (1 + e^-x) (mulSigmoid512(x, x)): 11 vector operations and a division,
// where the form split by sign with exp512's reduction and polynomial took 16. 3.3e-7 relative
// at most against x / (1 + e^-x) in double from x = -88 to 104 in steps of 1.3e-5 (the split
// form: 2.3e-7); -0 below x = -88.72 against values under 4e-37 in magnitude; -inf gives
// -inf / inf = NaN as -inf * 0 does. On a 16 -> 96 1x1 convolution onto 112x112 with Silu
// (fusectl profile, minima of 400 runs, three alternations): 0.749-0.753 ms split, 0.702-0.711 in
// one form with exp512's exponential, 0.662-0.683 with this one.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 silu512(__m512 x) { return mulSigmoid512(x, x); }

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|); below |x| = 0.25, where 1 - e would
// cancel, its odd Taylor series to x^9 (relative error under 4e-7 everywhere).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 tanh512(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 e = exp512(_mm512_mul_ps(ax, _mm512_set1_ps(-2.f)));
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512 x2 = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(62.f / 2835.f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-17.f / 315.f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.f / 15.f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.f / 3.f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), ax, ax);
  const __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.25f), _CMP_LT_OQ);
  const __m512 t = _mm512_mask_blend_ps(is_small, big, small);
  // Copy x's sign (and keep NaN): t is non-negative.
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

// Gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) through erfc(z), z = |x| / sqrt 2, so that neither side
// cancels: x - 0.5 x erfc(z) for x >= 0, 0.5 x erfc(z) below. erfc is Numerical Recipes'
// Chebyshev fit (fractional error < 1.2e-7), with z^2 split exactly so exp sees no rounding.
// z is capped at 10.5 first (min's operand order keeps NaN): erfc is 0 in float from z = 10 on
// (the finite_tail mask below), and with the cap exp's argument stays within [-112, 0], where
// expClamped512 needs none of exp512's clamps (from -104 down its scalef gives exactly 0). The
// four operations saved are 10% of Gelu's time (a 16-vector epilogue on one core: 0.57 -> 0.52
// ns an element), which is 8% of a BERT FFN's first GEMM.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 gelu512(__m512 x) {
  const __m512 z =
      _mm512_min_ps(_mm512_set1_ps(10.5f),
                    _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f)));
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.5f), z, _mm512_set1_ps(1.f)));
  __m512 p = _mm512_set1_ps(0.17087277f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
  const __m512 z2 = _mm512_mul_ps(z, z);
  const __m512 z2_err = _mm512_fmsub_ps(z, z, z2);  // z*z - z2, exactly
  const __m512 erfc =
      _mm512_mul_ps(t, expClamped512(_mm512_sub_ps(_mm512_sub_ps(p, z2), z2_err)));
  // erfc(z) is 0 in float from z = 10 on; taking 0.5 x erfc as a zero of x's sign there keeps
  // Gelu(+inf) = +inf and Gelu(-88) = -0, as the scalar form gives.
  const __mmask16 finite_tail = _mm512_cmp_ps_mask(z, _mm512_set1_ps(10.f), _CMP_LT_OQ);
  const __m512 signed_zero =
      _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  const __m512 half_x_erfc = _mm512_mask_mul_ps(
      signed_zero, finite_tail, _mm512_mul_ps(_mm512_set1_ps(0.5f), x), erfc);
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(neg, _mm512_sub_ps(x, half_x_erfc), half_x_erfc);
}

// Transposes 8 vectors of 16 (r[i][k]: row i, column k) into 8 vectors of two 8-lane columns:
// out[j] holds column 2j's 8 rows, then column 2j + 1's. Unpacks of 32- and 64-bit elements,
// then two rounds of 128-bit lane shuffles: 32 shuffles for 128 floats.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void transpose8x16(const __m512 (&r)[8], __m512 (&out)[8]) {
  // In each 128-bit lane l (columns 4l..4l+3): rows i, i+1 interleaved.
  __m512 t[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // columns 4l, 4l+1
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // columns 4l+2, 4l+3
  }
  // u[h][m]: rows 4h..4h+3 of column 4l + m, in lane l.
  __m512 u[2][4];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512d a = _mm512_castps_pd(t[4 * h]), b = _mm512_castps_pd(t[4 * h + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * h + 1]), d = _mm512_castps_pd(t[4 * h + 3]);
    u[h][0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[h][1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[h][2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[h][3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
#pragma GCC unroll 2
  for (int m = 0; m < 4; m += 2) {
    // Lanes 0-1 (then 2-3) of rows 0-3 and of rows 4-7, for columns 4l + m and 4l + m + 1.
    const __m512 w_lo = _mm512_shuffle_f32x4(u[0][m], u[1][m], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 w_hi = _mm512_shuffle_f32x4(u[0][m], u[1][m], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 x_lo = _mm512_shuffle_f32x4(u[0][m + 1], u[1][m + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 x_hi = _mm512_shuffle_f32x4(u[0][m + 1], u[1][m + 1], _MM_SHUFFLE(3, 2, 3, 2));
    // Columns 4l + m and 4l + m + 1 are out[2l + m/2].
    out[0 + m / 2] = _mm512_shuffle_f32x4(w_lo, x_lo, _MM_SHUFFLE(2, 0, 2, 0));
    out[2 + m / 2] = _mm512_shuffle_f32x4(w_lo, x_lo, _MM_SHUFFLE(3, 1, 3, 1));
    out[4 + m / 2] = _mm512_shuffle_f32x4(w_hi, x_hi, _MM_SHUFFLE(2, 0, 2, 0));
    out[6 + m / 2] = _mm512_shuffle_f32x4(w_hi, x_hi, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// GPT-2's gelu_new, 0.5 y (1 + tanh(u)) with u = sqrt(2/pi) (y + 0.044715 y^3), computed as
// y * sigmoid(2u) = y / (1 + e^-2u), which it equals: one exponential and one division, as
// silu512 takes them, where tanh512's form (its exponential clamped both ways, a division, the
// small-argument series and the sign) took about twice the operations; the GEMM's epilogue with
// it was 8-10% of GPT-2's FFN GEMM. Against Epilogue::activate's scalar 0.5 y (1 + tanh(u)):
// within a few ulp where 1 + tanh(u) does not cancel, closer to the exact value where it does
// (negative y), and the same +-inf, NaN and signed zeros.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 geluTanh512(__m512 v) {
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
  const __m512 inner = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(0.044715f), cube));
  return mulSigmoid512(v, _mm512_mul_ps(_mm512_set1_ps(1.5957691216057308f), inner));
}

// The activations of Epilogue::activate, in the same operation order (max/min operand order
// chosen so that NaN and -0 come out as the scalar ternaries give them).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 activate512(__m512 v, Activation act,
                                                       float alpha, float beta) {
  const __m512 zero = _mm512_setzero_ps();
  switch (act) {
    case Activation::Relu:
      return _mm512_max_ps(v, zero);  // v > 0 ? v : 0
    case Activation::Clip:
      return _mm512_min_ps(_mm512_set1_ps(beta), _mm512_max_ps(_mm512_set1_ps(alpha), v));
    case Activation::LeakyRelu: {
      const __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
      return _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(alpha));
    }
    case Activation::HardSigmoid: {
      const __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(alpha), v), _mm512_set1_ps(beta));
      return _mm512_min_ps(_mm512_set1_ps(1.f), _mm512_max_ps(zero, t));
    }
    case Activation::HardSwish: {
      const __m512 t =
          _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.f / 6.f)), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, _mm512_min_ps(_mm512_set1_ps(1.f), _mm512_max_ps(zero, t)));
    }
    case Activation::Sigmoid:
      return sigmoid512(v);
    case Activation::Silu:
      return silu512(v);
    case Activation::Tanh:
      return tanh512(v);
    case Activation::Gelu:
      return gelu512(v);
    case Activation::GeluTanh:
      return geluTanh512(v);
    default:
      return v;
  }
}

// The first n lanes (none for n <= 0, all 16 from 16 on): the mask of a row's last partial
// vector.
inline __mmask16 firstLanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Transposes 16 vectors of 16 in registers: r[i][j] becomes r[j][i]. Four rounds of 16
// shuffles (pairs, quads, 128-bit lanes, 256-bit halves). A gather per vector costs several
// times more on this machine (about 20 cycles each, measured), and was most of the block's time.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0x88);
      t[8 * h + i + 4] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + i + 4], 0xDD);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
}

// Columns [c0, c0 + 16) of `count` rows (row stride ld) as 16 vectors, one per column, each
// holding the rows across its lanes (lanes from `count` on, and columns from `cols` on, zero).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void loadTransposed(
    __m512 (&r)[16], const float* src, int64_t ld, int64_t count, int64_t c0, int64_t cols) {
  const __mmask16 m = firstLanes(cols - c0);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < count ? _mm512_maskz_loadu_ps(m, src + i * ld + c0) : _mm512_setzero_ps();
  transpose16x16(r);
}


// Permute indices over the 32 lanes of two vectors (lo, hi), for _mm512_permutex2var_ps: the
// even lanes in order, the odd lanes in order (the stride-2 reads of the depthwise and Winograd
// kernels), and the interleave of lo's and hi's lanes 0-7 (8-15 for the high half).
FUSECTL_AVX512 inline __m512i evenLaneIndices() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
FUSECTL_AVX512 inline __m512i oddLaneIndices() {
  return _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
FUSECTL_AVX512 inline __m512i interleaveLowIndices() {
  return _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
FUSECTL_AVX512 inline __m512i interleaveHighIndices() {
  return _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// The epilogue on one vector of outputs, then its masked store at y: bias (a broadcast
// per-channel value, added when has_bias), the residual at z (masked like the store; none when
// z is null), the activation. The order of Epilogue::apply.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void storeWithEpilogue512(
    float* y, __mmask16 mask, __m512 v, bool has_bias, __m512 bias, const float* z,
    Activation act, float alpha, float beta) {
  if (has_bias) v = _mm512_add_ps(v, bias);
  if (z) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, z));
  if (act != Activation::None) v = activate512(v, act, alpha, beta);
  _mm512_mask_storeu_ps(y, mask, v);
}

}  // namespace fusectl::kernels::cpu

#endif
