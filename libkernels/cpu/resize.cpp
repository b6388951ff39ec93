// Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9).
//
// Every mode the ONNX reference implements is separable: it interpolates along one axis at a
// time. So each resized axis gets a tap table (for each output index: input indices and weights,
// or "extrapolate" for tf_crop_and_resize outside the input) and the tensor is resampled one
// axis per pass. Tap tables follow onnx/reference/ops/op_resize.py: the source coordinate x
// comes from coordinate_transformation_mode; the taps sit around floor(x) (or x-1 when x is an
// integer, with ratio 1), clamped to the edges; exclude_outside drops and renormalizes the taps
// that fall outside; antialias (linear/cubic) widens the filter by 1/scale when downsampling.
// Nearest copies elements of any type exactly (in one gather pass unless some output
// extrapolates); linear and cubic compute in float.
// Opset 10 and Upsample use asymmetric coordinates; their nearest picks floor when upsampling and
// ceil when downsampling (ONNX Runtime's behaviour; the spec leaves it open).
#include <algorithm>
#include <memory>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

struct ResizeAttrs {
  std::string mode = "nearest";
  std::string coord = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  float cubic_a = -0.75f;
  bool exclude_outside = false;
  bool antialias = false;
  float extrapolation = 0.f;
  bool legacy = false;  // Upsample and Resize-10
};

// Taps of one axis: for output i, taps[i*n .. i*n+n) with weights; extrapolate[i] when the
// source coordinate lies outside the input (tf_crop_and_resize).
struct AxisTaps {
  int64_t n = 0;
  std::vector<int64_t> index;
  std::vector<float> weight;
  std::vector<uint8_t> extrapolate;
};

