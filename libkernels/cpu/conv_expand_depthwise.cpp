// fusectl::ExpandDepthwiseConv: an inverted-residual block's 1x1 expansion fused into the
// depthwise convolution after it (MobileNetV2, EfficientNet-B0), run band by band so that the
// expanded tensor never goes to memory.
//
//   E = expand_activation(Conv(X, W, B))                      1x1, stride 1, unpadded, group 1
//   Y = activation(Conv(E, DW, DB, group = E's channels, kernel_shape, pads, strides))
//   X [N, C, H, W], W [E, C, 1, 1], B [E], DW [E, 1, kh, kw], DB [E]  ->  Y [N, E, OH, OW]
//
// The schedule is bench_expand_depthwise's Pair::bands (bench/README.md, "A filter block's B that
// outgrew L2, and the expansion fusion measured cold"): the depthwise output rows go in bands of
// kBandRows; for each band the expansion GEMM covers only the input rows that band reads (the
// halo rows it shares with the next band are computed again) and writes them into a band-sized
// buffer of the thread's, with the expansion's bias and activation as the GEMM's epilogue; the
// band's depthwise rows then read that buffer while it is still in L2, with their own bias and
// activation in registers. As two nodes, the expanded tensor (4.8 MB for MobileNetV2's 16 -> 96
// at 112x112) is written to memory and read back. Measured with cold buffers, the bands took
// 29-42% less time than the two nodes on the 112x112 blocks and 9-16% less on the 3x3 ones at
// 56x56, and with warm ones level or better there; on 5x5 windows and 28x28 planes they lost both
// ways, which is for the pass that writes this op to weigh, not the kernel.
//
// Threads share out the (image, band) pairs, each with its own buffer and a one-threaded GEMM. A
// band's values do not depend on which thread computed it or on the bands beside it (the GEMM
// sums every element over C in the same order whatever its column range), so every thread
// count gives the same bits.
//
// Where depthwisePlaneAvx512 does not take the window (no AVX-512, a horizontal stride over 2,
// a kernel wider than 16) or a vertical pad reaches a whole kernel height (a band could then read
// no input row), the pair runs as the two nodes would: the whole image's E by the same GEMM into
// a scratch buffer, then each plane's depthwise convolution and its epilogue.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "compute_common.h"
#include "conv_depthwise.h"
#include "fusectl/kernels/epilogue.h"
#include "fusectl/support/zeroed_array.h"
#include "gemm_micro.h"
#include "gemm_packed_state.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// Depthwise output rows per band: bench_expand_depthwise measured bands of 4, 8 and 14 rows, and
// 8 is the height its cold-buffer table (bench/README.md) was taken at. Its buffer, E channels
// by the (8 - 1) * stride + kh input rows under it, is 0.7 MB for the 16 -> 96 block at 112x112,
// which L2 keeps.
constexpr int64_t kBandRows = 8;

// Bands per image: as many as kBandRows-row bands need, and with several threads more, each
// thinner, until the (image, band) pairs split evenly over the threads, as convFloat rounds up
// its pixel chunks (MobileNetV2's 56 output rows make 7 bands, which two threads would take as
// 4 and 3). A band's rows do not depend on where the band starts, so neither do the bits.
int64_t bandsPerImage(int64_t images, int64_t out_rows, int threads) {
  int64_t bands = (out_rows + kBandRows - 1) / kBandRows;
  while (threads > 1 && (images * bands) % threads != 0 && bands < out_rows) ++bands;
  return bands;
}

// W packed as the GEMM's A operand has one form only; the number tells cachedPackedWeights so.
constexpr int64_t kExpansionFiltersVariant = 1;

// The floats of one huge page: the band buffer is at least that (see bandScratch).
constexpr int64_t kHugePageFloats = (int64_t{2} << 20) / static_cast<int64_t>(sizeof(float));

