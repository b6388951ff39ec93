// AVX-512 depthwise convolution (see conv_depthwise.h): 16 output columns per vector, four
// output rows at a time (four independent accumulator chains), every tap a masked load (the
// masks cover the padding, so no bounds checks in the loop), stride 2 by loading 32 inputs and
// keeping the even lanes. The epilogue runs on the rows still in registers. Square 3x3 and 5x5
// windows at stride 1 or 2 (MobileNet's and EfficientNet's) go input row by input row instead
// (depthwiseBlockDense): each input row is loaded once for all output rows it feeds.
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
  const __mmask16 out_mask = firstLanes(OW - ow0);
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

// Bias, residual and the activation on R finished rows of one 16-column block, then the store.
template <int R>
FUSECTL_AVX512 inline __attribute__((always_inline)) void storeRows(
    const __m512 (&acc)[R], float* y, const Window& win, const Epilogue& ep, Activation act,
    __m512 bias, const float* residual, int64_t oh0, int64_t ow0) {
  const int64_t OW = win.out[1];
  const __mmask16 out_mask = firstLanes(OW - ow0);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const int64_t at = (oh0 + r) * OW + ow0;
    storeWithEpilogue512(y + at, out_mask, acc[r], ep.bias != nullptr, bias,
                         residual ? residual + at : nullptr, act, ep.alpha, ep.beta);
  }
}

// The common case (K x K window, stride S of 1 or 2, no dilation) input row by input row: each
// of the (R - 1) * S + K input rows under R output rows is loaded (at stride 2: loaded and its
// even lanes kept) once per tap column and feeds every output row it is under, with the K*K
// weights held in registers for the whole plane. depthwiseBlock loads K rows per output row
// and broadcasts each weight per block; this loads each row once. Each output row still sums
// its taps in the same order (kh, then kw), so the values are the same.
template <int S, int K, int R>
FUSECTL_AVX512 inline __attribute__((always_inline)) void depthwiseBlockDense(
    const float* x, const __m512* wv, float* y, const Window& win, const Epilogue& ep,
    Activation act, __m512 bias, const float* residual, int64_t oh0, int64_t ow0,
    const BlockMasks& masks) {
  const int64_t H = win.in[0], W = win.in[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < (R - 1) * S + K; ++i) {
    const int64_t ih = oh0 * S - PH + i;
    if (ih < 0 || ih >= H) continue;
    const float* row = x + ih * W + ow0 * S - PW;
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw) {
      __m512 v;
      if (S == 1) {
        v = _mm512_maskz_loadu_ps(masks.lo[kw], row + kw);
      } else {
        const __m512 lo = _mm512_maskz_loadu_ps(masks.lo[kw], row + kw);
        const __m512 hi = _mm512_maskz_loadu_ps(masks.hi[kw], row + kw + 16);
        v = _mm512_permutex2var_ps(lo, even, hi);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int kh = i - r * S;
        if (kh >= 0 && kh < K) acc[r] = _mm512_fmadd_ps(wv[kh * K + kw], v, acc[r]);
      }
    }
  }
  storeRows<R>(acc, y, win, ep, act, bias, residual, oh0, ow0);
}

template <int SW, int R>
FUSECTL_AVX512 inline __attribute__((always_inline)) void depthwiseBlock(
    const float* x, const float* w, float* y, const Window& win, const Epilogue& ep,
    Activation act, __m512 bias, const float* residual, int64_t oh0, int64_t ow0,
    const BlockMasks& masks) {
  const int64_t H = win.in[0], W = win.in[1];
  const int64_t KH = win.kernel[0], KW = win.kernel[1], SH = win.strides[0];
  const int64_t DH = win.dilations[0], DW = win.dilations[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
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
  storeRows<R>(acc, y, win, ep, act, bias, residual, oh0, ow0);
}

// The walk over one plane both kernels share: 16-column blocks with their load masks computed
// once per plane, output rows four at a time and the 1-3 left over as one group (on a 7x7 plane
// they are almost half of it, and one row at a time would load their shared input rows again
// for each), and the activations without a vector form applied to each finished row. `rows`
// runs R output rows of one block: rows.template run<R>(oh0, ow0, masks, act, bias).
template <int SW, class Rows>
FUSECTL_AVX512 inline __attribute__((always_inline)) void depthwisePlane(
    const Window& win, const Epilogue& ep, int64_t channel, float* y, const Rows& rows) {
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
      rows.template run<kRows>(oh, b * 16, masksOf(b), act, bias);
    if (!vector_act)
      for (int r = 0; r < kRows; ++r) ep.activate(y + (oh + r) * OW, OW);
  }
  const int64_t rest = OH - oh;
  if (rest == 0) return;
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockMasks masks = masksOf(b);
    if (rest == 3) rows.template run<3>(oh, b * 16, masks, act, bias);
    else if (rest == 2) rows.template run<2>(oh, b * 16, masks, act, bias);
    else rows.template run<1>(oh, b * 16, masks, act, bias);
  }
  if (!vector_act)
    for (int64_t r = oh; r < OH; ++r) ep.activate(y + r * OW, OW);
}

