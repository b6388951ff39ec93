// AVX-512 depthwise convolution (see conv_depthwise.h): 16 output columns per vector, every tap
// a masked load (the masks cover the padding, so no bounds checks in the loop), stride 2 by
// loading 32 inputs and keeping the even lanes. The epilogue runs on the row still in registers.
#include "conv_depthwise.h"
#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::cpu {

#ifdef FUSECTL_AVX512
namespace {

template <int SW>
FUSECTL_AVX512 void depthwiseRows(const float* x, const float* w, float* y, const Window& win,
                                  const Epilogue& ep, int64_t channel, const float* residual) {
  const int64_t H = win.in[0], W = win.in[1], OH = win.out[0], OW = win.out[1];
  const int64_t KH = win.kernel[0], KW = win.kernel[1], SH = win.strides[0];
  const int64_t DH = win.dilations[0], DW = win.dilations[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const bool vector_act = hasVectorActivation(ep.activation, true);
  const Activation act = vector_act ? ep.activation : Activation::None;
  const __m512 bias = _mm512_set1_ps(ep.bias ? ep.bias[channel] : 0.f);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i zero_i = _mm512_setzero_si512(), width = _mm512_set1_epi32(static_cast<int>(W));
  for (int64_t oh = 0; oh < OH; ++oh) {
    float* yrow = y + oh * OW;
    for (int64_t ow0 = 0; ow0 < OW; ow0 += 16) {
      const __mmask16 out_mask =
          OW - ow0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (OW - ow0)) - 1);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        const float* row = x + ih * W;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const __m512 wv = _mm512_set1_ps(w[kh * KW + kw]);
          const int64_t base = ow0 * SW + kw * DW - PW;  // input column of lane 0
          __m512 in;
          if (SW == 1) {
            const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)), lane);
            const __mmask16 ok = _mm512_cmpge_epi32_mask(pos, zero_i) &
                                 _mm512_cmplt_epi32_mask(pos, width) & out_mask;
            in = _mm512_maskz_loadu_ps(ok, row + base);
          } else {
            const __m512i pos_lo =
                _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)), lane);
            const __m512i pos_hi = _mm512_add_epi32(pos_lo, _mm512_set1_epi32(16));
            const __mmask16 ok_lo =
                _mm512_cmpge_epi32_mask(pos_lo, zero_i) & _mm512_cmplt_epi32_mask(pos_lo, width);
            const __mmask16 ok_hi =
                _mm512_cmpge_epi32_mask(pos_hi, zero_i) & _mm512_cmplt_epi32_mask(pos_hi, width);
            const __m512 lo = _mm512_maskz_loadu_ps(ok_lo, row + base);
            const __m512 hi = _mm512_maskz_loadu_ps(ok_hi, row + base + 16);
            in = _mm512_permutex2var_ps(lo, even, hi);
          }
          acc = _mm512_fmadd_ps(wv, in, acc);
        }
      }
      if (ep.bias) acc = _mm512_add_ps(acc, bias);
      if (residual) {
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(out_mask, residual + oh * OW + ow0));
      }
      if (act != Activation::None) acc = activate512(acc, act, ep.alpha, ep.beta);
      _mm512_mask_storeu_ps(yrow + ow0, out_mask, acc);
    }
    if (!vector_act) ep.activate(yrow, OW);
  }
}

}  // namespace

bool depthwisePlaneAvx512(const float* x, const float* w, float* y, const Window& win,
                          const Epilogue& ep, int64_t channel, const float* residual) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (!has_avx512 || win.rank() != 2 || win.in[1] >= (int64_t{1} << 30)) return false;
  if (win.strides[1] == 1) {
    depthwiseRows<1>(x, w, y, win, ep, channel, residual);
  } else if (win.strides[1] == 2) {
    depthwiseRows<2>(x, w, y, win, ep, channel, residual);
  } else {
    return false;
  }
  return true;
}

#else

bool depthwisePlaneAvx512(const float*, const float*, float*, const Window&, const Epilogue&,
                          int64_t, const float*) {
  return false;
}

#endif

}  // namespace fusectl::kernels::cpu
