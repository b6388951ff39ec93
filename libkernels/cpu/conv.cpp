// Conv, ConvTranspose, ConvInteger, QLinearConv and the fused FusedConv (domain "fusectl").
//
// Float Conv = im2col + the packed GEMM (gemm_micro.h), one GEMM per image, group and chunk of
// output pixels:
//   Y_g[Mg x P] = W_g[Mg x Cg*k] * col[Cg*k x P]   (P output pixels, k kernel taps)
// For 1-D and 2-D windows the im2col matrix is never written: the GEMM packs its panels straight
// from phase planes of the input (conv_implicit.h); otherwise (and when forced) col is written
// in chunks of about 1 MiB, so it is still cached when the GEMM packs it. There are three
// shortcuts: a 1x1/stride-1/unpadded conv multiplies X directly (no im2col), a
// depthwise 2-D conv (one input channel per group) runs a direct loop, and a 3x3 stride-1 conv
// with constant weights and enough channels runs Winograd F(2x2, 3x3) or, on planes of 28x28
// and up, F(4x4, 3x3) (conv_winograd.h: 2.25x or 4x fewer multiplications, its filters
// transformed once per session). The bias, and for
// FusedConv the residual and activation, are the GEMM's epilogue, applied in the micro-kernel's
// registers: a fused conv runs the same loops as the plain one. Constant weights are packed
// once per session into the GEMM's A panels (gemm_packed_state.h).
// ConvTranspose = GEMM then col2im: col[Mg*k x P_in] = W_g^T * X_g, scattered into Y.
// The integer convs subtract the zero points into int32 operands and use the int32 GEMM.
//
// FusedConv (domain "fusectl", since_opset 1): Y = activation(Conv(X, W, B) + Z)
//   inputs:  X, W, B (optional, [M]), Z (optional residual, exactly Y's shape)
//   attributes: Conv's (auto_pad, dilations, group, kernel_shape, pads, strides), plus
//     activation        string: Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Silu,
//                       Gelu, Tanh; absent or "" means none
//     activation_params floats: Clip [min, max] (default -inf, +inf), LeakyRelu [alpha]
//                       (0.01), HardSigmoid [alpha, beta] (0.2, 0.5); others take none
//   Also registered under the portable spellings FusedConv[_NoBias][_Add][_<activation>] that
//   exported models use (epilogue.h, docs/ops.md); those list their inputs without gaps.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "fusectl/kernels/epilogue.h"
#include "channels_last.h"
#include "conv_depthwise.h"
#include "conv_direct.h"
#include "conv_few_outputs.h"
#include "conv_pixel_rows.h"
#include "conv_implicit.h"
#include "conv_winograd.h"
#include "gemm_micro.h"
#include "gemm_packed_state.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// Shapes of one convolution: X [N, C, in...], W [M, C/group, k...], Y [N, M, out...].
struct ConvDims {
  int64_t N = 0, C = 0, M = 0, group = 1;
  Window win;
  int64_t inPixels() const { return product(win.in); }
  int64_t outPixels() const { return product(win.out); }
  int64_t kernelTaps() const { return product(win.kernel); }
};

ConvDims convDims(const KernelContext& ctx, const HostTensor& x, const HostTensor& w) {
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  if (w.rank() != x.rank()) ctx.fail("W must have the same rank as X");
  ConvDims d;
  d.N = x.dim(0);
  d.C = x.dim(1);
  d.M = w.dim(0);
  d.group = ctx.attrInt("group", 1);
  if (d.group <= 0 || d.C % d.group != 0 || d.M % d.group != 0) {
    ctx.fail("group " + std::to_string(d.group) + " must divide the input channels (" +
             std::to_string(d.C) + ") and the output channels (" + std::to_string(d.M) + ")");
  }
  if (w.dim(1) != d.C / d.group) {
    ctx.fail("W has " + std::to_string(w.dim(1)) + " input channels per group, expected " +
             std::to_string(d.C / d.group));
  }
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> kernel(w.dims().begin() + 2, w.dims().end());
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (!ks.empty() && ks != kernel) ctx.fail("kernel_shape does not match W's spatial dims");
  d.win = resolveWindow(ctx, std::move(in), std::move(kernel), false);
  return d;
}

std::vector<int64_t> outputDims(const ConvDims& d) {
  std::vector<int64_t> dims = {d.N, d.M};
  dims.insert(dims.end(), d.win.out.begin(), d.win.out.end());
  return dims;
}

bool isPointwise(const Window& w) {
  for (size_t i = 0; i < w.rank(); ++i) {
    if (w.kernel[i] != 1 || w.strides[i] != 1 || w.pad_begin[i] != 0 || w.pad_end[i] != 0) {
      return false;
    }
  }
  return true;
}

// Lays out the receptive fields of one group's channels for output pixels [p0, p1) as a
// [Cg*k, p1-p0] matrix (zero outside the input). `x` points at the group's first channel.
// The output columns [lo, hi) of a row whose input column ow * SW + off lies in [0, W).
std::pair<int64_t, int64_t> insideColumns(int64_t off, int64_t W, int64_t OW, int64_t SW) {
  int64_t lo = off >= 0 ? 0 : (-off + SW - 1) / SW;
  int64_t hi = W - off > 0 ? (W - off + SW - 1) / SW : 0;
  lo = std::min(lo, OW);
  return {lo, std::max(std::min(hi, OW), lo)};
}

// Output columns [a, b) of one im2col row from `in_row` (the input row, already offset by the
// tap's column): a copy (a strided gather for SW > 1) inside [inside.first, inside.second),
// zeros outside.
template <typename T>
void im2colRow(T* o, const T* in_row, int64_t a, int64_t b, std::pair<int64_t, int64_t> inside,
               int64_t SW) {
  const int64_t lo = std::min(std::max(inside.first, a), b);
  const int64_t hi = std::max(std::min(inside.second, b), lo);
  std::fill(o + a, o + lo, T(0));
  if (SW == 1) {
    std::memcpy(o + lo, in_row + lo, (hi - lo) * sizeof(T));
  } else if constexpr (std::is_same_v<T, float>) {
    vec::gatherStrided(in_row + lo * SW, SW, o + lo, hi - lo);
  } else {
    for (int64_t ow = lo; ow < hi; ++ow) o[ow] = in_row[ow * SW];
  }
  std::fill(o + hi, o + b, T(0));
}

