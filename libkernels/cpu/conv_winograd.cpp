// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (see conv_winograd.h).
#include "conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string_view>

#include "compute_common.h"
#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"
#include "vec_kernels.h"

namespace fusectl::kernels::cpu {
namespace {

std::atomic<ConvAlgorithm> g_algorithm{ConvAlgorithm::Auto};

// The transforms of F(m x m, 3 x 3) (Lavin & Gray): an m x m output tile from the n x n input
// patch under it, n = m + 2, through n * n products per channel pair.
template <int TM>
struct WinogradMatrices;

template <>
struct WinogradMatrices<2> {
  static constexpr int n = 4;
  static constexpr float bt[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
  static constexpr float at[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
  static constexpr double g[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
};

// Interpolation points 0, +-1, +-2 and infinity.
template <>
struct WinogradMatrices<4> {
  static constexpr int n = 6;
  static constexpr float bt[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0},
                                     {0, 4, -4, -1, 1, 0}, {0, -2, -1, 2, 1, 0},
                                     {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  static constexpr float at[4][6] = {
      {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
  static constexpr double g[6][3] = {{1.0 / 4, 0, 0},
                                     {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                     {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                     {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                     {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                     {0, 0, 1}};
};

// A chunk of tile rows is transformed, multiplied and transformed back before the next one, so
// that V (E x C x tiles) and the products (E x M x tiles; E = 16 or 36 values per tile) are
// still cached when the next phase reads them: together about this many floats, 4 MiB.
// Measured (bench_gemm --only conv3x3, one thread, best of three alternating runs) against
// 1 MiB, the L2 here, whose smaller GEMMs were up to 11% slower (64 -> 256 channels at
// 28x28), and 16 MiB, up to 23% slower (64 channels at 112x112).
constexpr int64_t kChunkFloats = int64_t{1} << 20;

// Floats per scratch row of the transforms: the padded input row (TM * TW + 2) and slack for
// the whole-vector reads past its end (the by-4 deinterleave reads 68 floats from a tile's
// first column).
int64_t transformRowFloats(int TM, int64_t TW) {
  return (TM * TW + 2 + 16 * TM + 34 + 15) / 16 * 16;
}

// The input transforms' scratch rows: N zero-padded input rows (p), then N rows of B^T d (t),
// each transformRowFloats(TM, TW) apart.
template <int N>
struct TransformRows {
  float* p[N];
  float* t[N];
  TransformRows(float* rows, int64_t stride) {
    for (int i = 0; i < N; ++i) {
      p[i] = rows + i * stride;
      t[i] = rows + (N + i) * stride;
    }
  }
};

// Fills p[0..N) with input rows first_row.. of `xc` (H x W), Wp columns each: padded column q
// holds input column q - pad_left, zero outside the input.
template <int N>
FUSECTL_FORCE_INLINE void loadPaddedRows(const float* xc, int64_t H, int64_t W,
                                         int64_t pad_left, int64_t first_row,
                                         int64_t Wp, float* const* p) {
  const int64_t q0 = std::min(pad_left, Wp), q1 = std::max(q0, std::min(pad_left + W, Wp));
  for (int i = 0; i < N; ++i) {
    const int64_t ih = first_row + i;
    float* pr = p[i];
    if (ih < 0 || ih >= H) {
      std::fill(pr, pr + Wp, 0.f);
      continue;
    }
    std::fill(pr, pr + q0, 0.f);
    std::copy(xc + ih * W + (q0 - pad_left), xc + ih * W + (q1 - pad_left), pr + q0);
    std::fill(pr + q1, pr + Wp, 0.f);
  }
}

// V = B^T d B for the tiles of rows [ty0, ty1) of one input channel `xc` (H x W), written to
// V_e[c][t] at v + e * plane + t (t counts the chunk's tiles row by row). `rows` holds 2n rows
// of transformRowFloats: the n zero-padded input rows under a tile row, then B^T d of them.
// The loops run over whole rows with unit or stride-TM access, which the compiler vectorizes;
// the coefficient loops unroll, so that the zero coefficients drop out.
template <int TM>
void inputTransformPortable(const float* xc, int64_t H, int64_t W, int64_t pad_top,
                            int64_t pad_left, int64_t TW, int64_t ty0, int64_t ty1, float* v,
                            int64_t plane, float* rows) {
  using T = WinogradMatrices<TM>;
  constexpr int N = T::n;
  const int64_t Wp = TM * TW + 2;
  const TransformRows<N> scratch(rows, transformRowFloats(TM, TW));
  const auto& p = scratch.p;
  const auto& t = scratch.t;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    loadPaddedRows<N>(xc, H, W, pad_left, TM * ty - pad_top, Wp, p);
#pragma GCC unroll 6
    for (int i = 0; i < N; ++i) {
      float* __restrict ti = t[i];
      for (int64_t q = 0; q < Wp; ++q) {
        float acc = 0.f;
#pragma GCC unroll 6
        for (int j = 0; j < N; ++j) {
          if (T::bt[i][j] != 0.f) acc += T::bt[i][j] * p[j][q];
        }
        ti[q] = acc;
      }
    }
    const int64_t base = (ty - ty0) * TW;
    for (int i = 0; i < N; ++i) {
      const float* __restrict r = t[i];
      for (int64_t tx = 0; tx < TW; ++tx) {
#pragma GCC unroll 6
        for (int k = 0; k < N; ++k) {
          float acc = 0.f;
#pragma GCC unroll 6
          for (int j = 0; j < N; ++j) {
            if (T::bt[k][j] != 0.f) acc += T::bt[k][j] * r[TM * tx + j];
          }
          v[(i * N + k) * plane + base + tx] = acc;
        }
      }
    }
  }
}

// Y = A^T m A for the tiles of rows [ty0, ty1) of one output channel: m_e at mo + e * plane,
// the output plane (OH x OW) at yo. Each tile row gives TM output rows, built in `rows`
// (TM rows of transformRowFloats), copied out without the columns past OW, then the epilogue is
// applied to them while they are in L1.
template <int TM>
void outputTransformPortable(const float* mo, int64_t plane, int64_t TW, int64_t ty0,
                             int64_t ty1, int64_t OH, int64_t OW, float* yo, float* rows,
                             const Epilogue& ep, int64_t oc) {
  using T = WinogradMatrices<TM>;
  constexpr int N = T::n;
  const int64_t stride = transformRowFloats(TM, TW);
  const int64_t P = OH * OW;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    const float* m[N * N];
    for (int e = 0; e < N * N; ++e) m[e] = mo + e * plane + (ty - ty0) * TW;
    for (int64_t tx = 0; tx < TW; ++tx) {
      float s[TM][N];
#pragma GCC unroll 6
      for (int j = 0; j < N; ++j) {
#pragma GCC unroll 4
        for (int a = 0; a < TM; ++a) {
          float acc = 0.f;
#pragma GCC unroll 6
          for (int i = 0; i < N; ++i) {
            if (T::at[a][i] != 0.f) acc += T::at[a][i] * m[i * N + j][tx];
          }
          s[a][j] = acc;
        }
      }
#pragma GCC unroll 4
      for (int a = 0; a < TM; ++a) {
#pragma GCC unroll 4
        for (int b = 0; b < TM; ++b) {
          float acc = 0.f;
#pragma GCC unroll 6
          for (int j = 0; j < N; ++j) {
            if (T::at[b][j] != 0.f) acc += T::at[b][j] * s[a][j];
          }
          rows[a * stride + TM * tx + b] = acc;
        }
      }
    }
    for (int a = 0; a < TM; ++a) {
      const int64_t oh = TM * ty + a;
      if (oh >= OH) break;
      float* out = yo + oh * OW;
      std::copy(rows + a * stride, rows + a * stride + OW, out);
      if (!ep.empty()) ep.apply(out, P, oc, oh * OW, 1, OW);
    }
  }
}

#ifdef FUSECTL_AVX512
// The transforms with 16 tiles per vector. Stride-2 reads are two loads and a permute that keeps
// the even (or odd) lanes; the two output columns of a tile are interleaved back the same way.
// The output side applies the epilogue in registers and stores straight into Y.

FUSECTL_AVX512 void inputTransformAvx512(const float* xc, int64_t H, int64_t W, int64_t pad_top,
                                         int64_t pad_left, int64_t TW, int64_t ty0, int64_t ty1,
                                         float* v, int64_t plane, float* rows) {
  const int64_t Wp = 2 * TW + 2;
  const TransformRows<4> scratch(rows, transformRowFloats(2, TW));
  const auto& p = scratch.p;
  const auto& t = scratch.t;
  const __m512i even = evenLaneIndices();
  const __m512i odd = oddLaneIndices();
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    loadPaddedRows<4>(xc, H, W, pad_left, 2 * ty - pad_top, Wp, p);
    for (int64_t q = 0; q < Wp; q += 16) {  // whole vectors: the rows have slack
      const __m512 d0 = _mm512_loadu_ps(p[0] + q), d1 = _mm512_loadu_ps(p[1] + q);
      const __m512 d2 = _mm512_loadu_ps(p[2] + q), d3 = _mm512_loadu_ps(p[3] + q);
      _mm512_storeu_ps(t[0] + q, _mm512_sub_ps(d0, d2));
      _mm512_storeu_ps(t[1] + q, _mm512_add_ps(d1, d2));
      _mm512_storeu_ps(t[2] + q, _mm512_sub_ps(d2, d1));
      _mm512_storeu_ps(t[3] + q, _mm512_sub_ps(d1, d3));
    }
    const int64_t base = (ty - ty0) * TW;
    for (int i = 0; i < 4; ++i) {
      float* v0 = v + (i * 4 + 0) * plane + base;
      float* v1 = v + (i * 4 + 1) * plane + base;
      float* v2 = v + (i * 4 + 2) * plane + base;
      float* v3 = v + (i * 4 + 3) * plane + base;
      for (int64_t tx = 0; tx < TW; tx += 16) {
        const float* r = t[i] + 2 * tx;
        const __m512 l0 = _mm512_loadu_ps(r), l1 = _mm512_loadu_ps(r + 16);
        const __m512 k0 = _mm512_loadu_ps(r + 2), k1 = _mm512_loadu_ps(r + 18);
        const __m512 a = _mm512_permutex2var_ps(l0, even, l1);
        const __m512 b = _mm512_permutex2var_ps(l0, odd, l1);
        const __m512 c = _mm512_permutex2var_ps(k0, even, k1);
        const __m512 d = _mm512_permutex2var_ps(k0, odd, k1);
        const __mmask16 m = firstLanes(TW - tx);
        _mm512_mask_storeu_ps(v0 + tx, m, _mm512_sub_ps(a, c));
        _mm512_mask_storeu_ps(v1 + tx, m, _mm512_add_ps(b, c));
        _mm512_mask_storeu_ps(v2 + tx, m, _mm512_sub_ps(c, b));
        _mm512_mask_storeu_ps(v3 + tx, m, _mm512_sub_ps(b, d));
      }
    }
  }
}

FUSECTL_AVX512 void outputTransformAvx512(const float* mo, int64_t plane, int64_t TW,
                                          int64_t ty0, int64_t ty1, int64_t OH, int64_t OW,
                                          float* yo, float* /*rows*/, const Epilogue& ep,
                                          int64_t oc) {
  const __m512i lo = interleaveLowIndices(), hi = interleaveHighIndices();
  const __m512 bias = _mm512_set1_ps(ep.bias ? ep.bias[oc] : 0.f);
  const float* residual = ep.residual ? ep.residual + oc * ep.ld_residual : nullptr;
  const Activation act = ep.activation;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    const float* m = mo + (ty - ty0) * TW;
    for (int64_t tx = 0; tx < TW; tx += 16) {
      const __mmask16 in = firstLanes(TW - tx);
      __m512 s0[4], s1[4];
      for (int j = 0; j < 4; ++j) {
        const __m512 m0 = _mm512_maskz_loadu_ps(in, m + j * plane + tx);
        const __m512 m1 = _mm512_maskz_loadu_ps(in, m + (4 + j) * plane + tx);
        const __m512 m2 = _mm512_maskz_loadu_ps(in, m + (8 + j) * plane + tx);
        const __m512 m3 = _mm512_maskz_loadu_ps(in, m + (12 + j) * plane + tx);
        s0[j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        s1[j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 y[2][2] = {
          {_mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), s0[2]),
           _mm512_sub_ps(_mm512_sub_ps(s0[1], s0[2]), s0[3])},
          {_mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), s1[2]),
           _mm512_sub_ps(_mm512_sub_ps(s1[1], s1[2]), s1[3])}};
      const int64_t col = 2 * tx;
      const __mmask16 m_lo = firstLanes(OW - col), m_hi = firstLanes(OW - col - 16);
      for (int dy = 0; dy < 2; ++dy) {
        const int64_t oh = 2 * ty + dy;
        if (oh >= OH) break;
        const int64_t at = oh * OW + col;
        const float* z = residual ? residual + at : nullptr;
        storeWithEpilogue512(yo + at, m_lo, _mm512_permutex2var_ps(y[dy][0], lo, y[dy][1]),
                             ep.bias != nullptr, bias, z, act, ep.alpha, ep.beta);
        storeWithEpilogue512(yo + at + 16, m_hi, _mm512_permutex2var_ps(y[dy][0], hi, y[dy][1]),
                             ep.bias != nullptr, bias, z ? z + 16 : nullptr, act, ep.alpha,
                             ep.beta);
      }
    }
  }
}

// F(4x4, 3x3): tiles 4 columns apart, so the horizontal input transform deinterleaves 64
// columns into 4 vectors (lane l holds column 4 l + j) and the output transform interleaves each
// output row's 4 vectors back; the epilogue runs on them in registers.
// d[k][l] = r[4 l + k] for the 64 floats at r: two rounds of even/odd selection.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void deinterleave4(const float* r, __m512* d) {
  const __m512i even = evenLaneIndices();
  const __m512i odd = oddLaneIndices();
  const __m512 l0 = _mm512_loadu_ps(r), l1 = _mm512_loadu_ps(r + 16);
  const __m512 l2 = _mm512_loadu_ps(r + 32), l3 = _mm512_loadu_ps(r + 48);
  const __m512 e01 = _mm512_permutex2var_ps(l0, even, l1);
  const __m512 o01 = _mm512_permutex2var_ps(l0, odd, l1);
  const __m512 e23 = _mm512_permutex2var_ps(l2, even, l3);
  const __m512 o23 = _mm512_permutex2var_ps(l2, odd, l3);
  d[0] = _mm512_permutex2var_ps(e01, even, e23);
  d[1] = _mm512_permutex2var_ps(o01, even, o23);
  d[2] = _mm512_permutex2var_ps(e01, odd, e23);
  d[3] = _mm512_permutex2var_ps(o01, odd, o23);
}

// The inverse: out[4 l + k] = y[k][l], as four vectors of 16 (out[0..15], ..., out[48..63]).
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void interleave4(const __m512* y, __m512* out) {
  const __m512i lo = interleaveLowIndices(), hi = interleaveHighIndices();
  // u = (y0, y2) interleaved, v = (y1, y3): then (u, v) interleaved is (y0, y1, y2, y3).
  const __m512 u_lo = _mm512_permutex2var_ps(y[0], lo, y[2]);
  const __m512 u_hi = _mm512_permutex2var_ps(y[0], hi, y[2]);
  const __m512 v_lo = _mm512_permutex2var_ps(y[1], lo, y[3]);
  const __m512 v_hi = _mm512_permutex2var_ps(y[1], hi, y[3]);
  out[0] = _mm512_permutex2var_ps(u_lo, lo, v_lo);
  out[1] = _mm512_permutex2var_ps(u_lo, hi, v_lo);
  out[2] = _mm512_permutex2var_ps(u_hi, lo, v_hi);
  out[3] = _mm512_permutex2var_ps(u_hi, hi, v_hi);
}

FUSECTL_AVX512 void inputTransformAvx512By4(const float* xc, int64_t H, int64_t W,
                                            int64_t pad_top, int64_t pad_left, int64_t TW,
                                            int64_t ty0, int64_t ty1, float* v, int64_t plane,
                                            float* rows) {
  constexpr int TM = 4;
  using T = WinogradMatrices<TM>;
  constexpr int N = T::n;
  const int64_t Wp = TM * TW + 2;
  const TransformRows<N> scratch(rows, transformRowFloats(TM, TW));
  const auto& p = scratch.p;
  const auto& t = scratch.t;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    loadPaddedRows<N>(xc, H, W, pad_left, TM * ty - pad_top, Wp, p);
    for (int64_t q = 0; q < Wp; q += 16) {  // whole vectors: the rows have slack
      __m512 d[N];
      for (int j = 0; j < N; ++j) d[j] = _mm512_loadu_ps(p[j] + q);
#pragma GCC unroll 6
      for (int i = 0; i < N; ++i) {
        __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 6
        for (int j = 0; j < N; ++j) {
          if (T::bt[i][j] != 0.f) acc = _mm512_fmadd_ps(_mm512_set1_ps(T::bt[i][j]), d[j], acc);
        }
        _mm512_storeu_ps(t[i] + q, acc);
      }
    }
    const int64_t base = (ty - ty0) * TW;
    for (int64_t tx = 0; tx < TW; tx += 16) {
      const __mmask16 m = firstLanes(TW - tx);
      for (int i = 0; i < N; ++i) {
        const float* r = t[i] + TM * tx;
        __m512 d[N];
        deinterleave4(r, d);  // columns 0-3 of 16 tiles
        __m512 next[4];
        deinterleave4(r + 4, next);  // columns 4 and 5: the next tile's 0 and 1
        d[4] = next[0];
        d[5] = next[1];
#pragma GCC unroll 6
        for (int k = 0; k < N; ++k) {
          __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 6
          for (int j = 0; j < N; ++j) {
            if (T::bt[k][j] != 0.f) acc = _mm512_fmadd_ps(_mm512_set1_ps(T::bt[k][j]), d[j], acc);
          }
          _mm512_mask_storeu_ps(v + (i * N + k) * plane + base + tx, m, acc);
        }
      }
    }
  }
}

FUSECTL_AVX512 void outputTransformAvx512By4(const float* mo, int64_t plane, int64_t TW,
                                             int64_t ty0, int64_t ty1, int64_t OH, int64_t OW,
                                             float* yo, float* /*rows*/, const Epilogue& ep,
                                             int64_t oc) {
  constexpr int TM = 4;
  using T = WinogradMatrices<TM>;
  constexpr int N = T::n;
  const __m512 bias = _mm512_set1_ps(ep.bias ? ep.bias[oc] : 0.f);
  const float* residual = ep.residual ? ep.residual + oc * ep.ld_residual : nullptr;
  const Activation act = ep.activation;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    const float* m = mo + (ty - ty0) * TW;
    for (int64_t tx = 0; tx < TW; tx += 16) {
      const __mmask16 in = firstLanes(TW - tx);
      __m512 s[TM][N];
#pragma GCC unroll 6
      for (int j = 0; j < N; ++j) {
        __m512 col[N];
#pragma GCC unroll 6
        for (int i = 0; i < N; ++i) {
          col[i] = _mm512_maskz_loadu_ps(in, m + (i * N + j) * plane + tx);
        }
#pragma GCC unroll 4
        for (int a = 0; a < TM; ++a) {
          __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 6
          for (int i = 0; i < N; ++i) {
            if (T::at[a][i] != 0.f) acc = _mm512_fmadd_ps(_mm512_set1_ps(T::at[a][i]), col[i], acc);
          }
          s[a][j] = acc;
        }
      }
      const int64_t col0 = TM * tx;
#pragma GCC unroll 4
      for (int a = 0; a < TM; ++a) {
        const int64_t oh = TM * ty + a;
        if (oh >= OH) break;
        __m512 y[TM];
#pragma GCC unroll 4
        for (int b = 0; b < TM; ++b) {
          __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 6
          for (int j = 0; j < N; ++j) {
            if (T::at[b][j] == 0.f) continue;
            acc = _mm512_fmadd_ps(_mm512_set1_ps(T::at[b][j]), s[a][j], acc);
          }
          y[b] = acc;
        }
        __m512 row[4];
        interleave4(y, row);
        float* out = yo + oh * OW;
        const float* z = residual ? residual + oh * OW : nullptr;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          const int64_t col = col0 + 16 * q;
          const __mmask16 mk = firstLanes(OW - col);
          if (!mk) break;
          storeWithEpilogue512(out + col, mk, row[q], ep.bias != nullptr, bias,
                               z ? z + col : nullptr, act, ep.alpha, ep.beta);
        }
      }
    }
  }
}
#endif

using InputTransform = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                int64_t, int64_t, float*, int64_t, float*);
using OutputTransform = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, float*, float*, const Epilogue&, int64_t);

struct Transforms {
  InputTransform input;
  OutputTransform output;
};

// The AVX-512 transforms go with the AVX-512 GEMM kernel, so that a test forcing another
// kernel also runs the portable transforms.
Transforms transforms(int tile) {
#ifdef FUSECTL_AVX512
  if (std::string_view(gemmKernelName()) == "avx512") {
    if (tile == 2) return {inputTransformAvx512, outputTransformAvx512};
    return {inputTransformAvx512By4, outputTransformAvx512By4};
  }
#endif
  if (tile == 2) return {inputTransformPortable<2>, outputTransformPortable<2>};
  return {inputTransformPortable<4>, outputTransformPortable<4>};
}

}  // namespace

