// AVX-512 depthwise convolution (see conv_depthwise.h): 16 output columns per vector, four
// output rows at a time (four independent accumulator chains), every tap a masked load (the
// masks cover the padding, so no bounds checks in the loop), stride 2 by loading 32 inputs and
// keeping the even lanes. The epilogue runs on the rows still in registers. Square 3x3 and 5x5
// windows at stride 1 or 2 (MobileNet's and EfficientNet's) go input row by input row instead
// (depthwiseBlockDense): each input row is loaded once for all output rows it feeds.
// Small planes go 16 channels at a time instead (depthwiseChannels): transposed in registers
// into a padded pixels x channels scratch image, one full-vector FMA per tap and pixel, and
// transposed back with the epilogue.
#include "conv_depthwise.h"
#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

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
  __mmask16 next;  // stride 2: the inputs 32.. past the block's first (up to 16 of them)
};

template <int SW>
FUSECTL_AVX512 BlockMasks blockMasks(const Window& win, int64_t ow0) {
  const int64_t W = win.in[1], OW = win.out[1], KW = win.kernel[1];
  const int64_t DW = win.dilations[1], PW = win.pad_begin[1];
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i zero_i = _mm512_setzero_si512(), width = _mm512_set1_epi32(static_cast<int>(W));
  const __mmask16 out_mask = firstLanes(OW - ow0);
  BlockMasks m;
  m.next = 0;
  if (SW == 2) {
    const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(ow0 * 2 - PW + 32)),
                                         lane);
    m.next = _mm512_cmpge_epi32_mask(pos, zero_i) & _mm512_cmplt_epi32_mask(pos, width);
  }
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
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void storeRows(
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

// Lanes N.. of `low` followed by the first N lanes of `high`.
template <int N>
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 alignLanes(__m512 high, __m512 low) {
  return _mm512_castsi512_ps(
      _mm512_alignr_epi32(_mm512_castps_si512(high), _mm512_castps_si512(low), N));
}

// The common case (K x K window, stride S of 1 or 2, no dilation) input row by input row: each
// of the (R - 1) * S + K input rows under R output rows is loaded once per tap column (at
// stride 2: once, then split into even and odd lanes) and feeds every output row it is under,
// with the K*K weights held in registers for the whole plane. depthwiseBlock loads K rows per
// output row and broadcasts each weight per block; this loads each row once. Each output row
// still sums its taps in the same order (kh, then kw), so the values are the same.
template <int S, int K, int R>
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void depthwiseBlockDense(
    const float* x, const __m512* wv, float* y, const Window& win, const Epilogue& ep,
    Activation act, __m512 bias, const float* residual, int64_t oh0, int64_t ow0,
    const BlockMasks& masks) {
  const int64_t H = win.in[0], W = win.in[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const __m512i even = evenLaneIndices();
  const __m512i odd = oddLaneIndices();
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < (R - 1) * S + K; ++i) {
    const int64_t ih = oh0 * S - PH + i;
    if (ih < 0 || ih >= H) continue;
    const float* row = x + ih * W + ow0 * S - PW;
    // At stride 2 the row's 32 inputs are split once into even and odd lanes, and the taps
    // further right are those shifted by one or two lanes with the next inputs (32, 33, 34)
    // coming in: 3 loads, 2-4 permutes and 1-3 aligns per row where a permute and two loads per
    // tap cost 9 (3x3) or 15 (5x5) operations. Each tap still reads the same inputs.
    __m512 taps_s2[K];
    if (S == 2) {
      const __m512 lo = _mm512_maskz_loadu_ps(masks.lo[0], row);
      const __m512 hi = _mm512_maskz_loadu_ps(masks.hi[0], row + 16);
      const __m512 next = _mm512_maskz_loadu_ps(masks.next & __mmask16((1u << (K - 2)) - 1),
                                                row + 32);
      const __m512 e0 = _mm512_permutex2var_ps(lo, even, hi);
      const __m512 o0 = _mm512_permutex2var_ps(lo, odd, hi);
      taps_s2[0] = e0;
      taps_s2[1] = o0;
      if (K == 3) {
        taps_s2[2] = alignLanes<1>(next, e0);
      } else {
        const __m512 next_even = _mm512_permutexvar_ps(even, next);
        const __m512 next_odd = _mm512_permutexvar_ps(odd, next);
        taps_s2[2] = alignLanes<1>(next_even, e0);
        taps_s2[3] = alignLanes<1>(next_odd, o0);
        taps_s2[4] = alignLanes<2>(next_even, e0);
      }
    }
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw) {
      const __m512 v = S == 1 ? _mm512_maskz_loadu_ps(masks.lo[kw], row + kw) : taps_s2[kw];
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
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void depthwiseBlock(
    const float* x, const float* w, float* y, const Window& win, const Epilogue& ep,
    Activation act, __m512 bias, const float* residual, int64_t oh0, int64_t ow0,
    const BlockMasks& masks) {
  const int64_t H = win.in[0], W = win.in[1];
  const int64_t KH = win.kernel[0], KW = win.kernel[1], SH = win.strides[0];
  const int64_t DH = win.dilations[0], DW = win.dilations[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const __m512i even = evenLaneIndices();
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
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void depthwisePlane(
    const Window& win, const Epilogue& ep, int64_t channel, float* y, const Rows& rows,
    const NextPlane& next) {
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
  // The next plane's lines, an even share per row group: asked for all at once, they filled
  // the miss buffers and held the loads of this plane up behind them.
  const char* prefetch = reinterpret_cast<const char*>(next.input);
  const int64_t lines = (next.bytes + 63) / 64, groups = (OH + kRows - 1) / kRows;
  const int64_t share = groups > 0 ? (lines + groups - 1) / groups : 0;
  int64_t asked = 0;
  auto askShare = [&]() {
    for (const int64_t end = std::min(lines, asked + share); asked < end; ++asked)
      __builtin_prefetch(prefetch + asked * 64, 0, 2);
  };
  int64_t oh = 0;
  for (; oh + kRows <= OH; oh += kRows) {
    askShare();
    for (int64_t b = 0; b < blocks; ++b)
      rows.template run<kRows>(oh, b * 16, masksOf(b), act, bias);
    if (!vector_act)
      for (int r = 0; r < kRows; ++r) ep.activate(y + (oh + r) * OW, OW);
  }
  const int64_t rest = OH - oh;
  if (rest == 0) return;
  askShare();
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
  FUSECTL_AVX512 FUSECTL_FORCE_INLINE void run(
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
  FUSECTL_AVX512 FUSECTL_FORCE_INLINE void run(
      int64_t oh0, int64_t ow0, const BlockMasks& masks, Activation act, __m512 bias) const {
    depthwiseBlockDense<S, K, R>(x, wv, y, win, ep, act, bias, residual, oh0, ow0, masks);
  }
};

template <int SW>
FUSECTL_AVX512 void depthwiseRows(const float* x, const float* w, float* y, const Window& win,
                                  const Epilogue& ep, int64_t channel, const float* residual,
                                  const NextPlane& next) {
  depthwisePlane<SW>(win, ep, channel, y, GeneralRows<SW>{x, w, y, win, ep, residual}, next);
}

// --- 1-D windows (a line per channel) ---

// x[start, start + 16) with the lanes outside [0, W) zero; nothing outside x is read.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE __m512 loadLine(const float* x, int64_t W, int64_t start) {
  if (start >= 0 && start + 16 <= W) return _mm512_loadu_ps(x + start);
  const int64_t lo = std::max<int64_t>(0, -start), hi = std::min<int64_t>(16, W - start);
  if (lo >= hi) return _mm512_setzero_ps();
  const __mmask16 lanes = static_cast<__mmask16>(firstLanes(hi) & ~firstLanes(lo));
  return _mm512_maskz_expandloadu_ps(lanes, x + start + lo);
}

// Stride 1, any width, dilation and pads (ConvTasNet's dilated k=3, Conformer's k=31): four
// 16-output vectors at a time, so that four FMA chains overlap, each tap one FMA per vector.
// The plain loop it replaces ran at SSE2 width with the bias and activation as further passes:
// ConvTasNet's [512, 1001] k=3 convolutions with their LeakyRelu took 2.4 ms each in the model.
FUSECTL_AVX512 void depthwiseLine(const float* x, const float* w, float* y, const Window& win,
                                  const Epilogue& ep, int64_t channel, const float* residual) {
  const int64_t W = win.in[0], OW = win.out[0], K = win.kernel[0];
  const int64_t D = win.dilations[0], P = win.pad_begin[0];
  const __m512 bias = _mm512_set1_ps(ep.bias ? ep.bias[channel] : 0.f);
  constexpr int V = 4;
  for (int64_t o0 = 0; o0 < OW; o0 += 16 * V) {
    __m512 acc[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
      const __m512 wk = _mm512_set1_ps(w[k]);
      const int64_t start = o0 - P + k * D;
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[v] = _mm512_fmadd_ps(wk, loadLine(x, W, start + 16 * v), acc[v]);
    }
    for (int v = 0; v < V && o0 + 16 * v < OW; ++v) {
      const int64_t o = o0 + 16 * v;
      storeWithEpilogue512(y + o, firstLanes(OW - o), acc[v], ep.bias != nullptr, bias,
                           residual ? residual + o : nullptr, ep.activation, ep.alpha, ep.beta);
    }
  }
}

template <int S, int K>
FUSECTL_AVX512 void depthwiseRowsDense(const float* x, const float* w, float* y, const Window& win,
                                       const Epilogue& ep, int64_t channel,
                                       const float* residual, const NextPlane& next) {
  __m512 wv[K * K];
#pragma GCC unroll 25
  for (int t = 0; t < K * K; ++t) wv[t] = _mm512_set1_ps(w[t]);
  depthwisePlane<S>(win, ep, channel, y, DenseRows<S, K>{x, wv, y, win, ep, residual}, next);
}

// --- Channels across the vector (depthwiseChannelsAvx512) ---

// The per-thread scratch of a channel block: its padded input and its outputs, 64-byte aligned.
float* channelBlockScratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  float* data = growScratch(buffer, floats + 16);
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  return data + ((64 - at % 64) % 64) / sizeof(float);
}

// Where and for which geometry the scratch image's padding was last zeroed, one record per
// thread for every instantiation of depthwiseChannels (they share the scratch).
struct ZeroedPadding {
  const float* in = nullptr;
  int64_t H = 0, W = 0, hp = 0, wp = 0, PH = 0, PW = 0;
  bool operator==(const ZeroedPadding& o) const {
    return in == o.in && H == o.H && W == o.W && hp == o.hp && wp == o.wp && PH == o.PH &&
           PW == o.PW;
  }
};
ZeroedPadding& zeroedPadding() {
  thread_local ZeroedPadding record;
  return record;
}

// R neighbouring output pixels of one output row, all 16 channels: R independent chains of
// K*K FMAs, each tap one vector of the padded scratch image (row stride wp pixels).
template <int S, int K, int R>
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void channelPixels(
    const float* in, int64_t wp, const __m512* wv, __m512 (&acc)[R], int64_t oh, int64_t ow) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
#pragma GCC unroll 5
  for (int kh = 0; kh < K; ++kh) {
    const float* row = in + ((oh * S + kh) * wp + ow * S) * 16;
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_fmadd_ps(wv[kh * K + kw], _mm512_load_ps(row + (r * S + kw) * 16), acc[r]);
    }
  }
}

template <int S, int K>
FUSECTL_AVX512 void depthwiseChannels(const float* x, const float* w, float* y, const Window& win,
                                      const Epilogue& ep, int64_t channel, int64_t count,
                                      const float* residual) {
  const int64_t H = win.in[0], W = win.in[1], OH = win.out[0], OW = win.out[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const int64_t plane_in = H * W, P = OH * OW;
  // The scratch image covers every tap of every output pixel; what lies outside the input (the
  // padding) is zero, and input pixels no tap reaches (a last row or column at stride 2, or
  // past a negative end pad) are left out.
  const int64_t hp = (OH - 1) * S + K, wp = (OW - 1) * S + K;
  const int64_t p_round = (P + 15) / 16 * 16;
  float* in = channelBlockScratch(hp * wp * 16 + p_round * 16);
  float* out = in + hp * wp * 16;
  // The padding (what lies outside the input) is zero. The scatter below never writes it, so
  // a thread zeroes it once for a run of blocks of the same geometry in the same scratch,
  // not once per 16 channels (a walk over every position of the padded image).
  ZeroedPadding& zeroed = zeroedPadding();
  const ZeroedPadding geometry{in, H, W, hp, wp, PH, PW};
  if (!(zeroed == geometry)) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t r = 0; r < hp; ++r) {
      const int64_t ih = r - PH;
      for (int64_t q = 0; q < wp; ++q) {
        const int64_t iw = q - PW;
        if (ih < 0 || ih >= H || iw < 0 || iw >= W) _mm512_store_ps(in + (r * wp + q) * 16, zero);
      }
    }
    zeroed = geometry;
  }
  // Planes to pixels, 16 pixels of the block's channels at a time, stored a row segment at a
  // time: the input columns [iw_begin, iw_end) and rows some tap reaches.
  const int64_t iw_begin = std::max<int64_t>(0, -PW), iw_end = std::min<int64_t>(W, wp - PW);
  int64_t ih = 0, iw = 0;
  for (int64_t p0 = 0; p0 < plane_in; p0 += 16) {
    __m512 v[16];
    loadTransposed(v, x + p0, plane_in, count, 0, plane_in - p0);
    const int64_t n = std::min<int64_t>(16, plane_in - p0);
    for (int64_t j = 0; j < n;) {
      const int64_t seg = std::min(n - j, W - iw);
      const int64_t r = ih + PH;
      if (r >= 0 && r < hp) {
        float* dst = in + (r * wp + PW) * 16;
        const int64_t q1 = std::min(iw + seg, iw_end);
        for (int64_t q = std::max(iw, iw_begin); q < q1; ++q)
          _mm512_store_ps(dst + q * 16, v[j + q - iw]);
      }
      j += seg;
      iw += seg;
      if (iw == W) {
        iw = 0;
        ++ih;
      }
    }
  }
  // The weights the same way: wv[tap] holds that tap of the 16 channels.
  __m512 wv[K * K];
#pragma GCC unroll 2
  for (int t0 = 0; t0 < K * K; t0 += 16) {
    __m512 v[16];
    loadTransposed(v, w, K * K, count, t0, K * K);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (t0 + j < K * K) wv[t0 + j] = v[j];
  }

  for (int64_t oh = 0; oh < OH; ++oh) {
    float* row_out = out + oh * OW * 16;
    int64_t ow = 0;
    for (; ow + 4 <= OW; ow += 4) {
      __m512 acc[4];
      channelPixels<S, K, 4>(in, wp, wv, acc, oh, ow);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) _mm512_store_ps(row_out + (ow + r) * 16, acc[r]);
    }
    const int64_t rest = OW - ow;
    if (rest == 3) {
      __m512 acc[3];
      channelPixels<S, K, 3>(in, wp, wv, acc, oh, ow);
      for (int r = 0; r < 3; ++r) _mm512_store_ps(row_out + (ow + r) * 16, acc[r]);
    } else if (rest == 2) {
      __m512 acc[2];
      channelPixels<S, K, 2>(in, wp, wv, acc, oh, ow);
      for (int r = 0; r < 2; ++r) _mm512_store_ps(row_out + (ow + r) * 16, acc[r]);
    } else if (rest == 1) {
      __m512 acc[1];
      channelPixels<S, K, 1>(in, wp, wv, acc, oh, ow);
      _mm512_store_ps(row_out + ow * 16, acc[0]);
    }
  }

  // Pixels back to planes, 16 pixels of each channel at a time, with the epilogue on the way
  // (Epilogue::apply's order: bias, residual, activation).
  const bool vector_act = hasVectorActivation(ep.activation, true);
  const Activation act = vector_act ? ep.activation : Activation::None;
  for (int64_t p0 = 0; p0 < P; p0 += 16) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) v[j] = _mm512_load_ps(out + (p0 + j) * 16);
    transpose16x16(v);
    const __mmask16 m = firstLanes(P - p0);
    for (int64_t c = 0; c < count; ++c) {
      const float* z = residual ? residual + c * P + p0 : nullptr;
      storeWithEpilogue512(y + c * P + p0, m, v[c], ep.bias != nullptr,
                           _mm512_set1_ps(ep.bias ? ep.bias[channel + c] : 0.f), z, act, ep.alpha,
                           ep.beta);
    }
  }
  if (!vector_act)
    for (int64_t c = 0; c < count; ++c) ep.activate(y + c * P, P);
}