template <typename T>
void im2col(const T* x, int64_t channels, const Window& w, int64_t p0, int64_t p1, T* col) {
  const size_t r = w.rank();
  const int64_t in_pixels = product(w.in), cols = p1 - p0;
  const int64_t taps = product(w.kernel);
  if (cols <= 0) return;
  // The last two axes are rows and columns of a plane (1-D is one row: height 1); the axes
  // before them (3-D and up) pick the plane, once per output plane, or none (zeros) when the
  // tap falls outside. Each output row is a copy (memcpy, or a strided gather) with zeros where
  // the window leaves the input. (3-D once decoded and bounds-checked every element: a 3x3x3
  // convolution on [64, 8, 28, 28] spent 85% of its time there, r3d_18 3.4x ONNX Runtime's.)
  const size_t lead = r >= 2 ? r - 2 : 0;
  const auto rowAxis = [&](const std::vector<int64_t>& v, int64_t flat) {
    return r >= 2 ? v[r - 2] : flat;
  };
  const int64_t H = rowAxis(w.in, 1), W = w.in[r - 1];
  const int64_t OH = rowAxis(w.out, 1), OW = w.out[r - 1];
  const int64_t SH = rowAxis(w.strides, 1), SW = w.strides[r - 1];
  const int64_t DH = rowAxis(w.dilations, 1), DW = w.dilations[r - 1];
  const int64_t PH = rowAxis(w.pad_begin, 0), PW = w.pad_begin[r - 1];
  const int64_t plane_in = H * W;
  const int64_t row_first = p0 / OW, row_last = (p1 - 1) / OW;
  std::vector<int64_t> tap(r);
  for (int64_t c = 0; c < channels; ++c) {
    const T* channel = x + c * in_pixels;
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t rem = t, i = static_cast<int64_t>(r) - 1; i >= 0; --i) {
        tap[static_cast<size_t>(i)] = rem % w.kernel[static_cast<size_t>(i)];
        rem /= w.kernel[static_cast<size_t>(i)];
      }
      const int64_t kh = r >= 2 ? tap[r - 2] : 0, kw = tap[r - 1];
      T* out = col + (c * taps + t) * cols - p0;  // indexed by pixel
      const int64_t off = kw * DW - PW;
      const std::pair<int64_t, int64_t> inside_columns = insideColumns(off, W, OW, SW);
      for (int64_t q = row_first / OH; q <= row_last / OH; ++q) {
        // The input plane: each leading axis's output position, strided and shifted by the tap.
        int64_t outer = q, in_plane = 0, stride = 1;
        bool inside = true;
        for (size_t i = lead; i-- > 0;) {
          const int64_t opos = outer % w.out[i];
          outer /= w.out[i];
          const int64_t pos = opos * w.strides[i] - w.pad_begin[i] + tap[i] * w.dilations[i];
          if (pos < 0 || pos >= w.in[i]) {
            inside = false;
            break;
          }
          in_plane += pos * stride;
          stride *= w.in[i];
        }
        const T* plane = channel + in_plane * plane_in;
        const int64_t first = std::max(row_first, q * OH), last = std::min(row_last, q * OH + OH - 1);
        for (int64_t row = first; row <= last; ++row) {
          const int64_t a = row == row_first ? p0 - row * OW : 0;
          const int64_t b = row == row_last ? p1 - row * OW : OW;
          T* o = out + row * OW;
          const int64_t ih = (row - q * OH) * SH - PH + kh * DH;
          if (!inside || ih < 0 || ih >= H) {
            std::fill(o + a, o + b, T(0));
            continue;
          }
          im2colRow(o, plane + ih * W + off, a, b, inside_columns, SW);
        }
      }
    }
  }
}

// Output pixels per im2col chunk: the chunk's [K x cols] matrix stays near 1 MiB, so it is still
// in L2 when the GEMM packs it, and the scratch stays small however big the image.
int64_t im2colChunk(int64_t K, int64_t P) {
  const int64_t cols = std::max<int64_t>(64, (int64_t{1} << 18) / std::max<int64_t>(K, 1));
  return std::min(P, cols / 16 * 16);
}

}  // namespace

// Depthwise 2-D (or 1-D) conv: each output channel reads one input channel. y is zeroed here.
// Declared in conv_depthwise.h for the fused expansion's fallback (conv_expand_depthwise.cpp).
void depthwise2d(const float* x, const float* w, float* y, const Window& win) {
  const size_t r = win.rank();
  const int64_t H = r == 2 ? win.in[0] : 1, W = win.in[r - 1];
  const int64_t OH = r == 2 ? win.out[0] : 1, OW = win.out[r - 1];
  const int64_t KH = r == 2 ? win.kernel[0] : 1, KW = win.kernel[r - 1];
  const int64_t SH = r == 2 ? win.strides[0] : 1, SW = win.strides[r - 1];
  const int64_t DH = r == 2 ? win.dilations[0] : 1, DW = win.dilations[r - 1];
  const int64_t PH = r == 2 ? win.pad_begin[0] : 0, PW = win.pad_begin[r - 1];
  std::fill(y, y + OH * OW, 0.f);
  for (int64_t kw = 0; kw < KW; ++kw) {
    const int64_t off = kw * DW - PW;
    int64_t ow_lo = off >= 0 ? 0 : (-off + SW - 1) / SW;
    int64_t ow_hi = W - off > 0 ? (W - off + SW - 1) / SW : 0;
    ow_lo = std::min(ow_lo, OW);
    ow_hi = std::max(std::min(ow_hi, OW), ow_lo);
    for (int64_t oh = 0; oh < OH; ++oh) {
      float* __restrict o = y + oh * OW;
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        const float wv = w[kh * KW + kw];
        const float* __restrict row = x + ih * W + off;
        if (SW == 1) {
          int64_t ow = ow_lo;
          for (; ow + 8 <= ow_hi; ow += 8) {  // fixed trip count: vectorized at -O2
            for (int64_t j = 0; j < 8; ++j) o[ow + j] += wv * row[ow + j];
          }
          for (; ow < ow_hi; ++ow) o[ow] += wv * row[ow];
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) o[ow] += wv * row[ow * SW];
        }
      }
    }
  }
}

namespace {

// An im2col chunk's scratch, reused by the thread across calls (im2col writes every element).
float* im2colScratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  return growScratch(buffer, floats);
}

// Whether the convolution runs plane by plane, each output channel from its one input channel
// (depthwise, and channel multipliers): more outputs per input channel, such as a stem from one
// channel (a grayscale image; wav2vec 2.0's first layer over the waveform, 1 -> 512 with k=10),
// are a GEMM with the taps as its depth. Measured one thread, minimum of 30 (ms, planes / GEMM):
// 1 -> 512 k=10 s5 over 16000 samples 6.4 / 1.2; 1 -> 16 k3 1-D 0.092 / 0.030; 1 -> 64 7x7 s2
// at 224 4.0 / 1.0; 1 -> 32 3x3 s2 0.24 / 0.13; 5x5 s1 0.36 / 0.20; but 3x3 s1 at 112 for 8, 16,
// 32 and 64 outputs 0.048 / 0.150, 0.065 / 0.099, 0.52 / 0.78 (at 224), 0.254 / 0.242.
// (A 1-D depthwise convolution keeps the plain loop below: the vectorised row kernels, fed
// one row, measured 1.1-1.5x slower on ConvTasNet's and Conformer's shapes.)
bool perChannelProduct(const ConvDims& d) {
  if (d.C != d.group || d.win.rank() > 2) return false;
  const int64_t Mg = d.M / d.group;
  if (Mg < 8) return true;
  const Window& w = d.win;
  return w.rank() == 2 && Mg < 64 && w.kernel[0] * w.kernel[1] <= 9 && w.strides[0] == 1 &&
         w.strides[1] == 1;
}

