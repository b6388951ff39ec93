// AVX-512 (8x32) and AVX2+FMA (6x16) GEMM tile kernels: the whole tile accumulates in
// registers, then bias, residual and the activation are applied there before one masked store,
// so a fused Conv/Gemm touches its output once, exactly as the plain op does.
//
// Each kernel is a template on the tile's row count, so an edge tile (and the skinny M = 1..8
// case) runs only the FMAs of its real rows; columns past the edge are masked. Functions carry
// target attributes instead of the file being built with -mavx512f, so that nothing else in the
// binary (inline functions from headers included) can pick up instructions the CPU may lack.
#include <algorithm>

#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FUSECTL_GEMM_X86 1
#endif

namespace fusectl::kernels::cpu {

#ifdef FUSECTL_GEMM_X86
namespace {

// ---- AVX-512: 8 rows x 2 zmm (32 columns), 16 accumulators ----

constexpr int kMr512 = 8;
constexpr int kNr512 = 32;

// One k step of tile512's loop: a and b advance past it.
template <int ROWS, bool HALF, bool A_ROWS>
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void tileStep512(__m512 (&acc0)[ROWS], __m512 (&acc1)[ROWS],
                                                    const float*& a, int64_t as, const float*& b,
                                                    int64_t bs) {
  const __m512 b0 = _mm512_loadu_ps(b);
  if (HALF) {
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; ++r)
      acc0[r] = _mm512_fmadd_ps(_mm512_set1_ps(A_ROWS ? a[r * as] : a[r]), b0, acc0[r]);
  } else {
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; ++r) {
      const __m512 av = _mm512_set1_ps(A_ROWS ? a[r * as] : a[r]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
  a += A_ROWS ? 1 : kMr512;
  b += bs;
}

// HALF: the tile has at most 16 columns (a panel's ragged end: 196 = 6 x 32 + 4 output pixels,
// or N = 1), so only the first 16 are computed; the second accumulators stay zero and are
// stored under an empty mask.
// A_ROWS: A is read in place, row r's k at a[r * a_stride + k] (TileArgs::a_stride), not from
// a packed panel. Each instantiation starts on a 64-byte boundary: adding the A_ROWS ones moved
// the packed ones within their lines, and a 1x1 convolution of 16 input channels (16 k a tile,
// MobileNetV2's 112x112 expansion) ran 15% slower in the model for it, with the same code.
// RUNS: the k loop runs `every` steps between two prefetch requests with no bookkeeping inside
// them (TileArgs::prefetch_in_runs); otherwise each step counts down to the next request.
template <int ROWS, bool HALF, bool A_ROWS = false, bool RUNS = false>
FUSECTL_AVX512 __attribute__((aligned(64))) void tile512(const TileArgs& t) {
  __m512 acc0[ROWS], acc1[ROWS];
#pragma GCC unroll 8
  for (int r = 0; r < ROWS; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const TileEpilogue* ep = t.ep;
  // The output and residual rows are read only after the k loop: start fetching them now.
#pragma GCC unroll 8
  for (int r = 0; r < ROWS; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc + 16), _MM_HINT_T0);
    if (ep && ep->residual) {
      _mm_prefetch(reinterpret_cast<const char*>(ep->residual + r * ep->ld_residual), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ep->residual + r * ep->ld_residual + 16),
                   _MM_HINT_T0);
    }
  }
  const float* a = t.a;
  const int64_t as = t.a_stride;
  const float* b = t.b;
  const int64_t bs = t.b_stride;
  // One request every `every` k steps until the tile's share is asked for. Addresses as
  // integers: a row segment's last line may lie past the operand's end (a prefetch never
  // faults), where no pointer is to be formed.
  const uintptr_t pf = reinterpret_cast<uintptr_t>(t.prefetch);
  const int64_t pf_step = t.prefetch_stride ? t.prefetch_stride : 64;
  const int64_t every = t.prefetch_lines > 0 ? std::max<int64_t>(1, t.kc / t.prefetch_lines) : 0;
  if (RUNS) {
    int64_t k = 0;
    if (every > 0) {
      for (int64_t asked = 0; asked < t.prefetch_lines && k + every <= t.kc; ++asked) {
        for (int64_t i = 0; i < every; ++i)
          tileStep512<ROWS, HALF, A_ROWS>(acc0, acc1, a, as, b, bs);
        k += every;
        _mm_prefetch(reinterpret_cast<const char*>(pf + static_cast<uintptr_t>(asked * pf_step)),
                     _MM_HINT_T1);
      }
    }
    for (; k < t.kc; ++k) tileStep512<ROWS, HALF, A_ROWS>(acc0, acc1, a, as, b, bs);
  }
  int64_t asked = 0, countdown = every;
  for (int64_t k = 0; !RUNS && k < t.kc; ++k) {
    if (asked < t.prefetch_lines && --countdown == 0) {
      const uintptr_t at = pf + static_cast<uintptr_t>(asked * pf_step);
      _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
      if (t.prefetch_stride) {
        _mm_prefetch(reinterpret_cast<const char*>(at + 64), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(at + 127), _MM_HINT_T1);
      }
      ++asked;
      countdown = every;
    }
    tileStep512<ROWS, HALF, A_ROWS>(acc0, acc1, a, as, b, bs);
  }
  const int cols = t.cols;
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32   ? __mmask16(0xFFFF)
                       : cols <= 16 ? __mmask16(0)
                                    : __mmask16((1u << (cols - 16)) - 1);
  const Activation act = ep && ep->vector_activation ? ep->full->activation : Activation::None;
  const float alpha = ep ? ep->full->alpha : 0.f, beta = ep ? ep->full->beta : 0.f;
#pragma GCC unroll 8
  for (int r = 0; r < ROWS; ++r) {
    float* c = t.c + r * t.ldc;
    __m512 v0 = acc0[r], v1 = acc1[r];
    if (t.load_c) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    }
    if (ep) {
      if (ep->bias) {
        if (ep->bias_per_row) {
          const __m512 bb = _mm512_set1_ps(ep->bias[r]);
          v0 = _mm512_add_ps(v0, bb);
          v1 = _mm512_add_ps(v1, bb);
        } else {
          v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ep->bias));
          v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ep->bias + 16));
        }
      }
      if (ep->residual) {
        const float* z = ep->residual + r * ep->ld_residual;
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, z));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, z + 16));
      }
      if (act != Activation::None) {
        v0 = activate512(v0, act, alpha, beta);
        v1 = activate512(v1, act, alpha, beta);
      }
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
    if (ep && !ep->vector_activation) ep->full->activate(c, cols);
  }
}

