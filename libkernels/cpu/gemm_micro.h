// The float GEMM behind Conv, ConvTranspose, Gemm and MatMul: packed, cache-blocked, with a
// register-tiled 6x16 micro-kernel and the epilogue applied per finished tile.
//
// Blocking follows BLIS: for each NC-wide column block and KC-deep slice, B is packed into
// 16-wide panels; for each MC-tall row block A is packed into 6-tall panels; the micro-kernel
// then streams both panels over k with 12 accumulators of 8 floats. Edges are zero-padded in the
// packs, so the kernel only ever sees full tiles. An AVX2+FMA kernel is picked at run time when
// the CPU has it; the portable kernel uses GCC/Clang vector extensions (SSE2 at -O2).
// Threads split the output into static column (or row) slices, each packing its own panels.
#pragma once

#include <cstdint>

#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cpu {

// C = alpha * A * B (+ C when accumulate), then the epilogue, for A: M x K and B: K x N given by
// element strides, so transposed operands cost nothing: A(i,k) = A[i*a_rs + k*a_cs].
struct GemmParams {
  int64_t M = 0, N = 0, K = 0;
  const float* A = nullptr;
  int64_t a_rs = 0, a_cs = 1;
  const float* B = nullptr;
  int64_t b_rs = 0, b_cs = 1;
  float* C = nullptr;
  int64_t ldc = 0;
  float alpha = 1.f;
  bool accumulate = false;
  const Epilogue* epilogue = nullptr;  // may be null
  // Global coordinates of C(0,0) for the epilogue's bias and residual (Conv groups, slices).
  int64_t epilogue_row0 = 0;
  int64_t epilogue_col0 = 0;
};

// Row-major convenience: A is M x K (K x M when trans_a) with leading dimension lda, etc.
GemmParams gemmParams(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a,
                      const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc);

// Runs p on up to num_threads threads (small problems run on the calling thread).
void gemm(const GemmParams& p, int num_threads = 1);

// Forces the portable micro-kernel even on AVX2 machines (tests compare both paths).
void gemmForcePortableKernel(bool force);
// "avx2-fma" or "portable": the micro-kernel gemm() uses now.
const char* gemmKernelName();

// Integer GEMM for the quantized ops: C(int32) = A(int32, M x K, row-major, lda) *
// B(int32, K x N, row-major, ldb) (+ C when accumulate). Operands arrive with zero points already
// subtracted, so every product is exact in int32.
void gemmS32(int64_t M, int64_t N, int64_t K, const int32_t* A, int64_t lda, const int32_t* B,
             int64_t ldb, int32_t* C, int64_t ldc, bool accumulate, int num_threads = 1);

}  // namespace fusectl::kernels::cpu