// The direct product's view of a 2-D undilated convolution (directApplies): one group's
// (all of it when there is one group).
DirectConvShape directShape(const ConvDims& d) {
  DirectConvShape s;
  s.N = d.N;
  s.C = d.C / d.group;
  s.M = d.M / d.group;
  s.H = d.win.in[0];
  s.W = d.win.in[1];
  s.KH = d.win.kernel[0];
  s.KW = d.win.kernel[1];
  s.SH = d.win.strides[0];
  s.SW = d.win.strides[1];
  s.pad_top = d.win.pad_begin[0];
  s.pad_left = d.win.pad_begin[1];
  s.OH = d.win.out[0];
  s.OW = d.win.out[1];
  return s;
}

bool directApplies(const ConvDims& d) {
  const Window& w = d.win;
  if (w.rank() != 2) return false;
  for (size_t i = 0; i < 2; ++i) {
    if (w.dilations[i] != 1 || w.pad_begin[i] < 0 || w.pad_end[i] < 0) return false;
  }
  return true;
}

// Grouped convolutions with 8-32 output channels per group (RegNet's 8 and 16, ResNeXt's 8-32):
// each group's GEMM (16 x pixels x 144 deep for RegNetX) is too small for the GEMM's blocking to
// pay for packing its pixels; the direct product broadcasts each tap from the padded input. One
// thread, minima of 3 against the GEMM path: RegNetX-400MF at 96x96 3.08 -> 2.56 ms (its 3x3
// groups 1.6-2.1x of ONNX Runtime's time node by node before, 0.9-1.4x after), RegNetY-400MF 2.92
// -> 2.76; ResNeXt-50 32x4d's groups of 32 1.03 -> 0.65-0.82 ms, of 8 and 16 level, of 4 (a
// quarter of the 32-channel register tile) 0.62 -> 1.0-1.5 ms, which keep the GEMM.
bool groupedDirectPays(const ConvDims& d) {
  const int64_t Mg = d.M / d.group;
  return d.group > 1 && Mg >= 8 && Mg <= 32 && d.C / d.group > 1 &&
         directConvRuns(directShape(d));
}

// How convFloat multiplies: which product the packed weights were made for.
enum class ConvProduct { ChannelRows, PixelRows, Winograd, Direct, FewOutputs };

// x [N][pixels][C] (channels-last) as planes, [N][C][pixels].
void planesFromChannelsLast(const float* x, int64_t N, int64_t C, int64_t pixels, float* out) {
  for (int64_t n = 0; n < N; ++n) {
    const float* src = x + n * pixels * C;
    float* dst = out + n * C * pixels;
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t c = 0; c < C; ++c) dst[c * pixels + p] = src[p * C + c];
  }
}

// Channels-last sides (HostTensor::channelsLast), which only a depthwise convolution and a
// one-group pointwise one take (runConv converts any other's input to planes first).
struct ConvLayouts {
  bool x_nhwc = false;
  bool y_nhwc = false;
};

