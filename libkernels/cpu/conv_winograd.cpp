// Winograd F(2x2, 3x3) convolution (see conv_winograd.h).
#include "conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string_view>

#include "compute_common.h"
#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::cpu {
namespace {

std::atomic<ConvAlgorithm> g_algorithm{ConvAlgorithm::Auto};

constexpr int64_t kTransformed = 16;  // values per tile after the transforms (4x4)

// A chunk of tile rows is transformed, multiplied and transformed back before the next one, so
// that V (16 x C x tiles) and the products (16 x M x tiles) are still cached when the next phase
// reads them: together about this many floats, 4 MiB. Measured (bench_gemm --only conv3x3, one
// thread, best of three alternating runs) against 1 MiB, the L2 here, whose smaller GEMMs were
// up to 11% slower (64 -> 256 channels at 28x28), and 16 MiB, up to 23% slower (64 channels
// at 112x112).
constexpr int64_t kChunkFloats = int64_t{1} << 20;

float* grow(std::vector<float>& buffer, int64_t floats) {
  if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

// Floats per scratch row of the input transform: the padded row (2 * TW + 2) and slack for the
// whole-vector reads past its end.
int64_t transformRowFloats(int64_t TW) { return (2 * TW + 2 + 34 + 15) / 16 * 16; }

// V = B^T d B for the tiles of rows [ty0, ty1) of one input channel `xc` (H x W), written to
// V_e[c][t] at v + e * plane + t (t counts the chunk's tiles row by row). `rows` holds 8 rows
// of transformRowFloats(TW): the four zero-padded input rows under a tile row, then B^T d of
// them.
// The loops run over whole rows with unit or stride-2 access, which the compiler vectorizes.
inline __attribute__((always_inline)) void inputTransformBody(
    const float* xc, int64_t H, int64_t W, int64_t pad_top, int64_t pad_left, int64_t TW,
    int64_t ty0, int64_t ty1, float* v, int64_t plane, float* rows) {
  const int64_t Wp = 2 * TW + 2, stride = transformRowFloats(TW);
  float* p[4];
  float* t[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = rows + i * stride;
    t[i] = rows + (4 + i) * stride;
  }
  // Padded column q holds input column q - pad_left.
  const int64_t q0 = std::min(pad_left, Wp), q1 = std::max(q0, std::min(pad_left + W, Wp));
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    for (int i = 0; i < 4; ++i) {
      const int64_t ih = 2 * ty - pad_top + i;
      float* __restrict pr = p[i];
      if (ih < 0 || ih >= H) {
        std::fill(pr, pr + Wp, 0.f);
        continue;
      }
      std::fill(pr, pr + q0, 0.f);
      std::copy(xc + ih * W + (q0 - pad_left), xc + ih * W + (q1 - pad_left), pr + q0);
      std::fill(pr + q1, pr + Wp, 0.f);
    }
    {
      const float* __restrict d0 = p[0];
      const float* __restrict d1 = p[1];
      const float* __restrict d2 = p[2];
      const float* __restrict d3 = p[3];
      float* __restrict t0 = t[0];
      float* __restrict t1 = t[1];
      float* __restrict t2 = t[2];
      float* __restrict t3 = t[3];
      for (int64_t q = 0; q < Wp; ++q) {
        t0[q] = d0[q] - d2[q];
        t1[q] = d1[q] + d2[q];
        t2[q] = d2[q] - d1[q];
        t3[q] = d1[q] - d3[q];
      }
    }
    const int64_t base = (ty - ty0) * TW;
    for (int i = 0; i < 4; ++i) {
      const float* __restrict r = t[i];
      float* __restrict v0 = v + (i * 4 + 0) * plane + base;
      float* __restrict v1 = v + (i * 4 + 1) * plane + base;
      float* __restrict v2 = v + (i * 4 + 2) * plane + base;
      float* __restrict v3 = v + (i * 4 + 3) * plane + base;
      for (int64_t tx = 0; tx < TW; ++tx) {
        const float a = r[2 * tx], b = r[2 * tx + 1], c = r[2 * tx + 2], d = r[2 * tx + 3];
        v0[tx] = a - c;
        v1[tx] = b + c;
        v2[tx] = c - b;
        v3[tx] = b - d;
      }
    }
  }
}

// Y = A^T m A for the tiles of rows [ty0, ty1) of one output channel: m_e at mo + e * plane,
// the output plane (OH x OW) at yo. Each tile row gives two output rows, built in `rows`
// (2 x 2 * TW floats), copied out without the columns past OW, then the epilogue is applied to
// them while they are in L1.
inline __attribute__((always_inline)) void outputTransformBody(
    const float* mo, int64_t plane, int64_t TW, int64_t ty0, int64_t ty1, int64_t OH, int64_t OW,
    float* yo, float* rows, const Epilogue& ep, int64_t oc) {
  float* __restrict r0 = rows;
  float* __restrict r1 = rows + 2 * TW;
  const int64_t P = OH * OW;
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    const float* m[kTransformed];
    for (int64_t e = 0; e < kTransformed; ++e) m[e] = mo + e * plane + (ty - ty0) * TW;
    for (int64_t tx = 0; tx < TW; ++tx) {
      float s0[4], s1[4];
      for (int j = 0; j < 4; ++j) {
        s0[j] = m[j][tx] + m[4 + j][tx] + m[8 + j][tx];
        s1[j] = m[4 + j][tx] - m[8 + j][tx] - m[12 + j][tx];
      }
      r0[2 * tx] = s0[0] + s0[1] + s0[2];
      r0[2 * tx + 1] = s0[1] - s0[2] - s0[3];
      r1[2 * tx] = s1[0] + s1[1] + s1[2];
      r1[2 * tx + 1] = s1[1] - s1[2] - s1[3];
    }
    for (int64_t dy = 0; dy < 2; ++dy) {
      const int64_t oh = 2 * ty + dy;
      if (oh >= OH) break;
      float* out = yo + oh * OW;
      std::copy(dy ? r1 : r0, (dy ? r1 : r0) + OW, out);
      if (!ep.empty()) ep.apply(out, P, oc, oh * OW, 1, OW);
    }
  }
}