// --- Channels across the vector, either side channels-last (depthwiseChannelsLast) ---

// Stores R accumulated output pixels: channels-last straight to y (16 channels a pixel, with
// the epilogue), or to the band's pixel scratch for the planar store after the band.
template <int R>
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void storeChannelPixels(
    const __m512 (&acc)[R], bool y_nhwc, float* y_pixel, int64_t C, __mmask16 lanes,
    bool has_bias, __m512 bias, Activation act, const Epilogue& ep, float* scratch_pixel) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (y_nhwc) {
      storeWithEpilogue512(y_pixel + r * C, lanes, acc[r], has_bias, bias, nullptr, act, ep.alpha,
                           ep.beta);
    } else {
      _mm512_store_ps(scratch_pixel + r * 16, acc[r]);
    }
  }
}

// The per-thread weights of every channel block, tap-major: [block][tap][16 channels].
float* channelWeightsScratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  float* data = growScratch(buffer, floats + 16);
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  return data + ((64 - at % 64) % 64) / sizeof(float);
}

// Output rows [oh_begin, oh_end) of one image, every channel. Rows go in bands; each band's
// padded input of all channel blocks is built first, reading a channels-last input pixel by
// pixel in memory order (all C channels of a pixel, one block's 16 after another: at 16
// channels a block and a whole image per block the reads went 4*C bytes apart, which the
// prefetchers did not follow, and 112x112 planes ran at half the planar kernel's speed).
template <int S, int K>
FUSECTL_AVX512 void depthwiseChannelsLastRows(const float* x, bool x_nhwc, const float* w,
                                              float* y, bool y_nhwc, const Window& win,
                                              const Epilogue& ep, int64_t C,
                                              const float* residual, int64_t oh_begin,
                                              int64_t oh_end) {
  const int64_t H = win.in[0], W = win.in[1], OW = win.out[1];
  const int64_t PH = win.pad_begin[0], PW = win.pad_begin[1];
  const int64_t plane_in = H * W, P = win.out[0] * OW;
  const int64_t wp = (OW - 1) * S + K;
  const int64_t blocks = (C + 15) / 16;
  // The scratch of padded input rows: about 256 KiB, in L2 with the outputs they make. Where
  // the rows asked for fit whole, for a group of blocks at a time, they go in one band per
  // group (small planes of many channels: 7x7 of 1152 in bands of one row rebuilt each input
  // row five times and transposed seven pixels at a time); otherwise bands of every block,
  // at least one output row each (neighbouring bands share K - S input rows, built twice).
  constexpr int64_t kBudgetFloats = 65536;
  const int64_t block_row = wp * 16;  // floats of one padded input row of one block
  const int64_t all_rows_in = (oh_end - oh_begin - 1) * S + K;
  int64_t band = 0, group = blocks;
  if (all_rows_in * block_row * blocks <= kBudgetFloats ||
      all_rows_in * block_row * 4 > kBudgetFloats) {
    const int64_t band_rows_in = std::max<int64_t>(K, kBudgetFloats / (block_row * blocks));
    band = std::clamp<int64_t>((band_rows_in - K) / S + 1, 1, oh_end - oh_begin);
  } else {
    // A group's images about 32 KiB, so that each block's image is still in L1 when its taps
    // read it (groups of 256 KiB ran EfficientNet-B0's 7x7 5x5 convolutions of 1152 channels
    // 15% slower than planes in and out).
    band = oh_end - oh_begin;
    group = std::max<int64_t>(1, kBudgetFloats / 8 / (all_rows_in * block_row));
  }
  const int64_t rows_in = (band - 1) * S + K;
  const int64_t block_in = rows_in * block_row;
  const int64_t band_pixels = (band * OW + 15) / 16 * 16;
  float* in = channelBlockScratch(group * block_in + (y_nhwc ? 0 : band_pixels * 16));
  float* out = in + group * block_in;
  // This writes over the scratch that depthwiseChannels keeps the padding of between calls.
  zeroedPadding() = ZeroedPadding{};
  float* wv_all = channelWeightsScratch(blocks * K * K * 16);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t count = std::min<int64_t>(16, C - blk * 16);
    for (int t0 = 0; t0 < K * K; t0 += 16) {
      __m512 v[16];
      loadTransposed(v, w + blk * 16 * K * K, K * K, count, t0, K * K);
      for (int j = 0; j < 16 && t0 + j < K * K; ++j)
        _mm512_store_ps(wv_all + (blk * K * K + t0 + j) * 16, v[j]);
    }
  }
  const bool vector_act = hasVectorActivation(ep.activation, true);
  const Activation act = vector_act ? ep.activation : Activation::None;
  const bool has_bias = ep.bias != nullptr;
  // Input columns inside the image: scratch columns [q_begin, q_end) hold input columns
  // q - PW; the rest of a row is padding.
  const int64_t q_begin = std::clamp<int64_t>(PW, 0, wp);
  const int64_t q_end = std::clamp<int64_t>(PW + W, q_begin, wp);
  const int64_t iw_begin = q_begin - PW, iw_end = q_end - PW;
  const __m512 zero = _mm512_setzero_ps();
  // Written in place (depthwiseChannelsLastInPlace: stride 1, y is x): the bands before this
  // one wrote their output rows over the input rows of the same numbers, so this band takes
  // those of its input rows from the previous band's scratch, where they still are. A group
  // of blocks reads and writes only its own channels, so groups need nothing of the kind.
  const bool in_place = x == y;
  for (int64_t g0 = 0; g0 < blocks; g0 += group) {
    const int64_t g1 = std::min(blocks, g0 + group);
    const __mmask16 last_lanes = firstLanes(std::min<int64_t>(16, C - (g1 - 1) * 16));
    for (int64_t oh0 = oh_begin; oh0 < oh_end; oh0 += band) {
      const int64_t oh1 = std::min(oh_end, oh0 + band);
      const int64_t rows = (oh1 - oh0 - 1) * S + K;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t ih = oh0 * S - PH + r;
        if (in_place && oh0 > oh_begin && ih >= 0 && ih < oh0) {
          // Row r + band of the previous band's scratch (rows are taken in increasing order,
          // so each source row is read before anything overwrites it).
          for (int64_t blk = g0; blk < g1; ++blk) {
            float* row = in + (blk - g0) * block_in + r * block_row;
            std::memmove(row, row + band * block_row, sizeof(float) * block_row);
          }
          continue;
        }
        for (int64_t blk = g0; blk < g1; ++blk) {
          float* row = in + (blk - g0) * block_in + r * block_row;
          if (ih < 0 || ih >= H) {
            for (int64_t q = 0; q < wp; ++q) _mm512_store_ps(row + q * 16, zero);
            continue;
          }
          for (int64_t q = 0; q < q_begin; ++q) _mm512_store_ps(row + q * 16, zero);
          for (int64_t q = q_end; q < wp; ++q) _mm512_store_ps(row + q * 16, zero);
        }
        if (ih < 0 || ih >= H) continue;
        if (x_nhwc) {
          const float* src = x + ih * W * C;
          float* dst = in + r * block_row + PW * 16;
          for (int64_t iw = iw_begin; iw < iw_end; ++iw) {
            const float* pixel = src + iw * C;
            for (int64_t blk = g0; blk + 1 < g1; ++blk)
              _mm512_store_ps(dst + (blk - g0) * block_in + iw * 16,
                              _mm512_loadu_ps(pixel + blk * 16));
            _mm512_store_ps(dst + (g1 - 1 - g0) * block_in + iw * 16,
                            _mm512_maskz_loadu_ps(last_lanes, pixel + (g1 - 1) * 16));
          }
          continue;
        }
        for (int64_t blk = g0; blk < g1; ++blk) {
          const int64_t count = std::min<int64_t>(16, C - blk * 16);
          float* row = in + (blk - g0) * block_in + r * block_row;
          for (int64_t iw0 = iw_begin; iw0 < iw_end; iw0 += 16) {
            __m512 v[16];
            loadTransposed(v, x + blk * 16 * plane_in + ih * W + iw0, plane_in, count, 0,
                           iw_end - iw0);
            const int64_t n = std::min<int64_t>(16, iw_end - iw0);
            for (int64_t j = 0; j < n; ++j) _mm512_store_ps(row + (iw0 + j + PW) * 16, v[j]);
          }
        }
      }

      for (int64_t blk = g0; blk < g1; ++blk) {
        const int64_t channel = blk * 16, count = std::min<int64_t>(16, C - channel);
        const __mmask16 lanes = firstLanes(count);
        const __m512 bias_lanes =
            has_bias ? _mm512_maskz_loadu_ps(lanes, ep.bias + channel) : _mm512_setzero_ps();
        __m512 wv[K * K];
  #pragma GCC unroll 25
        for (int t = 0; t < K * K; ++t) wv[t] = _mm512_load_ps(wv_all + (blk * K * K + t) * 16);
        const float* block = in + (blk - g0) * block_in;
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          float* y_row = y + oh * OW * C + channel;
          float* scratch_row = out + (oh - oh0) * OW * 16;
          const int64_t local = oh - oh0;
          int64_t ow = 0;
          // As many pixels at a time as registers allow beside the K*K weights (8 for 3x3, 6
          // for 5x5's 25), so that that many FMA chains hide the FMA latency.
          constexpr int kWide = K == 3 ? 8 : 6;
          for (; ow + kWide <= OW; ow += kWide) {
            __m512 acc[kWide];
            channelPixels<S, K, kWide>(block, wp, wv, acc, local, ow);
            storeChannelPixels<kWide>(acc, y_nhwc, y_row + ow * C, C, lanes, has_bias, bias_lanes,
                                      act, ep, scratch_row + ow * 16);
          }
          for (; ow + 4 <= OW; ow += 4) {
            __m512 acc[4];
            channelPixels<S, K, 4>(block, wp, wv, acc, local, ow);
            storeChannelPixels<4>(acc, y_nhwc, y_row + ow * C, C, lanes, has_bias, bias_lanes, act,
                                  ep, scratch_row + ow * 16);
          }
          const int64_t rest = OW - ow;
          if (rest == 3) {
            __m512 acc[3];
            channelPixels<S, K, 3>(block, wp, wv, acc, local, ow);
            storeChannelPixels<3>(acc, y_nhwc, y_row + ow * C, C, lanes, has_bias, bias_lanes, act,
                                  ep, scratch_row + ow * 16);
          } else if (rest == 2) {
            __m512 acc[2];
            channelPixels<S, K, 2>(block, wp, wv, acc, local, ow);
            storeChannelPixels<2>(acc, y_nhwc, y_row + ow * C, C, lanes, has_bias, bias_lanes, act,
                                  ep, scratch_row + ow * 16);
          } else if (rest == 1) {
            __m512 acc[1];
            channelPixels<S, K, 1>(block, wp, wv, acc, local, ow);
            storeChannelPixels<1>(acc, y_nhwc, y_row + ow * C, C, lanes, has_bias, bias_lanes, act,
                                  ep, scratch_row + ow * 16);
          }
          if (y_nhwc && !vector_act) {
            for (int64_t p = 0; p < OW; ++p) ep.activate(y_row + p * C, count);
          }
        }
        if (y_nhwc) continue;

        // The block's pixels of this band back to planes, 16 pixels of each channel at a time,
        // with the epilogue on the way (Epilogue::apply's order: bias, residual, activation).
        const int64_t p_begin = oh0 * OW, p_end = oh1 * OW;
        for (int64_t p0 = p_begin; p0 < p_end; p0 += 16) {
          __m512 v[16];
  #pragma GCC unroll 16
          for (int j = 0; j < 16; ++j) v[j] = _mm512_load_ps(out + (p0 - p_begin + j) * 16);
          transpose16x16(v);
          const __mmask16 m = firstLanes(p_end - p0);
          for (int64_t c = 0; c < count; ++c) {
            const int64_t at = (channel + c) * P + p0;
            storeWithEpilogue512(y + at, m, v[c], has_bias,
                                 _mm512_set1_ps(has_bias ? ep.bias[channel + c] : 0.f),
                                 residual ? residual + at : nullptr, act, ep.alpha, ep.beta);
          }
        }
        if (!vector_act)
          for (int64_t c = 0; c < count; ++c)
            ep.activate(y + (channel + c) * P + p_begin, p_end - p_begin);
      }
    }
  }
}

