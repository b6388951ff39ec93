// Direct pixels x channels convolution (see conv_direct.h).
#include "conv_direct.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "compute_common.h"
#include "gemm_kernels.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::cpu {
namespace {

constexpr int64_t kPixels = 8;     // register tile rows: output pixels
constexpr int64_t kChannels = 32;  // register tile columns: output channels (two vectors)
// Input channels per block: as many as make about kBlockDepth taps, so that the partial sums
// between blocks are loaded and stored rarely, while the block's padded input planes stay
// within half the L2 (the pixel tiles pass over them once per 32-channel panel), and at least
// 32. Measured on ResNet-50's stride-2 3x3 shapes (bench_gemm --only conv --conv-algorithm
// direct, 1 thread), 128, 256 and 512 channels: 32 channels a block 1.175 / 1.132 / 1.375 ms,
// 288 taps 1.143 / 1.155 / 1.305, 1024 taps 1.141 / 1.123 / 1.263. Inside ResNet-50 the
// 128-channel one at 1024 taps (1.5 MiB of planes a block) was no faster than the implicit
// im2col (1.40-1.49 against 1.44-1.47 ms), hence the L2 bound.
constexpr int64_t kBlockDepth = 1024;
constexpr int64_t kBlockPlaneFloats = int64_t{128} << 10;  // 512 KiB
int64_t blockChannels(int64_t taps, int64_t plane_floats) {
  return std::max<int64_t>(32, std::min(kBlockDepth / taps, kBlockPlaneFloats / plane_floats));
}

int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The padded input's plane: rows and columns from -pad_top / -pad_left to the last one a window
// reads.
struct PaddedPlane {
  int64_t rows, cols;
  explicit PaddedPlane(const DirectConvShape& s)
      : rows(std::max(s.pad_top + s.H, (s.OH - 1) * s.SH + s.KH)),
        cols(std::max(s.pad_left + s.W, (s.OW - 1) * s.SW + s.KW)) {}
  int64_t floats() const { return rows * cols; }
};

#ifdef FUSECTL_AVX512

// Where a finished tile goes: 8 pixels from p0 (`pixels` of them real) of 32 channels from oc0
// (`channels` real), into Y [M, P] of one image.
struct TileOut {
  float* y;
  int64_t P, p0, oc0;
  int pixels, channels;
  const Epilogue* ep;
  bool vector_activation;
};

// Bias, residual and activation on the tile in registers, transposed into Y's channel rows.
FUSECTL_AVX512 FUSECTL_FORCE_INLINE void storeTile(__m512 (&acc0)[8], __m512 (&acc1)[8],
                                                   const TileOut& o) {
  const Epilogue& ep = *o.ep;
  const __mmask16 lo = o.channels >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << o.channels) - 1);
  const __mmask16 hi = o.channels >= 32   ? __mmask16(0xFFFF)
                       : o.channels <= 16 ? __mmask16(0)
                                          : __mmask16((1u << (o.channels - 16)) - 1);
  if (ep.bias) {  // per output channel: the tile's columns
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, ep.bias + o.oc0);
    const __m512 b1 = _mm512_maskz_loadu_ps(hi, ep.bias + o.oc0 + 16);
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      acc0[r] = _mm512_add_ps(acc0[r], b0);
      acc1[r] = _mm512_add_ps(acc1[r], b1);
    }
  }
  __m512 columns[2][8];  // columns[h][j]: channels 16h + 2j and 16h + 2j + 1, 8 pixels each
  transpose8x16(acc0, columns[0]);
  transpose8x16(acc1, columns[1]);
  const __mmask8 pm = static_cast<__mmask8>((1u << o.pixels) - 1);
  const Activation act = o.vector_activation ? ep.activation : Activation::None;
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const int c = 16 * h + 2 * j;  // the first of the vector's two channels
      if (c >= o.channels) break;
      const bool second = c + 1 < o.channels;
      float* y0 = o.y + (o.oc0 + c) * o.P + o.p0;
      float* y1 = y0 + o.P;
      __m512 v = columns[h][j];
      if (ep.residual) {
        const float* z0 = ep.residual + (o.oc0 + c) * ep.ld_residual + o.p0;
        const __m256 r0 = _mm256_maskz_loadu_ps(pm, z0);
        const __m256 r1 = second ? _mm256_maskz_loadu_ps(pm, z0 + ep.ld_residual)
                                 : _mm256_setzero_ps();
        v = _mm512_add_ps(v, _mm512_insertf32x8(_mm512_castps256_ps512(r0), r1, 1));
      }
      if (act != Activation::None) v = activate512(v, act, ep.alpha, ep.beta);
      _mm256_mask_storeu_ps(y0, pm, _mm512_castps512_ps256(v));
      if (second) _mm256_mask_storeu_ps(y1, pm, _mm512_extractf32x8_ps(v, 1));
    }
  }
  if (!o.vector_activation && ep.activation != Activation::None) {
    for (int c = 0; c < o.channels; ++c) ep.activate(o.y + (o.oc0 + c) * o.P + o.p0, o.pixels);
  }
}