double cubicWeight(double x, double A) {
  x = std::abs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

AxisTaps buildTaps(const ResizeAttrs& at, int64_t in_len, int64_t out_len, double scale,
                   double roi_start, double roi_end) {
  AxisTaps t;
  // No output, no taps. Otherwise out_len >= 1 bounds the antialiasing scale below by about
  // 1 / in_len, and with it the tap count; a file's tiny scale with an empty output would
  // have made -1 / scale overflow the conversion below.
  if (out_len <= 0) return t;
  const bool nearest = at.mode == "nearest";
  const bool cubic = at.mode == "cubic";
  const double aa_scale = at.antialias && !nearest ? std::min(scale, 1.0) : 1.0;
  // Tap offsets relative to the base index: [start, start + n).
  int64_t start = 0;
  if (nearest) {
    start = 0;
    t.n = 1;
  } else if (cubic) {
    start = static_cast<int64_t>(std::floor(-2.0 / aa_scale)) + 1;
    t.n = 2 - 2 * start;
  } else {
    start = static_cast<int64_t>(std::floor(-1.0 / aa_scale)) + 1;
    t.n = 2 - 2 * start;
  }
  t.index.assign(static_cast<size_t>(out_len * t.n), 0);
  t.weight.assign(static_cast<size_t>(out_len * t.n), 0.f);
  t.extrapolate.assign(static_cast<size_t>(out_len), 0);
  const double out_f = scale * in_len;  // the reference's (fractional) output width
  std::vector<double> w(static_cast<size_t>(t.n));
  for (int64_t o = 0; o < out_len; ++o) {
    const double xo = static_cast<double>(o);
    double x = 0;
    if (at.legacy || at.coord == "asymmetric") {
      x = xo / scale;
    } else if (at.coord == "half_pixel") {
      x = (xo + 0.5) / scale - 0.5;
    } else if (at.coord == "pytorch_half_pixel") {
      x = out_f == 1 ? -0.5 : (xo + 0.5) / scale - 0.5;
    } else if (at.coord == "align_corners") {
      x = out_f == 1 ? 0.0 : xo * (in_len - 1) / (out_f - 1);
    } else if (at.coord == "half_pixel_symmetric") {
      const double adjustment = out_len / out_f;
      const double center = in_len / 2.0;
      x = center * (1 - adjustment) + (xo + 0.5) / scale - 0.5;
    } else if (at.coord == "tf_half_pixel_for_nn") {
      x = (xo + 0.5) / scale;
    } else if (at.coord == "tf_crop_and_resize") {
      x = out_f == 1 ? (roi_end - roi_start) * (in_len - 1) / 2
                     : xo * (roi_end - roi_start) * (in_len - 1) / (out_f - 1);
      x += roi_start * (in_len - 1);
      if (x < 0 || x > in_len - 1) {
        t.extrapolate[o] = 1;
        continue;
      }
    }
    int64_t* idx = t.index.data() + o * t.n;
    float* wt = t.weight.data() + o * t.n;
    if (nearest) {
      int64_t i;
      const double fl = std::floor(x);
      if (at.legacy) {
        i = scale < 1 ? static_cast<int64_t>(std::ceil(x)) : static_cast<int64_t>(fl);
      } else if (x == fl) {
        i = static_cast<int64_t>(fl);
      } else {
        const double r = x - fl;
        bool up;
        if (at.nearest_mode == "round_prefer_ceil") up = r >= 0.5;
        else if (at.nearest_mode == "floor") up = false;
        else if (at.nearest_mode == "ceil") up = true;
        else up = r > 0.5;  // round_prefer_floor
        i = static_cast<int64_t>(fl) + (up ? 1 : 0);
      }
      idx[0] = std::min(std::max<int64_t>(i, 0), in_len - 1);
      wt[0] = 1.f;
      continue;
    }
    // Ratio in (0, 1]: an integer x counts as ratio 1 from the index below.
    const double fl = std::floor(x);
    const bool integral = x == fl;
    const int64_t base = static_cast<int64_t>(fl) - (integral ? 1 : 0);
    const double ratio = integral ? 1.0 : x - fl;
    double sum = 0;
    for (int64_t j = 0; j < t.n; ++j) {
      const double d = (start + j - ratio);  // tap offset from x
      double v;
      if (at.antialias) {
        v = cubic ? cubicWeight(d * aa_scale, at.cubic_a)
                  : std::max(0.0, 1 - std::abs(d * aa_scale));
      } else {
        v = cubic ? cubicWeight(d, at.cubic_a) : 1 - std::abs(d);
      }
      const int64_t raw = base + start + j;
      if (at.exclude_outside && (raw < 0 || raw >= in_len)) v = 0;
      w[j] = v;
      sum += v;
    }
    const bool normalize = at.antialias || at.exclude_outside;
    for (int64_t j = 0; j < t.n; ++j) {
      const int64_t raw = base + start + j;
      idx[j] = std::min(std::max<int64_t>(raw, 0), in_len - 1);
      wt[j] = static_cast<float>(normalize && sum != 0 ? w[j] / sum : w[j]);
    }
  }
  return t;
}

// One interpolation pass along an axis: src is [outer, in_len, inner], dst [outer, out_len, inner].
// The last axis (inner 1) runs a row at a time, with the taps' index and weight tables walked
// alongside the output: a division per output element to find its row and tap (the generic
// loop's) took most of a UNet decoder's 2x bilinear upsampling (about 16 ns an element).
void resampleFloat(const float* src, float* dst, int64_t outer, int64_t in_len, int64_t out_len,
                   int64_t inner, const AxisTaps& t, float extrapolation, int threads) {
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(out_len, 1));
    parallelFor(outer, threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t ou = b; ou < e; ++ou) {
        const float* s = src + ou * in_len;
        float* __restrict d = dst + ou * out_len;
        const int64_t* idx = t.index.data();
        const float* wt = t.weight.data();
        for (int64_t o = 0; o < out_len; ++o, idx += t.n, wt += t.n) {
          if (t.extrapolate[o]) {
            d[o] = extrapolation;
            continue;
          }
          float acc = 0;
          for (int64_t j = 0; j < t.n; ++j) acc += wt[j] * s[idx[j]];
          d[o] = acc;
        }
      }
    });
    return;
  }
  parallelFor(outer * out_len, threads, 64, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t ou = q / out_len, o = q % out_len;
      float* __restrict d = dst + q * inner;
      if (t.extrapolate[o]) {
        std::fill(d, d + inner, extrapolation);
        continue;
      }
      const float* s = src + ou * in_len * inner;
      const int64_t* idx = t.index.data() + o * t.n;
      const float* wt = t.weight.data() + o * t.n;
      std::fill(d, d + inner, 0.f);
      for (int64_t j = 0; j < t.n; ++j) {
        const float wj = wt[j];
        if (wj == 0.f) continue;
        const float* __restrict row = s + idx[j] * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] += wj * row[i];
      }
    }
  });
}

