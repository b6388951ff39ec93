// Packed, cache-blocked float GEMM with a 6x16 register-tiled micro-kernel (see gemm_micro.h).
#include "gemm_micro.h"
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FUSECTL_GEMM_X86 1
#endif

namespace fusectl::kernels::cpu {
namespace {

constexpr int64_t MR = 6;
constexpr int64_t NR = 16;
constexpr int64_t KC = 256;   // A panel (6 x KC) + B panel (KC x 16) stay in L1
constexpr int64_t MC = 144;   // packed A block (MC x KC) stays in L2
constexpr int64_t NC = 2048;  // packed B block (KC x NC) stays in L3

// The micro-kernel computes a full MR x NR tile of acc = sum_k a[k][0..MR) * b[k][0..NR) from
// packed panels, then c = acc (+ c when load_c). alpha was folded into the A pack.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             bool load_c);

typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, v4f v) { std::memcpy(p, &v, sizeof v); }

// Portable kernel: 4-wide vectors (SSE2 on x86-64), the 16 columns done as two 6x8 halves so
// that the 12 accumulators, 2 B vectors and 1 broadcast fit in 16 registers.
void microKernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                         bool load_c) {
  for (int half = 0; half < 2; ++half) {
    const float* bp = b + half * 8;
    v4f c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {};
    v4f c30 = {}, c31 = {}, c40 = {}, c41 = {}, c50 = {}, c51 = {};
    const float* ap = a;
    for (int64_t k = 0; k < kc; ++k) {
      const v4f b0 = load4(bp);
      const v4f b1 = load4(bp + 4);
      v4f av;
      av = v4f{} + ap[0]; c00 += av * b0; c01 += av * b1;
      av = v4f{} + ap[1]; c10 += av * b0; c11 += av * b1;
      av = v4f{} + ap[2]; c20 += av * b0; c21 += av * b1;
      av = v4f{} + ap[3]; c30 += av * b0; c31 += av * b1;
      av = v4f{} + ap[4]; c40 += av * b0; c41 += av * b1;
      av = v4f{} + ap[5]; c50 += av * b0; c51 += av * b1;
      ap += MR;
      bp += NR;
    }
    const v4f acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                            {c30, c31}, {c40, c41}, {c50, c51}};
    for (int64_t i = 0; i < MR; ++i) {
      float* row = c + i * ldc + half * 8;
      if (load_c) {
        store4(row, load4(row) + acc[i][0]);
        store4(row + 4, load4(row + 4) + acc[i][1]);
      } else {
        store4(row, acc[i][0]);
        store4(row + 4, acc[i][1]);
      }
    }
  }
}

#ifdef FUSECTL_GEMM_X86
// AVX2+FMA kernel: 12 ymm accumulators hold the whole 6x16 tile.
__attribute__((target("avx2,fma"))) void microKernelAvx2(int64_t kc, const float* a,
                                                         const float* b, float* c, int64_t ldc,
                                                         bool load_c) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    __m256 av;
    av = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
    a += MR;
    b += NR;
  }
  const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t i = 0; i < MR; ++i) {
    float* row = c + i * ldc;
    if (load_c) {
      _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), acc[i][0]));
      _mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), acc[i][1]));
    } else {
      _mm256_storeu_ps(row, acc[i][0]);
      _mm256_storeu_ps(row + 8, acc[i][1]);
    }
  }
}
#endif

std::atomic<bool> g_force_portable{false};

MicroKernel pickKernel() {
#ifdef FUSECTL_GEMM_X86
  static const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (has_avx2 && !g_force_portable.load(std::memory_order_relaxed)) return microKernelAvx2;
#endif
  return microKernelPortable;
}

// Packs rows [0, mc) x depth [0, kc) of A (already offset) into MR-tall panels, k-major inside a
// panel, scaled by alpha; rows past mc are zero.
void packA(int64_t mc, int64_t kc, const float* A, int64_t rs, int64_t cs, float alpha,
           float* out) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int64_t mr = std::min(MR, mc - i0);
    if (mr == MR && rs == 1) {  // transposed A: the MR values of one k are contiguous
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = A + i0 + k * cs;
        for (int64_t r = 0; r < MR; ++r) out[r] = alpha * src[r];
        out += MR;
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + i0 * rs + k * cs;
      int64_t r = 0;
      for (; r < mr; ++r) out[r] = alpha * src[r * rs];
      for (; r < MR; ++r) out[r] = 0.f;
      out += MR;
    }
  }
}

