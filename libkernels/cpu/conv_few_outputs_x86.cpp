// AVX-512 convolutions onto few output channels (see conv_few_outputs.h). A register tile is
// MB output channels x R output rows x 16 output columns; for each input channel, kernel row
// and kernel column, each of the R input rows under the tile is loaded once (a masked load: the
// mask leaves out the padding columns) and feeds the MB channels' accumulators, whose weights
// are broadcast from W. Rows above or below the input read a zero row instead, so the inner
// loop has no branch. With MB x R = 8-16 independent accumulators the FMA chains overlap.
#include "conv_few_outputs.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::cpu {

#ifdef FUSECTL_AVX512
namespace {

constexpr int64_t kMaxTaps = 16;  // the widest window whose column masks a tile keeps

struct Geometry {
  int64_t C, M, H, W, KH, KW, SH, DH, DW, PH, PW, OH, OW;
};

// Input channels [c0, c1) of the tile of output channels [m0, m0 + MB), output rows
// [oh0, oh0 + rows) (rows <= R) and the 16 columns from ow0 of one image: the sums so far are
// read back from y unless c0 is 0, and the epilogue is applied when c1 is the last channel.
//
// K (3, 5 or 7) is the window's height at vertical stride and dilation 1, known when compiled:
// each input row under the tile is then loaded once per kernel column and feeds every output row
// it lies under (up to K of them), a third of the loads at K = 3; which matters most for one or
// two output channels, where a load otherwise fed only one or two FMAs. K = 0 takes any window,
// loading each tap's row for each output row.
template <int MB, int R, int K>
FUSECTL_AVX512 void fewOutputsTile(const float* x, const float* w, float* y, const Geometry& g,
                                   const Epilogue& ep, Activation act, const float* residual,
                                   const float* zero_row, int64_t m0, int64_t oh0, int rows,
                                   int64_t ow0, int64_t c0, int64_t c1) {
  __mmask16 masks[kMaxTaps];
  for (int64_t kw = 0; kw < g.KW; ++kw) {
    const int64_t first = ow0 - g.PW + kw * g.DW;  // the input column of lane 0
    const int64_t lo = std::max<int64_t>(0, -first), hi = std::min<int64_t>(16, g.W - first);
    masks[kw] = hi > lo ? __mmask16(firstLanes(hi) & ~firstLanes(lo)) : __mmask16(0);
    masks[kw] &= firstLanes(g.OW - ow0);
  }
  const __mmask16 out_mask = firstLanes(g.OW - ow0);
  const int64_t out_plane = g.OH * g.OW;
  __m512 acc[MB][R];
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int64_t at = (m0 + m) * out_plane + (oh0 + r) * g.OW + ow0;
      acc[m][r] = c0 > 0 && r < rows ? _mm512_maskz_loadu_ps(out_mask, y + at) : _mm512_setzero_ps();
    }
  const int64_t taps = g.KH * g.KW, plane = g.H * g.W, filter = g.C * taps;
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = x + c * plane;
    const float* wc = w + m0 * filter + c * taps;
    if constexpr (K > 0) {
      const float* row[R + K - 1];
#pragma GCC unroll 16
      for (int i = 0; i < R + K - 1; ++i) {
        const int64_t ih = oh0 - g.PH + i;
        row[i] = i < rows + K - 1 && ih >= 0 && ih < g.H ? xc + ih * g.W : zero_row;
      }
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t col = ow0 - g.PW + kw * g.DW;
        __m512 wv[MB][K];
#pragma GCC unroll 4
        for (int m = 0; m < MB; ++m)
#pragma GCC unroll 8
          for (int kh = 0; kh < K; ++kh) wv[m][kh] = _mm512_set1_ps(wc[m * filter + kh * g.KW + kw]);
#pragma GCC unroll 16
        for (int i = 0; i < R + K - 1; ++i) {
          const __m512 v = _mm512_maskz_loadu_ps(masks[kw], row[i] + col);
#pragma GCC unroll 8
          for (int kh = 0; kh < K; ++kh) {
            const int r = i - kh;
            if (r < 0 || r >= R) continue;
#pragma GCC unroll 4
            for (int m = 0; m < MB; ++m) acc[m][r] = _mm512_fmadd_ps(v, wv[m][kh], acc[m][r]);
          }
        }
      }
      continue;
    }
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const float* row[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int64_t ih = (oh0 + r) * g.SH - g.PH + kh * g.DH;
        row[r] = r < rows && ih >= 0 && ih < g.H ? xc + ih * g.W : zero_row;
      }
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t col = ow0 - g.PW + kw * g.DW;
        __m512 wv[MB];
