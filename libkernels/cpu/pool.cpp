// MaxPool (with Indices), AveragePool, GlobalAveragePool and GlobalMaxPool.
//
// 1-D and 2-D pools run as 3-D pools with unit leading dims, one (image, channel) plane per
// task. Windows are clipped to the input; AveragePool divides by the clipped count, or with
// count_include_pad by the window positions inside the padded extent [-pad_begin, in+pad_end)
// (ceil_mode's overhang past the end padding never counts, as in PyTorch and ONNX Runtime).
// MaxPool's Indices are offsets into the whole input tensor, row-major, or with storage_order=1
// column-major within each spatial plane.
//
// MaxPool (without Indices) and AveragePool take a separable path: for each output row, the
// window's valid input rows (kd x kh of them for a 3-D window) are combined elementwise into one
// row (contiguous, so it vectorises for any stride), which is padded with the identity (-inf or
// 0) on both sides; the horizontal pass then reduces k taps at stride s along that row. MaxPool
// with Indices takes the general per-output loop, whose window geometry is the same. (3-D pools
// took that loop too until 2026-12-06: S3D's 13 MaxPools were 473 of its 830 ms.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "channels_last.h"
#include "compute_common.h"
#include "gemm_vector_epilogue.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// A pool's window geometry with 1-D/2-D padded out to 3-D.
struct Pool3d {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

Pool3d to3d(const Window& w) {
  Pool3d p;
  const size_t r = w.rank(), lead = 3 - r;
  for (size_t i = 0; i < 3; ++i) {
    const bool real = i >= lead;
    const size_t j = i - lead;
    p.in[i] = real ? w.in[j] : 1;
    p.out[i] = real ? w.out[j] : 1;
    p.k[i] = real ? w.kernel[j] : 1;
    p.s[i] = real ? w.strides[j] : 1;
    p.d[i] = real ? w.dilations[j] : 1;
    p.pb[i] = real ? w.pad_begin[j] : 0;
    p.pe[i] = real ? w.pad_end[j] : 0;
  }
  return p;
}

// Taps of axis i for output o: positions start + j*d inside [lo, hi) -> [j0, j1).
inline void tapRange(const Pool3d& p, int i, int64_t o, int64_t lo, int64_t hi, int64_t* j0,
                     int64_t* j1) {
  windowTapRange(o * p.s[i] - p.pb[i], p.d[i], p.k[i], lo, hi, j0, j1);
}

Window poolWindow(const KernelContext& ctx, const HostTensor& x) {
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  if (x.rank() > 5) ctx.fail("pools over more than 3 spatial dims are not supported");
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (ks.size() != x.rank() - 2) ctx.fail("kernel_shape must have one value per spatial dim");
  const bool ceil_mode = ctx.attrInt("ceil_mode", 0) != 0;
  return resolveWindow(ctx, std::vector<int64_t>(x.dims().begin() + 2, x.dims().end()),
                       std::move(ks), ceil_mode);
}

std::vector<int64_t> pooledDims(const HostTensor& x, const Window& w) {
  std::vector<int64_t> dims = {x.dim(0), x.dim(1)};
  dims.insert(dims.end(), w.out.begin(), w.out.end());
  return dims;
}

// The separable path (see the top of the file); `is_max` picks MaxPool, else AveragePool with
// or without count_include_pad. A 3-D window's depth taps join its row taps: each output row
// combines kd x kh input rows first.
void poolSeparable(const Pool3d& p, const float* x, float* y, int64_t planes, int threads,
                   bool is_max, bool include_pad) {
  const int64_t in_d = p.in[0], in_h = p.in[1], in_w = p.in[2];
  const int64_t out_d = p.out[0], out_h = p.out[1], out_w = p.out[2];
  const int64_t kh = p.k[1], kw = p.k[2], sw = p.s[2], dw = p.d[2], pad_w = p.pb[2];
  const int64_t span = (out_w - 1) * sw + (kw - 1) * dw + 1;
  const int64_t padded = std::max(span, pad_w + in_w);
  const float fill = is_max ? -std::numeric_limits<float>::infinity() : 0.f;
  // Per output column, 1 / the taps counted (inside the input, or inside the padded extent with
  // count_include_pad); 0 where none is, which gives AveragePool's 0 for an empty window.
  std::vector<float> inv_cols(static_cast<size_t>(out_w));
  for (int64_t ow = 0; ow < out_w; ++ow) {
    int64_t w0, w1;
    if (include_pad) tapRange(p, 2, ow, -p.pb[2], in_w + p.pe[2], &w0, &w1);
    else tapRange(p, 2, ow, 0, in_w, &w0, &w1);
    inv_cols[static_cast<size_t>(ow)] = w1 > w0 ? 1.f / static_cast<float>(w1 - w0) : 0.f;
  }
  // The input rows of output row (od, oh) of a plane, in `taps`; returns how many.
  const auto rowTaps = [&](const float* xs, int64_t od, int64_t oh, const float** taps) {
    int64_t d0, d1, h0, h1;
    tapRange(p, 0, od, 0, in_d, &d0, &d1);
    tapRange(p, 1, oh, 0, in_h, &h0, &h1);
    int k = 0;
    for (int64_t jd = d0; jd < d1; ++jd) {
      const float* slice = xs + (od * p.s[0] - p.pb[0] + jd * p.d[0]) * in_h * in_w;
      for (int64_t jh = h0; jh < h1; ++jh)
        taps[k++] = slice + (oh * p.s[1] - p.pb[1] + jh * p.d[1]) * in_w;
    }
    return k;
  };
  const int64_t rows = out_d * out_h;
  parallelFor(planes * rows, threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(out_w, 1)),
              [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(padded), fill);
    std::vector<const float*> taps(static_cast<size_t>(p.k[0] * kh)), next_taps(taps.size());
    // (plane, depth, row) of output row t, stepped along rather than divided out for each row:
    // on planes of 23-47 columns a row's pooling is a few vector operations, and the 64-bit
    // divisions took more than a third of SqueezeNet's pools.
    int64_t pl = b / rows, od = b % rows / out_h, oh = b % out_h;
    for (int64_t t = b; t < e; ++t, ++oh) {
      if (oh == out_h) {
        oh = 0;
        if (++od == out_d) od = 0, ++pl;
      }
      const float* xs = x + pl * in_d * in_h * in_w;
      float* yo = y + t * out_w;
      const int k = rowTaps(xs, od, oh, taps.data());
      if (k == 0) {
        std::fill(yo, yo + out_w, is_max ? fill : 0.f);
        continue;
      }
      // The next output row's input rows are short streams (a few KB) that the hardware
      // prefetcher picks up too late; asking for them now hides most of their latency.
      if (t + 1 < e && oh + 1 < out_h) {
        const int nk = rowTaps(xs, od, oh + 1, next_taps.data());
        for (int j = 0; j < nk; ++j) {
          const char* next = reinterpret_cast<const char*>(next_taps[static_cast<size_t>(j)]);
          for (int64_t off = 0; off < in_w * static_cast<int64_t>(sizeof(float)); off += 64)
            __builtin_prefetch(next + off);
        }
      }
      float* inner = row.data() + pad_w;
      if (is_max) {
        vec::maxRows(taps.data(), k, inner, in_w);
        vec::windowMax(row.data(), sw, kw, dw, yo, out_w);
        continue;
      }
      vec::sumRows(taps.data(), k, inner, in_w);
      int64_t count = k;
      if (include_pad) {
        int64_t pd0, pd1, ph0, ph1;
        tapRange(p, 0, od, -p.pb[0], in_d + p.pe[0], &pd0, &pd1);
        tapRange(p, 1, oh, -p.pb[1], in_h + p.pe[1], &ph0, &ph1);
        count = (pd1 - pd0) * (ph1 - ph0);
      }
      const float inv_rows = count > 0 ? 1.f / static_cast<float>(count) : 0.f;
      vec::windowMean(row.data(), sw, kw, dw, inv_cols.data(), inv_rows, yo, out_w);
    }
  });
}