void convForceAlgorithm(ConvAlgorithm algorithm) { g_algorithm.store(algorithm); }

ConvAlgorithm convForcedAlgorithm() { return g_algorithm.load(); }

// Measured with bench_gemm --only conv3x3 (1 and 2 threads, AVX-512, best of three alternating
// runs; bench/README.md): F(2x2, 3x3) took 1.4-2.4x less time than im2col from 32 channels in and
// out and 7x7 outputs up, including 1024 channels at 7x7 where its filters are 64 MiB. It lost
// on small planes (4x4: 0.75-0.82x; 16 channels at 8x8: 0.87-0.92x), where the transforms cost
// as much as the products they save, and gained little with 16 channels at 112x112
// (1.06-1.11x). F(4x4, 3x3) took another 1.26-1.50x off F(2x2, 3x3) from 28x28 outputs up
// (16-256 channels; 1.06-1.15x at 112x112 with 32-64 channels), 2x off im2col with 16 channels
// at 112x112, but lost below (14x14: 0.64-1.11x, 7x7: 0.46-0.58x), where a 4-wide tile row
// fills few vector lanes. Its filters take 4x the weights' memory (F(2x2, 3x3): 16/9x), so it
// is kept to layers of at most 256 x 256 channels.
// Where 512-bit FMAs run as two halves (vec::fma512HalfWidth: Zen 4) the products bound the
// 14x14 maps too, and F(4x4, 3x3)'s 25% fewer of them (16 padded tiles of 36 against 49 of 16)
// outweigh its costlier transforms from 256 channels on both sides: 256 -> 256 at 14x14 (ResNet's
// layer3) 1.17-1.19 against 1.38-1.39 ms warm, 1.26 against 1.43 from memory; 512 -> 512 4.05-
// 4.16 against 5.20-5.46 (over the memory cap); level at 192 and 128 (0.87 against 0.86, 0.41
// against 0.40), slower at 96 and 64 (bench_gemm --only conv3x3 / conv-cold, one thread).
int winogradTile(int64_t C, int64_t M, int64_t OH, int64_t OW) {
  if (C >= 16 && M >= 16 && OH >= 28 && OW >= 28 && C * M <= 256 * 256) return 4;
  if (C >= 256 && M >= 256 && OH >= 14 && OW >= 14 && C * M <= 256 * 256 &&
      vec::fma512HalfWidth()) {
    return 4;
  }
  if (C >= 32 && M >= 32 && OH >= 7 && OW >= 7) return 2;
  return 0;
}