// Float convolution with an epilogue (bias per output channel, residual laid out like Y).
// `packed_w`, when set, holds the packed weights for `product` (each group's W_g as the GEMM's A
// operand for ChannelRows); `w` may then be nullptr (a half weight has no float32 copy after the
// run that packed it).
void convFloat(const float* x, const float* w, float* y, const ConvDims& d, Epilogue ep,
               int threads, const PackedWeights* packed_w, ConvProduct product,
               const ImplicitIm2col* implicit, ConvLayouts layouts = {}) {
  const int64_t Cg = d.C / d.group, Mg = d.M / d.group;
  const int64_t taps = d.kernelTaps(), K = Cg * taps;
  const int64_t in_pixels = d.inPixels(), P = d.outPixels();
  const float* residual = ep.residual;
  ep.bias_per_row = true;
  ep.ld_residual = P;
  if (d.N == 0 || d.M == 0 || P == 0) return;

  // Depthwise with a channels-last side: 16 channels a vector, no transposes on that side;
  // threads split each image's output rows.
  if (Cg == 1 && Mg == 1 && (layouts.x_nhwc || layouts.y_nhwc)) {
    const int64_t OH = d.win.out[0];
    const int64_t parts = std::min<int64_t>(OH, std::max(1, threads));
    parallelFor(d.N * parts, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t np = b; np < e; ++np) {
        const int64_t n = np / parts, part = np % parts;
        depthwiseChannelsLast(x + n * d.C * in_pixels, layouts.x_nhwc, w, y + n * d.M * P,
                              layouts.y_nhwc, d.win, ep, d.M,
                              residual ? residual + n * d.M * P : nullptr, OH * part / parts,
                              OH * (part + 1) / parts);
      }
    });
    return;
  }

  if (product == ConvProduct::FewOutputs) {
    convFewOutputs(x, w, y, d.N, d.C, d.M, d.win, ep, threads);
    return;
  }

  if (product == ConvProduct::Direct) {
    if (d.group == 1) {
      convDirect(x, y, directShape(d), ep, packed_w->parts[0], threads);
      return;
    }
    // Groups: one image's group at a time per thread, each its own direct product.
    DirectConvShape one = directShape(d);
    one.N = 1;
    parallelFor(d.N * d.group, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        const int64_t n = ng / d.group, g = ng % d.group;
        const int64_t first = n * d.M + g * Mg;  // the group's first output plane
        Epilogue eg = ep;
        eg.bias = ep.bias ? ep.bias + g * Mg : nullptr;
        eg.residual = residual ? residual + first * P : nullptr;
        // The next group's filters (this thread's next task) are fetched while this one runs.
        const PackedMatrix* next =
            ng + 1 < e ? &packed_w->parts[static_cast<size_t>((ng + 1) % d.group)] : nullptr;
        convDirect(x + (n * d.C + g * Cg) * in_pixels, y + first * P, one, eg,
                   packed_w->parts[static_cast<size_t>(g)], 1, next);
      }
    });
    return;
  }

  if (product == ConvProduct::Winograd) {
    Winograd3x3Shape s;
    s.N = d.N;
    s.C = d.C;
    s.M = d.M;
    s.H = d.win.in[0];
    s.W = d.win.in[1];
    s.OH = d.win.out[0];
    s.OW = d.win.out[1];
    s.pad_top = d.win.pad_begin[0];
    s.pad_left = d.win.pad_begin[1];
    convWinograd3x3(x, y, s, ep, packed_w->parts, threads);
    return;
  }

  // Depthwise: direct loop, parallel over (image, output channel); AVX-512 rows with the
  // epilogue in registers where the CPU has it (conv_depthwise.h).
  if (perChannelProduct(d)) {
    // Small planes with one output channel per input channel: 16 channels per vector.
    if (Mg == 1 && depthwiseChannelsPay(d.win)) {
      const int64_t blocks = (d.M + 15) / 16;
      parallelFor(d.N * blocks, threads, 1, [&](int64_t b, int64_t e) {
        for (int64_t nb = b; nb < e; ++nb) {
          const int64_t n = nb / blocks, m0 = nb % blocks * 16;
          const int64_t count = std::min<int64_t>(16, d.M - m0), at = n * d.M + m0;
          depthwiseChannelsAvx512(x + at * in_pixels, w + m0 * taps, y + at * P, d.win, ep, m0,
                                  count, residual ? residual + at * P : nullptr);
        }
      });
      return;
    }
    parallelFor(d.N * d.M, threads, 4, [&](int64_t b, int64_t e) {
      for (int64_t nm = b; nm < e; ++nm) {
        const int64_t n = nm / d.M, m = nm % d.M, g = m / Mg;
        float* yp = y + nm * P;
        const float* xp = x + (n * d.C + g) * in_pixels;
        const float* zp = residual ? residual + nm * P : nullptr;
        // The next plane's input, fetched while this one is computed (NextPlane says why):
        // measured 10-20% off the 112x112 and 56x56 planes of EfficientNet-B0 in the model
        // (bench/README). The channel-block path above does without: its planes are small
        // enough to be in cache already, and asking for them again cost it 5%.
        NextPlane next;
        if (nm + 1 < e) {
          const int64_t after = nm + 1, next_n = after / d.M, next_g = after % d.M / Mg;
          next = {x + (next_n * d.C + next_g) * in_pixels, in_pixels * 4};
        }
        if (depthwisePlaneAvx512(xp, w + m * taps, yp, d.win, ep, m, zp, next)) continue;
        depthwise2d(xp, w + m * taps, yp, d.win);
        Epilogue e2 = ep;
        e2.residual = residual ? residual + n * d.M * P : nullptr;
        if (!e2.empty()) e2.apply(yp, P, m, 0, 1, P);
      }
    });
    return;
  }

  // Implicit im2col (conv_implicit.h): each (image, group)'s phase planes, then its GEMMs pack
  // their pixel operand from them. The planes are about one image's input per thread at a time:
  // where the (image, group) pairs split evenly over the threads, each thread builds and
  // multiplies whole ones; otherwise they go one at a time, the threads splitting the channels
  // of the planes and then the product (a pixels x channels GEMM over its channels, a channels x
  // pixels one in pixel chunks; runConv takes the last only when forced).
  if (implicit) {
    const ImplicitIm2col& layout = *implicit;
    const int64_t plane_floats = layout.planeFloats();
    const int64_t images = d.N * d.group;
    // (image, group) ng's pixels [p0, p1) from planes, with `gemm_threads` threads.
    const auto multiply = [&](int64_t ng, const float* planes, int64_t p0, int64_t p1,
                              int gemm_threads) {
      const int64_t n = ng / d.group, g = ng % d.group;
      Epilogue en = ep;
      en.residual = residual ? residual + n * d.M * P : nullptr;
      const ImplicitIm2col::Source source(layout, planes, p0);
      if (product == ConvProduct::PixelRows) {  // one group (conv_pixel_rows.h)
        thread_local std::vector<float> pixel_rows;
        GemmParams pt = gemmParams(p1 - p0, Mg, K, nullptr, 0, false, w, K, true,
                                   growScratch(pixel_rows, (p1 - p0) * Mg), Mg);
        pt.a_source = &source;
        pt.packed_b = &packed_w->parts[0];
        gemm(pt, gemm_threads);
        storeChannelRows(pixel_rows.data(), p1 - p0, Mg, Mg, y + n * d.M * P + p0, P, en, p0);
        return;
      }
      GemmParams p = gemmParams(Mg, p1 - p0, K, w ? w + g * Mg * K : nullptr, K, false, nullptr,
                                0, false, y + (n * d.M + g * Mg) * P + p0, P);
      p.b_source = &source;
      p.epilogue = &en;
      p.epilogue_row0 = g * Mg;
      p.epilogue_col0 = p0;
      if (packed_w) p.packed_a = &packed_w->parts[static_cast<size_t>(g)];
      gemm(p, gemm_threads);
    };
    if (images % threads == 0) {
      parallelFor(images, threads, 1, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> plane_buffer;
        float* planes = growScratch(plane_buffer, plane_floats);
        for (int64_t ng = b; ng < e; ++ng) {
          layout.buildPlanes(x + ng * Cg * in_pixels, planes, 0, Cg);
          multiply(ng, planes, 0, P, 1);
        }
      });
      return;
    }
    thread_local std::vector<float> plane_buffer;
    float* planes = growScratch(plane_buffer, plane_floats);
    const int64_t chunks = std::min<int64_t>(threads, P);
    const int64_t chunk = (P + chunks - 1) / chunks;
    for (int64_t ng = 0; ng < images; ++ng) {
      parallelFor(Cg, threads, 8, [&](int64_t c0, int64_t c1) {
        layout.buildPlanes(x + ng * Cg * in_pixels, planes, c0, c1);
      });
      if (product == ConvProduct::PixelRows) {
        multiply(ng, planes, 0, P, threads);
        continue;
      }
      parallelFor(chunks, threads, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          if (t * chunk < P) multiply(ng, planes, t * chunk, std::min(P, (t + 1) * chunk), 1);
        }
      });
    }
    return;
  }

  // Tasks are (image, group, pixel chunk). With enough of them, each thread takes whole tasks
  // and runs single-threaded GEMMs; otherwise the GEMM itself is split across threads. The
  // chunk count is rounded up to a multiple of the thread count so that no thread idles.
  const bool pointwise = isPointwise(d.win);
  int64_t chunk = pointwise ? P : im2colChunk(K, P);
  int64_t chunks = (P + chunk - 1) / chunk;
  const bool task_parallel = d.N * d.group * chunks >= threads;
  if (!pointwise && task_parallel && threads > 1 && (d.N * d.group) % threads != 0) {
    const int64_t even = (chunks + threads - 1) / threads * threads;
    chunk = std::max<int64_t>(16, (P + even - 1) / even);
    chunks = (P + chunk - 1) / chunk;
  }
  const int64_t tasks = d.N * d.group * chunks;
  auto task_group = [&](int64_t task) { return (task / chunks) % d.group; };
  parallelFor(tasks, task_parallel ? threads : 1, 1, [&](int64_t t0, int64_t t1) {
    float* col = pointwise ? nullptr : im2colScratch(K * std::min(chunk, P));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / (d.group * chunks), g = task_group(t);
      const int64_t p0 = (t % chunks) * chunk, p1 = std::min(P, p0 + chunk);
      Epilogue en = ep;
      en.residual = residual ? residual + n * d.M * P : nullptr;
      const float* xg = x + (n * d.C + g * Cg) * in_pixels;
      // The pixel operand, K x pixels: in place for a pointwise conv (channels-last: one
      // pixel's K channels contiguous, a transposed operand), else the im2col chunk.
      const float* bmat = layouts.x_nhwc ? x + (n * in_pixels + p0) * d.C : xg + p0;
      int64_t ldb = layouts.x_nhwc ? d.C : P;
      const bool pixels_major = layouts.x_nhwc;
      if (!pointwise) {
        im2col(xg, Cg, d.win, p0, p1, col);
        bmat = col;
        ldb = p1 - p0;
      }
      if (product == ConvProduct::PixelRows) {  // one group (conv_pixel_rows.h)
        if (layouts.y_nhwc) {  // the pixels x channels product is the channels-last output
          Epilogue ec = en;
          ec.bias_per_row = false;
          GemmParams pt = gemmParams(p1 - p0, Mg, K, bmat, ldb, !pixels_major, w, K, true,
                                     y + (n * P + p0) * d.M, d.M);
          pt.packed_b = &packed_w->parts[0];
          pt.a_in_place = pixels_major;
          pt.epilogue = &ec;
          pt.epilogue_row0 = p0;
          gemm(pt, task_parallel ? 1 : threads);
          continue;
        }
        thread_local std::vector<float> pixel_rows;
        GemmParams pt = gemmParams(p1 - p0, Mg, K, bmat, ldb, !pixels_major, w, K, true,
                                   growScratch(pixel_rows, (p1 - p0) * Mg), Mg);
        pt.packed_b = &packed_w->parts[0];
        pt.a_in_place = pixels_major;
        gemm(pt, task_parallel ? 1 : threads);
        storeChannelRows(pixel_rows.data(), p1 - p0, Mg, Mg, y + n * d.M * P + p0, P, en, p0);
        continue;
      }
      GemmParams p = gemmParams(Mg, p1 - p0, K, w ? w + g * Mg * K : nullptr, K, false, bmat, ldb,
                                pixels_major,
                                y + (n * d.M + g * Mg) * P + p0, P);
      p.epilogue = &en;
      p.epilogue_row0 = g * Mg;
      p.epilogue_col0 = p0;
      if (packed_w) {
        p.packed_a = &packed_w->parts[static_cast<size_t>(g)];
        // The next task's filters (this group's again for the next pixel chunk).
        if (t + 1 < t1) p.next_packed_a = &packed_w->parts[static_cast<size_t>(task_group(t + 1))];
      }
      gemm(p, task_parallel ? 1 : threads);
    }
  });
}

