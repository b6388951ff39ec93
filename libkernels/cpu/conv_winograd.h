// Winograd F(2x2, 3x3) and F(4x4, 3x3) for 3x3, stride-1, undilated, ungrouped 2-D
// convolutions (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).
//
// Each 2x2 block of output pixels ("tile") is computed from the 4x4 input patch under it:
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A
// so a tile costs 16 multiply-adds per input/output channel pair instead of 36: 2.25x fewer
// than the im2col GEMM. F(4x4, 3x3) takes 6x6 patches: 36 for 144, 4x fewer, with larger
// transform coefficients (up to 8 in A, 1/24 in G), so somewhat more rounding. The E = 16 (or
// 36) elementwise products over all channels are E independent GEMMs,
//   M_e[M x T] = U_e[M x C] * V_e[C x T]      (e < E, T tiles)
// run by the packed GEMM (gemm_micro.h) with the transformed filters U_e packed once per session.
// The input transform (V) and the output transform (A^T m A, then bias, residual and activation
// in registers) are single passes over a chunk of tile rows sized to stay cached.
//
// Rounding differs from the im2col path (each output sums E products of transformed values);
// tests bound both tiles against a double reference like the other paths, and against im2col.
#pragma once

#include <cstdint>
#include <vector>

#include "fusectl/kernels/epilogue.h"
#include "gemm_micro.h"

namespace fusectl::kernels::cpu {

// One image batch of a 3x3 stride-1 convolution: X [N, C, H, W] -> Y [N, M, OH, OW], with the
// given leading pads (the trailing ones are implied by OH and OW).
struct Winograd3x3Shape {
  int64_t N = 0, C = 0, M = 0, H = 0, W = 0, OH = 0, OW = 0, pad_top = 0, pad_left = 0;
};

// Which algorithm convFloat uses for the convolutions that are no 1x1 and no depthwise. Auto
// picks Winograd where it was measured faster (winogradTile), else the implicit im2col
// (conv_implicit.h) where it applies, else the im2col matrix; the others force one (Im2col: the
// im2col matrix; Implicit: the implicit im2col wherever it applies, also on the shapes Winograd
// or the pixels-by-channels product would take; Winograd: F(2x2, 3x3), Winograd4: F(4x4, 3x3);
// Direct: the direct pixels-by-channels product (conv_direct.h) wherever it can run, also where
// Winograd would), for tests and benchmarks. Process-wide, like gemmForceKernel.
enum class ConvAlgorithm { Auto, Im2col, Implicit, Winograd, Winograd4, Direct };
void convForceAlgorithm(ConvAlgorithm algorithm);
ConvAlgorithm convForcedAlgorithm();

// The Winograd output tile that beats the im2col GEMM on this shape: 2 (F(2x2, 3x3)), 4
// (F(4x4, 3x3)), or 0 where im2col is faster (see the measurements in the .cpp). Depends on the
// CPU as vec::fma512HalfWidth() reports it (F(4x4, 3x3) onto 14x14 where it is true).
int winogradTile(int64_t C, int64_t M, int64_t OH, int64_t OW);
bool winogradPays(int64_t C, int64_t M, int64_t OH, int64_t OW);  // winogradTile(...) != 0

// The (tile + 2)^2 transformed filters U_e = (G g G^T)_e of W [M, C, 3, 3] (tile 2 or 4), each
// packed as the GEMM's A operand (M x C) for the micro-kernel in use now. Their `source` is null:
// the transformed filters are not kept unpacked.
std::vector<PackedMatrix> packWinogradFilters(const float* w, int64_t M, int64_t C, int tile);

// Y = epilogue(conv(X, W)) for the filters packed by packWinogradFilters (for the micro-kernel in
// use now; their count says the tile). The epilogue's bias is per output channel and its residual laid out like Y (of one
// image when the pointer is set per image: the function offsets it per image itself).
void convWinograd3x3(const float* x, float* y, const Winograd3x3Shape& s, const Epilogue& ep,
                     const std::vector<PackedMatrix>& filters, int threads);

}  // namespace fusectl::kernels::cpu