// Packs depth [0, kc) x columns [0, nc) of B into NR-wide panels, k-major inside a panel;
// columns past nc are zero.
void packB(int64_t kc, int64_t nc, const float* B, int64_t rs, int64_t cs, float* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int64_t nr = std::min(NR, nc - j0);
    if (nr == NR && cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(out, B + k * rs + j0, NR * sizeof(float));
        out += NR;
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + k * rs + j0 * cs;
      int64_t j = 0;
      for (; j < nr; ++j) out[j] = src[j * cs];
      for (; j < NR; ++j) out[j] = 0.f;
      out += NR;
    }
  }
}

struct PackBuffers {
  std::vector<float> a, b;
};

void gemmSerial(const GemmParams& p, MicroKernel kernel) {
  const int64_t M = p.M, N = p.N, K = p.K;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty sum: C = 0 (or unchanged), then the epilogue
    for (int64_t i = 0; i < M; ++i) {
      if (!p.accumulate) std::fill(p.C + i * p.ldc, p.C + i * p.ldc + N, 0.f);
    }
    if (p.epilogue && !p.epilogue->empty()) {
      p.epilogue->apply(p.C, p.ldc, p.epilogue_row0, p.epilogue_col0, M, N);
    }
    return;
  }
  thread_local PackBuffers buffers;
  const int64_t kc_max = std::min(K, KC);
  const int64_t mc_max = std::min((M + MR - 1) / MR * MR, MC);
  const int64_t nc_max = std::min((N + NR - 1) / NR * NR, NC);
  if (buffers.a.size() < static_cast<size_t>(mc_max * kc_max)) buffers.a.resize(mc_max * kc_max);
  if (buffers.b.size() < static_cast<size_t>(kc_max * nc_max)) buffers.b.resize(kc_max * nc_max);
  float* pa = buffers.a.data();
  float* pb = buffers.b.data();
  const bool has_epilogue = p.epilogue && !p.epilogue->empty();
  alignas(64) float tile[MR * NR];

  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool load_c = p.accumulate || pc > 0;
      const bool last_k = pc + kc == K;
      packB(kc, nc, p.B + pc * p.b_rs + jc * p.b_cs, p.b_rs, p.b_cs, pb);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        packA(mc, kc, p.A + ic * p.a_rs + pc * p.a_cs, p.a_rs, p.a_cs, p.alpha, pa);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min(NR, nc - jr);
          const float* bpanel = pb + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min(MR, mc - ir);
            const int64_t row = ic + ir, col = jc + jr;
            float* c = p.C + row * p.ldc + col;
            if (mr == MR && nr == NR) {
              kernel(kc, pa + ir * kc, bpanel, c, p.ldc, load_c);
            } else {
              kernel(kc, pa + ir * kc, bpanel, tile, NR, false);
              for (int64_t i = 0; i < mr; ++i) {
                float* dst = c + i * p.ldc;
                const float* src = tile + i * NR;
                if (load_c) {
                  for (int64_t j = 0; j < nr; ++j) dst[j] += src[j];
                } else {
                  for (int64_t j = 0; j < nr; ++j) dst[j] = src[j];
                }
              }
            }
            if (last_k && has_epilogue) {
              p.epilogue->apply(c, p.ldc, p.epilogue_row0 + row, p.epilogue_col0 + col, mr, nr);
            }
          }
        }
      }
    }
  }
}

}  // namespace

GemmParams gemmParams(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a,
                      const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc) {
  GemmParams p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.A = A;
  p.a_rs = trans_a ? 1 : lda;
  p.a_cs = trans_a ? lda : 1;
  p.B = B;
  p.b_rs = trans_b ? 1 : ldb;
  p.b_cs = trans_b ? ldb : 1;
  p.C = C;
  p.ldc = ldc;
  return p;
}