// Whether Winograd F(2x2, 3x3) can compute this convolution: 2-D, 3x3, stride 1, undilated,
// one group (any pads: the input transform reads zeros outside the input).
bool winogradShape(const ConvDims& d) {
  const Window& w = d.win;
  if (w.rank() != 2 || d.group != 1) return false;
  for (size_t i = 0; i < 2; ++i) {
    if (w.kernel[i] != 3 || w.strides[i] != 1 || w.dilations[i] != 1) return false;
    if (w.pad_begin[i] < 0 || w.pad_end[i] < 0) return false;
  }
  return true;
}

// The Winograd tile (2 or 4) where the shape allows it and it pays (or it is forced), for
// constant weights only: its transformed filters are made once per session; 0 for im2col.
int winogradTileFor(const KernelContext& ctx, const ConvDims& d) {
  const ConvAlgorithm forced = convForcedAlgorithm();
  if (forced == ConvAlgorithm::Im2col || forced == ConvAlgorithm::Implicit ||
      forced == ConvAlgorithm::Direct || !winogradShape(d) || !ctx.inputIsConstant(1)) {
    return 0;
  }
  if (forced == ConvAlgorithm::Winograd) return 2;
  if (forced == ConvAlgorithm::Winograd4) return 4;
  const int tile = winogradTile(d.C, d.M, d.win.out[0], d.win.out[1]);
  // F(2x2, 3x3) with 32 channels on one side multiplies 16 products only 32 deep or 32 wide per
  // tile position, and on a small map the transforms weigh as much: where the direct product
  // takes the map (directConvPays: at most 1024 pixels and 1M weights) it is faster. Node by
  // node, three alternating pairs, one thread (96x96 inputs): SqueezeNet's 32 -> 128 at 11x11
  // 0.082-0.085 -> 0.060-0.062 ms; DenseNet-121's 128 -> 32, six at 24x24 1.82-2.21 ->
  // 1.41-1.75 ms, twelve at 12x12 1.24-1.58 -> 0.82-1.08. With 64 channels and more on both
  // sides (GoogLeNet's 64 -> 192 at 24x24: 0.52 -> 0.68; ResNet-50's 256 -> 256 at 14x14, five
  // nodes, 6.1-6.7 -> 7.5-7.8 ms) Winograd stays ahead, but onto 64 pixels or fewer, whose
  // filters come from memory, its transformed ones are 16/9 of the direct product's: ResNet-50's
  // two 512 -> 512 at 7x7 3.48-3.68 -> 2.82-3.08 ms. That is a machine whose FMAs outrun its
  // memory (148 GFLOP/s on one core against a 15 GB/s triad: 9.9 FLOP a byte, where Winograd's
  // products there do 8). Where a 512-bit FMA runs as two halves (vec::fma512HalfWidth: Zen 4,
  // 117 GFLOP/s against 21 GB/s, 5.6 FLOP a byte) the FMAs bound both, and Winograd's 42% fewer
  // multiplications win: the same two nodes 2.38-2.43 (direct) -> 1.59-1.64 ms, Wide
  // ResNet-50-2's 256 -> 256 at 8x8 0.68-0.69 -> 0.48-0.50 (bench/README.md, "A Zen 4 host").
  const int64_t pixels = d.win.out[0] * d.win.out[1];
  const bool small_map_direct = pixels <= 64 && !vec::fma512HalfWidth();
  if (tile == 2 && (std::min(d.C, d.M) <= 32 || small_map_direct) && directApplies(d) &&
      directConvPays(directShape(d))) {
    return 0;
  }
  return tile;
}