// Square 3x3 and 5x5 windows at stride 1 or 2 without dilation (MobileNet's, EfficientNet's):
// those the row-reusing, channel-block and channels-last kernels are instantiated for.
bool squareWindow(const Window& win) {
  if (win.rank() != 2) return false;
  const int64_t s = win.strides[1], k = win.kernel[1];
  return win.strides[0] == s && (s == 1 || s == 2) && win.kernel[0] == k && (k == 3 || k == 5) &&
         win.dilations[0] == 1 && win.dilations[1] == 1;
}

// ConvNeXt's 7x7 stride-1 window, undilated: the row-reusing kernel only (its 49 weights do not
// stay in registers, but each input row is still loaded once per tap column instead of once per
// output row under it; bench/README.md, "ConvNeXt's 7x7 depthwise rows").
bool sevenBySevenWindow(const Window& win) {
  return win.rank() == 2 && win.kernel[0] == 7 && win.kernel[1] == 7 && win.strides[0] == 1 &&
         win.strides[1] == 1 && win.dilations[0] == 1 && win.dilations[1] == 1;
}

// Calls run(S, K), std::integral_constant stride and size, for a squareWindow: the one place
// that turns its stride and size into the kernels' template arguments.
template <typename Run>
void withSquareWindow(const Window& win, Run&& run) {
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Three = std::integral_constant<int, 3>;
  using Five = std::integral_constant<int, 5>;
  const int64_t s = win.strides[1], k = win.kernel[1];
  if (s == 1 && k == 3) run(One{}, Three{});
  else if (s == 1) run(One{}, Five{});
  else if (k == 3) run(Two{}, Three{});
  else run(Two{}, Five{});
}

}  // namespace