// Cache lines of the next weight panel that one tile asks into L2 while it runs: `lines` of
// them from `first`, spread over its k loop.
struct PanelPrefetch {
  const char* first = nullptr;
  int64_t lines = 0;
};

// One 8 x 32 tile over one block of input channels: `kn` taps at offsets `offs` from each
// pixel's row pointer, against the block's weight panel `b` (kn x 32). LOAD: start from the
// partial sums of the blocks before (8 rows of `partial`, ld `ldp`); FINAL: finish into Y,
// else leave the sums in `partial`.
template <bool LOAD, bool FINAL>
FUSECTL_AVX512 void directTile(const float* const* a, const int32_t* offs, int64_t kn,
                               const float* b, float* partial, int64_t ldp, const TileOut& out,
                               PanelPrefetch next) {
  // One request every `every` taps, counted down rather than divided out.
  const int64_t every = next.lines > 0 ? std::max<int64_t>(1, kn / next.lines) : kn + 1;
  int64_t countdown = every, asked = 0;
  __m512 acc0[8], acc1[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; ++r) {
    acc0[r] = LOAD ? _mm512_loadu_ps(partial + r * ldp) : _mm512_setzero_ps();
    acc1[r] = LOAD ? _mm512_loadu_ps(partial + r * ldp + 16) : _mm512_setzero_ps();
  }
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  const float *a4 = a[4], *a5 = a[5], *a6 = a[6], *a7 = a[7];
  for (int64_t k = 0; k < kn; ++k) {
    const int32_t o = offs[k];
    const __m512 b0 = _mm512_loadu_ps(b + k * kChannels);
    const __m512 b1 = _mm512_loadu_ps(b + k * kChannels + 16);
#define FUSECTL_DIRECT_ROW(r, ar)                          \
  {                                                        \
    const __m512 av = _mm512_set1_ps(ar[o]);               \
    acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);            \
    acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);            \
  }
    FUSECTL_DIRECT_ROW(0, a0)
    FUSECTL_DIRECT_ROW(1, a1)
    FUSECTL_DIRECT_ROW(2, a2)
    FUSECTL_DIRECT_ROW(3, a3)
    FUSECTL_DIRECT_ROW(4, a4)
    FUSECTL_DIRECT_ROW(5, a5)
    FUSECTL_DIRECT_ROW(6, a6)
    FUSECTL_DIRECT_ROW(7, a7)
#undef FUSECTL_DIRECT_ROW
    if (--countdown == 0) {
      countdown = every;
      if (asked < next.lines) _mm_prefetch(next.first + 64 * asked++, _MM_HINT_T1);
    }
  }
  if (FINAL) {
    storeTile(acc0, acc1, out);
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      _mm512_storeu_ps(partial + r * ldp, acc0[r]);
      _mm512_storeu_ps(partial + r * ldp + 16, acc1[r]);
    }
  }
}

using DirectTileFn = void (*)(const float* const*, const int32_t*, int64_t, const float*, float*,
                              int64_t, const TileOut&, PanelPrefetch);

#endif  // FUSECTL_AVX512

}  // namespace

bool directConvRuns(const DirectConvShape& s) {
#ifdef FUSECTL_AVX512
  // With the AVX-512 GEMM kernel only, so that tests forcing another kernel take the others.
  if (std::string_view(gemmKernelName()) != "avx512") return false;
  if (s.C <= 0 || s.M <= 0 || s.KH <= 0 || s.KW <= 0 || s.OH <= 0 || s.OW <= 0) return false;
  if (s.pad_top < 0 || s.pad_left < 0) return false;
  // Tap offsets are 32-bit, and the padded image is per-thread scratch.
  const PaddedPlane plane(s);
  return s.C * plane.floats() <= (int64_t{1} << 26) && s.OH * s.OW < (int64_t{1} << 31);
#else
  (void)s;
  return false;
#endif
}