// Shared by Conv and FusedConv: reads X, W, B (input 2) and, when fused, Z (input 3; see
// fusedOperands for the gapless spellings).
void runConv(KernelContext& ctx, bool fused) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  if (!isFloatComputeType(x.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(x.dtype())));
  }
  ConvDims d = convDims(ctx, x, w);
  const FusedOperands operands = fused ? fusedOperands(ctx)
                                        : FusedOperands{ctx.input(2), nullptr};
  const HostTensor* b = operands.bias;
  if (b && b->numel() != d.M) ctx.fail("B must have one value per output channel");
  const HostTensor* z = operands.residual;
  std::vector<int64_t> ydims = outputDims(d);
  if (z && z->dims() != ydims) ctx.fail("residual Z must have the output's shape");
  if (fused) {
    requireSameDType(ctx, x, "X", &w, "W");
    requireSameDType(ctx, x, "X", b, "B");
    requireSameDType(ctx, x, "X", z, "Z");
  }

  // Channels-last input and output (HostTensor::channelsLast; ConvLayouts): a depthwise
  // convolution takes either side so on the windows its channel blocks run, a one-group
  // pointwise one takes both (its product reads or writes pixel rows). Any other path gets
  // its input back in planes here.
  const bool depthwise = d.C == d.group && d.M == d.group && d.win.rank() == 2;
  const bool pointwise = d.group == 1 && d.win.rank() == 2 && isPointwise(d.win);
  ConvLayouts layouts;
  layouts.y_nhwc = ctx.channelsLastWanted(0) && !z && x.rank() == 4 &&
                   ((depthwise && depthwiseChannelsLastTakes(d.win)) || pointwise);
  layouts.x_nhwc = x.channelsLast() && x.rank() == 4;
  std::vector<float> planar_x;
  if (layouts.x_nhwc && !depthwise && !pointwise) {
    FloatView channels_last(x);
    planar_x.resize(static_cast<size_t>(x.numel()));
    planesFromChannelsLast(channels_last.data(), d.N, d.C, d.inPixels(), planar_x.data());
    layouts.x_nhwc = false;
  }

  FloatView xf(x), bf(b), zf(z);
  LazyFloatView wf(w);
  Epilogue ep;
  ep.bias = b ? bf.data() : nullptr;
  ep.residual = z ? zf.data() : nullptr;
  if (fused) {
    const Activation a = readNodeActivation(ctx, ep);
    checkFusedSpelling(ctx, "FusedConv", b != nullptr, z != nullptr, a);
  }
  // The weights, as the GEMM's A operand of each group, packed once per session.
  const int64_t Cg = d.C / d.group, Mg = d.M / d.group, K = Cg * d.kernelTaps();
  const ConvAlgorithm forced = convForcedAlgorithm();
  // 1-12 output channels (conv_few_outputs.h): X and W read as they are, nothing packed.
  // Against the GEMM paths, one thread, best of three medians: 3x3 windows 64 -> 4 channels at
  // 32x32 0.41 -> 0.10 ms, 64 -> 1 at 64x64 1.49 -> 0.19, 32 -> 3 at 128x128 3.34 -> 0.71,
  // 64 -> 8 at 112x112 5.27 -> 2.28, 64 -> 12 at 56x56 0.85 -> 0.70; 16 outputs and up measured
  // slower than the GEMM.
  const bool few_outputs = forced == ConvAlgorithm::Auto && !perChannelProduct(d) &&
                           !layouts.x_nhwc && !layouts.y_nhwc &&
                           fewOutputsConvTakes(d.group, d.M, d.win);
  const bool gemm_path = !perChannelProduct(d) && !few_outputs;
  const int winograd_tile = gemm_path ? winogradTileFor(ctx, d) : 0;
  const bool winograd = winograd_tile != 0;
  // The direct product (conv_direct.h) for constant weights where it measured faster (stride-2
  // windows and the stems), or wherever it can run when forced (elsewhere the others run).
  const bool direct =
      gemm_path && !winograd && !layouts.x_nhwc && !layouts.y_nhwc && ctx.inputIsConstant(1) &&
      directApplies(d) &&
      (forced == ConvAlgorithm::Direct ? directConvRuns(directShape(d))
                                       : forced == ConvAlgorithm::Auto &&
                                             (d.group > 1 ? groupedDirectPays(d)
                                                          : directConvPays(directShape(d))));
  const bool implicit_applies =
      gemm_path && !winograd && !direct && ImplicitIm2col::applies(d.win);
  const bool pixel_rows = gemm_path && !winograd && !direct && d.group == 1 &&
                          (pixelRowsPay(d.outPixels(), d.M, K) ||
                           (pointwise && (layouts.y_nhwc || layouts.x_nhwc)));
  // The packed-weights variant: the group count for channels-by-pixels, minus the tile for
  // Winograd, kPixelRowsVariant for pixels-by-channels, kDirectVariant minus its channel block
  // (which the input's size decides) for the direct product.
  constexpr int64_t kPixelRowsVariant = -100, kDirectVariant = -200;
  const PackedWeights* packed =
      gemm_path ? cachedPackedWeights(ctx, 1,
                                      winograd     ? -winograd_tile
                                      : direct     ? kDirectVariant - directConvBlockChannels(
                                                                          directShape(d))
                                      : pixel_rows ? kPixelRowsVariant
                                                   : d.group,
                                      [&](PackedWeights& pw) {
        if (direct) {
          for (int64_t g = 0; g < d.group; ++g)
            pw.parts.push_back(packDirectConvFilters(wf.data() + g * Mg * K, directShape(d)));
          return;
        }
        if (winograd) {
          pw.parts = packWinogradFilters(wf.data(), d.M, d.C, winograd_tile);
          return;
        }
        if (pixel_rows) {  // W^T as the GEMM's B operand: K x M, read column by column
          pw.parts.push_back(packGemmB(K, d.M, wf.data(), 1, K));
          if (!wf.inPlace()) pw.parts.back().source = nullptr;
          return;
        }
        for (int64_t g = 0; g < d.group; ++g) {
          pw.parts.push_back(packGemmA(Mg, K, wf.data() + g * Mg * K, K, 1));
          if (!wf.inPlace()) pw.parts.back().source = nullptr;  // that copy ends with this call
        }
      })
                : nullptr;
  // Cached half weights are read from their packed panels only: no float32 copy per run.
  const float* wp = packed && !wf.inPlace() ? nullptr : wf.data();
  // The channels-last output of a pointwise convolution is the pixels-by-channels product's,
  // which needs packed weights: weights that are not constant leave the output planar.
  if (pointwise && !packed) layouts.y_nhwc = false;
  const ConvProduct product = few_outputs  ? ConvProduct::FewOutputs
                              : !packed     ? ConvProduct::ChannelRows
                              : winograd    ? ConvProduct::Winograd
                              : direct      ? ConvProduct::Direct
                              : pixel_rows  ? ConvProduct::PixelRows
                                            : ConvProduct::ChannelRows;
  // The implicit im2col where it measured faster than the im2col matrix (bench_gemm --only
  // conv): one thread, or whole images per thread, or the pixels x channels product; with
  // pixel chunks of one image over two threads the channels x pixels product ran 1.2-1.6x
  // slower than the matrix (which each thread builds for its own chunk), so it keeps the matrix
  // unless forced.
  const int threads = ctx.numThreads();
  const bool implicit_pays =
      threads <= 1 || (d.N * d.group) % threads == 0 || product == ConvProduct::PixelRows;
  // Its planes (about one image's input, per thread) are kept by each thread for the next
  // convolution; beyond 64 MiB the im2col matrix's 1 MiB chunks are the lighter choice.
  constexpr int64_t kMaxPlaneFloats = int64_t{1} << 24;
  std::optional<ImplicitIm2col> implicit;
  if (implicit_applies && forced != ConvAlgorithm::Im2col &&
      (implicit_pays || forced == ConvAlgorithm::Implicit)) {
    implicit.emplace(d.win, Cg);
    if (implicit->planeFloats() > kMaxPlaneFloats) implicit.reset();
  }
  // A residual this node is the last to read becomes the output, written in place: every path
  // below that qualifies reads each residual element before it writes the same output element,
  // and the output then lands in lines that read just brought into cache instead of in a pooled
  // buffer last touched long ago (ResNet-50's 16 residual convolutions: about 1 ms a run here).
  const bool residual_in_place =
      z && x.dtype() == DType::Float && gemm_path &&
      ((product == ConvProduct::ChannelRows && gemmResidualMayAliasOutput(K)) ||
       (product == ConvProduct::PixelRows && storeChannelRowsResidualMayAliasOutput()));
  HostTensor* in_place =
      residual_in_place ? ctx.overwriteInput(static_cast<size_t>(operands.residual_input), 0,
                                             x.dtype(), ydims)
                        : nullptr;
  // A stride-1 depthwise convolution channels-last in and out may write over its input, where
  // one call covers all of an image's rows (depthwiseChannelsLastInPlace; convFloat splits an
  // image's rows among threads).
  if (!in_place && depthwise && layouts.x_nhwc && layouts.y_nhwc && !z &&
      x.dtype() == DType::Float && (ctx.numThreads() <= 1 || d.win.out[0] == 1) &&
      depthwiseChannelsLastInPlace(d.win)) {
    in_place = ctx.overwriteInput(0, 0, x.dtype(), ydims);
  }
  HostTensor& y = in_place ? *in_place : ctx.allocateOutput(0, x.dtype(), ydims);
  FloatSink ys(y);
  convFloat(planar_x.empty() ? xf.data() : planar_x.data(), wp, ys.data(), d, ep,
            ctx.numThreads(), packed, product, implicit ? &*implicit : nullptr, layouts);
  ys.commit();
  y.setChannelsLast(layouts.y_nhwc);
}

