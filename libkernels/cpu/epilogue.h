// The elementwise tail of a Conv or Gemm (bias, residual add, activation), applied by the GEMM
// to each output tile right after its last K block, while the tile is still in L1.
//
// Y = act(acc + bias + residual). Conv applies its bias this way already; FusedConv and
// FusedGemm (domain "fusectl") add the residual and the activation, so a fusion pass only has to
// rewrite the graph. Bias is per output row (Conv: one value per output channel) or per output
// column (Gemm: one per N).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace fusectl::kernels::cpu {

enum class Activation : uint8_t {
  None,
  Relu,
  Clip,         // clamp to [alpha, beta]
  LeakyRelu,    // x < 0 ? alpha * x : x
  Sigmoid,
  HardSigmoid,  // max(0, min(1, alpha * x + beta))
  HardSwish,    // x * max(0, min(1, x / 6 + 0.5))
  Silu,         // x * sigmoid(x)
  Gelu,         // exact: 0.5 * x * (1 + erf(x / sqrt(2)))
  Tanh,
};

// The ONNX op name of an activation ("Relu", "Clip"...); nullopt for an unknown name.
inline std::optional<Activation> parseActivation(std::string_view name) {
  if (name.empty() || name == "None" || name == "Identity") return Activation::None;
  if (name == "Relu") return Activation::Relu;
  if (name == "Clip") return Activation::Clip;
  if (name == "LeakyRelu") return Activation::LeakyRelu;
  if (name == "Sigmoid") return Activation::Sigmoid;
  if (name == "HardSigmoid") return Activation::HardSigmoid;
  if (name == "HardSwish") return Activation::HardSwish;
  if (name == "Silu") return Activation::Silu;
  if (name == "Gelu") return Activation::Gelu;
  if (name == "Tanh") return Activation::Tanh;
  return std::nullopt;
}

struct Epilogue {
  const float* bias = nullptr;  // indexed by global row (bias_per_row) or global column
  bool bias_per_row = false;
  const float* residual = nullptr;  // same global layout as the output, leading dim ld_residual
  int64_t ld_residual = 0;
  Activation activation = Activation::None;
  float alpha = 0.f;  // Clip min, LeakyRelu / HardSigmoid alpha
  float beta = 0.f;   // Clip max, HardSigmoid beta

  bool empty() const { return !bias && !residual && activation == Activation::None; }

  // Sets the ONNX default parameters of `act`, then overrides them with `params` in the order
  // the op's attributes take them (Clip: min, max; LeakyRelu: alpha; HardSigmoid: alpha, beta).
  void setActivation(Activation act, const float* params, size_t num_params) {
    activation = act;
    switch (act) {
      case Activation::Clip:
        alpha = -std::numeric_limits<float>::infinity();
        beta = std::numeric_limits<float>::infinity();
        break;
      case Activation::LeakyRelu: alpha = 0.01f; break;
      case Activation::HardSigmoid: alpha = 0.2f; beta = 0.5f; break;
      default: break;
    }
    if (num_params > 0) alpha = params[0];
    if (num_params > 1) beta = params[1];
  }

  // Applies to the rows x cols tile whose element (0,0) is global (row0, col0); `c` points at
  // that element, with leading dimension ldc.
  void apply(float* c, int64_t ldc, int64_t row0, int64_t col0, int64_t rows,
             int64_t cols) const {
    for (int64_t i = 0; i < rows; ++i) {
      float* __restrict y = c + i * ldc;
      if (bias) {
        if (bias_per_row) {
          const float b = bias[row0 + i];
          for (int64_t j = 0; j < cols; ++j) y[j] += b;
        } else {
          const float* __restrict b = bias + col0;
          for (int64_t j = 0; j < cols; ++j) y[j] += b[j];
        }
      }
      if (residual) {
        const float* __restrict z = residual + (row0 + i) * ld_residual + col0;
        for (int64_t j = 0; j < cols; ++j) y[j] += z[j];
      }
      activate(y, cols);
    }
  }

  // Applies the activation alone to n contiguous values.
  void activate(float* __restrict y, int64_t n) const {
    switch (activation) {
      case Activation::None: break;
      case Activation::Relu:
        for (int64_t j = 0; j < n; ++j) y[j] = y[j] > 0.f ? y[j] : 0.f;
        break;
      case Activation::Clip: {
        const float lo = alpha, hi = beta;
        for (int64_t j = 0; j < n; ++j) y[j] = std::min(std::max(y[j], lo), hi);
        break;
      }
      case Activation::LeakyRelu: {
        const float a = alpha;
        for (int64_t j = 0; j < n; ++j) y[j] = y[j] < 0.f ? a * y[j] : y[j];
        break;
      }
      case Activation::Sigmoid:
        for (int64_t j = 0; j < n; ++j) y[j] = sigmoid(y[j]);
        break;
      case Activation::HardSigmoid: {
        const float a = alpha, b = beta;
        for (int64_t j = 0; j < n; ++j) y[j] = std::min(std::max(a * y[j] + b, 0.f), 1.f);
        break;
      }
      case Activation::HardSwish:
        for (int64_t j = 0; j < n; ++j) {
          y[j] = y[j] * std::min(std::max(y[j] * (1.f / 6.f) + 0.5f, 0.f), 1.f);
        }
        break;
      case Activation::Silu:
        for (int64_t j = 0; j < n; ++j) y[j] = y[j] * sigmoid(y[j]);
        break;
      case Activation::Gelu:
        for (int64_t j = 0; j < n; ++j) {
          y[j] = 0.5f * y[j] * (1.f + std::erf(y[j] * 0.70710678118654752f));
        }
        break;
      case Activation::Tanh:
        for (int64_t j = 0; j < n; ++j) y[j] = std::tanh(y[j]);
        break;
    }
  }

 private:
  static float sigmoid(float x) {
    // Split by sign so exp never overflows.
    if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.f + e);
  }
};

}  // namespace fusectl::kernels::cpu