void gemmForcePortableKernel(bool force) { g_force_portable.store(force); }

const char* gemmKernelName() {
#ifdef FUSECTL_GEMM_X86
  if (pickKernel() == microKernelAvx2) return "avx2-fma";
#endif
  return "portable";
}

void gemm(const GemmParams& p, int num_threads) {
  const MicroKernel kernel = pickKernel();
  // A thread costs tens of microseconds to start: give each at least ~4 MFLOP of work.
  const double flops = 2.0 * static_cast<double>(p.M) * p.N * std::max<int64_t>(p.K, 1);
  int threads = std::max(1, num_threads);
  threads = static_cast<int>(std::min<double>(threads, std::max(1.0, flops / 4e6)));
  const bool split_cols = p.N >= p.M;
  const int64_t extent = split_cols ? p.N : p.M;
  const int64_t unit = split_cols ? NR : MR;
  threads = static_cast<int>(std::min<int64_t>(threads, (extent + unit - 1) / unit));
  if (threads <= 1) {
    gemmSerial(p, kernel);
    return;
  }
  // Static partition in whole tiles: slice t covers units [t*units/T, (t+1)*units/T).
  const int64_t units = (extent + unit - 1) / unit;
  auto slice = [&](int t) {
    const int64_t begin = units * t / threads * unit;
    const int64_t end = std::min(extent, units * (t + 1) / threads * unit);
    if (begin >= end) return;
    GemmParams q = p;
    if (split_cols) {
      q.N = end - begin;
      q.B = p.B + begin * p.b_cs;
      q.C = p.C + begin;
      q.epilogue_col0 = p.epilogue_col0 + begin;
    } else {
      q.M = end - begin;
      q.A = p.A + begin * p.a_rs;
      q.C = p.C + begin * p.ldc;
      q.epilogue_row0 = p.epilogue_row0 + begin;
    }
    gemmSerial(q, kernel);
  };
  runOnWorkers(threads, slice);
}

namespace {

// Rows [m0, m1) of the integer GEMM; 16-column strips keep the accumulators in registers and
// give the compiler fixed-trip inner loops it vectorizes at -O2.
void gemmS32Rows(int64_t m0, int64_t m1, int64_t N, int64_t K, const int32_t* A, int64_t lda,
                 const int32_t* B, int64_t ldb, int32_t* C, int64_t ldc, bool accumulate) {
  constexpr int64_t W = 16;
  for (int64_t i = m0; i < m1; ++i) {
    const int32_t* a = A + i * lda;
    int32_t* c = C + i * ldc;
    int64_t j0 = 0;
    for (; j0 + W <= N; j0 += W) {
      int32_t acc[W];
      for (int64_t j = 0; j < W; ++j) acc[j] = accumulate ? c[j0 + j] : 0;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t av = a[k];
        const int32_t* b = B + k * ldb + j0;
        for (int64_t j = 0; j < W; ++j) acc[j] += av * b[j];
      }
      for (int64_t j = 0; j < W; ++j) c[j0 + j] = acc[j];
    }
    for (int64_t j = j0; j < N; ++j) {
      int32_t acc = accumulate ? c[j] : 0;
      for (int64_t k = 0; k < K; ++k) acc += a[k] * B[k * ldb + j];
      c[j] = acc;
    }
  }
}

}  // namespace

void gemmS32(int64_t M, int64_t N, int64_t K, const int32_t* A, int64_t lda, const int32_t* B,
             int64_t ldb, int32_t* C, int64_t ldc, bool accumulate, int num_threads) {
  const double ops = 2.0 * static_cast<double>(M) * N * std::max<int64_t>(K, 1);
  int threads = static_cast<int>(std::min<double>(std::max(1, num_threads),
                                                  std::max(1.0, ops / 4e6)));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(M, 1)));
  if (threads <= 1) {
    gemmS32Rows(0, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    return;
  }
  runOnWorkers(threads, [&](int t) {
    gemmS32Rows(M * t / threads, M * (t + 1) / threads, N, K, A, lda, B, ldb, C, ldc, accumulate);
  });
}

}  // namespace fusectl::kernels::cpu