// ---- ConvTranspose ----

void runConvTranspose(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  if (!isFloatComputeType(x.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(x.dtype())));
  }
  if (x.rank() < 3 || w.rank() != x.rank()) ctx.fail("X and W must have the same rank >= 3");
  const size_t r = x.rank() - 2;
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t group = ctx.attrInt("group", 1);
  if (group <= 0 || C % group != 0 || w.dim(0) != C) {
    ctx.fail("W's first dim must equal X's channels, divisible by group");
  }
  const int64_t Cg = C / group, Mg = w.dim(1), M = Mg * group;
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> kernel(w.dims().begin() + 2, w.dims().end());
  std::vector<int64_t> ks = ctx.attrInts("kernel_shape");
  if (!ks.empty() && ks != kernel) ctx.fail("kernel_shape does not match W's spatial dims");
  std::vector<int64_t> strides = ctx.attrInts("strides", std::vector<int64_t>(r, 1));
  std::vector<int64_t> dil = ctx.attrInts("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> out_pad = ctx.attrInts("output_padding", std::vector<int64_t>(r, 0));
  std::vector<int64_t> out_shape = ctx.attrInts("output_shape");
  if (out_shape.size() == r + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (strides.size() != r || dil.size() != r || out_pad.size() < r ||
      (!out_shape.empty() && out_shape.size() != r)) {
    ctx.fail("strides, dilations, output_padding and output_shape need one value per spatial dim");
  }
  const std::string auto_pad = ctx.attrString("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  std::vector<int64_t> pads;
  if (!ctx.node().hasAttr("pads") && !same) pads.assign(2 * r, 0);
  if (ctx.node().hasAttr("pads")) pads = ctx.attrInts("pads");
  // Every geometry value within [lo, 2^30], so that the sums of products below (and the
  // positions in the scatter loop) cannot overflow: a file may ask for strides of 2^63 - 1,
  // and no tensor fusectl can hold has an axis near 2^30 anyway.
  constexpr int64_t kMaxGeometry = int64_t{1} << 30;
  auto bounded = [&](const std::vector<int64_t>& values, int64_t lo, const char* what) {
    for (int64_t v : values)
      if (v < lo || v > kMaxGeometry)
        ctx.fail(fmt::format("{} {} is outside [{}, 2^30]", what, v, lo));
  };
  bounded(strides, 1, "stride");
  bounded(dil, 1, "dilation");
  bounded(out_pad, 0, "output_padding");
  bounded(out_shape, 0, "output_shape");
  bounded(pads, -kMaxGeometry, "pad");
  bounded(in, 0, "input dim");
  bounded(kernel, 1, "kernel dim");
  std::vector<int64_t> out(r);
  if (pads.empty()) {  // SAME_*: pads from the requested (or stride-multiplied) output size
    pads.assign(2 * r, 0);
    for (size_t i = 0; i < r; ++i) {
      out[i] = out_shape.empty() ? in[i] * strides[i] : out_shape[i];
      const int64_t total = strides[i] * (in[i] - 1) + out_pad[i] +
                            (kernel[i] - 1) * dil[i] + 1 - out[i];
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor division
      pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[i + r] = total - pads[i];
    }
  } else {
    if (pads.size() != 2 * r) ctx.fail("pads must have two values per spatial dim");
    for (size_t i = 0; i < r; ++i) {
      out[i] = out_shape.empty() ? strides[i] * (in[i] - 1) + out_pad[i] +
                                       (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[i + r]
                                 : out_shape[i];
      if (out[i] < 0) ctx.fail("negative output size");
    }
  }
  const HostTensor* b = ctx.input(2);
  if (b && b->numel() != M) ctx.fail("B must have one value per output channel");

  std::vector<int64_t> ydims = {N, M};
  ydims.insert(ydims.end(), out.begin(), out.end());
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), ydims);
  FloatView xf(x), wf(w), bf(b);
  FloatSink ys(y);
  float* yp = ys.data();
  const int64_t taps = product(kernel), in_pixels = product(in), out_pixels = product(out);
  const int64_t Kcol = Mg * taps;
  std::fill(yp, yp + N * M * out_pixels, 0.f);
  std::vector<float> col(static_cast<size_t>(Kcol * in_pixels));
  std::vector<int64_t> tap(r), ipos(r);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < group; ++g) {
      const float* xg = xf.data() + (n * C + g * Cg) * in_pixels;
      const float* wg = wf.data() + g * Cg * Kcol;
      gemm(gemmParams(Kcol, in_pixels, Cg, wg, Kcol, true, xg, in_pixels, false, col.data(),
                      in_pixels),
           ctx.numThreads());
      // col2im: out position = in * stride - pad + tap * dilation.
      for (int64_t row = 0; row < Kcol; ++row) {
        const int64_t m = row / taps;
        for (int64_t rem = row % taps, i = static_cast<int64_t>(r) - 1; i >= 0; --i) {
          tap[i] = rem % kernel[i];
          rem /= kernel[i];
        }
        float* yplane = yp + (n * M + g * Mg + m) * out_pixels;
        const float* c = col.data() + row * in_pixels;
        if (r <= 2) {
          const int64_t IH = r == 2 ? in[0] : 1, IW = in[r - 1];
          const int64_t OH = r == 2 ? out[0] : 1, OW = out[r - 1];
          const int64_t SH = r == 2 ? strides[0] : 1, SW = strides[r - 1];
          const int64_t oh0 = r == 2 ? tap[0] * dil[0] - pads[0] : 0;
          const int64_t ow0 = tap[r - 1] * dil[r - 1] - pads[r - 1];
          for (int64_t ih = 0; ih < IH; ++ih) {
            const int64_t oh = ih * SH + oh0;
            if (oh < 0 || oh >= OH) continue;
            float* orow = yplane + oh * OW;
            const float* crow = c + ih * IW;
            for (int64_t iw = 0; iw < IW; ++iw) {
              const int64_t ow = iw * SW + ow0;
              if (ow >= 0 && ow < OW) orow[ow] += crow[iw];
            }
          }
          continue;
        }
        std::fill(ipos.begin(), ipos.end(), 0);
        for (int64_t p = 0; p < in_pixels; ++p) {
          int64_t idx = 0;
          bool inside = true;
          for (size_t i = 0; i < r; ++i) {
            const int64_t pos = ipos[i] * strides[i] - pads[i] + tap[i] * dil[i];
            if (pos < 0 || pos >= out[i]) {
              inside = false;
              break;
            }
            idx = idx * out[i] + pos;
          }
          if (inside) yplane[idx] += c[p];
          for (int64_t i = static_cast<int64_t>(r) - 1; i >= 0; --i) {
            if (++ipos[i] < in[i]) break;
            ipos[i] = 0;
          }
        }
      }
    }
  }
  if (b) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t m = 0; m < M; ++m) {
        float* plane = yp + (n * M + m) * out_pixels;
        const float bv = bf[m];
        for (int64_t p = 0; p < out_pixels; ++p) plane[p] += bv;
      }
    }
  }
  ys.commit();
}

// ---- integer convolutions ----