bool winogradPays(int64_t C, int64_t M, int64_t OH, int64_t OW) {
  return winogradTile(C, M, OH, OW) != 0;
}

namespace {

template <int TM>
std::vector<PackedMatrix> packFilters(const float* w, int64_t M, int64_t C) {
  using T = WinogradMatrices<TM>;
  constexpr int N = T::n;
  const int64_t plane = M * C;
  std::vector<float> u(static_cast<size_t>(N * N * plane));
  // G g G^T in double, rounded once.
  for (int64_t mc = 0; mc < plane; ++mc) {
    const float* g = w + mc * 9;
    double t[N][3];
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < 3; ++j) {
        t[i][j] = T::g[i][0] * g[j] + T::g[i][1] * g[3 + j] + T::g[i][2] * g[6 + j];
      }
    }
    for (int i = 0; i < N; ++i) {
      for (int k = 0; k < N; ++k) {
        const double uik = t[i][0] * T::g[k][0] + t[i][1] * T::g[k][1] + t[i][2] * T::g[k][2];
        u[static_cast<size_t>((i * N + k) * plane + mc)] = static_cast<float>(uik);
      }
    }
  }
  std::vector<PackedMatrix> parts;
  parts.reserve(N * N);
  for (int64_t e = 0; e < N * N; ++e) {
    parts.push_back(packGemmA(M, C, u.data() + e * plane, C, 1));
    parts.back().source = nullptr;  // u ends with this call
  }
  return parts;
}

}  // namespace

