// Convolutions as a direct pixels x channels product, with no im2col operand at all.
//
// The implicit im2col (conv_implicit.h) still writes every tap of every pixel once, into the
// GEMM's packed panels, and at stride 2 it first splits the input into phase planes: on
// ResNet-50's stride-2 3x3 convolutions the planes and the packing were a quarter of the time
// (bench/README). Here the register tile is 8 output pixels x 32 output channels, like the
// pixels-by-channels GEMM (conv_pixel_rows.h), but each pixel's tap is broadcast straight from a
// zero-padded copy of the input: a pixel's 8 row pointers plus one offset per tap (input
// channel, kernel row, kernel column) address it, whatever the stride. The weights are packed
// once per session as 32-channel panels over blocks of input channels (about 1024 taps deep),
// small enough that a block's panel stays in L2 while every pixel tile passes over it. The finished tile gets bias, residual and activation in registers and is transposed
// into the NCHW output.
#pragma once

#include <cstdint>

#include "fusectl/kernels/epilogue.h"
#include "gemm_micro.h"

namespace fusectl::kernels::cpu {

// One 2-D convolution, no dilation: X [N, C, H, W] -> Y [N, M, OH, OW]; a grouped one is run
// group by group (runConv), C and M then a group's channels.
struct DirectConvShape {
  int64_t N = 0, C = 0, M = 0, H = 0, W = 0, KH = 0, KW = 0, SH = 1, SW = 1;
  int64_t pad_top = 0, pad_left = 0, OH = 0, OW = 0;
};

// Whether the kernel can run this shape here: the AVX-512 GEMM kernel is in use, and the
// padded input stays within 2^26 floats (its tap offsets are 32-bit).
bool directConvRuns(const DirectConvShape& s);

// Whether it runs (directConvRuns) and takes this shape where it measured faster
// than the implicit im2col: stride 2 (windows of 3 and up) onto 49 output pixels or more, stride
// 1 onto at most 1024 output pixels with 32 output channels and up and at most 1M weights (any
// weights onto 64 pixels or fewer), and inputs of at most 4 channels (the stems).
bool directConvPays(const DirectConvShape& s);

// How many input channels a block of packed weights spans for this shape (it depends on the input
// plane's size as well as the window): part of a cached packing's identity.
int64_t directConvBlockChannels(const DirectConvShape& s);

// W [M, C, KH, KW] as convDirect reads it for this shape, made for the AVX-512 machines
// directConvPays takes.
PackedMatrix packDirectConvFilters(const float* w, const DirectConvShape& s);

// Y = epilogue(conv(X, W)): the epilogue's bias per output channel, its residual laid out like Y.
// `next_filters`, when set, are the filters of the product the caller runs next (a grouped
// convolution's next group): the last panel's tiles fetch its first panel into L2, as each panel
// fetches the one after it. A hint; the result does not depend on it.
void convDirect(const float* x, float* y, const DirectConvShape& s, const Epilogue& ep,
                const PackedMatrix& filters, int threads,
                const PackedMatrix* next_filters = nullptr);

}  // namespace fusectl::kernels::cpu