// The band buffer of the calling thread, kept across calls like conv.cpp's im2col chunks. The
// bench backs its buffers with huge pages because 4 KiB ones cost the whole-plane pair of the
// 112x112 block 0.78 against 0.44 ms (TLB misses on its 4.8 MB expanded tensor); the band buffer
// is smaller and was measured only on huge pages, so it gets one too: ZeroedArray maps 2 MiB and
// more on transparent huge pages, hence never less than that.
float* bandScratch(int64_t floats) {
  thread_local ZeroedArray<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < floats) {
    buffer = ZeroedArray<float>(static_cast<size_t>(std::max(floats, kHugePageFloats)));
  }
  return buffer.begin();
}

// The whole image's expanded tensor, for the fallback.
float* expandedImageScratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  return growScratch(buffer, floats);
}

struct ExpandDepthwiseShape {
  int64_t N = 0, C = 0, E = 0, H = 0, W = 0;
  Window depthwise;  // over E's planes, [H, W] -> [OH, OW]

  int64_t taps() const { return depthwise.kernel[0] * depthwise.kernel[1]; }
  int64_t outRows() const { return depthwise.out[0]; }
  int64_t outPixels() const { return depthwise.out[0] * depthwise.out[1]; }
};

void requireFloat32(const KernelContext& ctx, const HostTensor& t, const char* what) {
  if (t.dtype() != DType::Float) {
    ctx.fail(std::string(what) + " is " + std::string(dtypeName(t.dtype())) +
             "; ExpandDepthwiseConv takes float32 only");
  }
}

ExpandDepthwiseShape readShape(const KernelContext& ctx, const HostTensor& x, const HostTensor& w,
                               const HostTensor& b, const HostTensor& dw, const HostTensor& db) {
  if (x.rank() != 4) ctx.fail("X must be [N, C, H, W], it is " + formatDims(x.dims()));
  // Only kernels that declare reads_channels_last are handed that layout, and this one does not.
  if (x.channelsLast()) ctx.fail("X is channels-last; ExpandDepthwiseConv reads planes only");
  ExpandDepthwiseShape s;
  s.N = x.dim(0);
  s.C = x.dim(1);
  s.H = x.dim(2);
  s.W = x.dim(3);
  if (w.rank() != 4 || w.dim(1) != s.C || w.dim(2) != 1 || w.dim(3) != 1) {
    ctx.fail("W must be [E, " + std::to_string(s.C) + ", 1, 1] (a 1x1 filter per expanded " +
             "channel over X's " + std::to_string(s.C) + " channels), it is " +
             formatDims(w.dims()));
  }
  s.E = w.dim(0);
  if (b.rank() != 1 || b.dim(0) != s.E) {
    ctx.fail("B must be [" + std::to_string(s.E) + "] (one bias per expanded channel), it is " +
             formatDims(b.dims()));
  }
  if (dw.rank() != 4 || dw.dim(0) != s.E || dw.dim(1) != 1) {
    ctx.fail("DW must be [" + std::to_string(s.E) + ", 1, kh, kw] (one filter per expanded " +
             "channel), it is " + formatDims(dw.dims()));
  }
  if (db.rank() != 1 || db.dim(0) != s.E) {
    ctx.fail("DB must be [" + std::to_string(s.E) + "] (one bias per expanded channel), it is " +
             formatDims(db.dims()));
  }
  const int64_t group = ctx.attrInt("group", s.E);
  if (group != s.E) {
    ctx.fail("group is " + std::to_string(group) + " but the depthwise convolution has " +
             std::to_string(s.E) + " channels (W's first dim); it must equal them");
  }
  std::vector<int64_t> kernel = {dw.dim(2), dw.dim(3)};
  const std::vector<int64_t> kernel_shape = ctx.attrInts("kernel_shape");
  if (!kernel_shape.empty() && kernel_shape != kernel) {
    ctx.fail("kernel_shape " + formatDims(kernel_shape) + " does not match DW's spatial dims " +
             formatDims(kernel));
  }
  if (ctx.node().hasAttr("dilations") && ctx.attrInts("dilations") != std::vector<int64_t>{1, 1}) {
    ctx.fail("dilations must be 1 (the op has no dilated form)");
  }
  s.depthwise = resolveWindow(ctx, {s.H, s.W}, std::move(kernel), false);
  for (size_t i = 0; i < 2; ++i) {
    if (s.depthwise.pad_begin[i] < 0 || s.depthwise.pad_end[i] < 0)
      ctx.fail("pads must not be negative");
  }
  return s;
}