#ifdef FUSECTL_AVX512
// The horizontal taps of maxPoolNarrowPlanes: per tap and output vector (lanes 0-15, 16-31),
// the input column each output lane reads (0-31: a lane of the row's first or second vector)
// and the lanes that read one.
struct NarrowTaps {
  std::vector<int32_t> index;   // kw x 2 x 16
  std::vector<uint16_t> valid;  // kw x 2
};

// `v` where it is greater than `best` (a NaN never is), else `best`: the separable path's rule.
FUSECTL_AVX512 inline __m512 greater(__m512 best, __m512 v) {
  return _mm512_mask_mov_ps(best, _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ), v);
}

// kWide: rows of up to 32 (two vectors); otherwise of up to 16, whose rows cost a few cycles
// each, so that nothing of the second vector is paid for there (GoogLeNet's 3x3 to 12x12 pools).
template <bool kWide>
FUSECTL_AVX512 void maxPoolNarrowPlaneRange(const Pool3d& p, const NarrowTaps& taps,
                                            const float* x, float* y, int64_t pl0, int64_t pl1) {
  const int64_t in_d = p.in[0], in_h = p.in[1], in_w = p.in[2];
  const int64_t out_d = p.out[0], out_h = p.out[1], out_w = p.out[2];
  const int64_t kw = p.k[2];
  const bool two_in = kWide && in_w > 16;
  const int out_vectors = kWide && out_w > 16 ? 2 : 1;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __mmask16 in_lanes[2] = {firstLanes(std::min<int64_t>(in_w, 16)),
                                 firstLanes(std::max<int64_t>(in_w - 16, 0))};
  const __mmask16 out_lanes[2] = {firstLanes(std::min<int64_t>(out_w, 16)),
                                  firstLanes(std::max<int64_t>(out_w - 16, 0))};
  for (int64_t pl = pl0; pl < pl1; ++pl) {
    const float* xs = x + pl * in_d * in_h * in_w;
    float* yo = y + pl * out_d * out_h * out_w;
    for (int64_t od = 0; od < out_d; ++od) {
      int64_t d0, d1;
      tapRange(p, 0, od, 0, in_d, &d0, &d1);
      for (int64_t oh = 0; oh < out_h; ++oh, yo += out_w) {
        int64_t h0, h1;
        tapRange(p, 1, oh, 0, in_h, &h0, &h1);
        // The window's input rows combined, depth outer, as poolSeparable's rowTaps lists them.
        __m512 lo = ninf, hi = ninf;
        bool first = true;
        for (int64_t jd = d0; jd < d1; ++jd) {
          const float* slice = xs + (od * p.s[0] - p.pb[0] + jd * p.d[0]) * in_h * in_w;
          for (int64_t jh = h0; jh < h1; ++jh, first = false) {
            const float* row = slice + (oh * p.s[1] - p.pb[1] + jh * p.d[1]) * in_w;
            const __m512 v = _mm512_mask_loadu_ps(ninf, in_lanes[0], row);
            lo = first ? v : greater(lo, v);
            if (!two_in) continue;
            const __m512 w = _mm512_mask_loadu_ps(ninf, in_lanes[1], row + 16);
            hi = first ? w : greater(hi, w);
          }
        }
        for (int o = 0; o < out_vectors; ++o) {
          __m512 r = ninf;
          for (int64_t j = 0; j < kw; ++j) {
            const size_t t = static_cast<size_t>(j * 2 + o);
            const __m512i index = _mm512_loadu_si512(taps.index.data() + t * 16);
            const __mmask16 valid = static_cast<__mmask16>(taps.valid[t]);
            const __m512 v =
                two_in
                    ? _mm512_mask_mov_ps(ninf, valid, _mm512_permutex2var_ps(lo, index, hi))
                    : _mm512_mask_permutexvar_ps(ninf, valid, index, lo);
            r = j == 0 ? v : greater(r, v);
          }
          _mm512_mask_storeu_ps(yo + o * 16, out_lanes[o], r);
        }
      }
    }
  }
}