bool depthwisePlaneAvx512Takes(const Window& win) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (!has_avx512) return false;
  if (win.rank() == 1) return win.strides[0] == 1;
  return win.rank() == 2 && win.in[1] < (int64_t{1} << 30) && win.kernel[1] <= kMaxMaskedTaps &&
         (squareWindow(win) || win.strides[1] == 1 || win.strides[1] == 2);
}

bool depthwisePlaneAvx512(const float* x, const float* w, float* y, const Window& win,
                          const Epilogue& ep, int64_t channel, const float* residual,
                          const NextPlane& next) {
  if (!depthwisePlaneAvx512Takes(win)) return false;
  if (win.rank() == 1) {
    depthwiseLine(x, w, y, win, ep, channel, residual);
    return true;
  }
  // Square windows (MobileNet's, EfficientNet's) take the row-reusing kernel; the rest the
  // general one.
  if (squareWindow(win)) {
    withSquareWindow(win, [&](auto S, auto K) {
      depthwiseRowsDense<decltype(S)::value, decltype(K)::value>(x, w, y, win, ep, channel,
                                                                residual, next);
    });
  } else if (sevenBySevenWindow(win)) {
    depthwiseRowsDense<1, 7>(x, w, y, win, ep, channel, residual, next);
  } else if (win.strides[1] == 1) {
    depthwiseRows<1>(x, w, y, win, ep, channel, residual, next);
  } else {
    depthwiseRows<2>(x, w, y, win, ep, channel, residual, next);
  }
  return true;
}