void inputTransformPortable(const float* xc, int64_t H, int64_t W, int64_t pad_top,
                            int64_t pad_left, int64_t TW, int64_t ty0, int64_t ty1, float* v,
                            int64_t plane, float* rows) {
  inputTransformBody(xc, H, W, pad_top, pad_left, TW, ty0, ty1, v, plane, rows);
}

void outputTransformPortable(const float* mo, int64_t plane, int64_t TW, int64_t ty0,
                             int64_t ty1, int64_t OH, int64_t OW, float* yo, float* rows,
                             const Epilogue& ep, int64_t oc) {
  outputTransformBody(mo, plane, TW, ty0, ty1, OH, OW, yo, rows, ep, oc);
}

#ifdef FUSECTL_AVX512
// The transforms with 16 tiles per vector. Stride-2 reads are two loads and a permute that keeps
// the even (or odd) lanes; the two output columns of a tile are interleaved back the same way.
// The output side applies the epilogue in registers and stores straight into Y.

inline __mmask16 firstLanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

FUSECTL_AVX512 void inputTransformAvx512(const float* xc, int64_t H, int64_t W, int64_t pad_top,
                                         int64_t pad_left, int64_t TW, int64_t ty0, int64_t ty1,
                                         float* v, int64_t plane, float* rows) {
  const int64_t Wp = 2 * TW + 2, stride = transformRowFloats(TW);
  float* p[4];
  float* t[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = rows + i * stride;
    t[i] = rows + (4 + i) * stride;
  }
  const int64_t q0 = std::min(pad_left, Wp), q1 = std::max(q0, std::min(pad_left + W, Wp));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t ty = ty0; ty < ty1; ++ty) {
    for (int i = 0; i < 4; ++i) {
      const int64_t ih = 2 * ty - pad_top + i;
      float* pr = p[i];
      if (ih < 0 || ih >= H) {
        std::fill(pr, pr + Wp, 0.f);
        continue;
      }
      std::fill(pr, pr + q0, 0.f);
      std::copy(xc + ih * W + (q0 - pad_left), xc + ih * W + (q1 - pad_left), pr + q0);
      std::fill(pr + q1, pr + Wp, 0.f);
    }
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
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
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
        __m512 v_lo = _mm512_permutex2var_ps(y[dy][0], lo, y[dy][1]);
        __m512 v_hi = _mm512_permutex2var_ps(y[dy][0], hi, y[dy][1]);
        if (ep.bias) {
          v_lo = _mm512_add_ps(v_lo, bias);
          v_hi = _mm512_add_ps(v_hi, bias);
        }
        if (residual) {
          const float* z = residual + oh * OW + col;
          v_lo = _mm512_add_ps(v_lo, _mm512_maskz_loadu_ps(m_lo, z));
          v_hi = _mm512_add_ps(v_hi, _mm512_maskz_loadu_ps(m_hi, z + 16));
        }
        if (act != Activation::None) {
          v_lo = activate512(v_lo, act, ep.alpha, ep.beta);
          v_hi = activate512(v_hi, act, ep.alpha, ep.beta);
        }
        float* out = yo + oh * OW + col;
        _mm512_mask_storeu_ps(out, m_lo, v_lo);
        _mm512_mask_storeu_ps(out + 16, m_hi, v_hi);
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
Transforms transforms() {
#ifdef FUSECTL_AVX512
  if (std::string_view(gemmKernelName()) == "avx512") {
    return {inputTransformAvx512, outputTransformAvx512};
  }
#endif
  return {inputTransformPortable, outputTransformPortable};
}

}  // namespace

void convForceAlgorithm(ConvAlgorithm algorithm) { g_algorithm.store(algorithm); }

ConvAlgorithm convForcedAlgorithm() { return g_algorithm.load(); }