// MaxPool on planes at most 32 wide (GoogLeNet's and Inception's 3x3 stride-1 branch pools on
// 28x28 to 3x3 maps, S3D's 3x3x3 ones on 8x28x28 to 2x7x7): an output row is one or two vectors.
// The window's input rows (kd x kh of them) are combined (masked loads, lanes past the row -inf),
// then each horizontal tap is a lane permutation of that row (lanes outside it -inf). The
// separable path paid its per-row calls for rows of 3-28 values: GoogLeNet's 13 MaxPools took
// 2.6 ms at 96x96 where ONNX Runtime's take 0.28, and S3D's 3-D ones 34.4 ms against ONNX
// Runtime's 25.5 (bench/README.md, "3-D max pools as whole rows"). Taps are combined in the
// separable path's order with its comparison (a later value wins only when greater), so NaNs and
// ties come out the same.
void maxPoolNarrowPlanes(const Pool3d& p, const float* x, float* y, int64_t planes,
                         int threads) {
  const int64_t out_w = p.out[2], kw = p.k[2];
  NarrowTaps taps;
  taps.index.assign(static_cast<size_t>(kw * 32), 0);
  taps.valid.assign(static_cast<size_t>(kw * 2), 0);
  for (int64_t j = 0; j < kw; ++j) {
    for (int64_t ow = 0; ow < out_w; ++ow) {
      const int64_t iw = ow * p.s[2] - p.pb[2] + j * p.d[2];
      if (iw < 0 || iw >= p.in[2]) continue;
      const size_t t = static_cast<size_t>(j * 2 + ow / 16);
      taps.index[t * 16 + static_cast<size_t>(ow % 16)] = static_cast<int32_t>(iw);
      taps.valid[t] |= static_cast<uint16_t>(1u << (ow % 16));
    }
  }
  const bool wide = p.in[2] > 16 || p.out[2] > 16;
  parallelFor(planes, threads, 16, [&](int64_t b, int64_t e) {
    if (wide) maxPoolNarrowPlaneRange<true>(p, taps, x, y, b, e);
    else maxPoolNarrowPlaneRange<false>(p, taps, x, y, b, e);
  });
}