// The square windows depthwiseChannels is instantiated for, with its per-thread scratch image
// (padded input and output pixels, 16 floats each) under 64 MiB.
static bool channelsTakes(const Window& win) {
  if (!squareWindow(win)) return false;
  const int64_t s = win.strides[1], k = win.kernel[1];
  const int64_t OH = win.out[0], OW = win.out[1];
  if (OH > (int64_t{1} << 20) || OW > (int64_t{1} << 20)) return false;
  const int64_t pixels = ((OH - 1) * s + k) * ((OW - 1) * s + k) + OH * OW;
  return pixels <= (int64_t{1} << 20);
}

bool depthwiseChannelsAvx512(const float* x, const float* w, float* y, const Window& win,
                             const Epilogue& ep, int64_t channel, int64_t count,
                             const float* residual) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (!has_avx512 || count < 1 || count > 16 || !channelsTakes(win)) return false;
  withSquareWindow(win, [&](auto S, auto K) {
    depthwiseChannels<decltype(S)::value, decltype(K)::value>(x, w, y, win, ep, channel, count,
                                                              residual);
  });
  return true;
}

bool depthwiseChannelsLastTakes(const Window& win) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  return has_avx512 && squareWindow(win) && win.out[0] > 0 && win.out[1] > 0 &&
         win.out[1] <= (int64_t{1} << 16);
}