// One of the op's two epilogues: `bias` per channel (global row), then the activation named by
// the attribute `activation_attr` with the parameters in `params_attr`.
Epilogue readEpilogue(const KernelContext& ctx, const float* bias, const char* activation_attr,
                      const char* params_attr) {
  Epilogue ep;
  ep.bias = bias;
  ep.bias_per_row = true;
  readNodeActivation(ctx, ep, activation_attr, params_attr);
  return ep;
}

// E's rows [first_row, end_row) of one image, all channels, into `out` (planes `out_plane`
// floats apart): the expansion GEMM with its epilogue, over the rows' pixels only.
void expandRows(const ExpandDepthwiseShape& s, const float* image, const float* filters,
                const PackedMatrix& packed, const Epilogue& expand, int64_t first_row,
                int64_t end_row, float* out, int64_t out_plane, int threads) {
  const int64_t pixels = (end_row - first_row) * s.W;
  GemmParams p = gemmParams(s.E, pixels, s.C, filters, s.C, false, image + first_row * s.W,
                            s.H * s.W, false, out, out_plane);
  p.packed_a = &packed;
  p.epilogue = &expand;
  gemm(p, threads);
}

// Depthwise output rows [o0, o1) of one image from the E rows they read, expanded into the
// thread's band buffer first.
void runBand(const ExpandDepthwiseShape& s, const float* image, const float* filters,
             const PackedMatrix& packed, const Epilogue& expand, const float* depthwise_filters,
             const Epilogue& depthwise, int64_t o0, int64_t o1, float* y_image) {
  const Window& win = s.depthwise;
  const int64_t SH = win.strides[0], KH = win.kernel[0], pad_top = win.pad_begin[0];
  const int64_t first_row = std::max<int64_t>(0, o0 * SH - pad_top);
  const int64_t end_row = std::min(s.H, (o1 - 1) * SH - pad_top + KH);
  const int64_t plane = (end_row - first_row) * s.W;
  float* rows = bandScratch(s.E * plane);
  expandRows(s, image, filters, packed, expand, first_row, end_row, rows, plane, 1);
  // The band is a plane of its own to the depthwise kernel, padded only where it meets the
  // image's top or bottom edge.
  Window band = win;
  band.in = {end_row - first_row, s.W};
  band.pad_begin[0] = std::max<int64_t>(0, pad_top - o0 * SH);
  band.pad_end[0] = std::max<int64_t>(0, (o1 - 1) * SH - pad_top + KH - s.H);
  band.out = {o1 - o0, win.out[1]};
  const int64_t OW = win.out[1];
  for (int64_t c = 0; c < s.E; ++c) {
    depthwisePlaneAvx512(rows + c * plane, depthwise_filters + c * s.taps(),
                         y_image + c * s.outPixels() + o0 * OW, band, depthwise, c, nullptr);
  }
}

