// Vectorised float32 loops for the memory-bound kernels (elementwise, softmax, norms, pools).
//
// Each loop exists three times, compiled for AVX-512, AVX2+FMA and the portable baseline
// (vec_impl.h under a different `#pragma GCC target` each time); the widest one the CPU
// supports is chosen on first use. FUSECTL_ISA=portable|avx2|avx512 in the environment, or
// forceIsa() in tests, picks a narrower one. Transcendentals are polynomial approximations
// within a few ulp of the correctly rounded float result (tests/test_kernels_vectorized.cpp
// holds them to that against double precision); every ISA runs the same formulas, so the
// results differ between ISAs only in the rounding of FMA contraction.
#pragma once

#include <cstdint>
#include <optional>

namespace fusectl::kernels::vec {

enum class Isa { Portable, Avx2, Avx512 };

Isa bestSupportedIsa();
Isa activeIsa();
// Tests: run every later call on `isa` (ignored when the CPU lacks it); nullopt restores the
// automatic choice.
void forceIsa(std::optional<Isa> isa);
const char* isaName(Isa isa);

// Whether this CPU executes a 512-bit FMA as two halves on 256-bit units: AMD's Zen 4 (family
// 0x19 with AVX-512F). Its FMA peak per cycle is then that of an AVX2 core, half a full-width
// AVX-512 core's, so against the same memory it is the FMAs that bound a product sooner, and a
// choice that trades multiplications for bytes read (winogradTileFor) goes the other way. Read
// from CPUID, so it is the same on every run of one machine. FUSECTL_FMA_HALF_WIDTH=0|1 in the
// environment overrides it (to measure one machine as the other).
bool fma512HalfWidth();
// Tests: answer `half` from now on (either machine's choices run on any CPU: they are choices
// between correct algorithms); nullopt restores the CPU's answer.
void forceFma512HalfWidth(std::optional<bool> half);

enum class Unary {
  Relu,
  LeakyRelu,    // alpha
  Sigmoid,
  Tanh,
  Exp,
  Erf,
  Gelu,         // exact: 0.5 x (1 + erf(x / sqrt 2))
  GeluTanh,     // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Elu,          // alpha
  Selu,         // alpha, beta = gamma
  HardSigmoid,  // alpha, beta
  HardSwish,
  Softsign,
  // Exactly rounded (or exact) in IEEE arithmetic: the same bits as the scalar loops.
  Sqrt,
  Reciprocal,
  Neg,
  Abs,
};

// y[i] = op(x[i]) for i < n; y may equal x.
void unary(Unary op, const float* x, float* y, int64_t n, float alpha = 0, float beta = 0);

enum class Binary { Add, Sub, Mul, Div, Max, Min, PRelu };
// y[i] = op(a[i], b[i]) for i < n, a null `a` (or `b`) standing for the scalar `av` (`bv`) in
// every lane; y may equal a or b. What the scalar kernels compute, bit for bit: Max and Min give
// NaN when either operand is NaN, PRelu is a < 0 ? a * b : a.
void binary(Binary op, const float* a, float av, const float* b, float bv, float* y, int64_t n);

// y[i] = x[i] * scale + shift (inference BatchNormalization, InstanceNormalization).
void affine(const float* x, float* y, int64_t n, float scale, float shift);
// y[i] = (x[i] - centre) * scale + shift: a norm's output, centred before it is scaled, so that a
// mean large beside the spread does not cancel (GroupNorm).
void centredAffine(const float* x, float* y, int64_t n, float centre, float scale, float shift);
// A norm over rows that lie apart, a row's stretch of columns per call (ChannelLayerNorm):
// acc[i] += (x[i] - mean[i])^2, and y[i] = (x[i] - mean[i]) * rstd[i] * scale + shift.
void addSquaredDeviations(const float* x, const float* mean, float* acc, int64_t n);
void normalizeColumns(const float* x, const float* mean, const float* rstd, float* y, int64_t n,
                      float scale, float shift);

// Sum of x[0..n) in double, accumulated in float lanes over short blocks.
double sum(const float* x, int64_t n);
// Sum of (x[i] - mean)^2 in double, as sum().
double sumSquaredDeviations(const float* x, int64_t n, float mean);
// Largest element (-inf for n == 0); NaN elements are skipped.
float max(const float* x, int64_t n);

// One row of Softmax (log_softmax false) or LogSoftmax, numerically stable (the row's maximum
// is subtracted before exp). y may equal x.
void softmaxRow(const float* x, float* y, int64_t n, bool log_softmax);
// row[i] = softmax over i < n of (row[i] + add[i]), in place; add[0] for every i when
// add_scalar, nothing added when add is null (Attention's scores and mask). Three passes over
// the row, where adding the mask and softmaxRow take five. softmaxRow's rules hold: a NaN, a
// +inf or a row of only -inf makes every output NaN.
void softmaxRowAdd(float* row, int64_t n, const float* add, bool add_scalar);
// softmaxRowAdd over `count` rows `ld` floats apart: row r takes its first
// n_r = clamp(first_n + r * n_step, 0, ld) elements (n_step 1: a causal block's rows), adds
// add + r * add_ld (or add's first element, or nothing, as above), and has elements [n_r, ld)
// set to 0; a row with n_r = 0 is all zeros. The same results as softmaxRowAdd row by row, in
// less time for short rows (Attention's whole score blocks).
void softmaxRowsAdd(float* rows, int64_t count, int64_t ld, int64_t first_n, int64_t n_step,
                    const float* add, int64_t add_ld, bool add_scalar);
// One key tile of a flash-style (online) softmax: with x[i] = row[i] + add[i] (add as above),
// *running_max becomes max(*running_max, max_i x[i]) (NaN elements skipped, as max()), row[i]
// becomes exp(x[i] - *running_max), and their sum is returned. The caller rescales what it
// accumulated under the old maximum by exp(old - new). Two passes over the row.
float onlineSoftmaxRow(float* row, int64_t n, const float* add, bool add_scalar,
                       float* running_max);

// Columns of a [rows][cols] block, softmax along rows (the non-innermost axis case).
// colmax and colsum are scratch of `cols` floats.
void softmaxColumns(const float* x, float* y, int64_t rows, int64_t cols, bool log_softmax,
                    float* colmax, float* colsum);

// y = (x - mean) * inv_std * scale (+ bias when not null) over one row; returns mean and
// inv_std = 1 / sqrt(var + eps) (population variance, two passes over the row).
void layerNormRow(const float* x, float* y, int64_t n, const float* scale, const float* bias,
                  float eps, float* mean, float* inv_std);
// y = x * sigmoid(alpha * x), times u[i] where u is not null (SwiGLU: alpha 1; QuickGelu:
// 1.702): the bits of unary(Sigmoid) on the rounded alpha * x, then (x * s) * u.
void swishRow(const float* x, const float* u, float* y, int64_t n, float alpha);
// SkipLayerNorm's row: s = x + skip, then layerNormRow(s) into y (s may be y; a null skip
// normalises x itself, and s is not written). The same bits as the add and layerNormRow apart.
void skipLayerNormRow(const float* x, const float* skip, float* s, float* y, int64_t n,
                      const float* scale, const float* bias, float eps);
// RMSNorm's row (SkipRMSNorm's with a skip, as above): y = s * inv * scale, inv = 1 / sqrt(mean
// of s^2 + eps), the mean of squares summed as sumSquaredDeviations(s, n, 0) sums it.
void rmsNormRow(const float* x, const float* skip, float* s, float* y, int64_t n,
                const float* scale, float eps);

// out[i] = max (or sum) over the k rows of rows[r][i], i < n.
void maxRows(const float* const* rows, int k, float* out, int64_t n);
void sumRows(const float* const* rows, int k, float* out, int64_t n);
// out[o] = max over j < k of in[o * stride + j * dilation], o < n: the horizontal pass of a
// 2-D pool over a row already padded (with -inf or 0) on both sides.
void windowMax(const float* in, int64_t stride, int64_t k, int64_t dilation, float* out,
               int64_t n);
// The same window's sum times (row_scale * col_scale[o]): AveragePool's horizontal pass and
// its division by the counted taps in one pass over the row.
void windowMean(const float* in, int64_t stride, int64_t k, int64_t dilation,
                const float* col_scale, float row_scale, float* out, int64_t n);
// out[i] = in[i * stride], i < n: a strided convolution's im2col row.
void gatherStrided(const float* in, int64_t stride, float* out, int64_t n);

// RotaryEmbedding's rotate_half of one row of 2 * half values: y[k] = x[k] c[k] - x[k + half] s[k],
// y[k + half] = x[k + half] c[k + half] + x[k] s[k + half], each product rounded before the sum
// (no FMA), as the exported Mul and Add nodes compute it. y must not overlap x.
void rotateHalfRow(const float* x, float* y, int64_t half, const float* c, const float* s);

}  // namespace fusectl::kernels::vec
