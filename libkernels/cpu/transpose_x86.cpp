// Transposition of 4-byte elements in 16 x 16 register tiles, for stridedCopy's transposition
// branch (broadcast.h): Transpose's kernel, and every strided view whose source is contiguous
// along one dim and whose destination along another. The scalar 32 x 32 block loop it replaces
// read one element per load. wav2vec 2.0's layer-norm extractor transposes [512, T] floats both
// ways around each norm: in the model the [512, 3199] one 3.0-3.3 -> 2.6-2.8 ms, its way back
// 1.65 -> 1.1, the [512, 1599] way back 0.83 -> under 0.65; alone 1.26 -> 0.87 ms; NCHW -> NHWC
// of [2, 64, 56, 56] 0.28 -> 0.18 ms (one thread, minima, against 1c2f996). Source rows outer:
// walking the destination's rows instead (16 write streams) measured 1.5-2x slower in the model.
// Moves and shuffles only: the bits of every element (NaN payloads included) are copied.
#include "broadcast.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::kutil {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

using cpu::firstLanes;
using cpu::loadTransposed;

FUSECTL_AVX512 void transposeTiles(const float* src, int64_t m, int64_t n, int64_t sl, float* dst,
                                   int64_t dj) {
  // 16 source rows at a time, read front to back; their tiles stored down the columns.
  __m512 r[16];
  for (int64_t lb = 0; lb < n; lb += 16) {
    const int64_t rows = std::min<int64_t>(16, n - lb);  // source rows: l
    const __mmask16 store_mask = firstLanes(rows);
    for (int64_t jb = 0; jb < m; jb += 16) {
      // r[i] = the 16 j's of source row lb + i; transposed, r[k] = the l's of column jb + k.
      loadTransposed(r, src + lb * sl, sl, rows, jb, m);
      const int64_t cols = std::min<int64_t>(16, m - jb);
      float* o = dst + jb * dj + lb;
      for (int64_t k = 0; k < cols; ++k) _mm512_mask_storeu_ps(o + k * dj, store_mask, r[k]);
    }
  }
}

}  // namespace

bool transpose4ByteTiles(const void* src, int64_t m, int64_t n, int64_t sl, void* dst,
                         int64_t dj) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f") &&
                                 __builtin_cpu_supports("avx512dq") &&
                                 __builtin_cpu_supports("avx512vl") &&
                                 __builtin_cpu_supports("avx512bw");
  if (!has_avx512 || m < 16 || n < 16) return false;
  transposeTiles(static_cast<const float*>(src), m, n, sl, static_cast<float*>(dst), dj);
  return true;
}
#else
bool transpose4ByteTiles(const void*, int64_t, int64_t, int64_t, void*, int64_t) { return false; }
#endif

}  // namespace fusectl::kernels::kutil
