// GridSample (opset 16 2-D names bilinear/bicubic, opset 20 N-D names linear/cubic) and
// AffineGrid, which builds the sampling grids GridSample reads.
//
// GridSample: for every output position the grid holds normalized coordinates in [-1, 1], last
// spatial dim first (x, y, z). Each is mapped to a pixel coordinate: with align_corners
// c = (g + 1) / 2 * (size - 1), without c = ((g + 1) * size - 1) / 2. A coordinate outside the
// border range ([0, size-1] with align_corners, else [-0.5, size-0.5]) is clamped ("border") or
// reflected ("reflection") before interpolating; the taps an interpolation reads outside the
// image then read 0 ("zeros"), the clamped index ("border") or the reflected index. Interpolation
// is separable, so an N-D sample is the sum over the tap grid of products of per-axis weights:
// nearest (1 tap, round half to even), linear (2 taps), cubic (4 taps, Keys with a = -0.75).
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

enum class Mode { Nearest, Linear, Cubic };
enum class Padding { Zeros, Border, Reflection };

double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// One axis of one sample: up to four (index, weight) taps; index -1 reads zero.
struct Taps {
  int count = 0;
  std::array<int64_t, 4> index{};
  std::array<double, 4> weight{};
};

struct Axis {
  int64_t size;
  double lo, hi;  // the border range
};

int64_t tapIndex(int64_t i, const Axis& a, Padding p) {
  if (p == Padding::Zeros) return i >= 0 && i < a.size ? i : -1;
  if (p == Padding::Border) return std::clamp<int64_t>(i, 0, a.size - 1);
  const int64_t r = static_cast<int64_t>(reflect(static_cast<double>(i), a.lo, a.hi));
  return std::clamp<int64_t>(r, 0, a.size - 1);
}

void cubicWeights(double t, double* w) {
  constexpr double A = -0.75;
  const double x0 = t + 1, x1 = t, x2 = 1 - t, x3 = 2 - t;
  w[0] = ((A * x0 - 5 * A) * x0 + 8 * A) * x0 - 4 * A;
  w[1] = ((A + 2) * x1 - (A + 3)) * x1 * x1 + 1;
  w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
  w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

Taps axisTaps(double g, const Axis& a, Mode mode, Padding pad, bool align_corners) {
  double x = align_corners ? (g + 1) / 2 * static_cast<double>(a.size - 1)
                           : ((g + 1) * static_cast<double>(a.size) - 1) / 2;
  if (mode == Mode::Nearest) x = std::nearbyint(x);
  if (x < a.lo || x > a.hi) {
    if (pad == Padding::Border)
      x = std::clamp(x, 0.0, static_cast<double>(a.size - 1));
    else if (pad == Padding::Reflection)
      x = reflect(x, a.lo, a.hi);
  }
  Taps t;
  if (mode == Mode::Nearest) {
    t.count = 1;
    t.index[0] = tapIndex(static_cast<int64_t>(x), a, pad);
    t.weight[0] = 1;
    return t;
  }
  const double f = std::floor(x);
  const int64_t x0 = static_cast<int64_t>(f);
  const double frac = x - f;
  if (mode == Mode::Linear) {
    t.count = 2;
    t.index = {tapIndex(x0, a, pad), tapIndex(x0 + 1, a, pad), 0, 0};
    t.weight = {1 - frac, frac, 0, 0};
    return t;
  }
  t.count = 4;
  for (int j = 0; j < 4; ++j) t.index[j] = tapIndex(x0 - 1 + j, a, pad);
  cubicWeights(frac, t.weight.data());
  return t;
}

Mode readMode(const KernelContext& ctx) {
  const std::string m = ctx.attrString("mode", ctx.opset() >= 20 ? "linear" : "bilinear");
  if (m == "nearest") return Mode::Nearest;
  if (m == "linear" || m == "bilinear") return Mode::Linear;
  if (m == "cubic" || m == "bicubic") return Mode::Cubic;
  ctx.fail(fmt::format("unknown mode '{}'", m));
}

Padding readPadding(const KernelContext& ctx) {
  const std::string p = ctx.attrString("padding_mode", "zeros");
  if (p == "zeros") return Padding::Zeros;
  if (p == "border") return Padding::Border;
  if (p == "reflection") return Padding::Reflection;
  ctx.fail(fmt::format("unknown padding_mode '{}'", p));
}

void gridSampleKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& grid = ctx.requireInput(1);
  if (!isFloatComputeType(x.dtype()) || !isFloatComputeType(grid.dtype()))
    ctx.fail("X and grid must be float tensors");
  if (x.rank() < 3) ctx.fail("X must have rank >= 3 (N, C, spatial...)");
  const size_t r = x.rank() - 2;
  if (grid.rank() != r + 2 || grid.dims().back() != static_cast<int64_t>(r) ||
      grid.dim(0) != x.dim(0))
    ctx.fail(fmt::format("grid dims {} do not fit X dims {}", formatDims(grid.dims()),
                         formatDims(x.dims())));
  const Mode mode = readMode(ctx);
  const Padding pad = readPadding(ctx);
  const bool align = ctx.attrInt("align_corners", 0) != 0;
  if (mode == Mode::Cubic && r != 2) ctx.fail("cubic mode needs a 2-D input");

  std::vector<Axis> axes(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = x.dim(i + 2);
    axes[i] = align ? Axis{s, 0.0, static_cast<double>(s - 1)}
                    : Axis{s, -0.5, static_cast<double>(s) - 0.5};
  }
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t in_plane = product(x.dims(), 2);
  std::vector<int64_t> out_dims = {n, c};
  out_dims.insert(out_dims.end(), grid.dims().begin() + 1, grid.dims().end() - 1);
  const int64_t out_plane = product(out_dims, 2);
  std::vector<int64_t> in_strides(r, 1);
  for (size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * axes[i].size;

  FloatView xv(x), gv(grid);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), out_dims);
  FloatSink sink(out);
  float* y = sink.data();
  std::vector<Taps> taps(r);
  std::vector<int> pos(r);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < out_plane; ++o) {
      const float* g = gv.data() + (b * out_plane + o) * static_cast<int64_t>(r);
      // The grid's last component is the first spatial axis' coordinate reversed: x is W.
      for (size_t i = 0; i < r; ++i) taps[i] = axisTaps(g[r - 1 - i], axes[i], mode, pad, align);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* plane = xv.data() + (b * c + ch) * in_plane;
        double acc = 0;
        std::fill(pos.begin(), pos.end(), 0);
        while (true) {
          double w = 1;
          int64_t off = 0;
          bool zero = false;
          for (size_t i = 0; i < r; ++i) {
            const int64_t idx = taps[i].index[static_cast<size_t>(pos[i])];
            w *= taps[i].weight[static_cast<size_t>(pos[i])];
            if (idx < 0)
              zero = true;
            else
              off += idx * in_strides[i];
          }
          if (!zero) acc += w * plane[off];
          size_t i = r;
          while (i-- > 0) {
            if (++pos[i] < taps[i].count) break;
            pos[i] = 0;
          }
          if (i == static_cast<size_t>(-1)) break;
        }
        y[(b * c + ch) * out_plane + o] = static_cast<float>(acc);
      }
    }
  }
  sink.commit();
}

