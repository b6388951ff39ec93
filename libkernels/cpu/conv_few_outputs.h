// 2-D convolutions with few output channels (1..12: a UNet's last layer onto 4 latent channels,
// a segmentation head's mask, an image model's RGB output), vectorised along the output row.
//
// The GEMM paths put the output channels on the rows of the product (or across the vector, for
// pixels x channels): with 1-12 of them, every im2col element they pack feeds 1-12 FMAs, and the
// packing costs as much as the product (64 -> 4 channels, 3x3 at 32x32: 15 GFLOP/s; 64 -> 1 at
// 64x64: 4 GFLOP/s). Here 16 output pixels of a row share a vector: a tile of up to 4 output
// channels x 4-8 output rows x 16 columns stays in registers while each input row under it is
// loaded (masked: the masks cover the padding) once per kernel column and feeds every output
// row and channel it contributes to, with the weights broadcast from W as it is. No packing, no
// scratch; the epilogue runs on the finished tile in registers.
#pragma once

#include <cstdint>

#include "compute_common.h"
#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cpu {

// Whether convFewOutputs takes this convolution here: AVX-512, one group, 2-D, 1 to 12 output
// channels, a window of more than one tap (a 1x1 one is a plain GEMM, faster), horizontal stride
// 1, windows at most 16 wide, rows of at most 2^30 columns.
bool fewOutputsConvTakes(int64_t group, int64_t M, const Window& win);

// Y [N, M, OH, OW] = epilogue(conv(X [N, C, H, W], W [M, C, KH, KW])): the epilogue's bias per
// output channel, its residual laid out like Y. fewOutputsConvTakes must hold.
void convFewOutputs(const float* x, const float* w, float* y, int64_t N, int64_t C, int64_t M,
                    const Window& win, const Epilogue& ep, int threads);

}  // namespace fusectl::kernels::cpu