template <bool HALF, bool A_ROWS = false, bool RUNS = false>
FUSECTL_AVX512 void tileAvx512Rows(const TileArgs& t) {
  switch (t.rows) {
    case 8: tile512<8, HALF, A_ROWS, RUNS>(t); break;
    case 7: tile512<7, HALF, A_ROWS, RUNS>(t); break;
    case 6: tile512<6, HALF, A_ROWS, RUNS>(t); break;
    case 5: tile512<5, HALF, A_ROWS, RUNS>(t); break;
    case 4: tile512<4, HALF, A_ROWS, RUNS>(t); break;
    case 3: tile512<3, HALF, A_ROWS, RUNS>(t); break;
    case 2: tile512<2, HALF, A_ROWS, RUNS>(t); break;
    default: tile512<1, HALF, A_ROWS, RUNS>(t); break;
  }
}

// A one-column tile (a matrix-vector product: N = 1, as in the 1x1 convolutions of a
// squeeze-and-excitation block, or a panel's last column): the A panel's 8 rows of one k are one
// vector, multiplied by that k's single B value. The 2-D tile would spend 8 broadcasts and 8
// FMAs per k on one useful lane each; this spends one load and one FMA, over four independent
// sums. Bias and residual are added per element; the activation runs on the tile's rows as one
// masked vector, with tile512's vector activations where it has them: a scalar exp per element
// took most of the time of EfficientNet-B0's squeeze-and-excitation gates (48 -> 1152 with
// Sigmoid: 10 us a node, bench/README.md).
FUSECTL_AVX512 void tileColumn512(const TileArgs& t) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  const float* a = t.a;
  const float* b = t.b;
  const int64_t bs = t.b_stride;
  int64_t k = 0;
  for (; k + 4 <= t.kc; k += 4) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + (k + j) * kMr512),
                               _mm256_set1_ps(b[(k + j) * bs]), acc[j]);
    }
  }
  for (; k < t.kc; ++k) {
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + k * kMr512), _mm256_set1_ps(b[k * bs]), acc[0]);
  }
  alignas(64) float sum[16] = {};
  _mm256_store_ps(sum, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  const TileEpilogue* ep = t.ep;
  for (int r = 0; r < t.rows; ++r) {
    float v = sum[r];
    if (t.load_c) v = t.c[r * t.ldc] + v;
    if (ep) {
      if (ep->bias) v += ep->bias_per_row ? ep->bias[r] : ep->bias[0];
      if (ep->residual) v += ep->residual[r * ep->ld_residual];
    }
    sum[r] = v;
  }
  if (ep && ep->vector_activation) {
    _mm512_store_ps(sum, activate512(_mm512_load_ps(sum), ep->full->activation, ep->full->alpha,
                                     ep->full->beta));
  } else if (ep) {
    ep->full->activate(sum, t.rows);
  }
  for (int r = 0; r < t.rows; ++r) t.c[r * t.ldc] = sum[r];
}