std::vector<PackedMatrix> packWinogradFilters(const float* w, int64_t M, int64_t C, int tile) {
  if (tile == 4) return packFilters<4>(w, M, C);
  if (tile == 2) return packFilters<2>(w, M, C);
  throw std::logic_error("packWinogradFilters: tile must be 2 or 4");
}

void convWinograd3x3(const float* x, float* y, const Winograd3x3Shape& s, const Epilogue& ep_in,
                     const std::vector<PackedMatrix>& filters, int threads) {
  const int TM = filters.size() == 36 ? 4 : filters.size() == 16 ? 2 : 0;
  if (!TM || !packedForCurrentKernel(filters[0])) {
    throw std::logic_error("convWinograd3x3: filters not packed by packWinogradFilters for the "
                           "GEMM kernel in use");
  }
  const int64_t E = static_cast<int64_t>(filters.size());  // products per tile: (TM + 2)^2
  const int64_t C = s.C, M = s.M, OH = s.OH, OW = s.OW, P = OH * OW;
  if (s.N <= 0 || M <= 0 || P <= 0) return;
  const int64_t TH = (OH + TM - 1) / TM, TW = (OW + TM - 1) / TM;
  Epilogue ep = ep_in;
  ep.bias_per_row = true;
  ep.ld_residual = P;
  // Each chunk streams all of U (E x M x C) again: where U outgrows the L2, let a chunk's V
  // and products grow as large as U, so that the repeated filter traffic never exceeds theirs.
  const int64_t chunk_floats = std::max(kChunkFloats, E * M * C);
  const int64_t rows_per_chunk = std::clamp<int64_t>(chunk_floats / (E * (C + M) * TW), 1, TH);
  const int64_t max_tiles = rows_per_chunk * TW;
  thread_local std::vector<float> v_buffer, m_buffer;
  float* V = growScratch(v_buffer, E * C * max_tiles);
  float* Mo = growScratch(m_buffer, E * M * max_tiles);
  const Transforms tf = transforms(TM);
  const int64_t row_floats = transformRowFloats(TM, TW);

  for (int64_t n = 0; n < s.N; ++n) {
    const float* xn = x + n * C * s.H * s.W;
    float* yn = y + n * M * P;
    Epilogue en = ep;
    en.residual = ep.residual ? ep.residual + n * M * P : nullptr;
    for (int64_t ty0 = 0; ty0 < TH; ty0 += rows_per_chunk) {
      const int64_t ty1 = std::min(TH, ty0 + rows_per_chunk), tiles = (ty1 - ty0) * TW;
      parallelFor(C, threads, 4, [&](int64_t c0, int64_t c1) {
        thread_local std::vector<float> rows;
        float* r = growScratch(rows, 2 * (TM + 2) * row_floats);
        for (int64_t c = c0; c < c1; ++c) {
          tf.input(xn + c * s.H * s.W, s.H, s.W, s.pad_top, s.pad_left, TW, ty0, ty1,
                   V + c * tiles, C * tiles, r);
        }
      });
      parallelFor(E, threads, 1, [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) {
          GemmParams p = gemmParams(M, tiles, C, nullptr, C, false, V + e * C * tiles, tiles,
                                    false, Mo + e * M * tiles, tiles);
          p.packed_a = &filters[static_cast<size_t>(e)];
          if (e + 1 < e1) p.next_packed_a = &filters[static_cast<size_t>(e + 1)];
          gemm(p, 1);
        }
      });
      parallelFor(M, threads, 4, [&](int64_t m0, int64_t m1) {
        thread_local std::vector<float> rows;
        float* r = growScratch(rows, TM * row_floats);
        for (int64_t oc = m0; oc < m1; ++oc) {
          tf.output(Mo + oc * tiles, M * tiles, TW, ty0, ty1, OH, OW, yn + oc * P, r, en, oc);
        }
      });
    }
  }
}

}  // namespace fusectl::kernels::cpu
