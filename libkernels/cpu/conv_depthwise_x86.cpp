// AVX-512 depthwise convolution (see conv_depthwise.h): 16 output columns per vector, four
// output rows at a time (four independent accumulator chains), every tap a masked load (the
// masks cover the padding, so no bounds checks in the loop), stride 2 by loading 32 inputs and
// keeping the even lanes. The epilogue runs on the rows still in registers.
#include "conv_depthwise.h"
#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::cpu {

#ifdef FUSECTL_AVX512
namespace {

constexpr int64_t kMaxMaskedTaps = 16;  // kernel widths the AVX-512 path takes

// R output rows at once (R accumulators, one per row, for the same 16 columns): a single
// accumulator made every tap an FMA waiting on the previous one, so the loop ran at the FMA
// latency (4 cycles a tap) with the units mostly idle, and an activation such as Silu
// (exp, divide) added its whole latency to each block's chain. R independent chains keep the
// FMA units busy and overlap the activations.
// The load masks of one 16-column block, per tap column: which lanes read inside the row
// (the padding reads nothing), for the low and, at stride 2, the high 16 inputs. They depend on
// the columns only, so a plane computes them once per block instead of once per tap and row.
struct BlockMasks {
  __mmask16 lo[kMaxMaskedTaps];
  __mmask16 hi[kMaxMaskedTaps];
};

template <int SW>
FUSECTL_AVX512 BlockMasks blockMasks(const Window& win, int64_t ow0) {
  const int64_t W = win.in[1], OW = win.out[1], KW = win.kernel[1];
  const int64_t DW = win.dilations[1], PW = win.pad_begin[1];
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i zero_i = _mm512_setzero_si512(), width = _mm512_set1_epi32(static_cast<int>(W));
  const __mmask16 out_mask =
      OW - ow0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (OW - ow0)) - 1);
  BlockMasks m;
  for (int64_t kw = 0; kw < KW; ++kw) {
    const int64_t base = ow0 * SW + kw * DW - PW;  // input column of lane 0
    const __m512i pos_lo = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)), lane);
    m.lo[kw] = _mm512_cmpge_epi32_mask(pos_lo, zero_i) & _mm512_cmplt_epi32_mask(pos_lo, width);
    if (SW == 1) {
      m.lo[kw] &= out_mask;
      m.hi[kw] = 0;
    } else {
      const __m512i pos_hi = _mm512_add_epi32(pos_lo, _mm512_set1_epi32(16));
      m.hi[kw] = _mm512_cmpge_epi32_mask(pos_hi, zero_i) & _mm512_cmplt_epi32_mask(pos_hi, width);
    }
  }
  return m;
}

template <int SW, int R>
FUSECTL_AVX512 inline __attribute__((always_inline)) void depthwiseBlock(
    const float* x, const float* w, float* y, const Window& win, const Epilogue& ep,
    Activation act, __m512 bias, const float* residual, int64_t oh0, int64_t ow0,
    const BlockMasks& masks) {
  const int64_t H = win.in[0], W = win.in[1], OW = win.out[1];
  const int64_t KH = win.kernel[0], KW = win.kernel[1], SH = win.strides[0];
  const int64_t DH = win.dilations[0], DW = win.dilations[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __mmask16 out_mask =
      OW - ow0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (OW - ow0)) - 1);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t kh = 0; kh < KH; ++kh) {
    const float* rows[R];
    bool inside[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int64_t ih = (oh0 + r) * SH - PH + kh * DH;
      inside[r] = ih >= 0 && ih < H;
      rows[r] = x + (inside[r] ? ih : 0) * W;
    }
    for (int64_t kw = 0; kw < KW; ++kw) {
      const __m512 wv = _mm512_set1_ps(w[kh * KW + kw]);
      const int64_t base = ow0 * SW + kw * DW - PW;  // input column of lane 0
      if (SW == 1) {
        const __mmask16 ok = masks.lo[kw];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          if (!inside[r]) continue;
          acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(ok, rows[r] + base), acc[r]);
        }
      } else {
        const __mmask16 ok_lo = masks.lo[kw], ok_hi = masks.hi[kw];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          if (!inside[r]) continue;
          const __m512 lo = _mm512_maskz_loadu_ps(ok_lo, rows[r] + base);
          const __m512 hi = _mm512_maskz_loadu_ps(ok_hi, rows[r] + base + 16);
          acc[r] = _mm512_fmadd_ps(wv, _mm512_permutex2var_ps(lo, even, hi), acc[r]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const int64_t oh = oh0 + r;
    __m512 v = acc[r];
    if (ep.bias) v = _mm512_add_ps(v, bias);
    if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(out_mask, residual + oh * OW + ow0));
    if (act != Activation::None) v = activate512(v, act, ep.alpha, ep.beta);
    _mm512_mask_storeu_ps(y + oh * OW + ow0, out_mask, v);
  }
}

template <int SW>
FUSECTL_AVX512 void depthwiseRows(const float* x, const float* w, float* y, const Window& win,
                                  const Epilogue& ep, int64_t channel, const float* residual) {
  const int64_t OH = win.out[0], OW = win.out[1];
  const bool vector_act = hasVectorActivation(ep.activation, true);
  const Activation act = vector_act ? ep.activation : Activation::None;
  const __m512 bias = _mm512_set1_ps(ep.bias ? ep.bias[channel] : 0.f);
  constexpr int kRows = 4;
  constexpr int64_t kMaxBlocks = 64;  // rows up to 1024 columns keep their masks
  const int64_t blocks = (OW + 15) / 16;
  BlockMasks kept[kMaxBlocks];
  const bool keep = blocks <= kMaxBlocks;
  if (keep)
    for (int64_t b = 0; b < blocks; ++b) kept[b] = blockMasks<SW>(win, b * 16);
  auto masksOf = [&](int64_t b) { return keep ? kept[b] : blockMasks<SW>(win, b * 16); };
  int64_t oh = 0;
  for (; oh + kRows <= OH; oh += kRows) {
    for (int64_t b = 0; b < blocks; ++b)
      depthwiseBlock<SW, kRows>(x, w, y, win, ep, act, bias, residual, oh, b * 16, masksOf(b));
    if (!vector_act)
      for (int r = 0; r < kRows; ++r) ep.activate(y + (oh + r) * OW, OW);
  }
  for (; oh < OH; ++oh) {
    for (int64_t b = 0; b < blocks; ++b)
      depthwiseBlock<SW, 1>(x, w, y, win, ep, act, bias, residual, oh, b * 16, masksOf(b));
    if (!vector_act) ep.activate(y + oh * OW, OW);
  }
}

}  // namespace

bool depthwisePlaneAvx512(const float* x, const float* w, float* y, const Window& win,
                          const Epilogue& ep, int64_t channel, const float* residual) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (!has_avx512 || win.rank() != 2 || win.in[1] >= (int64_t{1} << 30) ||
      win.kernel[1] > kMaxMaskedTaps)
    return false;
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