// A strip of 2-4 columns over every 8-row panel of a block (GemmKernelSpec::narrow_strip): a
// panel's 8 rows at one k are one vector, times each column's B value at that k, two panels at
// a time, so that 2 * COLS independent sums are in flight and the COLS broadcasts serve both.
// The 16-column tile would spend 8 broadcasts and 8 FMAs per k on COLS useful lanes each: in
// perf on ResNet-50's 1024 -> 256 1x1 convolution onto 14x14 (196 = 6 x 32 + 4 pixels) that
// edge tile took 8.5% of the time for 2% of the products. Each element is one FMA chain in k
// order, as in tile512, so results do not depend on where panel edges fall. Bias and residual
// are added per element; the activation runs on each stored row's COLS values as one masked
// vector, with tile512's vector activations where it has them (a scalar exp per element made
// EfficientNet-B0's Silu expansions onto 14x14 slower than the 16-column tile).
template <int COLS>
FUSECTL_AVX512 void stripNarrow512(const TileArgs& t) {
  const int64_t kc = t.kc, bs = t.b_stride;
  const TileEpilogue* ep = t.ep;
  const bool vector_act = ep && ep->vector_activation;
  const Activation act = vector_act ? ep->full->activation : Activation::None;
  const float alpha = ep ? ep->full->alpha : 0.f, beta = ep ? ep->full->beta : 0.f;
  const __mmask16 lanes = __mmask16((1u << COLS) - 1);
  for (int p0 = 0; p0 < t.rows; p0 += 2 * kMr512) {
    const int panels = t.rows - p0 > kMr512 ? 2 : 1;
    const float* a0 = t.a + static_cast<int64_t>(p0) * kc;
    const float* a1 = a0 + kMr512 * kc;
    __m256 acc0[COLS], acc1[COLS];
#pragma GCC unroll 4
    for (int j = 0; j < COLS; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    const float* b = t.b;
    if (panels == 2) {
      for (int64_t k = 0; k < kc; ++k, b += bs) {
        const __m256 x0 = _mm256_loadu_ps(a0 + k * kMr512);
        const __m256 x1 = _mm256_loadu_ps(a1 + k * kMr512);
#pragma GCC unroll 4
        for (int j = 0; j < COLS; ++j) {
          const __m256 bj = _mm256_set1_ps(b[j]);
          acc0[j] = _mm256_fmadd_ps(x0, bj, acc0[j]);
          acc1[j] = _mm256_fmadd_ps(x1, bj, acc1[j]);
        }
      }
    } else {
      for (int64_t k = 0; k < kc; ++k, b += bs) {
        const __m256 x0 = _mm256_loadu_ps(a0 + k * kMr512);
#pragma GCC unroll 4
        for (int j = 0; j < COLS; ++j)
          acc0[j] = _mm256_fmadd_ps(x0, _mm256_set1_ps(b[j]), acc0[j]);
      }
    }
    alignas(32) float sum[2][COLS][kMr512];
#pragma GCC unroll 4
    for (int j = 0; j < COLS; ++j) {
      _mm256_store_ps(sum[0][j], acc0[j]);
      _mm256_store_ps(sum[1][j], acc1[j]);
    }
    const int rows = std::min(t.rows - p0, 2 * kMr512);
    for (int i = 0; i < rows; ++i) {
      const int r = p0 + i;
      float* c = t.c + r * t.ldc;
      const float* s = &sum[i / kMr512][0][i % kMr512];
      for (int j = 0; j < COLS; ++j) {
        float v = s[j * kMr512];
        if (t.load_c) v = c[j] + v;
        if (ep) {
          if (ep->bias) v += ep->bias_per_row ? ep->bias[r] : ep->bias[j];
          if (ep->residual) v += ep->residual[r * ep->ld_residual + j];
        }
        c[j] = v;
      }
      if (act != Activation::None) {
        _mm512_mask_storeu_ps(c, lanes,
                              activate512(_mm512_maskz_loadu_ps(lanes, c), act, alpha, beta));
      } else if (ep && !vector_act) {
        ep->full->activate(c, COLS);
      }
    }
  }
}

FUSECTL_AVX512 void stripAvx512(const TileArgs& t) {
  switch (t.cols) {
    case 2: stripNarrow512<2>(t); break;
    case 3: stripNarrow512<3>(t); break;
    default: stripNarrow512<4>(t); break;
  }
}

// One 8-row A panel, 16 k at a time: the 8 x 16 block loaded as 8 row vectors is transposed
// in registers (transpose8x16) into 16 k-major columns of 8 rows, stored as 8 whole vectors.
// About a third of the shuffles of the portable 4x4 transposes, on whole cache lines
// (activations packed per call: BERT's MatMuls and its attention spent 2-3% of their run here).
FUSECTL_AVX512 int64_t packPanelAvx512(const float* A, int64_t rs, int64_t kc, float alpha,
                                       float* out) {
  static_assert(kMr512 == 8, "the transpose is written for 8-row panels");
  const __m512 scale = _mm512_set1_ps(alpha);
  int64_t k = 0;
  for (; k + 16 <= kc; k += 16) {
    __m512 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      r[i] = _mm512_loadu_ps(A + i * rs + k);
      if (alpha != 1.f) r[i] = _mm512_mul_ps(r[i], scale);
    }
    __m512 columns[8];
    transpose8x16(r, columns);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) _mm512_storeu_ps(out + k * 8 + j * 16, columns[j]);
  }
  return k;
}

