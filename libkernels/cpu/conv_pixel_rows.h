// Convolutions on small output planes as pixels x channels products.
//
// Conv's GEMM puts output channels on the rows and output pixels on the columns
// (Y[M x P] = W[M x K] * col[K x P]); the AVX-512 tile is 32 columns wide, so a 7x7 plane
// (P = 49) computes 64 columns for 49 (a 23% waste, the last layers of ResNet, MobileNet and
// EfficientNet). With the product transposed, Y^T[P x M] = col^T * W^T, the pixels become rows,
// which the tile computes exactly (its row count is a template), and the channels columns, a
// multiple of 32 in these networks. The result is then stored transposed into Y with the
// epilogue applied on the way.
#pragma once

#include <cstdint>

#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cpu {

// Whether P output pixels (of one image) and M output channels, each the sum of K products
// (input channels x taps), run faster as pixels x channels.
bool pixelRowsPay(int64_t P, int64_t M, int64_t K);

// y[j * ldy + i] = epilogue(yt[i * ldt + j]) for pixels i < rows and channels j < cols. The
// epilogue's bias is per channel j; its residual is laid out like y (channel j at row j of
// ld_residual, pixel i at column col0 + i).
void storeChannelRows(const float* yt, int64_t rows, int64_t cols, int64_t ldt, float* y,
                      int64_t ldy, const Epilogue& ep, int64_t col0);
// Whether storeChannelRows reads each residual element before it writes the same element of y,
// so that the residual may be y itself: the AVX-512 store does (residual added in registers),
// the portable one stores first and applies the epilogue to what it stored.
bool storeChannelRowsResidualMayAliasOutput();

}  // namespace fusectl::kernels::cpu