// AffineGrid: theta [N, 2, 3] (2-D) or [N, 3, 4] (3-D) and size [N, C, H, W] or [N, C, D, H, W]
// give a grid [N, H, W, 2] or [N, D, H, W, 3] of theta times the base grid (x, y, [z], 1), whose
// coordinates span [-1, 1] at pixel centres (align_corners=0) or corners (1).
void affineGridKernel(KernelContext& ctx) {
  const HostTensor& theta = ctx.requireInput(0);
  const std::vector<int64_t> size = kutil::readInts(ctx, ctx.requireInput(1));
  if (size.size() != 4 && size.size() != 5)
    ctx.fail("size must be [N, C, H, W] or [N, C, D, H, W]");
  const size_t r = size.size() - 2;
  if (!isFloatComputeType(theta.dtype())) ctx.fail("theta must be a float tensor");
  if (theta.rank() != 3 || theta.dim(0) != size[0] || theta.dim(1) != static_cast<int64_t>(r) ||
      theta.dim(2) != static_cast<int64_t>(r + 1))
    ctx.fail(fmt::format("theta dims {} do not fit size {}", formatDims(theta.dims()),
                         formatDims(size)));
  const bool align = ctx.attrInt("align_corners", 0) != 0;
  // base[i] holds the normalized coordinates along spatial axis i (D, H, W order).
  std::vector<std::vector<double>> base(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t len = size[i + 2];
    for (int64_t k = 0; k < len; ++k) {
      double v =
          len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(k) / static_cast<double>(len - 1);
      if (!align) v *= static_cast<double>(len - 1) / static_cast<double>(len);
      base[i].push_back(v);
    }
  }
  std::vector<int64_t> dims = {size[0]};
  dims.insert(dims.end(), size.begin() + 2, size.end());
  dims.push_back(static_cast<int64_t>(r));
  FloatView tv(theta);
  HostTensor& out = ctx.allocateOutput(0, theta.dtype(), dims);
  FloatSink sink(out);
  float* y = sink.data();
  const int64_t points = product(size, 2);
  std::vector<double> coord(r + 1, 1.0);
  for (int64_t n = 0; n < size[0]; ++n) {
    const float* th = tv.data() + n * static_cast<int64_t>(r * (r + 1));
    for (int64_t p = 0; p < points; ++p) {
      // Homogeneous point (x, y, [z], 1): the fastest spatial axis (W) is x.
      int64_t rest = p;
      for (size_t i = r; i-- > 0;) {
        const int64_t len = size[i + 2];
        coord[r - 1 - i] = base[i][static_cast<size_t>(rest % len)];
        rest /= len;
      }
      for (size_t row = 0; row < r; ++row) {
        double acc = 0;
        for (size_t col = 0; col <= r; ++col) acc += th[row * (r + 1) + col] * coord[col];
        y[(n * points + p) * static_cast<int64_t>(r) + static_cast<int64_t>(row)] =
            static_cast<float>(acc);
      }
    }
  }
  sink.commit();
}

}  // namespace
}  // namespace cpu

void registerGridSampleKernels(KernelRegistry& r) {
  r.add({"", "GridSample", 16, 1000, cpu::gridSampleKernel});
  r.add({"", "AffineGrid", 20, 1000, cpu::affineGridKernel});
}

}  // namespace fusectl::kernels