// One 32-wide panel of a transposed B, 16 k at a time: each half's 16 columns x 16 k loaded as
// 16 column vectors and transposed in registers (transpose16x16) into 16 k-rows of 16.
FUSECTL_AVX512 int64_t packTransposedBPanelAvx512(const float* B, int64_t cs, int64_t kc, float,
                                                  float* out) {
  static_assert(kNr512 == 32, "the panel is two 16-column halves");
  int64_t k = 0;
  for (; k + 16 <= kc; k += 16) {
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(B + (half * 16 + j) * cs + k);
      transpose16x16(r);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + (k + i) * 32 + half * 16, r[i]);
    }
  }
  return k;
}

FUSECTL_AVX512 void tileAvx512(const TileArgs& t) {
  if (t.prefetch_in_runs && t.cols > 16 && !t.a_stride && !t.prefetch_stride) {
    tileAvx512Rows<false, false, true>(t);
  } else if (t.a_stride) {  // A read in place (GemmKernelSpec::a_rows_in_place)
    if (t.cols <= 16) tileAvx512Rows<true, true>(t);
    else tileAvx512Rows<false, true>(t);
  } else if (t.cols == 1) tileColumn512(t);
  else if (t.cols <= 16) tileAvx512Rows<true>(t);
  else tileAvx512Rows<false>(t);
}

// ---- AVX2 + FMA: 6 rows x 2 ymm (16 columns), 12 accumulators ----

constexpr int kMr256 = 6;

FUSECTL_AVX2 FUSECTL_FORCE_INLINE __m256 activate256(__m256 v, Activation act,
                                                     float alpha, float beta) {
  const __m256 zero = _mm256_setzero_ps();
  switch (act) {
    case Activation::Relu:
      return _mm256_max_ps(v, zero);
    case Activation::Clip:
      return _mm256_min_ps(_mm256_set1_ps(beta), _mm256_max_ps(_mm256_set1_ps(alpha), v));
    case Activation::LeakyRelu: {
      const __m256 neg = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), neg);
    }
    case Activation::HardSigmoid: {
      const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(alpha), v), _mm256_set1_ps(beta));
      return _mm256_min_ps(_mm256_set1_ps(1.f), _mm256_max_ps(zero, t));
    }
    case Activation::HardSwish: {
      const __m256 t =
          _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.f / 6.f)), _mm256_set1_ps(0.5f));
      return _mm256_mul_ps(v, _mm256_min_ps(_mm256_set1_ps(1.f), _mm256_max_ps(zero, t)));
    }
    default:
      return v;
  }
}

// Columns past the tile's edge are neither read nor written.
FUSECTL_AVX2 FUSECTL_FORCE_INLINE __m256 load256(const float* p, __m256i mask, bool full) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