// Nearest pass on raw elements of `esize` bytes.
void resampleNearest(const uint8_t* src, uint8_t* dst, size_t esize, int64_t outer,
                     int64_t in_len, int64_t out_len, int64_t inner, const AxisTaps& t,
                     const uint8_t* extrapolation) {
  const size_t row = static_cast<size_t>(inner) * esize;
  for (int64_t ou = 0; ou < outer; ++ou) {
    const uint8_t* s = src + static_cast<size_t>(ou * in_len) * row;
    uint8_t* d = dst + static_cast<size_t>(ou * out_len) * row;
    for (int64_t o = 0; o < out_len; ++o) {
      if (t.extrapolate[o]) {
        for (int64_t i = 0; i < inner; ++i) {
          std::memcpy(d + o * row + i * esize, extrapolation, esize);
        }
      } else {
        std::memcpy(d + o * row, s + static_cast<size_t>(t.index[o]) * row, row);
      }
    }
  }
}

// Nearest in one pass over the output, for taps that never extrapolate: an output row (every
// index but the last) reads one input row, found through each axis' index table; a row that
// reads the same input row as the row before it (an upsampled height) copies that output row.
// Elements of 1, 2, 4 or 8 bytes gather by type. This is the upsampling of UNets and FPNs, where
// the pass-per-axis path cost a memcpy per element of the last axis.
template <typename E>
void gatherRow(const uint8_t* src, uint8_t* dst, const int64_t* index, int64_t n) {
  const E* s = reinterpret_cast<const E*>(src);
  E* d = reinterpret_cast<E*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = s[index[i]];
}

void nearestGather(const uint8_t* src, uint8_t* dst, size_t esize,
                   const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims,
                   const std::vector<std::vector<int64_t>>& index, int threads) {
  const size_t r = in_dims.size();
  const int64_t w_in = in_dims[r - 1], w_out = out_dims[r - 1];
  const std::vector<int64_t>& last = index[r - 1];
  bool same_width = w_in == w_out;
  for (int64_t i = 0; same_width && i < w_out; ++i) same_width = last[static_cast<size_t>(i)] == i;
  const size_t in_row = static_cast<size_t>(w_in) * esize, out_row = static_cast<size_t>(w_out) * esize;
  // Output rows by their index over the leading axes, stepped along from the piece's first
  // (divided out once): per-row divisions cost as much as a short row's gather (the same was
  // measured in pool.cpp's separable path). in_stride[ax]: an input row index's step along ax.
  const size_t lead = r - 1;
  std::vector<int64_t> in_stride(lead, 1);
  for (size_t ax = lead; ax-- > 1;) in_stride[ax - 1] = in_stride[ax] * in_dims[ax];
  const int64_t rows = product(out_dims, 0, lead);
  parallelFor(rows, threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(w_out, 1)),
              [&](int64_t q0, int64_t q1) {
    std::vector<int64_t> at(lead);
    int64_t first = q0;
    for (size_t ax = lead; ax-- > 0;) {
      at[ax] = first % out_dims[ax];
      first /= out_dims[ax];
    }
    int64_t previous = -1;
    for (int64_t q = q0; q < q1; ++q) {
      int64_t sr = 0;
      for (size_t ax = 0; ax < lead; ++ax)
        sr += index[ax][static_cast<size_t>(at[ax])] * in_stride[ax];
      for (size_t ax = lead; ax-- > 0;) {
        if (++at[ax] < out_dims[ax]) break;
        at[ax] = 0;
      }
      uint8_t* d = dst + static_cast<size_t>(q) * out_row;
      if (sr == previous) {
        std::memcpy(d, d - out_row, out_row);
        continue;
      }
      previous = sr;
      const uint8_t* s = src + static_cast<size_t>(sr) * in_row;
      if (same_width) {
        std::memcpy(d, s, out_row);
      } else if (esize == 4) {
        gatherRow<uint32_t>(s, d, last.data(), w_out);
      } else if (esize == 2) {
        gatherRow<uint16_t>(s, d, last.data(), w_out);
      } else if (esize == 8) {
        gatherRow<uint64_t>(s, d, last.data(), w_out);
      } else if (esize == 1) {
        gatherRow<uint8_t>(s, d, last.data(), w_out);
      } else {
        for (int64_t i = 0; i < w_out; ++i)
          std::memcpy(d + static_cast<size_t>(i) * esize, s + static_cast<size_t>(last[i]) * esize, esize);
      }
    }
  });
}

