// Vector forms of the epilogue's activations (Epilogue::activate) for the AVX-512 kernels
// (GEMM tiles, depthwise conv rows). x86-64 only; functions carry target attributes so that a
// file including this one is still built for the baseline CPU.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps/_mm512_min_ps as uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "fusectl/kernels/epilogue.h"

#define FUSECTL_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define FUSECTL_AVX2 __attribute__((target("avx2,fma")))

namespace fusectl::kernels::cpu {

// The activations of Epilogue::activate, in the same operation order (max/min operand order
// chosen so that NaN and -0 come out as the scalar ternaries give them).
FUSECTL_AVX512 inline __attribute__((always_inline)) __m512 activate512(__m512 v, Activation act,
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
    default:
      return v;
  }
}

}  // namespace fusectl::kernels::cpu

#endif