template <int ROWS>
FUSECTL_AVX2 void tile256(const TileArgs& t) {
  __m256 acc0[ROWS], acc1[ROWS];
#pragma GCC unroll 8
  for (int r = 0; r < ROWS; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  const TileEpilogue* ep = t.ep;
#pragma GCC unroll 8
  for (int r = 0; r < ROWS; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc), _MM_HINT_T0);
    if (ep && ep->residual) {
      _mm_prefetch(reinterpret_cast<const char*>(ep->residual + r * ep->ld_residual), _MM_HINT_T0);
    }
  }
  const float* a = t.a;
  const float* b = t.b;
  const int64_t bs = t.b_stride;
  for (int64_t k = 0; k < t.kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
    a += kMr256;
    b += bs;
  }
  const int cols = t.cols;
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), iota);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), iota);
  const bool full = cols >= 16;
  const Activation act = ep && ep->vector_activation ? ep->full->activation : Activation::None;
  const float alpha = ep ? ep->full->alpha : 0.f, beta = ep ? ep->full->beta : 0.f;
#pragma GCC unroll 8
  for (int r = 0; r < ROWS; ++r) {
    float* c = t.c + r * t.ldc;
    __m256 v0 = acc0[r], v1 = acc1[r];
    if (t.load_c) {
      v0 = _mm256_add_ps(load256(c, m0, full), v0);
      v1 = _mm256_add_ps(load256(c + 8, m1, full), v1);
    }
    if (ep) {
      if (ep->bias) {
        if (ep->bias_per_row) {
          const __m256 bb = _mm256_set1_ps(ep->bias[r]);
          v0 = _mm256_add_ps(v0, bb);
          v1 = _mm256_add_ps(v1, bb);
        } else {
          v0 = _mm256_add_ps(v0, load256(ep->bias, m0, full));
          v1 = _mm256_add_ps(v1, load256(ep->bias + 8, m1, full));
        }
      }
      if (ep->residual) {
        const float* z = ep->residual + r * ep->ld_residual;
        v0 = _mm256_add_ps(v0, load256(z, m0, full));
        v1 = _mm256_add_ps(v1, load256(z + 8, m1, full));
      }
      if (act != Activation::None) {
        v0 = activate256(v0, act, alpha, beta);
        v1 = activate256(v1, act, alpha, beta);
      }
    }
    if (full) {
      _mm256_storeu_ps(c, v0);
      _mm256_storeu_ps(c + 8, v1);
    } else {
      _mm256_maskstore_ps(c, m0, v0);
      _mm256_maskstore_ps(c + 8, m1, v1);
    }
    if (ep && !ep->vector_activation) ep->full->activate(c, cols);
  }
}

FUSECTL_AVX2 void tileAvx2(const TileArgs& t) {
  switch (t.rows) {
    case 6: tile256<6>(t); break;
    case 5: tile256<5>(t); break;
    case 4: tile256<4>(t); break;
    case 3: tile256<3>(t); break;
    case 2: tile256<2>(t); break;
    default: tile256<1>(t); break;
  }
}

// Blocking for this machine class (L1d 48 KiB, L2 1 MiB): the MC x KC block of A stays in L2
// (384 KiB), the KC x NR panel of B is reused across the A panels of an MC block. Measured on
// 1024^3 (CPU-time medians, bench_gemm --clock cpu): KC 512 beat 192/256/384 by 5-15%, as C is
// loaded and stored half as often; the ResNet-50 conv shapes did not change beyond noise.
const GemmKernelSpec kAvx512Spec = {"avx512", kMr512,         kNr512, 512, 192,
                                    4096,     tileAvx512,     true,   true, true,
                                    packPanelAvx512, packTransposedBPanelAvx512, true,
                                    stripAvx512};
// 6 x 256 A panel + 256 x 16 B panel = 22 KiB in L1; 144 x 256 A block in L2.
const GemmKernelSpec kAvx2Spec = {"avx2-fma", kMr256, 16, 256, 144, 4096, tileAvx2, false, false,
                                  true};

}  // namespace

const GemmKernelSpec* avx512KernelSpec() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
  return ok ? &kAvx512Spec : nullptr;
}

const GemmKernelSpec* avx2KernelSpec() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok ? &kAvx2Spec : nullptr;
}

#else

const GemmKernelSpec* avx512KernelSpec() { return nullptr; }
const GemmKernelSpec* avx2KernelSpec() { return nullptr; }

#endif

}  // namespace fusectl::kernels::cpu