#pragma GCC unroll 4
        for (int m = 0; m < MB; ++m) wv[m] = _mm512_set1_ps(wc[m * filter + kh * g.KW + kw]);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512 v = _mm512_maskz_loadu_ps(masks[kw], row[r] + col);
#pragma GCC unroll 4
          for (int m = 0; m < MB; ++m) acc[m][r] = _mm512_fmadd_ps(v, wv[m], acc[m][r]);
        }
      }
    }
  }
  const bool last = c1 == g.C;
  // Constant trip counts, the row test inside: an accumulator indexed by a run-time count
  // would be kept in memory instead of in a register.
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m) {
    const __m512 bias = _mm512_set1_ps(ep.bias ? ep.bias[m0 + m] : 0.f);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      const int64_t at = (m0 + m) * out_plane + (oh0 + r) * g.OW + ow0;
      if (!last) {
        _mm512_mask_storeu_ps(y + at, out_mask, acc[m][r]);
        continue;
      }
      storeWithEpilogue512(y + at, out_mask, acc[m][r], ep.bias != nullptr, bias,
                           residual ? residual + at : nullptr, act, ep.alpha, ep.beta);
    }
  }
}

// Rows per tile for MB channels: MB x R accumulators, 8-16 of them.
constexpr int rowsFor(int mb) { return mb == 1 ? 8 : mb == 2 ? 6 : 4; }

// Input channels go 8 at a time over a band's tiles, the partial sums kept in y between (the
// same additions in the same order): a tile's rows of 8 channels stay in L1 for the next tile
// where those of all channels did not. Measured 3-8% less time than one pass over the channels
// (32 -> 3 channels at 128x128: 0.434 against 0.461-0.489 ms).
constexpr int64_t kChannelChunk = 8;

// Output rows [oh_begin, oh_end) of channels [m0, m0 + MB), every column block.
template <int MB, int K>
FUSECTL_AVX512 void fewOutputsBand(const float* x, const float* w, float* y, const Geometry& g,
                                   const Epilogue& ep, const float* residual,
                                   const float* zero_row, int64_t m0, int64_t oh_begin,
                                   int64_t oh_end) {
  constexpr int R = rowsFor(MB);
  const bool vector_act = hasVectorActivation(ep.activation, true);
  const Activation act = vector_act ? ep.activation : Activation::None;
  for (int64_t c0 = 0; c0 < g.C; c0 += kChannelChunk) {
    const int64_t c1 = std::min(g.C, c0 + kChannelChunk);
    for (int64_t oh0 = oh_begin; oh0 < oh_end; oh0 += R) {
      const int rows = static_cast<int>(std::min<int64_t>(R, oh_end - oh0));
      for (int64_t ow0 = 0; ow0 < g.OW; ow0 += 16)
        fewOutputsTile<MB, R, K>(x, w, y, g, ep, act, residual, zero_row, m0, oh0, rows, ow0, c0,
                                 c1);
    }
  }
  if (vector_act) return;
  for (int m = 0; m < MB; ++m)
    for (int64_t r = oh_begin; r < oh_end; ++r) ep.activate(y + ((m0 + m) * g.OH + r) * g.OW, g.OW);
}

}  // namespace