// Values of an int8/uint8 tensor minus its zero point (a scalar, or one value per index of the
// outermost dim: W's output channels), as int32.
std::vector<int32_t> shiftedInt32(const KernelContext& ctx, const HostTensor& t,
                                  const HostTensor* zp, const char* what) {
  const int64_t n = t.numel();
  std::vector<int32_t> out(static_cast<size_t>(n));
  int64_t zcount = zp ? zp->numel() : 0;
  if (zp && zp->dtype() != t.dtype()) {
    ctx.fail(std::string(what) + " zero point type must match its tensor's type");
  }
  auto zpAt = [&](int64_t i) -> int32_t {
    if (!zp) return 0;
    return zp->dtype() == DType::UInt8 ? zp->data<uint8_t>()[i] : zp->data<int8_t>()[i];
  };
  if (zp && (zcount == 0 || (zcount > 1 && (t.rank() == 0 || zcount != t.dim(0))))) {
    ctx.fail(std::string(what) + " zero point must be a scalar or have one value per channel");
  }
  const int64_t block = zcount > 1 ? n / t.dim(0) : n;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t z = zcount > 1 ? zpAt(i / block) : zpAt(0);
    const int32_t v = t.dtype() == DType::UInt8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
    out[static_cast<size_t>(i)] = v - z;
  }
  return out;
}

// int32 convolution of shifted operands; y is [N, M, out...] int32.
void convS32(const int32_t* x, const int32_t* w, int32_t* y, const ConvDims& d, int threads) {
  const int64_t Cg = d.C / d.group, Mg = d.M / d.group;
  const int64_t K = Cg * d.kernelTaps(), in_pixels = d.inPixels(), P = d.outPixels();
  const bool pointwise = isPointwise(d.win);
  std::vector<int32_t> col(pointwise ? 0 : static_cast<size_t>(K * P));
  for (int64_t n = 0; n < d.N; ++n) {
    for (int64_t g = 0; g < d.group; ++g) {
      const int32_t* xg = x + (n * d.C + g * Cg) * in_pixels;
      const int32_t* bmat = xg;
      if (!pointwise) {
        im2col(xg, Cg, d.win, 0, P, col.data());
        bmat = col.data();
      }
      gemmS32(Mg, P, K, w + g * Mg * K, K, bmat, P, y + (n * d.M + g * Mg) * P, P, false,
              threads);
    }
  }
}

void runConvInteger(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(1);
  checkInt8(ctx, x, "x");
  checkInt8(ctx, w, "w");
  const HostTensor* xzp = ctx.input(2);
  if (xzp && xzp->numel() != 1) ctx.fail("x_zero_point must be a scalar");
  ConvDims d = convDims(ctx, x, w);
  std::vector<int32_t> xs = shiftedInt32(ctx, x, xzp, "x");
  std::vector<int32_t> ws = shiftedInt32(ctx, w, ctx.input(3), "w");
  HostTensor& y = ctx.allocateOutput(0, DType::Int32, outputDims(d));
  convS32(xs.data(), ws.data(), y.mutableData<int32_t>(), d, ctx.numThreads());
}

float scalarOrAt(const FloatView& v, int64_t i) { return v.size() == 1 ? v[0] : v[i]; }

int32_t zeroPointAt(const HostTensor* zp, int64_t i) {
  if (!zp || zp->numel() == 0) return 0;
  const int64_t j = zp->numel() == 1 ? 0 : i;
  switch (zp->dtype()) {
    case DType::UInt8: return zp->data<uint8_t>()[j];
    case DType::Int8: return zp->data<int8_t>()[j];
    case DType::Int32: return zp->data<int32_t>()[j];
    default: return 0;
  }
}

void runQLinearConv(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& w = ctx.requireInput(3);
  checkInt8(ctx, x, "x");
  checkInt8(ctx, w, "w");
  FloatView xscale(ctx.requireInput(1)), wscale(ctx.requireInput(4)), yscale(ctx.requireInput(6));
  const HostTensor* xzp = ctx.input(2);
  const HostTensor* wzp = ctx.input(5);
  const HostTensor* yzp = ctx.input(7);
  const HostTensor* bias = ctx.input(8);
  if (xscale.size() != 1 || yscale.size() != 1) ctx.fail("x_scale and y_scale must be scalars");
  ConvDims d = convDims(ctx, x, w);
  if (wscale.size() != 1 && wscale.size() != d.M) {
    ctx.fail("w_scale must be a scalar or have one value per output channel");
  }
  if (bias && (bias->dtype() != DType::Int32 || bias->numel() != d.M)) {
    ctx.fail("B must be int32 with one value per output channel");
  }
  std::vector<int32_t> xs = shiftedInt32(ctx, x, xzp, "x");
  std::vector<int32_t> ws = shiftedInt32(ctx, w, wzp, "w");
  const std::vector<int64_t> ydims = outputDims(d);
  std::vector<int32_t> acc(static_cast<size_t>(product(ydims)));
  convS32(xs.data(), ws.data(), acc.data(), d, ctx.numThreads());
  const DType ytype = yzp ? yzp->dtype() : x.dtype();
  HostTensor& y = ctx.allocateOutput(0, ytype, ydims);
  const int64_t P = d.outPixels();
  const int32_t zy = zeroPointAt(yzp, 0);
  const int32_t lo = ytype == DType::UInt8 ? 0 : -128, hi = ytype == DType::UInt8 ? 255 : 127;
  for (int64_t n = 0; n < d.N; ++n) {
    for (int64_t m = 0; m < d.M; ++m) {
      // The multiplier in float32, the product in double (as the ONNX reference computes it).
      const double scale = xscale[0] * scalarOrAt(wscale, m) / yscale[0];
      const int32_t bv = bias ? bias->data<int32_t>()[m] : 0;
      const int64_t base = (n * d.M + m) * P;
      for (int64_t p = 0; p < P; ++p) {
        const double v = std::nearbyint(static_cast<double>(acc[base + p] + bv) * scale) + zy;
        const auto q = static_cast<int32_t>(saturateQuantized(v, lo, hi));
        if (ytype == DType::UInt8) {
          y.mutableData<uint8_t>()[base + p] = static_cast<uint8_t>(q);
        } else {
          y.mutableData<int8_t>()[base + p] = static_cast<int8_t>(q);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpu

void registerConvKernels(KernelRegistry& r) {
  KernelInfo conv{"", "Conv", 1, 1000, [](KernelContext& c) { cpu::runConv(c, false); }};
  conv.reads_channels_last = cpu::convReadsChannelsLast;
  conv.writes_channels_last = cpu::convWritesChannelsLast;
  r.add(conv);
  // FusedConv and its portable spellings FusedConv[_NoBias][_Add][_<activation>] (fused_ops.h).
  forEachFusedSpelling("FusedConv", [&r](const std::string& name) {
    KernelInfo fused{"fusectl", name, 1, 1000, [](KernelContext& c) { cpu::runConv(c, true); }};
    fused.reads_channels_last = cpu::convReadsChannelsLast;
    fused.writes_channels_last = cpu::convWritesChannelsLast;
    r.add(fused);
  });
  r.add({"", "ConvTranspose", 1, 1000, cpu::runConvTranspose});
  r.add({"", "ConvInteger", 10, 1000, cpu::runConvInteger});
  r.add({"", "QLinearConv", 10, 1000, cpu::runQLinearConv});
}

}  // namespace fusectl::kernels