// Whether maxPoolNarrowPlanes takes the pool: AVX-512, input and output rows of at most 32.
bool narrowPlanes(const Pool3d& p) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  return has_avx512 && p.in[2] <= 32 && p.out[2] <= 32 && p.out[2] >= 1;
}
#endif

void runMaxPool(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  Window w = poolWindow(ctx, x);
  const Pool3d p = to3d(w);
  const bool col_major = ctx.attrInt("storage_order", 0) != 0;
  const std::vector<int64_t> ydims = pooledDims(x, w);
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), ydims);
  int64_t* ind = nullptr;
  if (ctx.numOutputs() > 1 && ctx.outputWanted(1)) {
    ind = ctx.allocateOutput(1, DType::Int64, ydims).mutableData<int64_t>();
  }
  FloatView xf(x);
  FloatSink ys(y);
  float* yp = ys.data();
  const int64_t planes = x.dim(0) * x.dim(1);
  if (!ind) {
#ifdef FUSECTL_AVX512
    if (narrowPlanes(p)) {
      maxPoolNarrowPlanes(p, xf.data(), yp, planes, ctx.numThreads());
      ys.commit();
      return;
    }
#endif
    poolSeparable(p, xf.data(), yp, planes, ctx.numThreads(), true, false);
    ys.commit();
    return;
  }
  const int64_t in_plane = p.in[0] * p.in[1] * p.in[2];
  const int64_t out_plane = p.out[0] * p.out[1] * p.out[2];
  parallelFor(planes, ctx.numThreads(), 8, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const float* xs = xf.data() + pl * in_plane;
      float* yo = yp + pl * out_plane;
      int64_t* io = ind ? ind + pl * out_plane : nullptr;
      for (int64_t od = 0; od < p.out[0]; ++od) {
        int64_t d0, d1;
        tapRange(p, 0, od, 0, p.in[0], &d0, &d1);
        for (int64_t oh = 0; oh < p.out[1]; ++oh) {
          int64_t h0, h1;
          tapRange(p, 1, oh, 0, p.in[1], &h0, &h1);
          for (int64_t ow = 0; ow < p.out[2]; ++ow) {
            int64_t w0, w1;
            tapRange(p, 2, ow, 0, p.in[2], &w0, &w1);
            float best = -std::numeric_limits<float>::infinity();
            int64_t bd = -1, bh = -1, bw = -1;
            for (int64_t jd = d0; jd < d1; ++jd) {
              const int64_t id = od * p.s[0] - p.pb[0] + jd * p.d[0];
              for (int64_t jh = h0; jh < h1; ++jh) {
                const int64_t ih = oh * p.s[1] - p.pb[1] + jh * p.d[1];
                const float* row = xs + (id * p.in[1] + ih) * p.in[2];
                for (int64_t jw = w0; jw < w1; ++jw) {
                  const int64_t iw = ow * p.s[2] - p.pb[2] + jw * p.d[2];
                  if (row[iw] > best || bd < 0) {
                    best = row[iw];
                    bd = id;
                    bh = ih;
                    bw = iw;
                  }
                }
              }
            }
            const int64_t o = (od * p.out[1] + oh) * p.out[2] + ow;
            yo[o] = best;
            if (io) {
              const int64_t local = bd < 0 ? 0
                                    : col_major ? bd + p.in[0] * (bh + p.in[1] * bw)
                                                : (bd * p.in[1] + bh) * p.in[2] + bw;
              io[o] = pl * in_plane + local;
            }
          }
        }
      }
    }
  });
  ys.commit();
}