static bool depthwiseChannelsLastAvx512(const float* x, bool x_nhwc, const float* w, float* y,
                                        bool y_nhwc, const Window& win, const Epilogue& ep,
                                        int64_t C, const float* residual, int64_t oh_begin,
                                        int64_t oh_end) {
  if (!depthwiseChannelsLastTakes(win)) return false;
  withSquareWindow(win, [&](auto S, auto K) {
    depthwiseChannelsLastRows<decltype(S)::value, decltype(K)::value>(
        x, x_nhwc, w, y, y_nhwc, win, ep, C, residual, oh_begin, oh_end);
  });
  return true;
}

bool depthwiseChannelsLastInPlace(const Window& win) {
  if (!depthwiseChannelsLastTakes(win) || win.strides[0] != 1 || win.strides[1] != 1)
    return false;
  return win.out[0] == win.in[0] && win.out[1] == win.in[1];
}

bool depthwiseChannelsPay(const Window& win) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  // Measured (bench_gemm --only depthwise, and MobileNetV2 / EfficientNet-B0 node by node):
  // 7-wide outputs 1.8-2.7x less time across channels, where a row fills 7 of 16 lanes; 14-wide
  // ones 0.85-1.5x, a gain with 5x5 windows and a loss with 3x3 ones in both models; from 28
  // wide the rows are as fast or faster (no transposes, no scratch image).
  if (!has_avx512 || !channelsTakes(win)) return false;  // (a 1-D window has no out[1])
  const int64_t out_width = win.out[1];
  return out_width <= 8 || (win.kernel[1] == 5 && out_width <= 14);
}