void resample(KernelContext& ctx, const ResizeAttrs& at, const std::vector<double>& scales,
              const std::vector<int64_t>& out_dims, const std::vector<double>& roi) {
  const HostTensor& x = ctx.requireInput(0);
  const size_t r = x.rank();
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), out_dims);
  if (y.numel() == 0) return;
  std::vector<size_t> axes;
  for (size_t i = 0; i < r; ++i) {
    if (out_dims[i] != x.dim(i) || scales[i] != 1.0 || at.coord == "tf_crop_and_resize") {
      axes.push_back(i);
    }
  }
  if (x.numel() == 0) ctx.fail("cannot resize an empty tensor to a non-empty one");
  std::vector<int64_t> cur = x.dims();
  const bool nearest = at.mode == "nearest";
  if (nearest) {
    const size_t es = dtypeSize(x.dtype());
    if (es == 0 || x.dtype() == DType::String) ctx.fail("unsupported element type");
    std::vector<uint8_t> extrap(es);
    if (isFloatComputeType(x.dtype()) || dtypeIsInteger(x.dtype())) {
      fromFloat(&at.extrapolation, x.dtype(), extrap.data(), 1);
    }
    std::vector<std::vector<int64_t>> index(r);
    bool extrapolates = false;
    for (size_t ax = 0; ax < r; ++ax) {
      if (std::find(axes.begin(), axes.end(), ax) == axes.end()) {
        index[ax].resize(static_cast<size_t>(x.dim(ax)));
        for (int64_t i = 0; i < x.dim(ax); ++i) index[ax][static_cast<size_t>(i)] = i;
        continue;
      }
      AxisTaps t = buildTaps(at, x.dim(ax), out_dims[ax], scales[ax], roi[ax], roi[ax + r]);
      for (uint8_t e : t.extrapolate) extrapolates |= e != 0;
      index[ax] = std::move(t.index);
    }
    if (!extrapolates && r > 0) {
      nearestGather(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.mutableRaw()),
                    es, x.dims(), out_dims, index, ctx.numThreads());
      return;
    }
    std::vector<uint8_t> a(static_cast<const uint8_t*>(x.raw()),
                           static_cast<const uint8_t*>(x.raw()) + x.byteSize());
    std::vector<uint8_t> b;
    for (size_t ax : axes) {
      const AxisTaps t = buildTaps(at, cur[ax], out_dims[ax], scales[ax], roi[ax], roi[ax + r]);
      const int64_t outer = product(cur, 0, ax), inner = product(cur, ax + 1);
      b.resize(static_cast<size_t>(outer * out_dims[ax] * inner) * es);
      resampleNearest(a.data(), b.data(), es, outer, cur[ax], out_dims[ax], inner, t,
                      extrap.data());
      cur[ax] = out_dims[ax];
      a.swap(b);
    }
    std::memcpy(y.mutableRaw(), a.data(), y.byteSize());
    return;
  }
  // Each pass reads the one before: the first reads x (as float), the last writes y where y is
  // float; the others go through two buffers left uninitialised (every element is written).
  FloatView xf(x);
  const bool float_out = y.dtype() == DType::Float;
  std::unique_ptr<float[]> buffers[2];
  size_t capacity[2] = {0, 0};
  const float* from = xf.data();
  float* to = nullptr;
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t ax = axes[k];
    const AxisTaps t = buildTaps(at, cur[ax], out_dims[ax], scales[ax], roi[ax], roi[ax + r]);
    const int64_t outer = product(cur, 0, ax), inner = product(cur, ax + 1);
    const size_t n = static_cast<size_t>(outer * out_dims[ax] * inner);
    if (k + 1 == axes.size() && float_out) {
      to = y.mutableData<float>();
    } else {
      const size_t which = k % 2;
      if (capacity[which] < n) {
        buffers[which].reset(new float[n]);
        capacity[which] = n;
      }
      to = buffers[which].get();
    }
    resampleFloat(from, to, outer, cur[ax], out_dims[ax], inner, t, at.extrapolation,
                  ctx.numThreads());
    cur[ax] = out_dims[ax];
    from = to;
  }
  if (axes.empty()) {
    fromFloat(xf.data(), y.dtype(), y.mutableRaw(), y.numel());
  } else if (!float_out) {
    fromFloat(from, y.dtype(), y.mutableRaw(), y.numel());
  }
}