// The fallback: each image's whole E, then its planes' depthwise convolutions, as the two nodes
// would run them.
void runWholeImages(const ExpandDepthwiseShape& s, const float* x, const float* filters,
                    const PackedMatrix& packed, const Epilogue& expand,
                    const float* depthwise_filters, const Epilogue& depthwise, float* y,
                    int threads) {
  const int64_t in_pixels = s.H * s.W, out_pixels = s.outPixels();
  float* expanded = expandedImageScratch(s.E * in_pixels);
  for (int64_t n = 0; n < s.N; ++n) {
    expandRows(s, x + n * s.C * in_pixels, filters, packed, expand, 0, s.H, expanded, in_pixels,
               threads);
    float* y_image = y + n * s.E * out_pixels;
    parallelFor(s.E, threads, 4, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const float* e = expanded + c * in_pixels;
        const float* f = depthwise_filters + c * s.taps();
        float* out = y_image + c * out_pixels;
        if (depthwisePlaneAvx512(e, f, out, s.depthwise, depthwise, c, nullptr)) continue;
        depthwise2d(e, f, out, s.depthwise);
        depthwise.apply(out, out_pixels, c, 0, 1, out_pixels);
      }
    });
  }
}

void runExpandDepthwiseConv(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  const HostTensor& b = ctx.requireInput(2);
  const HostTensor& dw = ctx.requireInput(3);
  const HostTensor& db = ctx.requireInput(4);
  requireFloat32(ctx, x, "X");
  requireFloat32(ctx, w, "W");
  requireFloat32(ctx, b, "B");
  requireFloat32(ctx, dw, "DW");
  requireFloat32(ctx, db, "DB");
  const ExpandDepthwiseShape s = readShape(ctx, x, w, b, dw, db);
  const Epilogue expand =
      readEpilogue(ctx, b.data<float>(), "expand_activation", "expand_activation_params");
  const Epilogue depthwise =
      readEpilogue(ctx, db.data<float>(), "activation", "activation_params");

  HostTensor& y = ctx.allocateOutput(0, DType::Float, {s.N, s.E, s.outRows(), s.depthwise.out[1]});
  if (y.numel() == 0) return;

  // W as the GEMM's A operand: packed once per session when it is a constant (the executor may
  // then let W's own bytes go, and the GEMM reads only the packed copy), else once per run
  // rather than once per band.
  const PackedWeights* cached =
      cachedPackedWeights(ctx, 1, kExpansionFiltersVariant, [&](PackedWeights& pw) {
        pw.parts.push_back(packGemmA(s.E, s.C, ctx.input(1)->data<float>(), s.C, 1));
      });
  PackedMatrix per_run;
  if (!cached) per_run = packGemmA(s.E, s.C, w.data<float>(), s.C, 1);
  const PackedMatrix& packed = cached ? cached->parts[0] : per_run;
  // Null once the executor has let a constant W go; the GEMM reads `packed` then, which
  // cachedPackedWeights has just made for the micro-kernel in use.
  const float* filters = cached ? ctx.input(1)->data<float>() : w.data<float>();

  const float* xp = x.data<float>();
  const float* dwp = dw.data<float>();
  float* yp = y.mutableData<float>();
  const Window& win = s.depthwise;
  const bool bands_take = depthwisePlaneAvx512Takes(win) && win.pad_begin[0] < win.kernel[0] &&
                          win.pad_end[0] < win.kernel[0];
  if (!bands_take) {
    runWholeImages(s, xp, filters, packed, expand, dwp, depthwise, yp, ctx.numThreads());
    return;
  }
  const int64_t OH = s.outRows(), bands = bandsPerImage(s.N, OH, ctx.numThreads());
  const int64_t in_pixels = s.H * s.W, out_pixels = s.outPixels();
  parallelFor(s.N * bands, ctx.numThreads(), 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / bands, band = t % bands;
      runBand(s, xp + n * s.C * in_pixels, filters, packed, expand, dwp, depthwise,
              OH * band / bands, OH * (band + 1) / bands, yp + n * s.E * out_pixels);
    }
  });
}

}  // namespace
}  // namespace cpu

void registerExpandDepthwiseConvKernels(KernelRegistry& r) {
  r.add({"fusectl", "ExpandDepthwiseConv", 1, 1000, cpu::runExpandDepthwiseConv});
}

}  // namespace fusectl::kernels