#else

bool depthwisePlaneAvx512Takes(const Window&) { return false; }

bool depthwisePlaneAvx512(const float*, const float*, float*, const Window&, const Epilogue&,
                          int64_t, const float*, const NextPlane&) {
  return false;
}

bool depthwiseChannelsAvx512(const float*, const float*, float*, const Window&, const Epilogue&,
                             int64_t, int64_t, const float*) {
  return false;
}

bool depthwiseChannelsPay(const Window&) { return false; }

bool depthwiseChannelsLastTakes(const Window&) { return false; }
bool depthwiseChannelsLastInPlace(const Window&) { return false; }

static bool depthwiseChannelsLastAvx512(const float*, bool, const float*, float*, bool,
                                        const Window&, const Epilogue&, int64_t, const float*,
                                        int64_t, int64_t) {
  return false;
}

#endif

// Any 2-D window, element by element: what runs without AVX-512 or for windows the vector
// kernel does not take (the executor offers the layout only where it does).
static void depthwiseChannelsLastScalar(const float* x, bool x_nhwc, const float* w, float* y,
                                        bool y_nhwc, const Window& win, const Epilogue& ep,
                                        int64_t C, const float* residual, int64_t oh_begin,
                                        int64_t oh_end) {
  const int64_t H = win.in[0], W = win.in[1], OW = win.out[1];
  const int64_t KH = win.kernel[0], KW = win.kernel[1], P = win.out[0] * OW;
  const auto xAt = [&](int64_t c, int64_t ih, int64_t iw) {
    return x_nhwc ? x[(ih * W + iw) * C + c] : x[(c * H + ih) * W + iw];
  };
  for (int64_t c = 0; c < C; ++c) {
    const float* wc = w + c * KH * KW;
    for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        float sum = 0.f;
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * win.strides[0] - win.pad_begin[0] + kh * win.dilations[0];
          if (ih < 0 || ih >= H) continue;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t iw = ow * win.strides[1] - win.pad_begin[1] + kw * win.dilations[1];
            if (iw >= 0 && iw < W) sum += wc[kh * KW + kw] * xAt(c, ih, iw);
          }
        }
        const int64_t p = oh * OW + ow;
        if (y_nhwc) {
          if (ep.bias) sum += ep.bias[c];
          y[p * C + c] = sum;
          ep.activate(&y[p * C + c], 1);
        } else {
          y[c * P + p] = sum;
        }
      }
    }
    if (!y_nhwc) {
      Epilogue planar = ep;
      planar.bias_per_row = true;
      planar.residual = residual;
      planar.ld_residual = P;
      const int64_t p0 = oh_begin * OW, n = (oh_end - oh_begin) * OW;
      if (!planar.empty()) planar.apply(y + c * P + p0, P, c, p0, 1, n);
    }
  }
}

void depthwiseChannelsLast(const float* x, bool x_nhwc, const float* w, float* y, bool y_nhwc,
                           const Window& win, const Epilogue& ep, int64_t C,
                           const float* residual, int64_t oh_begin, int64_t oh_end) {
  if (oh_begin >= oh_end || C <= 0) return;
  if (depthwiseChannelsLastAvx512(x, x_nhwc, w, y, y_nhwc, win, ep, C, residual, oh_begin, oh_end))
    return;
  depthwiseChannelsLastScalar(x, x_nhwc, w, y, y_nhwc, win, ep, C, residual, oh_begin, oh_end);
}

}  // namespace fusectl::kernels::cpu