bool directConvPays(const DirectConvShape& s) {
  // Stride 2 from 49 output pixels up (512 channels at 14x14 -> 7x7: 1.26 against 1.39 ms);
  // below that a weight panel serves too few pixel tiles.
  const bool stride2 =
      s.SH == 2 && s.SW == 2 && s.KH >= 3 && s.KW >= 3 && s.OH * s.OW >= 49;
  // Stride 1 onto small maps (at most 1024 output pixels, 32 output channels and up, at most 1M
  // weights, or any weights onto at most 64 pixels), where Winograd does not run or is slower
  // (winogradTileFor). Before the next panel's prefetch (convDirect) it won alone and lost in
  // models, its filters cold there; with it, 96x96 models min of four alternating pairs:
  // SqueezeNet 1.298 -> 1.248 ms, DenseNet-121 13.60 -> 12.99, GoogLeNet (224x224) 4.88 ->
  // 4.77, the others level. Onto 64 pixels or fewer the filters stream from memory whatever
  // the algorithm, and this one reads them once, untransformed: 512 channels at 3x3 (ResNet-18
  // at 96x96, three alternating pairs) 2.43-3.91 -> 1.80-1.82 ms for its three such nodes
  // against the implicit im2col, Inception-v3's 8x8 ones 1.79-1.85 -> 1.09-1.10.
  const int64_t pixels = s.OH * s.OW;
  const bool small_stride1 = s.SH == 1 && s.SW == 1 && s.KH >= 3 && s.KW >= 3 &&
                             pixels <= 1024 && s.M >= 32 &&
                             (s.M * s.C * s.KH * s.KW <= (int64_t{1} << 20) || pixels <= 64);
  return (stride2 || small_stride1 || s.C <= 4) && directConvRuns(s);
}

int64_t directConvBlockChannels(const DirectConvShape& s) {
  return blockChannels(s.KH * s.KW, PaddedPlane(s).floats());
}

PackedMatrix packDirectConvFilters(const float* w, const DirectConvShape& s) {
  const int64_t M = s.M, C = s.C, KH = s.KH, KW = s.KW;
  const int64_t bc = directConvBlockChannels(s);
  const int64_t taps = KH * KW, K = C * taps, Mp = roundUp(M, kChannels);
  PackedMatrix pm;
  // Made for the AVX-512 GEMM kernel's machines (directConvPays), so that the session cache
  // (gemm_packed_state.h) keeps it while that kernel is in use.
  pm.kernel = avx512KernelSpec();
  pm.outer = M;
  pm.depth = K;
  pm.padded = Mp;
  pm.rs = bc;  // the input channels per block, which convDirect checks
  const size_t bytes = static_cast<size_t>(roundUp(std::max<int64_t>(K * Mp, 16) * 4, 64));
  float* data = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!data) throw std::bad_alloc();
  pm.data = std::unique_ptr<float[], void (*)(float*)>(data, [](float* p) { std::free(p); });
  // Block of input channels [ic0, ic0 + cb): its kn = cb * taps rows of each 32-channel panel,
  // panel after panel, from data + ic0 * taps * Mp.
  for (int64_t ic0 = 0; ic0 < C; ic0 += bc) {
    const int64_t kn = std::min(bc, C - ic0) * taps;
    float* block = data + ic0 * taps * Mp;
    for (int64_t oc0 = 0; oc0 < Mp; oc0 += kChannels) {
      float* panel = block + oc0 * kn;
      for (int64_t k = 0; k < kn; ++k) {
        for (int64_t j = 0; j < kChannels; ++j) {
          const int64_t oc = oc0 + j;
          panel[k * kChannels + j] = oc < M ? w[oc * K + ic0 * taps + k] : 0.f;
        }
      }
    }
  }
  return pm;
}