std::vector<double> floatValues(const HostTensor* t) {
  std::vector<double> v;
  if (!t) return v;
  FloatView f(*t);
  for (int64_t i = 0; i < f.size(); ++i) v.push_back(f[i]);
  return v;
}

// floor(len * scale) (or rounded to nearest) as an axis length. A NaN, infinite or non-positive
// scale fails, and so does a length no tensor could have, instead of an out-of-range conversion.
int64_t scaledLength(const KernelContext& ctx, int64_t len, double scale, bool round_nearest) {
  if (!(scale > 0) || !std::isfinite(scale))
    ctx.fail(fmt::format("scale {} is not a positive finite number", scale));
  const double v = round_nearest ? std::floor(scale * static_cast<double>(len) + 0.5)
                                 : std::floor(scale * static_cast<double>(len));
  if (!(v < 4611686018427387904.0))  // 2^62
    ctx.fail(fmt::format("scale {} makes an axis of {} too long ({})", scale, len, v));
  return static_cast<int64_t>(v);
}

void checkMode(const KernelContext& ctx, const std::string& mode, bool allow_cubic) {
  if (mode == "nearest" || mode == "linear" || (allow_cubic && mode == "cubic")) return;
  if (mode == "bilinear" || mode == "trilinear") return;  // Upsample-7 spellings
  ctx.fail("unsupported mode '" + mode + "'");
}

// Upsample-7/9 and Resize-10: scales for every dim, asymmetric coordinates.
void runLegacyResize(KernelContext& ctx, std::vector<double> scales) {
  const HostTensor& x = ctx.requireInput(0);
  ResizeAttrs at;
  at.legacy = true;
  at.mode = ctx.attrString("mode", "nearest");
  checkMode(ctx, at.mode, false);
  if (at.mode != "nearest") at.mode = "linear";
  if (scales.size() != x.rank()) ctx.fail("scales must have one value per dim");
  std::vector<int64_t> out(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) {
    out[i] = scaledLength(ctx, x.dim(i), scales[i], false);
  }
  resample(ctx, at, scales, out, std::vector<double>(2 * x.rank(), 0.0));
}

void runUpsample(KernelContext& ctx) {
  if (ctx.opset() < 9) {
    std::vector<float> s = ctx.attrFloats("scales");
    runLegacyResize(ctx, std::vector<double>(s.begin(), s.end()));
  } else {
    runLegacyResize(ctx, floatValues(&ctx.requireInput(1)));
  }
}