bool fewOutputsConvTakes(int64_t group, int64_t M, const Window& win) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  // A 1x1 window is a plain GEMM with nothing to pack but W: that path stays faster.
  return has_avx512 && group == 1 && M >= 1 && M <= 12 && win.rank() == 2 &&
         win.kernel[0] * win.kernel[1] > 1 && win.strides[1] == 1 && win.kernel[1] <= kMaxTaps &&
         win.in[1] < (int64_t{1} << 30) && win.out[0] > 0 && win.out[1] > 0;
}

void convFewOutputs(const float* x, const float* w, float* y, int64_t N, int64_t C, int64_t M,
                    const Window& win, const Epilogue& ep, int threads) {
  Geometry g{C,
             M,
             win.in[0],
             win.in[1],
             win.kernel[0],
             win.kernel[1],
             win.strides[0],
             win.dilations[0],
             win.dilations[1],
             win.pad_begin[0],
             win.pad_begin[1],
             win.out[0],
             win.out[1]};
  // The channels in blocks of up to 4 (3 as one block, 5 as 4 + 1...), each block over bands
  // of its tile's rows.
  std::vector<std::pair<int64_t, int>> blocks;  // (first channel, channels)
  for (int64_t m = 0; m < M;) {
    const int mb = static_cast<int>(std::min<int64_t>(4, M - m));
    blocks.push_back({m, mb});
    m += mb;
  }
  const std::vector<float> zero_row(static_cast<size_t>(g.W), 0.f);
  const int64_t band_rows = 24;  // a multiple of every rowsFor
  const int64_t bands = (g.OH + band_rows - 1) / band_rows;
  const int64_t tasks = N * static_cast<int64_t>(blocks.size()) * bands;
  const int64_t in_image = C * g.H * g.W, out_image = M * g.OH * g.OW;
  parallelFor(tasks, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / (static_cast<int64_t>(blocks.size()) * bands);
      const int64_t rest = t % (static_cast<int64_t>(blocks.size()) * bands);
      // Not a structured binding: lambdas below capture m0, which C++17 (and clang) forbid.
      const int64_t m0 = blocks[static_cast<size_t>(rest / bands)].first;
      const int mb = blocks[static_cast<size_t>(rest / bands)].second;
      const int64_t band_end = std::min(g.OH, (rest % bands + 1) * band_rows);
      const float* xn = x + n * in_image;
      float* yn = y + n * out_image;
      const float* zn = ep.residual ? ep.residual + n * out_image : nullptr;
      const int64_t band_begin = rest % bands * band_rows;
      const float* zero = zero_row.data();
      const auto band = [&](auto mb_c, auto k_c) {
        fewOutputsBand<decltype(mb_c)::value, decltype(k_c)::value>(xn, w, yn, g, ep, zn, zero, m0,
                                                                    band_begin, band_end);
      };
      // The row-reusing tile where its weights and accumulators fit the 32 registers.
      const int64_t k = g.SH == 1 && g.DH == 1 ? g.KH : 0;
      const auto withHeight = [&](auto mb_c) {
        constexpr int MB = decltype(mb_c)::value;
        if (k == 3) return band(mb_c, std::integral_constant<int, 3>{});
        if (k == 5 && MB <= 2) return band(mb_c, std::integral_constant<int, 5>{});
        if (k == 7 && MB <= 2) return band(mb_c, std::integral_constant<int, 7>{});
        band(mb_c, std::integral_constant<int, 0>{});
      };
      switch (mb) {
        case 1: withHeight(std::integral_constant<int, 1>{}); break;
        case 2: withHeight(std::integral_constant<int, 2>{}); break;
        case 3: withHeight(std::integral_constant<int, 3>{}); break;
        default: withHeight(std::integral_constant<int, 4>{}); break;
      }
    }
  });
}

#else

bool fewOutputsConvTakes(int64_t, int64_t, const Window&) { return false; }

void convFewOutputs(const float*, const float*, float*, int64_t, int64_t, int64_t, const Window&,
                    const Epilogue&, int) {}

#endif

}  // namespace fusectl::kernels::cpu