void convDirect(const float* x, float* y, const DirectConvShape& s, const Epilogue& ep,
                const PackedMatrix& filters, int threads, const PackedMatrix* next_filters) {
#ifdef FUSECTL_AVX512
  const int64_t taps = s.KH * s.KW, K = s.C * taps, Mp = roundUp(s.M, kChannels);
  const int64_t bc = directConvBlockChannels(s);
  if (filters.depth != K || filters.padded != Mp || filters.rs != bc || !filters.data ||
      !packedForCurrentKernel(filters)) {
    throw std::logic_error("convDirect: filters not packed by packDirectConvFilters for W");
  }
  const int64_t P = s.OH * s.OW, tiles = (P + kPixels - 1) / kPixels;
  const PaddedPlane plane(s);
  const int64_t in_plane = s.H * s.W;
  // The tap offsets of every input channel, kernel row and column, in the weights' k order.
  thread_local std::vector<int32_t> offsets;
  offsets.resize(static_cast<size_t>(K));
  for (int64_t ic = 0, k = 0; ic < s.C; ++ic) {
    for (int64_t kh = 0; kh < s.KH; ++kh) {
      for (int64_t kw = 0; kw < s.KW; ++kw) {
        offsets[static_cast<size_t>(k++)] =
            static_cast<int32_t>(ic * plane.floats() + kh * plane.cols + kw);
      }
    }
  }
  const int32_t* offs = offsets.data();  // the calling thread's: the workers have their own
  thread_local std::vector<float> padded_buffer;
  float* padded = growScratch(padded_buffer, s.C * plane.floats());
  const bool vector_activation = hasVectorActivation(ep.activation, true);
  const int64_t blocks = (s.C + bc - 1) / bc;
  for (int64_t n = 0; n < s.N; ++n) {
    const float* xn = x + n * s.C * in_plane;
    float* yn = y + n * s.M * P;
    Epilogue en = ep;
    en.residual = ep.residual ? ep.residual + n * s.M * P : nullptr;
    en.ld_residual = P;
    parallelFor(s.C, threads, 4, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        float* dst = padded + c * plane.floats();
        std::fill(dst, dst + plane.floats(), 0.f);
        const int64_t rows = std::min(s.H, plane.rows - s.pad_top);
        const int64_t cols = std::min(s.W, plane.cols - s.pad_left);
        for (int64_t h = 0; h < rows; ++h) {
          std::memcpy(dst + (h + s.pad_top) * plane.cols + s.pad_left, xn + c * in_plane + h * s.W,
                      static_cast<size_t>(cols) * sizeof(float));
        }
      }
    });
    // Each thread takes a run of pixel tiles through every block and panel, so an output
    // element sums its taps in the same order whatever the thread count.
    parallelFor(tiles, threads, 1, [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> partial_buffer;
      float* partial =
          blocks > 1 ? growScratch(partial_buffer, (t1 - t0) * kPixels * Mp) : nullptr;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t ic0 = b * bc;
        const int64_t kn = std::min(bc, s.C - ic0) * taps;
        const bool first = b == 0, last = b + 1 == blocks;
        const DirectTileFn tile = first ? (last ? directTile<false, true> : directTile<false, false>)
                                        : (last ? directTile<true, true> : directTile<true, false>);
        const float* block = filters.data.get() + ic0 * taps * Mp;
        for (int64_t oc0 = 0; oc0 < Mp; oc0 += kChannels) {
          const float* panel = block + oc0 * kn;
          // The panel after this one (the next 32 channels, or the next block's first; the
          // packing lays them end to end) streams from memory once per product: this panel's
          // tiles each ask their share of it into L2 while they run. Cold, as in a model,
          // 512 channels at 14x14 -> 7x7 (9 MiB of filters, 7 tiles a panel) took 1.6x the
          // implicit im2col's time without it, whose GEMM fetches its next block so.
          // After the last panel, the next product's first (next_filters), where there is one.
          const bool last_panel = oc0 + kChannels >= Mp && b + 1 == blocks;
          const bool next_product = last_panel && next_filters && next_filters->data;
          const int64_t next_kn =
              oc0 + kChannels < Mp ? kn
              : b + 1 < blocks     ? std::min(bc, s.C - ic0 - bc) * taps
              : next_product       ? std::min(next_filters->rs * taps, next_filters->depth)
                                   : 0;
          const PrefetchShare next =
              next_product
                  ? PrefetchShare::of(*next_filters, 0, next_kn * kChannels, t1 - t0)
                  : PrefetchShare::of(filters, (panel - filters.data.get()) + kn * kChannels,
                                      next_kn * kChannels, t1 - t0);
          // The tile's first pixel's row and column, stepped along (a division per pixel cost
          // as much as a 27-tap tile's products).
          int64_t oh = t0 * kPixels / s.OW, ow = t0 * kPixels % s.OW;
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t p0 = t * kPixels;
            const float* rows[kPixels];
            for (int64_t r = 0; r < kPixels; ++r) {
              // Past the last pixel: the last one again (computed, not stored).
              rows[r] = p0 + r < P ? padded + oh * s.SH * plane.cols + ow * s.SW : rows[r - 1];
              if (++ow == s.OW) ow = 0, ++oh;
            }
            TileOut out{yn, P, p0, oc0, static_cast<int>(std::min(kPixels, P - p0)),
                        static_cast<int>(std::min(kChannels, s.M - oc0)), &en,
                        vector_activation};
            const auto [first_line, lines] = next.forTile(t - t0);
            const PanelPrefetch share{first_line, lines};
            tile(rows, offs + ic0 * taps, kn, panel,
                 partial ? partial + (t - t0) * kPixels * Mp + oc0 : nullptr, Mp, out, share);
          }
        }
      }
    });
  }
#else
  (void)x, (void)y, (void)s, (void)ep, (void)filters, (void)threads, (void)next_filters;
  throw std::logic_error("convDirect: built without AVX-512");
#endif
}

}  // namespace fusectl::kernels::cpu