void runResize(KernelContext& ctx) {
  if (ctx.opset() < 11) {
    runLegacyResize(ctx, floatValues(&ctx.requireInput(1)));
    return;
  }
  const HostTensor& x = ctx.requireInput(0);
  const size_t r = x.rank();
  ResizeAttrs at;
  at.mode = ctx.attrString("mode", "nearest");
  checkMode(ctx, at.mode, true);
  at.coord = ctx.attrString("coordinate_transformation_mode", "half_pixel");
  at.nearest_mode = ctx.attrString("nearest_mode", "round_prefer_floor");
  at.cubic_a = ctx.attrFloat("cubic_coeff_a", -0.75f);
  at.exclude_outside = ctx.attrInt("exclude_outside", 0) != 0;
  at.extrapolation = ctx.attrFloat("extrapolation_value", 0.f);
  at.antialias = ctx.attrInt("antialias", 0) != 0;
  static const char* const kCoords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                        "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                                        "tf_crop_and_resize"};
  if (std::find(std::begin(kCoords), std::end(kCoords), at.coord) == std::end(kCoords)) {
    ctx.fail("unknown coordinate_transformation_mode '" + at.coord + "'");
  }
  static const char* const kNearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                         "ceil"};
  if (std::find(std::begin(kNearest), std::end(kNearest), at.nearest_mode) == std::end(kNearest)) {
    ctx.fail("unknown nearest_mode '" + at.nearest_mode + "'");
  }
  // Axes the scales/sizes/roi refer to (opset 18); all dims by default.
  std::vector<int64_t> axes = ctx.attrInts("axes");
  if (axes.empty()) {
    for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  for (int64_t& a : axes) {
    if (a < 0) a += static_cast<int64_t>(r);
    if (a < 0 || a >= static_cast<int64_t>(r)) ctx.fail("axes out of range");
  }
  const size_t na = axes.size();
  std::vector<double> roi_in = floatValues(ctx.input(1));
  std::vector<double> scales_in = floatValues(ctx.input(2));
  std::vector<int64_t> sizes_in;
  if (const HostTensor* s = ctx.input(3); s && s->numel() > 0) {
    if (s->dtype() != DType::Int64) ctx.fail("sizes must be int64");
    sizes_in.assign(s->data<int64_t>(), s->data<int64_t>() + s->numel());
  }
  if (!scales_in.empty() && !sizes_in.empty()) {
    ctx.fail("only one of scales and sizes may be given");
  }
  if (scales_in.empty() && sizes_in.empty()) ctx.fail("one of scales and sizes is required");
  std::vector<double> roi(2 * r, 0.0);
  for (size_t i = 0; i < r; ++i) roi[i + r] = 1.0;
  if (!roi_in.empty()) {
    if (roi_in.size() != 2 * na) ctx.fail("roi must have 2 values per resized axis");
    for (double v : roi_in)
      if (!std::isfinite(v)) ctx.fail(fmt::format("roi value {} is not finite", v));
    for (size_t i = 0; i < na; ++i) {
      roi[axes[i]] = roi_in[i];
      roi[axes[i] + r] = roi_in[i + na];
    }
  }
  std::vector<double> scales(r, 1.0);
  std::vector<int64_t> out = x.dims();
  if (!scales_in.empty()) {
    if (scales_in.size() != na) ctx.fail("scales must have one value per resized axis");
    for (size_t i = 0; i < na; ++i) {
      out[axes[i]] = scaledLength(ctx, x.dim(axes[i]), scales_in[i], false);
      scales[axes[i]] = scales_in[i];
    }
  } else {
    if (sizes_in.size() != na) ctx.fail("sizes must have one value per resized axis");
    const std::string policy = ctx.attrString("keep_aspect_ratio_policy", "stretch");
    for (size_t i = 0; i < na; ++i) {
      if (sizes_in[i] < 0) ctx.fail("sizes must be non-negative");
      out[axes[i]] = sizes_in[i];
      scales[axes[i]] = static_cast<double>(sizes_in[i]) / x.dim(axes[i]);
    }
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller") {
        ctx.fail("unknown keep_aspect_ratio_policy '" + policy + "'");
      }
      double s = scales[axes[0]];
      for (size_t i = 1; i < na; ++i) {
        s = policy == "not_larger" ? std::min(s, scales[axes[i]]) : std::max(s, scales[axes[i]]);
      }
      for (size_t i = 0; i < na; ++i) {
        scales[axes[i]] = s;
        out[axes[i]] = scaledLength(ctx, x.dim(axes[i]), s, true);
      }
    }
  }
  resample(ctx, at, scales, out, roi);
}

}  // namespace
}  // namespace cpu

void registerResizeKernels(KernelRegistry& r) {
  r.add({"", "Resize", 10, 1000, cpu::runResize});
  r.add({"", "Upsample", 7, 9, cpu::runUpsample});
}

}  // namespace fusectl::kernels
