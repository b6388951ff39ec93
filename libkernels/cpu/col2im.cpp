// Col2Im: the inverse of im2col. Input [N, C * prod(block), L] holds, for each of the L sliding
// block positions, the block's values; each is added back at its image position
// pos_i = l_i * stride_i - pad_begin_i + b_i * dilation_i (taps in the padding are dropped), so
// overlapping blocks sum. Output [N, C, image_shape...].
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void col2ImKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  const std::vector<int64_t> image = kutil::readInts(ctx, ctx.requireInput(1));
  const std::vector<int64_t> block = kutil::readInts(ctx, ctx.requireInput(2));
  if (!isFloatComputeType(x.dtype())) ctx.fail("input must be a float tensor");
  const size_t r = image.size();
  if (r == 0 || block.size() != r) ctx.fail("image_shape and block_shape must have equal length");
  if (x.rank() != 3) ctx.fail("input must have shape [N, C * prod(block_shape), L]");
  const std::vector<int64_t> strides = ctx.attrInts("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> dilations = ctx.attrInts("dilations", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> pads = ctx.attrInts("pads", std::vector<int64_t>(2 * r, 0));
  if (strides.size() != r || dilations.size() != r || pads.size() != 2 * r)
    ctx.fail("strides, dilations and pads must match the image rank");
  std::vector<int64_t> cols(r);
  int64_t block_size = 1, col_count = 1;
  for (size_t i = 0; i < r; ++i) {
    if (strides[i] < 1 || dilations[i] < 1 || block[i] < 1)
      ctx.fail("strides, dilations and block_shape must be positive");
    if (image[i] < 0 || pads[i] < 0 || pads[i + r] < 0)
      ctx.fail("image_shape and pads must not be negative");
    // The values come from the file: a block of 2^62 overflowed the span and the block count,
    // and a zero block count then divided.
    int64_t span = 0, extent = 0;
    if (__builtin_mul_overflow(dilations[i], block[i] - 1, &span) ||
        __builtin_add_overflow(image[i], pads[i], &extent) ||
        __builtin_add_overflow(extent, pads[i + r], &extent) ||
        __builtin_mul_overflow(block_size, block[i], &block_size)) {
      ctx.fail("block_shape, dilations, image_shape and pads overflow");
    }
    if (extent - 1 < span) ctx.fail("block_shape does not fit the padded image");
    cols[i] = (extent - 1 - span) / strides[i] + 1;
    if (__builtin_mul_overflow(col_count, cols[i], &col_count))
      ctx.fail("block_shape, dilations, image_shape and pads overflow");
  }
  if (x.dim(1) % block_size != 0 || x.dim(2) != col_count)
    ctx.fail(fmt::format("input dims {} do not fit blocks {} over image {}", formatDims(x.dims()),
                         formatDims(block), formatDims(image)));
  const int64_t n = x.dim(0), c = x.dim(1) / block_size, img_size = product(image);
  std::vector<int64_t> out_dims = {n, c};
  out_dims.insert(out_dims.end(), image.begin(), image.end());
  FloatView xv(x);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), out_dims);
  std::vector<float> acc(static_cast<size_t>(out.numel()), 0.0f);
  for (int64_t plane = 0; plane < n * c; ++plane) {
    for (int64_t b = 0; b < block_size; ++b) {
      const float* src = xv.data() + (plane * block_size + b) * col_count;
      for (int64_t l = 0; l < col_count; ++l) {
        int64_t brest = b, lrest = l, off = 0;
        bool inside = true;
        std::vector<int64_t> pos(r);
        for (size_t i = r; i-- > 0;) {
          pos[i] = (lrest % cols[i]) * strides[i] - pads[i] + (brest % block[i]) * dilations[i];
          lrest /= cols[i];
          brest /= block[i];
          if (pos[i] < 0 || pos[i] >= image[i]) inside = false;
        }
        if (!inside) continue;
        for (size_t i = 0; i < r; ++i) off = off * image[i] + pos[i];
        acc[static_cast<size_t>(plane * img_size + off)] += src[l];
      }
    }
  }
  fromFloat(acc.data(), x.dtype(), out.mutableRaw(), out.numel());
}

}  // namespace
}  // namespace cpu

void registerCol2ImKernels(KernelRegistry& r) {
  r.add({"", "Col2Im", 18, 1000, cpu::col2ImKernel});
}

}  // namespace fusectl::kernels