// Measured with bench_gemm --only conv3x3 (1 and 2 threads, AVX-512, best of three alternating
// runs; bench/README.md): Winograd took 1.4-2.4x less time from 32 channels in and out and
// 7x7 outputs up, including 1024 channels at 7x7 where its filters are 64 MiB. It lost on
// small planes (4x4: 0.75-0.82x; 16 channels at 8x8: 0.87-0.92x), where the transforms cost as
// much as the products they save, and gained little with 16 channels at 112x112 (1.06-1.11x).
bool winogradPays(int64_t C, int64_t M, int64_t OH, int64_t OW) {
  return C >= 32 && M >= 32 && OH >= 7 && OW >= 7;
}

std::vector<PackedMatrix> packWinogradFilters(const float* w, int64_t M, int64_t C) {
  const int64_t plane = M * C;
  std::vector<float> u(static_cast<size_t>(kTransformed * plane));
  // G g G^T in double, rounded once: G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1].
  for (int64_t mc = 0; mc < plane; ++mc) {
    const float* g = w + mc * 9;
    double t[4][3];
    for (int j = 0; j < 3; ++j) {
      const double g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
      t[0][j] = g0;
      t[1][j] = 0.5 * (g0 + g1 + g2);
      t[2][j] = 0.5 * (g0 - g1 + g2);
      t[3][j] = g2;
    }
    for (int i = 0; i < 4; ++i) {
      float* ui = u.data() + i * 4 * plane + mc;
      ui[0 * plane] = static_cast<float>(t[i][0]);
      ui[1 * plane] = static_cast<float>(0.5 * (t[i][0] + t[i][1] + t[i][2]));
      ui[2 * plane] = static_cast<float>(0.5 * (t[i][0] - t[i][1] + t[i][2]));
      ui[3 * plane] = static_cast<float>(t[i][2]);
    }
  }
  std::vector<PackedMatrix> parts;
  parts.reserve(kTransformed);
  for (int64_t e = 0; e < kTransformed; ++e) {
    parts.push_back(packGemmA(M, C, u.data() + e * plane, C, 1));
    parts.back().source = nullptr;  // u ends with this call
  }
  return parts;
}

void convWinograd3x3(const float* x, float* y, const Winograd3x3Shape& s, const Epilogue& ep_in,
                     const std::vector<PackedMatrix>& filters, int threads) {
  if (filters.size() != static_cast<size_t>(kTransformed) ||
      !packedForCurrentKernel(filters[0])) {
    throw std::logic_error("convWinograd3x3: filters not packed for the GEMM kernel in use");
  }
  const int64_t C = s.C, M = s.M, OH = s.OH, OW = s.OW, P = OH * OW;
  if (s.N <= 0 || M <= 0 || P <= 0) return;
  const int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2;
  Epilogue ep = ep_in;
  ep.bias_per_row = true;
  ep.ld_residual = P;
  // Each chunk streams all of U (16 x M x C) again: where U outgrows the L2, let a chunk's V
  // and products grow as large as U, so that the repeated filter traffic never exceeds theirs.
  const int64_t chunk_floats = std::max(kChunkFloats, kTransformed * M * C);
  const int64_t rows_per_chunk =
      std::clamp<int64_t>(chunk_floats / (kTransformed * (C + M) * TW), 1, TH);
  const int64_t max_tiles = rows_per_chunk * TW;
  thread_local std::vector<float> v_buffer, m_buffer;
  float* V = grow(v_buffer, kTransformed * C * max_tiles);
  float* Mo = grow(m_buffer, kTransformed * M * max_tiles);
  const Transforms tf = transforms();

  for (int64_t n = 0; n < s.N; ++n) {
    const float* xn = x + n * C * s.H * s.W;
    float* yn = y + n * M * P;
    Epilogue en = ep;
    en.residual = ep.residual ? ep.residual + n * M * P : nullptr;
    for (int64_t ty0 = 0; ty0 < TH; ty0 += rows_per_chunk) {
      const int64_t ty1 = std::min(TH, ty0 + rows_per_chunk), tiles = (ty1 - ty0) * TW;
      parallelFor(C, threads, 4, [&](int64_t c0, int64_t c1) {
        thread_local std::vector<float> rows;
        float* r = grow(rows, 8 * transformRowFloats(TW));
        for (int64_t c = c0; c < c1; ++c) {
          tf.input(xn + c * s.H * s.W, s.H, s.W, s.pad_top, s.pad_left, TW, ty0, ty1,
                   V + c * tiles, C * tiles, r);
        }
      });
      parallelFor(kTransformed, threads, 1, [&](int64_t e0, int64_t e1) {
        for (int64_t e = e0; e < e1; ++e) {
          GemmParams p = gemmParams(M, tiles, C, nullptr, C, false, V + e * C * tiles, tiles,
                                    false, Mo + e * M * tiles, tiles);
          p.packed_a = &filters[static_cast<size_t>(e)];
          gemm(p, 1);
        }
      });
      parallelFor(M, threads, 4, [&](int64_t m0, int64_t m1) {
        thread_local std::vector<float> rows;
        float* r = grow(rows, 4 * TW);
        for (int64_t oc = m0; oc < m1; ++oc) {
          tf.output(Mo + oc * tiles, M * tiles, TW, ty0, ty1, OH, OW, yn + oc * P, r, en, oc);
        }
      });
    }
  }
}

}  // namespace fusectl::kernels::cpu