void runGlobalPool(KernelContext& ctx, bool is_max);

// A window over the whole input, unpadded and undilated: one output per plane, its mean.
bool wholePlaneWindow(const Pool3d& p) {
  for (int i = 0; i < 3; ++i)
    if (p.k[i] != p.in[i] || p.out[i] != 1 || p.pb[i] != 0 || p.pe[i] != 0 || p.d[i] != 1)
      return false;
  return true;
}

void runAveragePool(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(x.dtype())));
  }
  Window w = poolWindow(ctx, x);
  const Pool3d p = to3d(w);
  // As GlobalAveragePool: S3D's closing (2, 7, 7) pool over a 2x7x7 input took 0.117 ms a run
  // through the separable path (a call per output row of one value) against ONNX Runtime's 0.029.
  if (wholePlaneWindow(p)) {
    runGlobalPool(ctx, false);
    return;
  }
  const bool include_pad = ctx.attrInt("count_include_pad", 0) != 0;
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), pooledDims(x, w));
  FloatView xf(x);
  FloatSink ys(y);
  float* yp = ys.data();
  const int64_t planes = x.dim(0) * x.dim(1);
  poolSeparable(p, xf.data(), yp, planes, ctx.numThreads(), false, include_pad);
  ys.commit();
}

#ifdef FUSECTL_AVX512
// Means of `count` planes of at most 256 values each, with AVX-512 (masked loads for the last
// partial vector, a tree reduction per plane). Through vec::sum, a 7x7 plane cost about 95
// cycles, mostly fixed costs (the dispatch, a partial vector through memory, a 16-add chain);
// EfficientNet-B0's squeeze-and-excitation blocks average 6,600 such planes a run.
FUSECTL_AVX512 void smallPlaneMeans(const float* x, int64_t plane, int64_t count, float* y) {
  const __mmask16 last = firstLanes(plane - (plane - 1) / 16 * 16);
  const int64_t full = (plane - 1) / 16;  // vectors before the last, partial or not
  const float inv = 1.f / static_cast<float>(plane);
  for (int64_t p = 0; p < count; ++p) {
    const float* xs = x + p * plane;
    __m512 a0 = _mm512_maskz_loadu_ps(last, xs + full * 16), a1 = _mm512_setzero_ps();
    int64_t v = 0;
    for (; v + 2 <= full; v += 2) {
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(xs + v * 16));
      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(xs + v * 16 + 16));
    }
    if (v < full) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(xs + v * 16));
    y[p] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * inv;
  }
}
#endif