// depthwisePlane's row groups for any window (depthwiseBlock).
template <int SW>
struct GeneralRows {
  const float* x;
  const float* w;
  float* y;
  const Window& win;
  const Epilogue& ep;
  const float* residual;
  template <int R>
  FUSECTL_AVX512 inline __attribute__((always_inline)) void run(
      int64_t oh0, int64_t ow0, const BlockMasks& masks, Activation act, __m512 bias) const {
    depthwiseBlock<SW, R>(x, w, y, win, ep, act, bias, residual, oh0, ow0, masks);
  }
};

// depthwisePlane's row groups for square 3x3/5x5 windows (depthwiseBlockDense), the K*K
// weights broadcast once per plane.
template <int S, int K>
struct DenseRows {
  const float* x;
  const __m512* wv;
  float* y;
  const Window& win;
  const Epilogue& ep;
  const float* residual;
  template <int R>
  FUSECTL_AVX512 inline __attribute__((always_inline)) void run(
      int64_t oh0, int64_t ow0, const BlockMasks& masks, Activation act, __m512 bias) const {
    depthwiseBlockDense<S, K, R>(x, wv, y, win, ep, act, bias, residual, oh0, ow0, masks);
  }
};

template <int SW>
FUSECTL_AVX512 void depthwiseRows(const float* x, const float* w, float* y, const Window& win,
                                  const Epilogue& ep, int64_t channel, const float* residual) {
  depthwisePlane<SW>(win, ep, channel, y, GeneralRows<SW>{x, w, y, win, ep, residual});
}

template <int S, int K>
FUSECTL_AVX512 void depthwiseRowsDense(const float* x, const float* w, float* y, const Window& win,
                                       const Epilogue& ep, int64_t channel,
                                       const float* residual) {
  __m512 wv[K * K];
#pragma GCC unroll 25
  for (int t = 0; t < K * K; ++t) wv[t] = _mm512_set1_ps(w[t]);
  depthwisePlane<S>(win, ep, channel, y, DenseRows<S, K>{x, wv, y, win, ep, residual});
}

}  // namespace

bool depthwisePlaneAvx512(const float* x, const float* w, float* y, const Window& win,
                          const Epilogue& ep, int64_t channel, const float* residual) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (!has_avx512 || win.rank() != 2 || win.in[1] >= (int64_t{1} << 30) ||
      win.kernel[1] > kMaxMaskedTaps)
    return false;
  // Square 3x3 and 5x5 windows at stride 1 or 2 without dilation (MobileNet, EfficientNet)
  // take the row-reusing kernel; the rest the general one.
  const int64_t s = win.strides[1], k = win.kernel[1];
  const bool dense = win.strides[0] == s && (s == 1 || s == 2) && win.kernel[0] == k &&
                     (k == 3 || k == 5) && win.dilations[0] == 1 && win.dilations[1] == 1;
  if (dense && s == 1 && k == 3) {
    depthwiseRowsDense<1, 3>(x, w, y, win, ep, channel, residual);
  } else if (dense && s == 1) {
    depthwiseRowsDense<1, 5>(x, w, y, win, ep, channel, residual);
  } else if (dense && k == 3) {
    depthwiseRowsDense<2, 3>(x, w, y, win, ep, channel, residual);
  } else if (dense) {
    depthwiseRowsDense<2, 5>(x, w, y, win, ep, channel, residual);
  } else if (win.strides[1] == 1) {
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
