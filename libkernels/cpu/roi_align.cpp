// RoiAlign: each region of interest [x1, y1, x2, y2] (times spatial_scale, shifted by -0.5 in
// "half_pixel" mode) is split into output_height x output_width bins; each bin samples a grid of
// sampling_ratio (or ceil(roi size / output size)) points, bilinearly, and takes their average
// or, in "max" mode, the largest weighted corner value, as ONNX Runtime and the reference do.
// In "output_half_pixel" mode (opset 10's only behaviour) a region is at least 1 pixel wide.
// A sample more than one pixel outside the image contributes 0.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void roiAlignKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const HostTensor& rois = ctx.requireInput(1);
  const std::vector<int64_t> batch_index = kutil::readInts(ctx, ctx.requireInput(2));
  if (!isFloatComputeType(x.dtype()) || !isFloatComputeType(rois.dtype()))
    ctx.fail("X and rois must be float tensors");
  if (x.rank() != 4) ctx.fail("X must have shape [N, C, H, W]");
  if (rois.rank() != 2 || rois.dim(1) != 4) ctx.fail("rois must have shape [R, 4]");
  const int64_t num_rois = rois.dim(0);
  if (static_cast<int64_t>(batch_index.size()) != num_rois)
    ctx.fail("batch_indices must have one entry per roi");
  const std::string mode = ctx.attrString("mode", "avg");
  if (mode != "avg" && mode != "max") ctx.fail(fmt::format("unknown mode '{}'", mode));
  const std::string ctm = ctx.attrString("coordinate_transformation_mode",
                                         ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    ctx.fail(fmt::format("unknown coordinate_transformation_mode '{}'", ctm));
  const bool half_pixel = ctm == "half_pixel";
  const int64_t out_h = ctx.attrInt("output_height", 1), out_w = ctx.attrInt("output_width", 1);
  const int64_t sampling = ctx.attrInt("sampling_ratio", 0);
  const double scale = ctx.attrFloat("spatial_scale", 1.0f);
  const int64_t channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  FloatView xv(x), rv(rois);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), {num_rois, channels, out_h, out_w});
  if (out.numel() == 0) return;  // an output_height or output_width of 0: bins of no size
  FloatSink sink(out);
  for (int64_t r = 0; r < num_rois; ++r) {
    const int64_t b = batch_index[static_cast<size_t>(r)];
    if (b < 0 || b >= x.dim(0)) ctx.fail(fmt::format("batch index {} is out of range", b));
    const double offset = half_pixel ? 0.5 : 0.0;
    const double x1 = rv[r * 4] * scale - offset, y1 = rv[r * 4 + 1] * scale - offset;
    const double x2 = rv[r * 4 + 2] * scale - offset, y2 = rv[r * 4 + 3] * scale - offset;
    if (!std::isfinite(x1) || !std::isfinite(y1) || !std::isfinite(x2) || !std::isfinite(y2))
      ctx.fail(fmt::format("roi {} has a coordinate that is not finite at spatial_scale {}", r,
                           scale));
    double roi_w = x2 - x1, roi_h = y2 - y1;
    if (!half_pixel) {
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    const double bin_h = roi_h / static_cast<double>(out_h),
                 bin_w = roi_w / static_cast<double>(out_w);
    // The adaptive grid samples each bin about once per input pixel; a roi millions of pixels
    // wide would take hours, so past 2^20 samples per bin it is an error, not a hang.
    // (A negative roi in half_pixel mode gives a grid of no samples.)
    const double grid_hd = sampling > 0 ? static_cast<double>(sampling)
                                        : std::ceil(roi_h / static_cast<double>(out_h));
    const double grid_wd = sampling > 0 ? static_cast<double>(sampling)
                                        : std::ceil(roi_w / static_cast<double>(out_w));
    // Each side on its own too: a huge side times an empty one passes the product.
    if (!(grid_hd <= 1048576.0) || !(grid_wd <= 1048576.0) ||
        std::max(grid_hd, 0.0) * std::max(grid_wd, 0.0) > 1048576.0)
      ctx.fail(fmt::format("roi {} needs a {}x{} sampling grid per bin", r, grid_hd, grid_wd));
    const int64_t grid_h = grid_hd > 0 ? static_cast<int64_t>(grid_hd) : 0,
                  grid_w = grid_wd > 0 ? static_cast<int64_t>(grid_wd) : 0;
    const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
    for (int64_t c = 0; c < channels; ++c) {
      const float* plane = xv.data() + (b * channels + c) * height * width;
      for (int64_t ph = 0; ph < out_h; ++ph)
        for (int64_t pw = 0; pw < out_w; ++pw) {
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              double yy = y1 + ph * bin_h + (iy + 0.5) * bin_h / static_cast<double>(grid_h);
              double xx = x1 + pw * bin_w + (ix + 0.5) * bin_w / static_cast<double>(grid_w);
              double v[4] = {0, 0, 0, 0};
              if (!(yy < -1.0 || yy > height || xx < -1.0 || xx > width)) {
                yy = std::max(yy, 0.0);
                xx = std::max(xx, 0.0);
                int64_t y_lo = static_cast<int64_t>(yy), x_lo = static_cast<int64_t>(xx), y_hi,
                        x_hi;
                if (y_lo >= height - 1) {
                  y_hi = y_lo = height - 1;
                  yy = static_cast<double>(y_lo);
                } else {
                  y_hi = y_lo + 1;
                }
                if (x_lo >= width - 1) {
                  x_hi = x_lo = width - 1;
                  xx = static_cast<double>(x_lo);
                } else {
                  x_hi = x_lo + 1;
                }
                const double ly = yy - static_cast<double>(y_lo),
                             lx = xx - static_cast<double>(x_lo);
                const double hy = 1 - ly, hx = 1 - lx;
                v[0] = hy * hx * plane[y_lo * width + x_lo];
                v[1] = hy * lx * plane[y_lo * width + x_hi];
                v[2] = ly * hx * plane[y_hi * width + x_lo];
                v[3] = ly * lx * plane[y_hi * width + x_hi];
              }
              if (mode == "avg") {
                acc += v[0] + v[1] + v[2] + v[3];
              } else {
                const double m = std::max(std::max(v[0], v[1]), std::max(v[2], v[3]));
                acc = first ? m : std::max(acc, m);
                first = false;
              }
            }
          }
          sink.data()[((r * channels + c) * out_h + ph) * out_w + pw] =
              static_cast<float>(mode == "avg" ? acc / count : acc);
        }
    }
  }
  sink.commit();
}

}  // namespace
}  // namespace cpu

void registerRoiAlignKernels(KernelRegistry& r) {
  r.add({"", "RoiAlign", 10, 1000, cpu::roiAlignKernel});
}

}  // namespace fusectl::kernels
