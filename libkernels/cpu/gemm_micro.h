// The float GEMM behind Conv, ConvTranspose, Gemm and MatMul: packed, cache-blocked, with a
// register-tiled micro-kernel that applies the epilogue to the tile before storing it.
//
// Blocking follows BLIS: for each NC-wide column block and KC-deep slice, B is packed into
// NR-wide panels; for each MC-tall row block A is packed into MR-tall panels; the micro-kernel
// streams both panels over k with the whole MR x NR tile in registers. Edge tiles use masked
// loads and stores (the packs are zero-padded), so no tile goes through a scratch copy.
// Micro-kernels, chosen at run time: AVX-512 (8x32), AVX2+FMA (6x16), portable vector
// extensions (6x16, SSE2 at -O2). Threads split the output into static column (or row) slices
// in whole panels, so every element sums in the same order whatever the thread count.
//
// Weights that stay the same across runs are packed once (packGemmA/packGemmB) and passed as
// GemmParams::packed_a / packed_b; gemm_packed_state.h keeps them in a kernel's state.
#pragma once

#include <cstdint>
#include <memory>

#include "fusectl/kernels/epilogue.h"

namespace fusectl::kernels::cpu {

struct GemmKernelSpec;  // gemm_kernels.h

// One GEMM operand packed into a micro-kernel's panel format: for each KC-deep slice of the
// shared dimension, the panels of the whole matrix side by side (MR-tall panels of A, or NR-wide
// panels of B), zero-padded to a whole panel. Only valid for the kernel it was packed for; gemm()
// falls back to the source operand when another kernel is in use (tests force kernels).
struct PackedMatrix {
  const GemmKernelSpec* kernel = nullptr;
  int64_t outer = 0;   // rows of A (M) or columns of B (N)
  int64_t depth = 0;   // K
  int64_t padded = 0;  // outer rounded up to whole panels
  std::unique_ptr<float[], void (*)(float*)> data{nullptr, nullptr};
  // The operand it was packed from (element strides as in GemmParams), kept for the fallback.
  const float* source = nullptr;
  int64_t rs = 0, cs = 0;
};

// A GEMM operand that is not a strided matrix in memory but is packed straight from its source:
// Conv's implicit im2col (conv_implicit.h) reads each tap from the input planes, so no im2col
// matrix is written and read again. packPanels writes depth [pc, pc + kc) x outer [j0, j0 + n)
// (columns of B, or rows of A) as `width`-wide panels (NR for B, MR for A), k-major inside a
// panel (`width` floats per k), past n zero: the layout packB and packA make from a matrix.
struct GemmPanelSource {
  virtual ~GemmPanelSource() = default;
  virtual void packPanels(int64_t pc, int64_t kc, int64_t j0, int64_t n, int64_t width,
                          float* out) const = 0;
};

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
  // Prepacked operands (packGemmA/B of exactly this A or B); when set, A or B is not read
  // unless the packed one was made for another micro-kernel. A packed A carries no alpha:
  // alpha must be 1 with packed_a.
  const PackedMatrix* packed_a = nullptr;
  const PackedMatrix* packed_b = nullptr;
  // The prepacked A the caller multiplies next (the same one for its next chunk of columns, or
  // another: Winograd's next product): while this product's last block of packed_a runs, the
  // first block of this one is fetched into L2, as each block fetches the block after it. A
  // hint; the result does not depend on it.
  const PackedMatrix* next_packed_a = nullptr;
  // When set (and the operand is not prepacked), A or B is packed from here; the pointer and
  // strides of that operand are not read. A sourced A carries no alpha: alpha must be 1.
  const GemmPanelSource* a_source = nullptr;
  const GemmPanelSource* b_source = nullptr;
  // A row-major A (a_cs 1) may be read in place instead of packed, where N is at most 4 of
  // the kernel's column panels and its tile can (the AVX-512 one): each row's k a broadcast
  // from memory. Set by the pointwise convolution with a channels-last input, whose pixel rows
  // would otherwise be transposed into panels (a register transpose per 8 rows and 16 k) for
  // a product over 16-128 output channels. The sums are the same, in the same order.
  bool a_in_place = false;
};

// Row-major convenience: A is M x K (K x M when trans_a) with leading dimension lda, etc.
GemmParams gemmParams(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool trans_a,
                      const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc);

// Packs A (M x K, strides rs/cs) or B (K x N) for the micro-kernel in use now.
PackedMatrix packGemmA(int64_t M, int64_t K, const float* A, int64_t rs, int64_t cs);
PackedMatrix packGemmB(int64_t K, int64_t N, const float* B, int64_t rs, int64_t cs);
// Whether `packed` was made for the micro-kernel gemm() uses now.
bool packedForCurrentKernel(const PackedMatrix& packed);

// Whether gemm() over depth K, with an epilogue residual, reads each residual element before it
// writes the same element of C, so that the residual may be C itself (written in place): the
// micro-kernel in use adds the residual in registers before its one store, and K is one slice
// of its blocking, so no partial sum is stored into C first. Every row and column split across
// threads keeps that, since a thread writes only the C it reads the residual of.
bool gemmResidualMayAliasOutput(int64_t K);

// Runs p on up to num_threads threads (small problems run on the calling thread).
void gemm(const GemmParams& p, int num_threads = 1);

// Forces a micro-kernel by name ("avx512", "avx2", "portable"; "" or "auto" restores the
// run-time choice). Returns false, changing nothing, for a name this CPU cannot run.
bool gemmForceKernel(const char* name);
// Forces the portable micro-kernel (true) or restores the run-time choice (false).
void gemmForcePortableKernel(bool force);
// "avx512", "avx2-fma" or "portable": the micro-kernel gemm() uses now.
const char* gemmKernelName();

// Integer GEMM for the quantized ops: C(int32) = A(int32, M x K, row-major, lda) *
// B(int32, K x N, row-major, ldb) (+ C when accumulate). Operands arrive with zero points already
// subtracted, so every product is exact in int32.
void gemmS32(int64_t M, int64_t N, int64_t K, const int32_t* A, int64_t lda, const int32_t* B,
             int64_t ldb, int32_t* C, int64_t ldc, bool accumulate, int num_threads = 1);

}  // namespace fusectl::kernels::cpu