// The means of a channels-last [N][H][W][C] input (HostTensor::channelsLast): a run of C
// sums per image, a pixel's channels added to them at a time. [N, C, 1, 1] is the same bytes in
// either layout, so the output is planar.
void globalMeansChannelsLast(const HostTensor& x, HostTensor& y) {
  const int64_t N = x.dim(0), C = x.dim(1), P = x.dim(2) * x.dim(3);
  for (int64_t n = 0; n < N; ++n) {
    float* out = y.mutableData<float>() + n * C;
    std::fill(out, out + C, 0.f);
    sumChannelRows(x.data<float>() + n * P * C, P, C, out);
    const float inv = P > 0 ? 1.f / static_cast<float>(P) : 0.f;
    for (int64_t c = 0; c < C; ++c) out[c] *= inv;
  }
}

void runGlobalPool(KernelContext& ctx, bool is_max) {
  const HostTensor& x = ctx.requireInput(0);
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  std::vector<int64_t> ydims = x.dims();
  for (size_t i = 2; i < ydims.size(); ++i) ydims[i] = 1;
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), ydims);
  if (x.channelsLast()) {  // only where globalPoolReadsChannelsLast said so: float, rank 4
    if (is_max || x.dtype() != DType::Float || x.rank() != 4)
      throwInternal("a channels-last input to a global pool other than a float average");
    globalMeansChannelsLast(x, y);
    return;
  }
  FloatView xf(x);
  FloatSink ys(y);
  const int64_t planes = x.dim(0) * x.dim(1), plane = product(x.dims(), 2);
#ifdef FUSECTL_AVX512
  // With the vector kernels' ISA (vec::activeIsa), so that forcing a narrower one in tests
  // still runs vec::sum on these planes.
  const bool small_means =
      vec::activeIsa() == vec::Isa::Avx512 && !is_max && plane >= 1 && plane <= 256;
#else
  const bool small_means = false;
#endif
  parallelFor(planes, ctx.numThreads(), std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(plane, 1)),
              [&](int64_t b, int64_t e) {
#ifdef FUSECTL_AVX512
    if (small_means) {
      smallPlaneMeans(xf.data() + b * plane, plane, e - b, ys.data() + b);
      return;
    }
#endif
    for (int64_t pl = b; pl < e; ++pl) {
      const float* xs = xf.data() + pl * plane;
      if (is_max) {
        ys.data()[pl] = vec::max(xs, plane);
      } else {
        ys.data()[pl] = plane > 0 ? static_cast<float>(vec::sum(xs, plane) / plane) : 0.f;
      }
    }
  });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerPoolKernels(KernelRegistry& r) {
  r.add({"", "MaxPool", 1, 1000, cpu::runMaxPool});
  r.add({"", "AveragePool", 1, 1000, cpu::runAveragePool});
  r.add({"", "GlobalMaxPool", 1, 1000, [](KernelContext& c) { cpu::runGlobalPool(c, true); }});
  KernelInfo average{"", "GlobalAveragePool", 1, 1000,
                     [](KernelContext& c) { cpu::runGlobalPool(c, false); }};
  average.reads_channels_last = cpu::globalPoolReadsChannelsLast;
  r.add(average);
}

}  // namespace fusectl::kernels
