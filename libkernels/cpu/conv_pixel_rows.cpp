// Convolutions on small output planes as pixels x channels products (see conv_pixel_rows.h).
#include "conv_pixel_rows.h"

#include <algorithm>
#include <string_view>

#include "gemm_micro.h"
#include "gemm_vector_epilogue.h"

namespace fusectl::kernels::cpu {
namespace {

void storeChannelRowsPortable(const float* yt, int64_t rows, int64_t cols, int64_t ldt,
                              float* y, int64_t ldy, const Epilogue& ep, int64_t col0) {
  for (int64_t j = 0; j < cols; ++j) {
    float* out = y + j * ldy;
    for (int64_t i = 0; i < rows; ++i) out[i] = yt[i * ldt + j];
    if (!ep.empty()) ep.apply(out, ldy, j, col0, 1, rows);
  }
}

#ifdef FUSECTL_AVX512
// 16 pixels x 16 channels at a time: the block of yt loaded as 16 pixel rows and transposed in
// registers (transpose16x16) into 16 channel vectors, each getting the epilogue and one store.
// It was a gather down each channel's column of yt: about 20 cycles a vector here, against
// about 5 for the transposed loads (its share of MobileNetV2's run: 2.2%).
// One pixel whose channels lie side by side (a 1x1 plane: a squeeze-and-excitation block's
// convolutions) is one row of yt stored as it is, 16 channels a vector. The transposing loop
// below would run the epilogue on one lane a vector, 16 times the work; with the Sigmoid gate of
// EfficientNet-B0's 48 -> 1152 convolution that was three quarters of the node's 10 us.
FUSECTL_AVX512 void storeChannelRowsAvx512(const float* yt, int64_t rows, int64_t cols,
                                           int64_t ldt, float* y, int64_t ldy, const Epilogue& ep,
                                           int64_t col0) {
  if (rows == 1 && ldy == 1 && (!ep.residual || ep.ld_residual == 1)) {
    const float* z = ep.residual ? ep.residual + col0 : nullptr;
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      const __mmask16 m = firstLanes(cols - j0);
      storeWithEpilogue512(y + j0, m, _mm512_maskz_loadu_ps(m, yt + j0), ep.bias != nullptr,
                           ep.bias ? _mm512_maskz_loadu_ps(m, ep.bias + j0) : _mm512_setzero_ps(),
                           z ? z + j0 : nullptr, ep.activation, ep.alpha, ep.beta);
    }
    return;
  }
  for (int64_t i = 0; i < rows; i += 16) {
    const __mmask16 m = firstLanes(rows - i);
    const int64_t pixels = std::min<int64_t>(16, rows - i);
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      __m512 channel[16];
      loadTransposed(channel, yt + i * ldt, ldt, pixels, j0, cols);
      const int64_t n = std::min<int64_t>(16, cols - j0);
      for (int64_t c = 0; c < n; ++c) {
        const int64_t j = j0 + c;
        storeWithEpilogue512(y + j * ldy + i, m, channel[c], ep.bias != nullptr,
                             _mm512_set1_ps(ep.bias ? ep.bias[j] : 0.f),
                             ep.residual ? ep.residual + j * ep.ld_residual + col0 + i : nullptr,
                             ep.activation, ep.alpha, ep.beta);
      }
    }
  }
}
#endif

}  // namespace

bool pixelRowsPay(int64_t P, int64_t M, int64_t K) {
  // Columns the channels-by-pixels product computes: whole 32-wide tiles, and a last one of 16
  // when at most 16 pixels are left.
  const int64_t rest = P % 32;
  const int64_t computed = P / 32 * 32 + (rest == 0 ? 0 : rest <= 16 ? 16 : 32);
  // Under 16 pixels both products compute one 16-wide tile's worth, and what decides is how the
  // weights come in. Over 1 MiB they stream from memory in a model, and the channels-by-pixels
  // product, whose weights are its A operand, asks each next block into L2 while one runs:
  // Inception-v3's 1x1 convolutions onto 3x3 (96x96 input, 1.6-3.7 MB of weights) 0.21-0.48 ->
  // 0.15-0.32 ms that way, ConvNeXt's 384 -> 768 downsampling 0.63-0.65 -> 0.44-0.48; RegNetX's
  // 400 -> 400 onto 3x3 (0.64 MB, which stays in L2) is faster as pixels x channels (0.038
  // against 0.042). bench/README.md, "Small planes whose weights stream from memory".
  constexpr int64_t kStreamedWeightBytes = int64_t{1} << 20;
  if (P < 16 && M * K * static_cast<int64_t>(sizeof(float)) > kStreamedWeightBytes) return false;
  return M >= 64 && P <= 256 && P < computed * 0.85;
}

bool storeChannelRowsResidualMayAliasOutput() {
#ifdef FUSECTL_AVX512
  return std::string_view(gemmKernelName()) == "avx512";
#else
  return false;
#endif
}

void storeChannelRows(const float* yt, int64_t rows, int64_t cols, int64_t ldt, float* y,
                      int64_t ldy, const Epilogue& ep, int64_t col0) {
#ifdef FUSECTL_AVX512
  // With the AVX-512 GEMM kernel, so that tests forcing another kernel run the portable path.
  if (std::string_view(gemmKernelName()) == "avx512") {
    storeChannelRowsAvx512(yt, rows, cols, ldt, y, ldy, ep, col0);
    return;
  }
#endif
  storeChannelRowsPortable(yt, rows, cols, ldt, y, ldy, ep, col0);
}

}  // namespace fusectl::kernels::cpu
